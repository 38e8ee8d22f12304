package gce

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cloudtransit/transit/cloudsim/localnodes"
	"github.com/cloudtransit/transit/control"
	"github.com/cloudtransit/transit/drivers/drivertest"
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
	if testing.Short() {
		t.Skip("backed: skipped with -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("backed: needs root (network namespaces, bridges, iptables)")
	}
	b := &localnodes.Backer{Root: backedRoot, Subnets: map[string]string{"gce:" + region: backedSubnet}}
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
	w := newWorld(t) // its cleanup (the server's Close) runs before destroy
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
	drivertest.Run(t, func(t *testing.T) control.Infrastructure {
		return w.driver(w.district(), w.credential(), fast())
	}, drivertest.Config{
		Cluster: "backed", District: "gce-test", Flavor: "small", MachineType: "e2-small", AuthorizedKey: key,
		MissingProviderID: "europe-west1-b/no-such-instance", Cloud: cloud{w}, CredentialID: "gce-cred",
		Secrets: w.secrets(), Zones: zones, Timeout: 2 * time.Minute,
		CheckSSH: func(t *testing.T, inst control.Instance) {
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

// TestBackedFirewall checks that the rules' sources are the machines'
// firewall: one node reaches another only once its address is a source.
func TestBackedFirewall(t *testing.T) {
	w := backedWorld(t)
	ctx := t.Context()
	drv := w.driver(w.district(), w.credential(), fast())
	key, keyFile := drivertest.NewKeyFile(t)
	g, err := drv.EnsureGroup(ctx, groupSpec("fw", "gce-test"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := drv.Launch(ctx, launchSpec("fw", "gce-test", "fw-a", "", g.ProviderID, key))
	if err != nil {
		t.Fatal(err)
	}
	b, err := drv.Launch(ctx, launchSpec("fw", "gce-test", "fw-b", "", g.ProviderID, key))
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
	if _, err := drv.EnsureGroup(ctx, groupSpec("fw", "gce-test", a.PublicIP, b.PublicIP)); err != nil {
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
