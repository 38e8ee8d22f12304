package aws

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cloudtransit/transit/cloudsim/ec2"
	"github.com/cloudtransit/transit/cloudsim/localnodes"
	"github.com/cloudtransit/transit/control"
	"github.com/cloudtransit/transit/drivers/drivertest"
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
	if testing.Short() {
		t.Skip("backed: skipped with -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("backed: needs root (network namespaces, bridges, iptables)")
	}
	b := &localnodes.Backer{Root: backedRoot, Subnets: map[string]string{"aws:" + region: backedSubnet}}
	destroy := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := b.Destroy(ctx); err != nil {
			t.Errorf("destroy the backing nodes: %v", err)
		}
	}
	destroy() // a crashed run's leftovers
	t.Cleanup(func() {
		destroy()
		if err := os.RemoveAll(backedRoot); err != nil {
			t.Error(err)
		}
	})
	w := newWorld(t, ec2.Options{}) // its cleanup (the server's Close) runs before destroy
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
	drivertest.Run(t, func(t *testing.T) control.Infrastructure {
		return w.driver(w.district(), credential(), fast())
	}, drivertest.Config{
		Cluster: "backed", District: "aws-test", Flavor: "small", MachineType: "t3.micro", AuthorizedKey: key,
		MissingProviderID: "i-0123456789abcdef0", Cloud: cloud{w}, CredentialID: "aws-cred",
		Secrets: []string{secretKey, session}, Zones: zones, Timeout: 2 * time.Minute,
		CheckSSH: func(t *testing.T, inst control.Instance) {
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
// firewall: one node reaches another only once its address is a source.
func TestBackedFirewall(t *testing.T) {
	w := backedWorld(t)
	ctx := t.Context()
	drv := w.driver(w.district(), credential(), fast())
	key, keyFile := drivertest.NewKeyFile(t)
	g, err := drv.EnsureGroup(ctx, groupSpec("fw", "aws-test"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := drv.Launch(ctx, launchSpec("fw", "aws-test", "fw-a", "", g.ProviderID, key))
	if err != nil {
		t.Fatal(err)
	}
	b, err := drv.Launch(ctx, launchSpec("fw", "aws-test", "fw-b", "", g.ProviderID, key))
	if err != nil {
		t.Fatal(err)
	}
	probe := fmt.Sprintf("timeout 3 bash -c '</dev/tcp/%s/22' && echo open || echo closed", b.PrivateIP)
	reach := func() string {
		t.Helper()
		out, err := drivertest.SSHRun(t, a.PublicIP, keyFile, a.HostKeys, probe)
		if err != nil {
			t.Fatalf("ssh to %s: %v\n%s", a.PublicIP, err, out)
		}
		return strings.TrimSpace(out)
	}
	if got := reach(); got != "closed" {
		t.Errorf("a reaches b with no sources in the group: %s", got)
	}
	if _, err := drv.EnsureGroup(ctx, groupSpec("fw", "aws-test", a.PublicIP, b.PublicIP)); err != nil {
		t.Fatal(err)
	}
	if got := reach(); got != "open" {
		t.Errorf("a does not reach b once both are sources: %s", got)
	}
	for _, inst := range []control.Instance{a, b} {
		if err := drv.Terminate(ctx, inst); err != nil {
			t.Fatal(err)
		}
	}
	if err := drv.DeleteGroup(ctx, g); err != nil {
		t.Fatal(err)
	}
}
