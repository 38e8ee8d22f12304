package control

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// One test per case of the issue "the loop trusts no listing": each drives
// the loop against the simulator into the surprise the case names.

// instanceOf is the sim's machine of node id (not a copy).
func (h *harness) instanceOf(t *testing.T, id string) *simInstance {
	t.Helper()
	m, ok := h.sim.members[id]
	if !ok {
		t.Fatalf("%s is no member", id)
	}
	return h.sim.instances[m.machine]
}

// copyMachine makes a machine with orig's tags, as an image or a launch
// template made from a node would; created says when the cloud says it
// was made.
func (h *harness) copyMachine(orig *simInstance, id string, created time.Time) *simInstance {
	cp := *orig
	cp.Tags = maps.Clone(orig.Tags)
	h.sim.nextID++
	cp.ProviderID, cp.CreatedAt = id, created
	cp.PublicIP, cp.PrivateIP = fmt.Sprintf("198.51.100.%d", h.sim.nextID), fmt.Sprintf("10.9.9.%d", h.sim.nextID)
	cp.launched = false
	h.sim.instances[id] = &cp
	return &cp
}

// plant puts a running machine of the cluster's lineage in district, as
// a crashed run leaves one: tagged, no platform on it.
func (h *harness) plant(id, district, role, lineage string) {
	s := h.sim
	s.nextID++
	pid := fmt.Sprintf("i-%04d", s.nextID)
	n := districts.Node{ID: id, Cluster: s.cluster, District: district, Role: role, Flavor: "small"}
	s.instances[pid] = &simInstance{Instance: provider.Instance{ProviderID: pid, Tags: provider.IdentityTags(n, lineage),
		PublicIP: fmt.Sprintf("203.0.113.%d", s.nextID), PrivateIP: fmt.Sprintf("10.0.9.%d", s.nextID), State: provider.InstanceRunning,
		CreatedAt: s.cloudNow()}, district: district, launched: true}
}

func (h *harness) launches() int {
	n := 0
	for _, l := range h.sim.log {
		if strings.HasPrefix(l, "launch ") {
			n++
		}
	}
	return n
}

// Case 1: a copy of a member that the cloud lists first, or that claims
// to be older, never gets the member killed: the platform's identity of
// its members decides, and the copy is terminated, never drained. On a
// one-master cluster the member is the platform.
func TestCopyOfAMemberIsRemovedNeverTheMember(t *testing.T) {
	t.Parallel()
	for _, lost := range []bool{false, true} {
		t.Run(fmt.Sprintf("resources.json lost=%v", lost), func(t *testing.T) {
			t.Parallel()
			c := paperCluster(1, 0, 1)
			for seed := range uint64(8) { // listings come in random order
				h := newHarness(t, seed, simDistricts[:2])
				h.sim.parallel, h.sim.maxUnavailable = DefaultParallel, 1
				h.sim.providerIDs = seed%2 == 0 // Kubernetes knows machines by provider id, Swarm by address
				h.mustConverge(c)
				master := h.instanceOf(t, "paper-master-1")
				// The copy claims to be older: only the platform can tell.
				h.copyMachine(master, "i-0000", master.CreatedAt.Add(-time.Hour))
				worker := h.instanceOf(t, "paper-worker-1")
				h.copyMachine(worker, "i-0001", worker.CreatedAt.Add(-time.Hour))
				if lost {
					h.saved = nil
				}
				h.prepare(c)
				res, err := h.apply(c, 0)
				if err != nil || !res.Converged {
					t.Fatalf("seed %d: converged=%v err=%v", seed, res.Converged, err)
				}
				h.checkConverged(c) // no member terminated; every member is the machine the platform knows
				for _, id := range []string{"i-0000", "i-0001"} {
					if in, ok := h.sim.instances[id]; ok && in.State != provider.InstanceTerminating {
						t.Errorf("seed %d: the copy %s is %s", seed, id, in.State)
					}
				}
				for _, l := range h.sim.log {
					if strings.HasPrefix(l, "drain ") || strings.HasPrefix(l, "remove ") {
						t.Errorf("seed %d: %s: a copy is no member and is never drained or removed", seed, l)
					}
				}
			}
		})
	}
}

// Case 2: a stopped machine is stopped, not gone: its node stays (not
// ready, reported, never counted as gone or revoked), comes back when the
// machine runs again, is replaced through drain, remove, terminate after
// strategy.replace_unhealthy_after, and destroy terminates it.
func TestStoppedMachineIsNeverGone(t *testing.T) {
	t.Parallel()
	h := newTestHarness(t)
	c := paperCluster(1, 0, 2)
	h.mustConverge(c)
	in := h.instanceOf(t, "paper-worker-1")
	in.State, in.PublicIP = provider.InstanceStopped, ""
	h.sim.log = nil
	res, err := h.apply(c, 0)
	if err != nil || !res.Converged {
		t.Fatalf("apply with a stopped worker: converged=%v err=%v", res.Converged, err)
	}
	if !slices.ContainsFunc(res.Warnings, func(w string) bool {
		return strings.Contains(w, "paper-worker-1: the cloud reports its machine stopped")
	}) {
		t.Errorf("warnings %q do not report the stopped machine", res.Warnings)
	}
	if h.launches() > 0 {
		t.Errorf("a stopped machine was replaced without replace_unhealthy_after: %v", h.sim.log)
	}
	for _, n := range h.load().Nodes {
		if n.ID == "paper-worker-1" && (n.Phase != districts.PhaseStopped || n.Machine != "stopped") {
			t.Errorf("saved node: phase %s, machine %q; want stopped", n.Phase, n.Machine)
		}
	}
	// It runs again, with a new public address: one node, allowed in.
	h.sim.startStopped()
	h.mustConverge(c)
	if ids := h.nodeIDs("worker"); !slices.Equal(ids, []string{"paper-worker-1", "paper-worker-2"}) {
		t.Errorf("workers %v after the restart", ids)
	}
	// Stopped for longer than replace_unhealthy_after: replaced.
	c.Strategy.ReplaceUnhealthyAfter = districts.Duration(10 * time.Minute)
	in.State, in.PublicIP = provider.InstanceStopped, ""
	h.prepare(c)
	if _, err := h.apply(c, 0); err != nil {
		t.Fatalf("apply: %v", err)
	}
	h.sim.clock.Advance(11 * time.Minute)
	h.mustConverge(c)
	if in.State != provider.InstanceTerminating {
		t.Errorf("the stopped machine is %s after its replacement, want terminating", in.State)
	}
	// destroy terminates stopped machines too.
	in = h.instanceOf(t, "paper-worker-2")
	in.State = provider.InstanceStopped
	h.mustConverge(paperCluster(0, 0, 0))
	for id, in := range h.sim.instances {
		if in.State != provider.InstanceTerminating {
			t.Errorf("destroy left %s %s", id, in.State)
		}
	}
}

// Case 3: a listing that answers nothing (a district pointed elsewhere, an
// API that answers an empty page) starts nothing: no launch, no second
// platform, resources.json untouched, however often cron runs; the run
// stops naming the machines, whatever the cloud says of each by id: it
// shows them (the listing lost them, and may have lost machines
// resources.json lacks), does not answer, or says "not found" for every
// one (another account answers so).
func TestEmptyListingStartsNothing(t *testing.T) {
	t.Parallel()
	for _, which := range [][]string{{"gce-europe"}, {"gce-europe", "aws-europe"}} {
		for _, answer := range []error{nil, errors.New("request timed out"), fmt.Errorf("InvalidInstanceID.NotFound: %w", provider.ErrCloudNotFound)} {
			t.Run(fmt.Sprintf("%s/describe=%v", strings.Join(which, "+"), answer), func(t *testing.T) {
				t.Parallel()
				h := newTestHarness(t)
				c := paperCluster(1, 1, 2)
				h.mustConverge(c)
				saved := string(h.saved)
				for _, d := range which {
					h.sim.emptyDistricts[d] = true
				}
				h.sim.describeErr = answer
				h.sim.log = nil
				for range 5 {
					h.prepare(c)
					_, err := h.apply(c, 0)
					if !errors.Is(err, ErrMissingMachines) || !strings.Contains(err.Error(), "paper-master-1") || !strings.Contains(err.Error(), "--forget-missing") {
						t.Fatalf("err = %v, want ErrMissingMachines naming paper-master-1 and --forget-missing", err)
					}
					h.sim.clock.Advance(10 * time.Minute)
				}
				if n := h.launches(); n > 0 || h.sim.gen != 1 {
					t.Errorf("%d launches, platform generation %d: the empty listing was believed", n, h.sim.gen)
				}
				if string(h.saved) != saved {
					t.Errorf("resources.json changed:\n%s\nwant\n%s", h.saved, saved)
				}
				clear(h.sim.emptyDistricts)
				h.sim.describeErr = nil
				h.mustConverge(c)
			})
		}
	}
}

// the evidence that a platform may have formed.
func TestLostStateAndEmptyListingStartNoPlatform(t *testing.T) {
	t.Parallel()
	h := newTestHarness(t)
	c := paperCluster(1, 0, 0)
	h.mustConverge(c)
	h.saved = nil
	h.sim.emptyDistricts["gce-europe"] = true
	h.sim.log = nil
	for range 3 { // the state the first run saved holds no node: that proves nothing either
		_, err := h.apply(c, 0)
		if !errors.Is(err, ErrPlatformLost) {
			t.Fatalf("err = %v, want platform lost", err)
		}
	}
	if n := h.launches(); n > 0 || h.sim.gen != 1 || slices.Contains(h.sim.log, "delete-group transit-paper-gce-europe") {
		t.Errorf("%d launches, generation %d, calls %v", n, h.sim.gen, h.sim.log)
	}
	clear(h.sim.emptyDistricts)
	h.mustConverge(c)
}

// Case 3: a machine this run launched that the listing does not show is
// waited for, never replaced; the run then stops naming it.
func TestLaunchMissingFromTheListingIsNotReplaced(t *testing.T) {
	t.Parallel()
	h := newTestHarness(t)
	h.mustConverge(paperCluster(1, 0, 0))
	h.sim.listLag = time.Hour
	c := paperCluster(1, 0, 1)
	h.prepare(c)
	h.sim.log = nil
	_, err := h.apply(c, 0)
	if !errors.Is(err, ErrMissingMachines) || !strings.Contains(err.Error(), "paper-worker-1") || !strings.Contains(err.Error(), "this run launched it") {
		t.Fatalf("err = %v, want ErrMissingMachines naming paper-worker-1", err)
	}
	if n := h.launches(); n != 1 {
		t.Errorf("%d launches, want 1", n)
	}
	h.sim.listLag = 0
	h.sim.clock.Advance(time.Hour)
	h.mustConverge(c)
	if n := h.launches(); n != 1 {
		t.Errorf("%d launches in all, want 1", n)
	}
}

// Case 3: a district pointed elsewhere while it has nodes is refused
// before anything is asked, naming the district and the key.
func TestMovedDistrictIsRefusedBeforeAnyAction(t *testing.T) {
	t.Parallel()
	h := newTestHarness(t)
	c := paperCluster(1, 0, 1)
	h.mustConverge(c)
	moved := slices.Clone(h.districts)
	moved[0].AWSRegion = "eu-west-1"
	opts := h.options(c)
	opts.Districts = moved
	h.sim.log = nil
	_, err := Apply(t.Context(), opts)
	if !errors.Is(err, districts.ErrInvalid) || !strings.Contains(err.Error(), `district "aws-europe"`) || !strings.Contains(err.Error(), "aws_region") ||
		!strings.Contains(err.Error(), "add a new district") {
		t.Fatalf("err = %v, want the district, the key and the way to move", err)
	}
	if len(h.sim.log) > 0 {
		t.Errorf("calls before the refusal: %v", h.sim.log)
	}
}

// Case 4: masters that say "in no platform" while a worker does not
// answer prove nothing: no platform is recorded as formed, and once the
// worker answers the platform is initialised without --rebuild-platform.
func TestSilentWorkerDoesNotMakeAPlatformLost(t *testing.T) {
	t.Parallel()
	h := newTestHarness(t)
	// A first apply killed after its launches left these.
	h.plant("paper-master-1", "gce-europe", districts.RoleMaster, "")
	h.plant("paper-worker-1", "aws-europe", districts.RoleWorker, "")
	h.sim.silent["paper-worker-1"] = true
	c := paperCluster(1, 0, 1)
	h.prepare(c)
	_, err := h.apply(c, 0)
	if !errors.Is(err, provider.ErrPlatformUnreachable) || !strings.Contains(err.Error(), "paper-worker-1 did not answer") {
		t.Fatalf("err = %v, want unreachable naming the silent worker", err)
	}
	if st := h.load(); !st.PlatformFormedAt.IsZero() {
		t.Errorf("a platform was recorded as formed at %v", st.PlatformFormedAt)
	}
	clear(h.sim.silent)
	h.mustConverge(c)
}

// Case 5: a launch that ends in the cloud's failed state, or never runs,
// is a failed launch: terminated and relaunched, counted toward the
// backoff; the wait for a machine that does not start is bounded per
// machine across runs, not restarted each run.
func TestMachinesThatNeverRunAreReplaced(t *testing.T) {
	t.Parallel()
	for _, state := range []provider.InstanceState{provider.InstanceFailed, provider.InstanceStopped, provider.InstancePending} {
		t.Run(string(state), func(t *testing.T) {
			t.Parallel()
			h := newTestHarness(t)
			h.mustConverge(paperCluster(1, 0, 0))
			h.sim.breakLaunches = []provider.InstanceState{state}
			c := paperCluster(1, 0, 1)
			h.prepare(c)
			var broken string
			for attempt := 0; ; attempt++ {
				res, err := h.apply(c, 0)
				if broken == "" {
					for id, in := range h.sim.instances {
						if in.broken {
							broken = id
						}
					}
				}
				if err == nil && res.Converged {
					break
				}
				if attempt == 3 {
					t.Fatalf("not converged after %d runs: %v", attempt+1, err)
				}
				if state == provider.InstancePending && attempt == 0 {
					// The wait is recorded on the machine, across runs.
					var since time.Time
					for _, n := range h.load().Nodes {
						if n.ProviderID == broken {
							since = n.StartingSince
						}
					}
					if since.IsZero() {
						t.Errorf("no start wait recorded for %s: %+v", broken, h.load().Nodes)
					}
				}
				h.sim.clock.Advance(10 * time.Minute) // the next cron run
			}
			h.checkConverged(c)
			if in, ok := h.sim.instances[broken]; ok && in.State != provider.InstanceTerminating {
				t.Errorf("the machine whose launch failed (%s) is %s", broken, in.State)
			}
			key := districts.DeploymentKey{District: "aws-europe", Flavor: "small", Role: "worker"}
			if f := h.load().Failures[key.String()]; f.Count != 0 {
				t.Errorf("failures %+v after the replacement joined, want reset", f)
			}
		})
	}
}

// Case 6: a master that joined but holds no vote yet (an etcd learner)
// is no ready master: the voters it replaces stay until it votes, so the
// cluster never has fewer voters than it wants.
func TestLearnerIsNoReadyMaster(t *testing.T) {
	t.Parallel()
	h := newTestHarness(t)
	h.mustConverge(paperCluster(3, 0, 1))
	moved := paperCluster(0, 0, 1)
	moved.Deployments = append(moved.Deployments, districts.Deployment{District: "aws-europe", Flavor: "small", Role: districts.RoleMaster, Quantity: 3,
		Tags: map[string]string{"location": "Germany"}})
	h.sim.learnerProb, h.sim.promoteProb = 1, 0
	h.prepare(moved) // the floor: 3 ready voters throughout
	opts := h.options(moved)
	opts.WaitTimeout = 5 * time.Minute
	_, err := Apply(t.Context(), opts)
	if !errors.Is(err, ErrNotConverged) {
		t.Fatalf("err = %v, want not converged while the new masters are learners", err)
	}
	if len(h.sim.violations) > 0 {
		t.Fatalf("voting masters left for learners: %v", h.sim.violations)
	}
	for _, id := range []string{"paper-master-1", "paper-master-2", "paper-master-3"} {
		if _, ok := h.sim.current(id); !ok {
			t.Errorf("%s left while the new masters are learners", id)
		}
	}
	h.sim.promoteProb = 1
	h.mustConverge(moved)
}

// Case 7: a round whose join went through but whose labels failed made
// progress: the run goes on to the label retry its plan promised.
func TestJoinWhoseLabelsFailedIsProgress(t *testing.T) {
	t.Parallel()
	h := newTestHarness(t)
	h.mustConverge(paperCluster(1, 0, 1))
	// A run killed after its launch left this machine; this run's only
	// change is its join.
	h.plant("paper-worker-2", "aws-europe", districts.RoleWorker, h.load().Lineage)
	var addrs []string
	for _, in := range h.sim.instances {
		addrs = append(addrs, in.PublicIP, in.PrivateIP)
	}
	slices.Sort(addrs)
	for _, g := range h.sim.groups {
		g.Sources = addrs // the killed run allowed it in already
	}
	h.sim.labelFailOnce["paper-worker-2"] = true
	c := paperCluster(1, 0, 2)
	h.prepare(c)
	res, err := h.apply(c, 0)
	if err != nil || !res.Converged {
		t.Fatalf("converged=%v err=%v: the label was not retried in the run", res.Converged, err)
	}
	h.checkConverged(c)
}

// Case 9: a typo in a quantity is refused before planning, whatever
// calls the loop.
func TestTypoQuantityIsRefused(t *testing.T) {
	t.Parallel()
	c := paperCluster(1, 0, 1000000000)
	if _, err := MakePlan(t.Context(), Options{Cluster: c, Districts: simDistricts[:2]}, false); !errors.Is(err, districts.ErrInvalid) ||
		!strings.Contains(err.Error(), "1000000000") {
		t.Fatalf("MakePlan: %v, want ErrInvalid naming the quantity", err)
	}
	if _, err := Apply(t.Context(), Options{Cluster: c, Districts: simDistricts[:2]}); !errors.Is(err, districts.ErrInvalid) {
		t.Fatalf("Apply: %v, want ErrInvalid", err)
	}
}

// A launch a killed run asked for and never heard back about: while no
// listing shows its machine (the listings lag), nothing is launched in
// its place; a launch that never reached the cloud is given up after two
// minutes and three observations.
func TestKilledLaunchIsNotLaunchedTwice(t *testing.T) {
	t.Parallel()
	for _, reached := range []bool{true, false} {
		t.Run(fmt.Sprintf("reached the cloud=%v", reached), func(t *testing.T) {
			t.Parallel()
			h := newTestHarness(t)
			h.mustConverge(paperCluster(1, 0, 1))
			st := h.load()
			now := h.sim.clock.Peek()
			st.Launching = []districts.Launching{{Node: "paper-worker-2", District: "aws-europe", At: now}}
			st.NodeNumbers["worker"] = 2
			if err := h.save(st); err != nil {
				t.Fatal(err)
			}
			if reached {
				h.plant("paper-worker-2", "aws-europe", districts.RoleWorker, st.Lineage)
				for _, in := range h.sim.instances {
					if in.Tags[districts.TagNode] == "paper-worker-2" {
						in.hiddenTo = h.sim.cloudNow().Add(time.Minute) // the listing lags
					}
				}
			}
			c := paperCluster(1, 0, 2)
			h.prepare(c)
			h.sim.log = nil
			res, err := h.apply(c, 0)
			if err != nil || !res.Converged {
				t.Fatalf("converged=%v err=%v", res.Converged, err)
			}
			h.checkConverged(c)
			if n := h.launches(); reached && n != 0 || !reached && n != 1 {
				t.Errorf("%d launches, want %d", n, map[bool]int{true: 0, false: 1}[reached])
			}
			if len(h.load().Launching) > 0 {
				t.Errorf("launches left in resources.json: %+v", h.load().Launching)
			}
		})
	}
}

// Two districts of one cloud identity (one account, region and network:
// a district per zone) both list a machine whose district tag someone
// removed. It is one machine, the node of the district resources.json
// has it in (without resources.json: the district whose zones hold it):
// never a "copy" of itself in the sibling, never terminated, never
// drained, nothing launched in its place.
func TestMachineListedByTwoDistrictsIsOneMachine(t *testing.T) {
	t.Parallel()
	a, b := simDistricts[0], simDistricts[0]
	a.AWSZones = []string{"eu-central-1a"}
	b.ID, b.AWSZones = "aws-europe-b", []string{"eu-central-1b"}
	ds := []districts.District{a, b, simDistricts[1]}
	for _, lost := range []bool{false, true} {
		t.Run(fmt.Sprintf("resources.json lost=%v", lost), func(t *testing.T) {
			t.Parallel()
			for seed := range uint64(6) { // listings come in random order
				h := newHarness(t, seed, ds)
				h.sim.parallel, h.sim.maxUnavailable = DefaultParallel, 1
				h.sim.providerIDs = seed%2 == 0
				h.sim.siblings = map[string]string{"aws-europe": "aws-europe-b", "aws-europe-b": "aws-europe"}
				c := paperCluster(1, 0, 1)
				c.Deployments = append(c.Deployments, districts.Deployment{District: "aws-europe-b", Flavor: "small", Role: "worker", Quantity: 1})
				h.mustConverge(c)
				for _, id := range []string{"paper-worker-1", "paper-worker-2"} {
					delete(h.instanceOf(t, id).Tags, districts.TagDistrict)
				}
				if lost {
					h.saved = nil
				}
				h.sim.log = nil
				res := h.mustConverge(c)
				for _, l := range h.sim.log {
					if strings.HasPrefix(l, "terminate ") || strings.HasPrefix(l, "drain ") || strings.HasPrefix(l, "remove ") || strings.HasPrefix(l, "launch ") {
						t.Errorf("seed %d: %s: the untagged machines are the members", seed, l)
					}
				}
				if !slices.ContainsFunc(res.Warnings, func(w string) bool {
					return strings.Contains(w, "aws-europe and aws-europe-b, which are one cloud identity") && strings.Contains(w, "restore the tag")
				}) {
					t.Errorf("seed %d: warnings %q do not name the untagged machine", seed, res.Warnings)
				}
				for _, n := range h.load().Nodes {
					if n.CopyOf != "" {
						t.Errorf("seed %d: node %s is tracked as a copy of %s", seed, n.ID, n.CopyOf)
					}
				}
			}
		})
	}
}

// A listing that misses one running machine of several (a lost page, a
// GCE zone the aggregated list could not reach) while the platform calls
// its member not ready: the member is missing, not gone, whatever its
// readiness. Whether the cloud, asked by id, shows it or does not answer,
// the run stops naming it: nothing is drained, removed, terminated or
// launched in its place.
func TestPartialListingKeepsANotReadyMember(t *testing.T) {
	t.Parallel()
	for _, answer := range []error{nil, errors.New("request timed out")} {
		t.Run(fmt.Sprintf("describe=%v", answer), func(t *testing.T) {
			t.Parallel()
			h := newTestHarness(t)
			c := paperCluster(1, 0, 3)
			h.mustConverge(c)
			in := h.instanceOf(t, "paper-worker-2")
			h.sim.unlisted[in.ProviderID] = true
			h.sim.members["paper-worker-2"].ready = false // the platform calls it not ready
			h.sim.describeErr = answer
			h.sim.log = nil
			h.prepare(c)
			_, err := h.apply(c, 0)
			if !errors.Is(err, ErrMissingMachines) || !strings.Contains(err.Error(), "paper-worker-2 ("+in.ProviderID+")") {
				t.Errorf("err = %v, want ErrMissingMachines naming paper-worker-2", err)
			}
			for _, l := range h.sim.log {
				if strings.HasPrefix(l, "drain ") || strings.HasPrefix(l, "remove ") || strings.HasPrefix(l, "terminate ") || strings.HasPrefix(l, "launch ") {
					t.Errorf("%s: a member a listing missed was acted on", l)
				}
			}
			if n, ok := findNode(h.load(), "paper-worker-2"); !ok || n.ProviderID != in.ProviderID {
				t.Errorf("resources.json lost paper-worker-2: %+v", n)
			}
			if _, ok := h.sim.members["paper-worker-2"]; !ok {
				t.Error("paper-worker-2 was removed from the platform")
			}
		})
	}
}
