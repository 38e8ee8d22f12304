package swarm

import (
	"context"
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

func TestRemoveGoneMasterNeverDialsIt(t *testing.T) {
	t.Parallel()
	list := inspectOf(manager("a", master1.ID, "reachable"), manager("b", master2.ID, "unreachable"), manager("c", "c-master-3", "reachable"))
	var scripts []string
	f := &fakeNodes{nodes: map[string]func(context.Context, string) (string, error){
		master1.ID: func(_ context.Context, script string) (string, error) {
			scripts = append(scripts, script) // one call at a time
			return list, nil
		},
	}}
	gone := master2
	gone.PublicIP = ""
	// The driver once knew the gone master as a manager, on its old
	// address; it must not try it.
	d := &driver{exec: f.exec, managers: []districts.Node{master2, master1}}
	if err := d.Remove(t.Context(), gone); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	want := []string{
		master1.ID + ": list swarm nodes",
		master1.ID + ": demote node " + gone.ID,
		master1.ID + ": remove node " + gone.ID + " from the swarm",
	}
	if diff := cmp.Diff(want, f.calls()); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	if len(scripts) == 3 {
		if !strings.Contains(scripts[1], "docker node demote 'b'") || !strings.Contains(scripts[2], "docker node rm --force 'b'") {
			t.Errorf("demote and remove scripts do not name swarm node b:\n%s\n%s", scripts[1], scripts[2])
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
	d := &driver{exec: f.exec, managers: []districts.Node{master1}}
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
