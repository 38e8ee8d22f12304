package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// harness runs Apply against a sim the way cron would: each run starts
// from what the last one saved, and a crash loses everything not saved.
type harness struct {
	t         testing.TB
	sim       *sim
	districts []districts.District
	saved     []byte
	saves     int
	rounds    int
}

func newHarness(t testing.TB, seed uint64, ds []districts.District) *harness {
	return &harness{t: t, sim: newSim(seed, "paper"), districts: ds}
}

func (h *harness) load() districts.Resources {
	var r districts.Resources
	if h.saved == nil {
		return r
	}
	if err := json.Unmarshal(h.saved, &r); err != nil {
		h.t.Fatalf("saved state does not parse: %v", err)
	}
	return r
}

// save keeps what a real run would have on disk: nothing written after the
// crash point survives (the process is dead; its goroutines are not, here).
func (h *harness) save(r districts.Resources) error {
	h.sim.mu.Lock()
	crashed := h.sim.crashed
	h.sim.mu.Unlock()
	if crashed {
		return nil
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	h.saved, h.saves = b, h.saves+1
	return nil
}

// saveChanged keeps on "disk" only what each save says changed, as the
// state's journal does: the next run starts from it, and after every save
// it must equal the loop's whole state, or a change the loop did not
// report would be lost by a crash.
func (h *harness) saveChanged(r districts.Resources, ch Changed) error {
	h.sim.mu.Lock()
	crashed := h.sim.crashed
	h.sim.mu.Unlock()
	if crashed {
		return nil
	}
	whole, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if ch.All || h.saved == nil {
		h.saved, h.saves = whole, h.saves+1
		return nil
	}
	disk := h.load()
	nodes, groups := disk.Nodes, disk.SecurityGroups
	disk = r
	disk.Nodes, disk.SecurityGroups = nodes, groups
	if ch.Groups {
		disk.SecurityGroups = r.SecurityGroups
	}
	for _, id := range ch.Nodes {
		n, ok := findNode(r, id)
		if !ok {
			h.t.Errorf("a save names node %s, which the state lacks", id)
			continue
		}
		if i := slices.IndexFunc(disk.Nodes, func(x districts.Node) bool { return x.ID == id }); i >= 0 {
			disk.Nodes[i] = n
		} else {
			disk.Nodes = append(disk.Nodes, n)
		}
	}
	sortState(&disk)
	b, err := json.Marshal(disk)
	if err != nil {
		return err
	}
	if !bytes.Equal(b, whole) {
		h.t.Errorf("a save's changes (%+v) leave the saved state unlike the loop's:\n%s", ch, cmp.Diff(string(whole), string(b)))
	}
	h.saved, h.saves = b, h.saves+1
	return nil
}

// record keeps what the loop decided, for the trace of a failing seed:
// every plan's notes, every action with its reason, every failure.
func (h *harness) record(e Event) {
	var line string
	switch {
	case e.Type == EventPlan && e.Plan != nil:
		line = fmt.Sprintf("plan: notes %q blocked %q waiting %q", e.Plan.Notes, e.Plan.Blocked, e.Plan.Waiting)
	case e.Type == EventAction && e.Phase == PhaseStart:
		line = fmt.Sprintf("%s %s: %s", e.Action.Kind, target(*e.Action), e.Action.Reason)
	case e.Type == EventAction && e.Error != "":
		line = fmt.Sprintf("%s %s failed: %s", e.Action.Kind, target(*e.Action), e.Error)
	default:
		return
	}
	h.sim.mu.Lock()
	defer h.sim.mu.Unlock()
	h.sim.decisions = append(h.sim.decisions, line)
}

func (h *harness) options(c districts.Cluster) Options {
	infra := map[string]provider.Infrastructure{}
	for _, d := range h.districts {
		infra[d.ID] = h.sim.infra(d.ID)
	}
	return Options{
		Cluster: c, Districts: h.districts, Infra: infra, Platform: h.sim.platform(),
		State: h.load(), SaveChanged: h.saveChanged, Parallel: h.sim.parallel, Clock: h.sim.clock,
		MaxRounds: 60, RebuildPlatform: h.sim.rebuild, ForgetMissing: h.sim.forget, RotateKeys: h.sim.rotate, Destroy: wantsNothing(c),
		OnEvent: h.record,
	}
}

// apply runs one Apply; crashAt > 0 kills it at that driver call.
func (h *harness) apply(c districts.Cluster, crashAt int) (Result, error) {
	ctx, cancel := context.WithCancel(h.t.Context())
	defer cancel()
	h.sim.mu.Lock()
	h.sim.cancel, h.sim.crashAt, h.sim.calls, h.sim.crashed, h.sim.launchCalls = cancel, crashAt, 0, false, 0
	h.sim.mu.Unlock()
	res, err := Apply(ctx, h.options(c))
	if os.Getenv("SIMTRACE") != "" { // debugging a seed: every run's result and saved nodes

		h.t.Logf("apply crashAt=%d: %+v err=%v", crashAt, res, err)
		for _, n := range h.load().Nodes {
			h.t.Logf("  %s %s %s %s %s cbt=%v", n.ID, n.District, n.Flavor, n.Role, n.Phase, n.CordonedByTransit)
		}
	}
	h.rounds += res.Rounds
	h.sim.mu.Lock()
	defer h.sim.mu.Unlock()
	// The spend guard: one run never launches more than the whole
	// intended state plus max_surge, whatever its rounds believed.
	want := c.Strategy.Resolved().MaxSurge
	for _, d := range c.Deployments {
		want += d.Quantity
	}
	if h.sim.launchCalls > want {
		h.sim.violate("one run launched %d machines; the intended state has %d plus max_surge", h.sim.launchCalls, want-c.Strategy.Resolved().MaxSurge)
	}
	if !h.sim.crashed {
		if err != nil && !errors.Is(err, ErrNotConverged) {
			h.t.Fatalf("apply failed without a crash: %v", err)
		}
	} else {
		// What the killed run learnt from listings died with it: a
		// machine resources.json does not hold is known again only once
		// a listing of a later run shows it.
		saved := map[string]bool{}
		for _, n := range h.load().Nodes {
			saved[n.ProviderID] = true
		}
		for id, in := range h.sim.instances {
			if !saved[id] {
				in.known = false
			}
		}
	}
	return res, err
}

// prepare sets the safety bounds for a change to c from the sim's present.
func (h *harness) prepare(c districts.Cluster) {
	s := h.sim
	s.mu.Lock()
	defer s.mu.Unlock()
	strat := c.Strategy.Resolved()
	want := map[string]int{}
	total := 0
	for _, d := range c.Deployments {
		want[d.Role] += d.Quantity
		total += d.Quantity
	}
	s.destroying = total == 0
	s.maxUnavailable = strat.MaxUnavailable
	ready, live := map[string]int{}, map[string]int{}
	for _, m := range s.members {
		if s.healthy(m) && !m.cordoned && m.gen == s.gen && (m.role != districts.RoleMaster || m.voter) {
			ready[m.role]++
		}
	}
	for _, in := range s.instances {
		if s.counts(in) {
			live[in.Tags[districts.TagRole]]++
		}
	}
	s.floor, s.peak = map[string]int{}, map[string]int{}
	for _, role := range []string{districts.RoleMaster, districts.RoleWorker} {
		s.floor[role] = min(want[role], ready[role])
		if strat.MaxSurge == 0 {
			s.floor[role] = max(s.floor[role]-strat.MaxUnavailable, 0)
		}
		s.peak[role] = max(live[role], want[role]) + strat.MaxSurge
	}
}

// checkConverged: the sim's cloud and platform are exactly cluster c, and
// the saved state says so.
func (h *harness) checkConverged(c districts.Cluster) {
	t, s := h.t, h.sim
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gc()
	got := map[districts.DeploymentKey]int{}
	var addrs []string
	liveDistricts := map[string]bool{}
	for _, in := range s.instances {
		if in.Tags[districts.TagCluster] != s.cluster || in.State == provider.InstanceTerminating {
			continue
		}
		id := in.Tags[districts.TagNode]
		k := districts.DeploymentKey{District: in.district, Flavor: in.Tags[districts.TagFlavor], Role: in.Tags[districts.TagRole]}
		got[k]++
		addrs = append(addrs, in.PublicIP, in.PrivateIP)
		liveDistricts[in.district] = true
		m, ok := s.members[id]
		if !ok {
			t.Errorf("machine %s (%s) runs but is not a platform member", id, in.ProviderID)
			continue
		}
		if !s.healthy(m) || m.cordoned || m.role == districts.RoleMaster && !m.voter {
			t.Errorf("member %s: healthy=%v cordoned=%v voter=%v", id, s.healthy(m), m.cordoned, m.voter)
		}
		if m.machine != in.ProviderID {
			t.Errorf("member %s is machine %s, but the cloud's %s carries its tags", id, m.machine, in.ProviderID)
		}
		var want map[string]string
		for _, d := range c.Deployments {
			if d.Key() == k {
				want = d.Tags
			}
		}
		if !maps.Equal(m.labels, want) {
			t.Errorf("member %s labels %v, want %v", id, m.labels, want)
		}
	}
	for id, m := range s.members {
		if m.gen == s.gen && !s.exists(m) && len(liveDistricts) > 0 {
			t.Errorf("the platform still lists %s, whose machine is gone", id)
		}
	}
	for _, d := range c.Deployments {
		if got[d.Key()] != d.Quantity {
			t.Errorf("%s: %d machines, want %d", d.Key(), got[d.Key()], d.Quantity)
		}
		delete(got, d.Key())
	}
	for k, n := range got {
		t.Errorf("%s: %d machines not in cluster.json", k, n)
	}
	slices.Sort(addrs)
	for _, d := range h.districts {
		var mine []*simGroup
		for _, g := range s.groups {
			if g.district == d.ID && g.Tags[districts.TagCluster] == s.cluster {
				mine = append(mine, g)
			}
		}
		switch {
		case liveDistricts[d.ID] && len(mine) != 1:
			t.Errorf("district %s has nodes and %d groups", d.ID, len(mine))
		case liveDistricts[d.ID] && s.meshOn && (len(mine[0].Sources) > 0 || mine[0].MeshPort != districts.DefaultMeshPort):
			t.Errorf("district %s group on the mesh allows %v and port %d, want only port %d", d.ID, mine[0].Sources, mine[0].MeshPort, districts.DefaultMeshPort)
		case liveDistricts[d.ID] && !s.meshOn && !slices.Equal(mine[0].Sources, addrs):
			t.Errorf("district %s group allows %v, want %v", d.ID, mine[0].Sources, addrs)
		case !liveDistricts[d.ID] && len(mine) != 0:
			t.Errorf("district %s has no nodes but %d groups", d.ID, len(mine))
		}
	}
	for id, in := range s.instances {
		if strings.HasPrefix(id, "i-foreign-") && in.State != provider.InstanceRunning {
			t.Errorf("foreign machine %s is %s", id, in.State)
		}
	}
	st := h.load()
	live := 0
	for _, n := range st.Nodes {
		if n.Phase == districts.PhaseTerminating {
			continue
		}
		live++
		in, ok := s.instances[n.ProviderID]
		if !ok || in.Tags[districts.TagNode] != n.ID {
			t.Errorf("state node %s (%s) is not in the cloud", n.ID, n.ProviderID)
		}
		if n.Phase != districts.PhaseJoined {
			t.Errorf("state node %s is %s, want joined", n.ID, n.Phase)
		}
	}
	if want := len(addrs) / 2; live != want {
		t.Errorf("state has %d live nodes, the cloud %d", live, want)
	}
	for _, v := range s.violations {
		t.Errorf("safety violation: %s", v)
	}
	s.violations = nil
}

var simDistricts = []districts.District{
	{Type: "district", ID: "aws-europe", Provider: "aws", AWSRegion: "eu-central-1", AWSZones: []string{"eu-central-1a", "eu-central-1b"},
		Flavors: []districts.DistrictFlavor{{Flavor: "small", InstanceType: "m3.medium"}, {Flavor: "large", InstanceType: "m4.xlarge"}}},
	{Type: "district", ID: "gce-europe", Provider: "gce", GCEProjectID: "p", GCERegion: "europe-west1", GCEZones: []string{"europe-west1-b", "europe-west1-c"},
		Flavors: []districts.DistrictFlavor{{Flavor: "small", MachineType: "n1-standard-1"}, {Flavor: "large", MachineType: "n1-standard-4"}}},
	{Type: "district", ID: "os-germany", Provider: "openstack", OSAuthURL: "http://keystone:5000/v3", OSRegion: "RegionOne",
		Flavors: []districts.DistrictFlavor{{Flavor: "small", OSFlavor: "m1.small"}, {Flavor: "large", OSFlavor: "m1.large"}}},
}

// randomCluster draws an intended state: sometimes a fresh mix, sometimes
// a migration of one district's nodes to another, sometimes destroy.
func randomCluster(rng *rand.Rand, prev districts.Cluster) districts.Cluster {
	c := districts.Cluster{Type: "cluster", ID: "paper", Platform: "swarm",
		Flavors: []districts.Flavor{{Flavor: "small", Cores: 1, MemoryGB: 2}, {Flavor: "large", Cores: 4, MemoryGB: 16}},
		Strategy: districts.Strategy{MaxSurge: districts.Int(1 + rng.IntN(2)), MaxUnavailable: districts.Int(1 + rng.IntN(2)),
			ReplaceUnhealthyAfter: districts.Duration([]time.Duration{0, 20 * time.Minute}[rng.IntN(2)])}}
	tagSets := []map[string]string{nil, {"location": "Europe"}, {"location": "Germany", "policy": "Safe-Harbour"}}
	switch r := rng.Float64(); {
	case r < 0.1:
		for _, d := range prev.Deployments {
			d.Quantity = 0
			c.Deployments = append(c.Deployments, d)
		}
		return c
	case r < 0.35 && len(prev.Deployments) > 0:
		from, to := simDistricts[rng.IntN(3)].ID, simDistricts[rng.IntN(3)].ID
		moved := map[districts.DeploymentKey]districts.Deployment{}
		var keys []districts.DeploymentKey
		for _, d := range prev.Deployments {
			if d.District == from {
				d.District = to
			}
			if old, ok := moved[d.Key()]; ok {
				old.Quantity += d.Quantity
				moved[d.Key()] = old
				continue
			}
			moved[d.Key()] = d
			keys = append(keys, d.Key())
		}
		for _, k := range keys {
			c.Deployments = append(c.Deployments, moved[k])
		}
		return c
	}
	masters := []int{1, 3}[rng.IntN(2)]
	for _, d := range simDistricts {
		for _, f := range []string{"small", "large"} {
			for _, role := range []string{districts.RoleMaster, districts.RoleWorker} {
				q := 0
				if role == districts.RoleWorker && rng.IntN(2) == 0 {
					q = rng.IntN(5)
				}
				c.Deployments = append(c.Deployments, districts.Deployment{District: d.ID, Flavor: f, Role: role, Quantity: q,
					Tags: maps.Clone(tagSets[rng.IntN(len(tagSets))])})
			}
		}
	}
	for range masters {
		i := rng.IntN(len(c.Deployments)/2) * 2 // the master lines
		c.Deployments[i].Quantity++
	}
	return c
}

// TestConvergesUnderFaults drives random sequences of intended states
// through crashes, failed launches and joins, refused drains, quota and
// slow terminations, checking every safety rule at every driver call and
// that each state is reached once the faults stop.
func TestConvergesUnderFaults(t *testing.T) {
	seeds := 150
	if testing.Short() {
		seeds = 40
	}
	// A longer soak: TRANSIT_PROPERTY_SEEDS=5000 go test -run Converges ./control
	if n, err := strconv.Atoi(os.Getenv("TRANSIT_PROPERTY_SEEDS")); err == nil && n > 0 {
		seeds = n
	}
	var totalRounds atomic.Int64
	for seed := range seeds {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, uint64(seed), simDistricts)
			rng := rand.New(rand.NewPCG(uint64(seed), 7))
			h.sim.parallel = 1 + rng.IntN(4)
			h.sim.sloppyList = rng.IntN(2) == 0
			h.sim.terminateFor = []time.Duration{0, 5 * time.Second, time.Minute}[rng.IntN(3)]
			for _, d := range simDistricts {
				h.sim.addForeign(d.ID)
			}
			// Odd seeds run Kubernetes on the mesh (the districts are in
			// three clouds).
			h.sim.meshOn = seed%2 == 1
			var c districts.Cluster
			for step := range 6 {
				c = randomCluster(rng, c)
				if h.sim.meshOn {
					c.Platform = "kubernetes"
					c.NetworkSettings = &districts.Network{Mesh: districts.MeshWireGuard}
				}
				h.sim.decisions = nil // a failing step prints what the loop decided in it
				h.disturb(rng, step)
				h.prepare(c)
				converged := false
				var lastErr error
				h.sim.rebuild, h.sim.forget = false, false
				for attempt := 0; attempt < 12 && !converged; attempt++ {
					faulty := attempt < 4
					h.setFaults(rng, faulty)
					crashAt := 0
					if faulty && rng.IntN(2) == 0 {
						crashAt = 1 + rng.IntN(80)
					}
					if !faulty {
						h.sim.startStopped() // someone starts what was stopped
					}
					res, err := h.apply(c, crashAt)
					// Converged with faults on may leave members the sim made
					// sick reported, not waited on: only a clean run counts.
					converged, lastErr = err == nil && res.Converged && !faulty, err
					// What an operator does: rebuild a lost platform on
					// purpose, confirm that machines the listing lacks are
					// gone (once the faults stopped, the listing tells the
					// truth); cron runs again a while later.
					h.sim.rebuild = h.sim.rebuild || errors.Is(err, ErrPlatformLost) && h.sim.reallyLost()
					h.sim.forget = h.sim.forget || errors.Is(err, ErrMissingMachines) && !faulty
					h.sim.clock.Advance(30 * time.Minute)
				}
				if !converged {
					for _, d := range h.sim.decisions {
						t.Log("decision: " + d)
					}
					for _, n := range h.load().Nodes {
						t.Logf("saved: %s %s/%s/%s %s machine=%q copy_of=%q join_failed=%v starting=%v", n.ID, n.District, n.Flavor, n.Role, n.Phase, n.Machine, n.CopyOf, n.JoinFailed, n.StartingSince)
					}
					for id, in := range h.sim.instances {
						t.Logf("cloud: %s %s %s %s", id, in.Tags[districts.TagNode], in.district, in.State)
					}
					log := h.sim.log[max(len(h.sim.log)-40, 0):]
					t.Fatalf("step %d: did not converge to %v after the faults stopped: %v; last calls: %v", step, c.Deployments, lastErr, log)
				}
				h.checkConverged(c)
				h.checkMesh()
				if t.Failed() {
					for _, d := range h.sim.decisions {
						t.Log("decision: " + d)
					}
					log := h.sim.log[max(len(h.sim.log)-40, 0):]
					t.Fatalf("step %d (deployments %v) broke the rules; last calls: %v", step, c.Deployments, log)
				}
			}
			totalRounds.Add(int64(h.rounds))
		})
	}
	t.Cleanup(func() { t.Logf("%d seeds, %d rounds", seeds, totalRounds.Load()) })
}

// reallyLost is what an operator told "platform lost" checks before
// passing --rebuild-platform: no machine of a master of the platform is
// left (a listing may have hidden one from transit).
func (s *sim) reallyLost() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.members {
		if m.gen == s.gen && m.role == districts.RoleMaster && s.exists(m) {
			return false
		}
	}
	return true
}

// setFaults turns the random failures on or off.
func (h *harness) setFaults(rng *rand.Rand, on bool) {
	s := h.sim
	s.mu.Lock()
	defer s.mu.Unlock()
	s.launchFail, s.joinFail, s.refuseProb, s.sickProb = 0, 0, 0, 0
	s.membersFail, s.joinDrop, s.labelFail = 0, 0, 0
	s.emptyList, s.hideNew, s.launchBroken, s.learnerProb, s.promoteProb = 0, 0, 0, 0, 1
	clear(s.quota)
	if on {
		s.launchFail, s.joinFail, s.refuseProb, s.sickProb = 0.1, 0.1, 0.15, 0.05
		s.membersFail, s.joinDrop, s.labelFail = 0.05, 0.1, 0.1
		s.emptyList, s.hideNew, s.launchBroken, s.learnerProb, s.promoteProb = 0.05, 2, 0.05, 0.3, 0.5
		if rng.IntN(4) == 0 {
			s.quota[simDistricts[rng.IntN(3)].ID] = rng.IntN(4)
		}
	}
}

// disturb does what happens outside transit between runs: a lost
// resources.json, a worker or a master deleted by hand (the platform
// keeps listing it as a member that is down), a member cloned with its
// tags, a machine stopped (and, later, started again), transit's clock
// jumping a year forward or back.
func (h *harness) disturb(rng *rand.Rand, step int) {
	if step == 0 {
		return
	}
	role := districts.RoleWorker
	s := h.sim
	switch rng.IntN(12) {
	case 0:
		h.saved = nil // resources.json lost: everything must be adopted
		return
	case 1:
	case 2:
		role = districts.RoleMaster
	case 3, 4:
		s.mu.Lock()
		defer s.mu.Unlock()
		s.cloneMember(rng)
		return
	case 5, 6:
		s.mu.Lock()
		defer s.mu.Unlock()
		s.stopOne(rng)
		return
	case 7:
		d := []time.Duration{365 * 24 * time.Hour, -365 * 24 * time.Hour}[rng.IntN(2)]
		s.clock.Advance(d)
		s.mu.Lock()
		s.skew += d
		s.mu.Unlock()
		return
	default:
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range slices.Sorted(maps.Keys(s.instances)) {
		in := s.instances[id]
		if in.Tags[districts.TagCluster] == s.cluster && in.Tags[districts.TagRole] == role && in.State == provider.InstanceRunning {
			delete(s.instances, id)
			return
		}
	}
}

// cloneMember copies a running member's machine, tags and all, as an
// image or "launch more like this" would: a new machine, not a member.
func (s *sim) cloneMember(rng *rand.Rand) {
	var ids []string
	for _, id := range slices.Sorted(maps.Keys(s.instances)) {
		in := s.instances[id]
		if m, ok := s.current(in.Tags[districts.TagNode]); ok && m.machine == id && in.State == provider.InstanceRunning {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return
	}
	orig := s.instances[ids[rng.IntN(len(ids))]]
	s.nextID++
	cp := *orig
	cp.Tags = maps.Clone(orig.Tags)
	cp.ProviderID = fmt.Sprintf("i-%04d", s.nextID)
	cp.PublicIP, cp.PrivateIP = fmt.Sprintf("198.51.%d.%d", s.nextID/250, s.nextID%250+1), fmt.Sprintf("10.1.%d.%d", s.nextID/250, s.nextID%250+1)
	cp.CreatedAt = s.cloudNow()
	cp.launched = false // someone else's doing: no size bound counts it
	if orig.mesh != nil {
		m := *orig.mesh // the image holds the mesh's key and address
		cp.mesh = &m
	}
	s.instances[cp.ProviderID] = &cp
}

// stopOne stops a running machine of the cluster behind transit's back.
func (s *sim) stopOne(rng *rand.Rand) {
	var ids []string
	for _, id := range slices.Sorted(maps.Keys(s.instances)) {
		if in := s.instances[id]; in.Tags[districts.TagCluster] == s.cluster && in.State == provider.InstanceRunning {
			ids = append(ids, id)
		}
	}
	if len(ids) > 0 {
		in := s.instances[ids[rng.IntN(len(ids))]]
		in.State, in.PublicIP = provider.InstanceStopped, "" // a stopped EC2 machine loses its public address
	}
}

// startStopped starts every stopped machine again, with a new public
// address, as EC2 does.
func (s *sim) startStopped() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range slices.Sorted(maps.Keys(s.instances)) {
		if in := s.instances[id]; in.State == provider.InstanceStopped {
			s.nextID++
			in.State, in.PublicIP = provider.InstanceRunning, fmt.Sprintf("198.18.%d.%d", s.nextID/250, s.nextID%250+1)
		}
	}
}
