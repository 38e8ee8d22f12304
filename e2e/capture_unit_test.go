package e2e

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cloudtransit/transit/districts"
)

// frame is an Ethernet frame of an IPv4 packet from src to dst with a
// TCP (flags) or UDP header.
func frame(proto byte, src, dst netip.AddrPort, flags byte) []byte {
	b := make([]byte, 14+20+20)
	binary.BigEndian.PutUint16(b[12:], 0x0800)
	ip := b[14:]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(len(ip)))
	ip[9] = proto
	s, d := src.Addr().As4(), dst.Addr().As4()
	copy(ip[12:], s[:])
	copy(ip[16:], d[:])
	binary.BigEndian.PutUint16(ip[20:], src.Port())
	binary.BigEndian.PutUint16(ip[22:], dst.Port())
	ip[20+13] = flags
	return b
}

// A failed check names each flow's packets and the nodes whose addresses
// they carry, so that a leak that happens once diagnoses itself.
func TestOutsideMeshNamesPackets(t *testing.T) {
	public, private := netip.MustParseAddr("100.127.0.5"), netip.MustParseAddr("10.246.1.6")
	leak := frame(6, netip.AddrPortFrom(public, 36803), netip.AddrPortFrom(netip.MustParseAddr("100.127.0.9"), 41000), 0x12)
	wg := frame(17, netip.AddrPortFrom(public, 51820), netip.AddrPortFrom(netip.MustParseAddr("100.127.0.9"), 51820), 0)
	ssh := frame(6, netip.AddrPortFrom(netip.MustParseAddr("169.254.78.173"), 50000), netip.AddrPortFrom(public, 22), 0x10)

	tr := traffic{count: map[flow]int{}, samples: map[flow][]packet{}}
	for _, fr := range [][]byte{leak, wg, wg, ssh, leak, leak, leak, leak, leak} {
		f, p, ok := parsePacket(fr)
		if !ok {
			t.Fatalf("parsePacket(%x) failed", fr)
		}
		tr.count[f]++
		if len(tr.samples[f]) < samplesPerFlow {
			tr.samples[f] = append(tr.samples[f], p)
		}
	}
	if got := tr.count[flow{"tcp", 36803}]; got != 6 {
		t.Errorf("%d packets of tcp/36803, want 6 (all: %v)", got, tr.count)
	}
	nodes := []districts.Node{{ID: "w1", District: "aws-us", PublicIP: public.String(), PrivateIP: private.String(), MeshIP: "10.213.0.3"}}
	msgs := tr.outsideMesh(districts.DefaultMeshPort, nodes)
	if len(msgs) != 1 {
		t.Fatalf("outsideMesh: %q, want one message (for tcp/36803)", msgs)
	}
	for _, want := range []string{
		"6 packets of tcp/36803 crossed between clouds outside the mesh",
		"100.127.0.5:36803 → 100.127.0.9:41000, 40 bytes, out of the region",
		"SYN|ACK",
		"100.127.0.5 is node w1's (aws-us) public address",
	} {
		if !strings.Contains(msgs[0], want) {
			t.Errorf("outsideMesh's message lacks %q:\n%s", want, msgs[0])
		}
	}
	if n := strings.Count(msgs[0], "→"); n != samplesPerFlow {
		t.Errorf("outsideMesh names %d packets, want the first %d:\n%s", n, samplesPerFlow, msgs[0])
	}
}

// A capture sees its own interface's packets alone, from its first read:
// while another interface carries a flood, a capture opened on a quiet
// one reads nothing. (CI: a capture on an AWS region's uplink read
// another e2e group's VXLAN and node-port packets, all "at 1ms".) In a
// network namespace of the test's own, on a thread that ends with it.
func TestCaptureSeesItsInterfaceAlone(t *testing.T) {
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the thread leaves with its namespace.
		runtime.LockOSThread()
		errc <- captureQuiet()
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// captureQuiet, in a new network namespace, floods its loopback with UDP
// and opens captures on a quiet veth, again and again.
func captureQuiet() error {
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("a network namespace of the test's own: %w", err)
	}
	for _, args := range [][]string{{"link", "set", "lo", "up"}, {"link", "add", "quiet0", "type", "veth", "peer", "name", "quiet1"}, {"link", "set", "quiet0", "up"}, {"link", "set", "quiet1", "up"}} {
		// Forked from this thread: in its namespace.
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	// Made on this thread, the sockets live in its namespace, whichever
	// thread then writes.
	sink, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer func() { _ = sink.Close() }()
	src, err := net.Dial("udp4", sink.LocalAddr().String())
	if err != nil {
		return err
	}
	defer func() { _ = src.Close() }()
	stop := make(chan struct{})
	flooded := make(chan struct{})
	go func() {
		defer close(flooded)
		for {
			select {
			case <-stop:
				return
			default:
				_, _ = src.Write([]byte("flood"))
			}
		}
	}()
	defer func() { close(stop); <-flooded }()
	buf := make([]byte, 65536)
	for i := range 100 {
		fd, err := listen("quiet0")
		if err != nil {
			return err
		}
		_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 1000})
		for {
			n, _, err := unix.Recvfrom(fd, buf, 0)
			if err != nil {
				break // nothing more queued
			}
			if f, p, ok := parsePacket(buf[:n]); ok {
				unix.Close(fd)
				return fmt.Errorf("capture %d on the quiet interface read a %s packet from elsewhere: %s", i, f, p)
			}
		}
		unix.Close(fd)
	}
	return nil
}
