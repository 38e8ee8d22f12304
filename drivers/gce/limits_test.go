package gce

import (
	"testing"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/drivers/drivertest"
)

// TestGroupLimitMatchesComputeEngine: the limit the planner checks is
// Compute Engine's own — a nodes rule of the most sources GroupLimit
// allows is made, one more is refused by the API; the mesh's rule, a rule
// of its own, takes no source range.
func TestGroupLimitMatchesComputeEngine(t *testing.T) {
	w := newWorld(t)
	drv := w.driver(w.district(), w.credential(), fast())
	for _, mesh := range []bool{false, true} {
		n, fits, past := drivertest.LimitEdge(drv, mesh)
		if n != maxSourceRanges {
			t.Fatalf("mesh %v: the edge at %d sources, want %d", mesh, n, maxSourceRanges)
		}
		spec := groupSpec("fits", "gce-test", fits...)
		if mesh {
			spec.MeshPort = drivertest.MeshPort
		}
		if _, err := drv.EnsureGroup(t.Context(), spec); err != nil {
			t.Fatalf("mesh %v: %d sources, within GroupLimit: %v", mesh, n, err)
		}
		spec.Name, spec.Sources = "over", past
		if _, err := drv.EnsureGroup(t.Context(), spec); err == nil {
			t.Fatalf("mesh %v: %d sources, past GroupLimit, were accepted", mesh, n+1)
		}
	}
}

// transitRules counts the firewall rules transit holds for group.
func transitRules(t *testing.T, drv *driver, group string) int {
	t.Helper()
	rules, err := drv.listFirewalls(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range rules {
		if r.meta.Transit == group {
			n++
		}
	}
	return n
}

// TestGroupLimitCountsRules: for a group with no node address, what
// GroupLimit counts is the project's firewall quota, and exactly the rules
// EnsureGroup makes — with IPv6 and API blocks or without, on the mesh or
// not.
func TestGroupLimitCountsRules(t *testing.T) {
	w := newWorld(t)
	for i, tc := range []struct {
		ssh, api []string
	}{
		{nil, nil},
		{[]string{"203.0.113.0/24", "2001:db8:ff::/48"}, nil},
		{nil, []string{"198.51.100.0/24"}},
		{[]string{"2001:db8:ff::/48"}, []string{"198.51.100.0/24", "2001:db8:1::/48"}},
	} {
		drv := w.driver(w.district(func(d *districts.District) { d.SSHCIDRs, d.APICIDRs = tc.ssh, tc.api }), w.credential(), fast())
		for _, mesh := range []bool{false, true} {
			l := drv.GroupLimit(0, mesh)
			if l.Max != defaultFirewallsPerProject {
				t.Errorf("case %d, mesh %v: %+v, want the project's firewall quota", i, mesh, l)
			}
			spec := groupSpec("count", "gce-test")
			if mesh {
				spec.MeshPort = drivertest.MeshPort
			}
			if _, err := drv.EnsureGroup(t.Context(), spec); err != nil {
				t.Fatal(err)
			}
			if n := transitRules(t, drv, spec.Name); n != l.Need {
				t.Errorf("case %d, mesh %v: EnsureGroup made %d rules, GroupLimit counts %d", i, mesh, n, l.Need)
			}
		}
	}
}

// TestMeshGroupAcrossClouds: a 300-node cluster across three clouds on
// the mesh takes three of the project's firewall rules (nodes', SSH's,
// the mesh's), whatever its size, and Compute Engine makes that group;
// without the mesh its 600 addresses fit one rule's source ranges, so
// Compute Engine takes that group too.
func TestMeshGroupAcrossClouds(t *testing.T) {
	w := newWorld(t)
	drv := w.driver(w.district(), w.credential(), fast())
	mesh, bare := drv.GroupLimit(0, true), drv.GroupLimit(drivertest.AcrossAddresses, false)
	if mesh.Need != 3 || mesh.Max != defaultFirewallsPerProject {
		t.Errorf("on the mesh: %+v, want 3 rules of the project's %d", mesh, defaultFirewallsPerProject)
	}
	if bare.Need != drivertest.AcrossAddresses || bare.Max != maxSourceRanges {
		t.Errorf("without the mesh: %+v, want %d source ranges of %d", bare, drivertest.AcrossAddresses, maxSourceRanges)
	}
	spec := groupSpec("across", "gce-test")
	spec.MeshPort = drivertest.MeshPort
	if _, err := drv.EnsureGroup(t.Context(), spec); err != nil {
		t.Fatalf("the mesh's group: %v", err)
	}
	if n := transitRules(t, drv, spec.Name); n != mesh.Need {
		t.Errorf("the group holds %d rules, GroupLimit counts %d", n, mesh.Need)
	}
	if _, err := drv.EnsureGroup(t.Context(), groupSpec("bare", "gce-test", drivertest.Addresses(drivertest.AcrossAddresses)...)); err != nil {
		t.Errorf("the group of %d addresses: %v", drivertest.AcrossAddresses, err)
	}
}
