package openstack

import (
	"testing"

	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/rules"

	"github.com/cloudtransit/transit/drivers/drivertest"
	"github.com/cloudtransit/transit/provider"
)

// TestGroupLimitMatchesNeutron: the limit the planner checks is Neutron's
// default quota — in a fresh project a group of the most sources
// GroupLimit allows is made, one more address is refused; with the mesh's
// rule too, which takes one.
func TestGroupLimitMatchesNeutron(t *testing.T) {
	t.Parallel()
	for _, mesh := range []bool{false, true} {
		w := newWorld(t)
		drv := w.driver(w.district(), w.credential(), fast())
		n, fits, past := drivertest.LimitEdge(drv, mesh)
		spec := groupSpec("fits", "os-test", fits...)
		if mesh {
			spec.MeshPort = drivertest.MeshPort
		}
		if _, err := drv.EnsureGroup(t.Context(), spec); err != nil {
			t.Fatalf("mesh %v: %d sources, within GroupLimit: %v", mesh, n, err)
		}
		spec.Sources = past
		_, err := drv.EnsureGroup(t.Context(), spec)
		w.wantKind(err, provider.ErrQuota)
		if l := drv.GroupLimit(n, mesh); l.Need != defaultRulesPerProject {
			t.Errorf("mesh %v: the edge at %d sources takes %d rules, want all %d", mesh, n, l.Need, defaultRulesPerProject)
		}
	}
}

// TestMeshGroupAcrossClouds: a 300-node cluster across three clouds fits
// Neutron's default quota on the mesh — GroupLimit says so, and the group
// EnsureGroup makes (the mesh's port, no address) is accepted in a fresh
// project — while the same nodes' 600 addresses are far past it, and
// refused.
func TestMeshGroupAcrossClouds(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	drv := w.driver(w.district(), w.credential(), fast())
	mesh, bare := drv.GroupLimit(0, true), drv.GroupLimit(drivertest.AcrossAddresses, false)
	// The mesh's and SSH's rules, the group's two egress rules, the
	// default group's four.
	if mesh.Need != 8 || mesh.Need > mesh.Max {
		t.Errorf("on the mesh: %+v, want 8 rules of %d", mesh, defaultRulesPerProject)
	}
	if bare.Need <= bare.Max {
		t.Errorf("%d nodes' %d addresses without the mesh: %+v, want past the quota", drivertest.AcrossNodes, drivertest.AcrossAddresses, bare)
	}
	spec := groupSpec("across", "os-test")
	spec.MeshPort = drivertest.MeshPort
	g, err := drv.EnsureGroup(t.Context(), spec)
	if err != nil {
		t.Fatalf("the mesh's group: %v", err)
	}
	if n := projectRules(t, drv); n != mesh.Need {
		t.Errorf("the project holds %d rules with the group, GroupLimit counts %d", n, mesh.Need)
	}
	if len(ingressOf(t, drv, g.ProviderID)) != 2 {
		t.Errorf("the group's ingress: %v, want the mesh's and SSH's rules", ingressOf(t, drv, g.ProviderID))
	}
	_, err = drv.EnsureGroup(t.Context(), groupSpec("bare", "os-test", drivertest.Addresses(drivertest.AcrossAddresses)...))
	w.wantKind(err, provider.ErrQuota)
}

// projectRules counts every security group rule of the project, as
// Neutron's quota does.
func projectRules(t *testing.T, drv *driver) int {
	t.Helper()
	pages, err := rules.List(drv.netw, rules.ListOpts{}).AllPages(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	all, err := rules.ExtractRules(pages)
	if err != nil {
		t.Fatal(err)
	}
	return len(all)
}
