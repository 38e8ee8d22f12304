package control

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// Table tests of the planner's steps, from hand-made observations.

var planNow = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

// world builds an observation: the nodes as given, the platform up with
// every node whose phase makes it a member.
type worldSpec struct {
	nodes    []districts.Node
	platform platformView
	err      error
	formed   bool
	strays   []provider.Member
	failures map[string]districts.Failure
}

// pnode is node id of a paperCluster deployment line in phase, tagged as
// the line wants, so only the change under test shows.
func pnode(id, district, role string, phase districts.Phase) districts.Node {
	tags := map[string]string{"location": "Europe"}
	if district == "aws-europe" {
		tags = map[string]string{"location": "Germany"}
	}
	n, _ := strings.CutPrefix(id, "paper-"+role+"-")
	return districts.Node{Type: "node", ID: id, Cluster: "paper", District: district, Flavor: "small", Role: role,
		ProviderID: "i-" + id, Phase: phase, Tags: tags, PublicIP: "192.0.2." + n, PrivateIP: "10.0.0." + n,
		CreatedAt: planNow.Add(-time.Hour)}
}

func (ws worldSpec) world() world {
	w := world{terminating: map[string]int{}, blocked: map[string]string{}, now: planNow,
		platform: ws.platform, platformErr: ws.err, members: map[string]provider.Member{}, strays: ws.strays}
	w.state.Failures = ws.failures
	if ws.formed {
		w.state.PlatformFormedAt = planNow.Add(-24 * time.Hour)
	}
	for _, n := range ws.nodes {
		w.state.Nodes = append(w.state.Nodes, n)
		if n.Phase.Member() {
			w.members[n.ID] = provider.Member{NodeID: n.ID, Role: n.Role, Ready: n.Phase == districts.PhaseJoined,
				Draining: isCordoned(&n), Labels: n.Tags}
		}
	}
	for _, d := range simDistricts[:2] {
		w.state.SecurityGroups = append(w.state.SecurityGroups, districts.SecurityGroup{
			ID: provider.GroupName("paper", d.ID), District: d.ID, ProviderID: "sg-" + d.ID, Sources: addressesOf(w.live())})
	}
	return w
}

// nodeActions lists a plan's actions on nodes as "kind node", with a
// drain's KeepReady.
func nodeActions(p Plan) []string {
	var out []string
	for _, a := range p.Actions {
		switch {
		case a.KeepReady > 0:
			out = append(out, fmt.Sprintf("%s %s keep %d", a.Kind, a.Node, a.KeepReady))
		case a.Node != "":
			out = append(out, string(a.Kind)+" "+a.Node)
		}
	}
	return out
}

func planFor(c districts.Cluster, ws worldSpec, fresh ...string) Plan {
	w := ws.world()
	in := planInput{cluster: c, districts: simDistricts[:2], world: w, avoid: map[string]bool{},
		fresh: map[string]bool{}, ids: newNodeNumbers(c.ID, w)}
	for _, id := range fresh {
		in.fresh[id] = true
	}
	return buildPlan(in)
}

// withLine adds a deployment line of paperCluster's flavor.
func withLine(c districts.Cluster, district, role string, q int) districts.Cluster {
	c.Deployments = append(c.Deployments, districts.Deployment{District: district, Flavor: "small", Role: role, Quantity: q})
	return c
}

func withStrategy(c districts.Cluster, surge, unavailable int) districts.Cluster {
	c.Strategy.MaxSurge, c.Strategy.MaxUnavailable = districts.Int(surge), districts.Int(unavailable)
	return c
}

const (
	gce, aws = "gce-europe", "aws-europe"
	joined   = districts.PhaseJoined
)

var master1 = pnode("paper-master-1", gce, districts.RoleMaster, joined)

// The rollout of one role: launches bounded by max_surge, removals by the
// members the platform reports ready.
func TestPlanRoleRollout(t *testing.T) {
	t.Parallel()
	w := func(i int, d string, phase districts.Phase) districts.Node {
		return pnode(fmt.Sprintf("paper-worker-%d", i), d, districts.RoleWorker, phase)
	}
	tests := []struct {
		name        string
		cluster     districts.Cluster
		nodes       []districts.Node
		fresh       []string
		want        []string
		wantBlocked string
		wantWaiting string
	}{
		{
			name:    "scale down removes the newest ready member while the rest stay ready",
			cluster: paperCluster(1, 2, 0),
			nodes:   []districts.Node{master1, w(1, gce, joined), w(2, gce, joined), w(3, gce, joined)},
			want:    []string{"drain paper-worker-3 keep 2", "remove paper-worker-3", "terminate paper-worker-3"},
		},
		{
			name:    "a not-ready member goes first and costs no ready member",
			cluster: paperCluster(1, 2, 0),
			nodes:   []districts.Node{master1, w(1, gce, districts.PhaseNotReady), w(2, gce, joined), w(3, gce, joined)},
			want:    []string{"drain paper-worker-1 keep 2", "remove paper-worker-1", "terminate paper-worker-1"},
		},
		{
			name:    "an operator's cordoned node is the excess before any ready one",
			cluster: paperCluster(1, 2, 0),
			nodes:   []districts.Node{master1, w(1, gce, joined), w(2, gce, districts.PhaseCordoned), w(3, gce, joined)},
			want:    []string{"drain paper-worker-2 keep 2", "remove paper-worker-2", "terminate paper-worker-2"},
		},
		{
			name:    "a drained node an interrupted run left is removed without another drain",
			cluster: paperCluster(1, 1, 0),
			nodes:   []districts.Node{master1, w(1, gce, joined), w(2, gce, districts.PhaseDrained)},
			want:    []string{"remove paper-worker-2", "terminate paper-worker-2"},
		},
		{
			// Scenario 4: replacements count once the platform says so.
			name:        "a migration keeps the old nodes until the new ones are ready",
			cluster:     paperCluster(1, 0, 2),
			nodes:       []districts.Node{master1, w(1, gce, joined), w(2, gce, joined), w(3, aws, districts.PhaseNotReady), w(4, aws, districts.PhaseNotReady)},
			fresh:       []string{"paper-worker-3", "paper-worker-4"},
			wantBlocked: "paper-worker-2, paper-worker-1 stays for now: the workers have 2 ready member(s); removing a ready one needs at least 3; not ready or cordoned: paper-worker-3 (not-ready), paper-worker-4 (not-ready)",
			wantWaiting: "node paper-worker-3 to become ready",
		},
		{
			name:    "once they are, the old ones go",
			cluster: paperCluster(1, 0, 2),
			nodes:   []districts.Node{master1, w(1, gce, joined), w(2, gce, joined), w(3, aws, joined), w(4, aws, joined)},
			want: []string{"drain paper-worker-2 keep 2", "remove paper-worker-2", "terminate paper-worker-2",
				"drain paper-worker-1 keep 2", "remove paper-worker-1", "terminate paper-worker-1"},
		},
		{
			name:    "a migration launches at most max_surge above the size",
			cluster: withStrategy(paperCluster(1, 0, 3), 1, 1),
			nodes:   []districts.Node{master1, w(1, gce, joined), w(2, gce, joined), w(3, gce, joined)},
			// The ready gce workers are exactly the size: one goes once
			// the new one is ready, in the same round, the others later.
			want: []string{"launch paper-worker-4", "install paper-worker-4", "join paper-worker-4",
				"drain paper-worker-3 keep 3", "remove paper-worker-3", "terminate paper-worker-3"},
			wantBlocked: "paper-worker-2, paper-worker-1 stays for now: the workers have 3 ready member(s); removing a ready one needs at least 4",
		},
		{
			name:    "max_surge 0 replaces in place, max_unavailable at a time",
			cluster: withStrategy(paperCluster(1, 0, 2), 0, 1),
			nodes:   []districts.Node{master1, w(1, gce, joined), w(2, gce, joined)},
			want:    []string{"drain paper-worker-2 keep 1", "remove paper-worker-2", "terminate paper-worker-2"},
			// And the other stays: the role may dip only one below its size.
			wantBlocked: "paper-worker-1 stays for now: the workers have 2 ready member(s); removing a ready one needs at least 2",
		},
		{
			name:    "a master moves only after its replacement is ready",
			cluster: withLine(paperCluster(1, 1, 0), aws, districts.RoleMaster, 0),
			nodes:   []districts.Node{pnode("paper-master-1", aws, districts.RoleMaster, joined), w(1, gce, joined)},
			want: []string{"launch paper-master-2", "install paper-master-2", "join paper-master-2",
				"drain paper-master-1 keep 1", "remove paper-master-1", "terminate paper-master-1"},
		},
		{
			name:    "a machine an earlier run launched, joining now, stands in too",
			cluster: withLine(paperCluster(1, 1, 0), aws, districts.RoleMaster, 0),
			nodes:   []districts.Node{pnode("paper-master-1", aws, districts.RoleMaster, joined), w(1, gce, joined), pnode("paper-master-2", gce, districts.RoleMaster, districts.PhaseLaunched)},
			want:    []string{"join paper-master-2", "drain paper-master-1 keep 1", "remove paper-master-1", "terminate paper-master-1"},
		},
		{
			// worker-2 is spare now; worker-1 goes once worker-4 is ready.
			name:    "a spare member goes at once, one more for each that joins",
			cluster: withStrategy(paperCluster(1, 0, 2), 2, 1),
			nodes:   []districts.Node{master1, w(1, gce, joined), w(2, gce, joined), w(3, aws, joined)},
			want: []string{"launch paper-worker-4", "install paper-worker-4", "join paper-worker-4",
				"drain paper-worker-2 keep 2", "remove paper-worker-2", "terminate paper-worker-2",
				"drain paper-worker-1 keep 2", "remove paper-worker-1", "terminate paper-worker-1"},
		},
		{
			name:    "a failed join the platform does not list is replaced",
			cluster: paperCluster(1, 1, 0),
			nodes: []districts.Node{master1, func() districts.Node {
				n := w(1, gce, districts.PhaseLaunched)
				n.JoinFailed = true
				return n
			}()},
			want: []string{"launch paper-worker-2", "install paper-worker-2", "join paper-worker-2", "terminate paper-worker-1"},
		},
		{
			// Scenario 1: a failed join the platform does list is a member.
			name:    "a failed join the platform lists stays and is labelled",
			cluster: paperCluster(1, 1, 0),
			nodes: []districts.Node{master1, func() districts.Node {
				n := w(1, gce, joined)
				n.JoinFailed, n.Tags = true, nil
				return n
			}()},
			want: []string{"label paper-worker-1"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := planFor(tt.cluster, worldSpec{nodes: tt.nodes, platform: platformUp, formed: true}, tt.fresh...)
			if diff := cmp.Diff(tt.want, nodeActions(p)); diff != "" {
				t.Errorf("actions (-want +got):\n%s", diff)
			}
			checkContains(t, "blocked", p.Blocked, tt.wantBlocked)
			checkContains(t, "waiting", p.Waiting, tt.wantWaiting)
		})
	}
}

// checkContains: one of list contains want; an empty want means list is
// empty.
func checkContains(t *testing.T, what string, list []string, want string) {
	t.Helper()
	if want == "" {
		if len(list) > 0 {
			t.Errorf("%s %q, want none", what, list)
		}
		return
	}
	if !slices.ContainsFunc(list, func(s string) bool { return strings.Contains(s, want) }) {
		t.Errorf("%s %q, want one containing %q", what, list, want)
	}
}

// Scenario 2: whether a platform is built depends on what the platform
// said and on whether one ever formed.
func TestPlanPlatformViews(t *testing.T) {
	t.Parallel()
	launched := func(id, role string) districts.Node { return pnode(id, gce, role, districts.PhaseLaunched) }
	failed := func(id string) districts.Node {
		n := launched(id, districts.RoleMaster)
		n.JoinFailed = true
		return n
	}
	unreachable := &provider.UnreachableError{Masters: []string{"paper-master-1"}, Err: errors.New("ssh: i/o timeout")}
	tests := []struct {
		name        string
		ws          worldSpec
		rebuild     bool
		want        []string
		wantBlocked string
	}{
		{
			name: "no platform ever formed: the first master initialises it",
			ws:   worldSpec{platform: platformNone, nodes: []districts.Node{launched("paper-master-1", "master"), launched("paper-worker-1", "worker")}},
			want: []string{"init paper-master-1", "join paper-worker-1"},
		},
		{
			name:        "masters that do not answer change no node",
			ws:          worldSpec{platform: platformUnreachable, err: unreachable, formed: true, nodes: []districts.Node{master1, pnode("paper-worker-1", gce, "worker", districts.PhaseLaunched)}},
			wantBlocked: "no node is changed while the platform does not answer: platform unreachable: no master answered (paper-master-1)",
		},
		{
			name:        "a platform that formed and is gone is not rebuilt unasked",
			ws:          worldSpec{platform: platformNone, formed: true, nodes: []districts.Node{launched("paper-worker-1", "worker")}},
			wantBlocked: "--rebuild-platform",
		},
		{
			name:    "with --rebuild-platform a new master initialises it; nothing old is removed",
			ws:      worldSpec{platform: platformNone, formed: true, nodes: []districts.Node{launched("paper-worker-1", "worker"), launched("paper-worker-2", "worker")}},
			rebuild: true,
			want:    []string{"launch paper-master-1", "install paper-master-1", "init paper-master-1", "join paper-worker-1"},
		},
		{
			// A rebuild whose masters failed to install must not stall:
			// their machines go (making room under max_surge), and the
			// next round launches a new master.
			name:        "a rebuild terminates masters whose install failed",
			ws:          worldSpec{platform: platformNone, formed: true, nodes: []districts.Node{failed("paper-master-2"), failed("paper-master-3"), launched("paper-worker-1", "worker")}},
			rebuild:     true,
			want:        []string{"terminate paper-master-2", "terminate paper-master-3"},
			wantBlocked: "no master is there to initialise it",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := tt.ws.world()
			c := paperCluster(1, 1, 0)
			in := planInput{cluster: c, districts: simDistricts[:2], world: w, avoid: map[string]bool{},
				fresh: map[string]bool{}, rebuild: tt.rebuild, ids: newNodeNumbers(c.ID, w)}
			p := buildPlan(in)
			if diff := cmp.Diff(tt.want, nodeActions(p)); diff != "" {
				t.Errorf("actions (-want +got):\n%s", diff)
			}
			checkContains(t, "blocked", p.Blocked, tt.wantBlocked)
		})
	}
}

// Scenario 3 and 6: members whose machines are gone, cordons, readiness.
func TestPlanForgetAndChanges(t *testing.T) {
	t.Parallel()
	worker := func(phase districts.Phase) districts.Node { return pnode("paper-worker-1", gce, "worker", phase) }
	tests := []struct {
		name        string
		nodes       []districts.Node
		strays      []provider.Member
		fresh       []string
		want        []string
		wantWarning string
		wantWaiting string
	}{
		{
			name:   "a down member transit made, whose machine is gone, is forgotten",
			nodes:  []districts.Node{master1, worker(joined)},
			strays: []provider.Member{{NodeID: "paper-master-2", Role: "master"}},
			want:   []string{"forget paper-master-2"},
		},
		{
			name:        "a member the platform calls ready is not forgotten",
			nodes:       []districts.Node{master1, worker(joined)},
			strays:      []provider.Member{{NodeID: "paper-worker-7", Role: "worker", Ready: true}},
			wantWarning: "the platform lists paper-worker-7 as a ready member",
		},
		{
			name:        "a member someone joined by hand is left alone when it is down",
			nodes:       []districts.Node{master1, worker(joined)},
			strays:      []provider.Member{{NodeID: "db-box", Role: "worker"}},
			wantWarning: "db-box as a member that is down; transit did not make it",
		},
		{
			name:  "transit's own interrupted drain of a wanted node is undone",
			nodes: []districts.Node{master1, worker(districts.PhaseDraining)},
			want:  []string{"uncordon paper-worker-1"},
		},
		{
			name:        "an operator's cordon stays",
			nodes:       []districts.Node{master1, worker(districts.PhaseCordoned)},
			wantWarning: "node paper-worker-1 is cordoned, and not by transit: left alone",
		},
		{
			name:        "a node this run joined is waited on",
			nodes:       []districts.Node{master1, worker(districts.PhaseNotReady)},
			fresh:       []string{"paper-worker-1"},
			wantWaiting: "node paper-worker-1 to become ready",
		},
		{
			name:        "a node already not ready is reported, not waited on",
			nodes:       []districts.Node{master1, worker(districts.PhaseNotReady)},
			wantWarning: "node paper-worker-1: the platform reports it not ready",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := planFor(paperCluster(1, 1, 0), worldSpec{nodes: tt.nodes, platform: platformUp, formed: true, strays: tt.strays}, tt.fresh...)
			if diff := cmp.Diff(tt.want, nodeActions(p)); diff != "" {
				t.Errorf("actions (-want +got):\n%s", diff)
			}
			checkContains(t, "warnings", p.Warnings, tt.wantWarning)
			checkContains(t, "waiting", p.Waiting, tt.wantWaiting)
		})
	}
}

// After three failed joins in a row a deployment backs off, doubling.
func TestJoinFailureBackoff(t *testing.T) {
	t.Parallel()
	at := planNow
	for count, want := range map[int]time.Duration{0: -1, 2: -1, 3: 5 * time.Minute, 4: 10 * time.Minute, 6: 40 * time.Minute, 7: time.Hour, 30: time.Hour} {
		got := retryAt(districts.Failure{Count: count, LastAt: at}, planNow)
		if want < 0 {
			if !got.IsZero() {
				t.Errorf("%d failures: retry at %v, want at once", count, got)
			}
			continue
		}
		if got.Sub(at) != want {
			t.Errorf("%d failures: retry after %v, want %v", count, got.Sub(at), want)
		}
	}
	// A backed-off deployment launches nothing and says until when.
	key := districts.DeploymentKey{District: gce, Flavor: "small", Role: "worker"}
	p := planFor(paperCluster(1, 1, 0), worldSpec{nodes: []districts.Node{master1}, platform: platformUp, formed: true,
		failures: map[string]districts.Failure{key.String(): {Count: 3, LastError: "apt-get: unable to fetch", LastAt: planNow.Add(-time.Minute)}}})
	if got := nodeActions(p); len(got) > 0 {
		t.Errorf("actions %v while backing off", got)
	}
	checkContains(t, "blocked", p.Blocked, "no relaunch before 2026-11-22T12:04:00Z")
}

// Every deployment line's nodes are counted once, whatever map order.
func TestPlanIsDeterministic(t *testing.T) {
	t.Parallel()
	var nodes []districts.Node
	for i := range 8 {
		nodes = append(nodes, pnode(fmt.Sprintf("paper-worker-%d", i+1), []string{gce, aws}[i%2], "worker", joined))
	}
	nodes = append(nodes, master1)
	first := planFor(paperCluster(1, 2, 1), worldSpec{nodes: nodes, platform: platformUp, formed: true})
	for range 20 {
		p := planFor(paperCluster(1, 2, 1), worldSpec{nodes: nodes, platform: platformUp, formed: true})
		if !slices.Equal(nodeActions(p), nodeActions(first)) || !slices.Equal(p.Blocked, first.Blocked) {
			t.Fatalf("plans differ: %v / %v", nodeActions(p), nodeActions(first))
		}
	}
}

// Destroy terminates every machine at once, drains nothing, asks no
// platform, and deletes each group once its district's machines are gone.
func TestPlanDestroy(t *testing.T) {
	t.Parallel()
	nodes := []districts.Node{master1, pnode("paper-worker-1", gce, "worker", districts.PhaseDraining), pnode("paper-worker-2", aws, "worker", joined)}
	w := worldSpec{nodes: nodes, platform: platformNotAsked, formed: true}.world()
	p := buildPlan(planInput{cluster: paperCluster(0, 0, 0), districts: simDistricts[:2], world: w, destroy: true, ids: newNodeNumbers("paper", w)})
	want := []string{"terminate paper-master-1", "terminate paper-worker-1", "terminate paper-worker-2"}
	if diff := cmp.Diff(want, nodeActions(p)); diff != "" {
		t.Errorf("actions (-want +got):\n%s", diff)
	}
	checkContains(t, "waiting", p.Waiting, "1 machine(s) in aws-europe to be gone before deleting group transit-paper-aws-europe")
	checkContains(t, "waiting", p.Waiting, "2 machine(s) in gce-europe to be gone before deleting group transit-paper-gce-europe")

	// Once the machines are gone, the groups go.
	w = worldSpec{platform: platformNotAsked, formed: true}.world()
	p = buildPlan(planInput{cluster: paperCluster(0, 0, 0), districts: simDistricts[:2], world: w, destroy: true, ids: newNodeNumbers("paper", w)})
	var kinds []string
	for _, a := range p.Actions {
		kinds = append(kinds, string(a.Kind)+" "+a.Group)
	}
	if diff := cmp.Diff([]string{"delete-group transit-paper-aws-europe", "delete-group transit-paper-gce-europe"}, kinds); diff != "" {
		t.Errorf("actions (-want +got):\n%s", diff)
	}
}

// Where the cloud deletes a group its terminating machines are still in
// (GCE), the group goes with the machines' terminations instead of a
// termination later: in the same destroy round, in the round that removes
// a district's last node, or in the next one if that round could not.
func TestEagerGroupDelete(t *testing.T) {
	t.Parallel()
	nodes := []districts.Node{master1, pnode("paper-worker-1", gce, "worker", joined), pnode("paper-worker-2", aws, "worker", joined)}
	w := worldSpec{nodes: nodes, platform: platformNotAsked, formed: true}.world()
	w.eagerGroups = map[string]bool{gce: true}
	p := buildPlan(planInput{cluster: paperCluster(0, 0, 0), districts: simDistricts[:2], world: w, destroy: true, ids: newNodeNumbers("paper", w)})
	var groups []string
	for _, a := range p.Actions {
		if a.Kind == KindDeleteGroup {
			groups = append(groups, a.Group)
		}
	}
	if !slices.Equal(groups, []string{"transit-paper-gce-europe"}) {
		t.Errorf("destroy deletes groups %v in the terminations' round, want only GCE's", groups)
	}
	checkContains(t, "waiting", p.Waiting, "1 machine(s) in aws-europe to be gone before deleting group transit-paper-aws-europe")
	// The next round: GCE's machine is still terminating, its group is
	// gone. Destroy is not done until the machine is (a destroy once
	// ended here, leaving it in resources.json and in the cloud).
	w.terminating[gce] = 1
	w.state.SecurityGroups = slices.DeleteFunc(w.state.SecurityGroups, func(g districts.SecurityGroup) bool { return g.District == gce })
	p = buildPlan(planInput{cluster: paperCluster(0, 0, 0), districts: simDistricts[:2], world: w, destroy: true, ids: newNodeNumbers("paper", w)})
	checkContains(t, "waiting", p.Waiting, "1 terminating machine(s) in gce-europe to be gone")

	// A district emptied by a migration: its last machine terminating.
	leaving := pnode("paper-worker-3", aws, "worker", joined)
	leaving.Phase = districts.PhaseTerminating
	for _, eager := range []bool{false, true} {
		ws := worldSpec{nodes: []districts.Node{master1, pnode("paper-worker-2", gce, "worker", joined), leaving}, platform: platformUp, formed: true}
		w := ws.world()
		w.eagerGroups = map[string]bool{aws: eager}
		w.terminating[aws] = 1
		p := buildPlan(planInput{cluster: paperCluster(1, 1, 0), districts: simDistricts[:2], world: w, avoid: map[string]bool{}, ids: newNodeNumbers("paper", w)})
		deletes := slices.ContainsFunc(p.Actions, func(a Action) bool { return a.Kind == KindDeleteGroup && a.District == aws })
		if deletes != eager {
			t.Errorf("eager=%v: delete-group of the emptied district planned: %v (actions %v, waiting %v)", eager, deletes, p.Actions, p.Waiting)
		}
		if !eager {
			checkContains(t, "waiting", p.Waiting, "1 terminating machine(s) in aws-europe to be gone before deleting group transit-paper-aws-europe")
		}
	}

	// The round that removes a district's last node deletes its group
	// too where the cloud allows it (after the removals, if they went).
	for _, eager := range []bool{false, true} {
		ws := worldSpec{nodes: []districts.Node{master1, pnode("paper-worker-1", gce, "worker", joined), pnode("paper-worker-2", gce, "worker", joined),
			pnode("paper-worker-3", aws, "worker", joined)}, platform: platformUp, formed: true}
		w := ws.world()
		w.eagerGroups = map[string]bool{aws: eager}
		p := buildPlan(planInput{cluster: paperCluster(1, 2, 0), districts: simDistricts[:2], world: w, avoid: map[string]bool{}, ids: newNodeNumbers("paper", w)})
		deletes := slices.ContainsFunc(p.Actions, func(a Action) bool { return a.Kind == KindDeleteGroup && a.District == aws })
		if deletes != eager {
			t.Errorf("eager=%v: delete-group planned with the last removal: %v (actions %v)", eager, deletes, nodeActions(p))
		}
	}
}

// A machine adopted while the cloud still starts it (a crash during its
// launch) is waited for, not joined: it has no address to reach yet.
func TestStartingMachineIsWaitedFor(t *testing.T) {
	t.Parallel()
	starting := pnode("paper-worker-2", "gce-europe", "worker", districts.PhaseLaunched)
	starting.PublicIP, starting.PrivateIP = "", ""
	w := worldSpec{platform: platformUp, formed: true, nodes: []districts.Node{
		pnode("paper-master-1", "gce-europe", "master", districts.PhaseJoined),
		pnode("paper-worker-1", "gce-europe", "worker", districts.PhaseJoined),
		starting,
	}}.world()
	w.starting = map[string]bool{starting.ID: true}
	c := paperCluster(1, 2, 0)
	p := buildPlan(planInput{cluster: c, districts: simDistricts[:2], world: w, ids: newNodeNumbers("paper", w)})
	for _, a := range p.Actions {
		if a.Node == starting.ID || a.Kind == KindLaunch {
			t.Errorf("plan acts on the starting machine or launches another: %s %s", a.Kind, a.Node)
		}
	}
	if len(p.Waiting) != 1 || !strings.Contains(p.Waiting[0], "paper-worker-2 is still starting") {
		t.Errorf("waiting = %q, want the starting machine", p.Waiting)
	}
	// Once it runs with an address, it joins.
	w.starting = nil
	w.state.Nodes[2] = pnode("paper-worker-2", "gce-europe", "worker", districts.PhaseLaunched)
	p = buildPlan(planInput{cluster: c, districts: simDistricts[:2], world: w, ids: newNodeNumbers("paper", w)})
	if got := nodeActions(p); !slices.Contains(got, "join paper-worker-2") {
		t.Errorf("actions once it runs = %v, want its join", got)
	}
}
