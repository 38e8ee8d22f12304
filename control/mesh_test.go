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
