package mesh_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cloudtransit/transit/cmdtest"
	"github.com/cloudtransit/transit/mesh"
	"github.com/cloudtransit/transit/netns"
)

// node is a network namespace running transit-mesh up.
type node struct {
	ns, addr, mesh, dir, pub string
	up                       *exec.Cmd
	out                      bytes.Buffer
}

func TestMain(m *testing.M) { os.Exit(cmdtest.Main(m)) }

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

// pair is two namespaces joined by a link (10.77.0.1 and .2), each
// running transit-mesh up (mesh addresses 10.98.0.1 and .2), no peers yet.
type pair struct {
	tb      testing.TB
	bin     string
	a, b    *node
	printed bytes.Buffer // what transit-mesh key printed
}

func startPair(tb testing.TB) *pair {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root (network namespaces, /dev/net/tun)")
	}
	bin := cmdtest.Build(tb, "transit-mesh")
	suffix := fmt.Sprintf("%04x", os.Getpid()%0x10000)
	p := &pair{tb: tb, bin: bin,
		a: &node{ns: "tm-a-" + suffix, addr: "10.77.0.1", mesh: "10.98.0.1"},
		b: &node{ns: "tm-b-" + suffix, addr: "10.77.0.2", mesh: "10.98.0.2"}}
	for _, n := range []*node{p.a, p.b} {
		sh(tb, "ip", "netns", "add", n.ns)
		tb.Cleanup(func() { _ = exec.Command("ip", "netns", "del", n.ns).Run() })
		n.dir = tb.TempDir()
	}
	sh(tb, "ip", "link", "add", "tma"+suffix, "netns", p.a.ns, "type", "veth", "peer", "name", "tmb"+suffix, "netns", p.b.ns)
	for i, n := range []*node{p.a, p.b} {
		link := []string{"tma", "tmb"}[i] + suffix
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
		n.up = p.in(n, "up", "-dir", n.dir, "-interface", "tmesh0", "-address", n.mesh+"/24")
		n.up.Stdout, n.up.Stderr = &n.out, &n.out
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

// setPeers makes peers n's peers.
func (p *pair) setPeers(n *node, peers ...*node) {
	p.tb.Helper()
	ps := []mesh.Peer{}
	for _, q := range peers {
		ps = append(ps, mesh.Peer{Node: q.ns, PublicKey: q.pub, Endpoint: q.addr + ":51820", Address: q.mesh})
	}
	data, _ := json.Marshal(ps)
	cmd := p.in(n, "peers", "-dir", n.dir)
	cmd.Stdin = bytes.NewReader(data)
	if out, err := cmd.CombinedOutput(); err != nil {
		p.tb.Fatalf("peers in %s: %v\n%s", n.ns, err, out)
	}
}

// TestTwoNodes: two namespaces joined by a link, each running the mesh
// in userspace. Each makes its key and gives only its public key; once
// each has the other as a peer, a mesh address answers across; a peer
// removed from the file is unreachable within seconds, and added back,
// reachable again. No private key appears in anything printed.
func TestTwoNodes(t *testing.T) {
	p := startPair(t)
	a, b := p.a, p.b
	// b answers on every address (its mesh one is added once its device
	// is up); a asks at the mesh address, routed only into the mesh.
	var l net.Listener
	var lerr error
	inNetns(t, b.ns, func() { l, lerr = net.Listen("tcp", ":7000") })
	if lerr != nil {
		t.Fatal(lerr)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("hello from b\n"))
			c.Close()
		}
	}()
	ping := func(from *node, to string, within time.Duration) bool {
		deadline := time.Now().Add(within)
		for {
			var got string
			inNetns(t, from.ns, func() {
				c, err := net.DialTimeout("tcp", to+":7000", time.Second)
				if err != nil {
					return
				}
				defer c.Close()
				_ = c.SetReadDeadline(time.Now().Add(time.Second))
				b, _ := io.ReadAll(c)
				got = string(b)
			})
			if got == "hello from b\n" {
				return true
			}
			if time.Now().After(deadline) {
				return false
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	p.setPeers(a, b)
	p.setPeers(b, a)
	start := time.Now()
	if !ping(a, b.mesh, 15*time.Second) {
		t.Fatalf("%s never answered through the mesh:\n%s\n%s", b.mesh, a.out.String(), b.out.String())
	}
	t.Logf("mesh address answered %s after the peers were set", time.Since(start).Round(time.Millisecond))

	p.setPeers(a)
	time.Sleep(2 * time.Second) // the file is looked at every second
	if ping(a, b.mesh, 2*time.Second) {
		t.Errorf("%s still answers after it left the peers", b.mesh)
	}
	p.setPeers(a, b)
	if !ping(a, b.mesh, 15*time.Second) {
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
