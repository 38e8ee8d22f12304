package aws

import (
	"strings"
	"testing"
	"time"

	"github.com/cloudtransit/transit/cloudsim/ec2"
	"github.com/cloudtransit/transit/cloudsim/localnodes"
	"github.com/cloudtransit/transit/drivers/drivertest"
	"github.com/cloudtransit/transit/provider"
)

// The backed test's own local root and subnet, apart from every other
// test's.
const (
	backedRoot   = "/var/lib/transit/cloudsim-test-aws"
	backedSubnet = "10.245.1.0/24"
)

// backedWorld is a world whose instances are real local nodes. Whatever
// the test leaves (nodes, bridges, firewall chains) is torn down at
// cleanup, also when it fails.
func backedWorld(t *testing.T) *world {
	t.Helper()
	b := localnodes.ForTest(t, backedRoot, map[string]string{"aws:" + region: backedSubnet})
	w := newWorld(t, ec2.Options{}) // its cleanup (the server's Close) runs before the backer's
	w.sim.Backer = b
	return w
}

// TestBackedConformance runs the conformance suite on instances that are
// real machines: Launch's instance answers SSH as root with the cluster's
// key (given to the machine through the imported key pair) and presents
// the host key the console showed.
func TestBackedConformance(t *testing.T) {
	w := backedWorld(t)
	key, keyFile := drivertest.NewKeyFile(t)
	drivertest.Run(t, func(t *testing.T) provider.Infrastructure {
		return w.driver(w.district(), credential(), fast())
	}, drivertest.Config{
		Cluster: "backed", District: "aws-test", Flavor: "small", MachineType: "t3.micro", AuthorizedKey: key,
		MissingProviderID: "i-0123456789abcdef0", Cloud: cloud{w}, CredentialID: "aws-cred",
		Secrets: []string{secretKey, session}, Zones: zones, Timeout: 2 * time.Minute,
		FailedState: provider.InstanceStopped, FailReason: "Server.InsufficientInstanceCapacity",
		CheckStopped: drivertest.CheckDown,
		CheckSSH: func(t *testing.T, inst provider.Instance) {
			if len(inst.HostKeys) == 0 {
				t.Errorf("no host keys pinned for %s", inst.ProviderID)
			}
			out, err := drivertest.SSHRun(t, inst.PublicIP, keyFile, inst.HostKeys, "hostname")
			if err != nil {
				t.Fatalf("ssh root@%s: %v\n%s", inst.PublicIP, err, out)
			}
			if got := strings.TrimSpace(out); got != inst.ProviderID {
				t.Errorf("hostname %q, want the instance id %s", got, inst.ProviderID)
			}
		},
	})
}

// TestBackedFirewall checks that the group's sources are the machines'
// firewall.
func TestBackedFirewall(t *testing.T) {
	w := backedWorld(t)
	drivertest.BackedFirewall(t, w.driver(w.district(), credential(), fast()),
		func(sources ...string) provider.GroupSpec { return groupSpec("fw", "aws-test", sources...) },
		func(node, group, key string) provider.LaunchSpec {
			return launchSpec("fw", "aws-test", node, "", group, key)
		})
}
