package localnodes

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/cloudtransit/transit/cloudsim"
	"github.com/cloudtransit/transit/drivers/drivertest"
	"github.com/cloudtransit/transit/netns"
)

// TestIngressRestore: the router's chain lets in replies, the host and
// each IPv4 rule (every protocol; tcp and udp to a port or a range, or
// every port; icmp), drops the rest, and its jump is put first in
// FORWARD (moved there when it is already in). IPv6 rules are skipped; a
// rule without a source, with ports out of order or of another protocol
// is refused.
func TestIngressRestore(t *testing.T) {
	t.Parallel()
	any4 := netip.MustParsePrefix("0.0.0.0/0")
	rules := []cloudsim.Rule{
		{Source: netip.MustParsePrefix("192.0.2.1/32")},
		{Source: any4, Protocol: "udp", From: 51820, To: 51820},
		{Source: netip.MustParsePrefix("10.1.2.3/8"), Protocol: "tcp", From: 30000, To: 32767},
		{Source: any4, Protocol: "tcp"},
		{Source: any4, Protocol: "icmp"},
		{Source: netip.MustParsePrefix("::/0"), Protocol: "tcp", From: 22, To: 22},
	}
	operator := netip.MustParseAddr("169.254.8.1")
	body := `*filter
:CLOUDSIM-I-X - [0:0]
-F CLOUDSIM-I-X
-A CLOUDSIM-I-X -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A CLOUDSIM-I-X -s 169.254.8.1/32 -j ACCEPT
-A CLOUDSIM-I-X -s 192.0.2.1/32 -j ACCEPT
-A CLOUDSIM-I-X -s 0.0.0.0/0 -p udp -m udp --dport 51820:51820 -j ACCEPT
-A CLOUDSIM-I-X -s 10.0.0.0/8 -p tcp -m tcp --dport 30000:32767 -j ACCEPT
-A CLOUDSIM-I-X -s 0.0.0.0/0 -p tcp -j ACCEPT
-A CLOUDSIM-I-X -s 0.0.0.0/0 -p icmp -j ACCEPT
-A CLOUDSIM-I-X -j DROP
`
	for _, c := range []struct {
		jumped bool
		want   string
	}{
		{false, body + "-I FORWARD 1 -i uplink -j CLOUDSIM-I-X\nCOMMIT\n"},
		{true, body + "-D FORWARD -i uplink -j CLOUDSIM-I-X\n-I FORWARD 1 -i uplink -j CLOUDSIM-I-X\nCOMMIT\n"},
	} {
		got, err := ingressRestore("CLOUDSIM-I-X", operator, rules, c.jumped)
		if err != nil {
			t.Fatal(err)
		}
		if diff := gocmp.Diff(c.want, got); diff != "" {
			t.Errorf("jumped %t (-want +got):\n%s", c.jumped, diff)
		}
	}
	for _, bad := range []cloudsim.Rule{
		{Protocol: "tcp", From: 22, To: 22},
		{Source: any4, Protocol: "tcp", From: 23, To: 22},
		{Source: any4, Protocol: "udp", From: 1, To: 65536},
		{Source: any4, Protocol: "sctp"},
	} {
		if got, err := ingressRestore("CLOUDSIM-I-X", operator, []cloudsim.Rule{bad}, false); err == nil {
			t.Errorf("rule %v: no error, got\n%s", bad, got)
		}
	}
}

// TestIngressRules: with Apart a region's router lets in from outside
// what its rules let in, and replies, and the host, and nothing else, as
// a cloud's security group does. Region A lets in UDP 51820 from
// anywhere, SSH from a range (not region B's), the API port from region
// B's machine (its public address: the source as it arrives) and the
// node ports from anywhere; region B lets in everything. From B's
// machine to A's public address: the mesh port answers and another UDP
// port does not; the API port and a node port answer; a port with no rule
// and SSH do not, though something listens there. A's connections out
// get their replies. The host's SSH gets in before any rule and after.
// Once the node ports' rule goes, a new connection to one is not let in,
// and one made before it went goes on.
func TestIngressRules(t *testing.T) {
	if inFreshHost(t) {
		return
	}
	const regionA, regionB = "aws:eu-south-2", "gce:europe-west12"
	b := ForTest(t, testRoot, map[string]string{regionA: "10.245.7.0/24", regionB: "10.245.8.0/24"})
	b.PublicPool, b.Apart = testPublic, true
	ctx := t.Context()
	key, keyFile := drivertest.NewKeyFile(t)
	start := func(region, name string) cloudsim.Machine {
		t.Helper()
		m, err := b.Start(ctx, region, name, key)
		if err != nil {
			t.Fatalf("start %s in %s: %v", name, region, err)
		}
		return m
	}
	ma, mb := start(regionA, "ingress-a"), start(regionB, "ingress-b")
	sshGetsIn := func(when string) {
		t.Helper()
		if out, err := drivertest.SSHRun(t, ma.Address, keyFile, ma.HostKeys, "hostname"); err != nil || strings.TrimSpace(out) != "ingress-a" {
			t.Fatalf("the host's SSH to %s %s: %v %q", ma.Address, when, err, out)
		}
	}
	sshGetsIn("before any rule")

	anywhere := netip.MustParsePrefix("0.0.0.0/0")
	nodePorts := cloudsim.Rule{Source: anywhere, Protocol: "tcp", From: 30000, To: 32767}
	rulesA := []cloudsim.Rule{
		{Source: anywhere, Protocol: "udp", From: 51820, To: 51820},
		{Source: netip.MustParsePrefix("192.0.2.0/24"), Protocol: "tcp", From: 22, To: 22},
		{Source: netip.PrefixFrom(netip.MustParseAddr(mb.Address), 32), Protocol: "tcp", From: 6443, To: 6443},
		nodePorts,
	}
	if err := b.Allow(ctx, regionB, []cloudsim.Rule{{Source: anywhere}}); err != nil {
		t.Fatal(err)
	}
	if err := b.Allow(ctx, regionA, rulesA); err != nil {
		t.Fatal(err)
	}

	var e echoes
	t.Cleanup(e.close)
	for _, port := range []int{6443, 31000, 8080} {
		e.tcp(t, ma, port)
	}
	for _, port := range []int{51820, 51821} {
		e.udp(t, ma, port)
	}
	e.tcp(t, mb, 7000)
	e.udp(t, mb, 7001)

	const yes, no = 3 * time.Second, time.Second // how long a probe waits for an answer
	for _, c := range []struct {
		what      string
		from      cloudsim.Machine
		to        string
		network   string
		port, src int
		want      bool
	}{
		{"the mesh port", mb, ma.Address, "udp", 51820, 0, true},
		{"a UDP port with no rule", mb, ma.Address, "udp", 51821, 0, false},
		{"the API port from its one source", mb, ma.Address, "tcp", 6443, 0, true},
		{"a node port", mb, ma.Address, "tcp", 31000, 0, true},
		{"a TCP port with no rule", mb, ma.Address, "tcp", 8080, 0, false},
		{"SSH from outside its range", mb, ma.Address, "tcp", 22, 0, false},
		// Replies to A come from B's public address to a port of A that
		// no rule lets in: only as replies.
		{"replies to A's TCP connection out", ma, mb.Address, "tcp", 7000, 40000, true},
		{"replies to A's UDP out", ma, mb.Address, "udp", 7001, 40001, true},
	} {
		wait := map[bool]time.Duration{true: yes, false: no}[c.want]
		if got := probe(t, c.from, c.network, c.to, c.port, c.src, wait); got != c.want {
			t.Errorf("%s (%s %s → %s:%d): answered %t, want %t", c.what, c.network, c.from.Address, c.to, c.port, got, c.want)
		}
	}
	sshGetsIn("with rules that do not let it in")

	held := dialFrom(t, mb, "tcp", ma.Address, 31000, 0, yes)
	if held == nil {
		t.Fatalf("a node port does not answer before its rule goes")
	}
	defer held.Close()
	if !echoed(held, yes) {
		t.Fatalf("a node port connection made before the rule goes does not answer")
	}
	if err := b.Allow(ctx, regionA, rulesA[:3]); err != nil {
		t.Fatal(err)
	}
	if probe(t, mb, "tcp", ma.Address, 31000, 0, no) {
		t.Errorf("a node port still lets new connections in once its rule went")
	}
	if !echoed(held, yes) {
		t.Errorf("a connection made before the node ports' rule went is cut")
	}
	if !probe(t, mb, "tcp", ma.Address, 6443, 0, yes) {
		t.Errorf("the API port is closed once another rule went")
	}
	sshGetsIn("after the rules changed")
}

// machineNetwork is a machine's network namespace (drivers/local names
// it after the machine).
func machineNetwork(m cloudsim.Machine) string { return "/run/netns/transit-" + m.ID }

// echoes are echo servers in machines' network namespaces, and the
// connections they serve, until close.
type echoes struct {
	mu      sync.Mutex
	closers []io.Closer
}

func (e *echoes) add(c io.Closer) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.closers = append(e.closers, c)
}

func (e *echoes) close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, c := range e.closers {
		_ = c.Close()
	}
	e.closers = nil
}

// tcp serves TCP echo on port in m's network.
func (e *echoes) tcp(t *testing.T, m cloudsim.Machine, port int) {
	t.Helper()
	var l net.Listener
	if err := netns.Do(machineNetwork(m), func() (err error) {
		l, err = net.Listen("tcp4", fmt.Sprintf(":%d", port))
		return err
	}); err != nil {
		t.Fatalf("listen on tcp %d in %s: %v", port, m.ID, err)
	}
	e.add(l)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			e.add(c)
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
}

// udp serves UDP echo on port in m's network.
func (e *echoes) udp(t *testing.T, m cloudsim.Machine, port int) {
	t.Helper()
	var pc net.PacketConn
	if err := netns.Do(machineNetwork(m), func() (err error) {
		pc, err = net.ListenPacket("udp4", fmt.Sprintf(":%d", port))
		return err
	}); err != nil {
		t.Fatalf("listen on udp %d in %s: %v", port, m.ID, err)
	}
	e.add(pc)
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo(buf[:n], from)
		}
	}()
}

// dialFrom connects from machine m (from its port src; 0: any) to
// addr:port, waiting at most wait for a TCP connection; nil if none.
func dialFrom(t *testing.T, m cloudsim.Machine, network, addr string, port, src int, wait time.Duration) net.Conn {
	t.Helper()
	var c net.Conn
	err := netns.Do(machineNetwork(m), func() (err error) {
		d := net.Dialer{Timeout: wait}
		if src != 0 {
			if network == "udp" {
				d.LocalAddr = &net.UDPAddr{Port: src}
			} else {
				d.LocalAddr = &net.TCPAddr{Port: src}
			}
		}
		c, err = d.Dial(network+"4", net.JoinHostPort(addr, fmt.Sprint(port)))
		return err
	})
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return nil
	}
	if err != nil {
		t.Fatalf("%s from %s to %s:%d: %v", network, m.ID, addr, port, err)
	}
	return c
}

// echoed says whether what c sends comes back within wait.
func echoed(c net.Conn, wait time.Duration) bool {
	if err := c.SetDeadline(time.Now().Add(wait)); err != nil {
		return false
	}
	if _, err := c.Write([]byte("ping")); err != nil {
		return false
	}
	buf := make([]byte, 4)
	_, err := io.ReadFull(c, buf)
	return err == nil && string(buf) == "ping"
}

// probe says whether addr:port answers from machine m within wait: a TCP
// connection is made (what listens there need not echo: sshd), a UDP
// echo server echoes.
func probe(t *testing.T, m cloudsim.Machine, network, addr string, port, src int, wait time.Duration) bool {
	t.Helper()
	c := dialFrom(t, m, network, addr, port, src, wait)
	if c == nil {
		return false
	}
	defer c.Close()
	return network == "tcp" || echoed(c, wait)
}
