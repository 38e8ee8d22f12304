package control

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/cloudtransit/transit/clock"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// Defaults for Options.
const (
	DefaultParallel     = 10
	DefaultMaxRounds    = 50
	DefaultWaitTimeout  = 10 * time.Minute
	DefaultPollInterval = 2 * time.Second
)

// listingWait bounds how long a run waits for listings that lack machines
// they must show (eventual consistency) before it stops; silentWait how
// long it waits for a platform that stopped answering after the run
// changed it.
const (
	listingWait = 2 * time.Minute
	silentWait  = 2 * time.Minute
)

func withDefaults(o Options) Options {
	if o.Parallel <= 0 {
		o.Parallel = DefaultParallel
	}
	if o.MaxRounds <= 0 {
		o.MaxRounds = DefaultMaxRounds
	}
	if o.WaitTimeout <= 0 {
		o.WaitTimeout = DefaultWaitTimeout
	}
	if o.PollInterval <= 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.NewLineage == nil {
		o.NewLineage = newLineage
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return o
}

// Observation is what a refresh found.
type Observation struct {
	// State is the current state: the clouds' machines and groups, with
	// each node's phase as the platform reports it.
	State districts.Resources
	// Notes report adopted and forgotten nodes and foreign resources.
	Notes []string
	// PlatformError says why the platform could not be asked (no master
	// answered); node phases then come from resources.json. Empty when
	// the platform answered or there was nothing to ask.
	PlatformError string
}

// Refresh observes every district and the platform and returns the
// current state: tagged machines missing from state are adopted, state
// entries the clouds no longer have are dropped. It writes nothing. An
// unreachable platform is no error: Observation.PlatformError says so.
func Refresh(ctx context.Context, opts Options) (Observation, error) {
	w, err := observe(ctx, observation{opts: withDefaults(opts)})
	if err != nil {
		return Observation{}, err
	}
	obs := Observation{State: w.state, Notes: append(w.notes, w.warnings...)}
	for _, m := range w.missing {
		obs.Notes = append(obs.Notes, "missing from the listing, not believed: "+m.String())
	}
	if w.platformErr != nil {
		obs.PlatformError = w.platformErr.Error()
	}
	return obs, nil
}

// MakePlan builds the plan for the next round. Unless refreshed, it works
// from opts.State alone and calls no cloud and no platform. It writes
// nothing.
func MakePlan(ctx context.Context, opts Options, refreshed bool) (Plan, error) {
	opts = withDefaults(opts)
	if err := checkSize(opts.Cluster); err != nil {
		return Plan{}, err
	}
	if err := districts.CheckStateDistricts(opts.State, opts.Districts, "resources.json"); err != nil {
		return Plan{}, err
	}
	w := stateWorld(opts.State, opts.Clock.Now())
	if refreshed {
		var err error
		if w, err = observe(ctx, observation{opts: opts}); err != nil {
			return Plan{}, err
		}
	}
	if len(w.missing) > 0 {
		return Plan{Cluster: opts.Cluster.ID, Notes: w.notes, Warnings: w.warnings, Blocked: []string{missingText(w.missing)}}, nil
	}
	rotate, err := askedRotations(opts, w.state)
	if err != nil {
		return Plan{}, err
	}
	in := planInput{cluster: opts.Cluster, districts: opts.Districts, world: w, rotate: rotate,
		destroy: opts.Destroy || opts.AllowDestroy && wantsNothing(opts.Cluster), rebuild: opts.RebuildPlatform,
		ids: newNodeNumbers(opts.Cluster.ID, w), limits: groupLimits(opts.Infra)}
	p := buildPlan(in)
	priceActions(in, opts.Prices, &p)
	return p, nil
}

// checkSize refuses a cluster larger than validation allows, for callers
// that build one without loading cluster.json: planning a typo's billion
// nodes would eat the host's memory.
func checkSize(c districts.Cluster) error {
	total := 0
	for _, d := range c.Deployments {
		if d.Quantity > districts.MaxDeploymentQuantity {
			return fmt.Errorf("%w: deployment %s wants %d nodes, more than %d", districts.ErrInvalid, d.Key(), d.Quantity, districts.MaxDeploymentQuantity)
		}
		total += max(d.Quantity, 0)
	}
	if total > districts.MaxClusterNodes {
		return fmt.Errorf("%w: cluster %s wants %d nodes, more than %d", districts.ErrInvalid, c.ID, total, districts.MaxClusterNodes)
	}
	return nil
}

// missingText says which machines a listing lacks and what to do.
func missingText(missing []missingMachine) string {
	parts := make([]string, len(missing))
	for i, m := range missing {
		parts[i] = m.String()
	}
	return fmt.Sprintf("the clouds' listings lack %d machine(s) that must be there: %s; transit does not act on a listing it cannot believe: check the district's region, project and credential; if the machines are really gone, run again with --forget-missing",
		len(missing), strings.Join(parts, "; "))
}

// Apply runs rounds (observe, plan, execute, persist) until the cluster
// matches opts.Cluster or a round makes no progress. A run that ends
// unconverged returns an error matching ErrNotConverged.
//
// Progress is counted honestly: a round made progress when one of its
// actions changed the world (a machine launched, a node joined, a group
// changed) or a drain was newly refused (which changes the candidates the
// next round tries; each node is refused at most once per run). A round
// all of whose actions failed or found nothing to do made none, and the
// run stops. Waiting for what only time fixes (terminations, new members
// becoming ready) is no round at all: it is bounded by WaitTimeout, and so
// is waiting for a platform that stopped answering right after a round
// changed it (by silentWait too).
func Apply(ctx context.Context, opts Options) (Result, error) {
	opts = withDefaults(opts)
	if err := checkSize(opts.Cluster); err != nil {
		return Result{}, err
	}
	r := newRunner(opts)
	destroy := opts.Destroy || opts.AllowDestroy && wantsNothing(opts.Cluster)
	var res Result
	var waited, listingWaited, silentWaited time.Duration
	var plan Plan
	lastProgress := -1 // progress of the last round that executed, -1 before any
	for r.round = 1; ; r.round++ {
		began := opts.Clock.Now() // a waiting round's time counts whole: observing takes time too
		if r.round > opts.MaxRounds {
			return r.finish(res, fmt.Errorf("%w: %d rounds (--max-rounds) ran out with work left: %s", ErrNotConverged, opts.MaxRounds, r.problemText()))
		}
		res.Rounds = r.round
		r.emit(Event{Type: EventRound, Phase: PhaseStart})
		o := opts
		o.State = r.st.read()
		r.mu.Lock()
		launched := maps.Clone(r.launched)
		r.mu.Unlock()
		w, err := observe(ctx, observation{opts: o, launched: launched})
		if err != nil {
			return r.finish(res, err)
		}
		if len(w.missing) > 0 {
			// A listing that lacks machines it must show is not acted
			// on: the clouds' listings are eventually consistent, so wait
			// a little, then stop. What it learnt of the launches a killed
			// run left is kept, and so are the machines of the cluster it
			// showed that resources.json lacks: the next page may miss
			// them again, and a line must count them.
			adopted := adoptedNodes(o.State, w.state)
			if !slices.Equal(w.state.Launching, o.State.Launching) || len(adopted) > 0 {
				if err := r.st.update(func(s *districts.Resources) {
					s.Launching = w.state.Launching
					s.Nodes = append(s.Nodes, adopted...)
				}); err != nil {
					return r.finish(res, err)
				}
			}
			if listingWaited >= min(opts.WaitTimeout, listingWait) {
				msg := missingText(w.missing)
				r.problems = append(r.problems, msg)
				return r.finish(res, &notConverged{msg: msg, causes: []error{ErrMissingMachines}})
			}
			r.emit(Event{Type: EventWait, Phase: PhaseStart, Message: missingText(w.missing)})
			if err := opts.Clock.Sleep(ctx, opts.PollInterval); err != nil {
				return r.finish(res, err)
			}
			listingWaited += opts.PollInterval
			r.round--
			continue
		}
		listingWaited = 0
		if r.rotate == nil {
			if r.rotate, err = askedRotations(opts, w.state); err != nil {
				return r.finish(res, err)
			}
		}
		if w.state.Lineage == "" && len(w.state.Nodes) == 0 && len(w.state.SecurityGroups) == 0 && len(o.State.Nodes) == 0 {
			w.state.Lineage = opts.NewLineage()
		}
		if r.ids == nil {
			r.ids = newNodeNumbers(opts.Cluster.ID, w)
		}
		r.orphans = map[string]districts.SecurityGroup{}
		for _, g := range w.orphanGroups {
			r.orphans[g.ID] = g
		}
		r.mu.Lock()
		in := planInput{cluster: opts.Cluster, districts: opts.Districts, world: w, avoid: maps.Clone(r.avoid),
			fresh: maps.Clone(r.fresh), rotate: maps.Clone(r.rotate), destroy: destroy, rebuild: opts.RebuildPlatform, ids: r.ids, limits: groupLimits(opts.Infra)}
		r.mu.Unlock()
		plan = buildPlan(in)
		if r.budget < 0 {
			r.budget = spendBudget(in)
		}
		r.emit(Event{Type: EventPlan, Phase: PhaseStart, Plan: &plan})
		for _, n := range plan.Notes {
			opts.Logger.Info(n)
		}
		res.Warnings = plan.Warnings
		if r.round == 1 && !destroy && wantsNothing(opts.Cluster) && len(w.live()) > 0 {
			return r.finish(res, ErrWouldDestroy)
		}
		if r.round == 1 && opts.Confirmed != nil && !SameActions(plan.Actions, opts.Confirmed.Actions) {
			return r.finish(res, ErrStalePlan)
		}
		// Saved only now: a run refused in its first round writes
		// nothing.
		if err := r.st.reset(w.state); err != nil {
			return r.finish(res, err)
		}
		if plan.Empty() {
			if !destroy && len(w.live()) > 0 {
				if err := r.addons(ctx); err != nil {
					return r.finish(res, err)
				}
			}
			res.Converged = true
			return r.finish(res, nil)
		}
		if w.platform != platformUnreachable {
			silentWaited = 0
		}
		if len(plan.Actions) == 0 && len(plan.Waiting) == 0 && w.platform == platformUnreachable &&
			lastProgress > 0 && silentWaited < min(opts.WaitTimeout, silentWait) {
			// The run changed the platform a moment ago: a master that
			// joined or left costs an etcd election, a restart of an
			// API server. Not the silence a run finds at its start.
			r.emit(Event{Type: EventWait, Phase: PhaseStart, Message: fmt.Sprintf("the platform does not answer since the last round changed it (%v); asking again", w.platformErr)})
			if err := opts.Clock.Sleep(ctx, opts.PollInterval); err != nil {
				return r.finish(res, err)
			}
			silentWaited += opts.Clock.Now().Sub(began)
			r.round--
			continue
		}
		if len(plan.Actions) == 0 && len(plan.Waiting) == 0 {
			r.problems = append(r.problems, plan.Blocked...)
			return r.finish(res, blockedError(w, in, plan.Blocked))
		}
		if len(plan.Actions) == 0 {
			// Only waiting is left: not progress the loop can make, so it
			// does not use up rounds.
			if waited >= opts.WaitTimeout {
				r.problems = append(r.problems, plan.Blocked...)
				return r.finish(res, fmt.Errorf("%w: gave up after %s waiting: %s", ErrNotConverged, waited, strings.Join(append(plan.Waiting, plan.Blocked...), "; ")))
			}
			r.emit(Event{Type: EventWait, Phase: PhaseStart, Message: strings.Join(plan.Waiting, "; ")})
			if err := opts.Clock.Sleep(ctx, opts.PollInterval); err != nil {
				res.Left = r.left(plan)
				return r.finish(res, err)
			}
			waited += opts.Clock.Now().Sub(began)
			r.round--
			continue
		}
		if lastProgress == 0 {
			return r.finish(res, fmt.Errorf("%w: round %d made no progress: %s", ErrNotConverged, r.round-1, r.problemText()))
		}
		r.problems = nil
		r.mu.Lock()
		r.progress = 0
		r.mu.Unlock()
		if err := r.execute(ctx, plan); err != nil {
			if ctx.Err() != nil {
				res.Left = r.left(plan)
			}
			return r.finish(res, err)
		}
		r.mu.Lock()
		lastProgress = r.progress
		r.mu.Unlock()
	}
}

// adoptedNodes are the nodes of an observation whose machines the state
// before it did not hold, unless that state was lost (then the whole
// observation is adopted once it is consistent).
func adoptedNodes(before, observed districts.Resources) []districts.Node {
	if before.Lineage == "" {
		return nil
	}
	known := map[string]bool{}
	for _, n := range before.Nodes {
		known[n.ID], known[n.ProviderID] = true, true
	}
	var out []districts.Node
	for _, n := range observed.Nodes {
		if n.ProviderID != "" && !known[n.ProviderID] && !known[n.ID] {
			out = append(out, n)
		}
	}
	return out
}

// spendBudget is how many machines one run may launch: what the intended
// state lacks at the run's start (each line's shortfall of usable nodes:
// nodes to replace do not count as had) plus max_surge. Whatever later
// rounds believe, a run launches no more.
func spendBudget(in planInput) int {
	n := in.cluster.Strategy.Resolved().MaxSurge
	for _, rw := range classify(in).roles {
		n += len(rw.adds)
	}
	return n
}

// addons runs the platform's addons step once the nodes converged. A
// failure leaves the run not converged: the next run tries again.
func (r *runner) addons(ctx context.Context) error {
	start := r.opts.Clock.Now()
	r.emit(Event{Type: EventAddons, Phase: PhaseStart})
	changed, err := r.opts.Platform.EnsureAddons(ctx, r.opts.Cluster.Addons)
	e := Event{Type: EventAddons, Phase: PhaseFinish, Message: strings.Join(changed, ", "), Changed: changed,
		Seconds: r.opts.Clock.Now().Sub(start).Seconds()}
	if err != nil {
		e.Error = err.Error()
	}
	r.emit(e)
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		r.problems = append(r.problems, "addons: "+err.Error())
		e := &notConverged{msg: "the nodes converged, but the addons step failed: " + err.Error()}
		if errors.Is(err, provider.ErrAddonInUse) {
			e.causes = append(e.causes, provider.ErrAddonInUse)
		}
		return e
	}
	return nil
}

// notConverged is ErrNotConverged with the typed reasons callers act on
// (ErrPlatformLost, ErrPlatformUnreachable).
type notConverged struct {
	msg    string
	causes []error
}

func (e *notConverged) Error() string { return ErrNotConverged.Error() + ": " + e.msg }

func (e *notConverged) Is(target error) bool {
	return target == ErrNotConverged || slices.Contains(e.causes, target)
}

// blockedError says why a round had nothing it could do.
func blockedError(w world, in planInput, blocked []string) error {
	e := &notConverged{msg: strings.Join(blocked, "; ")}
	switch {
	case w.platform == platformUnreachable:
		e.causes = append(e.causes, provider.ErrPlatformUnreachable)
	case w.platform == platformNone && !w.state.PlatformFormedAt.IsZero() && !in.rebuild:
		e.causes = append(e.causes, ErrPlatformLost)
	}
	return e
}

func (r *runner) problemText() string {
	if len(r.problems) == 0 {
		return "no action changed anything"
	}
	return strings.Join(r.problems, "; ")
}

func (r *runner) finish(res Result, err error) (Result, error) {
	if !res.Converged {
		res.Problems = append([]string(nil), r.problems...)
	}
	r.emit(Event{Type: EventResult, Phase: PhaseFinish, Result: &res, Error: errString(err)})
	return res, err
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
