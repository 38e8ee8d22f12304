package control

import (
	"slices"
	"strings"
	"testing"

	"github.com/cloudtransit/transit/districts"
)

// TestMeshStaysWithThePlatform: the mesh a platform was formed with stays
// when the default changes with the deployments (a cluster migrated into
// one cloud keeps its mesh); a cluster.json setting that differs from it
// is refused, and no node is changed.
func TestMeshStaysWithThePlatform(t *testing.T) {
	t.Parallel()
	c := paperCluster(1, 1, 1)
	c.Platform = "kubernetes"
	ds := simDistricts[:2]
	if got := c.Network(ds).Mesh; got != districts.MeshWireGuard {
		t.Fatalf("a Kubernetes cluster across two clouds defaults to mesh %s", got)
	}
	onlyGCE := c
	onlyGCE.Deployments = slices.DeleteFunc(slices.Clone(c.Deployments), func(d districts.Deployment) bool { return d.District == aws })
	formed := districts.Resources{Mesh: districts.MeshWireGuard}
	if n, err := meshSettings(onlyGCE, ds, formed); err != nil || n.Mesh != districts.MeshWireGuard {
		t.Errorf("migrated into one cloud: mesh %s (%v), want the platform's wireguard", n.Mesh, err)
	}
	if n, _ := meshSettings(onlyGCE, ds, districts.Resources{}); n.Mesh != districts.MeshNone {
		t.Errorf("a new cluster in one cloud: mesh %s, want none", n.Mesh)
	}

	off := c
	off.NetworkSettings = &districts.Network{Mesh: districts.MeshNone}
	ws := worldSpec{nodes: []districts.Node{master1}, platform: platformUp, formed: true}
	w := ws.world()
	w.state.Mesh = districts.MeshWireGuard
	p := buildPlan(planInput{cluster: off, districts: ds, world: w,
		avoid: map[string]bool{}, fresh: map[string]bool{}, ids: newNodeNumbers(c.ID, w)})
	if len(nodeActions(p)) != 0 || len(p.Blocked) != 1 || !strings.Contains(p.Blocked[0], "does not move a running platform onto or off the mesh") {
		t.Errorf("mesh turned off on a running platform: actions %v, blocked %q", nodeActions(p), p.Blocked)
	}
}

// TestMeshGroupsLetInThePortOnly: on the mesh a district's group lets in
// the mesh's port and no node address — groups made before (every node's
// addresses) are narrowed even while the platform does not answer, since
// no node needs them — and nodes joining or leaving do not change it.
func TestMeshGroupsLetInThePortOnly(t *testing.T) {
	t.Parallel()
	c := paperCluster(1, 1, 1)
	c.Platform = "kubernetes"
	nodes := []districts.Node{master1,
		pnode("paper-worker-1", gce, "worker", districts.PhaseJoined),
		pnode("paper-worker-2", aws, "worker", districts.PhaseJoined)}
	plan := func(c districts.Cluster, ws worldSpec, port int) Plan {
		w := ws.world()
		w.state.Mesh = districts.MeshWireGuard
		for i := range w.state.SecurityGroups {
			if port != 0 {
				w.state.SecurityGroups[i].Sources, w.state.SecurityGroups[i].MeshPort = nil, port
			}
		}
		return buildPlan(planInput{cluster: c, districts: simDistricts[:2], world: w,
			avoid: map[string]bool{}, fresh: map[string]bool{}, ids: newNodeNumbers(c.ID, w)})
	}
	groupActions := func(p Plan) (out []string) {
		for _, a := range p.Actions {
			if a.Group != "" {
				out = append(out, string(a.Kind)+" "+a.District)
			}
		}
		return out
	}

	for _, pv := range []platformView{platformUp, platformUnreachable} {
		p := plan(c, worldSpec{nodes: nodes, platform: pv, formed: true}, 0)
		if got := groupActions(p); !slices.Equal(got, []string{"update-group " + aws, "update-group " + gce}) {
			t.Errorf("platform %v, groups with node addresses: group actions %v, want both updated", pv, got)
		}
		for _, a := range p.Actions {
			if a.Kind == KindUpdateGroup && !strings.Contains(a.Reason, "UDP port 51820 from anywhere and no node address") {
				t.Errorf("update reason %q", a.Reason)
			}
		}
	}
	grown := paperCluster(1, 2, 2)
	grown.Platform = "kubernetes"
	if got := groupActions(plan(grown, worldSpec{nodes: nodes, platform: platformUp, formed: true}, districts.DefaultMeshPort)); len(got) != 0 {
		t.Errorf("two nodes more on the mesh: group actions %v, want none", got)
	}
	shrunk := paperCluster(1, 1, 0)
	shrunk.Platform = "kubernetes"
	p := plan(shrunk, worldSpec{nodes: nodes, platform: platformUp, formed: true}, districts.DefaultMeshPort)
	if got := groupActions(p); slices.ContainsFunc(got, func(s string) bool { return !strings.HasPrefix(s, "delete-group") }) {
		t.Errorf("a node fewer on the mesh: group actions %v, want none but the emptied district's deletion", got)
	}
	if got := groupActions(plan(c, worldSpec{nodes: nodes, platform: platformUp, formed: true}, 51821)); !slices.Equal(got, []string{"update-group " + aws, "update-group " + gce}) {
		t.Errorf("groups letting in another port: %v, want both updated", got)
	}
}
