package swarm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/platforms/ssh"
	"github.com/cloudtransit/transit/provider"
)

// The nodes of demandCapture's swarm, as transit knows them; dtMaster2
// is a second master the fake runs beside it.
var (
	dtMaster1 = districts.Node{ID: "dt-master-1", Role: districts.RoleMaster, PublicIP: "10.247.3.2"}
	dtMaster2 = districts.Node{ID: "dt-master-2", Role: districts.RoleMaster, PublicIP: "10.247.3.3"}
)

// capturedDemand is what Demand makes of demandCapture for dtMaster1
// (see demandServices); the node's CPUs and memory are those of the
// machine the capture was taken on.
func capturedDemand() provider.Demand {
	mi := int64(1) << 20
	return provider.Demand{
		Pending: []provider.Workload{
			{Name: "big.1", MilliCPU: 512_000, MemoryBytes: 3 << 30, Selector: map[string]string{"site": "demandtest"}},
			{Name: "nowhere.1", Selector: map[string]string{"disk": "nvme"}},
		},
		Nodes: []provider.NodeLoad{{
			Node: "dt-master-1", MilliCPU: 2000, MemoryBytes: 25275990016,
			Labels:      map[string]string{"site": "demandtest", "transit-managed": "site", "transit-node": "dt-master-1"},
			Schedulable: true, OverheadMilliCPU: 50, OverheadMemoryBytes: 8 * mi,
			Workloads: []provider.Workload{
				{Name: "data.1", MemoryBytes: 4 * mi, Unmovable: "keeps data on the node (volume mount at /data)"},
				{Name: "logs.1", Unmovable: "keeps data on the node (bind mount at /host-etc)"},
				{Name: "pinned.1", Unmovable: "pinned to the node (constraint node.hostname==dt-master-1)"},
				{Name: "web.1", MilliCPU: 100, MemoryBytes: 16 * mi},
				{Name: "web.2", MilliCPU: 100, MemoryBytes: 16 * mi},
			},
		}},
	}
}

func readCapture(t testing.TB) string {
	t.Helper()
	data, err := os.ReadFile(demandCapture)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestSwarmStateDemand converts demandScript's output from a real swarm
// (demandCapture, as captured and edited) into the demand.
func TestSwarmStateDemand(t *testing.T) {
	t.Parallel()
	captured := readCapture(t)
	tests := []struct {
		name  string
		edit  func(t *testing.T, s map[string]any) // the engine's objects, decoded
		nodes []districts.Node
		want  func(d *provider.Demand)
	}{
		{name: "as captured", nodes: []districts.Node{dtMaster1}},
		{
			// The pending tasks are the swarm's, whichever nodes
			// transit made.
			name:  "no node of transit's",
			nodes: []districts.Node{{ID: "other", Role: districts.RoleMaster, PublicIP: "10.0.0.9"}},
			want:  func(d *provider.Demand) { d.Nodes = nil },
		},
		{
			name: "drained",
			edit: func(t *testing.T, s map[string]any) { set(t, s, "drain", "Nodes", "0", "Spec", "Availability") },
			want: func(d *provider.Demand) { d.Nodes[0].Schedulable = false },
		},
		{
			name: "down",
			edit: func(t *testing.T, s map[string]any) { set(t, s, "down", "Nodes", "0", "Status", "State") },
			want: func(d *provider.Demand) { d.Nodes[0].Schedulable = false },
		},
		{
			// A node whose identity label was lost is known by its
			// hostname, as Members knows it.
			name: "no identity label",
			edit: func(t *testing.T, s map[string]any) {
				delete(get(t, s, "Nodes", "0", "Spec", "Labels").(map[string]any), labelNode)
			},
			want: func(d *provider.Demand) { delete(d.Nodes[0].Labels, labelNode) },
		},
		{
			// Its tasks were listed, but it was removed before the
			// services were.
			name: "a service removed meanwhile",
			edit: func(t *testing.T, s map[string]any) {
				var kept []any
				for _, svc := range get(t, s, "Services").([]any) {
					if get(t, svc, "Spec", "Name") != "web" {
						kept = append(kept, svc)
					}
				}
				s["Services"] = kept
			},
			want: func(d *provider.Demand) { d.Nodes[0].Workloads = d.Nodes[0].Workloads[:3] },
		},
		{
			// Placed and starting: it holds its reservation.
			name: "a task starting",
			edit: func(t *testing.T, s map[string]any) { set(t, taskIn(t, s, "web", 2), "starting", "Status", "State") },
		},
		{
			// Failed, the swarm still wanting it running for a moment:
			// it holds nothing.
			name: "a task failed",
			edit: func(t *testing.T, s map[string]any) { set(t, taskIn(t, s, "web", 2), "failed", "Status", "State") },
			want: func(d *provider.Demand) { d.Nodes[0].Workloads = d.Nodes[0].Workloads[:4] },
		},
		{
			// Just made, not yet judged by the scheduler.
			name: "a task not yet scheduled",
			edit: func(t *testing.T, s map[string]any) { set(t, taskIn(t, s, "big", 1), "", "Status", "Err") },
			want: func(d *provider.Demand) { d.Pending = d.Pending[1:] },
		},
		{
			// It cannot run on this machine; a new one would be the same.
			name: "an image of another platform",
			edit: func(t *testing.T, s map[string]any) {
				set(t, taskIn(t, s, "big", 1), "no suitable node (unsupported platform on 1 node)", "Status", "Err")
			},
			want: func(d *provider.Demand) { d.Pending = d.Pending[1:] },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out := captured
			if tt.edit != nil {
				var s map[string]any
				if err := json.Unmarshal([]byte(captured), &s); err != nil {
					t.Fatal(err)
				}
				tt.edit(t, s)
				data, err := json.Marshal(s)
				if err != nil {
					t.Fatal(err)
				}
				out = string(data)
			}
			want := capturedDemand()
			if tt.want != nil {
				tt.want(&want)
			}
			nodes := tt.nodes
			if nodes == nil {
				nodes = []districts.Node{dtMaster1}
			}
			got, err := parseDemand(out, nodes)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("demand (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := parseDemand(`{"Nodes": [`, nil); err == nil {
		t.Error("parseDemand of a cut-off answer: no error")
	}
}

// get walks decoded JSON by object keys and array indexes.
func get(t *testing.T, v any, path ...string) any {
	t.Helper()
	for _, p := range path {
		switch x := v.(type) {
		case map[string]any:
			v = x[p]
		case []any:
			i, err := strconv.Atoi(p)
			if err != nil || i >= len(x) {
				t.Fatalf("no %s in %v", p, path)
			}
			v = x[i]
		default:
			t.Fatalf("cannot walk %v at %s", path, p)
		}
	}
	return v
}

// set sets the value at path (get) to value.
func set(t *testing.T, v any, value any, path ...string) {
	t.Helper()
	obj, ok := get(t, v, path[:len(path)-1]...).(map[string]any)
	if !ok {
		t.Fatalf("%v is no object", path[:len(path)-1])
	}
	obj[path[len(path)-1]] = value
}

// taskIn finds the task of the named service in slot in decoded
// demandScript output.
func taskIn(t *testing.T, s map[string]any, service string, slot int) map[string]any {
	t.Helper()
	var id any
	for _, svc := range get(t, s, "Services").([]any) {
		if get(t, svc, "Spec", "Name") == service {
			id = get(t, svc, "ID")
		}
	}
	for _, tk := range get(t, s, "Tasks").([]any) {
		if get(t, tk, "ServiceID") == id && get(t, tk, "Slot") == float64(slot) {
			return tk.(map[string]any)
		}
	}
	t.Fatalf("no task %s.%d", service, slot)
	return nil
}

func TestTaskWaitsForANode(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		err, message string
		pin          string // a constraint
		want         bool
	}{
		{err: "no suitable node (insufficient resources on 3 nodes)", want: true},
		{err: "no suitable node (scheduling constraints not satisfied on 1 node)", want: true},
		{err: "no suitable node (1 node not available for new tasks; insufficient resources on 2 nodes)", want: true},
		{err: "no suitable node (host-mode port already in use on 1 node)", want: true},
		{err: "no suitable node (max replicas per node limit exceed)", want: true},
		{err: "no suitable node", want: true}, // no node at all
		{err: "no suitable node (unsupported platform on 2 nodes; insufficient resources on 1 node)", want: true},
		{err: "no suitable node (unsupported platform on 3 nodes)"},
		{err: "no suitable node (missing plugin on 1 node; unsupported platform on 2 nodes)"},
		{err: "no suitable node (cannot fulfill requested CSI volume mounts on 1 node)"},
		{message: "pending task scheduling"}, // not yet judged
		{message: "no suitable node (insufficient resources on 1 node)", want: true},
		// Its node went, or is drained: only that node would do.
		{err: "no suitable node (1 node not available for new tasks)", pin: "node.hostname==c-worker-1"},
		{err: "no suitable node (scheduling constraints not satisfied on 2 nodes)", pin: "node.labels.transit-node==c-worker-1"},
	} {
		var tk swarmTask
		tk.Status.State, tk.Status.Err, tk.Status.Message = "pending", tt.err, tt.message
		if tt.pin != "" {
			tk.Spec.Placement = &struct{ Constraints []string }{Constraints: []string{tt.pin}}
		}
		if got := taskWaitsForANode(tk); got != tt.want {
			t.Errorf("err %q, message %q: waits for a node = %t, want %t", tt.err, tt.message, got, tt.want)
		}
	}
}

// TestTaskWorkload: a task's name, requests, selector and why it would
// not move, from its spec.
func TestTaskWorkload(t *testing.T) {
	t.Parallel()
	type mount = struct{ Type, Source, Target string }
	for _, tt := range []struct {
		name        string
		slot        int
		nanoCPUs    int64
		constraints []string
		mounts      []mount
		want        provider.Workload
	}{
		{name: "a slot", slot: 3, want: provider.Workload{Name: "svc.3"}},
		{name: "no slot (global)", want: provider.Workload{Name: "svc.t1"}},
		// A request is never understated.
		{name: "a part of a millicore", slot: 1, nanoCPUs: 1_500_000, want: provider.Workload{Name: "svc.1", MilliCPU: 2}},
		{name: "the selector", slot: 1, constraints: []string{
			"node.labels.zone==eu", " NODE.LABELS.Disk == ssd ", "node.labels.gpu!=true", "node.role==worker",
			"engine.labels.kernel==6", "node.platform.arch==x86_64", "node.labels.==x",
		}, want: provider.Workload{Name: "svc.1", Selector: map[string]string{"zone": "eu", "Disk": "ssd"}}},
		{name: "a volume", slot: 1, mounts: []mount{{"tmpfs", "", "/run"}, {"volume", "pg", "/var/lib/pg"}},
			want: provider.Workload{Name: "svc.1", Unmovable: "keeps data on the node (volume mount at /var/lib/pg)"}},
		{name: "a tmpfs", slot: 1, mounts: []mount{{"tmpfs", "", "/run"}}, want: provider.Workload{Name: "svc.1"}},
		{name: "pinned by id", slot: 1, constraints: []string{"node.id==abc"},
			want: provider.Workload{Name: "svc.1", Unmovable: "pinned to the node (constraint node.id==abc)"}},
		{name: "pinned by address", slot: 1, constraints: []string{"node.ip==10.0.0.7"},
			want: provider.Workload{Name: "svc.1", Unmovable: "pinned to the node (constraint node.ip==10.0.0.7)"}},
		{name: "a subnet", slot: 1, constraints: []string{"node.ip==10.0.0.0/24"}, want: provider.Workload{Name: "svc.1"}},
		{name: "not on a host", slot: 1, constraints: []string{"node.hostname!=a"}, want: provider.Workload{Name: "svc.1"}},
		{name: "pinned by transit's identity label", slot: 1, constraints: []string{"node.labels.transit-node==c-worker-1"},
			want: provider.Workload{Name: "svc.1", Selector: map[string]string{labelNode: "c-worker-1"},
				Unmovable: "pinned to the node (constraint node.labels.transit-node==c-worker-1)"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			spec := map[string]any{
				"ContainerSpec": map[string]any{"Mounts": tt.mounts},
				"Resources":     map[string]any{"Reservations": map[string]any{"NanoCPUs": tt.nanoCPUs}},
				"Placement":     map[string]any{"Constraints": tt.constraints},
			}
			data, err := json.Marshal(map[string]any{"ID": "t1", "Slot": tt.slot, "Spec": spec})
			if err != nil {
				t.Fatal(err)
			}
			var tk swarmTask
			if err := json.Unmarshal(data, &tk); err != nil {
				t.Fatal(err)
			}
			var svc swarmService
			svc.Spec.Name = "svc"
			w := tk.workload(svc)
			w.Unmovable = tk.unmovable()
			if diff := cmp.Diff(tt.want, w); diff != "" {
				t.Errorf("workload (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDemandFindsAManager: Demand asks a manager it knows, else the one
// Members finds, and answers Members' verdict when none serves.
func TestDemandFindsAManager(t *testing.T) {
	t.Parallel()
	captured := readCapture(t)
	var state struct{ Nodes json.RawMessage }
	if err := json.Unmarshal([]byte(captured), &state); err != nil {
		t.Fatal(err)
	}
	const read = "read the swarm's nodes, services and tasks"
	// serves is a manager of demandCapture's swarm.
	serves := func(_ context.Context, script string) (string, error) {
		if script == demandScript() {
			return captured, nil
		}
		return "active true 36xts7s57kdibzuetfzf1lr1t\n" + string(state.Nodes), nil
	}
	unreachable := func(id string) func(context.Context, string) (string, error) {
		return func(context.Context, string) (string, error) {
			return "", fmt.Errorf("%s: %w", id, ssh.ErrUnreachable)
		}
	}
	// demoted was a manager: the engine refuses the read.
	demoted := func(_ context.Context, script string) (string, error) {
		if script == demandScript() {
			return "", runErr(dtMaster2, read, 1, "GET /nodes: the docker engine answered HTTP 503: This node is not a swarm manager.")
		}
		return "active false w2\n", nil
	}
	tests := []struct {
		name        string
		known       []districts.Node
		answers     map[string]func(context.Context, string) (string, error)
		wantRuns    []string
		wantErr     error // matched with errors.Is; nil: the captured demand
		wantMasters []string
	}{
		{
			name:     "a manager known",
			known:    []districts.Node{dtMaster1},
			answers:  map[string]func(context.Context, string) (string, error){dtMaster1.ID: serves},
			wantRuns: []string{"dt-master-1: " + read},
		},
		{
			name:     "none known",
			answers:  map[string]func(context.Context, string) (string, error){dtMaster1.ID: serves, dtMaster2.ID: demoted},
			wantRuns: []string{"dt-master-1: ask for the swarm's nodes", "dt-master-2: ask for the swarm's nodes", "dt-master-1: " + read},
		},
		{
			name:    "the manager known does not answer",
			known:   []districts.Node{dtMaster2},
			answers: map[string]func(context.Context, string) (string, error){dtMaster1.ID: serves, dtMaster2.ID: unreachable(dtMaster2.ID)},
			wantRuns: []string{"dt-master-2: " + read, "dt-master-1: ask for the swarm's nodes", "dt-master-2: ask for the swarm's nodes",
				"dt-master-1: " + read},
		},
		{
			name:    "the manager known was demoted",
			known:   []districts.Node{dtMaster2},
			answers: map[string]func(context.Context, string) (string, error){dtMaster1.ID: serves, dtMaster2.ID: demoted},
			wantRuns: []string{"dt-master-2: " + read, "dt-master-1: ask for the swarm's nodes", "dt-master-2: ask for the swarm's nodes",
				"dt-master-1: " + read},
		},
		{
			name:        "no master answers",
			known:       []districts.Node{dtMaster1},
			answers:     map[string]func(context.Context, string) (string, error){dtMaster1.ID: unreachable(dtMaster1.ID), dtMaster2.ID: unreachable(dtMaster2.ID)},
			wantRuns:    []string{"dt-master-1: " + read, "dt-master-1: ask for the swarm's nodes", "dt-master-2: ask for the swarm's nodes"},
			wantErr:     provider.ErrPlatformUnreachable,
			wantMasters: []string{"dt-master-1", "dt-master-2"},
		},
		{
			name: "no swarm",
			answers: map[string]func(context.Context, string) (string, error){
				dtMaster1.ID: replies("inactive false \n"), dtMaster2.ID: replies("none\n"),
			},
			wantRuns: []string{"dt-master-1: ask for the swarm's nodes", "dt-master-2: ask for the swarm's nodes"},
			wantErr:  provider.ErrNoPlatform,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := &fakeNodes{nodes: tt.answers}
			d := testDriver(f, tt.known...)
			got, err := d.Demand(t.Context(), []districts.Node{dtMaster1, dtMaster2})
			switch {
			case tt.wantErr == nil && err != nil:
				t.Fatalf("Demand: %v", err)
			case tt.wantErr == nil:
				if diff := cmp.Diff(capturedDemand(), got); diff != "" {
					t.Errorf("demand (-want +got):\n%s", diff)
				}
			case !errors.Is(err, tt.wantErr):
				t.Errorf("error %v, want %v", err, tt.wantErr)
			}
			if ue, ok := errors.AsType[*provider.UnreachableError](err); ok || tt.wantMasters != nil {
				if ue == nil || !cmp.Equal(ue.Masters, tt.wantMasters) {
					t.Errorf("error %v, want an UnreachableError naming masters %v", err, tt.wantMasters)
				}
			}
			runs := f.calls()
			sortAsks(runs)
			if diff := cmp.Diff(tt.wantRuns, runs); diff != "" {
				t.Errorf("runs (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("an answer that is not JSON", func(t *testing.T) {
		t.Parallel()
		f := &fakeNodes{nodes: map[string]func(context.Context, string) (string, error){dtMaster1.ID: replies("Error: oops\n")}}
		_, err := testDriver(f, dtMaster1).Demand(t.Context(), []districts.Node{dtMaster1})
		if err == nil || errors.Is(err, provider.ErrPlatformUnreachable) || !strings.Contains(err.Error(), "dt-master-1") {
			t.Errorf("error %v, want one naming the manager, not unreachable", err)
		}
	})
}

// sortAsks sorts each run of "ask for the swarm's nodes" in runs: the
// masters are asked at once, in any order.
func sortAsks(runs []string) {
	isAsk := func(r string) bool { return strings.HasSuffix(r, ": ask for the swarm's nodes") }
	for i := 0; i < len(runs); {
		j := i
		for j < len(runs) && isAsk(runs[j]) {
			j++
		}
		slices.Sort(runs[i:j])
		i = max(j, i+1)
	}
}

// TestDemandScript runs demandScript with a fake curl: one GET per
// object kind, the tasks filtered by desired state, the answers joined
// into one JSON object; an engine's refusal fails it with the answer.
func TestDemandScript(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		nodeCode string
		exit     int
		stdout   string
		stderr   string
	}{
		{name: "a manager", nodeCode: "200", stdout: `{"Nodes":[{"ID":"n1"}],"Services":[{"ID":"s1"}],"Tasks":[{"ID":"t1"}]}`},
		{name: "a worker", nodeCode: "503", exit: 1, stderr: `GET /nodes: the docker engine answered HTTP 503: {"message":"This node is not a swarm manager."}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			bin := t.TempDir()
			// The engine ends each answer with a newline.
			curl := `#!/bin/sh
out= path= query=
while [ $# -gt 0 ]; do
	case "$1" in
	-o) out=$2; shift ;;
	-w | --unix-socket) shift ;;
	--data-urlencode) query=$2; shift ;;
	http://localhost/*) path=${1#http://localhost} ;;
	esac
	shift
done
code=200
case "$path" in
/nodes) body='[{"ID":"n1"}]'; code=` + tt.nodeCode + `
	[ "$code" = 200 ] || body='{"message":"This node is not a swarm manager."}' ;;
/services) body='[{"ID":"s1"}]' ;;
/tasks)
	[ "$query" = 'filters={"desired-state":["running"]}' ] || { echo "unexpected query $query" >&2; exit 9; }
	body='[{"ID":"t1"}]' ;;
*) echo "unexpected path $path" >&2; exit 9 ;;
esac
printf '%s\n' "$body" >"$out"
printf '%s' "$code"
`
			exit, stdout, stderr := runWithFakes(t, bin, demandScript(), map[string]string{"curl": curl})
			if tt.exit == 0 {
				var b bytes.Buffer
				if err := json.Compact(&b, []byte(stdout)); err != nil {
					t.Fatalf("stdout is not JSON: %v\n%s", err, stdout)
				}
				stdout = b.String()
			}
			if exit != tt.exit || stdout != tt.stdout || strings.TrimSpace(stderr) != tt.stderr {
				t.Errorf("exit %d, stdout %q, stderr %q;\nwant exit %d, stdout %q, stderr %q", exit, stdout, stderr, tt.exit, tt.stdout, tt.stderr)
			}
		})
	}
}

// BenchmarkDemand reads a swarm of 500 nodes running 10,000 tasks with
// 1,000 more pending.
func BenchmarkDemand(b *testing.B) {
	const nodes, running, pending = 500, 10_000, 1_000
	var s swarmState
	var transit []districts.Node
	for i := range nodes {
		var sn swarmNode
		sn.ID = fmt.Sprintf("sw%d", i)
		sn.Spec.Labels = map[string]string{labelNode: fmt.Sprintf("c-worker-%d", i), "zone": "a"}
		sn.Spec.Availability, sn.Status.State = "active", "ready"
		sn.Description.Resources.NanoCPUs, sn.Description.Resources.MemoryBytes = 4e9, 16<<30
		s.Nodes = append(s.Nodes, sn)
		transit = append(transit, districts.Node{ID: fmt.Sprintf("c-worker-%d", i), Role: districts.RoleWorker, PublicIP: fmt.Sprintf("10.1.%d.%d", i/250, i%250)})
	}
	for i := range 100 {
		var svc swarmService
		svc.ID, svc.Spec.Name = fmt.Sprintf("s%d", i), fmt.Sprintf("svc%d", i)
		s.Services = append(s.Services, svc)
	}
	for i := range running + pending {
		var tk swarmTask
		tk.ID, tk.ServiceID, tk.Slot, tk.DesiredState = fmt.Sprintf("t%d", i), fmt.Sprintf("s%d", i%100), i/100+1, "running"
		tk.Spec.Placement = &struct{ Constraints []string }{Constraints: []string{"node.labels.zone==a"}}
		if i < running {
			tk.NodeID, tk.Status.State = fmt.Sprintf("sw%d", i%nodes), "running"
		} else {
			tk.Status.State, tk.Status.Err = "pending", "no suitable node (insufficient resources on 500 nodes)"
		}
		s.Tasks = append(s.Tasks, tk)
	}
	data, err := json.Marshal(s)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		d, err := parseDemand(string(data), transit)
		if err != nil || len(d.Pending) != pending || len(d.Nodes) != nodes {
			b.Fatalf("%d pending, %d nodes, %v", len(d.Pending), len(d.Nodes), err)
		}
	}
}
