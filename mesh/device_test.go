package mesh_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cloudtransit/transit/mesh"
	"github.com/cloudtransit/transit/netns"
)

// node is a network namespace running transit-mesh up.
type node struct {
	ns, addr, mesh, dir, pub string
	up                       *exec.Cmd
	out                      bytes.Buffer
}

var build = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "transit-mesh-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "transit-mesh")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/cloudtransit/transit/cmd/transit-mesh").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%w\n%s", err, out)
	}
	return bin, nil
})

func TestMain(m *testing.M) {
	code := m.Run()
	if bin, err := build(); err == nil {
		_ = os.RemoveAll(filepath.Dir(bin))
	}
	os.Exit(code)
}

// inNetns runs fn in the network namespace ns: the sockets it opens are
// that namespace's.
func inNetns(t *testing.T, ns string, fn func()) {
	t.Helper()
	if err := netns.Do("/run/netns/"+ns, func() error { fn(); return nil }); err != nil {
		t.Fatal(err)
	}
}

func sh(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestTwoNodes: two namespaces joined by a link, each running the mesh
// in userspace. Each makes its key and gives only its public key; once
// each has the other as a peer, a mesh address answers across; a peer
// removed from the file is unreachable within seconds, and added back,
// reachable again. No private key appears in anything printed.
func TestTwoNodes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, /dev/net/tun)")
	}
	bin, err := build()
	if err != nil {
		t.Fatal(err)
	}
	suffix := fmt.Sprintf("%04x", os.Getpid()%0x10000)
	nodes := []*node{
		{ns: "tm-a-" + suffix, addr: "10.77.0.1", mesh: "10.98.0.1"},
		{ns: "tm-b-" + suffix, addr: "10.77.0.2", mesh: "10.98.0.2"},
	}
	for _, n := range nodes {
		sh(t, "ip", "netns", "add", n.ns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", n.ns).Run() })
		n.dir = t.TempDir()
	}
	sh(t, "ip", "link", "add", "tma"+suffix, "netns", nodes[0].ns, "type", "veth", "peer", "name", "tmb"+suffix, "netns", nodes[1].ns)
	for i, n := range nodes {
		link := []string{"tma", "tmb"}[i] + suffix
		sh(t, "ip", "-n", n.ns, "addr", "add", n.addr+"/24", "dev", link)
		sh(t, "ip", "-n", n.ns, "link", "set", link, "up")
		sh(t, "ip", "-n", n.ns, "link", "set", "lo", "up")
	}
	in := func(n *node, args ...string) *exec.Cmd {
		return exec.Command("nsenter", append([]string{"--net=/run/netns/" + n.ns, "--", bin}, args...)...)
	}
	var printed bytes.Buffer
	for _, n := range nodes {
		out, err := in(n, "key", "-dir", n.dir).Output()
		if err != nil {
			t.Fatalf("key in %s: %v", n.ns, err)
		}
		printed.Write(out)
		n.pub = strings.TrimSpace(string(out))
		n.up = in(n, "up", "-dir", n.dir, "-interface", "tmesh0", "-address", n.mesh+"/24")
		n.up.Stdout, n.up.Stderr = &n.out, &n.out
		if err := n.up.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = n.up.Process.Signal(syscall.SIGTERM)
			_ = n.up.Wait()
		})
	}
	setPeers := func(n *node, peers ...*node) {
		t.Helper()
		var ps []mesh.Peer
		for _, p := range peers {
			ps = append(ps, mesh.Peer{Node: p.ns, PublicKey: p.pub, Endpoint: p.addr + ":51820", Address: p.mesh})
		}
		data, _ := json.Marshal(ps)
		if ps == nil {
			data = []byte("[]")
		}
		cmd := in(n, "peers", "-dir", n.dir)
		cmd.Stdin = bytes.NewReader(data)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("peers in %s: %v\n%s", n.ns, err, out)
		}
	}
	a, b := nodes[0], nodes[1]
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
	setPeers(a, b)
	setPeers(b, a)
	start := time.Now()
	if !ping(a, b.mesh, 15*time.Second) {
		t.Fatalf("%s never answered through the mesh:\n%s\n%s", b.mesh, a.out.String(), b.out.String())
	}
	t.Logf("mesh address answered %s after the peers were set", time.Since(start).Round(time.Millisecond))

	setPeers(a)
	time.Sleep(2 * time.Second) // the file is looked at every second
	if ping(a, b.mesh, 2*time.Second) {
		t.Errorf("%s still answers after it left the peers", b.mesh)
	}
	setPeers(a, b)
	if !ping(a, b.mesh, 15*time.Second) {
		t.Errorf("%s does not answer again after it came back to the peers", b.mesh)
	}

	for _, n := range nodes {
		k, err := mesh.LoadOrCreateKey(n.dir)
		if err != nil {
			t.Fatal(err)
		}
		if k.Public().String() != n.pub {
			t.Errorf("%s printed %s, not its public key", n.ns, n.pub)
		}
		for _, s := range []string{printed.String(), a.out.String(), b.out.String()} {
			if strings.Contains(s, k.String()) {
				t.Errorf("the private key of %s was printed", n.ns)
			}
		}
	}
}
