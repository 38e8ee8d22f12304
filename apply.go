package transit

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/cloudtransit/transit/control"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/statestore"
)

// PlanOptions say which plan to make.
type PlanOptions struct {
	// Refresh asks the clouds and the platform for the current state
	// first (needs Observe or Change access) and keeps what they say in
	// memory; without it the plan is made from resources.json alone and
	// calls no cloud.
	Refresh bool
	// Destroy plans the teardown Destroy runs; the platform is not asked.
	Destroy bool
	// AllowDestroy, RebuildPlatform and ForgetMissing show what an Apply
	// with them would do; see ApplyOptions.
	AllowDestroy    bool
	RebuildPlatform bool
	ForgetMissing   bool
}

// Plan makes the plan of the next round: what an Apply (or, with Destroy,
// a Destroy) with the same options would do first. It takes no lock and
// writes nothing. An error matches ErrRefresh, or ErrConfig when the
// platform driver could not be built.
func (s *Session) Plan(ctx context.Context, o PlanOptions) (Plan, error) {
	need := ReadState
	if o.Refresh {
		need = Observe
	}
	if err := s.use(need, "plan"); err != nil {
		return Plan{}, err
	}
	opts, err := s.planOptions(ctx, o)
	if err != nil {
		return Plan{}, err
	}
	opts.SaveChanged = nil // a plan only looks
	p, err := control.MakePlan(ctx, opts, o.Refresh)
	if err != nil {
		return Plan{}, atStage(ErrRefresh, err)
	}
	if !o.Destroy {
		p.Notes = append(p.Notes, autoscaleNotes(s.cfg.Cluster, s.state)...)
	}
	return p, nil
}

// planOptions are the loop's options for what o plans: the platform driver
// when it is asked, the intended state of a teardown.
func (s *Session) planOptions(ctx context.Context, o PlanOptions) (control.Options, error) {
	opts := s.loopOptions()
	opts.AllowDestroy = o.AllowDestroy
	opts.RebuildPlatform = o.RebuildPlatform
	opts.ForgetMissing = o.ForgetMissing
	if o.Destroy {
		opts.Destroy = true
		opts.Cluster = withoutNodes(opts.Cluster)
		return opts, nil
	}
	if o.Refresh {
		p, err := s.platformDriver(ctx)
		if err != nil {
			return control.Options{}, err
		}
		opts.Platform = p
	}
	return opts, nil
}

// withoutNodes is c wanting no node: the intended state of a teardown.
// cluster.json is not changed.
func withoutNodes(c districts.Cluster) districts.Cluster {
	c.Deployments = slices.Clone(c.Deployments)
	for i := range c.Deployments {
		c.Deployments[i].Quantity = 0
	}
	return c
}

// ApplyOptions say how Apply and Destroy run the loop, and how the plan is
// approved.
type ApplyOptions struct {
	// Parallel bounds concurrent launches and joins (default 10).
	Parallel int
	// MaxRounds bounds the rounds (default 50).
	MaxRounds int
	// AllowDestroy lets an apply whose cluster.json wants no node at all
	// remove every node, the last master too. Without it such an apply is
	// refused (control.ErrWouldDestroy): one bad write of cluster.json
	// must not wipe a platform.
	AllowDestroy bool
	// RebuildPlatform initialises a new platform over the nodes when the
	// platform formed once and is now lost (no master serves it).
	RebuildPlatform bool
	// ForgetMissing believes listings that lack machines transit expects
	// (control.Options.ForgetMissing): the operator says they are gone.
	ForgetMissing bool
	// RotateKeys are nodes whose mesh keys rotate in this run whatever
	// their age (transit mesh rotate); RotateAllKeys rotates every
	// node's. A named node that is not the cluster's fails the run
	// (control.ErrUnknownNode) before anything changes.
	RotateKeys    []string
	RotateAllKeys bool

	// Confirmed is a plan the caller made with Plan (Refresh, and the
	// same AllowDestroy and RebuildPlatform; Destroy for Destroy) and
	// approved. Apply then makes no plan of its own and runs the loop
	// only if its first round would do exactly these actions; otherwise
	// it returns control.ErrStalePlan having changed nothing.
	Confirmed *Plan
	// OnPlan, without Confirmed, is called with the plan Apply makes
	// before the loop (refreshed, in memory), whatever it holds; an error
	// ends Apply before anything is changed.
	OnPlan func(Plan) error
	// Confirm, without Confirmed, is asked to approve that plan when it
	// has actions: nil approves it, and the loop's first round must then
	// do exactly those actions (control.ErrStalePlan otherwise); an error
	// cancels (ErrCancelled). Without Confirm and Confirmed, Apply runs
	// whatever the rounds find.
	Confirm func(ctx context.Context, p Plan) error

	// OnEvent receives the loop's progress events, from several
	// goroutines; it must not block for long.
	OnEvent func(Event)
}

// Apply changes the cluster until it matches cluster.json: it makes the
// plan (refreshed; or takes Confirmed), has it approved, and runs the
// control loop, which saves resources.json after every action, until the
// cluster matches or a round makes no progress (an error matching
// control.ErrNotConverged, with the reasons in Result.Problems). It needs
// Change access. When the plan has nothing to do and no node is up, the
// loop does not run (Result.Rounds is 0). A cancelled ctx stops the loop:
// the actions under way end or are abandoned safely, the state is saved,
// and Result.Left names what was left undone.
func (s *Session) Apply(ctx context.Context, o ApplyOptions) (Result, error) {
	return s.change(ctx, o, false)
}

// Destroy tears the cluster down: it terminates every machine transit
// created for the cluster (in parallel, no drain: the platform goes away
// with them) and deletes each district's group once its machines are
// gone, saving resources.json after every action. It never builds or asks
// the platform driver, so it works when the masters are unreachable.
// cluster.json is not changed. Options and results are Apply's.
func (s *Session) Destroy(ctx context.Context, o ApplyOptions) (Result, error) {
	return s.change(ctx, o, true)
}

func (s *Session) change(ctx context.Context, o ApplyOptions, destroy bool) (_ Result, err error) {
	verb := "apply"
	if destroy {
		verb = "destroy"
	}
	if err := s.use(Change, verb); err != nil {
		return Result{}, err
	}
	po := PlanOptions{Refresh: true, Destroy: destroy, AllowDestroy: o.AllowDestroy, RebuildPlatform: o.RebuildPlatform, ForgetMissing: o.ForgetMissing}
	opts, err := s.planOptions(ctx, po)
	if err != nil {
		return Result{}, err
	}
	opts.Parallel = o.Parallel
	opts.MaxRounds = o.MaxRounds
	opts.OnEvent = o.OnEvent
	opts.RotateKeys, opts.RotateAllKeys = o.RotateKeys, o.RotateAllKeys
	// A remote state's lease fences the run: no action once it is not
	// this run's, and the loop stops the moment it is lost.
	opts.Fence = s.fence
	ctx, stopFence := s.fenced(ctx)
	defer stopFence()
	defer func() {
		// Not an interruption: the lock went, whatever step that stopped
		// (the plan's refresh as well as the loop).
		if cause := context.Cause(ctx); err != nil && errors.Is(cause, statestore.ErrLockLost) {
			err = cause
		}
	}()

	p, approved := Plan{}, o.Confirmed
	if o.Confirmed != nil {
		p = *o.Confirmed
	} else {
		// The plan is made in memory; the loop's first round observes
		// again, saves, and runs only if it would do the same.
		preview := opts
		preview.SaveChanged = nil
		if p, err = control.MakePlan(ctx, preview, true); err != nil {
			return Result{}, atStage(ErrRefresh, err)
		}
		if !destroy {
			p.Notes = append(p.Notes, autoscaleNotes(s.cfg.Cluster, s.state)...)
		}
	}
	if err := refuseDestroy(opts, p); err != nil {
		return Result{}, err
	}
	if err := refuseOverBudget(opts, p); err != nil {
		return Result{}, err
	}
	if o.Confirmed == nil && o.OnPlan != nil {
		if err := o.OnPlan(p); err != nil {
			return Result{}, err
		}
	}
	// Nothing to change: the loop still runs its addons step on a live
	// cluster (addons are matched on every apply), in one round.
	if p.Empty() && (destroy || !hasLiveNodes(s.state)) {
		return Result{Converged: true, Warnings: p.Warnings}, nil
	}
	// Only waiting or blocked items: nothing to confirm.
	if o.Confirmed == nil && o.Confirm != nil && len(p.Actions) > 0 {
		if err := o.Confirm(ctx, p); err != nil {
			if ctx.Err() != nil {
				return Result{}, ctx.Err()
			}
			return Result{}, atStage(ErrCancelled, fmt.Errorf("%s cancelled: %w", verb, err))
		}
		approved = &p
	}
	opts.Confirmed = approved
	before := s.saves.Load()
	res, err := control.Apply(ctx, opts)
	if s.saves.Load() != before {
		// Readers of resources.json after the run see it whole.
		if cerr := s.journal.Close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
		if rerr := s.reload(); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}
	return res, err
}

// fence says whether the run may still act: a remote state's lock must
// still be its own (statestore.Lock.Valid).
func (s *Session) fence() error {
	if s.remote == nil || s.remote.lock == nil {
		return nil
	}
	return s.remote.lock.Valid()
}

// fenced is ctx cancelled, with the lock's loss as its cause, the moment
// a remote state's lock is lost; stop ends the watch.
func (s *Session) fenced(ctx context.Context) (_ context.Context, stop func()) {
	if s.remote == nil || s.remote.lock == nil {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		select {
		case <-s.remote.lock.Lost():
			cancel(s.remote.lock.Valid())
		case <-done:
		}
	}()
	return ctx, func() { close(done); cancel(nil) }
}

// refuseDestroy returns control.ErrWouldDestroy when the plan terminates
// machines although cluster.json wants no node and nothing allows it: one
// bad write of cluster.json must not wipe a platform. The loop refuses such
// a run too; refusing here spares approving a plan that would not run.
func refuseDestroy(o control.Options, p Plan) error {
	if o.Destroy || o.AllowDestroy {
		return nil
	}
	for _, d := range o.Cluster.Deployments {
		if d.Quantity > 0 {
			return nil
		}
	}
	for _, a := range p.Actions {
		if a.Kind == control.KindTerminate {
			return control.ErrWouldDestroy
		}
	}
	return nil
}

// refuseOverBudget returns control.ErrOverBudget when the plan's cluster
// would cost more than cluster.json's budget: before anything is
// launched. A teardown is never refused.
func refuseOverBudget(o control.Options, p Plan) error {
	if o.Destroy || o.Cluster.Budget == nil {
		return nil
	}
	if p.Cost == nil && len(p.Actions) > 0 {
		// A saved plan made before budgets were priced.
		return fmt.Errorf("%w: the plan carries no cost, so the budget cannot be checked: make the plan again", control.ErrOverBudget)
	}
	return p.Cost.Refusal()
}

// hasLiveNodes says the state holds a node not on its way out.
func hasLiveNodes(res districts.Resources) bool {
	for _, n := range res.Nodes {
		if n.Phase != districts.PhaseLeft && n.Phase != districts.PhaseTerminating {
			return true
		}
	}
	return false
}
