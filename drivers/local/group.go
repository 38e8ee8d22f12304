package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/cloudtransit/transit/provider"
)

// EnsureGroup creates the cluster's chain in the district or replaces its
// rules atomically, creating the district bridge if it is missing: it
// accepts established traffic, all traffic from each source and UDP
// spec.MeshPort from anywhere (the node mesh, when not 0), and drops the
// rest. The group it returns is read back from the chain.
func (d *driver) EnsureGroup(ctx context.Context, spec provider.GroupSpec) (provider.Group, error) {
	if spec.District != "" && spec.District != d.district {
		return provider.Group{}, fmt.Errorf("ensure group %s: district %q is not this driver's district %q", spec.Name, spec.District, d.district)
	}
	if !validName(spec.Cluster) {
		return provider.Group{}, fmt.Errorf("ensure group %s: invalid cluster id %q", spec.Name, spec.Cluster)
	}
	sources, err := normalizeSources(spec.Sources)
	if err != nil {
		return provider.Group{}, fmt.Errorf("ensure group %s: %w", spec.Name, err)
	}
	if spec.MeshPort < 0 || spec.MeshPort > 65535 {
		return provider.Group{}, fmt.Errorf("ensure group %s: the mesh's port %d is not a UDP port (1-65535)", spec.Name, spec.MeshPort)
	}
	chain := chainName(d.root, spec.Cluster, d.district)

	unlock, err := lockRoot(ctx, d.root)
	if err != nil {
		return provider.Group{}, err
	}
	defer unlock()
	groups, err := readGroups(d.root, d.district)
	if err != nil {
		return provider.Group{}, err
	}
	var rec *groupRecord
	for _, g := range groups {
		if g.Cluster != spec.Cluster {
			return provider.Group{}, fmt.Errorf("ensure group %s: local district %q already serves cluster %q (group %s); a local district holds one cluster",
				spec.Name, d.district, g.Cluster, g.Name)
		}
		if g.Chain == chain {
			rec = g
		}
	}
	if rec == nil {
		rec = &groupRecord{Chain: chain, Cluster: spec.Cluster, District: d.district, CreatedAt: d.clock.Now().UTC()}
	}
	rec.Name = spec.Name
	rec.Tags = maps.Clone(spec.Tags)
	rec.Sources = sources
	rec.MeshPort = spec.MeshPort
	// The record first, so a crash leaves something to list and delete.
	if err := writeJSON(groupPath(d.root, d.district, chain), rec); err != nil {
		return provider.Group{}, fmt.Errorf("ensure group %s: %w", spec.Name, err)
	}
	if err := d.ensureBridge(ctx); err != nil {
		return provider.Group{}, fmt.Errorf("ensure group %s: %w", spec.Name, err)
	}
	if _, err := run(ctx, groupRestore(chain, sources, spec.MeshPort), "iptables-restore", "-w", "--noflush"); err != nil {
		return provider.Group{}, fmt.Errorf("ensure group %s: %w", spec.Name, err)
	}
	if err := ensureJump(ctx, "FORWARD", "-o", d.bridge, chain); err != nil {
		return provider.Group{}, fmt.Errorf("ensure group %s: %w", spec.Name, err)
	}
	dump, err := iptablesDump(ctx)
	if err != nil {
		return provider.Group{}, fmt.Errorf("ensure group %s: %w", spec.Name, err)
	}
	if !chainExists(chain, dump) {
		return provider.Group{}, fmt.Errorf("ensure group %s: chain %s vanished", spec.Name, chain)
	}
	return provider.Group{ProviderID: chain, Name: rec.Name, Tags: maps.Clone(rec.Tags),
		Sources: parseChainSources(chain, dump), MeshPort: parseChainMesh(chain, dump)}, nil
}

// normalizeSources checks the addresses (IPv4 addresses or subnets), sorts
// them and drops duplicates.
func normalizeSources(in []string) ([]string, error) {
	out := make([]string, 0, len(in))
	for _, s := range in {
		if p, err := netip.ParsePrefix(s); err == nil {
			if !p.Addr().Is4() {
				return nil, fmt.Errorf("source %q: the local provider only filters IPv4", s)
			}
			p = p.Masked()
			if p.Bits() == 32 {
				out = append(out, p.Addr().String())
			} else {
				out = append(out, p.String())
			}
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("source %q is not an IP address or subnet", s)
		}
		if !a.Unmap().Is4() {
			return nil, fmt.Errorf("source %q: the local provider only filters IPv4", s)
		}
		out = append(out, a.Unmap().String())
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// iptablesDump is `iptables -S` of the filter table. (Asking for one
// missing chain fails with a misleading message on the nf_tables backend,
// so the driver always reads the whole table.)
func iptablesDump(ctx context.Context) (string, error) {
	return run(ctx, "", "iptables", "-w", "-S")
}

func chainExists(chain, dump string) bool {
	for line := range strings.Lines(dump) {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "-N" && f[1] == chain {
			return true
		}
	}
	return false
}

// hasRule says the iptables -S dump holds rule ("-A CHAIN ...") as is.
func hasRule(dump, rule string) bool {
	for line := range strings.Lines(dump) {
		if strings.TrimSpace(line) == rule {
			return true
		}
	}
	return false
}

// forwardJump and inputJump are the rules that send a district's traffic
// through a group's chain and through its input chain.
func forwardJump(bridge, chain string) string { return "-A FORWARD -o " + bridge + " -j " + chain }
func inputJump(bridge, chain string) string   { return "-A INPUT -i " + bridge + " -j " + chain }

// DeleteGroup removes the chain, its FORWARD jumps and the record. Like a
// cloud's security group, a group machines still use cannot be deleted.
func (d *driver) DeleteGroup(ctx context.Context, g provider.Group) error {
	unlock, err := lockRoot(ctx, d.root)
	if err != nil {
		return err
	}
	defer unlock()
	chain := g.ProviderID
	if !validChain(chain) {
		chain = ""
		groups, err := readGroups(d.root, d.district)
		if err != nil {
			return err
		}
		for _, r := range groups {
			if r.Name == g.Name && g.Name != "" {
				chain = r.Chain
			}
		}
		if chain == "" {
			return nil
		}
	}
	nodes, err := d.readNodes()
	if err != nil {
		return fmt.Errorf("delete group %s: %w", g.Name, err)
	}
	var users []string
	for _, n := range nodes {
		if n.Group == chain {
			users = append(users, n.NodeID+" ("+n.ProviderID+", "+n.State+")")
		}
	}
	if len(users) > 0 {
		return fmt.Errorf("delete group %s: machines still use it: %s; delete them first (a terminating one is gone in a few seconds)",
			g.Name, strings.Join(users, ", "))
	}
	if err := deleteChain(ctx, chain); err != nil {
		return fmt.Errorf("delete group %s: %w", g.Name, err)
	}
	if err := os.Remove(groupPath(d.root, d.district, chain)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete group %s: %w", g.Name, err)
	}
	if _, err := run(ctx, "", "bash", "-c", gcScript(d.root, d.district, d.cgroupParents())); err != nil {
		return fmt.Errorf("delete group %s: %w", g.Name, err)
	}
	return nil
}

// deleteChain removes every FORWARD rule jumping to chain, then the chain.
// A missing chain is not an error.
func deleteChain(ctx context.Context, chain string) error {
	dump, err := iptablesDump(ctx)
	if err != nil {
		return err
	}
	for line := range strings.Lines(dump) {
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "-A" || f[1] != "FORWARD" || !slices.Contains(f, chain) {
			continue
		}
		args := append([]string{"-w", "-D", "FORWARD"}, f[2:]...)
		if _, err := run(ctx, "", "iptables", args...); err != nil {
			return err
		}
	}
	if !chainExists(chain, dump) {
		return nil
	}
	if _, err := run(ctx, "", "iptables", "-w", "-F", chain); err != nil {
		return err
	}
	_, err = run(ctx, "", "iptables", "-w", "-X", chain)
	return err
}

// ensureBridge creates the district bridge with the subnet's first address
// (the nodes' gateway) if it is missing, and turns on IPv4 forwarding so
// districts reach each other through the host. A subnet that overlaps a
// host route (a host network, a VPN, another root's or district's bridge)
// is refused, and so is a bridge that has another address (the district's
// local_subnet changed under it). Call it under the root lock.
func (d *driver) ensureBridge(ctx context.Context) error {
	routes, err := run(ctx, "", "ip", "-4", "-o", "route", "show", "table", "all")
	if err != nil {
		return err
	}
	if r := overlappingRoute(routes, d.subnet, d.bridge); r != "" {
		return fmt.Errorf("district %s: local_subnet %s overlaps the host route %q; "+
			"pick a subnet no host network, VPN or other local district uses", d.district, d.subnet, r)
	}
	prefix := netip.PrefixFrom(d.gateway, d.subnet.Bits())
	ifc, err := net.InterfaceByName(d.bridge)
	if err != nil {
		if _, err := run(ctx, "", "ip", "link", "add", "name", d.bridge, "type", "bridge"); err != nil {
			if ifc, err = net.InterfaceByName(d.bridge); err != nil {
				return fmt.Errorf("create bridge: %w", err)
			}
		}
	}
	// No IPv6 on the bridge: the host filter is IPv4 (iptables), and a
	// node must not reach the host's services over the bridge's link-local
	// address either. Without IPv6 on the bridge the host's IPv6 stack
	// drops whatever nodes send to it.
	if err := disableIPv6(d.bridge); err != nil {
		return fmt.Errorf("bridge %s: %w", d.bridge, err)
	}
	has := false
	if ifc != nil {
		addrs, err := ifc.Addrs()
		if err != nil {
			return fmt.Errorf("bridge %s: %w", d.bridge, err)
		}
		for _, a := range addrs {
			p, err := netip.ParsePrefix(a.String())
			if err != nil || !p.Addr().Is4() {
				continue
			}
			if p != prefix {
				return fmt.Errorf("district %s: its bridge %s has the address %s, not %s: local_subnet changed while the district had nodes or groups; "+
					"set it back, or remove the district's nodes first", d.district, d.bridge, p, prefix)
			}
			has = true
		}
	}
	if !has {
		if _, err := run(ctx, "", "ip", "addr", "add", prefix.String(), "dev", d.bridge); err != nil {
			return fmt.Errorf("bridge address: %w", err)
		}
	}
	if ifc == nil || ifc.Flags&net.FlagUp == 0 {
		if _, err := run(ctx, "", "ip", "link", "set", d.bridge, "up"); err != nil {
			return fmt.Errorf("bridge up: %w", err)
		}
	}
	if err := d.ensureHostFilter(ctx); err != nil {
		return err
	}
	if err := turnOn("/proc/sys/net/ipv4/ip_forward"); err != nil {
		return fmt.Errorf("enable IPv4 forwarding: %w", err)
	}
	return nil
}

// hostLimits are the host kernel's limits that every local node draws on
// at once, raised to these floors when lower: each Kubernetes node's
// kubelet, containerd, kube-proxy and mesh take inotify instances from one
// per-user pool (Debian's default of 128 runs out at about a dozen
// nodes: kubelets then fail "too many open files" and never get Ready).
var hostLimits = []struct {
	path  string
	floor int
}{
	{"/proc/sys/fs/inotify/max_user_instances", 8192},
	{"/proc/sys/fs/inotify/max_user_watches", 524288},
}

// raiseTo sets a numeric sysctl file to floor if it holds less; it never
// lowers what the host chose.
func raiseTo(path string, floor int) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if v, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && v >= floor {
		return nil
	}
	return os.WriteFile(path, []byte(strconv.Itoa(floor)+"\n"), 0o644)
}

// turnOn sets a boolean sysctl file to 1 unless it is already.
func turnOn(path string) error {
	if b, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(b)) == "1" {
		return nil
	}
	return os.WriteFile(path, []byte("1\n"), 0o644)
}

// ensureHostFilter keeps nodes off the host itself: traffic from the
// bridge to the host goes through the district's input chain, which lets
// through only replies to the host's own connections (transit's SSH) and
// ICMP (path MTU discovery, errors, ping of the gateway). A node needs no
// service of the host's; traffic between nodes and districts is forwarded,
// not addressed to the host, and the group chains filter it.
func (d *driver) ensureHostFilter(ctx context.Context) error {
	chain := inputChainName(d.root, d.district)
	if _, err := run(ctx, hostFilterRestore(chain), "iptables-restore", "-w", "--noflush"); err != nil {
		return fmt.Errorf("host filter: %w", err)
	}
	if err := ensureJump(ctx, "INPUT", "-i", d.bridge, chain); err != nil {
		return fmt.Errorf("host filter: %w", err)
	}
	return nil
}

// ensureJump puts "-A builtin dir bridge -j chain" (forwardJump,
// inputJump) first in builtin unless it is there.
func ensureJump(ctx context.Context, builtin, dir, bridge, chain string) error {
	if _, err := run(ctx, "", "iptables", "-w", "-C", builtin, dir, bridge, "-j", chain); err == nil {
		return nil
	}
	_, err := run(ctx, "", "iptables", "-w", "-I", builtin, "1", dir, bridge, "-j", chain)
	return err
}

// disableIPv6 turns IPv6 off on an interface; a host without IPv6 has
// nothing to turn off.
func disableIPv6(ifname string) error {
	p := "/proc/sys/net/ipv6/conf/" + ifname + "/disable_ipv6"
	if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return turnOn(p)
}

// routeTypes are the route types `ip route` prints before the destination.
var routeTypes = []string{"unicast", "local", "broadcast", "multicast", "anycast", "unreachable", "blackhole", "prohibit", "throw", "nat"}

// overlappingRoute returns the first route of `ip -4 -o route show table
// all` output whose destination overlaps subnet and that is not on own
// (the district's bridge); "" if none. Default routes overlap everything
// and are not counted.
func overlappingRoute(out string, subnet netip.Prefix, own string) string {
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) > 0 && slices.Contains(routeTypes, f[0]) {
			f = f[1:]
		}
		if len(f) == 0 || f[0] == "default" {
			continue
		}
		dst, err := netip.ParsePrefix(f[0])
		if err != nil {
			a, aerr := netip.ParseAddr(f[0])
			if aerr != nil {
				continue
			}
			dst = netip.PrefixFrom(a, a.BitLen())
		}
		if i := slices.Index(f, "dev"); i >= 0 && i+1 < len(f) && f[i+1] == own {
			continue
		}
		if dst.Overlaps(subnet) {
			return strings.TrimSpace(line)
		}
	}
	return ""
}

func (d *driver) cgroupParents() []string { return cgroupParents(d.hierarchies) }

// cgroupParents are the transit/ cgroups of every hierarchy.
func cgroupParents(hs []hierarchy) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = h.Mount + "/transit"
	}
	return out
}

// listGroups returns the cluster's groups whose chain exists, with the
// sources and the mesh's port read back from the chain.
func (d *driver) listGroups(ctx context.Context, cluster string) ([]provider.Group, error) {
	recs, err := readGroups(d.root, d.district)
	if err != nil {
		return nil, err
	}
	var out []provider.Group
	var dump string
	for _, r := range recs {
		if r.Cluster != cluster {
			continue
		}
		if dump == "" {
			if dump, err = iptablesDump(ctx); err != nil {
				return nil, err
			}
		}
		if !chainExists(r.Chain, dump) {
			continue // e.g. after a reboot: EnsureGroup makes it again
		}
		srcs, mesh := parseChainSources(r.Chain, dump), parseChainMesh(r.Chain, dump)
		if !hasRule(dump, forwardJump(d.bridge, r.Chain)) || !hasRule(dump, inputJump(d.bridge, inputChainName(d.root, d.district))) {
			// A firewalld reload flushed FORWARD: the chain filters
			// nothing. Listed as allowing nothing (no source, no mesh
			// port), the loop updates the group, and EnsureGroup puts
			// the jump back.
			srcs, mesh = nil, 0
		}
		out = append(out, provider.Group{ProviderID: r.Chain, Name: r.Name, Tags: maps.Clone(r.Tags), Sources: srcs, MeshPort: mesh})
	}
	slices.SortFunc(out, func(a, b provider.Group) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
