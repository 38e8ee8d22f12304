package mesh

import (
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

// uapi is the WireGuard configuration (the cross-platform userspace API's
// "set" body) that turns a device with peers have into one with peers
// want: peers gone are removed, the others set in place, so a change
// never breaks the sessions of peers that stay.
func uapi(private Key, port int, have map[Key]bool, want []Peer) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "private_key=%s\nlisten_port=%d\n", private.hex(), port)
	keep := map[Key]bool{}
	for _, p := range want {
		k, err := ParseKey(p.PublicKey)
		if err != nil {
			return "", err
		}
		keep[k] = true
		fmt.Fprintf(&b, "public_key=%s\nendpoint=%s\npersistent_keepalive_interval=%d\nreplace_allowed_ips=true\n", k.hex(), p.Endpoint, int(keepalive.Seconds()))
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
func wgConfig(private Key, port int, have map[Key]bool, want []Peer) (wgtypes.Config, error) {
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
			PersistentKeepaliveInterval: new(keepalive),
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
