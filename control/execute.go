package control

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// undoTimeout bounds making a node schedulable again after an
// interrupted drain; it runs after the run's context ended.
const undoTimeout = 30 * time.Second

// runner executes plans against the drivers, persisting after every action.
type runner struct {
	opts      Options
	districts map[string]districts.District
	desired   map[districts.DeploymentKey]districts.Deployment
	st        *guarded
	ids       *nodeNumbers
	// orphans are the groups the current plan deletes without state
	// entries.
	orphans map[string]districts.SecurityGroup
	// zones holds the zone chosen for each node of the launch batch.
	zones map[string]string
	round int

	mu sync.Mutex
	// avoid remembers nodes whose drain was refused in this run; fresh
	// the nodes this run joined.
	avoid map[string]bool
	fresh map[string]bool
	// rotate holds the nodes whose mesh keys the run was asked to rotate
	// (Options.RotateKeys) and has not yet; nil before the first round.
	rotate map[string]bool
	// installed holds the nodes whose install finished this round (true)
	// or failed (false); installing a channel per install action of the
	// round, closed when it ends; installs the install actions running.
	installed  map[string]bool
	installing map[string]chan struct{}
	installs   *errgroup.Group
	problems   []string
	// progress counts, per round, the actions that changed the world and
	// the drains newly refused (each changes what the next round tries).
	progress int
	// done holds the actions of the round that finished, for Result.Left.
	done map[string]bool
	// launched holds the machines this run launched and has not
	// terminated (provider id → district): a listing must show them.
	// launches counts the run's launch calls against budget (the spend
	// guard; negative until the first round sets it).
	launched map[string]string
	launches int
	budget   int
	// allowedSets holds each group's sources as a set, for the check
	// every join makes, rebuilt when the group changes.
	allowedSets map[string]sourceSet
	// gate admits the round's drains of ready members. judging is held
	// while the platform is asked and acted on by decisions that must not
	// interleave: the gate's looks and a forget's quorum check and
	// removal (the early removals run beside the forget stage).
	gate    *readyGate
	judging sync.Mutex
	// meshSync coalesces the rounds giving nodes their mesh peers.
	meshSync meshSync
}

func newRunner(opts Options) *runner {
	r := &runner{
		opts:      opts,
		districts: map[string]districts.District{},
		desired:   map[districts.DeploymentKey]districts.Deployment{},
		st:        newGuarded(opts.State, opts.Save, opts.SaveChanged),
		avoid:     map[string]bool{},
		fresh:     map[string]bool{},
		launched:  map[string]string{},
		budget:    -1,
	}
	for _, d := range opts.Districts {
		r.districts[d.ID] = d
	}
	for _, d := range opts.Cluster.Deployments {
		r.desired[d.Key()] = d
	}
	return r
}

func (r *runner) problem(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.problems = append(r.problems, fmt.Sprintf(format, args...))
}

func (r *runner) changed() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.progress++
}

func (r *runner) emit(e Event) {
	if r.opts.OnEvent == nil {
		return
	}
	e.Time = r.opts.Clock.Now()
	e.Round = r.round
	r.opts.OnEvent(e)
}

func actionKey(a Action) string { return string(a.Kind) + " " + target(a) }

// left lists the plan's actions that did not finish.
func (r *runner) left(p Plan) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, a := range p.Actions {
		if !r.done[actionKey(a)] {
			out = append(out, actionKey(a))
		}
	}
	return out
}

// execute runs one plan, stage by stage. Failures of single actions become
// problems; only a cancelled context or a failed save stops the round.
//
// When the round joins nodes, the workers' removals run beside the joins
// instead of after them: each drain of a ready member waits (readyGate)
// until enough others are ready, so a replaced node leaves as soon as its
// replacement serves. Masters still leave in the removal stage, last.
func (r *runner) execute(ctx context.Context, p Plan) (result error) {
	r.mu.Lock()
	r.done = map[string]bool{}
	r.installed, r.installing = map[string]bool{}, map[string]chan struct{}{}
	r.mu.Unlock()
	r.gate = newReadyGate(r.st.read(), p, r.lookReady)
	r.installs = &errgroup.Group{}
	r.installs.SetLimit(max(r.opts.Parallel, 1))
	defer func() { _ = r.installs.Wait() }()
	stages := map[Stage][]Action{}
	for _, a := range p.Actions {
		stages[a.Kind.Stage()] = append(stages[a.Kind.Stage()], a)
	}
	early, late := splitRemovals(p, stages[StageRemove])
	if len(early) > 0 {
		stages[StageRemove] = late
	}
	// The early removals' own context: a round that stops early stops
	// them, and waits for them.
	rctx, cancel := context.WithCancel(ctx)
	var removing chan error
	defer func() {
		cancel()
		if removing != nil {
			if err := <-removing; result == nil {
				result = err
			}
		}
	}()
	for _, stage := range slices.Sorted(maps.Keys(stages)) {
		batch := stages[stage]
		if stage == StageJoin && len(early) > 0 {
			removing = make(chan error, 1)
			go func() { removing <- r.removeNodes(rctx, early) }()
		}
		var err error
		switch stage {
		case StageRemove:
			if removing != nil {
				err, removing = <-removing, nil
			}
			if err == nil {
				err = r.removeNodes(ctx, batch)
			}
		case StageInit, StageForget, StageRotate:
			err = r.each(ctx, batch, 1, r.do)
		case StageLaunch:
			err = r.launchAndInstall(ctx, batch)
		case StageJoin:
			err = r.each(ctx, batch, r.opts.Parallel, func(ctx context.Context, a Action) (err error) {
				defer func() { r.gate.joinEnded(a, err == nil) }()
				return r.do(ctx, a)
			})
			r.gate.joinsOver()
		case StageChange:
			err = r.each(ctx, batch, r.opts.Parallel, r.do)
		default:
			err = r.each(ctx, batch, len(batch), r.do)
		}
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return r.installs.Wait()
}

// splitRemovals picks the removals that run beside the round's joins: the
// workers', when the plan joins nodes and changes no cordon (an uncordon
// later in the round frees room under max_unavailable the removals need).
func splitRemovals(p Plan, removals []Action) (early, late []Action) {
	joins := slices.ContainsFunc(p.Actions, func(a Action) bool { return a.Kind == KindJoin })
	uncordons := slices.ContainsFunc(p.Actions, func(a Action) bool { return a.Kind == KindUncordon })
	if !joins || uncordons {
		return nil, removals
	}
	for _, a := range removals {
		if a.Role == districts.RoleMaster {
			late = append(late, a)
		} else {
			early = append(early, a)
		}
	}
	return early, late
}

// lookReady asks the platform which of the cluster's live nodes are
// ready, schedulable members, and returns their roles.
func (r *runner) lookReady(ctx context.Context) (map[string]string, error) {
	r.judging.Lock()
	defer r.judging.Unlock()
	nodes := liveValues(r.st.read())
	members, err := r.opts.Platform.Members(ctx, nodes)
	if err != nil {
		return nil, err
	}
	byID := map[string]provider.Member{}
	for _, m := range members {
		byID[m.NodeID] = m
	}
	out := map[string]string{}
	for _, n := range nodes {
		if m, ok := byID[n.ID]; ok && n.CopyOf == "" && !m.Draining && readyAs(n.Role, m) {
			out[n.ID] = n.Role
		}
	}
	return out, nil
}

// launchAndInstall launches the batch's machines and starts each one's
// install as soon as it runs; the installs go on in the background while
// the next stages change the groups, and a node's init or join waits for
// its own install only. An install whose launch failed is skipped.
func (r *runner) launchAndInstall(ctx context.Context, batch []Action) error {
	var launches []Action
	installs := map[string]Action{}
	r.mu.Lock()
	for _, a := range batch {
		if a.Kind == KindInstall {
			installs[a.Node] = a
			r.installing[a.Node] = make(chan struct{})
		} else {
			launches = append(launches, a)
		}
	}
	r.mu.Unlock()
	r.assignZones(launches)
	start := func(a Action) {
		r.mu.Lock()
		done := r.installing[a.Node]
		r.mu.Unlock()
		r.installs.Go(func() error {
			defer close(done)
			err := r.run(ctx, a, r.install)
			if _, fatal := errors.AsType[errFatal](err); fatal {
				return err
			}
			return nil
		})
	}
	var mu sync.Mutex // guards installs: the launches end concurrently
	err := r.each(ctx, launches, r.opts.Parallel, func(ctx context.Context, a Action) error {
		err := r.do(ctx, a)
		mu.Lock()
		ia, ok := installs[a.Node]
		if ok && err == nil {
			delete(installs, a.Node)
		}
		mu.Unlock()
		if ok && err == nil {
			start(ia)
		}
		return err
	})
	for _, ia := range installs { // their launches failed: reported as skipped
		start(ia)
	}
	return err
}

// errFatal marks errors that end the round (state could not be saved).
type errFatal struct{ error }

func (e errFatal) Unwrap() error { return e.error }

// each runs f for every action with at most limit at once.
func (r *runner) each(ctx context.Context, actions []Action, limit int, f func(context.Context, Action) error) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(limit, 1))
	for _, a := range actions {
		g.Go(func() error {
			err := r.run(gctx, a, f)
			if _, fatal := errors.AsType[errFatal](err); fatal {
				return err
			}
			return nil
		})
	}
	return g.Wait()
}

// errSkip marks an action not run because something it needs is missing.
type errSkip struct{ reason string }

func (e errSkip) Error() string { return e.reason }

// errNoChange marks an action that found nothing to do.
var errNoChange = errors.New("nothing to change")

// run wraps one action with its events, counts progress and turns failures
// into problems.
func (r *runner) run(ctx context.Context, a Action, f func(context.Context, Action) error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err := r.awaitInstall(ctx, a); err != nil {
		return err
	}
	if r.opts.Fence != nil {
		if err := r.opts.Fence(); err != nil {
			return errFatal{err}
		}
	}
	start := r.opts.Clock.Now()
	r.emit(Event{Type: EventAction, Phase: PhaseStart, Action: &a})
	err := f(ctx, a)
	secs := r.opts.Clock.Now().Sub(start).Seconds()
	if ctx.Err() == nil {
		r.mu.Lock()
		r.done[actionKey(a)] = true
		r.mu.Unlock()
	}
	switch {
	case err == nil:
		r.changed()
		r.emit(Event{Type: EventAction, Phase: PhaseFinish, Action: &a, Seconds: secs})
		return nil
	case errors.Is(err, errNoChange):
		r.emit(Event{Type: EventAction, Phase: PhaseFinish, Action: &a, Seconds: secs})
		return nil
	}
	if skip, ok := errors.AsType[errSkip](err); ok {
		r.emit(Event{Type: EventAction, Phase: PhaseSkip, Action: &a, Error: skip.Error(), Seconds: secs})
		r.problem("%s %s skipped: %s", a.Kind, target(a), err)
		return err
	}
	r.emit(Event{Type: EventAction, Phase: PhaseFinish, Action: &a, Error: err.Error(), Seconds: secs})
	if _, fatal := errors.AsType[errFatal](err); !fatal && ctx.Err() == nil {
		r.problem("%s %s: %s", a.Kind, target(a), err)
	}
	return err
}

func target(a Action) string {
	if a.Kind == KindMesh {
		return "the mesh"
	}
	if a.Node != "" {
		return "node " + a.Node
	}
	return "group " + a.Group + " in " + a.District
}

// do dispatches the actions that stand alone.
func (r *runner) do(ctx context.Context, a Action) error {
	switch a.Kind {
	case KindCreateGroup, KindUpdateGroup, KindAllow, KindRevoke:
		return r.ensureGroup(ctx, a)
	case KindDeleteGroup:
		return r.deleteGroup(ctx, a)
	case KindLaunch:
		return r.launch(ctx, a)
	case KindInit, KindJoin:
		return r.joinNode(ctx, a)
	case KindLabel:
		return r.label(ctx, a)
	case KindUncordon:
		return r.uncordon(ctx, a)
	case KindForget:
		return r.forget(ctx, a)
	case KindMesh:
		return r.syncMesh(ctx, "")
	case KindRotateKey:
		return r.rotateKey(ctx, a)
	}
	return fmt.Errorf("unknown action kind %q", a.Kind)
}

func (r *runner) infra(district string) (provider.Infrastructure, error) {
	infra, ok := r.opts.Infra[district]
	if !ok {
		return nil, fmt.Errorf("district %q has no infrastructure driver", district)
	}
	return infra, nil
}

func liveNodes(s districts.Resources) []*districts.Node {
	var out []*districts.Node
	for i := range s.Nodes {
		if s.Nodes[i].Phase != districts.PhaseTerminating {
			out = append(out, &s.Nodes[i])
		}
	}
	return out
}

func liveValues(s districts.Resources) []districts.Node {
	var out []districts.Node
	for _, n := range liveNodes(s) {
		out = append(out, *n)
	}
	return out
}

func findNode(s districts.Resources, id string) (districts.Node, bool) {
	for _, n := range s.Nodes {
		if n.ID == id {
			return n, true
		}
	}
	return districts.Node{}, false
}

func findGroup(s districts.Resources, district string) (districts.SecurityGroup, bool) {
	for _, g := range s.SecurityGroups {
		if g.District == district {
			return g, true
		}
	}
	return districts.SecurityGroup{}, false
}

// guarded serializes access to the state while actions run in parallel, and
// saves after every change. Its nodes stay sorted by id (sortState), so
// that one node is found by a binary search: an action costs the loop
// what it touches, not a copy of every node, and a 10,000-node apply stays
// linear.
type guarded struct {
	mu          sync.Mutex
	state       districts.Resources
	save        func(districts.Resources) error
	saveChanged func(districts.Resources, Changed) error
	// live counts each district's nodes not terminating.
	live map[string]int
}

func newGuarded(state districts.Resources, save func(districts.Resources) error, saveChanged func(districts.Resources, Changed) error) *guarded {
	g := &guarded{state: state, save: save, saveChanged: saveChanged}
	g.state.Nodes = slices.Clone(state.Nodes)
	sortState(&g.state)
	g.recount()
	return g
}

func (g *guarded) recount() {
	g.live = map[string]int{}
	for _, n := range g.state.Nodes {
		g.count(n, 1)
	}
}

// count adds d to the live count of n's district if n is live.
func (g *guarded) count(n districts.Node, d int) {
	if n.Phase != districts.PhaseTerminating {
		g.live[n.District] += d
	}
}

// inUse returns the districts that have live nodes.
func (g *guarded) inUse() map[string]bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	in := map[string]bool{}
	for d, n := range g.live {
		if n > 0 {
			in[d] = true
		}
	}
	return in
}

// updateNode changes node id in place (f gets the state too) and saves;
// the one way a node's phase changes between observations.
func (g *guarded) updateNode(id string, now time.Time, f func(n *districts.Node, s *districts.Resources)) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if i := index(g.state.Nodes, id); i >= 0 {
		g.count(g.state.Nodes[i], -1)
		f(&g.state.Nodes[i], &g.state)
		g.state.Nodes[i].UpdatedAt = now
		g.count(g.state.Nodes[i], 1)
	}
	return g.saveLocked(Changed{Nodes: []string{id}})
}

// updateNodes is updateNode for several nodes with one save: f gets each
// of ids that the state has, and the state.
func (g *guarded) updateNodes(ids []string, now time.Time, f func(n *districts.Node, s *districts.Resources)) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	var changed []string
	for _, id := range ids {
		if i := index(g.state.Nodes, id); i >= 0 {
			g.count(g.state.Nodes[i], -1)
			f(&g.state.Nodes[i], &g.state)
			g.state.Nodes[i].UpdatedAt = now
			g.count(g.state.Nodes[i], 1)
			changed = append(changed, id)
		}
	}
	return g.saveLocked(Changed{Nodes: changed})
}

// update applies f to the state and saves it. f may change the state's
// fields and nodes' fields but their phases (updateNode does that), and
// append nodes (put in order here, at the cost of a search each); reset
// replaces the state whole.
func (g *guarded) update(f func(r *districts.Resources)) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	before := len(g.state.Nodes)
	groups := groupVersions(g.state.SecurityGroups)
	f(&g.state)
	if len(g.state.Nodes) < before { // not what update is for, but kept right
		sortState(&g.state)
		g.recount()
		return g.saveLocked(Changed{All: true})
	}
	var ch Changed
	for _, n := range g.state.Nodes[before:] {
		g.count(n, 1)
		ch.Nodes = append(ch.Nodes, n.ID)
	}
	g.state.Nodes = placeAppended(g.state.Nodes, before)
	ch.Groups = !slices.Equal(groups, groupVersions(g.state.SecurityGroups))
	sortGroups(g.state.SecurityGroups)
	return g.saveLocked(ch)
}

// reset replaces the state with s, sorted, and saves it.
func (g *guarded) reset(s districts.Resources) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.state = s
	g.state.Nodes = slices.Clone(s.Nodes)
	sortState(&g.state)
	g.recount()
	return g.saveLocked(Changed{All: true})
}

func (g *guarded) saveLocked(ch Changed) error {
	var err error
	switch {
	case g.saveChanged != nil:
		err = g.saveChanged(g.state, ch)
	case g.save != nil:
		err = g.save(g.state)
	}
	if err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	return nil
}

// groupVersion names one version of a group: a change gives a group new
// Sources (ensureGroup builds a new slice, no one changes one in place:
// its first element's address and its length name it), or a new port or
// time.
type groupVersion struct {
	id      string
	first   *string
	n, port int
	updated time.Time
}

func versionOf(g districts.SecurityGroup) groupVersion {
	v := groupVersion{id: g.ProviderID, n: len(g.Sources), port: g.MeshPort, updated: g.UpdatedAt}
	if len(g.Sources) > 0 {
		v.first = &g.Sources[0]
	}
	return v
}

func groupVersions(gs []districts.SecurityGroup) []groupVersion {
	out := make([]groupVersion, len(gs))
	for i, g := range gs {
		out[i] = versionOf(g)
	}
	return out
}

// placeAppended moves the nodes appended after the first n of sorted nodes
// to their places: the tail is sorted and each inserted where a binary
// search puts it (new nodes mostly sort last: the cost is the search).
func placeAppended(nodes []districts.Node, n int) []districts.Node {
	if len(nodes) == n {
		return nodes
	}
	tail := slices.Clone(nodes[n:])
	nodes = nodes[:n]
	slices.SortFunc(tail, compareNodes)
	for _, x := range tail {
		i, _ := slices.BinarySearchFunc(nodes, x.ID, compareNodeID)
		nodes = slices.Insert(nodes, i, x)
	}
	return nodes
}

func compareNodes(a, b districts.Node) int          { return districts.CompareNodeIDs(a.ID, b.ID) }
func compareNodeID(n districts.Node, id string) int { return districts.CompareNodeIDs(n.ID, id) }

// index is where node id is in the sorted nodes, -1 if it is not.
func index(nodes []districts.Node, id string) int {
	i, ok := slices.BinarySearchFunc(nodes, id, compareNodeID)
	if !ok {
		return -1
	}
	return i
}

// read returns a copy of the state, every node: for what needs them all
// (once a round, or once per group action). An action on one node uses
// node, header or view.
func (g *guarded) read() districts.Resources {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.state
	r.Nodes = slices.Clone(r.Nodes)
	r.SecurityGroups = slices.Clone(r.SecurityGroups)
	r.NodeNumbers = maps.Clone(r.NodeNumbers)
	r.Failures = maps.Clone(r.Failures)
	r.Launching = slices.Clone(r.Launching)
	return r
}

// header returns a copy of the state without its nodes and groups.
func (g *guarded) header() districts.Resources {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.state
	r.Nodes, r.SecurityGroups = nil, nil
	r.NodeNumbers = maps.Clone(r.NodeNumbers)
	r.Failures = maps.Clone(r.Failures)
	r.Launching = slices.Clone(r.Launching)
	return r
}

// node returns a copy of one node.
func (g *guarded) node(id string) (districts.Node, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	i := index(g.state.Nodes, id)
	if i < 0 {
		return districts.Node{}, false
	}
	return g.state.Nodes[i], true
}

// view runs f on the state itself, under the lock, to read what it needs
// without a copy of every node: f must not change the state or keep any
// part of it.
func (g *guarded) view(f func(s *districts.Resources)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	f(&g.state)
}

// updateNode changes one node in place under the lock and saves, so two
// actions on one node (a label and an uncordon) never overwrite each
// other's changes.
func (r *runner) updateNode(id string, f func(n *districts.Node, s *districts.Resources)) error {
	if err := r.st.updateNode(id, r.opts.Clock.Now(), f); err != nil {
		return errFatal{err}
	}
	return nil
}

// sourceSet is a group's sources as a set, for one version of the group.
type sourceSet struct {
	version groupVersion
	set     map[string]bool
}

// allows says g lets addr in: a lookup in a set built once per version of
// the group, since every join asks (a scan of a 10,000-address group per
// join would make an apply quadratic).
func (r *runner) allows(g districts.SecurityGroup, addr string) bool {
	if len(g.Sources) == 0 {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	key := g.District + "/" + g.ProviderID
	cached, ok := r.allowedSets[key]
	if v := versionOf(g); !ok || cached.version != v {
		cached = sourceSet{version: v, set: make(map[string]bool, len(g.Sources))}
		for _, src := range g.Sources {
			cached.set[src] = true
		}
		if r.allowedSets == nil {
			r.allowedSets = map[string]sourceSet{}
		}
		r.allowedSets[key] = cached
	}
	return cached.set[addr]
}

// ensureGroup makes the district's group allow exactly the addresses of
// the cluster's live nodes, as they are now — or, on the node mesh, the
// mesh's port and no address.
func (r *runner) ensureGroup(ctx context.Context, a Action) error {
	s := r.st.read()
	sources := addressesOf(liveNodes(s))
	meshPort := r.meshPort()
	if meshPort != 0 {
		sources = nil
	}
	old, has := findGroup(s, a.District)
	if has && a.Widen {
		sources = slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(old.Sources), sources...))))
	}
	if has && slices.Equal(old.Sources, sources) && old.MeshPort == meshPort {
		return errNoChange
	}
	infra, err := r.infra(a.District)
	if err != nil {
		return err
	}
	tags := map[string]string{districts.TagCluster: r.opts.Cluster.ID, districts.TagDistrict: a.District, districts.TagGroup: a.Group}
	if s.Lineage != "" {
		tags[districts.TagLineage] = s.Lineage
	}
	g, err := infra.EnsureGroup(ctx, provider.GroupSpec{Name: a.Group, Cluster: r.opts.Cluster.ID, District: a.District, Sources: sources, MeshPort: meshPort, Tags: tags})
	if err != nil {
		return err
	}
	now := r.opts.Clock.Now()
	sg := districts.SecurityGroup{Type: "security_group", ID: a.Group, Cluster: r.opts.Cluster.ID, District: a.District,
		ProviderID: g.ProviderID, Sources: sources, MeshPort: meshPort, CreatedAt: now, UpdatedAt: now}
	if has {
		sg.CreatedAt = old.CreatedAt
	}
	if err := r.st.update(func(s *districts.Resources) {
		s.SecurityGroups = slices.DeleteFunc(s.SecurityGroups, func(x districts.SecurityGroup) bool { return x.District == a.District })
		s.SecurityGroups = append(s.SecurityGroups, sg)
	}); err != nil {
		return errFatal{err}
	}
	return nil
}

func (r *runner) deleteGroup(ctx context.Context, a Action) error {
	s := r.st.read()
	g, ok := r.orphans[a.Group]
	if !ok {
		if g, ok = findGroup(s, a.District); !ok {
			return errNoChange
		}
		// Planned for after the round's removals: a node that stayed
		// (its drain refused) keeps the group.
		for _, n := range liveNodes(s) {
			if n.District == a.District {
				return errSkip{fmt.Sprintf("node %s is still in the district", n.ID)}
			}
		}
	}
	infra, err := r.infra(a.District)
	if err != nil {
		return err
	}
	if err := infra.DeleteGroup(ctx, provider.Group{ProviderID: g.ProviderID, Name: g.ID}); err != nil {
		return err
	}
	if err := r.st.update(func(s *districts.Resources) {
		s.SecurityGroups = slices.DeleteFunc(s.SecurityGroups, func(x districts.SecurityGroup) bool { return x.ProviderID == g.ProviderID })
	}); err != nil {
		return errFatal{err}
	}
	return nil
}

// launch starts a machine in the district's group, spread over its zones.
func (r *runner) launch(ctx context.Context, a Action) error {
	d := r.districts[a.District]
	var g districts.SecurityGroup
	var ok bool
	r.st.view(func(s *districts.Resources) { g, ok = findGroup(*s, a.District) })
	s := r.st.header()
	if !ok {
		return errSkip{"district " + a.District + " has no security group (its creation failed)"}
	}
	machine, _ := d.MachineType(a.Flavor)
	n := districts.Node{
		Type: "node", ID: a.Node, Cluster: r.opts.Cluster.ID, District: a.District, Role: a.Role, Flavor: a.Flavor,
		Zone: r.zones[a.Node],
	}
	tags := provider.IdentityTags(n, s.Lineage)
	maps.Copy(tags, r.desired[n.Key()].Tags)
	infra, err := r.infra(a.District)
	if err != nil {
		return err
	}
	r.mu.Lock()
	spent := r.launches >= r.budget && r.budget >= 0
	if !spent {
		r.launches++
	}
	r.mu.Unlock()
	if spent {
		return fmt.Errorf("%w: this run launched %d machine(s), what cluster.json lacked at its start plus max_surge; it launches no more (the next run may)", ErrSpendGuard, r.launches)
	}
	// The launch is recorded before the cloud is asked, its node number
	// used: a run killed before it heard back leaves the next run a
	// machine to look for, and never gives the name to a second one.
	if err := r.st.update(func(s *districts.Resources) {
		useNumber(s, n)
		s.Launching = append(s.Launching, districts.Launching{Node: n.ID, District: n.District, At: r.opts.Clock.Now()})
	}); err != nil {
		return errFatal{err}
	}
	inst, err := infra.Launch(ctx, provider.LaunchSpec{
		Node: n, MachineType: machine, GroupID: g.ProviderID, Tags: tags, AuthorizedKey: r.opts.AuthorizedKey,
	})
	if err != nil {
		if ctx.Err() == nil {
			// The cloud answered. A machine it names exists though it
			// failed: it is recorded, so its line counts it and the
			// next round replaces it, even while a listing misses it.
			// Anything else it made, the next listing shows.
			now := r.opts.Clock.Now()
			if serr := r.st.update(func(s *districts.Resources) {
				s.Launching = withoutLaunch(s.Launching, n.ID)
				if inst.ProviderID != "" {
					f := n
					f.ProviderID, f.PublicIP, f.PrivateIP = inst.ProviderID, inst.PublicIP, inst.PrivateIP
					f.Phase, f.Message, f.JoinFailed, f.CreatedAt, f.UpdatedAt = districts.PhaseFailed, err.Error(), true, now, now
					s.Nodes = append(s.Nodes, f)
				}
			}); serr != nil {
				return errFatal{serr}
			}
		}
		return err
	}
	n.ProviderID, n.PublicIP, n.PrivateIP = inst.ProviderID, inst.PublicIP, inst.PrivateIP
	if inst.Zone != "" {
		n.Zone = inst.Zone
	}
	now := r.opts.Clock.Now()
	n.Phase, n.CreatedAt, n.UpdatedAt = districts.PhaseLaunched, now, now
	r.mu.Lock()
	r.launched[inst.ProviderID] = a.District
	r.mu.Unlock()
	if err := r.st.update(func(s *districts.Resources) {
		s.Nodes = append(s.Nodes, n)
		s.Launching = withoutLaunch(s.Launching, n.ID)
	}); err != nil {
		return errFatal{err}
	}
	return nil
}

func withoutLaunch(ls []districts.Launching, node string) []districts.Launching {
	return slices.DeleteFunc(ls, func(l districts.Launching) bool { return l.Node == node })
}

// useNumber records that n's node number is used in the lineage.
func useNumber(s *districts.Resources, n districts.Node) {
	if s.NodeNumbers == nil {
		s.NodeNumbers = map[string]int{}
	}
	if i, ok := nodeNumber(n.Cluster, n.Role, n.ID); ok {
		s.NodeNumbers[n.Role] = max(s.NodeNumbers[n.Role], i)
	}
}

// assignZones spreads a launch batch's nodes evenly over their district's
// zones, counting the deployment's live nodes; it runs before the parallel
// launches so they do not all pick the same zone.
func (r *runner) assignZones(batch []Action) {
	s := r.st.read()
	count := map[districts.DeploymentKey]map[string]int{}
	for _, n := range liveNodes(s) {
		if count[n.Key()] == nil {
			count[n.Key()] = map[string]int{}
		}
		count[n.Key()][n.Zone]++
	}
	r.zones = map[string]string{}
	for _, a := range batch {
		zones := r.districts[a.District].Zones()
		if len(zones) == 0 {
			continue
		}
		k := districts.DeploymentKey{District: a.District, Flavor: a.Flavor, Role: a.Role}
		if count[k] == nil {
			count[k] = map[string]int{}
		}
		best := zones[0]
		for _, z := range zones {
			if count[k][z] < count[k][best] {
				best = z
			}
		}
		count[k][best]++
		r.zones[a.Node] = best
	}
}

// joinNode installs the node, makes it the first master or joins it, and
// labels it. It never terminates: when the join failed it is unknown
// whether the node became a member (the connection may have dropped after
// the join), so the node is marked and the next round's observation
// decides. A failed label leaves a joined node joined; the next round
// labels it again.
func (r *runner) joinNode(ctx context.Context, a Action) error {
	n, ok := r.st.node(a.Node)
	if !ok || n.Phase == districts.PhaseTerminating {
		return errSkip{"the node was not launched"}
	}
	for _, dep := range a.After {
		r.mu.Lock()
		ok := r.fresh[dep]
		r.mu.Unlock()
		if !ok {
			return errSkip{"waits for " + dep + ", which did not initialise the platform"}
		}
	}
	addrs := n.Addresses()
	inUse := r.st.inUse()
	var groups []districts.SecurityGroup
	r.st.view(func(s *districts.Resources) { groups = slices.Clone(s.SecurityGroups) })
	meshPort := r.meshPort()
	for _, g := range groups {
		if !inUse[g.District] {
			continue // an emptied district whose group waits for deletion
		}
		if meshPort != 0 {
			if g.MeshPort != meshPort {
				return errSkip{fmt.Sprintf("group %s does not yet let in the mesh's port %d", g.ID, meshPort)}
			}
			continue
		}
		for _, addr := range addrs {
			if !r.allows(g, addr) {
				return errSkip{fmt.Sprintf("address %s is not yet allowed into group %s", addr, g.ID)}
			}
		}
	}
	p := r.opts.Platform
	r.mu.Lock()
	installed, tried := r.installed[n.ID]
	r.mu.Unlock()
	var err error
	switch {
	case tried && !installed:
		return errSkip{"its install failed"}
	case !tried:
		n, err = r.installNode(ctx, n)
	}
	if err == nil {
		n, err = r.joinMesh(ctx, n)
	}
	if err == nil && a.Kind == KindInit {
		err = p.Init(ctx, n)
	} else if err == nil {
		err = p.Join(ctx, n)
	}
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		return r.joinFailed(n, err)
	}
	r.mu.Lock()
	r.fresh[n.ID] = true
	r.mu.Unlock()
	now := r.opts.Clock.Now()
	if err := r.updateNode(n.ID, func(x *districts.Node, s *districts.Resources) {
		x.Phase, x.Message, x.JoinFailed, x.NotReadySince = districts.PhaseJoined, "", false, time.Time{}
		delete(s.Failures, x.Key().String())
		if x.Role == districts.RoleMaster && s.PlatformFormedAt.IsZero() {
			s.PlatformFormedAt = now
		}
		if s.Mesh == "" {
			s.Mesh = r.opts.Cluster.Network(r.opts.Districts).Mesh
		}
	}); err != nil {
		return err
	}
	tags := r.desired[n.Key()].Tags
	if err := p.Label(ctx, n, tags); err != nil {
		r.changed() // the join went through: the round made progress
		return fmt.Errorf("joined, but setting its labels failed (a later round retries): %w", err)
	}
	return r.updateNode(n.ID, func(x *districts.Node, _ *districts.Resources) { x.Tags = maps.Clone(tags) })
}

// awaitInstall holds a node's init or join until its install, running in
// the background since its launch, is done: only that node's. The action
// starts (and its time counts) from then.
func (r *runner) awaitInstall(ctx context.Context, a Action) error {
	if a.Kind != KindInit && a.Kind != KindJoin {
		return nil
	}
	r.mu.Lock()
	done := r.installing[a.Node]
	r.mu.Unlock()
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// install installs the platform's software on a machine launched this
// round. A failure marks the node like a failed join: the next round
// replaces it once the platform confirms it is no member.
func (r *runner) install(ctx context.Context, a Action) error {
	n, ok := r.st.node(a.Node)
	if !ok || n.Phase == districts.PhaseTerminating {
		r.mu.Lock()
		r.installed[a.Node] = false
		r.mu.Unlock()
		return errSkip{"the node was not launched"}
	}
	n, err := r.installNode(ctx, n)
	r.mu.Lock()
	r.installed[n.ID] = err == nil
	r.mu.Unlock()
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		return r.joinFailed(n, err)
	}
	return nil
}

// installNode installs the platform on n; on the mesh n's end of it
// starts first, so that n reaches its district's other nodes through it
// (a Kubernetes node fetches the bundle from its district's seed there:
// the mesh's firewall lets nothing else in).
func (r *runner) installNode(ctx context.Context, n districts.Node) (districts.Node, error) {
	n, err := r.joinMesh(ctx, n)
	if err != nil {
		return n, err
	}
	return n, r.opts.Platform.Install(ctx, n)
}

// joinFailed records a failed install or join on the node and its
// deployment's run of failures.
func (r *runner) joinFailed(n districts.Node, cause error) error {
	now := r.opts.Clock.Now()
	err := r.updateNode(n.ID, func(x *districts.Node, s *districts.Resources) {
		x.JoinFailed, x.Message = true, cause.Error()
		countFailure(s, *x, cause.Error(), now)
	})
	if err != nil {
		return err
	}
	return fmt.Errorf("%w; the next round replaces the node once the platform confirms it is no member", cause)
}

func (r *runner) label(ctx context.Context, a Action) error {
	n, ok := r.st.node(a.Node)
	if !ok {
		return errSkip{"the node is gone"}
	}
	tags := r.desired[n.Key()].Tags
	if err := r.opts.Platform.Label(ctx, n, tags); err != nil {
		return err
	}
	return r.updateNode(n.ID, func(x *districts.Node, _ *districts.Resources) { x.Tags = maps.Clone(tags) })
}

func (r *runner) uncordon(ctx context.Context, a Action) error {
	n, ok := r.st.node(a.Node)
	if !ok {
		return errSkip{"the node is gone"}
	}
	if err := r.opts.Platform.Uncordon(ctx, n); err != nil {
		return err
	}
	return r.updateNode(n.ID, func(x *districts.Node, _ *districts.Resources) {
		x.Phase, x.CordonedByTransit = districts.PhaseJoined, false
	})
}

// forget takes a member whose machine is gone out of the platform, asking
// the platform first when it is a master.
func (r *runner) forget(ctx context.Context, a Action) error {
	r.judging.Lock()
	defer r.judging.Unlock()
	n := districts.Node{ID: a.Node, Cluster: r.opts.Cluster.ID, Role: a.Role}
	if a.Role == districts.RoleMaster {
		if err := r.opts.Platform.MayRemoveMaster(ctx, n, liveValues(r.st.read())); err != nil {
			return errSkip{err.Error()}
		}
	}
	return r.opts.Platform.Remove(ctx, n)
}

// terminate asks the cloud to delete the machine; it does not wait. The
// state says "terminating" before the cloud is asked: a run killed between
// the two leaves a record that explains the machine's absence (or, if the
// call never went out, a machine alive although transit terminated it,
// which the next run terminates again), never a machine that vanished
// unexplained.
func (r *runner) terminate(ctx context.Context, n districts.Node) error {
	infra, err := r.infra(n.District)
	if err != nil {
		return err
	}
	if owner := r.machineHolder(n); owner != "" {
		return errSkip{fmt.Sprintf("machine %s is node %s's: never terminated as node %s", n.ProviderID, owner, n.ID)}
	}
	if err := r.updateNode(n.ID, func(x *districts.Node, _ *districts.Resources) { x.Phase = districts.PhaseTerminating }); err != nil {
		return err
	}
	tags := provider.IdentityTags(n, r.st.header().Lineage)
	if err := infra.Terminate(ctx, provider.Instance{ProviderID: n.ProviderID, Tags: tags, Zone: n.Zone}); err != nil {
		if ctx.Err() == nil {
			if serr := r.updateNode(n.ID, func(x *districts.Node, _ *districts.Resources) { x.Phase = n.Phase }); serr != nil {
				return serr
			}
		}
		return err
	}
	r.mu.Lock()
	delete(r.launched, n.ProviderID)
	r.mu.Unlock()
	return nil
}

// machineHolder is the live node other than n whose machine is n's (the
// same provider id in a district of the same cloud identity), or "": a
// copy that is a member's own machine must never be terminated.
func (r *runner) machineHolder(n districts.Node) string {
	if n.ProviderID == "" {
		return ""
	}
	identity := identityKey(r.districts[n.District])
	for _, x := range liveValues(r.st.read()) {
		if x.ID != n.ID && x.CopyOf == "" && x.ProviderID == n.ProviderID && identityKey(r.districts[x.District]) == identity {
			return x.ID
		}
	}
	return ""
}

// removeNodes runs the removal stage as one chain per node (drain, remove,
// terminate). Chains that only terminate run in parallel; members go in
// waves bounded by max_unavailable; masters go one at a time, last.
func (r *runner) removeNodes(ctx context.Context, batch []Action) error {
	var order []string
	chains := map[string][]Action{}
	for _, a := range batch {
		if _, ok := chains[a.Node]; !ok {
			order = append(order, a.Node)
		}
		chains[a.Node] = append(chains[a.Node], a)
	}
	var quiet, drains [][]Action
	for _, id := range order {
		if c := chains[id]; len(c) == 1 {
			quiet = append(quiet, c)
		} else {
			drains = append(drains, c)
		}
	}
	// Machines the platform does not have just go.
	if err := r.chainsAtOnce(ctx, quiet, r.opts.Parallel); err != nil {
		return err
	}
	// Members go in waves. A wave takes as many nodes as max_unavailable
	// leaves room for, counting every node cordoned now, whoever cordoned
	// it and whether a drain or a removal failed: the next wave counts
	// again. A node already cordoned holds its own place. Masters go one
	// at a time, after the workers unless already cordoned. With
	// max_unavailable 0 (replacements surge first) one node still goes at
	// a time: the ready-member floor is what keeps the role whole.
	limit := max(r.opts.Cluster.Strategy.Resolved().MaxUnavailable, 1)
	for len(drains) > 0 {
		s := r.st.read()
		cordoned := map[string]bool{}
		for _, n := range liveNodes(s) {
			if isCordoned(n) {
				cordoned[n.ID] = true
			}
		}
		free := limit - len(cordoned)
		var wave, rest [][]Action
		workersLeft := slices.ContainsFunc(drains, isWorkerChain)
		masterIn := false
		for _, c := range drains {
			master, held := c[0].Role == districts.RoleMaster, cordoned[c[0].Node]
			if !held && free <= 0 || master && (masterIn || workersLeft && !held) {
				rest = append(rest, c)
				continue
			}
			if !held {
				free--
			}
			masterIn = masterIn || master
			wave = append(wave, c)
		}
		if len(wave) == 0 {
			for _, c := range rest {
				a := c[0]
				r.emit(Event{Type: EventAction, Phase: PhaseSkip, Action: &a, Error: "max_unavailable is used up by cordoned nodes"})
				r.problem("%s %s skipped: max_unavailable (%d) is used up by %d cordoned node(s): %s",
					a.Kind, target(a), limit, len(cordoned), strings.Join(slices.Sorted(maps.Keys(cordoned)), ", "))
			}
			return nil
		}
		drains = rest
		wave, err := r.admit(ctx, wave)
		if err != nil {
			return err
		}
		if err := r.chainsAtOnce(ctx, wave, len(wave)); err != nil {
			return err
		}
	}
	return nil
}

// admit lets the readyGate decide the wave's drains of members; a chain
// it does not admit is skipped: its node stays for a later round.
func (r *runner) admit(ctx context.Context, wave [][]Action) ([][]Action, error) {
	var drains []Action
	for _, c := range wave {
		if c[0].Kind == KindDrain && c[0].KeepReady > 0 {
			drains = append(drains, c[0])
		}
	}
	if len(drains) == 0 {
		return wave, nil
	}
	why, err := r.gate.admit(ctx, drains, func(msg string) { r.emit(Event{Type: EventWait, Phase: PhaseStart, Message: msg}) })
	if err != nil {
		return nil, err
	}
	refused := map[string]string{}
	for i, a := range drains {
		if why[i] != "" {
			refused[a.Node] = why[i]
		}
	}
	var out [][]Action
	for _, c := range wave {
		reason, ok := refused[c[0].Node]
		if !ok {
			out = append(out, c)
			continue
		}
		for _, a := range c {
			r.emit(Event{Type: EventAction, Phase: PhaseSkip, Action: &a, Error: reason})
		}
	}
	return out, nil
}

func isWorkerChain(c []Action) bool { return c[0].Role != districts.RoleMaster }

// isCordoned: the platform or transit's record says n takes no work.
func isCordoned(n *districts.Node) bool {
	switch n.Phase {
	case districts.PhaseCordoned, districts.PhaseDraining, districts.PhaseDrained:
		return true
	}
	return n.CordonedByTransit && n.Phase.Member()
}

// chainsAtOnce runs removal chains, at most limit at once.
func (r *runner) chainsAtOnce(ctx context.Context, chains [][]Action, limit int) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(limit, 1))
	for _, c := range chains {
		g.Go(func() error { return r.removeChain(gctx, c) })
	}
	return g.Wait()
}

// removeChain runs one node's removal steps in order; when a step fails or
// must not run, the rest are skipped and the node is kept.
func (r *runner) removeChain(ctx context.Context, chain []Action) error {
	stop := ""
	for _, a := range chain {
		if stop != "" {
			r.emit(Event{Type: EventAction, Phase: PhaseSkip, Action: &a, Error: stop})
			continue
		}
		err := r.run(ctx, a, r.removeStep)
		if _, fatal := errors.AsType[errFatal](err); fatal || ctx.Err() != nil {
			return err
		}
		if err != nil {
			stop = "node " + a.Node + " kept: " + string(a.Kind) + " did not succeed"
		}
	}
	return nil
}

func (r *runner) removeStep(ctx context.Context, a Action) error {
	n, ok := r.st.node(a.Node)
	if !ok || n.Phase == districts.PhaseTerminating {
		return errNoChange // already gone
	}
	switch a.Kind {
	case KindDrain:
		if n.Role == districts.RoleMaster {
			if err := r.opts.Platform.MayRemoveMaster(ctx, n, liveValues(r.st.read())); err != nil {
				return errSkip{err.Error()}
			}
		}
		return r.drain(ctx, n)
	case KindRemove:
		// Every master removal asks, whatever phase the node is in.
		if n.Role == districts.RoleMaster {
			if err := r.opts.Platform.MayRemoveMaster(ctx, n, liveValues(r.st.read())); err != nil {
				return errSkip{err.Error()}
			}
		}
		if err := r.opts.Platform.Remove(ctx, n); err != nil {
			return err
		}
		return r.updateNode(n.ID, func(x *districts.Node, _ *districts.Resources) {
			x.Phase, x.CordonedByTransit = districts.PhaseLeft, false
		})
	case KindTerminate:
		return r.terminate(ctx, n)
	}
	return fmt.Errorf("unknown removal step %q", a.Kind)
}

// drain cordons n (recording that transit did, so only transit undoes
// it) and moves its workloads away. A refused drain leaves the node
// schedulable and in place; an interrupted one is undone.
func (r *runner) drain(ctx context.Context, n districts.Node) error {
	observed := n.Phase
	if err := r.updateNode(n.ID, func(x *districts.Node, _ *districts.Resources) {
		x.Phase, x.CordonedByTransit = districts.PhaseDraining, true
	}); err != nil {
		return err
	}
	err := r.opts.Platform.Drain(ctx, n, r.opts.Cluster.Strategy.Resolved().DrainTimeout)
	switch {
	case err == nil:
		return r.updateNode(n.ID, func(x *districts.Node, _ *districts.Resources) { x.Phase = districts.PhaseDrained })
	case ctx.Err() != nil:
		// Interrupted: make the node schedulable again before giving up.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
		defer cancel()
		if uerr := r.opts.Platform.Uncordon(uctx, n); uerr != nil {
			return fmt.Errorf("%w; making %s schedulable again also failed (the next run does): %w", err, n.ID, uerr)
		}
		if serr := r.updateNode(n.ID, func(x *districts.Node, _ *districts.Resources) {
			x.Phase, x.CordonedByTransit = observed, false
		}); serr != nil {
			return serr
		}
		return err
	case errors.Is(err, provider.ErrDrainRefused):
		// The node stays, and this run tries other candidates first. The
		// driver should have left it schedulable; transit makes sure,
		// since an earlier interrupted drain may have cordoned it.
		r.mu.Lock()
		if !r.avoid[n.ID] {
			r.avoid[n.ID] = true
			r.progress++
		}
		r.mu.Unlock()
		phase := observed
		switch observed {
		case districts.PhaseCordoned:
			// Someone else's cordon stays.
		case districts.PhaseDraining, districts.PhaseDrained:
			phase = districts.PhaseJoined
			fallthrough
		default:
			if uerr := r.opts.Platform.Uncordon(ctx, n); uerr != nil {
				return fmt.Errorf("%w; making %s schedulable again also failed (the next run does): %w", err, n.ID, uerr)
			}
		}
		if serr := r.updateNode(n.ID, func(x *districts.Node, _ *districts.Resources) {
			x.Phase, x.Message, x.CordonedByTransit = phase, err.Error(), false
		}); serr != nil {
			return serr
		}
		return err
	}
	// Anything else (the connection dropped): the node may be cordoned;
	// the record says transit did it, so a later round finishes or undoes
	// the drain.
	return err
}
