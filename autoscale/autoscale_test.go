package autoscale

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

const gib = 1 << 30

var now = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

func key(district string) districts.DeploymentKey {
	return districts.DeploymentKey{District: district, Flavor: "small", Role: districts.RoleWorker}
}

// groups are three worker deployments of one size: GCE the cheapest,
// AWS in Germany, OpenStack unpriced.
func groups() []Group {
	return []Group{
		{Key: key("aws"), Max: 10, Labels: map[string]string{"location": "Germany"}, MilliCPU: 1900, MemoryBytes: 3 * gib, Price: 0.067, Priced: true},
		{Key: key("gce"), Max: 10, Labels: map[string]string{"location": "Belgium"}, MilliCPU: 1900, MemoryBytes: 3 * gib, Price: 0.0475, Priced: true},
		{Key: key("os"), Max: 10, Labels: map[string]string{"location": "Germany"}, MilliCPU: 1900, MemoryBytes: 3 * gib},
	}
}

func pods(n int, prefix string, cpu int64, selector map[string]string) []provider.Workload {
	var out []provider.Workload
	for i := range n {
		out = append(out, provider.Workload{Name: fmt.Sprintf("default/%s-%d", prefix, i), MilliCPU: cpu, MemoryBytes: 256 << 20, Selector: selector})
	}
	return out
}

func settings() districts.Autoscaler { return (*districts.Autoscaler)(nil).Resolved() }

type change struct {
	key      string
	from, to int
	remove   string
}

func changes(out Output) []change {
	var cs []change
	for _, d := range out.Decisions {
		cs = append(cs, change{d.Key.District, d.From, d.To, strings.Join(d.Remove, ",")})
	}
	return cs
}

func TestScaleUp(t *testing.T) {
	for _, tc := range []struct {
		name    string
		groups  func([]Group) []Group
		pending []provider.Workload
		want    []change
	}{
		{"the cheapest that fits", nil, pods(5, "web", 500, nil), []change{{"gce", 0, 2, ""}}},
		{"labels choose", nil, pods(4, "de", 500, map[string]string{"location": "Germany"}), []change{{"aws", 0, 2, ""}}},
		{"mixed", nil, append(pods(3, "web", 500, nil), pods(1, "de", 1500, map[string]string{"location": "Germany"})...),
			[]change{{"aws", 0, 1, ""}, {"gce", 0, 1, ""}}},
		{"the cheapest at its max: the next", func(gs []Group) []Group { gs[1].Max, gs[1].Current = 1, 1; return gs },
			pods(5, "web", 1500, nil), []change{{"aws", 0, 4, ""}}},
		{"spread", func(gs []Group) []Group { gs[0].Spread, gs[1].Spread = true, true; return gs },
			pods(4, "web", 1500, nil), []change{{"aws", 0, 2, ""}, {"gce", 0, 2, ""}}},
		{"nodes asked for earlier take them", func(gs []Group) []Group { gs[1].Current = 2; return gs },
			pods(6, "web", 500, nil), nil},
		{"more than the nodes asked for earlier", func(gs []Group) []Group { gs[1].Current = 1; return gs },
			pods(6, "web", 500, nil), []change{{"gce", 1, 2, ""}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gs := groups()
			if tc.groups != nil {
				gs = tc.groups(gs)
			}
			out := Decide(Input{Groups: gs, Demand: provider.Demand{Pending: tc.pending}, Settings: settings(), Now: now})
			if diff := cmp.Diff(tc.want, changes(out), cmp.AllowUnexported(change{})); diff != "" {
				t.Errorf("decisions (-want +got):\n%s", diff)
			}
		})
	}
}

// Reasons name the workloads and the price.
func TestScaleUpReason(t *testing.T) {
	out := Decide(Input{Groups: groups(), Demand: provider.Demand{Pending: pods(5, "web", 500, nil)}, Settings: settings(), Now: now})
	if len(out.Decisions) != 1 {
		t.Fatalf("decisions %+v", out.Decisions)
	}
	want := "5 workloads unschedulable (default/web-0, default/web-1, default/web-2 and 2 more): 2 new node(s) at 0.0475/h each, the cheapest deployment that fits"
	if got := out.Decisions[0].Reason; got != want {
		t.Errorf("reason\n got %q\nwant %q", got, want)
	}
}

// A workload no deployment could ever fit is reported once, and does not
// keep the others from scaling down.
func TestUnfitReportedOnce(t *testing.T) {
	huge := pods(3, "huge", 8000, nil)
	in := Input{Groups: groups(), Demand: provider.Demand{Pending: huge}, Settings: settings(), Now: now}
	out := Decide(in)
	if len(out.Decisions) != 0 || len(out.NewProblems) != 1 || !strings.Contains(out.NewProblems[0], "default/huge* asks for 8000m CPU and 256 MiB") {
		t.Fatalf("first run: decisions %+v, problems %q", out.Decisions, out.NewProblems)
	}
	in.Reported = out.Reported
	if out := Decide(in); len(out.NewProblems) != 0 || len(out.Reported) != 1 {
		t.Errorf("second run reports again: %q", out.NewProblems)
	}
}

// nodes: two GCE workers of 1900m, one idle for long, one busy; an AWS
// one.
func demand() provider.Demand {
	node := func(id string, cpu ...int64) provider.NodeLoad {
		n := provider.NodeLoad{Node: id, MilliCPU: 1900, MemoryBytes: 3 * gib, Schedulable: true, Labels: map[string]string{}}
		for i, c := range cpu {
			n.Workloads = append(n.Workloads, provider.Workload{Name: fmt.Sprintf("default/%s-%d", id, i), MilliCPU: c, MemoryBytes: 128 << 20})
		}
		return n
	}
	return provider.Demand{Nodes: []provider.NodeLoad{node("gce-1", 200), node("gce-2", 1000, 500), node("aws-1", 1200), node("master-1")}}
}

func scaleDownInput() Input {
	gs := groups()
	gs[0].Current, gs[1].Current = 1, 2
	return Input{Groups: gs, Demand: demand(), Settings: settings(), Now: now,
		NodeGroup:      map[string]districts.DeploymentKey{"gce-1": key("gce"), "gce-2": key("gce"), "aws-1": key("aws")},
		NoTargets:      map[string]bool{"master-1": true},
		UnderusedSince: map[string]time.Time{"gce-1": now.Add(-11 * time.Minute)}}
}

func TestScaleDown(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Input)
		want   []change
	}{
		{"underused for long, its pods fit elsewhere", nil, []change{{"gce", 2, 1, "gce-1"}}},
		{"underused for a short while", func(in *Input) { in.UnderusedSince["gce-1"] = now.Add(-5 * time.Minute) }, nil},
		{"at its min", func(in *Input) { in.Groups[1].Min = 2 }, nil},
		{"a deployment grew lately", func(in *Input) { in.Groups[0].GrewAt = now.Add(-5 * time.Minute) }, nil},
		{"a workload cannot move", func(in *Input) { in.Demand.Nodes[0].Workloads[0].Unmovable = "no controller: a bare pod" }, nil},
		{"no room elsewhere", func(in *Input) {
			in.Demand.Nodes[1].Workloads[0].MilliCPU = 1800
			in.Demand.Nodes[2].Workloads[0].MilliCPU = 1800
		}, nil},
		{"only the master has room", func(in *Input) {
			in.Demand.Nodes[1].Workloads[0].MilliCPU = 1800
			in.Demand.Nodes[2].Workloads[0].MilliCPU = 1800
			in.NoTargets = map[string]bool{}
		}, []change{{"gce", 2, 1, "gce-1"}}},
		{"a selector only it matches", func(in *Input) {
			in.Demand.Nodes[0].Workloads[0].Selector = map[string]string{"disk": "ssd"}
			in.Demand.Nodes[0].Labels = map[string]string{"disk": "ssd"}
		}, nil},
		// The scheduler will place it on gce-1 (a node that joined
		// since it last tried): no new node, and gce-1 stays.
		{"a pending workload fits a node", func(in *Input) { in.Demand.Pending = pods(1, "web", 500, nil) }, nil},
		{"a pending workload fits no node", func(in *Input) { in.Demand.Pending = pods(1, "web", 1800, nil) }, []change{{"gce", 2, 3, ""}}},
		// Moves to one node take its room in turn: the second 400m
		// does not fit where only the first did.
		{"two workloads, room elsewhere for one", func(in *Input) {
			in.Demand.Nodes[0].Workloads = pods(2, "w", 400, nil)
			in.Demand.Nodes[2].Workloads[0].MilliCPU = 1600
		}, nil},
		{"two workloads, room elsewhere for both", func(in *Input) {
			in.Demand.Nodes[0].Workloads = pods(2, "w", 400, nil)
		}, []change{{"gce", 2, 1, "gce-1"}}},
		// A Kubernetes node runs at most its allocatable pods, those
		// that go with every node (DaemonSets) among them.
		{"the other nodes run all the pods they may", func(in *Input) {
			in.Demand.Nodes[1].Pods = 2
			in.Demand.Nodes[2].Pods, in.Demand.Nodes[2].OverheadPods = 3, 2
		}, nil},
		{"a pending workload fits a node's CPU, not its pod count", func(in *Input) {
			in.Demand.Pending = pods(1, "web", 500, nil)
			for i := range in.Demand.Nodes {
				in.Demand.Nodes[i].Pods = int64(len(in.Demand.Nodes[i].Workloads))
			}
		}, []change{{"gce", 2, 3, ""}}},
		{"an empty one and one more", func(in *Input) {
			in.Demand.Nodes[2].Workloads = nil
			in.UnderusedSince["aws-1"] = now.Add(-time.Hour)
		}, []change{{"aws", 1, 0, "aws-1"}, {"gce", 2, 1, "gce-1"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := scaleDownInput()
			if tc.change != nil {
				tc.change(&in)
			}
			out := Decide(in)
			if diff := cmp.Diff(tc.want, changes(out), cmp.AllowUnexported(change{})); diff != "" {
				t.Errorf("decisions (-want +got):\n%s", diff)
			}
		})
	}
}

// Underused nodes are remembered from when they were first seen so; a
// busy one is forgotten.
func TestUnderusedSince(t *testing.T) {
	in := scaleDownInput()
	in.UnderusedSince = map[string]time.Time{"gce-2": now.Add(-time.Hour)}
	out := Decide(in)
	want := map[string]time.Time{"gce-1": now}
	if diff := cmp.Diff(want, out.UnderusedSince); diff != "" {
		t.Errorf("underused since (-want +got):\n%s", diff)
	}
}
