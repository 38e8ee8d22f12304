package swarm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cloudtransit/transit/clock/clocktest"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/platforms/ssh"
	"github.com/cloudtransit/transit/provider"
)

func TestParseLocalState(t *testing.T) {
	t.Parallel()
	tests := []struct {
		line    string
		want    localState
		inSwarm bool
		serves  bool
		wantErr bool
	}{
		{line: "none", want: localState{State: "none"}},
		// An engine that runs but never joined a swarm is in none.
		{line: "inactive false ", want: localState{State: "inactive"}},
		{line: "down", want: localState{State: "down"}, inSwarm: true},
		{line: "active true abc", want: localState{State: "active", Manager: true, NodeID: "abc"}, inSwarm: true, serves: true},
		{line: "active false abc", want: localState{State: "active", NodeID: "abc"}, inSwarm: true},
		{line: "pending false abc", want: localState{State: "pending", NodeID: "abc"}, inSwarm: true},
		{line: "error false abc", want: localState{State: "error", NodeID: "abc"}, inSwarm: true},
		{line: "locked true abc", want: localState{State: "locked", Manager: true, NodeID: "abc"}, inSwarm: true},
		{line: "", wantErr: true},
		{line: "Cannot connect to the Docker daemon", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.line, func(t *testing.T) {
			t.Parallel()
			got, err := parseLocalState(tt.line)
			if (err != nil) != tt.wantErr {
				t.Fatalf("parseLocalState(%q) error = %v, want error %t", tt.line, err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("parseLocalState(%q) (-want +got):\n%s", tt.line, diff)
			}
			if got.inSwarm() != tt.inSwarm || got.serves() != tt.serves {
				t.Errorf("%q: inSwarm %t serves %t, want %t %t", tt.line, got.inSwarm(), got.serves(), tt.inSwarm, tt.serves)
			}
		})
	}
}

// Answers as nodes give them.
func said(id, out string) answer {
	return parseAnswer(districts.Node{ID: id}, out)
}

func failed(id string) answer {
	return answer{node: districts.Node{ID: id}, err: fmt.Errorf("%s (10.0.0.9:22): %w after 2m0s: connection refused", id, ssh.ErrUnreachable)}
}

func TestJudge(t *testing.T) {
	t.Parallel()
	const list = "active true aaa\n" + `[{"ID":"aaa","Spec":{"Role":"manager"}}]`
	tests := []struct {
		name        string
		masters     []answer
		workers     []answer
		wantList    []string // swarm node ids
		wantFrom    string
		wantNone    bool     // ErrNoPlatform
		wantMasters []string // UnreachableError.Masters
		wantSilent  []string // UnreachableError.Silent
		wantLost    bool     // UnreachableError.Lost()
		wantSays    []string // in the error text
	}{
		{
			name:     "no nodes at all",
			wantNone: true,
		},
		{
			name:     "every node answered and none is in a swarm",
			masters:  []answer{said("m1", "none\n"), said("m2", "inactive false \n")},
			workers:  []answer{said("w1", "inactive false \n"), said("w2", "none\n")},
			wantNone: true,
		},
		{
			name:     "one master serves, another is dead",
			masters:  []answer{failed("m1"), said("m2", list)},
			wantList: []string{"aaa"},
			wantFrom: "m2",
		},
		{
			// The swarm's roles, not transit's: a node transit made a
			// worker is its manager (promoted by hand, or the roles
			// were swapped), and the masters are its workers.
			name:     "a worker is the swarm's manager",
			masters:  []answer{said("m1", "active false x\n")},
			workers:  []answer{said("w1", "inactive false \n"), said("w2", list)},
			wantList: []string{"aaa"},
			wantFrom: "w2",
		},
		{
			// The issue "No master answered becomes build a new
			// platform": the master machines vanished, the workers
			// still hold the swarm.
			name:     "no master among nodes but a worker is in a swarm",
			workers:  []answer{said("w1", "active false w1id\n"), said("w2", "inactive false \n")},
			wantLost: true,
			wantSays: []string{"w1 (active)"},
		},
		{
			name:       "no master among nodes and a worker cannot be asked",
			workers:    []answer{failed("w1"), said("w2", "none\n")},
			wantSilent: []string{"w1"},
			wantSays:   []string{"w1 (10.0.0.9:22)"},
		},
		{
			// Silence proves nothing: the platform may or may not have
			// formed, so the answer is neither "none" nor "lost".
			name:       "every master in no swarm, a worker does not answer",
			masters:    []answer{said("m1", "none\n"), said("m2", "inactive false \n")},
			workers:    []answer{said("w1", "none\n"), failed("w2")},
			wantSilent: []string{"w2"},
			wantSays:   []string{"master m1 is in no swarm", "w2 (10.0.0.9:22)"},
		},
		{
			name:       "every master in no swarm, a worker in one and another silent",
			masters:    []answer{said("m1", "none\n")},
			workers:    []answer{said("w1", "active false a\n"), failed("w2")},
			wantSilent: []string{"w2"},
			wantSays:   []string{"workers in a swarm no master serves: w1 (active)"},
		},
		{
			name:       "the masters are workers of a swarm and a worker does not answer",
			masters:    []answer{said("m1", "active false x\n")},
			workers:    []answer{failed("w1")},
			wantSilent: []string{"w1"},
		},
		{
			name:        "the only master is unreachable",
			masters:     []answer{failed("m1")},
			wantMasters: []string{"m1"},
			wantSays:    []string{"m1 (10.0.0.9:22)", "not reachable over SSH"},
		},
		{
			name:        "a master's engine is down",
			masters:     []answer{said("m1", "down\n"), said("m2", "none\n")},
			wantMasters: []string{"m1"}, // m2 answered
			wantSays:    []string{"master m1 belongs to a swarm but its docker engine is not running"},
		},
		{
			name:        "a master is a swarm worker, or pending",
			masters:     []answer{said("m1", "active false x\n"), said("m2", "pending false y\n")},
			wantMasters: []string{"m2"}, // m1 answered: it is a worker
			wantSays:    []string{"master m1 is only a worker of its swarm", "master m2 cannot serve its swarm now (state pending)"},
		},
		{
			// Every node answered: the swarm the nodes are in is lost.
			name:     "the masters are workers of a swarm no manager serves",
			masters:  []answer{said("m1", "active false x\n")},
			workers:  []answer{said("w1", "active false a\n")},
			wantLost: true,
			wantSays: []string{"master m1 is only a worker of its swarm", "workers in a swarm no master serves: w1 (active)"},
		},
		{
			name:        "a locked manager cannot list",
			masters:     []answer{said("m1", "locked true x\n")},
			wantMasters: []string{"m1"},
			wantSays:    []string{"state locked"},
		},
		{
			name:     "masters in no swarm, workers still are",
			masters:  []answer{said("m1", "none\n")},
			workers:  []answer{said("w1", "error false a\n"), said("w2", "locked false b\n"), said("w3", "down\n")},
			wantLost: true, // m1 answered, and so did every worker
			wantSays: []string{"master m1 is in no swarm", "workers in a swarm no master serves: w1 (error), w2 (locked), w3 (down)"},
		},
		{
			name:        "a master answers something unreadable",
			masters:     []answer{said("m1", "Cannot connect\n")},
			wantMasters: []string{"m1"},
			wantSays:    []string{`m1: unexpected swarm state "Cannot connect"`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			list, from, err := judge(tt.masters, tt.workers)
			var ids []string
			for _, sn := range list {
				ids = append(ids, sn.ID)
			}
			if diff := cmp.Diff(tt.wantList, ids); diff != "" {
				t.Errorf("list (-want +got):\n%s", diff)
			}
			if from.ID != tt.wantFrom {
				t.Errorf("list from %q, want %q", from.ID, tt.wantFrom)
			}
			switch {
			case tt.wantList != nil:
				if err != nil {
					t.Errorf("error %v, want none", err)
				}
				return
			case tt.wantNone:
				if !errors.Is(err, provider.ErrNoPlatform) {
					t.Errorf("error %v, want ErrNoPlatform", err)
				}
				return
			}
			if errors.Is(err, provider.ErrNoPlatform) || !errors.Is(err, provider.ErrPlatformUnreachable) {
				t.Fatalf("error %v, want ErrPlatformUnreachable and not ErrNoPlatform", err)
			}
			var ue *provider.UnreachableError
			if !errors.As(err, &ue) {
				t.Fatalf("error %T, want *provider.UnreachableError", err)
			}
			if diff := cmp.Diff(tt.wantMasters, ue.Masters); diff != "" {
				t.Errorf("masters (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantSilent, ue.Silent); diff != "" {
				t.Errorf("silent (-want +got):\n%s", diff)
			}
			if ue.Lost() != tt.wantLost {
				t.Errorf("Lost() = %t, want %t: %v", ue.Lost(), tt.wantLost, err)
			}
			for _, s := range tt.wantSays {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error does not say %q:\n%v", s, err)
				}
			}
		})
	}
}

// fakeNodes stands in for SSH: it answers each script from a node by the
// node's function and records what ran where, and with which stdin.
type fakeNodes struct {
	mu     sync.Mutex
	ran    []string // "<node id>: <name>"
	stdins []string // "<node id>: <name>: <stdin>" for runs given one
	nodes  map[string]func(ctx context.Context, script string) (string, error)
	// uploaded holds what Upload wrote: "<node id>:<path>" → "<mode> <content>".
	uploaded map[string]string
}

var _ runner = (*fakeNodes)(nil)

func (f *fakeNodes) Run(ctx context.Context, n districts.Node, name, script string, stdin []byte) (string, error) {
	f.mu.Lock()
	f.ran = append(f.ran, n.ID+": "+name)
	if stdin != nil {
		f.stdins = append(f.stdins, n.ID+": "+name+": "+string(stdin))
	}
	answer, ok := f.nodes[n.ID]
	f.mu.Unlock()
	if !ok {
		return "", fmt.Errorf("%s: test has no such node", n.ID)
	}
	return answer(ctx, script)
}

func (f *fakeNodes) Upload(_ context.Context, n districts.Node, path string, mode fs.FileMode, content io.Reader, size int64) error {
	data, err := io.ReadAll(io.LimitReader(content, size))
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ran = append(f.ran, n.ID+": upload "+path)
	if f.uploaded == nil {
		f.uploaded = map[string]string{}
	}
	f.uploaded[n.ID+":"+path] = fmt.Sprintf("%04o %s", mode, data)
	return nil
}

func (f *fakeNodes) calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.ran)
}

// testDriver is a driver on r with a fake clock, knowing managers.
func testDriver(r runner, managers ...districts.Node) *driver {
	d := newDriver("c", Options{Clock: clocktest.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))}, r)
	d.managers = managers
	return d
}

// replies answers out, unless ctx ended first (as a session would).
func replies(out string) func(context.Context, string) (string, error) {
	return func(ctx context.Context, _ string) (string, error) {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		return out, nil
	}
}

// dead is a machine that does not answer: the dial waits until ctx ends.
func dead(id string) func(context.Context, string) (string, error) {
	return func(ctx context.Context, _ string) (string, error) {
		<-ctx.Done()
		return "", fmt.Errorf("%s (10.0.0.9:22): connect over SSH: %w", id, ctx.Err())
	}
}

var (
	master1 = districts.Node{ID: "c-master-1", Role: districts.RoleMaster, PublicIP: "10.0.0.2"}
	master2 = districts.Node{ID: "c-master-2", Role: districts.RoleMaster, PublicIP: "10.0.0.4"}
	worker1 = districts.Node{ID: "c-worker-1", Role: districts.RoleWorker, PublicIP: "10.0.0.3"}
	worker2 = districts.Node{ID: "c-worker-2", Role: districts.RoleWorker, PublicIP: "10.0.0.5"}
)

func TestMembersDoesNotWaitForADeadMaster(t *testing.T) {
	t.Parallel()
	f := &fakeNodes{nodes: map[string]func(context.Context, string) (string, error){
		master1.ID: dead(master1.ID),
		master2.ID: replies("active true ccc\n" + inspectJSON),
	}}
	d := testDriver(f)
	// The deadline only keeps a driver that asks one master after the
	// other from hanging the test; asking at once answers long before.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	members, err := d.Members(ctx, []districts.Node{master1, master2, worker1})
	if err != nil {
		t.Fatalf("Members: %v", err)
	}
	if len(members) == 0 {
		t.Fatal("Members listed nobody")
	}
	for _, c := range f.calls() {
		if strings.HasPrefix(c, worker1.ID) {
			t.Errorf("a worker was asked although a master served the swarm: %v", f.calls())
		}
	}
}

func TestMembersUnreachableOrNoPlatform(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		nodes     []districts.Node
		answers   map[string]func(context.Context, string) (string, error)
		wantNone  bool
		wantLost  bool
		wantAsked []string
	}{
		{
			name:  "every master vanished, a worker still holds the swarm",
			nodes: []districts.Node{worker1, worker2},
			answers: map[string]func(context.Context, string) (string, error){
				worker1.ID: replies("active false x\n"),
				worker2.ID: replies("inactive false \n"),
			},
			wantLost:  true,
			wantAsked: []string{worker1.ID, worker2.ID},
		},
		{
			// Its sshd stopped, or its machine is partitioned away: it
			// may hold a swarm the master knows nothing of.
			name:  "the master is in no swarm, a worker does not answer",
			nodes: []districts.Node{master1, worker1, worker2},
			answers: map[string]func(context.Context, string) (string, error){
				master1.ID: replies("inactive false \n"),
				worker1.ID: func(context.Context, string) (string, error) {
					return "", fmt.Errorf("%s: %w", worker1.ID, ssh.ErrUnreachable)
				},
				worker2.ID: replies("none\n"),
			},
			wantAsked: []string{master1.ID, worker1.ID, worker2.ID},
		},
		{
			name:  "no swarm anywhere",
			nodes: []districts.Node{master1, worker1},
			answers: map[string]func(context.Context, string) (string, error){
				master1.ID: replies("inactive false \n"),
				worker1.ID: replies("none\n"),
			},
			wantNone:  true,
			wantAsked: []string{master1.ID, worker1.ID},
		},
		{
			// Workers are not asked: the dead master alone makes the
			// answer unknowable.
			name:  "the master does not answer",
			nodes: []districts.Node{master1, worker1},
			answers: map[string]func(context.Context, string) (string, error){
				master1.ID: func(context.Context, string) (string, error) {
					return "", fmt.Errorf("%s: %w", master1.ID, ssh.ErrUnreachable)
				},
			},
			wantAsked: []string{master1.ID},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := &fakeNodes{nodes: tt.answers}
			d := testDriver(f)
			_, err := d.Members(t.Context(), tt.nodes)
			switch {
			case tt.wantNone && !errors.Is(err, provider.ErrNoPlatform):
				t.Errorf("error %v, want ErrNoPlatform", err)
			case !tt.wantNone && (errors.Is(err, provider.ErrNoPlatform) || !errors.Is(err, provider.ErrPlatformUnreachable)):
				t.Errorf("error %v, want ErrPlatformUnreachable", err)
			}
			if ue, ok := errors.AsType[*provider.UnreachableError](err); ok && ue.Lost() != tt.wantLost {
				t.Errorf("Lost() = %t, want %t: %v", ue.Lost(), tt.wantLost, err)
			}
			var asked []string
			for _, c := range f.calls() {
				id, _, _ := strings.Cut(c, ":")
				asked = append(asked, id)
			}
			slices.Sort(asked)
			if diff := cmp.Diff(tt.wantAsked, asked); diff != "" {
				t.Errorf("nodes asked (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMembersOf(t *testing.T) {
	t.Parallel()
	list, err := parseNodes(master1, inspectJSON)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name         string
		list         []swarmNode
		nodes        []districts.Node
		want         []provider.Member
		wantManagers []string
	}{
		{
			name:  "every swarm node is listed, machine or not",
			list:  list,
			nodes: []districts.Node{master1, worker1, master2, worker2},
			want: []provider.Member{
				{NodeID: "c-master-1", Role: "master", Voter: true, Ready: true, Labels: map[string]string{"location": "Germany"},
					Addresses: []string{"10.0.0.2"}},
				// The ready entry on the node's address wins over the old, down one.
				{NodeID: "c-worker-1", Role: "worker", Ready: true, Draining: true, Labels: map[string]string{},
					Addresses: []string{"10.0.0.3"}},
				// A manager the others cannot reach holds its seat
				// but casts no vote: not a voter, not ready.
				{NodeID: "c-master-2", Role: "master", Ready: false, Labels: map[string]string{},
					Addresses: []string{"10.0.0.4"}},
				// Not among nodes: a swarm node transit did not make is
				// still a member, named by its hostname.
				{NodeID: "somebody-else", Role: "worker", Ready: true, Labels: map[string]string{},
					Addresses: []string{"10.0.0.9"}},
			},
			wantManagers: []string{"c-master-1"},
		},
		{
			name: "members whose machine was deleted behind transit's back",
			list: nodesJSON(t, `[
 {"ID":"m1","Spec":{"Labels":{"transit-node":"c-master-1"},"Role":"manager","Availability":"active"},
  "Status":{"State":"ready","Addr":"10.0.0.2"},"ManagerStatus":{"Leader":true,"Reachability":"reachable"}},
 {"ID":"m3","Spec":{"Labels":{"transit-node":"c-master-3","transit-managed":"tier","tier":"db"},"Role":"manager","Availability":"active"},
  "Status":{"State":"down","Addr":"10.0.0.7"},"ManagerStatus":{"Reachability":"unreachable"}},
 {"ID":"w9stale","Spec":{"Labels":{"transit-node":"c-worker-9"},"Role":"worker","Availability":"drain"},
  "Status":{"State":"down","Addr":"10.0.0.8"}},
 {"ID":"w9","Spec":{"Labels":{"transit-node":"c-worker-9"},"Role":"worker","Availability":"active"},
  "Status":{"State":"ready","Addr":"10.0.0.9"}},
 {"ID":"w8","Spec":{"Labels":{"transit-node":"c-worker-8"},"Role":"worker","Availability":"active"},
  "Status":{"State":"down","Addr":"10.0.0.6"}},
 {"ID":"anon","Spec":{"Role":"worker","Availability":"active"},"Status":{"State":"ready"}}
]`),
			nodes: []districts.Node{master1},
			want: []provider.Member{
				{NodeID: "c-master-1", Role: "master", Voter: true, Ready: true, Labels: map[string]string{},
					Addresses: []string{"10.0.0.2"}},
				// Its machine is gone: still a master, no vote.
				{NodeID: "c-master-3", Role: "master", Ready: false, Labels: map[string]string{"tier": "db"},
					Addresses: []string{"10.0.0.7"}},
				{NodeID: "c-worker-8", Role: "worker", Ready: false, Labels: map[string]string{},
					Addresses: []string{"10.0.0.6"}},
				// One member per id; a down duplicate does not hide
				// the live one, and the member's address is the live
				// one's.
				{NodeID: "c-worker-9", Role: "worker", Ready: true, Labels: map[string]string{},
					Addresses: []string{"10.0.0.9"}},
			},
			wantManagers: []string{"c-master-1"},
		},
		{
			name: "the role is the swarm's, not transit's",
			list: nodesJSON(t, `[
 {"ID":"m1","Spec":{"Labels":{"transit-node":"c-master-1"},"Role":"worker","Availability":"active"},
  "Status":{"State":"ready","Addr":"10.0.0.2"}},
 {"ID":"w1","Spec":{"Labels":{"transit-node":"c-worker-1"},"Role":"manager","Availability":"active"},
  "Status":{"State":"ready","Addr":"10.0.0.3"},"ManagerStatus":{"Leader":true,"Reachability":"reachable"}},
 {"ID":"m2","Spec":{"Labels":{"transit-node":"c-master-2"},"Role":"manager","Availability":"active"},
  "Status":{"State":"ready","Addr":"10.0.0.4"}},
 {"ID":"w2","Spec":{"Labels":{"transit-node":"c-worker-2"},"Role":"worker","Availability":"active"},
  "Status":{"State":"ready","Addr":"10.0.0.5"},"ManagerStatus":{"Reachability":"reachable"}}
]`),
			nodes: []districts.Node{master1, worker1, master2, worker2},
			want: []provider.Member{
				{NodeID: "c-master-1", Role: "worker", Ready: true, Labels: map[string]string{}, Addresses: []string{"10.0.0.2"}},
				{NodeID: "c-worker-1", Role: "master", Voter: true, Ready: true, Labels: map[string]string{}, Addresses: []string{"10.0.0.3"}},
				// Promoted, but without a Raft seat yet: a master that
				// does not vote yet.
				{NodeID: "c-master-2", Role: "master", Ready: true, Labels: map[string]string{}, Addresses: []string{"10.0.0.4"}},
				// Demoted, but still holding its seat: it votes until
				// the seat goes.
				{NodeID: "c-worker-2", Role: "master", Voter: true, Ready: true, Labels: map[string]string{}, Addresses: []string{"10.0.0.5"}},
			},
			wantManagers: []string{"c-worker-1", "c-worker-2"},
		},
		{
			// Some engines report a manager's Status.Addr as 0.0.0.0;
			// its Raft address says where it is.
			name: "a manager's addresses",
			list: nodesJSON(t, `[
 {"ID":"m1","Spec":{"Labels":{"transit-node":"c-master-1"},"Role":"manager","Availability":"active"},
  "Status":{"State":"ready","Addr":"0.0.0.0"},"ManagerStatus":{"Leader":true,"Reachability":"reachable","Addr":"10.0.0.2:2377"}},
 {"ID":"m2","Spec":{"Labels":{"transit-node":"c-master-2"},"Role":"manager","Availability":"active"},
  "Status":{"State":"ready","Addr":"192.168.1.4"},"ManagerStatus":{"Reachability":"reachable","Addr":"10.0.0.4:2377"}},
 {"ID":"w1","Spec":{"Labels":{"transit-node":"c-worker-1"},"Role":"worker","Availability":"active"},
  "Status":{"State":"ready"}}
]`),
			nodes: []districts.Node{master1, master2, worker1},
			want: []provider.Member{
				{NodeID: "c-master-1", Role: "master", Voter: true, Ready: true, Labels: map[string]string{}, Addresses: []string{"10.0.0.2"}},
				{NodeID: "c-master-2", Role: "master", Voter: true, Ready: true, Labels: map[string]string{}, Addresses: []string{"192.168.1.4", "10.0.0.4"}},
				{NodeID: "c-worker-1", Role: "worker", Ready: true, Labels: map[string]string{}},
			},
			wantManagers: []string{"c-master-1", "c-master-2"},
		},
		{
			// A copy of c-worker-1's machine (same tags, same
			// hostname) is given the id: the member's address is
			// still the real machine's, so the copy can be told
			// apart.
			name: "a machine carrying a member's id is not the member",
			list: list,
			nodes: []districts.Node{
				{ID: "c-worker-1", Role: districts.RoleWorker, PublicIP: "10.0.0.99"},
				master1,
			},
			want: []provider.Member{
				{NodeID: "c-worker-1", Role: "worker", Ready: true, Draining: true, Labels: map[string]string{},
					Addresses: []string{"10.0.0.3"}},
				{NodeID: "c-master-1", Role: "master", Voter: true, Ready: true, Labels: map[string]string{"location": "Germany"},
					Addresses: []string{"10.0.0.2"}},
				{NodeID: "c-master-2", Role: "master", Ready: false, Labels: map[string]string{},
					Addresses: []string{"10.0.0.4"}},
				{NodeID: "somebody-else", Role: "worker", Ready: true, Labels: map[string]string{},
					Addresses: []string{"10.0.0.9"}},
			},
			wantManagers: []string{"c-master-1"},
		},
		{
			name:  "empty swarm list",
			nodes: []districts.Node{master1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, managers := membersOf(tt.list, tt.nodes)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("members (-want +got):\n%s", diff)
			}
			var ids []string
			for _, m := range managers {
				ids = append(ids, m.ID)
			}
			if diff := cmp.Diff(tt.wantManagers, ids); diff != "" {
				t.Errorf("managers (-want +got):\n%s", diff)
			}
		})
	}
	if sn, _ := match(list, worker1); sn.ID != "bbb" {
		t.Errorf("match(c-worker-1) = %s, want bbb", sn.ID)
	}
}

func nodesJSON(t *testing.T, s string) []swarmNode {
	t.Helper()
	list, err := parseNodes(master1, s)
	if err != nil {
		t.Fatal(err)
	}
	return list
}

// The swarm's roles decide, not transit's: when the masters are workers of
// the swarm and a node transit made a worker manages it, that node lists
// the members, and the driver runs manager commands there.
func TestMembersFromAWorkerThatManages(t *testing.T) {
	t.Parallel()
	f := &fakeNodes{nodes: map[string]func(context.Context, string) (string, error){
		master1.ID: replies("active false aaa\n"),
		worker1.ID: replies("active true bbb\n" + inspectJSON),
	}}
	d := testDriver(f)
	members, err := d.Members(t.Context(), []districts.Node{master1, worker1})
	if err != nil {
		t.Fatalf("Members: %v", err)
	}
	if len(members) == 0 {
		t.Fatal("Members listed nobody")
	}
	if !d.knowsManager() || d.managers[0].ID != worker1.ID {
		t.Errorf("known managers %v, want %s first", d.managers, worker1.ID)
	}
}
