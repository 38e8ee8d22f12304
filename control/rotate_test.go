package control

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// meshKeys are the live nodes' recorded mesh keys by node id.
func meshKeys(s districts.Resources) map[string]string {
	keys := map[string]string{}
	for _, n := range liveNodes(s) {
		keys[n.ID] = n.MeshKey
	}
	return keys
}

// Keys older than network.key_max_age rotate, one node at a time; the
// mesh stays whole (no peer is ever given a key its node does not run:
// the simulator checks) and the next run has nothing to do.
func TestKeysRotateByAge(t *testing.T) {
	t.Parallel()
	h, c := newMeshHarness(t), meshCluster(1, 1, 2)
	h.mustConverge(c)
	before := meshKeys(h.load())
	h.sim.clock.Advance(29 * 24 * time.Hour)
	h.sim.decisions = nil
	h.mustConverge(c)
	if got := meshKeys(h.load()); !equalMaps(got, before) {
		t.Fatalf("keys 29 days old rotated (key_max_age 30d): %v → %v", before, got)
	}
	h.sim.clock.Advance(2 * 24 * time.Hour)
	h.sim.decisions = nil
	rotatedFrom := h.sim.clock.Now()
	h.mustConverge(c)
	h.checkMesh()
	after := h.load()
	for id, key := range meshKeys(after) {
		if key == before[id] {
			t.Errorf("node %s kept its 31-day-old key", id)
		}
		n, _ := findNode(after, id)
		if n.MeshKeyAt.Before(rotatedFrom) || n.MeshKeyNext != "" {
			t.Errorf("node %s: mesh_key_at %s, mesh_key_next %q after its rotation", id, n.MeshKeyAt, n.MeshKeyNext)
		}
	}
	rotations := 0
	for _, d := range h.sim.decisions {
		if strings.HasPrefix(d, "rotate-key ") {
			rotations++
			if !strings.Contains(d, "its mesh key is 31d old (network.key_max_age 30d)") {
				t.Errorf("rotation's reason: %q", d)
			}
		}
	}
	if rotations != len(before) {
		t.Errorf("%d rotations for %d nodes: %q", rotations, len(before), h.sim.decisions)
	}
	if len(h.sim.violations) > 0 {
		t.Errorf("violations: %v", h.sim.violations)
	}
}

// A run killed at any step of a rotation leaves a mesh the next run makes
// whole, with every node's key the one it runs.
func TestRotationSurvivesACrashAtEveryStep(t *testing.T) {
	t.Parallel()
	c := meshCluster(1, 1, 1)
	due := func() *harness {
		h := newMeshHarness(t)
		h.mustConverge(c)
		h.sim.clock.Advance(31 * 24 * time.Hour)
		return h
	}
	h := due()
	h.sim.log = nil
	h.mustConverge(c)
	calls := len(h.sim.log)
	for crashAt := 1; crashAt <= calls; crashAt++ {
		h := due()
		before := meshKeys(h.load())
		if _, err := h.apply(c, crashAt); err == nil && h.sim.crashed {
			t.Fatalf("crash at call %d went unnoticed", crashAt)
		}
		h.mustConverge(c)
		h.checkMesh()
		for id, key := range meshKeys(h.load()) {
			if key == before[id] {
				t.Errorf("crash at call %d: node %s kept its old key", crashAt, id)
			}
		}
		if len(h.sim.violations) > 0 || t.Failed() {
			t.Fatalf("crash at call %d (%v): %v", crashAt, h.sim.log, h.sim.violations)
		}
	}
}

// transit mesh rotate NODE rotates that node's key now, and only its; a
// node that is not the cluster's is refused before anything changes, and
// one whose machine does not run blocks the run.
func TestRotateAsked(t *testing.T) {
	t.Parallel()
	h, c := newMeshHarness(t), meshCluster(1, 0, 2)
	h.mustConverge(c)
	before := meshKeys(h.load())

	o := h.options(c)
	o.RotateKeys = []string{"paper-worker-9"}
	_, err := Apply(t.Context(), o)
	if !errors.Is(err, ErrUnknownNode) || !strings.Contains(err.Error(), `no node "paper-worker-9" with a mesh key in cluster paper (its nodes on the mesh: paper-master-1, paper-worker-1, paper-worker-2)`) {
		t.Fatalf("rotating an unknown node: %v", err)
	}

	h.sim.rotate = []string{"paper-worker-1"}
	h.mustConverge(c)
	h.checkMesh()
	got := meshKeys(h.load())
	for id, key := range got {
		if changed := key != before[id]; changed != (id == "paper-worker-1") {
			t.Errorf("node %s: key changed %v", id, changed)
		}
	}
	// Done once: the run's later rounds, and the next run, leave it.
	h.sim.rotate = nil
	h.mustConverge(c)
	if again := meshKeys(h.load()); !equalMaps(again, got) {
		t.Errorf("keys changed again: %v → %v", got, again)
	}

	h.instanceOf(t, "paper-worker-2").State = provider.InstanceStopped
	h.sim.rotate = []string{"paper-worker-2"}
	h.prepare(c)
	_, err = h.apply(c, 0)
	if !errors.Is(err, ErrNotConverged) || !strings.Contains(err.Error(), "node paper-worker-2's mesh key is not rotated now") {
		t.Fatalf("rotating a stopped node: %v", err)
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
