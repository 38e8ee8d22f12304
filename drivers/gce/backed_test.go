package gce

import (
	"strings"
	"testing"
	"time"

	"github.com/cloudtransit/transit/cloudsim/localnodes"
	"github.com/cloudtransit/transit/drivers/drivertest"
	"github.com/cloudtransit/transit/provider"
)

// The backed tests' own local root and subnet, apart from every other
// test's.
const (
	backedRoot   = "/var/lib/transit/cloudsim-test-gce"
	backedSubnet = "10.245.2.0/24"
)

// backedWorld is a world whose instances are real local nodes. Whatever
// the test leaves (nodes, bridges, firewall chains) is torn down at
// cleanup, also when it fails.
func backedWorld(t *testing.T) *world {
	t.Helper()
	b := localnodes.ForTest(t, backedRoot, map[string]string{"gce:" + region: backedSubnet})
	w := newWorld(t) // its cleanup (the server's Close) runs before the backer's
	w.sim.Backer = b
	return w
}

// TestBackedConformance runs the conformance suite on instances that are
// real machines: Launch's instance answers SSH as root with the key of
// its ssh-keys metadata and presents the host key its guest attributes
// showed.
func TestBackedConformance(t *testing.T) {
	w := backedWorld(t)
	key, keyFile := drivertest.NewKeyFile(t)
	drivertest.Run(t, func(t *testing.T) provider.Infrastructure {
		return w.driver(w.district(), w.credential(), fast())
	}, drivertest.Config{
		Cluster: "backed", District: "gce-test", Flavor: "small", MachineType: "e2-small", AuthorizedKey: key,
		MissingProviderID: "europe-west1-b/no-such-instance", Cloud: cloud{w}, CredentialID: "gce-cred",
		Secrets: w.secrets(), Zones: zones, Timeout: 2 * time.Minute,
		FailedState: provider.InstanceStopped, FailReason: "transit conformance: the host failed",
		CheckStopped: drivertest.CheckDown,
		CheckSSH: func(t *testing.T, inst provider.Instance) {
			if len(inst.HostKeys) == 0 {
				t.Errorf("no host keys pinned for %s", inst.ProviderID)
			}
			out, err := drivertest.SSHRun(t, inst.PublicIP, keyFile, inst.HostKeys, "hostname")
			if err != nil {
				t.Fatalf("ssh root@%s: %v\n%s", inst.PublicIP, err, out)
			}
			if _, name, _ := strings.Cut(inst.ProviderID, "/"); strings.TrimSpace(out) != name {
				t.Errorf("hostname %q, want the instance name %s", strings.TrimSpace(out), name)
			}
		},
	})
}

// TestBackedFirewall checks that the group's sources are the machines'
// firewall.
func TestBackedFirewall(t *testing.T) {
	w := backedWorld(t)
	drivertest.BackedFirewall(t, w.driver(w.district(), w.credential(), fast()),
		func(sources ...string) provider.GroupSpec { return groupSpec("fw", "gce-test", sources...) },
		func(node, group, key string) provider.LaunchSpec {
			return launchSpec("fw", "gce-test", node, "", group, key)
		})
}
