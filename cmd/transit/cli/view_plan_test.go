package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/cloudtransit/transit/clock/clocktest"
	"github.com/cloudtransit/transit/control"
	"github.com/cloudtransit/transit/districts"
)

// The human plan shows every list of the plan, blocked items last and
// marked, and a last line that says what apply would do.
func TestWritePlanSections(t *testing.T) {
	t.Parallel()
	launch := control.Action{Kind: control.KindLaunch, District: "aws-europe", Node: "swarm-europe-worker-11",
		Role: "worker", Flavor: "small", Reason: "aws-europe/small/worker wants 11, has 10"}
	all := control.Plan{
		Cluster:  "swarm-europe",
		Notes:    []string{"adopted node swarm-europe-worker-9 (i-9): tagged machine missing from resources.json"},
		Warnings: []string{"member swarm-europe-worker-3 is not ready (since before this run)"},
		Waiting:  []string{"machine swarm-europe-worker-4 to finish terminating before group transit-swarm-europe-aws-europe goes"},
		Blocked:  []string{"gce-europe/small/worker: 3 launched nodes in a row failed to install or join; no relaunch before 10:45"},
	}
	for _, tc := range []struct {
		name string
		plan control.Plan
	}{
		{"plan-sections-actions.golden", withActions(all, launch)},
		{"plan-sections-blocked.golden", all},
		{"plan-sections-waiting.golden", control.Plan{Cluster: all.Cluster, Waiting: all.Waiting, Warnings: all.Warnings}},
	} {
		var b bytes.Buffer
		if err := writePlan(&b, shownPlan{plan: tc.plan, platform: "swarm", order: []string{"gce-europe", "aws-europe"}, refreshed: true}); err != nil {
			t.Fatal(err)
		}
		golden(t, tc.name, b.String())
	}
}

func withActions(p control.Plan, actions ...control.Action) control.Plan {
	p.Actions = actions
	return p
}

// plan --detailed-exitcode exits 2 only for actions: a plan that only
// waits or warns exits 0.
func TestPlanDetailedExitcodeWithoutActions(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	applied(t, h)
	// resources.json says a member is not ready: nothing to do about it
	// but wait or warn.
	st := h.state(t)
	for i := range st.Nodes {
		if st.Nodes[i].ID == "swarm-europe-worker-3" {
			st.Nodes[i].Phase = districts.PhaseNotReady
		}
	}
	writeJSONFile(t, h.path("resources.json"), st)
	r := h.run(t, runOpts{}, "plan", "--refresh=false", "--detailed-exitcode")
	wantCode(t, r, 0)
	if !strings.Contains(r.out, "swarm-europe-worker-3") || strings.Contains(r.out, "Plan: ") {
		t.Errorf("a plan without actions:\n%s", r)
	}
	r = h.run(t, runOpts{}, "plan", "--refresh=false", "--json")
	var p planJSON
	if err := json.Unmarshal([]byte(r.out), &p); err != nil {
		t.Fatal(err)
	}
	if p.Changes || len(p.Waiting)+len(p.Warnings) == 0 {
		t.Errorf("plan --json: changes %v, waiting %q, warnings %q", p.Changes, p.Waiting, p.Warnings)
	}
}

// A plan whose platform does not answer changes no node: its blocked items
// show, and --detailed-exitcode exits 0.
func TestPlanBlocked(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	applied(t, h)
	h.setQuantity(t, "aws-europe", districts.RoleWorker, 12)
	h.platform.setUnreachable("dial tcp 203.0.113.6:22: connect: connection refused")
	r := h.run(t, runOpts{}, "plan", "--detailed-exitcode")
	wantCode(t, r, 0)
	for _, want := range []string{
		"Blocked (differs from cluster.json, but will not be done now):\n  ! ",
		"connection refused",
		"No actions, but the cluster does not match cluster.json",
	} {
		if !strings.Contains(r.out, want) {
			t.Errorf("plan lacks %q:\n%s", want, r)
		}
	}
	// apply ends not converged and says why.
	r = h.run(t, runOpts{}, "apply", "--auto-approve", "--json")
	wantCode(t, r, ExitNotConverged)
	if _, last := jsonLines(t, r); last.ErrorKind != kindPlatformUnreachable {
		t.Errorf("error_kind %q, want %q", last.ErrorKind, kindPlatformUnreachable)
	}
	if n, _ := h.cloud.count(); n != 16 {
		t.Errorf("%d machines, want 16: nothing is launched while the platform does not answer", n)
	}
}

// A converged apply still reports what it does not fix: on a terminal the
// warnings follow the result line, in the JSON result they are a list.
func TestApplyWarnings(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.clock = &clocktest.Fake{} // waits (if any) pass at once
	applied(t, h)
	h.platform.setReady("swarm-europe-worker-3", false)
	h.setQuantity(t, "aws-europe", districts.RoleWorker, 11)
	r := h.run(t, runOpts{tty: true}, "apply", "--auto-approve")
	wantCode(t, r, 0)
	_, tail, ok := strings.Cut(r.out, "\nApply complete: the cluster matches the intended state after ")
	if !ok || !strings.Contains(tail, "\nWarnings:\n  - ") || !strings.Contains(tail, "swarm-europe-worker-3") {
		t.Errorf("the result does not list the warnings:\n%s", r)
	}
	h.setQuantity(t, "aws-europe", districts.RoleWorker, 12)
	r = h.run(t, runOpts{}, "apply", "--auto-approve", "--json")
	wantCode(t, r, 0)
	if _, last := jsonLines(t, r); !last.Result.Converged || len(last.Result.Warnings) == 0 {
		t.Errorf("result line: %+v", last.Result)
	}
}

// A mesh action belongs to no district: it shows under "# cluster" as a
// change of the mesh, with its reason.
func TestWritePlanMesh(t *testing.T) {
	t.Parallel()
	p := control.Plan{Cluster: "k", Actions: []control.Action{
		{Kind: control.KindTerminate, District: "aws-europe", Node: "k-worker-3", Role: "worker", Reason: "aws-europe/small/worker wants 1, has 2"},
		{Kind: control.KindMesh, Reason: "drop the removed nodes from every node's mesh peers"},
	}}
	var b bytes.Buffer
	if err := writePlan(&b, shownPlan{plan: p, platform: "kubernetes", order: []string{"aws-europe"}, refreshed: true}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	i := strings.Index(out, "# cluster\n")
	if i < 0 || !strings.Contains(out[i:], "~ mesh") || !strings.Contains(out[i:], "— drop the removed nodes from every node's mesh peers") {
		t.Errorf("the mesh action is not shown under # cluster:\n%s", out)
	}
	if !strings.Contains(out, "1 to change, 1 to remove") {
		t.Errorf("the summary does not count the mesh as a change:\n%s", out)
	}
}
