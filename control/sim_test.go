package control

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/cloudtransit/transit/clock/clocktest"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// sim is a deterministic in-memory cloud and platform for the loop's
// tests: every district's infrastructure and the platform share one lock,
// one clock and one record of safety violations. It injects failures
// (launch errors, quota, join errors, refused drains, slow terminations)
// and crashes: at a chosen driver call it cancels the run, as if transit
// were killed between two steps.
type sim struct {
	mu    sync.Mutex
	clock *clocktest.Fake
	rng   *rand.Rand
	// unchecked skips the invariant checks that scan every machine or
	// member on each call (peak, floor, allowed addresses): benchmarks
	// of the loop's own cost at 10,000 nodes, which the property tests'
	// checked runs back.
	unchecked bool

	cluster   string
	instances map[string]*simInstance // by provider id
	groups    map[string]*simGroup    // by provider id
	members   map[string]*simMember   // by node id
	nextID    int

	// Fault knobs, read under mu.
	launchFail   float64 // probability a launch fails
	joinFail     float64 // probability an install or join fails
	refuse       map[string]bool
	refuseProb   float64
	quota        map[string]int // district -> max live machines
	terminateFor time.Duration  // how long a termination takes
	sloppyList   bool           // List also returns foreign machines
	sickProb     float64        // probability a member turns sick at a Members call
	membersFail  float64        // probability Members times out (no master answers)
	joinDrop     float64        // probability a join succeeds but the connection drops before transit hears
	labelFail    float64        // probability a label fails
	addonsFail   float64        // probability the addons step fails
	addonsErr    error          // what a failing addons step returns (default: a timeout)
	addonsRuns   [][]string     // the addons each addons step was given
	rebuild      bool           // the run may initialise a new platform over a lost one
	forget       bool           // the run believes listings that lack machines (--forget-missing)
	rotate       []string       // the run rotates these nodes' mesh keys (transit mesh rotate)
	gen          int            // the platform's generation: Init over a lost platform starts a new one
	meshOn       bool           // the cluster runs on the mesh: joins are checked against it

	// afterJoin is how many Members calls fail, at once, after each
	// join (unanswered counts them down): a control plane electing a
	// leader or restarting its API server once the platform changed.
	afterJoin, unanswered int

	// Listing and cloud faults.
	emptyList    float64 // probability a district's listing answers an empty page
	hideNew      int     // a new machine stays out of listings for up to this many List calls
	launchBroken float64 // probability a launch ends failed (ERROR), stopped or stuck pending, with an error
	learnerProb  float64 // probability a joining master starts as a non-voter (an etcd learner)
	promoteProb  float64 // probability a non-voter becomes a voter at a Members call
	providerIDs  bool    // members carry their machine's provider id (Kubernetes) besides addresses
	// skew is how far transit's clock is ahead of the clouds': the cloud
	// runs on clock.Peek() - skew, so a jump of transit's clock moves no
	// cloud deadline.
	skew time.Duration
	// launchCalls counts the launches of the current run.
	launchCalls int
	// Scripted faults for scenario tests.
	emptyDistricts map[string]bool          // districts whose listing always answers an empty page
	silent         map[string]bool          // nodes that do not answer (sshd down), though their machine runs
	labelFailOnce  map[string]bool          // nodes whose next label fails
	listLag        time.Duration            // every new machine is missing from listings this long
	siblings       map[string]string        // district -> a district of the same cloud identity, whose machines without a district tag it lists too
	unlisted       map[string]bool          // machines (provider ids) every listing misses (a lost page, an unreachable zone); Describe finds them
	describeErr    error                    // what Describe answers instead of the machine (a timeout; another account's not found)
	diskKey        string                   // the mesh key new machines boot with (an image made from a node's disk), else their own
	breakLaunches  []provider.InstanceState // the next launches end in these states, with an error

	// Crash: when calls reaches crashAt, cancel is called.
	calls   int
	crashAt int
	cancel  context.CancelFunc
	crashed bool

	// Safety bookkeeping.
	destroying     bool
	parallel       int
	maxUnavailable int
	inflight       int
	peakInflight   int
	floor          map[string]int // role -> ready members that must stay
	peak           map[string]int // role -> live machines allowed at most
	violations     []string
	log            []string
	decisions      []string // the loop's plans and actions (harness.record)
}

type simInstance struct {
	provider.Instance
	district string
	group    string
	goneAt   time.Time // zero while not terminating
	hiddenTo time.Time // the listings miss the machine until then (eventual consistency)
	launched bool      // transit's Launch made it (not a copy someone made)
	// known says transit can know of the machine: its launch answered a
	// live run, or a listing showed it. A machine whose answer a crash or
	// a failed launch swallowed, and that no listing showed yet, is not.
	known  bool
	broken bool     // its launch ended failed, stopped or stuck, with an error
	mesh   *simMesh // its end of the mesh, once started
}

type simGroup struct {
	provider.Group
	district string
}

type simMember struct {
	role     string
	voter    bool // holds a vote (a master that is no learner)
	addr     string
	ready    bool
	sick     bool   // unhealthy for reasons outside transit (a crashed kubelet)
	machine  string // provider id of the machine that joined
	gen      int    // the platform generation it belongs to
	cordoned bool
	operator bool // cordoned by a person, not by transit
	labels   map[string]string
}

func newSim(seed uint64, cluster string) *sim {
	s := &sim{
		clock:     simClock(),
		rng:       rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		cluster:   cluster,
		instances: map[string]*simInstance{},
		groups:    map[string]*simGroup{},
		members:   map[string]*simMember{},
		refuse:    map[string]bool{},
		quota:     map[string]int{},
		floor:     map[string]int{},
		peak:      map[string]int{},

		emptyDistricts: map[string]bool{},
		unlisted:       map[string]bool{},
		silent:         map[string]bool{},
		labelFailOnce:  map[string]bool{},
	}
	return s
}

// simClock is the simulation's clock: it advances a little on every Now,
// as if the loop's work took time, and jumps on Sleep, so waits cost no
// real time. The simulation reads it with Peek, which does not advance it.
func simClock() *clocktest.Fake {
	c := clocktest.NewFake(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
	c.Step = 10 * time.Millisecond
	return c
}

func (s *sim) violate(format string, args ...any) {
	s.violations = append(s.violations, fmt.Sprintf(format, args...)+fmt.Sprintf(" (after %v)", s.log[max(len(s.log)-25, 0):]))
}

// step counts a driver call and crashes the run at the chosen one. The
// effect of the crashing call happens when effectFirst is true: the cloud
// acted, transit died before it heard back.
func (s *sim) step(ctx context.Context, what string) (crash bool, err error) {
	if s.crashed {
		// transit was killed: nothing it would still do arrives, not
		// even an uncordon that ignores the run's cancellation.
		return false, errors.New("transit was killed")
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.calls++
	s.log = append(s.log, what)
	if s.crashAt > 0 && s.calls == s.crashAt {
		s.crashed = true
		s.cancel()
		return true, context.Canceled
	}
	return false, nil
}

// addForeign puts a machine and a group in a district that transit must
// never touch: no tags, or another cluster's.
func (s *sim) addForeign(district string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	id := fmt.Sprintf("i-foreign-%d", s.nextID)
	s.instances[id] = &simInstance{Instance: provider.Instance{ProviderID: id, State: provider.InstanceRunning,
		Tags: map[string]string{"Name": "someone-elses"}}, district: district}
	s.nextID++
	id2 := fmt.Sprintf("i-foreign-%d", s.nextID)
	s.instances[id2] = &simInstance{Instance: provider.Instance{ProviderID: id2, State: provider.InstanceRunning,
		Tags: map[string]string{districts.TagCluster: "other-cluster", districts.TagNode: "other-1"}}, district: district}
	gid := "sg-foreign-" + district
	s.groups[gid] = &simGroup{Group: provider.Group{ProviderID: gid, Name: "default"}, district: district}
}

func isForeign(id string) bool {
	return len(id) > 10 && id[:10] == "i-foreign-" || len(id) > 11 && id[:11] == "sg-foreign-"
}

// gc forgets machines whose termination finished.
func (s *sim) gc() {
	now := s.cloudNow()
	for id, in := range s.instances {
		if in.State == provider.InstanceTerminating && !now.Before(in.goneAt) {
			delete(s.instances, id)
		}
	}
}

func (s *sim) infra(district string) provider.Infrastructure { return &simInfra{s, district} }

type simInfra struct {
	s        *sim
	district string
}

var _ provider.Infrastructure = (*simInfra)(nil)

func (c *simInfra) List(ctx context.Context, cluster string) ([]provider.Instance, []provider.Group, error) {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.step(ctx, "list "+c.district); err != nil {
		return nil, nil, err
	}
	s.gc()
	empty := s.rng.Float64() < s.emptyList || s.emptyDistricts[c.district] // an API that answers an empty page
	var out []provider.Instance
	for _, id := range slices.Sorted(maps.Keys(s.instances)) {
		in := s.instances[id]
		_, tagged := in.Tags[districts.TagDistrict]
		if in.district != c.district && (tagged || s.siblings[c.district] != in.district) {
			continue
		}
		if s.cloudNow().Before(in.hiddenTo) || s.unlisted[id] {
			continue
		}
		if !empty && (in.Tags[districts.TagCluster] == cluster || s.sloppyList) {
			in.known = true
			cp := in.Instance
			cp.Tags = maps.Clone(in.Tags)
			out = append(out, cp)
		}
	}
	// Clouds promise no order.
	s.rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	var gs []provider.Group
	for _, g := range s.groups {
		if g.district == c.district && (g.Tags[districts.TagCluster] == cluster || s.sloppyList) {
			cp := g.Group
			cp.Sources = slices.Clone(g.Sources)
			gs = append(gs, cp)
		}
	}
	sort.Slice(gs, func(i, j int) bool { return gs[i].ProviderID < gs[j].ProviderID })
	return out, gs, nil
}

func (c *simInfra) Describe(ctx context.Context, inst provider.Instance) (provider.Instance, error) {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.step(ctx, "describe "+inst.ProviderID); err != nil {
		return provider.Instance{}, err
	}
	if s.describeErr != nil {
		return provider.Instance{}, s.describeErr
	}
	s.gc()
	in, ok := s.instances[inst.ProviderID]
	if !ok || in.district != c.district && s.siblings[c.district] != in.district {
		return provider.Instance{}, fmt.Errorf("%s: %w", inst.ProviderID, provider.ErrCloudNotFound)
	}
	in.known = true
	cp := in.Instance
	cp.Tags = maps.Clone(in.Tags)
	return cp, nil
}

func (c *simInfra) EnsureGroup(ctx context.Context, spec provider.GroupSpec) (provider.Group, error) {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	crash, err := s.step(ctx, "ensure-group "+spec.Name)
	if err != nil && !crash {
		return provider.Group{}, err
	}
	var g *simGroup
	for _, x := range s.groups {
		if x.district == c.district && x.Name == spec.Name {
			g = x
		}
	}
	if g == nil {
		s.nextID++
		id := fmt.Sprintf("sg-%d", s.nextID)
		g = &simGroup{Group: provider.Group{ProviderID: id, Name: spec.Name, Tags: maps.Clone(spec.Tags)}, district: c.district}
		s.groups[id] = g
	}
	if isForeign(g.ProviderID) {
		s.violate("ensure-group touched foreign group %s", g.ProviderID)
	}
	g.Sources, g.MeshPort = slices.Clone(spec.Sources), spec.MeshPort
	if crash {
		return provider.Group{}, err
	}
	cp := g.Group
	cp.Sources = slices.Clone(g.Sources)
	return cp, nil
}

func (c *simInfra) DeleteGroup(ctx context.Context, gr provider.Group) error {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.step(ctx, "delete-group "+gr.Name); err != nil {
		return err
	}
	g, ok := s.groups[gr.ProviderID]
	if !ok {
		return nil
	}
	if isForeign(gr.ProviderID) || g.Tags[districts.TagCluster] != s.cluster {
		s.violate("deleted foreign group %s", gr.ProviderID)
	}
	for _, in := range s.instances {
		switch {
		case in.group != gr.ProviderID:
		case !c.DeletesGroupsInUse():
			return fmt.Errorf("group %s is in use by %s (DependencyViolation)", gr.Name, in.ProviderID)
		case in.State != provider.InstanceTerminating && !s.destroying:
			// The cloud would delete it, and cut the node off.
			s.violate("deleted group %s while %s, a running node, is in it", gr.Name, in.Tags[districts.TagNode])
		}
	}
	delete(s.groups, gr.ProviderID)
	return nil
}

// DeletesGroupsInUse: the sim's GCE deletes a group whose machines still
// run or terminate, as Compute Engine deletes firewall rules.
func (c *simInfra) DeletesGroupsInUse() bool { return c.district == "gce-europe" }

func (c *simInfra) Launch(ctx context.Context, spec provider.LaunchSpec) (provider.Instance, error) {
	s := c.s
	s.mu.Lock()
	crash, err := s.step(ctx, "launch "+spec.Node.ID)
	if err != nil && !crash {
		s.mu.Unlock()
		return provider.Instance{}, err
	}
	g, ok := s.groups[spec.GroupID]
	if !ok || g.district != c.district {
		s.violate("launch of %s in %s before its group exists", spec.Node.ID, c.district)
	}
	s.inflight++
	s.peakInflight = max(s.peakInflight, s.inflight)
	if s.inflight > s.parallel {
		s.violate("%d launches at once, --parallel is %d", s.inflight, s.parallel)
	}
	fail := !crash && s.rng.Float64() < s.launchFail
	s.mu.Unlock()

	// Let other launches overlap, as a real cloud call would.
	time.Sleep(20 * time.Microsecond)

	s.mu.Lock()
	defer s.mu.Unlock()
	s.inflight--
	if fail {
		return provider.Instance{}, errors.New("InsufficientInstanceCapacity: try another zone")
	}
	live := 0
	for _, in := range s.instances {
		if in.district == c.district && in.State != provider.InstanceTerminating && !isForeign(in.ProviderID) {
			live++
		}
	}
	if quota, ok := s.quota[c.district]; ok && live >= quota {
		return provider.Instance{}, fmt.Errorf("quota exceeded: %d instances in %s", quota, c.district)
	}
	s.launchCalls++
	s.nextID++
	id := fmt.Sprintf("i-%04d", s.nextID)
	inst := provider.Instance{ProviderID: id, Tags: maps.Clone(spec.Tags), Zone: spec.Node.Zone,
		PublicIP: fmt.Sprintf("203.0.%d.%d", s.nextID/250, s.nextID%250+1), PrivateIP: fmt.Sprintf("10.0.%d.%d", s.nextID/250, s.nextID%250+1),
		State: provider.InstanceRunning, CreatedAt: s.cloudNow()}
	in := &simInstance{Instance: inst, district: c.district, group: spec.GroupID, launched: true}
	s.instances[id] = in
	brokenAs := provider.InstanceState("")
	if len(s.breakLaunches) > 0 {
		brokenAs, s.breakLaunches = s.breakLaunches[0], s.breakLaunches[1:]
	} else if !crash && s.rng.Float64() < s.launchBroken {
		brokenAs = []provider.InstanceState{provider.InstanceFailed, provider.InstanceStopped, provider.InstancePending}[s.rng.IntN(3)]
	}
	if brokenAs != "" {
		// The machine exists but never runs: the driver waited and
		// reports its end, as real drivers do.
		in.broken = true
		named := func(in *simInstance) provider.Instance {
			if crash {
				return provider.Instance{}
			}
			in.known = true // the answer names it
			return provider.Instance{ProviderID: id, Tags: maps.Clone(in.Tags), State: in.State, PublicIP: in.PublicIP, PrivateIP: in.PrivateIP}
		}
		switch brokenAs {
		case provider.InstanceFailed:
			in.State = provider.InstanceFailed
			return named(in), fmt.Errorf("server %s went to ERROR: No valid host was found", id)
		case provider.InstanceStopped:
			in.State = provider.InstanceStopped
			return named(in), fmt.Errorf("instance %s stopped while starting: Server.InternalError", id)
		default:
			in.State, in.PublicIP, in.PrivateIP = provider.InstancePending, "", ""
			return named(in), fmt.Errorf("instance %s still pending after the launch timeout", id)
		}
	}
	switch {
	case s.listLag > 0:
		in.hiddenTo = s.cloudNow().Add(s.listLag)
	case s.hideNew > 0:
		// The cloud's listing lags behind its launch answer.
		in.hiddenTo = s.cloudNow().Add(time.Duration(s.rng.IntN(s.hideNew+1)) * 10 * time.Second)
	}
	if crash {
		return provider.Instance{}, err
	}
	in.known = true
	s.checkPeak(spec.Node.Role)
	return inst, nil
}

func (c *simInfra) Terminate(ctx context.Context, inst provider.Instance) error {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	crash, err := s.step(ctx, "terminate "+inst.ProviderID)
	if err != nil && !crash {
		return err
	}
	in, ok := s.instances[inst.ProviderID]
	if !ok {
		return err
	}
	if in.Tags[districts.TagCluster] != s.cluster {
		s.violate("terminated foreign machine %s", inst.ProviderID)
	}
	node := in.Tags[districts.TagNode]
	if m, ok := s.current(node); ok && m.machine == inst.ProviderID && !s.destroying {
		s.violate("terminated %s while it is still a platform member (cordoned=%v)", node, m.cordoned)
	}
	if in.State != provider.InstanceTerminating {
		in.State = provider.InstanceTerminating
		in.goneAt = s.cloudNow().Add(s.terminateFor)
	}
	if s.destroying {
		delete(s.members, node)
	}
	return err
}

// checkPeak: a launch never takes its role to more machines than the
// larger of its size before the change and its intended size, plus
// max_surge, counting the machines transit can know of. Only the launched
// role is judged: a machine of another role that a listing shows only now
// (its failed launch's answer and an empty page hid it) was not there to
// count when that role's launches were decided.
func (s *sim) checkPeak(role string) {
	if s.unchecked {
		return
	}
	var ids []string
	for id, in := range s.instances {
		if s.counts(in) && in.Tags[districts.TagRole] == role {
			ids = append(ids, in.Tags[districts.TagNode]+"="+id)
		}
	}
	if limit, ok := s.peak[role]; ok && len(ids) > limit {
		slices.Sort(ids)
		s.violate("%d %s machines live, more than %d (max of before and after, plus max_surge): %v", len(ids), role, limit, ids)
	}
}

// counts: a machine transit launched that it can know of counts toward
// a role's size while it runs, starts or may run again; a copy someone
// made does not, nor a machine whose launch answer was lost (a crash, a
// launch that failed) until a listing shows it: max_surge bounds what
// transit decides on what it can know.
func (s *sim) counts(in *simInstance) bool {
	return in.launched && in.known && in.State != provider.InstanceTerminating && in.Tags[districts.TagCluster] == s.cluster
}

// countsReady: a member that counts toward its role's ready floor: a
// master only while it votes.
func (s *sim) countsReady(m *simMember) bool { return m.role != districts.RoleMaster || m.voter }

// checkFloor: transit never takes a healthy member of role away while
// that leaves the role fewer healthy, schedulable members than the smaller
// of its intended size and what it had when the change began. Members
// nature made sick count for nothing: transit saw them not ready.
func (s *sim) checkFloor(role, when string) {
	if s.destroying || s.unchecked {
		return
	}
	floor, ok := s.floor[role]
	if !ok {
		return
	}
	ready := 0
	for _, m := range s.members {
		if m.role == role && s.healthy(m) && !m.cordoned && m.gen == s.gen && (role != districts.RoleMaster || m.voter) {
			ready++
		}
	}
	if ready < floor {
		s.violate("%s: %d ready %s members, fewer than %d", when, ready, role, floor)
	}
}

// founded: the platform exists while a master of its generation runs.
func (s *sim) founded() bool {
	for _, m := range s.members {
		if m.role == districts.RoleMaster && m.gen == s.gen && s.alive(m) {
			return true
		}
	}
	return false
}

// alive: the member's machine runs.
func (s *sim) alive(m *simMember) bool {
	in, ok := s.instances[m.machine]
	return ok && in.State == provider.InstanceRunning
}

// exists: the member's machine is there, running or not (a stopped one
// may run again and bring its platform back).
func (s *sim) exists(m *simMember) bool {
	in, ok := s.instances[m.machine]
	return ok && in.State != provider.InstanceTerminating
}

// cloudNow is the clouds' time, which a jump of transit's clock does not
// move.
func (s *sim) cloudNow() time.Time { return s.clock.Peek().Add(-s.skew) }

// current: a member of the platform as it is now.
func (s *sim) current(id string) (*simMember, bool) {
	m, ok := s.members[id]
	if !ok || m.gen != s.gen {
		return nil, false
	}
	return m, true
}

type simPlatform struct{ s *sim }

var _ provider.Platform = (*simPlatform)(nil)

func (s *sim) platform() provider.Platform { return &simPlatform{s} }

func (p *simPlatform) instanceOf(n districts.Node) *simInstance {
	in := p.s.instances[n.ProviderID]
	if in == nil || in.State != provider.InstanceRunning {
		return nil
	}
	return in
}

func (p *simPlatform) EnsureAddons(ctx context.Context, addons []districts.Addon) ([]string, error) {
	s := p.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.step(ctx, "addons"); err != nil {
		return nil, err
	}
	var names []string
	for _, a := range addons {
		names = append(names, a.Name)
	}
	s.addonsRuns = append(s.addonsRuns, names)
	if s.rng.Float64() < s.addonsFail {
		if s.addonsErr != nil {
			return nil, s.addonsErr
		}
		return nil, errors.New("addon manifest refused: the API server timed out")
	}
	return names, nil
}

func (p *simPlatform) Install(ctx context.Context, n districts.Node) error {
	s := p.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.step(ctx, "install "+n.ID); err != nil {
		return err
	}
	if p.instanceOf(n) == nil {
		return fmt.Errorf("ssh %s: connection refused", n.PublicIP)
	}
	if s.rng.Float64() < s.joinFail {
		return errors.New("install script exited 100: apt-get: unable to fetch")
	}
	return nil
}

// allowedEverywhere: a node joins only when the group of every district
// that holds a member of the platform lets its addresses in, so it
// reaches every member.
func (s *sim) allowedEverywhere(n districts.Node) {
	if s.unchecked {
		return
	}
	inUse := map[string]bool{}
	for _, m := range s.members {
		if in, ok := s.instances[m.machine]; ok && m.gen == s.gen && in.State != provider.InstanceTerminating {
			inUse[in.district] = true
		}
	}
	for _, g := range s.groups {
		if g.Tags[districts.TagCluster] != s.cluster || !inUse[g.district] {
			continue
		}
		if s.meshOn {
			if g.MeshPort != districts.DefaultMeshPort {
				s.violate("%s joins before %s lets in the mesh's port", n.ID, g.Name)
			}
			continue
		}
		for _, a := range n.Addresses() {
			if !slices.Contains(g.Sources, a) {
				s.violate("%s joins before %s is allowed into %s", n.ID, a, g.Name)
			}
		}
	}
}

func (p *simPlatform) Init(ctx context.Context, n districts.Node) error {
	s := p.s
	s.mu.Lock()
	defer s.mu.Unlock()
	crash, err := s.step(ctx, "init "+n.ID)
	if err != nil && !crash {
		return err
	}
	if s.founded() {
		s.violate("init of %s, but the platform exists", n.ID)
	}
	if p.instanceOf(n) == nil {
		return fmt.Errorf("ssh %s: connection refused", n.PublicIP)
	}
	for id, m := range s.members {
		if s.exists(m) && !s.rebuild {
			s.violate("init of %s over a lost platform %s still belongs to, without --rebuild-platform", n.ID, id)
			break
		}
	}
	if n.Role != districts.RoleMaster {
		s.violate("init of %s, a %s", n.ID, n.Role)
	}
	s.allowedEverywhere(n)
	s.meshReaches(n)
	s.gen++
	s.members[n.ID] = &simMember{role: n.Role, voter: true, ready: true, machine: n.ProviderID, addr: n.PrivateIP, gen: s.gen}
	return err
}

func (p *simPlatform) Join(ctx context.Context, n districts.Node) error {
	s := p.s
	s.mu.Lock()
	defer s.mu.Unlock()
	crash, err := s.step(ctx, "join "+n.ID)
	if err != nil && !crash {
		return err
	}
	if !s.founded() {
		return errors.New("join: no manager to join")
	}
	if p.instanceOf(n) == nil {
		return fmt.Errorf("ssh %s: connection refused", n.PublicIP)
	}
	if !crash && s.rng.Float64() < s.joinFail {
		return errors.New("join: timeout waiting for the manager")
	}
	s.allowedEverywhere(n)
	s.meshReaches(n)
	if m, ok := s.current(n.ID); ok {
		if m.machine != n.ProviderID {
			s.violate("join of %s on machine %s, but the platform has it on %s", n.ID, n.ProviderID, m.machine)
		}
		if m.role != n.Role {
			m.voter = n.Role == districts.RoleMaster
		}
		m.ready, m.role = true, n.Role
	} else {
		s.members[n.ID] = &simMember{role: n.Role, ready: true, machine: n.ProviderID, addr: n.PrivateIP, gen: s.gen,
			voter: n.Role == districts.RoleMaster && s.rng.Float64() >= s.learnerProb}
	}
	s.unanswered = s.afterJoin
	if err == nil && s.rng.Float64() < s.joinDrop {
		// It joined; transit never hears.
		return errors.New("ssh: connection lost after docker swarm join")
	}
	return err
}

func (p *simPlatform) Label(ctx context.Context, n districts.Node, labels map[string]string) error {
	s := p.s
	// An update RPC takes a while: other changes of the node overlap.
	defer time.Sleep(200 * time.Microsecond)
	s.mu.Lock()
	defer s.mu.Unlock()
	crash, err := s.step(ctx, "label "+n.ID)
	if err != nil && !crash {
		return err
	}
	m, ok := s.current(n.ID)
	if !ok {
		return fmt.Errorf("node %s is not a member", n.ID)
	}
	if !crash && (s.rng.Float64() < s.labelFail || s.labelFailOnce[n.ID]) {
		delete(s.labelFailOnce, n.ID)
		return errors.New("docker node update: rpc error: context deadline exceeded")
	}
	m.labels = maps.Clone(labels)
	return err
}

func (p *simPlatform) Drain(ctx context.Context, n districts.Node, timeout time.Duration) error {
	s := p.s
	// Evictions take a while: let other drains overlap, as they would.
	defer time.Sleep(20 * time.Microsecond)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.step(ctx, "drain "+n.ID); err != nil {
		return err
	}
	m, ok := s.current(n.ID)
	if !ok {
		return nil
	}
	if s.refuse[n.ID] || s.rng.Float64() < s.refuseProb {
		return &provider.DrainError{Node: n.ID, Reason: "a disruption budget allows no eviction", Blocking: []string{"default/web-1"}}
	}
	wasCordoned := m.cordoned
	cordoned := 0
	for id, o := range s.members {
		if id != n.ID && o.cordoned && o.gen == s.gen && s.alive(o) {
			cordoned++
		}
	}
	if !wasCordoned && cordoned+1 > s.maxUnavailable {
		s.violate("drain of %s with %d nodes already cordoned, max_unavailable %d", n.ID, cordoned, s.maxUnavailable)
	}
	if m.role == districts.RoleMaster && m.voter {
		s.checkQuorum(n.ID, "drain") // a learner's leaving changes no quorum
	}
	m.cordoned, m.operator = true, false
	if s.healthy(m) && !wasCordoned && s.countsReady(m) {
		// Taking away a sick or already cordoned member, or a learner,
		// costs no capacity.
		s.checkFloor(m.role, "drain "+n.ID)
	}
	return nil
}

func (p *simPlatform) Uncordon(ctx context.Context, n districts.Node) error {
	s := p.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.step(ctx, "uncordon "+n.ID); err != nil {
		return err
	}
	if m, ok := s.current(n.ID); ok {
		if m.operator {
			s.violate("uncordon of %s, which an operator cordoned", n.ID)
		}
		m.cordoned = false
	}
	return nil
}

func (p *simPlatform) Remove(ctx context.Context, n districts.Node) error {
	s := p.s
	s.mu.Lock()
	defer s.mu.Unlock()
	crash, err := s.step(ctx, "remove "+n.ID)
	if err != nil && !crash {
		return err
	}
	m, ok := s.current(n.ID)
	if !ok {
		return err
	}
	if !m.cordoned && !s.destroying && s.alive(m) {
		s.violate("remove of %s without a drain", n.ID)
	}
	if m.role == districts.RoleMaster && m.voter {
		s.checkQuorum(n.ID, "remove") // a learner's leaving changes no quorum
	}
	delete(s.members, n.ID)
	if s.healthy(m) && !m.cordoned && s.countsReady(m) {
		s.checkFloor(m.role, "remove "+n.ID)
	}
	return err
}

// checkQuorum: after taking master id away, the healthy masters left are a
// majority of the masters left, and at least one is left.
func (s *sim) checkQuorum(id, what string) {
	total, healthy := 0, 0
	for mid, m := range s.members {
		if m.role != districts.RoleMaster || !m.voter || mid == id || m.gen != s.gen {
			continue
		}
		total++
		if s.healthy(m) {
			healthy++
		}
	}
	if total == 0 || healthy < total/2+1 {
		s.violate("%s of master %s leaves %d healthy of %d masters", what, id, healthy, total)
	}
}

func (s *sim) healthy(m *simMember) bool { return m.ready && !m.sick && s.alive(m) }

// Members keeps the driver contract as a real driver would, node by node:
// a node whose machine does not run does not answer; a master of the
// platform answers with every member, including members whose machine is
// gone (down); when none answers, masters that did not make it
// unreachable, and nodes still in a platform make it lost only when every
// node answered.
func (p *simPlatform) Members(ctx context.Context, nodes []districts.Node) ([]provider.Member, error) {
	s := p.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.step(ctx, "members"); err != nil {
		return nil, err
	}
	var masters []string
	for _, n := range nodes {
		if n.Role == districts.RoleMaster {
			masters = append(masters, n.ID)
		}
	}
	if s.rng.Float64() < s.membersFail {
		s.clock.Advance(2 * time.Minute) // the SSH timeout
		return nil, &provider.UnreachableError{Masters: masters, Err: errors.New("ssh: dial tcp: i/o timeout")}
	}
	if s.unanswered > 0 {
		s.unanswered--
		return nil, &provider.UnreachableError{Masters: masters, Err: errors.New("etcdserver: leader changed")}
	}
	for _, id := range slices.Sorted(maps.Keys(s.members)) {
		m := s.members[id]
		if s.sickProb == 0 {
			m.sick = false
		} else if s.rng.Float64() < s.sickProb {
			m.sick = !m.sick
		}
		if m.role == districts.RoleMaster && !m.voter && s.healthy(m) && s.rng.Float64() < s.promoteProb {
			m.voter = true // the learner caught up
		}
	}
	answered, inPlatform := false, false
	var silentMasters, silent []string
	for _, n := range nodes {
		m, member := s.members[n.ID]
		member = member && m.machine == n.ProviderID // a copy's engine is in no platform
		master := n.Role == districts.RoleMaster || member && m.role == districts.RoleMaster
		switch {
		case p.instanceOf(n) == nil || member && m.sick || s.silent[n.ID]:
			// No answer: its machine does not run, or its engine hangs.
			if master {
				silentMasters = append(silentMasters, n.ID)
			} else {
				silent = append(silent, n.ID)
			}
		case member && m.gen == s.gen && m.role == districts.RoleMaster:
			answered = true
		case member:
			inPlatform = true
		}
	}
	switch {
	case answered:
	case len(silentMasters) > 0:
		return nil, &provider.UnreachableError{Masters: silentMasters, Err: errors.New("the docker engine does not answer")}
	case len(silent) > 0:
		return nil, &provider.UnreachableError{Silent: silent, Err: errors.New("ssh: connect: no route to host")}
	case inPlatform:
		return nil, &provider.UnreachableError{Err: errors.New("nodes are in a swarm, but no master serves it")}
	default:
		return nil, provider.ErrNoPlatform
	}
	var out []provider.Member
	for _, id := range slices.Sorted(maps.Keys(s.members)) {
		m := s.members[id]
		if m.gen != s.gen {
			continue
		}
		pm := provider.Member{NodeID: id, Role: m.role, Voter: m.role == districts.RoleMaster && m.voter,
			Ready: s.healthy(m), Draining: m.cordoned, Labels: maps.Clone(m.labels), Addresses: []string{m.addr}}
		if s.providerIDs {
			pm.ProviderID = "sim:///" + m.machine
		}
		out = append(out, pm)
	}
	return out, nil
}

func (p *simPlatform) MayRemoveMaster(ctx context.Context, n districts.Node, _ []districts.Node) error {
	s := p.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.step(ctx, "may-remove "+n.ID); err != nil {
		return err
	}
	m, ok := s.current(n.ID)
	if !ok || m.role != districts.RoleMaster {
		return nil
	}
	if !m.voter {
		return nil // a learner holds no vote
	}
	voters, reachable := 0, 0
	for _, o := range s.members {
		if o.role == districts.RoleMaster && o.voter && o.gen == s.gen {
			voters++
			if s.healthy(o) {
				reachable++
			}
		}
	}
	return provider.RaftQuorum(n.ID, voters, reachable, s.healthy(m))
}
