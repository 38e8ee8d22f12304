package localnodes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strings"
)

// A cloud gives a machine a public address its interface does not have
// (AWS, GCE: 1:1 NAT at the edge). With a PublicPool the backer does the
// same on the host, in the nat table: traffic to a machine's public
// address is sent to its private one (DNAT, for the host's own traffic
// too), and a machine's traffic to another machine's public address leaves
// with its own public address as the source (SNAT), so a machine sees its
// peers' public addresses and knows only its private one. Software that
// binds the public address fails here as it fails in such a cloud.

// natChains are the backer's two nat chains: DNAT rules (from PREROUTING
// and OUTPUT) and SNAT rules (from POSTROUTING), named after the root so a
// later backer of the same root finds what a crashed one left.
func natChains(root string) (dnat, snat string) {
	sum := sha256.Sum256([]byte(root))
	h := strings.ToUpper(hex.EncodeToString(sum[:]))[:8]
	return "CLOUDSIM-D-" + h, "CLOUDSIM-S-" + h
}

// table runs iptables on one table of the network namespace at netns
// ("": the host's).
type table func(args ...string) error

func tableIn(ctx context.Context, netns, name string) table {
	return func(args ...string) error {
		args = append([]string{"-w", "-t", name}, args...)
		if netns == "" {
			return sh(ctx, "iptables", args...)
		}
		return sh(ctx, "nsenter", append([]string{"--net=" + netns, "--", "iptables"}, args...)...)
	}
}

// ensureChain creates chain unless it exists and jumps to it from each
// builtin chain of from unless a jump is there (first: at the top).
func (t table) ensureChain(chain string, first bool, from ...string) error {
	if t("-S", chain) != nil {
		if err := t("-N", chain); err != nil {
			return err
		}
	}
	for _, builtin := range from {
		add := []string{"-A", builtin}
		if first {
			add = []string{"-I", builtin, "1"}
		}
		if err := t.ensure(append(add, "-j", chain)...); err != nil {
			return err
		}
	}
	return nil
}

// ensure adds the rule "-A|-I chain [n] spec…" unless it is there.
func (t table) ensure(add ...string) error {
	chain, spec := add[1], add[2:]
	if add[0] == "-I" {
		spec = add[3:]
	}
	if t(append([]string{"-C", chain}, spec...)...) == nil {
		return nil
	}
	return t(add...)
}

// removeChain deletes every jump to chain from each builtin chain of
// from, then the chain, whatever a crashed backer left.
func (t table) removeChain(chain string, from ...string) error {
	for _, builtin := range from {
		for t("-C", builtin, "-j", chain) == nil {
			if err := t("-D", builtin, "-j", chain); err != nil {
				return err
			}
		}
	}
	if t("-S", chain) != nil {
		return nil
	}
	if err := t("-F", chain); err != nil {
		return err
	}
	return t("-X", chain)
}

// ensureNAT creates the chains and their jumps once, in the namespace at
// netns ("": the host's).
func (b *Backer) ensureNAT(ctx context.Context, netns string) error {
	dnat, snat := natChains(b.Root)
	nat := tableIn(ctx, netns, "nat")
	if err := nat.ensureChain(dnat, false, "PREROUTING", "OUTPUT"); err != nil {
		return err
	}
	return nat.ensureChain(snat, false, "POSTROUTING")
}

func natRules(root, public, private string) [][]string {
	dnat, snat := natChains(root)
	return [][]string{
		{dnat, "-d", public + "/32", "-j", "DNAT", "--to-destination", private},
		{snat, "-s", private + "/32", "-m", "conntrack", "--ctstate", "DNAT", "-j", "SNAT", "--to-source", public},
	}
}

// mapping is a machine's public address.
type mapping struct{ public, private, region string }

// mapPublic gives a machine's private address a public one: on the host,
// or with Apart in its region's router, which the host routes it to.
func (b *Backer) mapPublic(ctx context.Context, region, id, private string) (string, error) {
	pool, err := netip.ParsePrefix(b.PublicPool)
	if err != nil || !pool.Addr().Is4() {
		return "", fmt.Errorf("cloudsim: public pool %q is not an IPv4 CIDR", b.PublicPool)
	}
	b.mu.Lock()
	if b.public == nil {
		b.public = map[string]mapping{}
	}
	used := map[string]bool{}
	for _, m := range b.public {
		used[m.public] = true
	}
	// The first free address after the last one handed out, wrapping
	// around: a freed address goes to someone else only once the others
	// did, as a cloud's ephemeral addresses do.
	first := pool.Masked().Addr().Next()
	start := first
	if b.lastPublic.IsValid() && pool.Contains(b.lastPublic.Next()) {
		start = b.lastPublic.Next()
	}
	var public string
	for a := start; ; {
		if !used[a.String()] {
			public = a.String()
			b.lastPublic = a
			break
		}
		if a = a.Next(); !pool.Contains(a) {
			a = first
		}
		if a == start {
			break
		}
	}
	if public == "" {
		b.mu.Unlock()
		return "", fmt.Errorf("cloudsim: public pool %s is exhausted", b.PublicPool)
	}
	m := mapping{public, private, region}
	b.public[id] = m
	b.mu.Unlock()
	// One change of a nat table at a time: concurrent iptables-nft
	// commands race on the table's generation.
	b.natMu.Lock()
	defer b.natMu.Unlock()
	netns, rules := b.natOf(m)
	if err := b.ensureNAT(ctx, netns); err != nil {
		return "", err
	}
	for _, r := range rules {
		if err := tableIn(ctx, netns, "nat")(append([]string{"-A"}, r...)...); err != nil {
			return "", err
		}
	}
	if b.Apart {
		_, router := uplinkAddrs(b.Root, region)
		if err := sh(ctx, "ip", "route", "replace", public+"/32", "via", router.String(), "dev", uplinkName(b.Root, region)); err != nil {
			return "", err
		}
	}
	return public, nil
}

// natOf is where a mapping's rules live and what they are.
func (b *Backer) natOf(m mapping) (netns string, rules [][]string) {
	if b.Apart {
		return routerPath(b.Root, m.region), routerNATRules(b.Root, m.public, m.private)
	}
	return "", natRules(b.Root, m.public, m.private)
}

// unmapPublic drops a machine's public address.
func (b *Backer) unmapPublic(ctx context.Context, id string) error {
	b.mu.Lock()
	m, ok := b.public[id]
	delete(b.public, id)
	b.mu.Unlock()
	if !ok {
		return nil
	}
	b.natMu.Lock()
	defer b.natMu.Unlock()
	netns, rules := b.natOf(m)
	for _, r := range rules {
		if err := tableIn(ctx, netns, "nat")(append([]string{"-D"}, r...)...); err != nil {
			return err
		}
	}
	if b.Apart {
		return sh(ctx, "ip", "route", "del", m.public+"/32", "dev", uplinkName(b.Root, m.region))
	}
	return nil
}

// publicOf is the public address mapped to a machine, if any.
func (b *Backer) publicOf(id string) (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	m, ok := b.public[id]
	return m.public, ok
}

// privateOf translates public addresses among sources to the private
// ones their traffic comes from before the SNAT (the firewall filters
// forwarded traffic before the source is rewritten). Without Apart only:
// with it the router filters sources as they arrive.
func (b *Backer) privateOf(addr string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, m := range b.public {
		if m.public == addr {
			return m.private
		}
	}
	return addr
}

// removeNAT deletes the chains and their jumps, whatever a crashed backer
// of the same root left.
func removeNAT(ctx context.Context, root string) error {
	dnat, snat := natChains(root)
	nat := tableIn(ctx, "", "nat")
	if err := nat.removeChain(dnat, "PREROUTING", "OUTPUT"); err != nil {
		return err
	}
	return nat.removeChain(snat, "POSTROUTING")
}
