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
	want := "district aws-europe: its security group would take 11 of rules per group for the cluster's 5 nodes (10 addresses), more than the 10 allowed by default: ask the cloud, or plan fewer nodes, or put the cluster on the node mesh (cluster.json \"network\": {\"mesh\": \"wireguard\"}): its groups let in one port, whatever the size"
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

// meshRules is tenRules whose mesh rule is one more.
type meshRules struct{}

func (meshRules) GroupLimit(sources int, mesh bool) provider.GroupLimit {
	need := sources + 1
	if mesh {
		need++
	}
	return provider.GroupLimit{Need: need, Max: 10, Quota: "rules per group", Raise: "ask the cloud"}
}

// TestGroupLimitOnTheMesh: on the node mesh a group lets in one port, so
// a 300-node Kubernetes cluster fits a quota that ten nodes' addresses
// outgrow; off the mesh, the refusal names the mesh as a way out.
func TestGroupLimitOnTheMesh(t *testing.T) {
	t.Parallel()
	c := paperCluster(3, 147, 150)
	c.Platform = "kubernetes"
	plan := func(c districts.Cluster) Plan {
		w := worldSpec{}.world()
		return buildPlan(planInput{cluster: c, districts: simDistricts[:2], world: w, avoid: map[string]bool{}, fresh: map[string]bool{},
			ids: newNodeNumbers(c.ID, w), limits: map[string]provider.GroupLimiter{"aws-europe": meshRules{}, "gce-europe": meshRules{}}})
	}
	c.NetworkSettings = &districts.Network{Mesh: districts.MeshWireGuard}
	p := plan(c)
	if len(p.Blocked) != 0 || len(p.Actions) == 0 {
		t.Fatalf("300 nodes on the mesh: blocked %q, %d actions", p.Blocked, len(p.Actions))
	}
	for _, a := range p.Actions {
		if a.Kind == KindAllow || a.Kind == KindRevoke {
			t.Errorf("a group on the mesh changes with its nodes: %+v", a)
		}
	}
	c.NetworkSettings = &districts.Network{Mesh: districts.MeshNone}
	p = plan(c)
	if len(p.Actions) != 0 || len(p.Blocked) != 2 || !strings.Contains(p.Blocked[0], `put the cluster on the node mesh (cluster.json "network": {"mesh": "wireguard"})`) {
		t.Errorf("300 nodes off the mesh: %d actions, blocked %q", len(p.Actions), p.Blocked)
	}
}
