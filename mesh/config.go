package mesh

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// DefaultPort is the mesh's UDP port.
const DefaultPort = 51820

// Peer is another node of the mesh.
type Peer struct {
	// Node names the peer (for messages).
	Node string `json:"node"`
	// PublicKey is its WireGuard public key, base64.
	PublicKey string `json:"public_key"`
	// Endpoint is where its packets go: an address it is reached at from
	// here (a public one across clouds, a private one beside it) and the
	// mesh port.
	Endpoint string `json:"endpoint"`
	// Address is its mesh address; AllowedIPs are further addresses
	// routed to it through the mesh (none for a node whose pods are
	// reached through an overlay over the mesh).
	Address    string   `json:"address"`
	AllowedIPs []string `json:"allowed_ips,omitempty"`
}

// PeersFile is where the peers are, beside the key.
const PeersFile = "peers.json"

// ReadPeers reads and checks a peers file.
func ReadPeers(path string) ([]Peer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParsePeers(data)
}

// ParsePeers checks peers: keys, endpoints and addresses well formed, no
// key or address twice.
func ParsePeers(data []byte) ([]Peer, error) {
	var ps []Peer
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ps); err != nil {
		return nil, fmt.Errorf("peers: %w", err)
	}
	keys, addrs := map[string]bool{}, map[string]bool{}
	for i, p := range ps {
		at := fmt.Sprintf("peers[%d] (%s)", i, p.Node)
		if _, err := ParseKey(p.PublicKey); err != nil {
			return nil, fmt.Errorf("%s: public_key: %w", at, err)
		}
		if _, err := netip.ParseAddrPort(p.Endpoint); err != nil {
			return nil, fmt.Errorf("%s: endpoint %q: want address:port", at, p.Endpoint)
		}
		a, err := netip.ParseAddr(p.Address)
		if err != nil {
			return nil, fmt.Errorf("%s: address %q: %w", at, p.Address, err)
		}
		for _, ip := range p.AllowedIPs {
			if _, err := netip.ParsePrefix(ip); err != nil {
				return nil, fmt.Errorf("%s: allowed_ips %q: %w", at, ip, err)
			}
		}
		if keys[p.PublicKey] || addrs[a.String()] {
			return nil, fmt.Errorf("%s: its key or address is another peer's too", at)
		}
		keys[p.PublicKey], addrs[a.String()] = true, true
	}
	return ps, nil
}

// keepalive is every peer's persistent keepalive: a node behind a
// cloud's NAT stays reachable between packets.
const keepalive = 25 * time.Second

// waits says whether a device with the public key own should give a
// new peer k no keepalive for now, so as not to start a handshake with
// it. A keepalive turned on sends one at once, and transit gives the
// nodes of a mesh their peers at the same moment: each would start a
// handshake with the other, and wireguard-go, taking the other's
// initiation and the response to its own in two workers at once, can
// keep a session that sends but never receives until it gives up on it
// 15 s later. So of two new peers the one whose key sorts first starts
// the handshake; the other waits for it (Run).
func waits(own, k Key) bool { return bytes.Compare(own[:], k[:]) > 0 }

// quietAtMost is how long a peer that waits (waits) goes without a
// keepalive if no handshake comes: the other node's first initiation
// may have come before this one had it as a peer (it tries again only
// after 5 s), or it may not have this one as a peer yet, or not reach it
// (a NAT before this one). Then this one starts. Not a whole number of
// seconds, so that it does not meet the other's look at its files (Run:
// every second) when it gets this one as a peer a second or two after.
const quietAtMost = 1500 * time.Millisecond

// quieten is which peers go without keepalive now, each until when at
// most: the new ones that wait (waits), and those of quiet that still
// wait (no handshake with them yet, and until not passed). A new key at
// a mesh address that had another among the peers before is a node that
// rotated its key: it runs the new one already and tried to handshake
// with it (this device did not know it yet; the next try is 5 s away),
// so it is never waited for.
func quieten(own Key, before, peers []Peer, handshakes map[Key]time.Time, quiet map[Key]time.Time, now time.Time) map[Key]time.Time {
	held := map[string]string{} // mesh address → its key before
	for _, p := range before {
		held[p.Address] = p.PublicKey
	}
	next := map[Key]time.Time{}
	for _, p := range peers {
		k, err := ParseKey(p.PublicKey)
		if err != nil {
			continue // ParsePeers refused it before
		}
		last, have := handshakes[k]
		until, was := quiet[k]
		switch {
		case !have && waits(own, k) && (held[p.Address] == "" || held[p.Address] == p.PublicKey):
			next[k] = now.Add(quietAtMost)
		case was && last.IsZero() && now.Before(until):
			next[k] = until
		}
	}
	return next
}

// keySet is m's keys.
func keySet[V any](m map[Key]V) map[Key]bool {
	s := make(map[Key]bool, len(m))
	for k := range m {
		s[k] = true
	}
	return s
}

// peerKeepalive is peer k's keepalive: none while it is quiet.
func peerKeepalive(quiet map[Key]bool, k Key) time.Duration {
	if quiet[k] {
		return 0
	}
	return keepalive
}

// uapi is the WireGuard configuration (the cross-platform userspace API's
// "set" body) that turns a device with peers have into one with peers
// want: peers gone are removed, the others set in place, so a change
// never breaks the sessions of peers that stay. The quiet ones get no
// keepalive.
func uapi(private Key, port int, have map[Key]bool, want []Peer, quiet map[Key]bool) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "private_key=%s\nlisten_port=%d\n", private.hex(), port)
	keep := map[Key]bool{}
	for _, p := range want {
		k, err := ParseKey(p.PublicKey)
		if err != nil {
			return "", err
		}
		keep[k] = true
		fmt.Fprintf(&b, "public_key=%s\nendpoint=%s\npersistent_keepalive_interval=%d\nreplace_allowed_ips=true\n", k.hex(), p.Endpoint, int(peerKeepalive(quiet, k).Seconds()))
		ips, err := allowedIPs(p)
		if err != nil {
			return "", err
		}
		for _, ip := range ips {
			fmt.Fprintf(&b, "allowed_ip=%s\n", ip)
		}
	}
	for _, k := range gone(have, keep) {
		fmt.Fprintf(&b, "public_key=%s\nremove=true\n", k.hex())
	}
	return b.String(), nil
}

// wgConfig is uapi's configuration as wgctrl takes it (for the kernel's
// device, over netlink): the same keys, endpoints, allowed IPs, keepalive
// and removals, in the same order. Like uapi it never sets ReplacePeers:
// the kernel, as wireguard-go, would remove every peer and add it again,
// and a peer that stays would lose its session and handshake anew. Nor
// UpdateOnly: a wanted peer missing from the device is added back.
func wgConfig(private Key, port int, have map[Key]bool, want []Peer, quiet map[Key]bool) (wgtypes.Config, error) {
	priv := wgtypes.Key(private)
	conf := wgtypes.Config{PrivateKey: &priv, ListenPort: &port}
	keep := map[Key]bool{}
	for _, p := range want {
		k, err := ParseKey(p.PublicKey)
		if err != nil {
			return wgtypes.Config{}, err
		}
		keep[k] = true
		ep, err := netip.ParseAddrPort(p.Endpoint)
		if err != nil {
			return wgtypes.Config{}, fmt.Errorf("peer %s: endpoint %q: %w", p.Node, p.Endpoint, err)
		}
		ips, err := allowedIPs(p)
		if err != nil {
			return wgtypes.Config{}, err
		}
		pc := wgtypes.PeerConfig{
			PublicKey:                   wgtypes.Key(k),
			Endpoint:                    net.UDPAddrFromAddrPort(ep),
			PersistentKeepaliveInterval: new(peerKeepalive(quiet, k)),
			ReplaceAllowedIPs:           true,
		}
		for _, ip := range ips {
			pc.AllowedIPs = append(pc.AllowedIPs, net.IPNet{IP: ip.Addr().AsSlice(), Mask: net.CIDRMask(ip.Bits(), ip.Addr().BitLen())})
		}
		conf.Peers = append(conf.Peers, pc)
	}
	for _, k := range gone(have, keep) {
		conf.Peers = append(conf.Peers, wgtypes.PeerConfig{PublicKey: wgtypes.Key(k), Remove: true})
	}
	return conf, nil
}

// allowedIPs are what the device routes to p: its mesh address alone
// (/32 or /128), then its further allowed IPs.
func allowedIPs(p Peer) ([]netip.Prefix, error) {
	a, err := netip.ParseAddr(p.Address)
	if err != nil {
		return nil, fmt.Errorf("peer %s: address %q: %w", p.Node, p.Address, err)
	}
	ips := []netip.Prefix{netip.PrefixFrom(a, a.BitLen())}
	for _, s := range p.AllowedIPs {
		ip, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("peer %s: allowed_ips %q: %w", p.Node, s, err)
		}
		ips = append(ips, ip)
	}
	return ips, nil
}

// gone are the keys of have not in keep, in a stable order.
func gone(have, keep map[Key]bool) []Key {
	return slices.SortedFunc(func(yield func(Key) bool) {
		for k := range have {
			if !keep[k] && !yield(k) {
				return
			}
		}
	}, func(a, b Key) int { return strings.Compare(a.hex(), b.hex()) })
}
