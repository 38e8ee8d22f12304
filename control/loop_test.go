package control

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// paperCluster is the paper's example scaled down: masters in gce-europe,
// workers in both clouds.
func paperCluster(masters, gceWorkers, awsWorkers int) districts.Cluster {
	return districts.Cluster{Type: "cluster", ID: "paper", Platform: "swarm",
		Flavors: []districts.Flavor{{Flavor: "small", Cores: 1, MemoryGB: 2}},
		Deployments: []districts.Deployment{
			{District: "gce-europe", Flavor: "small", Role: "master", Quantity: masters, Tags: map[string]string{"location": "Europe"}},
			{District: "gce-europe", Flavor: "small", Role: "worker", Quantity: gceWorkers, Tags: map[string]string{"location": "Europe"}},
			{District: "aws-europe", Flavor: "small", Role: "worker", Quantity: awsWorkers, Tags: map[string]string{"location": "Germany"}},
		}}
}

func newTestHarness(t *testing.T) *harness {
	h := newHarness(t, 1, simDistricts[:2])
	h.sim.parallel, h.sim.maxUnavailable = DefaultParallel, 1
	return h
}

// mustConverge applies c without faults and checks the result.
func (h *harness) mustConverge(c districts.Cluster) Result {
	h.t.Helper()
	h.prepare(c)
	res, err := h.apply(c, 0)
	if err != nil || !res.Converged {
		h.t.Fatalf("apply: converged=%v err=%v", res.Converged, err)
	}
	h.checkConverged(c)
	return res
}

func (h *harness) nodeIDs(role string) []string {
	var ids []string
	for _, n := range h.load().Nodes {
		if n.Role == role && n.Phase != districts.PhaseTerminating {
			ids = append(ids, n.ID)
		}
	}
	return ids
}

func TestRefusedDrainSkipsTheNodeAndTriesAnother(t *testing.T) {
	t.Parallel()
	h := newTestHarness(t)
	h.mustConverge(paperCluster(1, 3, 0))
	workers := h.nodeIDs("worker")
	refused := workers[len(workers)-1] // the newest is the first candidate
	h.sim.refuse[refused] = true

	c := paperCluster(1, 2, 0)
	h.prepare(c)
	res, err := h.apply(c, 0)
	if err != nil || !res.Converged {
		t.Fatalf("apply: converged=%v err=%v", res.Converged, err)
	}
	h.checkConverged(c)
	if !slices.Contains(h.nodeIDs("worker"), refused) {
		t.Errorf("node %s whose drain was refused was removed; workers now %v", refused, h.nodeIDs("worker"))
	}
}

func TestRefusedDrainOfEveryCandidateIsNotConverged(t *testing.T) {
	t.Parallel()
	h := newTestHarness(t)
	h.mustConverge(paperCluster(1, 2, 0))
	for _, id := range h.nodeIDs("worker") {
		h.sim.refuse[id] = true
	}
	c := paperCluster(1, 1, 0)
	h.prepare(c)
	res, err := h.apply(c, 0)
	if !errors.Is(err, ErrNotConverged) || res.Converged {
		t.Fatalf("apply: converged=%v err=%v, want ErrNotConverged", res.Converged, err)
	}
	if !strings.Contains(err.Error(), "drain of node paper-worker-") || !strings.Contains(err.Error(), "disruption budget") {
		t.Errorf("error does not name the node and the reason: %v", err)
	}
	if got := h.nodeIDs("worker"); len(got) != 2 {
		t.Errorf("workers %v: a refused node was killed", got)
	}
	for _, n := range h.load().Nodes {
		if n.Role == "worker" && (n.Phase != districts.PhaseJoined || !strings.Contains(n.Message, "refused")) {
			t.Errorf("node %s: phase %s message %q, want joined with the refusal", n.ID, n.Phase, n.Message)
		}
	}
	if len(h.sim.violations) > 0 {
		t.Errorf("violations: %v", h.sim.violations)
	}
	// Once the budget allows it, the next run finishes the job.
	clear(h.sim.refuse)
	h.mustConverge(c)
}

// TestCrashBetweenAnyTwoSteps kills the run at every driver call of a
// launch and of a migration in turn; the next run always converges and
// nothing leaks.
func TestCrashBetweenAnyTwoSteps(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		start, goal districts.Cluster
	}{
		{"launch", paperCluster(0, 0, 0), paperCluster(3, 1, 2)},
		{"migrate", paperCluster(1, 2, 0), paperCluster(1, 0, 2)},
		{"destroy", paperCluster(1, 1, 1), paperCluster(0, 0, 0)},
	} {
		calls := 0
		{
			h := newTestHarness(t)
			h.mustConverge(tc.start)
			h.sim.calls = 0
			h.mustConverge(tc.goal)
			calls = len(h.sim.log)
		}
		for crashAt := 1; crashAt <= calls; crashAt++ {
			h := newTestHarness(t)
			h.mustConverge(tc.start)
			h.sim.log = nil
			h.prepare(tc.goal)
			if _, err := h.apply(tc.goal, crashAt); err == nil && h.sim.crashed {
				t.Fatalf("%s: crash at call %d went unnoticed", tc.name, crashAt)
			}
			res, err := h.apply(tc.goal, 0)
			if err != nil || !res.Converged {
				t.Fatalf("%s: after a crash at call %d (%v): converged=%v err=%v", tc.name, crashAt, h.sim.log, res.Converged, err)
			}
			h.checkConverged(tc.goal)
			if t.Failed() {
				t.Fatalf("%s: crash at call %d: %v", tc.name, crashAt, h.sim.log)
			}
		}
	}
}

func TestQuotaExceededIsReportedAndRetried(t *testing.T) {
	t.Parallel()
	h := newTestHarness(t)
	h.sim.quota["aws-europe"] = 1
	c := paperCluster(1, 0, 3)
	h.prepare(c)
	_, err := h.apply(c, 0)
	if !errors.Is(err, ErrNotConverged) || !strings.Contains(err.Error(), "quota exceeded") {
		t.Fatalf("err = %v, want not converged naming the quota", err)
	}
	clear(h.sim.quota)
	h.mustConverge(c)
}

// TestTerminationsDoNotBlockTheNextDrain: with machines taking an hour to
// die, a scale-down still drains node after node in one round.
func TestTerminationsDoNotBlockTheNextDrain(t *testing.T) {
	t.Parallel()
	h := newTestHarness(t)
	h.mustConverge(paperCluster(1, 1, 3))
	h.sim.terminateFor = time.Hour
	h.sim.log = nil
	c := paperCluster(1, 1, 0)
	h.prepare(c)
	opts := h.options(c)
	opts.WaitTimeout = 2 * time.Hour
	res, err := Apply(t.Context(), opts)
	if err != nil || !res.Converged {
		t.Fatalf("apply: converged=%v err=%v", res.Converged, err)
	}
	first := slices.IndexFunc(h.sim.log, func(s string) bool { return strings.HasPrefix(s, "terminate") })
	lastDrain := -1
	for i, s := range h.sim.log {
		if strings.HasPrefix(s, "drain") {
			lastDrain = i
		}
	}
	if first < 0 || lastDrain < first {
		t.Fatalf("want drains after the first terminate: %v", h.sim.log)
	}
	for _, s := range h.sim.log[first:lastDrain] {
		if strings.HasPrefix(s, "list") {
			t.Fatalf("the loop re-observed (waited) between a terminate and the next drain: %v", h.sim.log)
		}
	}
	h.checkConverged(c)
}

func TestLostStateIsAdoptedNotRelaunched(t *testing.T) {
	t.Parallel()
	h := newTestHarness(t)
	c := paperCluster(3, 1, 2)
	h.mustConverge(c)
	launches := len(h.sim.instances)
	h.saved = nil
	var notes []string
	opts := h.options(c)
	opts.OnEvent = func(e Event) {
		if e.Type == EventPlan {
			notes = append(notes, e.Plan.Notes...)
		}
	}
	res, err := Apply(t.Context(), opts)
	if err != nil || !res.Converged {
		t.Fatalf("apply: converged=%v err=%v", res.Converged, err)
	}
	if len(h.sim.instances) != launches {
		t.Errorf("%d machines after adoption, want the same %d", len(h.sim.instances), launches)
	}
	if adopted := len(slices.DeleteFunc(notes, func(s string) bool { return !strings.HasPrefix(s, "adopted node") })); adopted != 6 {
		t.Errorf("adopted %d nodes, want 6: %v", adopted, notes)
	}
	h.checkConverged(c)
}

func TestForgottenNodeIsReplaced(t *testing.T) {
	t.Parallel()
	h := newTestHarness(t)
	c := paperCluster(1, 0, 2)
	h.mustConverge(c)
	gone := h.load().Nodes[len(h.load().Nodes)-1]
	delete(h.sim.instances, gone.ProviderID)
	delete(h.sim.members, gone.ID)
	plan, err := MakePlan(t.Context(), h.options(c), true)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(plan.Notes, func(s string) bool { return strings.HasPrefix(s, "forgot node "+gone.ID) }) {
		t.Errorf("notes %v do not report the forgotten node %s", plan.Notes, gone.ID)
	}
	h.mustConverge(c)
	if _, ok := findNode(h.load(), gone.ID); ok {
		t.Errorf("apply kept %s in state", gone.ID)
	}
}

func TestDestroyLeavesNothing(t *testing.T) {
	t.Parallel()
	h := newTestHarness(t)
	h.mustConverge(paperCluster(3, 2, 2))
	h.sim.terminateFor = 30 * time.Second
	h.mustConverge(paperCluster(0, 0, 0))
	for id := range h.sim.instances {
		if !isForeign(id) {
			t.Errorf("machine %s left behind", id)
		}
	}
	for id := range h.sim.groups {
		if !isForeign(id) {
			t.Errorf("group %s left behind", id)
		}
	}
	if st := h.load(); len(st.Nodes) != 0 || len(st.SecurityGroups) != 0 {
		t.Errorf("state not empty: %+v", st)
	}
}

func TestPlanWithoutRefreshCallsNothing(t *testing.T) {
	t.Parallel()
	c := paperCluster(3, 3, 10)
	plan, err := MakePlan(t.Context(), Options{Cluster: c, Districts: simDistricts[:2]}, false)
	if err != nil {
		t.Fatal(err)
	}
	got := plan.Summary()
	// 2 groups and 16 machines to add.
	if want := (Summary{Add: 18}); got != want {
		t.Errorf("summary %+v, want %+v", got, want)
	}
	if plan.Actions[0].Kind != KindCreateGroup || plan.Actions[2].Kind != KindLaunch {
		t.Errorf("plan does not create groups before launching: %v", plan.Actions[:3])
	}
}

func TestUnknownDistrictInStateIsAnError(t *testing.T) {
	t.Parallel()
	h := newTestHarness(t)
	opts := h.options(paperCluster(1, 0, 0))
	opts.State.Nodes = []districts.Node{{ID: "paper-worker-9", District: "os-gone", Role: "worker", ProviderID: "x"}}
	_, err := Apply(t.Context(), opts)
	if err == nil || !strings.Contains(err.Error(), "os-gone") || !strings.Contains(err.Error(), "districts.json") {
		t.Fatalf("err = %v, want one naming the district and districts.json", err)
	}
}

func TestOrphanedGroupIsRemoved(t *testing.T) {
	t.Parallel()
	h := newTestHarness(t)
	c := paperCluster(1, 1, 1)
	h.mustConverge(c)
	h.sim.groups["sg-leftover"] = &simGroup{Group: provider.Group{ProviderID: "sg-leftover", Name: "transit-paper-aws-europe-old",
		Tags: map[string]string{districts.TagCluster: "paper", districts.TagLineage: h.load().Lineage}}, district: "aws-europe"}
	plan, err := MakePlan(t.Context(), h.options(c), true)
	if err != nil {
		t.Fatal(err)
	}
	want := Action{Kind: KindDeleteGroup, District: "aws-europe", Group: "transit-paper-aws-europe-old", Reason: "orphaned group with the cluster's tags"}
	if len(plan.Actions) != 1 || !reflect.DeepEqual(plan.Actions[0], want) {
		t.Fatalf("plan %+v, want only %+v", plan.Actions, want)
	}
	h.mustConverge(c)
	if _, ok := h.sim.groups["sg-leftover"]; ok {
		t.Error("orphaned group still exists")
	}
}

func TestConfirmedPlanMustStillHold(t *testing.T) {
	t.Parallel()
	h := newTestHarness(t)
	c := paperCluster(1, 1, 0)
	h.mustConverge(c)
	bigger := paperCluster(1, 2, 0)
	shown, err := MakePlan(t.Context(), h.options(bigger), true)
	if err != nil {
		t.Fatal(err)
	}
	// While the person reads the plan, a worker disappears.
	gone := h.load().Nodes[len(h.load().Nodes)-1]
	delete(h.sim.instances, gone.ProviderID)
	delete(h.sim.members, gone.ID)
	opts := h.options(bigger)
	opts.Confirmed = &shown
	launches := len(h.sim.instances)
	before := h.load()
	if _, err := Apply(t.Context(), opts); !errors.Is(err, ErrStalePlan) {
		t.Fatalf("err = %v, want ErrStalePlan", err)
	}
	if len(h.sim.instances) != launches {
		t.Error("a stale plan launched machines")
	}
	// Refused in its first round, the run wrote nothing either.
	if after := h.load(); !reflect.DeepEqual(after, before) {
		t.Error("a stale plan wrote the state")
	}
	// Unchanged, the confirmed plan runs.
	shown, err = MakePlan(t.Context(), h.options(bigger), true)
	if err != nil {
		t.Fatal(err)
	}
	opts = h.options(bigger)
	opts.Confirmed = &shown
	if res, err := Apply(t.Context(), opts); err != nil || !res.Converged {
		t.Fatalf("apply of a fresh confirmed plan: %v", err)
	}
}

func TestMachinesSharingANodeIDAreToldApart(t *testing.T) {
	t.Parallel()
	h := newTestHarness(t)
	c := paperCluster(1, 0, 2)
	h.mustConverge(c)
	// Someone cloned a worker, tags and all.
	var orig *simInstance
	for _, in := range h.sim.instances {
		if in.Tags[districts.TagRole] == "worker" {
			orig = in
			break
		}
	}
	clone := *orig
	clone.ProviderID = "i-clone"
	clone.PublicIP, clone.PrivateIP = "203.0.113.99", "10.9.9.9"
	h.sim.instances["i-clone"] = &clone
	res, err := h.apply(c, 0)
	if err != nil || !res.Converged {
		t.Fatalf("apply: converged=%v err=%v", res.Converged, err)
	}
	if err := districts.ValidateResources(h.load()); err != nil {
		t.Fatalf("saved state is invalid: %v", err)
	}
	h.checkConverged(c)
}

// A run whose state lock is no longer its own (Options.Fence fails)
// starts no further action: the error ends the run, naming why.
func TestFenceStopsTheRun(t *testing.T) {
	t.Parallel()
	h := newTestHarness(t)
	c := paperCluster(1, 1, 2)
	h.prepare(c)
	lost := errors.New("state lock lost: another run took it over")
	var mu sync.Mutex
	asked, failed, startedAfter := 0, false, 0
	o := h.options(c)
	o.Fence = func() error {
		mu.Lock()
		defer mu.Unlock()
		if asked++; asked > 3 {
			failed = true
			return lost
		}
		return nil
	}
	o.OnEvent = func(e Event) {
		mu.Lock()
		defer mu.Unlock()
		if failed && e.Type == EventAction && e.Phase == PhaseStart {
			startedAfter++
		}
	}
	_, err := Apply(t.Context(), o)
	if !errors.Is(err, lost) {
		t.Fatalf("apply with the lock lost: %v, want the fence's error", err)
	}
	if startedAfter > 0 {
		t.Errorf("%d actions started after the fence failed", startedAfter)
	}
}

// TestWaitTimeoutIsClockTime: waiting for what only time fixes (here a
// termination that takes a day) gives up after WaitTimeout of the clock's
// time, observing included — not after WaitTimeout of sleeps, which with
// slow listings was several times longer (an e2e apply waited 15 minutes
// on a 10-minute bound).
func TestWaitTimeoutIsClockTime(t *testing.T) {
	t.Parallel()
	h := newTestHarness(t)
	h.mustConverge(paperCluster(1, 1, 1))
	h.sim.terminateFor = 24 * time.Hour
	h.sim.clock.Step = 500 * time.Millisecond // every look at the clock: a slow round
	c := paperCluster(1, 1, 0)                // aws-europe emptied: its group waits for its machine to go
	h.prepare(c)
	opts := h.options(c)
	opts.WaitTimeout = time.Minute
	start := h.sim.clock.Peek()
	_, err := Apply(t.Context(), opts)
	if !errors.Is(err, ErrNotConverged) || !strings.Contains(err.Error(), "gave up after") {
		t.Fatalf("err = %v, want not converged, given up waiting", err)
	}
	if took := h.sim.clock.Peek().Sub(start); took > opts.WaitTimeout+30*time.Second {
		t.Errorf("gave up after %s of the clock's time, want about %s", took, opts.WaitTimeout)
	}
}
