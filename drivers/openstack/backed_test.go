package openstack

import (
	"strings"
	"testing"
	"time"

	"github.com/cloudtransit/transit/cloudsim/localnodes"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/drivers/drivertest"
	"github.com/cloudtransit/transit/provider"
)

// The backed tests' own local root and subnet, apart from every other
// test's.
const (
	backedRoot   = "/var/lib/transit/cloudsim-test-openstack"
	backedSubnet = "10.245.3.0/24"
)

// backedWorld is a world whose servers are real local nodes.
func backedWorld(t *testing.T) *world {
	t.Helper()
	b := localnodes.ForTest(t, backedRoot, map[string]string{"openstack:" + region: backedSubnet})
	w := newWorld(t) // its cleanup (the server's Close) runs before the backer's
	w.sim.Backer = b
	return w
}

// TestBackedConformance runs the conformance suite on servers that are
// real machines: Launch's server answers SSH as root with the key of its
// key pair, and presents the host key its console showed.
func TestBackedConformance(t *testing.T) {
	w := backedWorld(t)
	key, keyFile := drivertest.NewKeyFile(t)
	drivertest.Run(t, func(t *testing.T) provider.Infrastructure {
		return w.driver(w.district(), w.credential(), fast())
	}, drivertest.Config{
		Cluster: "backed", District: "os-test", Flavor: "small", MachineType: "m1.small", AuthorizedKey: key,
		MissingProviderID: "00000000-0000-4000-8000-000000000000", Cloud: cloud{w}, CredentialID: "os-cred",
		Secrets: secrets(), Zones: zones, Timeout: 2 * time.Minute,
		FailedState: provider.InstanceFailed, FailReason: "transit conformance: no valid host",
		CheckStopped: drivertest.CheckDown,
		CheckSSH: func(t *testing.T, inst provider.Instance) {
			if len(inst.HostKeys) == 0 {
				t.Errorf("no host keys pinned for %s", inst.ProviderID)
			}
			out, err := drivertest.SSHRun(t, inst.PublicIP, keyFile, inst.HostKeys, "hostname")
			if err != nil {
				t.Fatalf("ssh root@%s: %v\n%s", inst.PublicIP, err, out)
			}
			if name := strings.TrimSpace(out); !strings.HasPrefix(name, inst.Tags[districts.TagNode]+"-") {
				t.Errorf("hostname %q, want the server name of node %s", name, inst.Tags[districts.TagNode])
			}
		},
	})
}

// TestBackedFirewall checks that the group's sources are the machines'
// firewall.
func TestBackedFirewall(t *testing.T) {
	w := backedWorld(t)
	drivertest.BackedFirewall(t, w.driver(w.district(), w.credential(), fast()),
		func(sources ...string) provider.GroupSpec { return groupSpec("fw", "os-test", sources...) },
		func(node, group, key string) provider.LaunchSpec {
			return launchSpec("fw", "os-test", node, "", group, key)
		})
}
