package control

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/cloudtransit/transit/clock"
	"github.com/cloudtransit/transit/districts"
)

// Defaults for Options.
const (
	DefaultParallel     = 10
	DefaultMaxRounds    = 50
	DefaultWaitTimeout  = 10 * time.Minute
	DefaultPollInterval = 2 * time.Second
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
	w, err := observe(ctx, withDefaults(opts))
	if err != nil {
		return Observation{}, err
	}
	return Observation{State: w.state, Notes: w.notes}, nil
}

// refresh observes and saves what it found.
func refresh(ctx context.Context, opts Options) (world, error) {
	w, err := observe(ctx, opts)
	if err != nil {
		return world{}, err
	}
	if opts.Save != nil {
		if err := opts.Save(w.state); err != nil {
			return world{}, fmt.Errorf("save state: %w", err)
		}
	}
	return w, nil
}

// MakePlan builds the plan for the next round. Unless refreshed, it works
// from opts.State alone and calls no cloud and no platform.
func MakePlan(ctx context.Context, opts Options, refreshed bool) (Plan, error) {
	opts = withDefaults(opts)
	w := stateWorld(opts.State)
	if refreshed {
		var err error
		if w, err = refresh(ctx, opts); err != nil {
			return Plan{}, err
		}
	}
	return buildPlan(planInput{cluster: opts.Cluster, districts: opts.Districts, world: w,
		newID: nodeIDs(opts, w.state)}), nil
}

// Apply runs rounds (observe, plan, execute, persist) until the cluster
// matches opts.Cluster or a round makes no progress. A run that ends
// unconverged returns an error matching ErrNotConverged.
func Apply(ctx context.Context, opts Options) (Result, error) {
	opts = withDefaults(opts)
	r := newRunner(opts)
	var res Result
	prevRemaining, refusedBefore := -1, 0
	var waited time.Duration
	for r.round = 1; ; r.round++ {
		if r.round > opts.MaxRounds {
			return r.finish(res, fmt.Errorf("%w: %d rounds (--max-rounds) ran out with work left: %s", ErrNotConverged, opts.MaxRounds, r.problemText()))
		}
		res.Rounds = r.round
		r.emit(Event{Type: EventRound, Phase: PhaseStart})
		o := opts
		o.State = r.st.read()
		w, err := observe(ctx, o)
		if err != nil {
			return r.finish(res, err)
		}
		if err := r.st.update(func(s *districts.Resources) { *s = w.state }); err != nil {
			return r.finish(res, err)
		}
		r.orphans = map[string]districts.SecurityGroup{}
		for _, g := range w.orphanGroups {
			r.orphans[g.ID] = g
		}
		plan := buildPlan(planInput{cluster: opts.Cluster, districts: opts.Districts, world: w, avoid: r.avoid,
			newID: nodeIDs(opts, w.state)})
		r.emit(Event{Type: EventPlan, Phase: PhaseStart, Plan: &plan})
		for _, n := range plan.Notes {
			opts.Logger.Info(n)
		}
		if r.round == 1 && opts.Confirmed != nil && !reflect.DeepEqual(plan.Actions, opts.Confirmed.Actions) {
			return r.finish(res, ErrStalePlan)
		}
		if plan.Empty() {
			res.Converged = true
			return r.finish(res, nil)
		}
		if len(plan.Actions) == 0 {
			// Only waiting is left (terminations, readiness): not progress
			// the loop can make, so it does not use up rounds.
			if waited >= opts.WaitTimeout {
				return r.finish(res, fmt.Errorf("%w: gave up after %s waiting: %s", ErrNotConverged, waited, strings.Join(plan.Waiting, "; ")))
			}
			r.emit(Event{Type: EventWait, Phase: PhaseStart, Message: strings.Join(plan.Waiting, "; ")})
			if err := opts.Clock.Sleep(ctx, opts.PollInterval); err != nil {
				return r.finish(res, err)
			}
			waited += opts.PollInterval
			r.round--
			continue
		}
		if prevRemaining >= 0 && len(plan.Actions) >= prevRemaining && r.refused == refusedBefore {
			return r.finish(res, fmt.Errorf("%w: round %d made no progress: %s", ErrNotConverged, r.round-1, r.problemText()))
		}
		prevRemaining, refusedBefore = len(plan.Actions), r.refused
		r.problems = nil
		if err := r.execute(ctx, plan); err != nil {
			return r.finish(res, err)
		}
	}
}

func (r *runner) problemText() string {
	if len(r.problems) == 0 {
		return "no action failed, but the work left did not shrink"
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

// nodeIDs names new nodes <cluster>-<role>-<n>, counting on from the
// highest number in use, so names stay readable and plans reproducible.
func nodeIDs(opts Options, s districts.Resources) func(districts.DeploymentKey) string {
	next := map[string]int{}
	for _, n := range s.Nodes {
		prefix := opts.Cluster.ID + "-" + n.Role + "-"
		if rest, ok := strings.CutPrefix(n.ID, prefix); ok {
			if i, err := strconv.Atoi(rest); err == nil && i >= next[n.Role] {
				next[n.Role] = i + 1
			}
		}
	}
	return func(k districts.DeploymentKey) string {
		if next[k.Role] == 0 {
			next[k.Role] = 1
		}
		id := fmt.Sprintf("%s-%s-%d", opts.Cluster.ID, k.Role, next[k.Role])
		next[k.Role]++
		return id
	}
}
