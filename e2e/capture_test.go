package e2e

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cloudtransit/transit/districts"
)

// flow is one kind of IPv4 packet a capture saw: protocol and the lower
// of its two ports (the service's, as a rule).
type flow struct {
	proto string // "tcp", "udp", or the protocol number
	port  uint16
}

// packet is one packet a capture kept: where it went and what it was, so
// that a check that fails names the packets, not only their flow.
type packet struct {
	at       time.Duration // since the capture started
	in       bool          // sent by the host into the region (else out of it)
	src, dst netip.AddrPort
	tcpFlags string // "SYN", "ACK|PSH", …; empty for other protocols
	length   int    // the IP packet's total length
}

func (p packet) String() string {
	dir := "out of the region"
	if p.in {
		dir = "into the region"
	}
	s := fmt.Sprintf("%s → %s, %d bytes, %s, at %s", p.src, p.dst, p.length, dir, p.at.Round(time.Millisecond))
	if p.tcpFlags != "" {
		s += ", " + p.tcpFlags
	}
	return s
}

// samplesPerFlow is how many packets of each flow a capture keeps.
const samplesPerFlow = 4

// traffic is what a capture saw: packets by flow, and the first few
// packets of each flow.
type traffic struct {
	count   map[flow]int
	samples map[flow][]packet
}

// capture counts the IPv4 packets crossing iface (an AF_PACKET socket
// on it) until stop is called, by flow, and keeps the first few of each
// flow.
func capture(tb testing.TB, iface string) (stop func() traffic) {
	tb.Helper()
	fd, err := listen(iface)
	if err != nil {
		tb.Fatalf("capture on %s: %v", iface, err)
	}
	var mu sync.Mutex
	seen := traffic{count: map[flow]int{}, samples: map[flow][]packet{}}
	began := time.Now()
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		buf := make([]byte, 65536)
		for {
			select {
			case <-done:
				return
			default:
			}
			n, from, err := unix.Recvfrom(fd, buf, 0)
			if err != nil {
				continue // the timeout: look at done again
			}
			f, p, ok := parsePacket(buf[:n])
			if !ok {
				continue
			}
			// On the host's end of the uplink, what the host sends goes
			// into the region.
			if ll, isLL := from.(*unix.SockaddrLinklayer); isLL {
				p.in = ll.Pkttype == unix.PACKET_OUTGOING
			}
			p.at = time.Since(began)
			mu.Lock()
			seen.count[f]++
			if len(seen.samples[f]) < samplesPerFlow {
				seen.samples[f] = append(seen.samples[f], p)
			}
			mu.Unlock()
		}
	}()
	var once sync.Once
	stop = func() traffic {
		once.Do(func() {
			close(done)
			<-ended
			unix.Close(fd)
		})
		mu.Lock()
		defer mu.Unlock()
		return seen
	}
	tb.Cleanup(func() { stop() })
	return stop
}

// listen opens a packet socket that receives iface's frames alone (every
// protocol), with a read timeout of 200 ms. Made for protocol 0 it
// receives nothing until bound to iface (packet(7)); made for ETH_P_ALL it
// would queue every interface's frames until then, which a capture read
// first (CI: another e2e group's VXLAN and node-port packets, "at 1ms",
// on an AWS region's uplink).
func listen(iface string) (int, error) {
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return -1, err
	}
	all := htons(unix.ETH_P_ALL)
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
	if err != nil {
		return -1, err
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: all, Ifindex: ifi.Index}); err != nil {
		unix.Close(fd)
		return -1, err
	}
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 200_000})
	return fd, nil
}

// parsePacket reads an Ethernet frame's IPv4 flow and its addresses,
// ports and TCP flags.
func parsePacket(frame []byte) (flow, packet, bool) {
	if len(frame) < 14+20 || binary.BigEndian.Uint16(frame[12:14]) != unix.ETH_P_IP {
		return flow{}, packet{}, false
	}
	ip := frame[14:]
	ihl := int(ip[0]&0x0f) * 4
	proto := ip[9]
	src, dst := netip.AddrFrom4([4]byte(ip[12:16])), netip.AddrFrom4([4]byte(ip[16:20]))
	p := packet{src: netip.AddrPortFrom(src, 0), dst: netip.AddrPortFrom(dst, 0), length: int(binary.BigEndian.Uint16(ip[2:4]))}
	f := flow{proto: fmt.Sprint(proto)}
	switch proto {
	case unix.IPPROTO_TCP:
		f.proto = "tcp"
	case unix.IPPROTO_UDP:
		f.proto = "udp"
	default:
		return f, p, true
	}
	if ihl < 20 || len(ip) < ihl+4 {
		return flow{}, packet{}, false
	}
	sport, dport := binary.BigEndian.Uint16(ip[ihl:]), binary.BigEndian.Uint16(ip[ihl+2:])
	p.src, p.dst = netip.AddrPortFrom(src, sport), netip.AddrPortFrom(dst, dport)
	if proto == unix.IPPROTO_TCP && len(ip) >= ihl+14 {
		p.tcpFlags = tcpFlags(ip[ihl+13])
	}
	f.port = min(sport, dport)
	return f, p, true
}

// tcpFlags names the flags of a TCP header's flags byte.
func tcpFlags(b byte) string {
	var names []string
	for i, name := range []string{"FIN", "SYN", "RST", "PSH", "ACK", "URG", "ECE", "CWR"} {
		if b&(1<<i) != 0 {
			names = append(names, name)
		}
	}
	return strings.Join(names, "|")
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func (f flow) String() string { return fmt.Sprintf("%s/%d", f.proto, f.port) }

// waitQuiet lets packets in flight arrive before a capture stops.
func waitQuiet() { time.Sleep(300 * time.Millisecond) }

// outsideMesh are the flows a capture between clouds saw besides
// WireGuard on meshPort, SSH (transit and the test reaching the nodes)
// and ICMP (errors about the tunnel's own packets carry no payload of
// the cluster's): one message for each, naming its first packets and
// the nodes whose addresses they carry.
func (tr traffic) outsideMesh(meshPort uint16, nodes []districts.Node) []string {
	var out []string
	for _, f := range slices.SortedFunc(func(yield func(flow) bool) {
		for f := range tr.count {
			if !yield(f) {
				return
			}
		}
	}, func(a, b flow) int { return strings.Compare(a.String(), b.String()) }) {
		if f == (flow{"udp", meshPort}) || f == (flow{"tcp", 22}) || f.proto == "1" {
			continue
		}
		var b strings.Builder
		fmt.Fprintf(&b, "%d packets of %s crossed between clouds outside the mesh; the first:", tr.count[f], f)
		for _, p := range tr.samples[f] {
			fmt.Fprintf(&b, "\n\t%s", p)
		}
		if names := addrNames(tr.samples[f], nodes); names != "" {
			fmt.Fprintf(&b, "\n\twhere %s", names)
		}
		out = append(out, b.String())
	}
	return out
}

// addrNames says which node holds each address the packets carry: "X is
// node n1's public address, …".
func addrNames(ps []packet, nodes []districts.Node) string {
	seen := map[netip.Addr]bool{}
	var names []string
	for _, p := range ps {
		for _, a := range []netip.Addr{p.src.Addr(), p.dst.Addr()} {
			if seen[a] {
				continue
			}
			seen[a] = true
			var holders []string
			for _, n := range nodes {
				for kind, s := range map[string]string{"public": n.PublicIP, "private": n.PrivateIP, "mesh": n.MeshIP} {
					if s == a.String() {
						holders = append(holders, fmt.Sprintf("node %s's (%s) %s address", n.ID, n.District, kind))
					}
				}
			}
			slices.Sort(holders)
			if len(holders) > 0 {
				names = append(names, a.String()+" is "+strings.Join(holders, " and "))
			}
		}
	}
	return strings.Join(names, "; ")
}
