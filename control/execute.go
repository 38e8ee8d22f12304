package control

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/cloudtransit/transit/districts"
)

// runner executes plans against the drivers, persisting after every action.
type runner struct {
	opts      Options
	districts map[string]districts.District
	desired   map[districts.DeploymentKey]districts.Deployment
	st        *guarded
	// avoid remembers nodes whose drain was refused in this run.
	avoid map[string]bool
	// orphans are the groups the current plan deletes without state
	// entries.
	orphans map[string]districts.SecurityGroup
	// zones holds the zone chosen for each node of the launch batch.
	zones map[string]string
	round int

	mu       sync.Mutex
	problems []string
	refused  int
}

func newRunner(opts Options) *runner {
	r := &runner{
		opts:      opts,
		districts: map[string]districts.District{},
		desired:   map[districts.DeploymentKey]districts.Deployment{},
		st:        &guarded{state: opts.State, save: opts.Save},
		avoid:     map[string]bool{},
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

func (r *runner) emit(e Event) {
	if r.opts.OnEvent == nil {
		return
	}
	e.Time = r.opts.Clock.Now()
	e.Round = r.round
	r.opts.OnEvent(e)
}

// batchOf groups kinds that run together; a plan's actions are in batch
// order.
func batchOf(k Kind) string {
	switch k {
	case KindCreateGroup, KindUpdateGroup:
		return "group"
	case KindLabel, KindUncordon:
		return "change"
	case KindDrain, KindRemove, KindTerminate:
		return "removal"
	}
	return string(k)
}

// execute runs one plan, batch by batch in plan order. Failures of single
// actions become problems; only a cancelled context or a failed save stops
// the round.
func (r *runner) execute(ctx context.Context, p Plan) error {
	for i := 0; i < len(p.Actions); {
		j := i + 1
		for j < len(p.Actions) && batchOf(p.Actions[j].Kind) == batchOf(p.Actions[i].Kind) {
			j++
		}
		batch := p.Actions[i:j]
		i = j
		var err error
		switch batchOf(batch[0].Kind) {
		case "removal":
			err = r.removeNodes(ctx, batch)
		case string(KindInit):
			err = r.each(ctx, batch, 1, r.joinNode)
		case string(KindLaunch):
			r.assignZones(batch)
			err = r.each(ctx, batch, r.opts.Parallel, r.do)
		case string(KindJoin), "change":
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
	return nil
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
			var fatal errFatal
			if errors.As(err, &fatal) {
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

// run wraps one action with its events and turns failures into problems.
func (r *runner) run(ctx context.Context, a Action, f func(context.Context, Action) error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	start := r.opts.Clock.Now()
	r.emit(Event{Type: EventAction, Phase: PhaseStart, Action: &a})
	err := f(ctx, a)
	secs := r.opts.Clock.Now().Sub(start).Seconds()
	var skip errSkip
	switch {
	case err == nil:
		r.emit(Event{Type: EventAction, Phase: PhaseFinish, Action: &a, Seconds: secs})
	case errors.As(err, &skip):
		r.emit(Event{Type: EventAction, Phase: PhaseSkip, Action: &a, Error: err.Error(), Seconds: secs})
		r.problem("%s %s skipped: %s", a.Kind, target(a), err)
	default:
		r.emit(Event{Type: EventAction, Phase: PhaseFinish, Action: &a, Error: err.Error(), Seconds: secs})
		var fatal errFatal
		if !errors.As(err, &fatal) && ctx.Err() == nil {
			r.problem("%s %s: %s", a.Kind, target(a), err)
		}
	}
	return err
}

func target(a Action) string {
	if a.Node != "" {
		return "node " + a.Node
	}
	return "group " + a.Group + " in " + a.District
}

// do dispatches the actions that stand alone.
func (r *runner) do(ctx context.Context, a Action) error {
	switch a.Kind {
	case KindCreateGroup, KindUpdateGroup:
		return r.ensureGroup(ctx, a)
	case KindDeleteGroup:
		return r.deleteGroup(ctx, a)
	case KindLaunch:
		return r.launch(ctx, a)
	case KindJoin:
		return r.joinNode(ctx, a)
	case KindLabel:
		return r.label(ctx, a)
	case KindUncordon:
		return r.uncordon(ctx, a)
	}
	return fmt.Errorf("unknown action kind %q", a.Kind)
}

func (r *runner) infra(district string) (Infrastructure, error) {
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

func findNode(s districts.Resources, id string) (districts.Node, bool) {
	for _, n := range s.Nodes {
		if n.ID == id {
			return n, true
		}
	}
	return districts.Node{}, false
}

// notJoined returns the first of ids that is not a joined node.
func notJoined(s districts.Resources, ids []string) (string, bool) {
	for _, id := range ids {
		if n, ok := findNode(s, id); !ok || n.Phase != districts.PhaseJoined {
			return id, true
		}
	}
	return "", false
}

func findGroup(s districts.Resources, district string) (districts.SecurityGroup, bool) {
	for _, g := range s.SecurityGroups {
		if g.District == district {
			return g, true
		}
	}
	return districts.SecurityGroup{}, false
}

// setNode replaces (or adds) a node in the state and saves.
func (r *runner) setNode(n districts.Node) error {
	n.UpdatedAt = r.opts.Clock.Now()
	err := r.st.update(func(s *districts.Resources) {
		for i := range s.Nodes {
			if s.Nodes[i].ID == n.ID {
				s.Nodes[i] = n
				return
			}
		}
		s.Nodes = append(s.Nodes, n)
	})
	if err != nil {
		return errFatal{err}
	}
	return nil
}

// ensureGroup makes the district's group allow exactly the addresses of
// the cluster's live nodes, as they are now.
func (r *runner) ensureGroup(ctx context.Context, a Action) error {
	s := r.st.read()
	sources := addressesOf(liveNodes(s))
	old, has := findGroup(s, a.District)
	if has && slices.Equal(old.Sources, sources) {
		return nil
	}
	infra, err := r.infra(a.District)
	if err != nil {
		return err
	}
	g, err := infra.EnsureGroup(ctx, GroupSpec{
		Name: a.Group, Cluster: r.opts.Cluster.ID, District: a.District, Sources: sources,
		Tags: map[string]string{districts.TagCluster: r.opts.Cluster.ID, districts.TagDistrict: a.District, districts.TagGroup: a.Group},
	})
	if err != nil {
		return err
	}
	now := r.opts.Clock.Now()
	sg := districts.SecurityGroup{Type: "security_group", ID: a.Group, Cluster: r.opts.Cluster.ID, District: a.District,
		ProviderID: g.ProviderID, Sources: sources, CreatedAt: now, UpdatedAt: now}
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
			return nil
		}
	}
	infra, err := r.infra(a.District)
	if err != nil {
		return err
	}
	if err := infra.DeleteGroup(ctx, Group{ProviderID: g.ProviderID, Name: g.ID}); err != nil {
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
	s := r.st.read()
	g, ok := findGroup(s, a.District)
	if !ok {
		return errSkip{"district " + a.District + " has no security group (its creation failed)"}
	}
	machine, _ := d.MachineType(a.Flavor)
	n := districts.Node{
		Type: "node", ID: a.Node, Cluster: r.opts.Cluster.ID, District: a.District, Role: a.Role, Flavor: a.Flavor,
		Zone: r.zones[a.Node],
	}
	tags := IdentityTags(n, "")
	maps.Copy(tags, r.desired[n.Key()].Tags)
	infra, err := r.infra(a.District)
	if err != nil {
		return err
	}
	inst, err := infra.Launch(ctx, LaunchSpec{
		Node: n, MachineType: machine, GroupID: g.ProviderID, Tags: tags, AuthorizedKey: r.opts.AuthorizedKey,
	})
	if err != nil {
		return err
	}
	n.ProviderID, n.PublicIP, n.PrivateIP = inst.ProviderID, inst.PublicIP, inst.PrivateIP
	if inst.Zone != "" {
		n.Zone = inst.Zone
	}
	n.Phase, n.CreatedAt = districts.PhaseLaunched, r.opts.Clock.Now()
	return r.setNode(n)
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
// labels it. A node that fails is terminated: a later round launches a
// fresh one.
func (r *runner) joinNode(ctx context.Context, a Action) error {
	s := r.st.read()
	n, ok := findNode(s, a.Node)
	if !ok || n.Phase == districts.PhaseTerminating {
		return errSkip{"the node was not launched"}
	}
	if dep, ok := notJoined(s, a.After); ok {
		return errSkip{"waits for " + dep + ", which did not join"}
	}
	addrs := n.Addresses()
	inUse := map[string]bool{}
	for _, m := range liveNodes(s) {
		inUse[m.District] = true
	}
	for _, g := range s.SecurityGroups {
		if !inUse[g.District] {
			continue // an emptied district whose group waits for deletion
		}
		for _, addr := range addrs {
			if !slices.Contains(g.Sources, addr) {
				return errSkip{fmt.Sprintf("address %s is not yet allowed into group %s", addr, g.ID)}
			}
		}
	}
	p := r.opts.Platform
	tags := r.desired[n.Key()].Tags
	err := p.Install(ctx, n)
	if err == nil && a.Kind == KindInit {
		err = p.Init(ctx, n)
	} else if err == nil {
		err = p.Join(ctx, n)
	}
	if err == nil {
		err = p.Label(ctx, n, tags)
	}
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		n.Message = err.Error()
		if terr := r.terminate(ctx, n); terr != nil {
			return fmt.Errorf("%w; terminating it also failed: %w", err, terr)
		}
		return fmt.Errorf("%w; node terminated, a later round launches a replacement", err)
	}
	n.Phase, n.Message, n.Tags = districts.PhaseJoined, "", maps.Clone(tags)
	return r.setNode(n)
}

func (r *runner) label(ctx context.Context, a Action) error {
	n, ok := findNode(r.st.read(), a.Node)
	if !ok {
		return errSkip{"the node is gone"}
	}
	tags := r.desired[n.Key()].Tags
	if err := r.opts.Platform.Label(ctx, n, tags); err != nil {
		return err
	}
	n.Tags = maps.Clone(tags)
	return r.setNode(n)
}

func (r *runner) uncordon(ctx context.Context, a Action) error {
	n, ok := findNode(r.st.read(), a.Node)
	if !ok {
		return errSkip{"the node is gone"}
	}
	if err := r.opts.Platform.Uncordon(ctx, n); err != nil {
		return err
	}
	n.Phase = districts.PhaseJoined
	return r.setNode(n)
}

// terminate asks the cloud to delete the machine; it does not wait.
func (r *runner) terminate(ctx context.Context, n districts.Node) error {
	infra, err := r.infra(n.District)
	if err != nil {
		return err
	}
	tags := IdentityTags(n, "")
	if err := infra.Terminate(ctx, Instance{ProviderID: n.ProviderID, Tags: tags, Zone: n.Zone}); err != nil {
		return err
	}
	n.Phase = districts.PhaseTerminating
	return r.setNode(n)
}

// removeNodes runs the removal batch as one chain per node (drain, remove,
// terminate). Chains that only terminate run in parallel; disruptive chains
// of workers run max_unavailable at a time; masters go one at a time, last.
func (r *runner) removeNodes(ctx context.Context, batch []Action) error {
	var order []string
	chains := map[string][]Action{}
	for _, a := range batch {
		if _, ok := chains[a.Node]; !ok {
			order = append(order, a.Node)
		}
		chains[a.Node] = append(chains[a.Node], a)
	}
	var quiet, workers, masters [][]Action
	for _, id := range order {
		c := chains[id]
		switch {
		case len(c) == 1:
			quiet = append(quiet, c)
		case c[0].Role == districts.RoleMaster:
			masters = append(masters, c)
		default:
			workers = append(workers, c)
		}
	}
	strat := r.opts.Cluster.Strategy.Resolved()
	for _, set := range []struct {
		chains [][]Action
		limit  int
	}{{quiet, r.opts.Parallel}, {workers, strat.MaxUnavailable}, {masters, 1}} {
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(max(set.limit, 1))
		for _, c := range set.chains {
			g.Go(func() error { return r.removeChain(gctx, c) })
		}
		if err := g.Wait(); err != nil {
			return err
		}
	}
	return nil
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
		var fatal errFatal
		if errors.As(err, &fatal) || ctx.Err() != nil {
			return err
		}
		if err != nil {
			stop = "node " + a.Node + " kept: " + string(a.Kind) + " did not succeed"
		}
	}
	return nil
}

func (r *runner) removeStep(ctx context.Context, a Action) error {
	s := r.st.read()
	n, ok := findNode(s, a.Node)
	if !ok || n.Phase == districts.PhaseTerminating {
		return nil // already gone: nothing to do
	}
	if dep, ok := notJoined(s, a.After); ok {
		return errSkip{"its replacement " + dep + " did not join; node kept"}
	}
	switch a.Kind {
	case KindDrain:
		if n.Role == districts.RoleMaster {
			if err := quorumAfterRemoving(s, n); err != nil {
				return err
			}
		}
		observed := n.Phase
		n.Phase = districts.PhaseDraining
		if err := r.setNode(n); err != nil {
			return err
		}
		if err := r.opts.Platform.Drain(ctx, n, r.opts.Cluster.Strategy.Resolved().DrainTimeout); err != nil {
			if ctx.Err() != nil {
				return err
			}
			// The platform left the node schedulable; it stays, and this
			// run tries other candidates first.
			n.Phase, n.Message = observed, err.Error()
			r.mu.Lock()
			if !r.avoid[n.ID] {
				r.avoid[n.ID] = true
				r.refused++
			}
			r.mu.Unlock()
			if serr := r.setNode(n); serr != nil {
				return serr
			}
			return err
		}
		n.Phase = districts.PhaseDrained
		return r.setNode(n)
	case KindRemove:
		if n.Role == districts.RoleMaster && n.Phase != districts.PhaseDrained {
			if err := quorumAfterRemoving(s, n); err != nil {
				return err
			}
		}
		if err := r.opts.Platform.Remove(ctx, n); err != nil {
			return err
		}
		n.Phase = districts.PhaseLeft
		return r.setNode(n)
	case KindTerminate:
		return r.terminate(ctx, n)
	}
	return fmt.Errorf("unknown removal step %q", a.Kind)
}

// quorumAfterRemoving refuses to take a master away when the masters left
// could not keep a majority, or when it is the last one.
func quorumAfterRemoving(s districts.Resources, n districts.Node) error {
	members, healthy := 0, 0
	for _, m := range s.Nodes {
		if m.Role != districts.RoleMaster || !isMember(m.Phase) {
			continue
		}
		members++
		if m.Phase == districts.PhaseJoined || m.ID == n.ID && m.Phase == districts.PhaseDrained {
			healthy++
		}
	}
	after := members - 1
	healthyAfter := healthy
	if n.Phase == districts.PhaseJoined || n.Phase == districts.PhaseDrained {
		healthyAfter--
	}
	if after < 1 {
		return errSkip{"it is the last master"}
	}
	if healthyAfter < after/2+1 {
		return errSkip{fmt.Sprintf("removing it would leave %d healthy of %d masters, below quorum %d", healthyAfter, after, after/2+1)}
	}
	return nil
}
