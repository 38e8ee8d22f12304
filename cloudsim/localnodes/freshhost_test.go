package localnodes

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// freshHostEnv names the test a child process runs in a fresh host.
const freshHostEnv = "LOCALNODES_TEST_FRESH_HOST"

// inFreshHost runs the calling test again in a child process whose
// network namespace is new: a host as a machine boots, with IPv4
// forwarding off and no firewall chains, whatever this machine's earlier
// tests turned on (and apart from them). In the parent it returns true once the child ended
// (the child's verdict is the test's); in the child it returns false and
// the test goes on there. What the child leaves on a kill (nodes'
// namespaces, under the test's root) the next ForTest purges.
func inFreshHost(t *testing.T) bool {
	t.Helper()
	if os.Getenv(freshHostEnv) == t.Name() {
		// A new namespace copies the host's forwarding (the kernel's
		// devconf_inherit_init_net default): turned off, as it boots.
		for _, c := range [][]string{{"ip", "link", "set", "lo", "up"}, {"sysctl", "-qw", "net.ipv4.ip_forward=0"}} {
			if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
				t.Fatalf("make the fresh host: %s: %v: %s", strings.Join(c, " "), err, out)
			}
		}
		return false
	}
	if testing.Short() || os.Geteuid() != 0 {
		return false // ForTest skips it
	}
	cmd := exec.CommandContext(t.Context(), "unshare", "--net", "--", os.Args[0], "-test.run", "^"+t.Name()+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), freshHostEnv+"="+t.Name())
	out, err := cmd.CombinedOutput()
	t.Logf("in a fresh network namespace:\n%s", out)
	if err != nil {
		t.Fatalf("%s in a fresh network namespace: %v", t.Name(), err)
	}
	return true
}
