package control

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// One test per scenario of the control-loop safety issue: each failed on
// the loop before the platform's view decided.

// Scenario 1: a join that went through although the connection dropped
// leaves a member, which is never terminated; its labels are retried.
func TestJoinThatDroppedIsObservedNotTerminated(t *testing.T) {
	t.Parallel()
	h := newTestHarness(t)
	h.mustConverge(paperCluster(1, 1, 0))
	c := paperCluster(1, 2, 0)
	h.prepare(c)
	h.sim.joinDrop = 1
	h.sim.labelFail = 1
	if _, err := h.apply(c, 0); err == nil {
		t.Fatal("apply with every join dropping and every label failing converged")
	}
	h.sim.joinDrop, h.sim.labelFail = 0, 0
	h.mustConverge(c) // checkConverged fails on "terminated ... while it is still a platform member"
	if n := len(h.sim.instances); n != 3 {
		t.Errorf("%d machines, want 3: the joined node was replaced instead of kept", n)
	}
}

// Scenario 2: masters that do not answer stop every node change; the run
// is not converged and names them. A lost platform is rebuilt only when
// asked to.
func TestUnreachablePlatformChangesNoNode(t *testing.T) {
	t.Parallel()
	h := newTestHarness(t)
	h.mustConverge(paperCluster(1, 2, 0))
	before := len(h.sim.instances)
	h.sim.membersFail = 1
	c := paperCluster(1, 1, 2)
	h.prepare(c)
	_, err := h.apply(c, 0)
	if !errors.Is(err, provider.ErrPlatformUnreachable) || !strings.Contains(err.Error(), "paper-master-1") {
		t.Fatalf("err = %v, want not converged, platform unreachable, naming paper-master-1", err)
	}
	if len(h.sim.instances) != before || len(h.sim.violations) > 0 {
		t.Errorf("machines %d → %d, violations %v: nodes were changed", before, len(h.sim.instances), h.sim.violations)
	}
	h.sim.membersFail = 0
	h.mustConverge(c)
}

func TestLostPlatformIsRebuiltOnlyOnRequest(t *testing.T) {
	t.Parallel()
	h := newTestHarness(t)
	c := paperCluster(1, 2, 0)
	h.mustConverge(c)
	for id, in := range h.sim.instances {
		if in.Tags[districts.TagRole] == districts.RoleMaster {
			delete(h.sim.instances, id) // the only master, deleted by hand
		}
	}
	h.prepare(c)
	_, err := h.apply(c, 0)
	if !errors.Is(err, ErrPlatformLost) || !strings.Contains(err.Error(), "--rebuild-platform") {
		t.Fatalf("err = %v, want platform lost naming --rebuild-platform", err)
	}
	if h.sim.gen != 1 {
		t.Fatalf("a platform was initialised without --rebuild-platform")
	}
	h.sim.rebuild = true
	h.mustConverge(c)
	if h.sim.gen != 2 {
		t.Errorf("platform generation %d, want a rebuilt one", h.sim.gen)
	}
}

// Scenario 3: a master deleted by hand is removed from the platform
// (after the rest agree) and replaced; quorum comes from the platform.
func TestDeletedMasterIsForgottenAndReplaced(t *testing.T) {
	t.Parallel()
	h := newTestHarness(t)
	c := paperCluster(3, 1, 0)
	h.mustConverge(c)
	for id, in := range h.sim.instances {
		if in.Tags[districts.TagNode] == "paper-master-2" {
			delete(h.sim.instances, id)
		}
	}
	h.mustConverge(c) // checkConverged: no member without a machine
	if _, ok := h.sim.members["paper-master-2"]; ok {
		t.Error("the dead master is still a member")
	}
}

// Scenario 5: destroy converges however long terminations take.
func TestDestroyWaitsForSlowTerminations(t *testing.T) {
	t.Parallel()
	h := newTestHarness(t)
	h.mustConverge(paperCluster(1, 0, 1))
	h.sim.terminateFor = 20 * time.Minute
	c := paperCluster(0, 0, 0)
	h.prepare(c)
	opts := h.options(c)
	opts.WaitTimeout = time.Hour
	if res, err := Apply(t.Context(), opts); err != nil || !res.Converged {
		t.Fatalf("destroy: converged=%v err=%v", res.Converged, err)
	}
}

// Scenario 6: a cordon an operator set is never undone.
func TestOperatorCordonIsLeftAlone(t *testing.T) {
	t.Parallel()
	h := newTestHarness(t)
	c := paperCluster(1, 2, 0)
	h.mustConverge(c)
	m := h.sim.members["paper-worker-1"]
	m.cordoned, m.operator = true, true
	res, err := h.apply(c, 0)
	if err != nil || !res.Converged {
		t.Fatalf("apply: converged=%v err=%v", res.Converged, err)
	}
	if !m.cordoned || len(h.sim.violations) > 0 {
		t.Errorf("cordoned=%v violations=%v: transit undid an operator's cordon", m.cordoned, h.sim.violations)
	}
	if !strings.Contains(strings.Join(res.Warnings, "\n"), "paper-worker-1 is cordoned, and not by transit") {
		t.Errorf("warnings %v do not report the cordon", res.Warnings)
	}
}

// Scenario 7: an apply that wants no node never tears the cluster down.
func TestApplyOfNothingIsRefused(t *testing.T) {
	t.Parallel()
	h := newTestHarness(t)
	h.mustConverge(paperCluster(1, 2, 1))
	before := len(h.sim.instances)
	c := paperCluster(0, 0, 0)
	opts := h.options(c)
	opts.Destroy = false // what `transit apply` does
	_, err := Apply(t.Context(), opts)
	if !errors.Is(err, ErrWouldDestroy) || !strings.Contains(err.Error(), "transit destroy") {
		t.Fatalf("err = %v, want ErrWouldDestroy naming transit destroy", err)
	}
	if len(h.sim.instances) != before {
		t.Error("machines were removed")
	}
	opts = h.options(c)
	opts.Destroy, opts.AllowDestroy = false, true
	if res, err := Apply(t.Context(), opts); err != nil || !res.Converged {
		t.Fatalf("--allow-destroy: converged=%v err=%v", res.Converged, err)
	}
}

// Scenario 9: a cluster of the same name from another lineage is foreign.
func TestSameNamedClusterIsNotAdopted(t *testing.T) {
	t.Parallel()
	h := newTestHarness(t)
	c := paperCluster(1, 1, 0)
	h.mustConverge(c)
	other := newTestHarness(t)
	other.sim = h.sim // the same account, another laptop's resources.json
	if err := other.save(districts.Resources{Type: "resources", Version: districts.ResourcesVersion, Cluster: "paper", Lineage: "anotherlineage01"}); err != nil {
		t.Fatal(err)
	}
	other.prepare(c)
	res, err := other.apply(c, 0)
	// The second "paper" cannot take its group's name: it is refused,
	// and the first cluster is untouched.
	if err == nil || res.Converged {
		t.Fatalf("a second cluster of the same name converged over the first")
	}
	if !strings.Contains(err.Error(), "another cluster named") {
		t.Errorf("err = %v, want one naming the other cluster", err)
	}
	h.checkConverged(c)
}

// Scenario 10: a district dropped from districts.json while it holds nodes.
func TestDroppedDistrictIsRefused(t *testing.T) {
	t.Parallel()
	h := newTestHarness(t)
	h.mustConverge(paperCluster(1, 0, 1))
	opts := h.options(paperCluster(1, 0, 0))
	opts.Districts = simDistricts[1:2] // aws-europe is gone
	_, err := Apply(t.Context(), opts)
	if err == nil || !strings.Contains(err.Error(), "aws-europe") || !strings.Contains(err.Error(), "quantities to 0") {
		t.Fatalf("err = %v, want one naming the district and saying to scale it to 0", err)
	}
	if _, err := MakePlan(t.Context(), opts, false); err == nil {
		t.Fatal("plan --refresh=false accepted the dropped district")
	}
}

// Scenario 11: a deployment that always fails to join stops relaunching
// after maxJoinFailures and says why; node numbers are never reused. One
// run launches no more than the intended state lacked at its start plus
// max_surge (the spend guard), so the third attempt is the next run's.
func TestFailingJoinsBackOff(t *testing.T) {
	t.Parallel()
	h := newTestHarness(t)
	h.mustConverge(paperCluster(1, 0, 0))
	h.sim.joinFail = 1
	h.sim.log = nil
	c := paperCluster(1, 1, 0)
	h.prepare(c)
	_, err := h.apply(c, 0)
	if !errors.Is(err, ErrNotConverged) || !strings.Contains(err.Error(), "spend guard: this run launched 2 machine(s)") {
		t.Fatalf("err = %v, want not converged naming the spend guard", err)
	}
	_, err = h.apply(c, 0)
	if !errors.Is(err, ErrNotConverged) || !strings.Contains(err.Error(), "failed to install or join") {
		t.Fatalf("err = %v, want not converged naming the failing joins", err)
	}
	launches := 0
	for _, l := range h.sim.log {
		if strings.HasPrefix(l, "launch") {
			launches++
		}
	}
	if launches != maxJoinFailures {
		t.Errorf("%d launches, want %d before backing off", launches, maxJoinFailures)
	}
	// The next cron run within the backoff launches nothing.
	h.sim.log = nil
	if _, err := h.apply(c, 0); err == nil || strings.Contains(strings.Join(h.sim.log, " "), "launch") {
		t.Errorf("a run inside the backoff launched again: %v", h.sim.log)
	}
	h.sim.joinFail = 0
	h.sim.clock.Advance(time.Hour)
	h.mustConverge(c)
	if ids := h.nodeIDs("worker"); len(ids) != 1 || ids[0] != "paper-worker-4" {
		t.Errorf("workers %v, want paper-worker-4 (numbers 1-3 are never reused)", ids)
	}
}

// Case 8 of the listing issue: a failure time written by a clock that ran
// a year ahead counts as now, and is saved so: the backoff ends after its
// documented maximum, not a year later.
func TestBackoffFromAClockThatRanAhead(t *testing.T) {
	t.Parallel()
	h := newTestHarness(t)
	h.mustConverge(paperCluster(1, 0, 0))
	st := h.load()
	key := districts.DeploymentKey{District: "gce-europe", Flavor: "small", Role: "worker"}
	st.Failures = map[string]districts.Failure{key.String(): {Count: 30, LastError: "apt-get: unable to fetch",
		LastAt: h.sim.clock.Peek().AddDate(1, 0, 0)}}
	if err := h.save(st); err != nil {
		t.Fatal(err)
	}
	c := paperCluster(1, 1, 0)
	h.prepare(c)
	if _, err := h.apply(c, 0); !errors.Is(err, ErrNotConverged) || !strings.Contains(err.Error(), "no relaunch before") {
		t.Fatalf("err = %v, want the backoff", err)
	}
	h.sim.clock.Advance(maxJoinBackoff + time.Minute)
	h.mustConverge(c)
	if got := retryAt(districts.Failure{Count: 30, LastAt: h.sim.clock.Peek().AddDate(1, 0, 0)}, h.sim.clock.Peek()); got.Sub(h.sim.clock.Peek()) != maxJoinBackoff {
		t.Errorf("a backoff from a time a year ahead ends at %v, want %v from now", got, maxJoinBackoff)
	}
}

// Scenario 12: max_surge 0 replaces in place.
func TestMaxSurgeZeroReplacesInPlace(t *testing.T) {
	t.Parallel()
	h := newTestHarness(t)
	h.mustConverge(paperCluster(1, 2, 0))
	c := paperCluster(1, 0, 2)
	c.Strategy = districts.Strategy{MaxSurge: districts.Int(0), MaxUnavailable: districts.Int(1)}
	h.prepare(c)
	h.sim.peak["worker"] = 2 // never above the intended size
	res, err := h.apply(c, 0)
	if err != nil || !res.Converged {
		t.Fatalf("apply: converged=%v err=%v", res.Converged, err)
	}
	h.checkConverged(c)
}

// max_unavailable counts every cordoned node, an operator's too: with a
// kept node cordoned by hand and max_unavailable 2, one more node at a
// time is drained.
func TestOperatorCordonCountsAgainstMaxUnavailable(t *testing.T) {
	t.Parallel()
	h := newTestHarness(t)
	h.mustConverge(paperCluster(1, 5, 1))
	for id, m := range h.sim.members {
		if strings.HasPrefix(id, "paper-worker-") && h.sim.instances[m.machine].district == "aws-europe" {
			m.cordoned, m.operator = true, true
		}
	}
	c := paperCluster(1, 1, 1)
	c.Strategy = districts.Strategy{MaxSurge: districts.Int(1), MaxUnavailable: districts.Int(2)}
	h.prepare(c)
	// Three gce workers may go (five ready, two wanted); the fourth
	// stays while the aws one is cordoned.
	if _, err := h.apply(c, 0); !errors.Is(err, ErrNotConverged) {
		t.Fatalf("err = %v, want not converged", err)
	}
	if len(h.sim.violations) > 0 {
		t.Errorf("violations: %v", h.sim.violations) // a drain beyond max_unavailable
	}
	if got := len(h.nodeIDs("worker")); got != 3 {
		t.Errorf("%d workers left, want 3", got)
	}
}

// A refused drain leaves the node schedulable even when an earlier,
// interrupted drain had cordoned it; an operator's cordon stays.
func TestRefusedDrainUndoesOnlyTransitsCordon(t *testing.T) {
	t.Parallel()
	for _, operator := range []bool{false, true} {
		t.Run(fmt.Sprintf("operator=%v", operator), func(t *testing.T) {
			t.Parallel()
			h := newTestHarness(t)
			h.mustConverge(paperCluster(1, 2, 0))
			st := h.load()
			for i := range st.Nodes {
				if st.Nodes[i].ID == "paper-worker-2" {
					st.Nodes[i].CordonedByTransit = !operator // the run that cordoned it was killed
				}
			}
			if err := h.save(st); err != nil {
				t.Fatal(err)
			}
			m := h.sim.members["paper-worker-2"]
			m.cordoned, m.operator = true, operator
			h.sim.refuse["paper-worker-2"] = true
			c := paperCluster(1, 1, 0)
			h.prepare(c)
			_, err := h.apply(c, 0)
			// Without transit's cordon, paper-worker-1 goes instead. With
			// the operator's, the one ready worker must stay.
			if operator != errors.Is(err, ErrNotConverged) {
				t.Fatalf("err = %v", err)
			}
			if operator && !strings.Contains(err.Error(), "paper-worker-1 stays for now") {
				t.Errorf("err = %v, want one saying paper-worker-1 stays", err)
			}
			if m.cordoned != operator || len(h.sim.violations) > 0 {
				t.Errorf("cordoned=%v, violations %v; want cordoned only by an operator", m.cordoned, h.sim.violations)
			}
			for _, n := range h.load().Nodes {
				if n.ID == "paper-worker-2" && (n.CordonedByTransit || operator != (n.Phase == districts.PhaseCordoned)) {
					t.Errorf("state: phase %s, cordoned by transit %v", n.Phase, n.CordonedByTransit)
				}
			}
		})
	}
}

// Scenario 8: destroy never asks the platform, so it works while no
// master answers.
func TestDestroyWithoutAPlatform(t *testing.T) {
	t.Parallel()
	h := newTestHarness(t)
	h.mustConverge(paperCluster(1, 1, 1))
	h.sim.membersFail = 1
	h.sim.log = nil
	h.mustConverge(paperCluster(0, 0, 0))
	for _, call := range h.sim.log {
		if call == "members" || strings.HasPrefix(call, "drain") || strings.HasPrefix(call, "remove") {
			t.Errorf("destroy called the platform: %s", call)
		}
	}
}

// Scenario 12: a label and an uncordon of one node in the same batch both
// land in resources.json.
func TestLabelAndUncordonOfOneNodeBothSaved(t *testing.T) {
	t.Parallel()
	h := newTestHarness(t)
	h.mustConverge(paperCluster(1, 1, 0))
	m := h.sim.members["paper-worker-1"]
	m.cordoned, m.labels = true, nil // an interrupted drain, labels gone
	st := h.load()
	for i := range st.Nodes {
		if st.Nodes[i].ID == "paper-worker-1" {
			st.Nodes[i].CordonedByTransit = true
		}
	}
	if err := h.save(st); err != nil {
		t.Fatal(err)
	}
	c := paperCluster(1, 1, 0)
	opts := h.options(c)
	opts.MaxRounds = 1 // the saved state after one round, before any re-observation
	_, _ = Apply(t.Context(), opts)
	for _, n := range h.load().Nodes {
		if n.ID == "paper-worker-1" && (n.Phase != districts.PhaseJoined || n.CordonedByTransit || n.Tags["location"] != "Europe") {
			t.Errorf("saved node: phase %s, cordoned by transit %v, tags %v; want joined, false, location=Europe", n.Phase, n.CordonedByTransit, n.Tags)
		}
	}
}

// An addon whose removal the platform refused (objects only its
// controller can see out still exist) leaves the run not converged, and
// says so in a way callers can act on: ErrAddonInUse.
func TestAddonsStepRefusedRemoval(t *testing.T) {
	t.Parallel()
	h := newTestHarness(t)
	c := paperCluster(1, 1, 0)
	h.prepare(c)
	h.sim.addonsFail = 1
	h.sim.addonsErr = &provider.AddonInUseError{Addon: "streams", Resource: "topologies.streams.transit.io", Users: []string{"team-a/orders"}}
	res, err := h.apply(c, 0)
	if !errors.Is(err, ErrNotConverged) || !errors.Is(err, provider.ErrAddonInUse) || !strings.Contains(err.Error(), "team-a/orders") {
		t.Fatalf("apply with a refused addon removal: %v, want not converged, ErrAddonInUse, naming team-a/orders", err)
	}
	if res.Converged || len(res.Problems) != 1 || !strings.HasPrefix(res.Problems[0], "addons: removing addon streams refused") {
		t.Errorf("result %+v", res)
	}
}

// The addons step runs once the nodes converged, with cluster.json's
// addons; a failing step leaves the run not converged and the next run
// runs it again; a destroy never runs it.
func TestAddonsStepRunsOnceConverged(t *testing.T) {
	t.Parallel()
	h := newTestHarness(t)
	c := paperCluster(1, 1, 0)
	c.Addons = []districts.Addon{{Name: "relations"}}
	h.prepare(c)
	h.sim.addonsFail = 1
	_, err := h.apply(c, 0)
	if !errors.Is(err, ErrNotConverged) || !strings.Contains(err.Error(), "addons step failed") {
		t.Fatalf("apply with a failing addons step: %v, want not converged naming the addons step", err)
	}
	if len(h.sim.instances) != 2 {
		t.Errorf("%d machines: the addons step ran before the nodes converged", len(h.sim.instances))
	}
	h.sim.addonsFail = 0
	h.sim.addonsRuns = nil
	h.mustConverge(c)
	if len(h.sim.addonsRuns) != 1 || len(h.sim.addonsRuns[0]) != 1 || h.sim.addonsRuns[0][0] != "relations" {
		t.Errorf("addons steps %v, want one with [relations]", h.sim.addonsRuns)
	}
	h.sim.addonsRuns = nil
	opts := h.options(c)
	opts.Destroy = true
	if res, err := Apply(t.Context(), opts); err != nil || !res.Converged {
		t.Fatalf("destroy: converged=%v err=%v", res.Converged, err)
	}
	if len(h.sim.addonsRuns) != 0 {
		t.Errorf("destroy ran the addons step: %v", h.sim.addonsRuns)
	}
}

// A control plane that does not answer for a moment after the run
// changed it (etcd electing a leader once a master joined or left, an
// API server restarting) is waited for, then the run goes on: it is not
// the unreachable platform a run finds at its start (CI run 40: the
// round after a master's join asked while etcd elected, and the run
// ended not converged). One that stays silent still ends the run, naming
// it.
func TestPlatformSilentAfterAJoinIsWaitedFor(t *testing.T) {
	t.Parallel()
	h := newTestHarness(t)
	h.mustConverge(paperCluster(1, 1, 0))
	h.sim.afterJoin = 3
	h.mustConverge(paperCluster(1, 2, 0))
	if ids := h.nodeIDs("worker"); len(ids) != 2 {
		t.Errorf("workers %v, want 2", ids)
	}

	h.sim.afterJoin = 1 << 20
	c := paperCluster(1, 3, 0)
	h.prepare(c)
	_, err := h.apply(c, 0)
	if !errors.Is(err, provider.ErrPlatformUnreachable) || !strings.Contains(err.Error(), "etcdserver: leader changed") {
		t.Fatalf("err = %v, want the platform unreachable, naming why", err)
	}
}
