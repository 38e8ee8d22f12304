package platformtest

import (
	"os/exec"
	"strings"
	"testing"
)

// TestPurgeLeftovers: the rules a killed run left to silence its machines
// (marked with its clusters' names) go before the next run of the same
// platform's suite; another platform's suite's rules, which may be in
// use at the same time, stay.
func TestPurgeLeftovers(t *testing.T) {
	RequireRoot(t)
	rule := func(cluster, addr string) []string {
		return []string{"OUTPUT", "-d", addr + "/32", "-p", "tcp", "--dport", "22",
			"-m", "comment", "--comment", "transit-platformtest " + cluster, "-j", "DROP"}
	}
	// TEST-NET-1 addresses: nothing here sends there.
	mine, mineToo, theirs := rule("pt-purgetest-1a2b", "192.0.2.1"), rule("pt-purgetest-3c4d", "192.0.2.2"), rule("pt-otherplatform-5e6f", "192.0.2.3")
	for _, r := range [][]string{mine, mineToo, theirs} {
		if out, err := exec.Command("iptables", append([]string{"-w", "-I"}, r...)...).CombinedOutput(); err != nil {
			t.Fatalf("iptables: %v\n%s", err, out)
		}
		t.Cleanup(func() { _ = exec.Command("iptables", append([]string{"-w", "-D"}, r...)...).Run() })
	}
	if err := purgeLeftovers(t.Context(), t.TempDir(), "purgetest"); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("iptables", "-w", "-S", "OUTPUT").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		addr string
		want bool
	}{{"192.0.2.1", false}, {"192.0.2.2", false}, {"192.0.2.3", true}} {
		if got := strings.Contains(string(out), c.addr+"/32"); got != c.want {
			t.Errorf("rule silencing %s there: %t, want %t\n%s", c.addr, got, c.want, out)
		}
	}
}
