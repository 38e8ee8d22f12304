package aws

import (
	"testing"

	"github.com/cloudtransit/transit/cloudsim/ec2"
	"github.com/cloudtransit/transit/drivers/drivertest"
	"github.com/cloudtransit/transit/provider"
)

// TestGroupLimitMatchesEC2: the limit the planner checks is EC2's own —
// a group of exactly the most sources GroupLimit allows is made, one
// more address is refused by the API; with the mesh's rule too, which
// takes one.
func TestGroupLimitMatchesEC2(t *testing.T) {
	t.Parallel()
	for _, mesh := range []bool{false, true} {
		w := newWorld(t, ec2.Options{})
		drv := w.driver(w.district(), credential(), fast())
		n, fits, past := drivertest.LimitEdge(drv, mesh)
		spec := func(sources []string) provider.GroupSpec {
			s := groupSpec("fits", "aws-test", sources...)
			if mesh {
				s.MeshPort = drivertest.MeshPort
			}
			return s
		}
		if _, err := drv.EnsureGroup(t.Context(), spec(fits)); err != nil {
			t.Fatalf("mesh %v: %d sources, within GroupLimit: %v", mesh, n, err)
		}
		_, err := drv.EnsureGroup(t.Context(), spec(past))
		wantKind(t, err, provider.ErrQuota)
		rules := n + len(drv.sshCIDRs)
		if mesh {
			rules++
		}
		if rules != defaultRulesPerGroup {
			t.Errorf("mesh %v: GroupLimit allows %d sources beside %d SSH blocks, want %d rules in all", mesh, n, len(drv.sshCIDRs), defaultRulesPerGroup)
		}
	}
}

// TestMeshGroupAcrossClouds: a 300-node cluster across three clouds fits
// EC2's default quota on the mesh — GroupLimit says so, and the group
// EnsureGroup makes (the mesh's port, no address) is accepted — while
// the same nodes' 600 addresses are far past it, and refused.
func TestMeshGroupAcrossClouds(t *testing.T) {
	t.Parallel()
	w := newWorld(t, ec2.Options{})
	drv := w.driver(w.district(), credential(), fast())
	mesh, bare := drv.GroupLimit(0, true), drv.GroupLimit(drivertest.AcrossAddresses, false)
	if mesh.Need != 2 || mesh.Need > mesh.Max {
		t.Errorf("on the mesh: %+v, want 2 rules (the mesh's, SSH's) of %d", mesh, defaultRulesPerGroup)
	}
	if bare.Need <= bare.Max {
		t.Errorf("%d nodes' %d addresses without the mesh: %+v, want past the quota", drivertest.AcrossNodes, drivertest.AcrossAddresses, bare)
	}
	spec := groupSpec("across", "aws-test")
	spec.MeshPort = drivertest.MeshPort
	g, err := drv.EnsureGroup(t.Context(), spec)
	if err != nil {
		t.Fatalf("the mesh's group: %v", err)
	}
	if n := len(describedRules(t, w, g.ProviderID)); n != mesh.Need {
		t.Errorf("the group holds %d rules, GroupLimit counts %d", n, mesh.Need)
	}
	_, err = drv.EnsureGroup(t.Context(), groupSpec("bare", "aws-test", drivertest.Addresses(drivertest.AcrossAddresses)...))
	wantKind(t, err, provider.ErrQuota)
}
