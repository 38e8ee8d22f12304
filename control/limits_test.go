package control

import (
	"strings"
	"testing"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// tenRules is a cloud whose groups take one rule per address plus one
// for SSH, ten by default.
type tenRules struct{}

func (tenRules) GroupLimit(sources int, mesh bool) provider.GroupLimit {
	return provider.GroupLimit{Need: sources + 1, Max: 10, Quota: "rules per group", Raise: "ask the cloud"}
}

func planLimited(c districts.Cluster, ws worldSpec) Plan {
	w := ws.world()
	return buildPlan(planInput{cluster: c, districts: simDistricts[:2], world: w, avoid: map[string]bool{}, fresh: map[string]bool{},
		ids: newNodeNumbers(c.ID, w), limits: map[string]provider.GroupLimiter{"aws-europe": tenRules{}}})
}

// TestGroupLimitRefusesThePlan: a plan that grows the cluster past a
// district's group quota is refused as a whole before anything is
// launched, naming the district, the quota and the way out; one that fits
// goes on, and so does one that only removes nodes from a cluster already
// past it.
func TestGroupLimitRefusesThePlan(t *testing.T) {
	t.Parallel()
	p := planLimited(paperCluster(1, 2, 2), worldSpec{}) // 5 cloud nodes: 10 addresses, 11 rules
	if len(p.Actions) != 0 {
		t.Errorf("a plan past the quota has actions: %v", nodeActions(p))
	}
	want := "district aws-europe: its security group would take 11 of rules per group for the cluster's 5 nodes (10 addresses), more than the 10 allowed by default: ask the cloud, or plan fewer nodes"
	if len(p.Blocked) != 1 || p.Blocked[0] != want {
		t.Errorf("blocked %q, want %q", p.Blocked, want)
	}

	if p := planLimited(paperCluster(1, 1, 2), worldSpec{}); len(p.Blocked) != 0 || len(p.Actions) == 0 {
		t.Errorf("4 nodes (9 rules) refused: blocked %q", p.Blocked)
	}

	var nodes []districts.Node
	for _, id := range []string{"paper-master-1"} {
		nodes = append(nodes, pnode(id, "gce-europe", "master", districts.PhaseJoined))
	}
	for _, id := range []string{"paper-worker-1", "paper-worker-2", "paper-worker-3"} {
		nodes = append(nodes, pnode(id, "gce-europe", "worker", districts.PhaseJoined))
	}
	for _, id := range []string{"paper-worker-4", "paper-worker-5"} {
		nodes = append(nodes, pnode(id, "aws-europe", "worker", districts.PhaseJoined))
	}
	p = planLimited(paperCluster(1, 2, 2), worldSpec{nodes: nodes, platform: platformUp})
	if len(p.Blocked) != 0 || !strings.Contains(strings.Join(nodeActions(p), " "), "drain paper-worker-") {
		t.Errorf("removing a node from a cluster past the quota: blocked %q, actions %v", p.Blocked, nodeActions(p))
	}
}
