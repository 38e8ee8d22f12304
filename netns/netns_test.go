package netns

import (
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestDo: a listener opened in Do lives in the namespace (its address is
// there, not on the host), and a command run in Do sees the namespace's
// interfaces only.
func TestDo(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces)")
	}
	ns := "tns-" + strings.ReplaceAll(t.Name(), "/", "-")
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	var links string
	err := Do("/run/netns/"+ns, func() error {
		out, err := exec.Command("ip", "-o", "link", "show").Output()
		links = string(out)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(strings.TrimSpace(links), "\n") != 0 || !strings.Contains(links, " lo:") {
		t.Errorf("links seen in the namespace:\n%s", links)
	}
	var l net.Listener
	if err := Do("/run/netns/"+ns, func() (err error) {
		if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		l, err = net.Listen("tcp", "127.0.0.1:0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if c, err := net.Dial("tcp", l.Addr().String()); err == nil {
		c.Close()
		t.Errorf("the host reached %s, a listener in the namespace", l.Addr())
	}
	if err := Do("/run/netns/nope-"+ns, func() error { return nil }); err == nil {
		t.Error("a missing namespace was entered")
	}
}
