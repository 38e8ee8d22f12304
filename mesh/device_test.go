package mesh_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/cloudtransit/transit/cmdtest"
	"github.com/cloudtransit/transit/mesh"
	"github.com/cloudtransit/transit/netns"
)

// node is a network namespace running transit-mesh up.
type node struct {
	ns, addr, mesh, iface, dir, pub string
	up                              *exec.Cmd
	out                             syncBuffer
}

// syncBuffer is what a command prints, read while it runs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestMain(m *testing.M) { os.Exit(cmdtest.Main(m, "transit-mesh")) }

// inNetns runs fn in the network namespace ns: the sockets it opens are
// that namespace's.
func inNetns(t testing.TB, ns string, fn func()) {
	t.Helper()
	if err := netns.Do("/run/netns/"+ns, func() error { fn(); return nil }); err != nil {
		t.Fatal(err)
	}
}

func sh(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// newNetns is a network namespace, deleted (with its links) when the
// test ends.
func newNetns(tb testing.TB, name string) {
	tb.Helper()
	sh(tb, "ip", "netns", "add", name)
	tb.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
}

func suffix() string { return fmt.Sprintf("%04x", os.Getpid()%0x10000) }

// kernelHasWireGuard says whether this kernel makes a WireGuard link
// (tried in a namespace of its own, deleted after).
var kernelHasWireGuard = sync.OnceValue(func() bool {
	ns := "tm-probe-" + suffix()
	if exec.Command("ip", "netns", "add", ns).Run() != nil {
		return false
	}
	defer func() { _ = exec.Command("ip", "netns", "del", ns).Run() }()
	return exec.Command("ip", "-n", ns, "link", "add", "twprobe", "type", "wireguard").Run() == nil
})

// pair is two namespaces joined by a link (10.77.0.1 and .2), each
// running transit-mesh up with upArgs (mesh addresses 10.98.0.1 and .2;
// devices twa<pid> and twb<pid>, as their UAPI sockets share
// /var/run/wireguard), no peers yet.
type pair struct {
	tb      testing.TB
	bin     string
	a, b    *node
	printed bytes.Buffer // what transit-mesh key printed
}

func needRoot(tb testing.TB) {
	tb.Helper()
	if testing.Short() {
		tb.Skip("integration: network namespaces and devices")
	}
	if os.Geteuid() != 0 {
		tb.Skip("needs root (network namespaces, /dev/net/tun)")
	}
}

func startPair(tb testing.TB, upArgs ...string) *pair {
	tb.Helper()
	needRoot(tb)
	bin := cmdtest.Build(tb, "transit-mesh")
	sfx := suffix()
	p := &pair{tb: tb, bin: bin,
		a: &node{ns: "tm-a-" + sfx, addr: "10.77.0.1", mesh: "10.98.0.1", iface: "twa" + sfx},
		b: &node{ns: "tm-b-" + sfx, addr: "10.77.0.2", mesh: "10.98.0.2", iface: "twb" + sfx}}
	for _, n := range []*node{p.a, p.b} {
		newNetns(tb, n.ns)
		n.dir = tb.TempDir()
	}
	sh(tb, "ip", "link", "add", "tma"+sfx, "netns", p.a.ns, "type", "veth", "peer", "name", "tmb"+sfx, "netns", p.b.ns)
	for i, n := range []*node{p.a, p.b} {
		link := []string{"tma", "tmb"}[i] + sfx
		sh(tb, "ip", "-n", n.ns, "addr", "add", n.addr+"/24", "dev", link)
		sh(tb, "ip", "-n", n.ns, "link", "set", link, "up")
		sh(tb, "ip", "-n", n.ns, "link", "set", "lo", "up")
	}
	for _, n := range []*node{p.a, p.b} {
		out, err := p.in(n, "key", "-dir", n.dir).Output()
		if err != nil {
			tb.Fatalf("key in %s: %v", n.ns, err)
		}
		p.printed.Write(out)
		n.pub = strings.TrimSpace(string(out))
		n.up = p.in(n, append([]string{"up", "-dir", n.dir, "-interface", n.iface, "-address", n.mesh + "/24"}, upArgs...)...)
		n.up.Stdout, n.up.Stderr = &n.out, &n.out
		tb.Cleanup(func() { _ = os.Remove("/var/run/wireguard/" + n.iface + ".sock") }) // after the stop below
		if err := n.up.Start(); err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() {
			_ = n.up.Process.Signal(syscall.SIGTERM)
			_ = n.up.Wait()
		})
	}
	return p
}

// in is transit-mesh run in n's namespace.
func (p *pair) in(n *node, args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"--net=/run/netns/" + n.ns, "--", p.bin}, args...)...)
}

// peer is n as a peer.
func (n *node) peer() mesh.Peer {
	return mesh.Peer{Node: n.ns, PublicKey: n.pub, Endpoint: n.addr + ":51820", Address: n.mesh}
}

// setPeers makes peers n's peers.
func (p *pair) setPeers(n *node, peers ...*node) {
	p.tb.Helper()
	ps := []mesh.Peer{}
	for _, q := range peers {
		ps = append(ps, q.peer())
	}
	data, _ := json.Marshal(ps)
	cmd := p.in(n, "peers", "-dir", n.dir)
	cmd.Stdin = bytes.NewReader(data)
	if out, err := cmd.CombinedOutput(); err != nil {
		p.tb.Fatalf("peers in %s: %v\n%s", n.ns, err, out)
	}
}

// serveHello makes n answer "hello from <ns>" on TCP port 7000 of every
// address (its mesh one too, once its device is up).
func serveHello(t testing.TB, n *node) {
	t.Helper()
	var l net.Listener
	var lerr error
	inNetns(t, n.ns, func() { l, lerr = net.Listen("tcp", ":7000") })
	if lerr != nil {
		t.Fatal(lerr)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("hello from " + n.ns + "\n"))
			c.Close()
		}
	}()
}

// reach says whether from gets to's hello at to's mesh address within a
// while.
func reach(t testing.TB, from, to *node, within time.Duration) bool {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		var got string
		inNetns(t, from.ns, func() {
			c, err := net.DialTimeout("tcp", to.mesh+":7000", time.Second)
			if err != nil {
				return
			}
			defer c.Close()
			_ = c.SetReadDeadline(time.Now().Add(time.Second))
			b, _ := io.ReadAll(c)
			got = string(b)
		})
		if got == "hello from "+to.ns+"\n" {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitFor polls cond until it holds, failing the test after within.
func waitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", within, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestTwoNodes: two namespaces joined by a link, each running the mesh
// with the default implementation (auto: here, where the kernel has no
// WireGuard, userspace, and the log says so and why). Each makes its key
// and gives only its public key; once each has the other as a peer, a
// mesh address answers across; a peer removed from the file is
// unreachable within seconds, and added back, reachable again. No private
// key appears in anything printed.
func TestTwoNodes(t *testing.T) {
	p := startPair(t)
	a, b := p.a, p.b
	serveHello(t, b)
	p.setPeers(a, b)
	p.setPeers(b, a)
	start := time.Now()
	if !reach(t, a, b, 15*time.Second) {
		t.Fatalf("%s never answered through the mesh:\n%s\n%s", b.mesh, a.out.String(), b.out.String())
	}
	t.Logf("mesh address answered %s after the peers were set", time.Since(start).Round(time.Millisecond))
	for _, n := range []*node{a, b} {
		impl, why := "userspace WireGuard (wireguard-go on a TUN device)", "no kernel WireGuard, so userspace: "
		if kernelHasWireGuard() {
			impl, why = "kernel WireGuard", ""
		}
		if out := n.out.String(); !strings.Contains(out, "public key "+n.pub+", "+impl+"\n") || !strings.Contains(out, why) {
			t.Errorf("%s's log does not say it runs %s (%q):\n%s", n.ns, impl, why, out)
		}
	}

	p.setPeers(a)
	time.Sleep(2 * time.Second) // the file is looked at every second
	if reach(t, a, b, 2*time.Second) {
		t.Errorf("%s still answers after it left the peers", b.mesh)
	}
	p.setPeers(a, b)
	if !reach(t, a, b, 15*time.Second) {
		t.Errorf("%s does not answer again after it came back to the peers", b.mesh)
	}

	for _, n := range []*node{a, b} {
		k, err := mesh.LoadOrCreateKey(n.dir)
		if err != nil {
			t.Fatal(err)
		}
		if k.Public().String() != n.pub {
			t.Errorf("%s printed %s, not its public key", n.ns, n.pub)
		}
		for _, s := range []string{p.printed.String(), a.out.String(), b.out.String()} {
			if strings.Contains(s, k.String()) {
				t.Errorf("the private key of %s was printed", n.ns)
			}
		}
	}
}

// described is a device's peers as wg(8) would show them: endpoint,
// allowed IPs (sorted) and keepalive, by public key.
func described(d *wgtypes.Device) map[string]string {
	m := map[string]string{}
	for _, p := range d.Peers {
		var ips []string
		for _, ip := range p.AllowedIPs {
			ips = append(ips, ip.String())
		}
		slices.Sort(ips)
		m[p.PublicKey.String()] = fmt.Sprintf("endpoint %s, allowed %v, keepalive %s", p.Endpoint, ips, p.PersistentKeepaliveInterval)
	}
	return m
}

// describedPeers is what described should show for peers set by the mesh.
func describedPeers(ps ...mesh.Peer) map[string]string {
	m := map[string]string{}
	for _, p := range ps {
		ips := append([]string{p.Address + "/32"}, p.AllowedIPs...)
		slices.Sort(ips)
		m[p.PublicKey] = fmt.Sprintf("endpoint %s, allowed %v, keepalive 25s", p.Endpoint, ips)
	}
	return m
}

// TestKernelConfigurationOnWireGuard runs the kernel device's
// configuration code (wgctrl) on a real WireGuard: the kernel has none
// here, but wgctrl speaks a userspace device's UAPI socket too, so a's
// device (wireguard-go, started as always, no peers file) gets its peers
// from that code only. Read back through wgctrl, the device has exactly
// the peers wanted (keys, endpoints, allowed IPs, keepalive) and reaches
// b through the mesh. A second configuration removing one peer and adding
// another leaves b's session alone: the same handshake, counters that
// only grew, b still reached without a new handshake. A ReplacePeers (not
// what the code sends) is seen to break it, so the check can tell.
func TestKernelConfigurationOnWireGuard(t *testing.T) {
	p := startPair(t, "-impl", "userspace")
	a, b := p.a, p.b
	serveHello(t, b)
	waitFor(t, 15*time.Second, a.iface+" up", func() bool { return strings.Contains(a.out.String(), " up at ") })
	key, err := mesh.LoadOrCreateKey(a.dir)
	if err != nil {
		t.Fatal(err)
	}
	w, err := mesh.NewWgctrl(a.iface)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	wg, err := wgctrl.New()
	if err != nil {
		t.Fatal(err)
	}
	defer wg.Close()
	device := func() *wgtypes.Device {
		t.Helper()
		d, err := wg.Device(a.iface)
		if err != nil {
			t.Fatalf("wgctrl: %s: %v", a.iface, err)
		}
		return d
	}
	peerB := func() wgtypes.Peer {
		t.Helper()
		for _, q := range device().Peers {
			if q.PublicKey.String() == b.pub {
				return q
			}
		}
		t.Fatalf("%s has no peer %s", a.iface, b.ns)
		return wgtypes.Peer{}
	}
	fake := func(n int) mesh.Peer {
		k, err := wgtypes.GeneratePrivateKey()
		if err != nil {
			t.Fatal(err)
		}
		return mesh.Peer{Node: fmt.Sprint("fake", n), PublicKey: k.PublicKey().String(),
			Endpoint: fmt.Sprintf("192.0.2.%d:51820", n), Address: fmt.Sprintf("10.98.0.%d", n)}
	}
	pb, pc, pd := b.peer(), fake(3), fake(4)
	pb.AllowedIPs = []string{"10.244.2.0/24"}
	configure := func(want ...mesh.Peer) {
		t.Helper()
		have, err := w.Peers()
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Configure(key, 51820, have, want); err != nil {
			t.Fatal(err)
		}
		d := device()
		if d.PublicKey.String() != a.pub || d.ListenPort != 51820 {
			t.Errorf("%s: public key %s, port %d; want %s, 51820", a.iface, d.PublicKey, d.ListenPort, a.pub)
		}
		if diff := cmp.Diff(describedPeers(want...), described(d)); diff != "" {
			t.Errorf("%s's peers (+got -want):\n%s", a.iface, diff)
		}
	}

	configure(pb, pc)
	p.setPeers(b, a)
	if !reach(t, a, b, 15*time.Second) {
		t.Fatalf("%s never answered through the mesh:\n%s\n%s", b.mesh, a.out.String(), b.out.String())
	}
	// Both ends may have started a handshake before the other knew them:
	// go on once one held across a round trip.
	before := peerB()
	for {
		if !reach(t, a, b, 5*time.Second) {
			t.Fatalf("%s stopped answering", b.mesh)
		}
		now := peerB()
		if now.LastHandshakeTime.Equal(before.LastHandshakeTime) {
			break
		}
		before = now
	}
	if before.LastHandshakeTime.IsZero() || before.ReceiveBytes == 0 {
		t.Fatalf("b answered, yet no handshake: %+v", before)
	}

	configure(pb, pd) // c gone, d new, b stays
	after := peerB()
	if !after.LastHandshakeTime.Equal(before.LastHandshakeTime) || after.ReceiveBytes < before.ReceiveBytes ||
		after.TransmitBytes < before.TransmitBytes || after.Endpoint.String() != before.Endpoint.String() {
		t.Errorf("b's session changed with a configuration that kept it:\nbefore %+v\nafter  %+v", before, after)
	}
	if !reach(t, a, b, 5*time.Second) {
		t.Fatalf("%s does not answer after the second configuration", b.mesh)
	}
	if h := peerB().LastHandshakeTime; !h.Equal(before.LastHandshakeTime) {
		t.Errorf("b needed a new handshake (%s, was %s) after a configuration that kept it", h, before.LastHandshakeTime)
	}

	replace := wgtypes.Config{ReplacePeers: true, Peers: []wgtypes.PeerConfig{{PublicKey: wgtypes.Key(mustKey(t, b.pub))}}}
	if err := wg.ConfigureDevice(a.iface, replace); err != nil {
		t.Fatal(err)
	}
	if replaced := peerB(); replaced.LastHandshakeTime.Equal(before.LastHandshakeTime) || replaced.ReceiveBytes >= after.ReceiveBytes {
		t.Errorf("ReplacePeers kept b's session (%+v): the checks above could not tell a replace", replaced)
	}
}

func mustKey(t testing.TB, s string) mesh.Key {
	t.Helper()
	k, err := mesh.ParseKey(s)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// runUp runs transit-mesh up in a namespace of its own with args, until
// it ends (at most 30 s), and returns its output and error; the
// namespace's links are then listed.
func runUp(t *testing.T, setup func(ns string), args ...string) (out, links string, err error) {
	t.Helper()
	needRoot(t)
	bin := cmdtest.Build(t, "transit-mesh")
	ns := "tm-k-" + suffix()
	newNetns(t, ns)
	if setup != nil {
		setup(ns)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"--net=/run/netns/" + ns, "--", bin, "up", "-dir", t.TempDir(), "-address", "10.98.0.9/24"}, args...)...)
	b, err := cmd.CombinedOutput()
	return string(b), sh(t, "ip", "-n", ns, "-o", "link", "show"), err
}

// TestKernelWithoutWireGuard: -impl kernel where the kernel makes no
// WireGuard device (this machine) fails at once, saying why (ip's
// answer), to load the module and that -impl userspace (or auto) runs
// without it; nothing is left behind.
func TestKernelWithoutWireGuard(t *testing.T) {
	needRoot(t)
	if kernelHasWireGuard() {
		t.Skip("this kernel has WireGuard")
	}
	out, links, err := runUp(t, nil, "-impl", "kernel", "-interface", "twk"+suffix())
	if err == nil {
		t.Fatalf("-impl kernel ran without WireGuard in the kernel:\n%s", out)
	}
	for _, want := range []string{"ip link add twk" + suffix() + " type wireguard", "wireguard module", "modprobe wireguard", "-impl userspace"} {
		if !strings.Contains(out, want) {
			t.Errorf("the error does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(links, "twk") {
		t.Errorf("a link was left behind:\n%s", links)
	}
}

// TestLinkOfAnotherType: a link of the device's name that is no
// WireGuard (here a veth) is an error naming its type, and stays.
func TestLinkOfAnotherType(t *testing.T) {
	name := "twv" + suffix()
	for _, impl := range []string{"auto", "kernel"} {
		t.Run(impl, func(t *testing.T) {
			out, links, err := runUp(t, func(ns string) {
				sh(t, "ip", "-n", ns, "link", "add", name, "type", "veth", "peer", "name", name+"p")
			}, "-impl", impl, "-interface", name)
			if err == nil || !strings.Contains(out, name+" exists and is a veth link, not WireGuard: delete it (ip link del "+name+")") {
				t.Errorf("up on a veth: %v\n%s", err, out)
			}
			if !strings.Contains(links, name+"@") {
				t.Errorf("the veth is gone:\n%s", links)
			}
		})
	}
}

// TestOneStartsTheHandshake: of two nodes that get each other as peers,
// only the one whose key sorts first starts a handshake at once (its
// keepalive); the other turns its keepalive on a second later, over the
// session the first made. Were both to start, wireguard-go could take
// the initiation of one and the response to its own in two workers at
// once and keep a session that sends but never receives for 15 s.
// Counted on the wire: the handshake initiations (148-byte UDP payloads)
// each namespace sends.
func TestOneStartsTheHandshake(t *testing.T) {
	p := startPair(t)
	first, second := p.a, p.b
	if k1, k2 := mustKey(t, first.pub), mustKey(t, second.pub); bytes.Compare(k1[:], k2[:]) > 0 {
		first, second = second, first
	}
	for _, n := range []*node{first, second} {
		sh(t, "nsenter", "--net=/run/netns/"+n.ns, "iptables", "-w", "-I", "OUTPUT", "-p", "udp", "--dport", "51820",
			"-m", "length", "--length", "176") // 20 + 8 + 148
	}
	// second has first as a peer before first has it: first's initiation
	// is answered, and any of second's would be seen. Each takes its peers
	// at once (SIGHUP, as transit signals), well within second's wait.
	hup := func(n *node) {
		waitFor(t, 10*time.Second, n.ns+"'s device to be up (and to take SIGHUP)", func() bool { return strings.Contains(n.out.String(), " up at ") })
		if err := n.up.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	p.setPeers(second, first)
	hup(second)
	waitFor(t, 5*time.Second, second.ns+"'s device to take its peer", func() bool { return strings.Contains(second.out.String(), "mesh: 1 peers") })
	p.setPeers(first, second)
	hup(first)

	wg, err := wgctrl.New()
	if err != nil {
		t.Fatal(err)
	}
	defer wg.Close()
	peerOf := func(n *node) wgtypes.Peer {
		d, err := wg.Device(n.iface)
		if err != nil || len(d.Peers) != 1 {
			t.Fatalf("%s's device: %v, %v", n.ns, err, d)
		}
		return d.Peers[0]
	}
	waitFor(t, 10*time.Second, "a handshake", func() bool { return !peerOf(second).LastHandshakeTime.IsZero() })
	waitFor(t, 5*time.Second, second.ns+"'s keepalive to turn on", func() bool { return peerOf(second).PersistentKeepaliveInterval == 25*time.Second })
	if got := peerOf(first).PersistentKeepaliveInterval; got != 25*time.Second {
		t.Errorf("%s keeps its peer alive every %s, want 25s", first.ns, got)
	}
	if n := initiationsSent(t, second); n != 0 {
		t.Errorf("%s (key sorting second) sent %d handshake initiations; want none, %s's answered\n%s", second.ns, n, first.ns, second.out.String())
	}
	if n := initiationsSent(t, first); n != 1 {
		t.Errorf("%s (key sorting first) sent %d handshake initiations; want 1\n%s", first.ns, n, first.out.String())
	}
}

// initiationsSent is the count of n's OUTPUT rule for packets the size
// of a WireGuard handshake initiation to the mesh port.
func initiationsSent(t *testing.T, n *node) int {
	t.Helper()
	out := sh(t, "nsenter", "--net=/run/netns/"+n.ns, "iptables", "-w", "-L", "OUTPUT", "-v", "-x", "-n")
	for line := range strings.Lines(out) {
		if f := strings.Fields(line); len(f) > 0 && strings.Contains(line, "length 176") {
			c, err := strconv.Atoi(f[0])
			if err != nil {
				t.Fatalf("%s's OUTPUT chain: %q", n.ns, line)
			}
			return c
		}
	}
	t.Fatalf("%s's OUTPUT chain has no counting rule:\n%s", n.ns, out)
	return 0
}

// runningKey is the public key n's device says it runs with.
func runningKey(n *node) string {
	b, _ := os.ReadFile(n.dir + "/" + mesh.RunningKeyFile)
	return strings.TrimSpace(string(b))
}

// TestRotate: a changes its key while the mesh runs, as transit does it.
// transit-mesh rotate makes the next key (asked again, the same one) and
// rotate -commit makes it a's key; a's device takes it without a restart
// (woken by SIGHUP) and says so in running.key. Once b has a's new key,
// a and b reach each other again, b's device no longer knows the old
// key, and a kept its address. How long a could not reach b, from the
// commit until it could again, is logged.
func TestRotate(t *testing.T) {
	p := startPair(t)
	a, b := p.a, p.b
	serveHello(t, a)
	serveHello(t, b)
	p.setPeers(a, b)
	p.setPeers(b, a)
	if !reach(t, a, b, 15*time.Second) {
		t.Fatalf("%s never answered through the mesh:\n%s\n%s", b.mesh, a.out.String(), b.out.String())
	}
	waitFor(t, 5*time.Second, a.ns+"'s running.key", func() bool { return runningKey(a) == a.pub })
	oldPriv, err := os.ReadFile(a.dir + "/" + mesh.KeyFile)
	if err != nil {
		t.Fatal(err)
	}

	rotate := func(args ...string) map[string]string {
		t.Helper()
		out, err := p.in(a, append([]string{"rotate", "-dir", a.dir}, args...)...).Output()
		if err != nil {
			t.Fatalf("rotate %v in %s: %v", args, a.ns, runErr(err))
		}
		p.printed.Write(out)
		got := map[string]string{}
		for line := range strings.Lines(string(out)) {
			k, v, _ := strings.Cut(strings.TrimSpace(line), "=")
			got[k] = v
		}
		return got
	}
	asked := rotate()
	next := asked["next"]
	if asked["key"] != a.pub || next == "" || next == a.pub || len(asked) != 2 {
		t.Fatalf("rotate printed %v; want key=%s and a new next key", asked, a.pub)
	}
	if again := rotate(); !cmp.Equal(again, asked) {
		t.Fatalf("rotate asked again printed %v, not %v", again, asked)
	}

	stopProbe := probe(t, a, b)
	committed := time.Now()
	if got := rotate("-commit", next); !cmp.Equal(got, map[string]string{"key": next}) {
		t.Fatalf("rotate -commit printed %v; want key=%s", got, next)
	}
	if err := a.up.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, a.ns+"'s device to run with its new key", func() bool { return runningKey(a) == next })
	took := time.Since(committed)
	wg, err := wgctrl.New()
	if err != nil {
		t.Fatal(err)
	}
	defer wg.Close()
	if d, err := wg.Device(a.iface); err != nil || d.PublicKey.String() != next {
		t.Fatalf("%s's device: %v, public key %v; want %s", a.ns, err, d, next)
	}
	if again := rotate("-commit", next); !cmp.Equal(again, map[string]string{"key": next}) {
		t.Errorf("rotate -commit asked again printed %v", again)
	}

	old := a.pub
	a.pub = next
	peersGiven := time.Now()
	p.setPeers(b, a)
	if err := b.up.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if !reach(t, a, b, 15*time.Second) || !reach(t, b, a, 15*time.Second) {
		t.Fatalf("a and b do not reach each other after the rotation:\n%s\n%s", a.out.String(), b.out.String())
	}
	t.Logf("a could not reach b for %s: its device ran with the new key %s after the commit, b answered %s after it had a's new key",
		stopProbe().Round(time.Millisecond), took.Round(time.Millisecond), time.Since(peersGiven).Round(time.Millisecond))

	d, err := wg.Device(b.iface)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, q := range d.Peers {
		keys = append(keys, q.PublicKey.String())
	}
	if !cmp.Equal(keys, []string{next}) {
		t.Errorf("%s's device has peers %v; want only a's new key %s (not the old %s)", b.ns, keys, next, old)
	}
	if priv, err := os.ReadFile(a.dir + "/" + mesh.KeyFile); err != nil || bytes.Equal(priv, oldPriv) {
		t.Errorf("a's private key file did not change (%v)", err)
	}
	if addrs := sh(t, "ip", "-n", a.ns, "-o", "addr", "show", "dev", a.iface); !strings.Contains(addrs, " "+a.mesh+"/24 ") {
		t.Errorf("a's device lost its address %s:\n%s", a.mesh, addrs)
	}
	k, err := mesh.LoadOrCreateKey(a.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{p.printed.String(), a.out.String(), b.out.String()} {
		if strings.Contains(s, k.String()) || strings.Contains(s, strings.TrimSpace(string(oldPriv))) {
			t.Error("a private key of a was printed")
		}
	}
	if !strings.Contains(a.out.String(), "new key, public key "+next) {
		t.Errorf("a's log does not say it took its new key:\n%s", a.out.String())
	}
}

// probe asks to's hello from from every 20 ms until the returned stop
// (or the test's end), which says the longest time without an answer.
func probe(t testing.TB, from, to *node) (stop func() time.Duration) {
	done, longest := make(chan struct{}), make(chan time.Duration)
	go func() {
		last, gap := time.Now(), time.Duration(0)
		for {
			select {
			case <-done:
				longest <- max(gap, time.Since(last))
				return
			case <-time.After(20 * time.Millisecond):
			}
			var got []byte
			_ = netns.Do("/run/netns/"+from.ns, func() error {
				c, err := net.DialTimeout("tcp", to.mesh+":7000", 200*time.Millisecond)
				if err != nil {
					return err
				}
				defer c.Close()
				_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
				got, err = io.ReadAll(c)
				return err
			})
			if string(got) == "hello from "+to.ns+"\n" {
				gap, last = max(gap, time.Since(last)), time.Now()
			}
		}
	}()
	stop = sync.OnceValue(func() time.Duration {
		close(done)
		return <-longest
	})
	t.Cleanup(func() { stop() })
	return stop
}

// runErr is a failed command's error with what it said on stderr.
func runErr(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return fmt.Errorf("%w: %s", err, ee.Stderr)
	}
	return err
}

// TestDownFailsClosed: a node whose default route leads out of its
// network (a cloud's gateway) sends nothing meant for the mesh that way
// once its device is gone (transit-mesh stopped, crashed or restarting):
// the mesh's range stays unreachable instead of following the default
// route in plaintext.
func TestDownFailsClosed(t *testing.T) {
	p := startPair(t)
	a, b := p.a, p.b
	serveHello(t, b)
	sh(t, "ip", "-n", a.ns, "route", "add", "default", "via", b.addr)
	p.setPeers(a, b)
	p.setPeers(b, a)
	if !reach(t, a, b, 15*time.Second) {
		t.Fatalf("%s never answered through the mesh:\n%s\n%s", b.mesh, a.out.String(), b.out.String())
	}
	_ = a.up.Process.Signal(syscall.SIGTERM)
	_ = a.up.Wait()
	out, err := exec.Command("ip", "-n", a.ns, "route", "get", b.mesh).CombinedOutput()
	if err == nil || strings.Contains(string(out), " via ") {
		t.Errorf("with its device gone, %s routes %s to %q (%v), want it unreachable", a.ns, b.mesh, strings.TrimSpace(string(out)), err)
	}
}
