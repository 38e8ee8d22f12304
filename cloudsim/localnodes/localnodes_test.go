package localnodes

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cloudtransit/transit/drivers/drivertest"
	"github.com/cloudtransit/transit/provider"
)

// The test's own root, subnet and public range, apart from every other
// test's.
const (
	testRoot   = "/var/lib/transit/cloudsim-test-localnodes"
	testSubnet = "10.245.4.0/24"
	testPublic = "100.126.4.0/24"
	testRegion = "aws:eu-west-3"
)

// TestPowerOffOn: a machine behind 1:1 NAT powered off with release
// answers nothing and gives its public address up; powered on it is the
// same machine (host key, hostname) at a new public address; powered off
// without release (a floating IP) it comes back at the same one.
func TestPowerOffOn(t *testing.T) {
	b := ForTest(t, testRoot, map[string]string{testRegion: testSubnet})
	b.PublicPool = testPublic
	ctx := t.Context()
	key, keyFile := drivertest.NewKeyFile(t)
	m, err := b.Start(ctx, testRegion, "pwr-1", key)
	if err != nil {
		t.Fatal(err)
	}
	check := func(addr string) {
		t.Helper()
		out, err := drivertest.SSHRun(t, addr, keyFile, m.HostKeys, "hostname")
		if err != nil || strings.TrimSpace(out) != "pwr-1" {
			t.Fatalf("ssh root@%s: %v %q", addr, err, out)
		}
	}
	check(m.Address)
	if !strings.HasPrefix(m.Address, "100.126.4.") || m.PrivateAddress == "" {
		t.Fatalf("machine %+v: want a public address of %s and a private one", m, testPublic)
	}

	if err := b.PowerOff(ctx, testRegion, m.ID, true); err != nil {
		t.Fatal(err)
	}
	down := provider.Instance{ProviderID: m.ID, PublicIP: m.PrivateAddress}
	drivertest.CheckDown(t, down)
	if _, ok := b.publicOf(m.ID); ok {
		t.Errorf("a machine powered off with release keeps its public address")
	}
	on, err := b.PowerOn(ctx, testRegion, m.ID)
	if err != nil {
		t.Fatal(err)
	}
	if on.ID != m.ID || on.PrivateAddress != m.PrivateAddress || on.Address == m.Address || strings.Join(on.HostKeys, ",") != strings.Join(m.HostKeys, ",") {
		t.Errorf("powered on: %+v, want the same machine and private address %s at a new public address (was %s)", on, m.PrivateAddress, m.Address)
	}
	check(on.Address)
	if out, err := drivertest.SSHRun(t, m.Address, keyFile, m.HostKeys, "hostname"); err == nil {
		t.Errorf("the released public address %s still reaches the machine: %q", m.Address, out)
	}

	if err := b.PowerOff(ctx, testRegion, m.ID, false); err != nil {
		t.Fatal(err)
	}
	again, err := b.PowerOn(ctx, testRegion, m.ID)
	if err != nil {
		t.Fatal(err)
	}
	if again.Address != on.Address {
		t.Errorf("powered on after a power-off without release at %s, want the kept %s", again.Address, on.Address)
	}
	check(again.Address)

	if err := b.PowerOff(ctx, testRegion, m.ID, true); err != nil {
		t.Fatal(err)
	}
	if err := b.Stop(ctx, testRegion, m.ID); err != nil {
		t.Fatalf("Stop of a powered-off machine: %v", err)
	}
}

// TestHostNames: HostNames names what a machine behind 1:1 NAT made on
// the host (its namespace, veth and cgroups, the region's bridge and
// chains, the nat chains) while it exists, and Destroy leaves none of it.
func TestHostNames(t *testing.T) {
	b := ForTest(t, testRoot, map[string]string{testRegion: testSubnet})
	b.PublicPool = testPublic
	key, _ := drivertest.NewKeyFile(t)
	if _, err := b.Start(t.Context(), testRegion, "names-1", key); err != nil {
		t.Fatal(err)
	}
	names := b.HostNames()
	if len(names) != 3+3+2 {
		t.Fatalf("HostNames = %q, want 3 for the region, 3 for the machine, 2 nat chains", names)
	}
	for _, n := range names {
		if !onHost(n) {
			t.Errorf("%s: not on the host while the machine runs", n)
		}
	}
	if err := b.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if onHost(n) {
			t.Errorf("%s: still on the host after Destroy", n)
		}
	}
}

// onHost tells whether the host has what a HostNames entry names.
func onHost(name string) bool {
	kind, n, _ := strings.Cut(name, " ")
	if kind == "nat" {
		_, n, _ = strings.Cut(n, " ")
		return exec.Command("iptables", "-w", "-t", "nat", "-S", n).Run() == nil
	}
	switch kind {
	case "netns":
		out, _ := exec.Command("ip", "netns", "list").Output()
		return slices.ContainsFunc(strings.Split(string(out), "\n"), func(l string) bool { return strings.HasPrefix(l, n+" ") || l == n })
	case "link":
		return exec.Command("ip", "link", "show", n).Run() == nil
	case "chain":
		return exec.Command("iptables", "-w", "-S", n).Run() == nil
	case "cgroup":
		dirs, _ := filepath.Glob("/sys/fs/cgroup/*/" + n)
		return len(dirs) > 0
	}
	panic("unknown kind in " + name)
}
