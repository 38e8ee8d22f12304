package localnodes

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
)

// With Apart each emulated region is a network of its own, as a cloud's
// VPC, project network or tenant network is. Its bridge lives in a
// network namespace, the region's router ("cs-" and 8 hex digits), joined
// to the host — the internet — by a veth pair ("cu…" on the host,
// "uplink" in the router) on a /30 of 169.254.0.0/16. The router does the
// 1:1 NAT: a machine's public address is sent to its private one, and
// every packet a machine sends out of its network leaves with its public
// address. The host routes each public address to its router and forwards
// between routers only to public addresses. So machines reach each
// other's private addresses inside their region only, a private address
// of another region is unreachable (nothing leaves the host for it), and
// two regions may use one private subnet. Packets between routers cross
// the host, so the host must forward IPv4: a fresh machine boots with
// forwarding off, and the first router turns it on (as the local driver
// does for its districts).

const uplink = "uplink"

func rootHash(s string, n int) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:n]
}

// routerName is a region's network namespace, uplinkName its veth on the
// host.
func routerName(root, region string) string { return "cs-" + rootHash(root+"\x00"+region, 8) }
func uplinkName(root, region string) string { return "cu" + rootHash(root+"\x00"+region, 8) }
func routerPath(root, region string) string { return "/run/netns/" + routerName(root, region) }

// uplinkAddrs are the host's and the router's addresses on the uplink.
func uplinkAddrs(root, region string) (host, router netip.Addr) {
	sum := sha256.Sum256([]byte(root + "\x00" + region))
	i := uint32(binary.BigEndian.Uint16(sum[:2])%16383+1) * 4 // a /30, never 169.254.0.0/30
	base := netip.AddrFrom4([4]byte{169, 254, byte(i >> 8), byte(i)})
	return base.Next(), base.Next().Next()
}

// forwardChain is the host's filter chain that forwards from routers only
// to public addresses.
func forwardChain(root string) string { return "CLOUDSIM-F-" + strings.ToUpper(rootHash(root, 8)) }

func sh(ctx context.Context, name string, args ...string) error {
	return shIn(ctx, "", name, args...)
}

// shIn runs a command with stdin and keeps its output in the error.
func shIn(ctx context.Context, stdin, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// ensureRouter makes a region's router and uplink unless they exist, and
// returns the router's path.
func (b *Backer) ensureRouter(ctx context.Context, region string) (string, error) {
	ns, link, path := routerName(b.Root, region), uplinkName(b.Root, region), routerPath(b.Root, region)
	host, router := uplinkAddrs(b.Root, region)
	pool, err := netip.ParsePrefix(b.PublicPool)
	if err != nil || !pool.Addr().Is4() {
		return "", fmt.Errorf("cloudsim: networks apart need a public pool (an IPv4 CIDR), not %q", b.PublicPool)
	}
	if _, err := os.Stat(path); err != nil {
		if err := sh(ctx, "ip", "netns", "add", ns); err != nil {
			return "", err
		}
	}
	steps := [][]string{
		{"ip", "-n", ns, "link", "set", "lo", "up"},
		{"nsenter", "--net=" + path, "sysctl", "-qw", "net.ipv4.ip_forward=1"},
		{"sysctl", "-qw", "net.ipv4.ip_forward=1"},
	}
	if sh(ctx, "ip", "link", "show", link) != nil {
		steps = append(steps,
			[]string{"ip", "link", "add", link, "type", "veth", "peer", "name", uplink, "netns", ns},
			[]string{"ip", "addr", "add", host.String() + "/30", "dev", link},
			[]string{"ip", "link", "set", link, "up"},
			[]string{"ip", "-n", ns, "addr", "add", router.String() + "/30", "dev", uplink},
			[]string{"ip", "-n", ns, "link", "set", uplink, "up"},
			[]string{"ip", "-n", ns, "route", "replace", "default", "via", host.String()})
	}
	for _, s := range steps {
		if err := sh(ctx, s[0], s[1:]...); err != nil {
			return "", fmt.Errorf("cloudsim: region %s's network: %w", region, err)
		}
	}
	if err := b.ensureForward(ctx, link, pool); err != nil {
		return "", err
	}
	return path, nil
}

// ensureForward lets the host forward from and to a router's uplink only
// for public addresses.
func (b *Backer) ensureForward(ctx context.Context, link string, pool netip.Prefix) error {
	b.natMu.Lock()
	defer b.natMu.Unlock()
	chain := forwardChain(b.Root)
	filter := tableIn(ctx, "", "filter")
	if err := filter.ensureChain(chain, true, "FORWARD"); err != nil {
		return err
	}
	for _, r := range [][]string{
		{"-i", link, "-d", pool.String(), "-j", "ACCEPT"},
		{"-o", link, "-d", pool.String(), "-j", "ACCEPT"},
		{"-i", link, "-j", "DROP"},
		{"-o", link, "-j", "DROP"},
	} {
		if err := filter.ensure(append([]string{"-A", chain}, r...)...); err != nil {
			return err
		}
	}
	return nil
}

// routerNATRules are a machine's rules in its router's nat chains: those
// of the host's (its public address in, and out with it to a neighbour's
// public address) and out with it to the internet.
func routerNATRules(root, public, private string) [][]string {
	_, snat := natChains(root)
	return append(natRules(root, public, private), []string{snat, "-s", private + "/32", "-o", uplink, "-j", "SNAT", "--to-source", public})
}

// removeRouters deletes every region's router (and with it its uplink,
// routes and rules) and the host's forward chain.
func (b *Backer) removeRouters(ctx context.Context) error {
	for region := range b.Subnets {
		// The uplink first: a namespace's links go only once the kernel
		// cleans it up, after `ip netns del` returned.
		if link := uplinkName(b.Root, region); sh(ctx, "ip", "link", "show", link) == nil {
			if err := sh(ctx, "ip", "link", "del", link); err != nil {
				return err
			}
		}
		if _, err := os.Stat(routerPath(b.Root, region)); err == nil {
			if err := sh(ctx, "ip", "netns", "del", routerName(b.Root, region)); err != nil {
				return err
			}
		}
	}
	return tableIn(ctx, "", "filter").removeChain(forwardChain(b.Root), "FORWARD")
}

// Uplink is the host's end of a region's uplink (Backer.Apart), which
// everything between the region and the rest of the world crosses: where
// a capture sees what travels between clouds.
func Uplink(root, region string) string { return uplinkName(root, region) }
