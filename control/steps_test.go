package control

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cloudtransit/transit/districts"
)

var update = flag.Bool("update", false, "rewrite the golden rollouts under testdata/")

// Table tests of the planner's steps, called directly, and golden
// rollouts that pin whole migrations.

func inputFor(c districts.Cluster, ws worldSpec, fresh ...string) planInput {
	w := ws.world()
	in := planInput{cluster: c, districts: simDistricts[:2], world: w, avoid: map[string]bool{}, fresh: map[string]bool{}, ids: newNodeNumbers(c.ID, w)}
	for _, id := range fresh {
		in.fresh[id] = true
	}
	return in
}

func ids(nodes []*districts.Node) []string {
	out := []string{}
	for _, n := range nodes {
		out = append(out, n.ID)
	}
	return out
}

// classify sorts nodes per line: which stay, which are excess (cheapest
// first), which are replaced whatever the counts, what is missing.
func TestClassify(t *testing.T) {
	t.Parallel()
	w := func(i int, d string, phase districts.Phase) districts.Node {
		return pnode(fmt.Sprintf("paper-worker-%d", i), d, districts.RoleWorker, phase)
	}
	cp := w(9, gce, districts.PhaseLaunched)
	cp.CopyOf = "paper-worker-1"
	failed := w(8, gce, districts.PhaseFailed)
	stopped := w(7, gce, districts.PhaseStopped)
	stopped.NotReadySince = planNow.Add(-2 * 60 * 60e9)
	tests := []struct {
		name                 string
		cluster              districts.Cluster
		nodes                []districts.Node
		wantExcess, wantRepl []string
		wantAdds, wantReady  int
	}{
		{"a line short of nodes", paperCluster(1, 3, 0), []districts.Node{master1, w(1, gce, joined)}, nil, nil, 2, 1},
		{"excess: not-ready before ready, newest first", paperCluster(1, 1, 0),
			[]districts.Node{master1, w(1, gce, joined), w(2, gce, joined), w(3, gce, districts.PhaseNotReady)},
			[]string{"paper-worker-3", "paper-worker-2"}, nil, 0, 2},
		{"copies and failed machines are replaced and count for nothing", paperCluster(1, 1, 0),
			[]districts.Node{master1, w(1, gce, joined), cp, failed},
			nil, []string{"paper-worker-9", "paper-worker-8"}, 0, 1},
		{"a stopped member counts until replace_unhealthy_after", paperCluster(1, 2, 0),
			[]districts.Node{master1, w(1, gce, joined), stopped}, nil, nil, 0, 1},
		{"a stopped member is replaced after replace_unhealthy_after", func() districts.Cluster {
			c := paperCluster(1, 2, 0)
			c.Strategy.ReplaceUnhealthyAfter = districts.Duration(60 * 60e9)
			return c
		}(), []districts.Node{master1, w(1, gce, joined), stopped}, nil, []string{"paper-worker-7"}, 1, 1},
	}
	for _, tt := range tests {
		c := classify(inputFor(tt.cluster, worldSpec{nodes: tt.nodes, platform: platformUp, formed: true}))
		rw := c.roles[districts.RoleWorker]
		got := []any{ids(rw.excess), ids(rw.replace), len(rw.adds), rw.ready}
		want := []any{orEmpty(tt.wantExcess), orEmpty(tt.wantRepl), tt.wantAdds, tt.wantReady}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: [excess replace adds ready] (-want +got):\n%s", tt.name, diff)
		}
	}
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// planRole: launches bounded by max_surge while the role also shrinks;
// ready excess the start cannot spare is held; every member drain keeps
// the floor.
func TestPlanRole(t *testing.T) {
	t.Parallel()
	w := func(i int, d string, phase districts.Phase) districts.Node {
		return pnode(fmt.Sprintf("paper-worker-%d", i), d, districts.RoleWorker, phase)
	}
	tests := []struct {
		name       string
		cluster    districts.Cluster
		nodes      []districts.Node
		wantLaunch []string
		wantRemove []string
		wantHeld   []string
		wantFloor  int
	}{
		{"a pure scale-up launches everything", withStrategy(paperCluster(1, 0, 4), 1, 1), []districts.Node{master1},
			[]string{"paper-worker-1", "paper-worker-2", "paper-worker-3", "paper-worker-4"}, nil, nil, 4},
		{"a migration surges by max_surge", withStrategy(paperCluster(1, 0, 2), 1, 1), []districts.Node{master1, w(1, gce, joined), w(2, gce, joined)},
			[]string{"paper-worker-3"}, nil, []string{"paper-worker-2", "paper-worker-1"}, 2},
		{"max_surge 0: the floor dips by max_unavailable", withStrategy(paperCluster(1, 0, 2), 0, 1), []districts.Node{master1, w(1, gce, joined), w(2, gce, joined)},
			nil, []string{"drain paper-worker-2 keep 1", "remove paper-worker-2", "terminate paper-worker-2"}, []string{"paper-worker-1"}, 1},
	}
	for _, tt := range tests {
		in := inputFor(tt.cluster, worldSpec{nodes: tt.nodes, platform: platformUp, formed: true})
		c := classify(in)
		rw := c.roles[districts.RoleWorker]
		var p Plan
		launches, removals := planRole(in, c, rw, &p)
		var gotL []string
		for _, a := range launches {
			gotL = append(gotL, a.Node)
		}
		if diff := cmp.Diff(tt.wantLaunch, gotL); diff != "" {
			t.Errorf("%s: launches (-want +got):\n%s", tt.name, diff)
		}
		if diff := cmp.Diff(tt.wantRemove, nodeActions(Plan{Actions: removals})); diff != "" {
			t.Errorf("%s: removals (-want +got):\n%s", tt.name, diff)
		}
		if got := ids(rw.held); !slices.Equal(got, tt.wantHeld) && len(got)+len(tt.wantHeld) > 0 {
			t.Errorf("%s: held %v, want %v", tt.name, got, tt.wantHeld)
		}
		if rw.floor != tt.wantFloor {
			t.Errorf("%s: floor %d, want %d", tt.name, rw.floor, tt.wantFloor)
		}
	}
}

// planHeld removes as many held members as the round joins of their role,
// each drain keeping the floor, and says why the rest stay.
func TestPlanHeld(t *testing.T) {
	t.Parallel()
	w := func(i int) districts.Node {
		return pnode(fmt.Sprintf("paper-worker-%d", i), gce, districts.RoleWorker, joined)
	}
	in := inputFor(withStrategy(paperCluster(1, 0, 3), 1, 1), worldSpec{nodes: []districts.Node{master1, w(1), w(2), w(3)}, platform: platformUp, formed: true})
	c := classify(in)
	var p Plan
	planRole(in, c, c.roles[districts.RoleWorker], &p)
	for joins, want := range map[int][]string{
		0: nil,
		1: {"drain paper-worker-3 keep 3", "remove paper-worker-3", "terminate paper-worker-3"},
		3: {"drain paper-worker-3 keep 3", "remove paper-worker-3", "terminate paper-worker-3",
			"drain paper-worker-2 keep 3", "remove paper-worker-2", "terminate paper-worker-2",
			"drain paper-worker-1 keep 3", "remove paper-worker-1", "terminate paper-worker-1"},
	} {
		var js []Action
		for i := range joins {
			js = append(js, Action{Kind: KindJoin, Node: fmt.Sprintf("paper-worker-%d", 10+i), Role: districts.RoleWorker})
		}
		var p Plan
		got := nodeActions(Plan{Actions: planHeld(in, c, js, &p)})
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%d joins: (-want +got):\n%s", joins, diff)
		}
		if stay := 3 - joins; stay > 0 {
			checkContains(t, "blocked", p.Blocked, "stays for now")
		}
	}
}

// rollout plans rounds from a model that does what each plan says and
// nothing else (every action succeeds; a drain goes when its KeepReady
// holds at its turn), and returns each round's node actions, so whole
// migrations are pinned by golden files.
func rollout(t *testing.T, c districts.Cluster, nodes []districts.Node) string {
	t.Helper()
	ws := worldSpec{nodes: nodes, platform: platformUp, formed: true}
	var b strings.Builder
	next := 100
	for round := 1; ; round++ {
		if round > 30 {
			t.Fatalf("no convergence after 30 rounds:\n%s", b.String())
		}
		in := inputFor(c, ws)
		in.ids.next[districts.RoleMaster] = max(in.ids.next[districts.RoleMaster], 10)
		in.ids.next[districts.RoleWorker] = max(in.ids.next[districts.RoleWorker], 10)
		p := buildPlan(in)
		if p.Empty() {
			fmt.Fprintf(&b, "converged after %d rounds\n", round-1)
			return b.String()
		}
		fmt.Fprintf(&b, "round %d:\n", round)
		for _, a := range nodeActions(p) {
			fmt.Fprintf(&b, "  %s\n", a)
		}
		for _, s := range p.Blocked {
			fmt.Fprintf(&b, "  blocked: %s\n", s)
		}
		byID := map[string]int{}
		for i, n := range ws.nodes {
			byID[n.ID] = i
		}
		gone := map[string]bool{}
		for _, a := range p.Actions {
			switch a.Kind {
			case KindLaunch:
				next++
				n := pnode(a.Node, a.District, a.Role, districts.PhaseLaunched)
				n.Flavor, n.Tags = a.Flavor, nil
				n.PublicIP, n.PrivateIP = fmt.Sprintf("192.0.2.%d", next), fmt.Sprintf("10.0.1.%d", next)
				byID[a.Node] = len(ws.nodes)
				ws.nodes = append(ws.nodes, n)
			case KindJoin, KindInit:
				n := &ws.nodes[byID[a.Node]]
				n.Phase, n.Tags = joined, maps.Clone(desiredTags(c, n.Key()))
			case KindLabel:
				n := &ws.nodes[byID[a.Node]]
				n.Tags = maps.Clone(desiredTags(c, n.Key()))
			case KindDrain:
				ready := 0
				for _, n := range ws.nodes {
					if n.Role == a.Role && n.Phase == joined && n.ID != a.Node && !gone[n.ID] {
						ready++
					}
				}
				if ready < a.KeepReady {
					fmt.Fprintf(&b, "  (drain %s waits: %d ready, keeps %d)\n", a.Node, ready, a.KeepReady)
					gone[a.Node] = false
					continue
				}
				ws.nodes[byID[a.Node]].Phase = districts.PhaseDrained
				gone[a.Node] = true
			case KindRemove:
				if g, ok := gone[a.Node]; ok && !g {
					continue
				}
				ws.nodes[byID[a.Node]].Phase = districts.PhaseLeft
			case KindTerminate:
				if g, ok := gone[a.Node]; ok && !g {
					continue
				}
				ws.nodes[byID[a.Node]].Phase = districts.PhaseTerminating
			}
		}
		ws.nodes = slices.DeleteFunc(ws.nodes, func(n districts.Node) bool { return n.Phase == districts.PhaseTerminating })
	}
}

func desiredTags(c districts.Cluster, k districts.DeploymentKey) map[string]string {
	for _, d := range c.Deployments {
		if d.Key() == k {
			return d.Tags
		}
	}
	return nil
}

func TestGoldenRollouts(t *testing.T) {
	t.Parallel()
	w := func(i int, d string) districts.Node {
		return pnode(fmt.Sprintf("paper-worker-%d", i), d, districts.RoleWorker, joined)
	}
	m := func(i int, d string) districts.Node {
		return pnode(fmt.Sprintf("paper-master-%d", i), d, districts.RoleMaster, joined)
	}
	masters := func(c districts.Cluster, district string, n int) districts.Cluster {
		for i := range c.Deployments {
			if c.Deployments[i].Role == districts.RoleMaster {
				c.Deployments[i].Quantity = 0
			}
		}
		c = withLine(c, district, districts.RoleMaster, n)
		c.Deployments[len(c.Deployments)-1].Tags = map[string]string{"location": "Germany"}
		return c
	}
	tests := []struct {
		name    string
		cluster districts.Cluster
		nodes   []districts.Node
	}{
		{"workers-gce-to-aws-surge-1", withStrategy(paperCluster(1, 0, 3), 1, 1),
			[]districts.Node{master1, w(1, gce), w(2, gce), w(3, gce)}},
		{"workers-gce-to-aws-surge-3", withStrategy(paperCluster(1, 0, 3), 3, 1),
			[]districts.Node{master1, w(1, gce), w(2, gce), w(3, gce)}},
		{"workers-in-place-surge-0", withStrategy(paperCluster(1, 0, 3), 0, 1),
			[]districts.Node{master1, w(1, gce), w(2, gce), w(3, gce)}},
		{"three-masters-gce-to-aws", masters(paperCluster(0, 1, 0), aws, 3),
			[]districts.Node{m(1, gce), m(2, gce), m(3, gce), w(1, gce)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := rollout(t, tt.cluster, tt.nodes)
			path := filepath.Join("testdata", "rollouts", tt.name+".golden")
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to write it)", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("rollout (-want +got):\n%s", diff)
			}
		})
	}
}
