package swarm

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cloudtransit/transit/districts"
)

func TestPlanRemoval(t *testing.T) {
	t.Parallel()
	gone := func(n districts.Node) districts.Node {
		n.PublicIP, n.PrivateIP = "", ""
		return n
	}
	tests := []struct {
		name    string
		inspect string
		node    districts.Node
		want    removal
	}{
		{
			name:    "a reachable worker leaves itself, then is deleted",
			inspect: inspectOf(manager("a", master1.ID, "reachable"), worker("w", worker1.ID)),
			node:    worker1,
			want:    removal{leave: true, remove: []string{"w"}},
		},
		{
			name:    "a reachable manager is demoted first",
			inspect: inspectOf(manager("a", master1.ID, "reachable"), manager("b", master2.ID, "reachable")),
			node:    master2,
			want:    removal{demote: []string{"b"}, leave: true, remove: []string{"b"}},
		},
		{
			// Its machine is gone: nobody dials it, a manager demotes
			// and deletes it.
			name:    "a manager whose machine is gone",
			inspect: inspectOf(manager("a", master1.ID, "reachable"), manager("b", master2.ID, "unreachable")),
			node:    gone(master2),
			want:    removal{demote: []string{"b"}, remove: []string{"b"}},
		},
		{
			name:    "a worker whose machine is gone",
			inspect: inspectOf(manager("a", master1.ID, "reachable"), worker("w", worker1.ID)),
			node:    gone(worker1),
			want:    removal{remove: []string{"w"}},
		},
		{
			name:    "not a member",
			inspect: inspectOf(manager("a", master1.ID, "reachable")),
			node:    worker1,
		},
		{
			name: "every entry of a node that joined twice, the dead seat demoted first",
			inspect: inspectOf(manager("new", master2.ID, "reachable"), manager("a", master1.ID, "reachable"),
				manager("old", master2.ID, "unreachable"), worker("older", master2.ID)),
			node: master2,
			want: removal{demote: []string{"old", "new"}, leave: true, remove: []string{"new", "old", "older"}},
		},
		{
			name: "found by hostname when the label is missing",
			inspect: `[{"ID":"h","Spec":{"Labels":{},"Role":"worker","Availability":"active"},
 "Description":{"Hostname":"c-worker-1"},"Status":{"State":"down"}}]`,
			node: gone(worker1),
			want: removal{remove: []string{"h"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := planRemoval(nodesJSON(t, tt.inspect), tt.node)
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(removal{})); diff != "" {
				t.Errorf("planRemoval (-want +got):\n%s", diff)
			}
		})
	}
}

var master3 = districts.Node{ID: "c-master-3", Role: districts.RoleMaster, PublicIP: "10.0.0.6", Phase: districts.PhaseJoined}

func TestRemoveGoneMasterNeverDialsIt(t *testing.T) {
	t.Parallel()
	f := newFakeSwarm(t, seat("a", master1.ID, true), seat("b", master2.ID, false), seat("c", master3.ID, false))
	f.entries[1].down = true
	gone := master2
	gone.PublicIP = ""
	// The driver once knew the gone master as a manager, on its old
	// address; it must not try it.
	d := testDriver(f, master2, master1)
	if err := d.Remove(t.Context(), gone); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	f.check()
	want := []string{
		master1.ID + ": demote b",
		master1.ID + ": rotate",
		master1.ID + ": rm --force b",
	}
	if diff := cmp.Diff(want, f.steps); diff != "" {
		t.Errorf("steps (-want +got):\n%s", diff)
	}
}

// A manager leaving: demote, wait until another manager reports the seat
// gone and a leader, rotate the tokens it knew, leave without --force,
// delete it from the node list at once (--force: it left, and the managers
// would list it until its heartbeats time out). The swarm keeps its leader going from 2 to 1
// and from 3 to 2 managers, even when the leader leaves.
func TestRemoveManagerKeepsTheLeader(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		entries []*fakeEntry
		leaving districts.Node
		want    []string
	}{
		{
			name:    "2 to 1, the leader leaves",
			entries: []*fakeEntry{seat("a", master1.ID, true), seat("b", master2.ID, false)},
			leaving: master1,
			want: []string{
				master2.ID + ": demote a",
				master2.ID + ": rotate",
				master1.ID + ": leave",
				master2.ID + ": rm --force a",
			},
		},
		{
			name:    "2 to 1, a follower leaves",
			entries: []*fakeEntry{seat("a", master1.ID, true), seat("b", master2.ID, false)},
			leaving: master2,
			want: []string{
				master1.ID + ": demote b",
				master1.ID + ": rotate",
				master2.ID + ": leave",
				master1.ID + ": rm --force b",
			},
		},
		{
			name:    "3 to 2, the leader leaves",
			entries: []*fakeEntry{seat("a", master1.ID, false), seat("b", master2.ID, true), seat("c", master3.ID, false)},
			leaving: master2,
			want: []string{
				master1.ID + ": demote b",
				master1.ID + ": rotate",
				master2.ID + ": leave",
				master1.ID + ": rm --force b",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeSwarm(t, tt.entries...)
			d := testDriver(f, master1, master2, master3)
			if err := d.Remove(t.Context(), tt.leaving); err != nil {
				t.Fatalf("Remove: %v", err)
			}
			f.check()
			if diff := cmp.Diff(tt.want, f.steps); diff != "" {
				t.Errorf("steps (-want +got):\n%s", diff)
			}
			if f.rotations != 1 {
				t.Errorf("join tokens rotated %d times, want once", f.rotations)
			}
			if slices.ContainsFunc(d.managers, func(m districts.Node) bool { return m.ID == tt.leaving.ID }) {
				t.Errorf("the driver still runs manager commands on %s", tt.leaving.ID)
			}
		})
	}
}

// A manager whose machine exists but does not answer cannot leave: it is
// demoted, and deleted with --force once its seat is gone.
func TestRemoveUnreachableManager(t *testing.T) {
	t.Parallel()
	f := newFakeSwarm(t, seat("a", master1.ID, true), seat("b", master2.ID, false), seat("c", master3.ID, false))
	f.entries[1].down = true
	f.dead[master2.ID] = true
	if err := testDriver(f, master1).Remove(t.Context(), master2); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	f.check()
	want := []string{
		master1.ID + ": demote b",
		master1.ID + ": rotate",
		master2.ID + ": unreachable: docker swarm leave",
		master1.ID + ": rm --force b",
	}
	if diff := cmp.Diff(want, f.steps); diff != "" {
		t.Errorf("steps (-want +got):\n%s", diff)
	}
}

// A demotion the swarm never carries out: the node is not asked to leave.
func TestRemoveWaitsForTheDemotionOrGivesUp(t *testing.T) {
	t.Parallel()
	f := newFakeSwarm(t, seat("a", master1.ID, true), seat("b", master2.ID, false))
	f.demoteLag = 1 << 30
	err := testDriver(f, master1).Remove(t.Context(), master2)
	if err == nil || !strings.Contains(err.Error(), "still holds a manager seat") || !strings.Contains(err.Error(), master2.ID) {
		t.Fatalf("Remove: %v, want an error naming %s and its seat", err, master2.ID)
	}
	f.check()
	if want := []string{master1.ID + ": demote b"}; !cmp.Equal(want, f.steps) {
		t.Errorf("steps %q, want %q", f.steps, want)
	}
}

// The token rotation fails after the demotion went through: the retried
// Remove finds a worker, yet still rotates before the node leaves, whether
// the same driver retries or a new transit process (the first was killed
// after the demotion; the mark in the swarm tells it).
func TestRemoveRotatesAfterAFailedRotation(t *testing.T) {
	t.Parallel()
	for _, newProcess := range []bool{false, true} {
		f := newFakeSwarm(t, seat("a", master1.ID, true), seat("b", master2.ID, false))
		f.failOnce["rotate"] = true
		d := testDriver(f, master1)
		if err := d.Remove(t.Context(), master2); err == nil {
			t.Fatal("Remove succeeded though the rotation failed")
		}
		if newProcess {
			d = testDriver(f, master1)
		}
		if err := d.Remove(t.Context(), master2); err != nil {
			t.Fatalf("Remove again (new process %t): %v", newProcess, err)
		}
		f.check()
		want := []string{
			master1.ID + ": demote b",
			master1.ID + ": failed: rotate the join tokens",
			master1.ID + ": rotate",
			master2.ID + ": leave",
			master1.ID + ": rm --force b",
		}
		if diff := cmp.Diff(want, f.steps); diff != "" {
			t.Errorf("new process %t: steps (-want +got):\n%s", newProcess, diff)
		}
	}
}

func TestRemoveReachableWorker(t *testing.T) {
	t.Parallel()
	list := inspectOf(manager("a", master1.ID, "reachable"), worker("w", worker1.ID))
	f := &fakeNodes{nodes: map[string]func(context.Context, string) (string, error){
		master1.ID: replies(list),
		worker1.ID: replies(""),
	}}
	d := testDriver(f, master1)
	if err := d.Remove(t.Context(), worker1); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	want := []string{
		master1.ID + ": list swarm nodes",
		worker1.ID + ": docker swarm leave",
		master1.ID + ": remove node " + worker1.ID + " from the swarm",
	}
	if diff := cmp.Diff(want, f.calls()); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
}
