package localnodes

import (
	"net/netip"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cloudtransit/transit/cloudsim"
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

// TestNetworksApart: with Apart, each region is its own network. Two
// regions on one private subnet give their first machines one private
// address, and the host still reaches each by its public one. A machine
// reaches a neighbour's private address, another region's machine only
// through its public address (as that region's firewall allows: the
// source is the sender's public address) and never another region's
// private address. Destroy leaves nothing on the host.
//
// (A neighbour is reached whatever the region's firewall, which filters
// only what comes from outside the region.)
func TestNetworksApart(t *testing.T) {
	if inFreshHost(t) {
		return
	}
	const regionA, regionB, regionC = "aws:eu-west-3", "gce:europe-west9", "openstack:RegionTwo"
	b := ForTest(t, testRoot, map[string]string{regionA: "10.245.5.0/24", regionB: "10.245.5.0/24", regionC: "10.245.6.0/24"})
	b.PublicPool, b.Apart = testPublic, true
	ctx := t.Context()
	key, keyFile := drivertest.NewKeyFile(t)
	start := func(region, name string) cloudsim.Machine {
		t.Helper()
		m, err := b.Start(ctx, region, name, key)
		if err != nil {
			t.Fatalf("start %s in %s: %v", name, region, err)
		}
		out, err := drivertest.SSHRun(t, m.Address, keyFile, m.HostKeys, "hostname")
		if err != nil || strings.TrimSpace(out) != name {
			t.Fatalf("ssh root@%s (%s): %v %q", m.Address, name, err, out)
		}
		return m
	}
	m1, m2, m3, m4 := start(regionA, "apart-1"), start(regionA, "apart-2"), start(regionB, "apart-3"), start(regionC, "apart-4")
	if m1.PrivateAddress != m3.PrivateAddress {
		t.Errorf("the first machines of one subnet in two regions: %s and %s, want one private address", m1.PrivateAddress, m3.PrivateAddress)
	}
	for region, rules := range map[string][]cloudsim.Rule{
		regionA: nil, // neighbours reach each other whatever the firewall
		regionB: allFrom(m1.Address),
		regionC: allFrom(m1.Address),
	} {
		if err := b.Allow(ctx, region, rules); err != nil {
			t.Fatal(err)
		}
	}
	reaches := func(from cloudsim.Machine, addr string) bool {
		t.Helper()
		out, err := drivertest.SSHRun(t, from.Address, keyFile, from.HostKeys,
			"timeout 3 bash -c 'exec 3<>/dev/tcp/"+addr+"/22 && head -c 7 <&3' || true")
		if err != nil {
			t.Fatalf("ssh root@%s: %v", from.Address, err)
		}
		return strings.TrimSpace(out) == "SSH-2.0"
	}
	for _, c := range []struct {
		what string
		from cloudsim.Machine
		to   string
		want bool
	}{
		{"a neighbour's private address", m1, m2.PrivateAddress, true},
		{"a neighbour's public address", m1, m2.Address, true},
		{"another cloud's machine by its public address", m1, m3.Address, true},
		{"another region's machine by its public address", m1, m4.Address, true},
		{"another region's private address", m1, m4.PrivateAddress, false},
		{"a machine whose firewall lets in only the other's public address", m2, m3.Address, false},
	} {
		if got := c.from.Address != "" && reaches(c.from, c.to); got != c.want {
			t.Errorf("%s (%s → %s): reached %t, want %t", c.what, c.from.PrivateAddress, c.to, got, c.want)
		}
	}

	names := b.HostNames()
	for _, n := range names {
		if !onHost(n) {
			t.Errorf("%s: not on the host while the machines run", n)
		}
	}
	if err := b.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if onHost(n) {
			t.Errorf("%s: still on the host after Destroy", n)
		}
	}
}

// allFrom are rules letting in all traffic from each address.
func allFrom(addrs ...string) []cloudsim.Rule {
	var out []cloudsim.Rule
	for _, a := range addrs {
		out = append(out, cloudsim.Rule{Source: netip.PrefixFrom(netip.MustParseAddr(a), 32)})
	}
	return out
}
