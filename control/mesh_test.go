package control

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
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

// A node's end of the mesh that resources.json garbles (a key that is no
// WireGuard key, an address outside mesh_cidr, an address another node
// holds) never reaches a peers file, where transit-mesh would refuse
// every node's whole file: the node is asked what it runs, recorded
// anew, and every node gets its peers.
func TestGarbledMeshEntryReachesNoPeersFile(t *testing.T) {
	t.Parallel()
	garbles := map[string]func(n *districts.Node, other districts.Node){
		"malformed key":          func(n *districts.Node, _ districts.Node) { n.MeshKey = "not-a-wireguard-key" },
		"address off the range":  func(n *districts.Node, _ districts.Node) { n.MeshIP = "192.0.2.7" },
		"another node's address": func(n *districts.Node, other districts.Node) { n.MeshIP = other.MeshIP },
	}
	for name, garble := range garbles {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h, c := newMeshHarness(t), meshCluster(1, 1, 2)
			h.mustConverge(c)
			h.checkMesh()
			st := h.load()
			var master districts.Node
			for _, n := range st.Nodes {
				if n.ID == "paper-master-1" {
					master = n
				}
			}
			for i := range st.Nodes {
				if st.Nodes[i].ID == "paper-worker-1" {
					garble(&st.Nodes[i], master)
				}
			}
			st.MeshPeers = "" // and the peers are owed to everyone
			if err := h.save(st); err != nil {
				t.Fatal(err)
			}
			h.mustConverge(c) // checkConverged: no peers file refused
			h.checkMesh()
		})
	}
}

// A machine booted from an image of a node's disk answers with that
// node's mesh key: it is a copy, never recorded, never in a peers file,
// never joined; once machines boot with keys of their own it is replaced,
// and the node whose key it holds gets a new one.
func TestCopiedDiskNeverJoinsTheMesh(t *testing.T) {
	t.Parallel()
	h, c := newMeshHarness(t), meshCluster(1, 1, 1)
	h.mustConverge(c)
	master, _ := findNode(h.load(), "paper-master-1")
	h.sim.diskKey, h.sim.decisions = master.MeshKey, nil
	grown := meshCluster(1, 1, 2)
	h.prepare(grown)
	res, err := h.apply(grown, 0)
	if err == nil && res.Converged {
		t.Fatal("a machine with the master's mesh key joined")
	}
	named := false
	for _, n := range h.load().Nodes {
		if n.ID != master.ID && n.MeshKey == master.MeshKey {
			t.Errorf("node %s is recorded with the master's key", n.ID)
		}
	}
	for _, d := range h.sim.decisions {
		named = named || strings.Contains(d, "answers with node paper-master-1's mesh key: a copy of its disk: it joins nothing")
	}
	if !named {
		t.Errorf("no failed action names the copy: %q", h.sim.decisions)
	}
	for id, m := range h.sim.members {
		if in := h.sim.instances[m.machine]; id != master.ID && in != nil && in.mesh != nil && in.mesh.key == master.MeshKey {
			t.Errorf("%s, a copy of the master's disk, joined the platform", id)
		}
	}
	h.sim.diskKey = ""
	h.sim.clock.Advance(time.Hour) // past the launch backoff
	h.mustConverge(grown)
	h.checkMesh()
	// Whoever holds the copy could handshake as the master: its key
	// rotated, so the copy's is dead.
	if n, _ := findNode(h.load(), master.ID); n.MeshKey == master.MeshKey || n.MeshRotate != "" {
		t.Errorf("the master kept the key a copy of its disk holds (mesh_rotate %q)", n.MeshRotate)
	}
}

// A machine stopped while the mesh changed (a node removed, another
// joined at the freed address) and started again at the same addresses
// (an Elastic IP, a static IP, Nova SHUTOFF) still holds the old peers:
// it is owed the current ones whatever its addresses, and the removed
// node's mesh address goes to no new node while any node may still hold
// the removed node's key there.
func TestRestartedNodeTakesTheCurrentPeers(t *testing.T) {
	t.Parallel()
	h, c := newMeshHarness(t), meshCluster(1, 0, 3)
	h.mustConverge(c)
	stopped := h.instanceOf(t, "paper-worker-1")
	stopped.State = provider.InstanceStopped // its addresses stay
	gone := h.instanceOf(t, "paper-worker-2")
	goneAddr, goneKey := gone.mesh.addr, gone.mesh.key
	delete(h.sim.instances, gone.ProviderID) // deleted behind transit's back
	h.prepare(c)
	if _, err := h.apply(c, 0); err != nil && !errors.Is(err, ErrNotConverged) {
		t.Fatalf("apply with a worker stopped and one deleted: %v", err)
	}
	for _, n := range h.load().Nodes {
		if n.ID != "paper-worker-1" && n.MeshIP == goneAddr {
			t.Errorf("node %s got mesh address %s while stopped paper-worker-1 may still hold the deleted node's key there", n.ID, goneAddr)
		}
	}
	stopped.State = provider.InstanceRunning // started again, same addresses
	h.mustConverge(c)
	h.checkMesh() // every node's peers are the live nodes
	for _, p := range stopped.mesh.peers {
		if p.PublicKey == goneKey {
			t.Errorf("the restarted node still has the deleted node's key among its peers, at %s", p.Address)
		}
	}
}

// newMeshHarness is the simulator with the platform on the mesh.
func newMeshHarness(t *testing.T) *harness {
	h := newTestHarness(t)
	h.sim.meshOn = true
	return h
}

// meshCluster is paperCluster as Kubernetes on the node mesh.
func meshCluster(masters, gceWorkers, awsWorkers int) districts.Cluster {
	c := paperCluster(masters, gceWorkers, awsWorkers)
	c.Platform = "kubernetes"
	c.NetworkSettings = &districts.Network{Mesh: districts.MeshWireGuard}
	return c
}
