package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cloudtransit/transit"
	"github.com/cloudtransit/transit/control"
	"github.com/cloudtransit/transit/districts"
)

type applyFlags struct {
	// planFile is a saved plan to run (apply FILE).
	planFile    string
	autoApprove bool
	parallel    int
	maxRounds   int
	json        bool
	watch       bool
	interval    time.Duration
	safety      safetyFlags
	// dryRun: autoscale decides and shows, and changes nothing.
	dryRun bool
}

func (f *applyFlags) register(fs *pflag.FlagSet) {
	fs.BoolVar(&f.autoApprove, "auto-approve", false, "apply without asking (required when stdin is not a terminal: cron, CI)")
	fs.IntVar(&f.parallel, "parallel", 10, "how many nodes to launch and join at once")
	fs.IntVar(&f.maxRounds, "max-rounds", 50, "give up (exit 3) after this many rounds")
	fs.BoolVar(&f.json, "json", false, "print every progress event and the result as one JSON object per line")
}

// check refuses what cannot work before anything is loaded or locked.
func (f *applyFlags) check(deps Deps, verb string) error {
	if f.parallel < 1 {
		return fmt.Errorf("--parallel %d: must be at least 1", f.parallel)
	}
	if f.maxRounds < 1 {
		return fmt.Errorf("--max-rounds %d: must be at least 1", f.maxRounds)
	}
	if f.watch && !f.autoApprove {
		return errors.New("--watch applies again and again without asking: pass --auto-approve too")
	}
	if f.watch && f.interval <= 0 {
		return fmt.Errorf("--interval %s: must be positive", f.interval)
	}
	if f.planFile != "" {
		return nil // a saved plan was reviewed: no confirmation
	}
	if !f.autoApprove && !deps.isTerminal(deps.In) {
		return fmt.Errorf("%s needs confirmation but stdin is not a terminal: pass --auto-approve (or set %s=true) to %s without asking, as in cron and CI",
			verb, envName("auto-approve"), verb)
	}
	return nil
}

// safetyFlags lift the loop's refusals; apply and plan share them, so
// that plan shows what such an apply would do (destroy takes
// --forget-missing).
type safetyFlags struct {
	allowDestroy    bool
	rebuildPlatform bool
	forgetMissing   bool
}

func (f *safetyFlags) register(fs *pflag.FlagSet) {
	fs.BoolVar(&f.allowDestroy, "allow-destroy", false,
		"let a cluster.json that wants no node at all remove every node, the last master too (without it such an apply is refused: use transit destroy)")
	fs.BoolVar(&f.rebuildPlatform, "rebuild-platform", false,
		"initialise a new platform over the nodes when the platform was lost (no master is left); workloads and platform state are not recovered")
	registerForgetMissing(fs, &f.forgetMissing)
}

func registerForgetMissing(fs *pflag.FlagSet, v *bool) {
	fs.BoolVar(v, "forget-missing", false,
		"believe listings that lack machines transit expects (a district whose machines all vanished, a machine this run launched, a ready member no listing shows): forget and replace them; without it such a listing is not acted on (exit 3)")
}

// change is what an apply asks for: apply or destroy, and how to confirm
// it.
type change struct {
	verb    string // "apply" or "destroy"
	destroy bool   // tear the cluster down (Session.Destroy): the platform is not asked
	// rotate are the nodes whose mesh keys rotate now (transit mesh
	// rotate); rotateAll every node's.
	rotate    []string
	rotateAll bool
	confirm   func(districts.Cluster) prompt
	// autoscale decides autoscaled quantities first, without the lock
	// (Session.DecideAutoscale), then applies them (Session.Autoscale).
	autoscale bool
}

// prompt is a confirmation question and the only answer that accepts it.
type prompt struct {
	question string
	answer   string
}

var applyChange = change{
	verb: "apply",
	confirm: func(districts.Cluster) prompt {
		return prompt{
			question: "Do you want to perform these actions? Only 'yes' will be accepted:",
			answer:   "yes",
		}
	},
}

// NewApplyCommand builds `transit apply`.
func NewApplyCommand(deps Deps, g *GlobalFlags) *cobra.Command {
	f := &applyFlags{}
	cmd := &cobra.Command{
		Use:   "apply [FILE]",
		Short: "Change the cluster until it matches cluster.json",
		Long: `Apply takes the state lock, asks the clouds and the platform for the current
state, shows the plan, asks for confirmation (on a terminal; pass
--auto-approve elsewhere) and runs the control loop until the cluster matches
cluster.json or a round makes no progress. The state is saved to
resources.json after every action.

With --json it prints one JSON object per line (format_version 2): the plan,
every event of the loop, and always a last "result" line, also when the run
fails before the loop starts.

SIGINT or SIGTERM stops the loop: the actions under way end, the state is
saved and apply exits 130 naming what is left undone; a second signal quits
at once.

An apply whose cluster.json wants no node at all is refused (exit 1): use
transit destroy to tear a cluster down, or pass --allow-destroy. When the
platform was lost (every master gone while workers remain) the run stops not
converged; --rebuild-platform initialises a new platform over the nodes
instead (what ran on the old one is not recovered).

Exit codes: 0 converged, 1 error, 3 not converged (the reasons are printed;
the next run retries), 130 interrupted (the state is saved; run apply again
to finish).

With --watch it applies again every --interval, re-reading cluster.json each
time, until interrupted; an iteration's errors are reported and the loop goes
on. An interruption between two applies (or before one changed anything) ends
it with exit 0; one during an apply's loop exits 130.

With FILE, a plan saved by transit plan --out FILE, it runs exactly that
plan without asking (it was reviewed; no --auto-approve needed), and
refuses (exit 1, stale_plan, nothing done) if the plan was made for
another cluster, if the state, cluster.json or districts.json changed
since, or if the first round would do other actions (the clouds moved).
The plan fixes --allow-destroy, --rebuild-platform and --forget-missing;
they and --watch are refused with FILE.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				f.planFile = args[0]
				for _, name := range []string{"watch", "allow-destroy", "rebuild-platform", "forget-missing"} {
					if cmd.Flags().Changed(name) {
						view, err := newProgress(deps, g, f.json, "apply")
						if err != nil {
							return err
						}
						return view.result(control.Result{}, withKind(kindUsage, fmt.Errorf("--%s (or %s) with a saved plan: the plan fixes what apply does; make a new plan with it", name, envName(name))))
					}
				}
			}
			return runChange(cmd.Context(), deps, g, f, applyChange)
		},
	}
	f.register(cmd.Flags())
	cmd.Flags().BoolVar(&f.watch, "watch", false, "apply again every --interval until interrupted (needs --auto-approve)")
	cmd.Flags().DurationVar(&f.interval, "interval", 5*time.Minute, "time between two applies with --watch")
	f.safety.register(cmd.Flags())
	return cmd
}

// runChange runs apply or destroy: once, or with --watch again and again.
// Every run ends with its result in the view, also one that fails before
// anything is loaded.
func runChange(ctx context.Context, deps Deps, g *GlobalFlags, f *applyFlags, ch change) error {
	view, err := newProgress(deps, g, f.json, ch.verb)
	if err != nil {
		return err
	}
	if err := f.check(deps, ch.verb); err != nil {
		return view.result(control.Result{}, withKind(kindUsage, err))
	}
	if f.watch {
		return watch(ctx, deps, g, f, ch, view)
	}
	return applyOnce(ctx, deps, g, f, ch, view)
}

// applyOnce runs one apply or destroy and shows how it ended.
func applyOnce(ctx context.Context, deps Deps, g *GlobalFlags, f *applyFlags, ch change, view *progress) error {
	res, err := runOnce(ctx, deps, g, f, ch, view)
	return view.result(res, explain(err, res, ch.verb))
}

// runOnce opens the cluster to change it, shows the plan, has it confirmed
// and runs the loop.
func runOnce(ctx context.Context, deps Deps, g *GlobalFlags, f *applyFlags, ch change, view *progress) (_ control.Result, err error) {
	var saved transit.SavedPlan
	if f.planFile != "" {
		if saved, err = transit.ReadSavedPlan(f.planFile); err != nil {
			return control.Result{}, err
		}
	}
	if ch.autoscale {
		return autoscaleOnce(ctx, deps, g, f, ch, view)
	}
	o, err := g.sessionOptions(deps, transit.Change, "transit "+ch.verb)
	if err != nil {
		return control.Result{}, err
	}
	s, err := transit.Open(ctx, o)
	if err != nil {
		return control.Result{}, err
	}
	defer closeInto(s, &err)
	if f.planFile != "" {
		if err := view.plan(shownSaved(saved)); err != nil {
			return control.Result{}, err
		}
		res, err := s.ApplySaved(ctx, saved, transit.ApplyOptions{Parallel: f.parallel, MaxRounds: f.maxRounds, OnEvent: view.event})
		if err != nil && errors.Is(err, context.Canceled) && res.Rounds > 0 {
			err = &interruptedError{verb: ch.verb, left: res.Left, err: err}
		}
		return res, err
	}
	ao := applyOptions(deps, s, f, ch, view)
	run := s.Apply
	if ch.destroy {
		run = s.Destroy
	}
	res, err := run(ctx, ao)
	// A loop that ran saved what it did before it stopped.
	if err != nil && errors.Is(err, context.Canceled) && res.Rounds > 0 {
		err = &interruptedError{verb: ch.verb, left: res.Left, err: err}
	}
	return res, err
}

// applyOptions are how apply, destroy and autoscale run the loop in s:
// the plan shown, confirmed unless --auto-approve, the events shown.
func applyOptions(deps Deps, s *transit.Session, f *applyFlags, ch change, view *progress) transit.ApplyOptions {
	ao := transit.ApplyOptions{
		Parallel:        f.parallel,
		MaxRounds:       f.maxRounds,
		AllowDestroy:    f.safety.allowDestroy,
		RebuildPlatform: f.safety.rebuildPlatform,
		ForgetMissing:   f.safety.forgetMissing,
		RotateKeys:      ch.rotate,
		RotateAllKeys:   ch.rotateAll,
		OnPlan: func(p control.Plan) error {
			shown := showPlan(deps, s, p, true)
			shown.destroy = ch.destroy
			return view.plan(shown)
		},
		OnEvent: view.event,
	}
	if !f.autoApprove {
		ao.Confirm = func(ctx context.Context, _ control.Plan) error {
			w := deps.Out
			if f.json {
				w = deps.Err // keep stdout JSON only
			}
			return confirm(ctx, deps.In, w, ch.confirm(s.Config().Cluster))
		}
	}
	return ao
}

// staleDecisions bounds how often one autoscale run decides again because
// another run changed the state between its decision and its apply.
const staleDecisions = 3

// autoscaleOnce decides without the lock (reading the platform takes
// seconds to minutes: an Observe session), then takes it only to record
// and apply the decision; one another run made stale meanwhile is made
// again.
func autoscaleOnce(ctx context.Context, deps Deps, g *GlobalFlags, f *applyFlags, ch change, view *progress) (control.Result, error) {
	for attempt := 1; ; attempt++ {
		d, err := decideAutoscale(ctx, deps, g)
		if err != nil {
			return control.Result{}, err
		}
		view.autoscale(d.Report)
		if f.dryRun {
			return control.Result{}, nil
		}
		res, err := applyAutoscale(ctx, deps, g, f, ch, view, d)
		if !errors.Is(err, transit.ErrStaleDecision) || attempt == staleDecisions {
			if err != nil && errors.Is(err, context.Canceled) && res.Rounds > 0 {
				err = &interruptedError{verb: ch.verb, left: res.Left, err: err}
			}
			return res, err
		}
		if logger, lerr := g.logger(deps.Err); lerr == nil {
			logger.Warn("another run changed the state while autoscale decided; deciding again", "attempt", attempt, "err", err)
		}
	}
}

func decideAutoscale(ctx context.Context, deps Deps, g *GlobalFlags) (transit.AutoscaleDecision, error) {
	return autoscaleSession(ctx, deps, g, transit.Observe, func(s *transit.Session) (transit.AutoscaleDecision, error) {
		return s.DecideAutoscale(ctx)
	})
}

func applyAutoscale(ctx context.Context, deps Deps, g *GlobalFlags, f *applyFlags, ch change, view *progress, d transit.AutoscaleDecision) (control.Result, error) {
	return autoscaleSession(ctx, deps, g, transit.Change, func(s *transit.Session) (control.Result, error) {
		return s.Autoscale(ctx, d, transit.AutoscaleOptions{Apply: applyOptions(deps, s, f, ch, view)})
	})
}

// autoscaleSession runs f in a session of transit autoscale opened with access
// a, closed after it (its lock, if any, freed).
func autoscaleSession[T any](ctx context.Context, deps Deps, g *GlobalFlags, a transit.Access, f func(*transit.Session) (T, error)) (_ T, err error) {
	var zero T
	o, err := g.sessionOptions(deps, a, "transit autoscale")
	if err != nil {
		return zero, err
	}
	s, err := transit.Open(ctx, o)
	if err != nil {
		return zero, err
	}
	defer closeInto(s, &err)
	return f(s)
}

// watch applies every interval until ctx ends. Ending between two applies,
// or before an apply changed anything, is success; an apply interrupted in
// its loop exits 130.
func watch(ctx context.Context, deps Deps, g *GlobalFlags, f *applyFlags, ch change, view *progress) error {
	logger, err := g.logger(deps.Err)
	if err != nil {
		return err
	}
	for i := 1; ; i++ {
		err := applyOnce(ctx, deps, g, f, ch, view)
		if ctx.Err() != nil {
			if _, ok := errors.AsType[*interruptedError](err); ok {
				return err
			}
			return nil
		}
		if err != nil {
			logger.Error(ch.verb+" failed; the next iteration retries", "iteration", i, "next_in", f.interval, "err", err)
		}
		if deps.clock().Sleep(ctx, f.interval) != nil {
			return nil
		}
	}
}

// confirm asks p.question on w and reads one line from in.
func confirm(ctx context.Context, in io.Reader, w io.Writer, p prompt) error {
	if _, err := fmt.Fprintf(w, "\n%s\n  Enter a value: ", p.question); err != nil {
		return err
	}
	type answer struct {
		line string
		err  error
	}
	// A read cannot be interrupted; on ctx's end the reader is abandoned
	// and the command returns.
	got := make(chan answer, 1)
	go func() {
		line, err := bufio.NewReader(in).ReadString('\n')
		got <- answer{line, err}
	}()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case a := <-got:
		fmt.Fprintln(w)
		if strings.TrimSpace(a.line) == p.answer {
			return nil
		}
		if a.err != nil && a.line == "" {
			return fmt.Errorf("no answer: %w", a.err)
		}
		return fmt.Errorf("the answer was %q, not %q", strings.TrimSpace(a.line), p.answer)
	}
}
