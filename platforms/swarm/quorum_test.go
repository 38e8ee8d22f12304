package swarm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// manager is one manager's `docker node inspect` entry; reach is its
// ManagerStatus.Reachability (a manager the others cannot reach is down).
func manager(id, node, reach string) string {
	state := "ready"
	if reach != "reachable" {
		state = "down"
	}
	return fmt.Sprintf(`{"ID":%q,"Spec":{"Labels":{"transit-node":%q},"Role":"manager","Availability":"active"},
 "Description":{"Hostname":%q},"Status":{"State":%q},"ManagerStatus":{"Reachability":%q}}`, id, node, node, state, reach)
}

func worker(id, node string) string {
	return fmt.Sprintf(`{"ID":%q,"Spec":{"Labels":{"transit-node":%q},"Role":"worker","Availability":"active"},
 "Description":{"Hostname":%q},"Status":{"State":"ready"}}`, id, node, node)
}

func inspectOf(entries ...string) string { return "[" + strings.Join(entries, ",\n") + "]" }

func TestQuorum(t *testing.T) {
	t.Parallel()
	fixture, err := os.ReadFile("testdata/inspect-managers-one-down.json")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		inspect   string
		leaving   string
		wantCount raftCount
		wantOK    bool
		wantWhy   string
	}{
		{
			name:      "three reachable managers, one leaves",
			inspect:   inspectOf(manager("a", "m1", "reachable"), manager("b", "m2", "reachable"), manager("c", "m3", "reachable"), worker("d", "w1")),
			leaving:   "m1",
			wantCount: raftCount{voters: 3, reachable: 3, leavingReachable: 1},
			wantOK:    true,
		},
		{
			name:      "a reachable manager may not leave when another is down",
			inspect:   string(fixture),
			leaving:   "e2e-master-1",
			wantCount: raftCount{voters: 3, reachable: 2, leavingReachable: 1},
			wantWhy:   "it would leave 1 reachable of 2 masters, below quorum 2",
		},
		{
			// Taking away a dead seat needs only a quorum now.
			name:      "the down manager may leave while two of three answer",
			inspect:   string(fixture),
			leaving:   "e2e-master-2",
			wantCount: raftCount{voters: 3, reachable: 2, leavingUnreachable: 1},
			wantOK:    true,
		},
		{
			name:      "a dead manager may not leave a swarm without quorum",
			inspect:   inspectOf(manager("a", "m1", "unreachable"), manager("b", "m2", "unreachable"), manager("c", "m3", "reachable")),
			leaving:   "m1",
			wantCount: raftCount{voters: 3, reachable: 1, leavingUnreachable: 1},
			wantWhy:   "the platform has no quorum now: 1 of 3 masters reachable, 2 needed",
		},
		{
			name:      "the last manager",
			inspect:   inspectOf(manager("a", "m1", "reachable"), worker("b", "w1")),
			leaving:   "m1",
			wantCount: raftCount{voters: 1, reachable: 1, leavingReachable: 1},
			wantWhy:   "it is the last master",
		},
		{
			name:      "the last manager, dead",
			inspect:   inspectOf(manager("a", "m1", "unreachable"), worker("b", "w1")),
			leaving:   "m1",
			wantCount: raftCount{voters: 1, leavingUnreachable: 1},
			wantWhy:   "it is the last master",
		},
		{
			// Transit calls it a master; the swarm says worker: no seat,
			// no quorum to keep, even in a swarm without one.
			name:      "a node without a seat may leave",
			inspect:   inspectOf(manager("a", "m1", "unreachable"), manager("b", "m2", "reachable"), worker("c", "m3")),
			leaving:   "m3",
			wantCount: raftCount{voters: 2, reachable: 1},
			wantOK:    true,
		},
		{
			name:      "a node not in the swarm may leave",
			inspect:   inspectOf(manager("a", "m1", "reachable")),
			leaving:   "m9",
			wantCount: raftCount{voters: 1, reachable: 1},
			wantOK:    true,
		},
		{
			// The node left and joined again as a worker; its old seat
			// is still a voter, and removing it needs a quorum.
			name:      "a stale seat of the leaving node counts",
			inspect:   inspectOf(manager("old", "m2", "unreachable"), worker("new", "m2"), manager("a", "m1", "reachable")),
			leaving:   "m2",
			wantCount: raftCount{voters: 2, reachable: 1, leavingUnreachable: 1},
			wantWhy:   "the platform has no quorum now: 1 of 2 masters reachable, 2 needed",
		},
		{
			name: "a stale seat and a live one both leave",
			inspect: inspectOf(manager("old", "m1", "unreachable"), manager("new", "m1", "reachable"),
				manager("b", "m2", "reachable"), manager("c", "m3", "reachable"), manager("d", "m4", "reachable")),
			leaving:   "m1",
			wantCount: raftCount{voters: 5, reachable: 4, leavingReachable: 1, leavingUnreachable: 1},
			wantOK:    true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			list := nodesJSON(t, tt.inspect)
			if diff := cmp.Diff(tt.wantCount, countRaft(list, tt.leaving), cmp.AllowUnexported(raftCount{})); diff != "" {
				t.Errorf("countRaft (-want +got):\n%s", diff)
			}
			err := mayRemove(list, tt.leaving)
			if tt.wantOK {
				if err != nil {
					t.Errorf("mayRemove: %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, provider.ErrQuorum) {
				t.Fatalf("mayRemove: %v, want an error matching ErrQuorum", err)
			}
			if want := "master " + tt.leaving + " may not leave: " + tt.wantWhy; err.Error() != want {
				t.Errorf("mayRemove: %q, want %q", err, want)
			}
		})
	}
}

func TestMayRemoveMasterAsksALiveManager(t *testing.T) {
	t.Parallel()
	list := inspectOf(manager("a", master1.ID, "reachable"), manager("b", master2.ID, "unreachable"), manager("c", "c-master-3", "reachable"))
	f := &fakeNodes{nodes: map[string]func(context.Context, string) (string, error){
		master1.ID: func(_ context.Context, script string) (string, error) {
			if script == membersScript() {
				return "active true a\n" + list, nil
			}
			return list, nil
		},
	}}
	d := testDriver(f)
	gone := master2
	gone.PublicIP = "" // its machine was deleted
	// No Members call yet: the driver asks the nodes which manager serves.
	if err := d.MayRemoveMaster(t.Context(), gone, []districts.Node{master1, gone}); err != nil {
		t.Fatalf("MayRemoveMaster(dead %s) with two of three managers reachable: %v", gone.ID, err)
	}
	for _, c := range f.calls() {
		if strings.HasPrefix(c, gone.ID+":") {
			t.Errorf("the gone master was asked: %v", f.calls())
		}
	}
	if err := d.MayRemoveMaster(t.Context(), master1, []districts.Node{master1, gone}); !errors.Is(err, provider.ErrQuorum) {
		t.Errorf("MayRemoveMaster(%s) with the other reachable manager and a dead one: %v, want ErrQuorum", master1.ID, err)
	}
}
