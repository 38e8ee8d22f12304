package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/cloudtransit/transit"
	"github.com/cloudtransit/transit/control"
)

type planFlags struct {
	out              string
	refresh          bool
	detailedExitcode bool
	json             bool
	safety           safetyFlags
}

// NewPlanCommand builds `transit plan`.
func NewPlanCommand(deps Deps, g *GlobalFlags) *cobra.Command {
	f := &planFlags{}
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Show what apply would do",
		Long: `Plan asks the clouds and the platform for the current state and prints the
actions the next apply round would take: + adds, ~ changes, - removes. It
takes no lock and writes nothing (resources.json is left as it is), so it
runs while an apply holds the lock. With --refresh=false it works from
resources.json alone and calls no cloud.

--allow-destroy and --rebuild-platform show what an apply with those flags
would do; without them, removing every node of a cluster.json that wants none
and rebuilding a lost platform show under "Blocked".

With --detailed-exitcode it exits 2 when the plan has actions, 0 when it has
none (also when it only waits, or shows blocked items) and 1 on error.

When flavors are priced (hourly_price in districts.json, or prices.json) it
shows what each launch and termination adds or takes away an hour and what
the cluster costs now and after. A plan whose cluster would cost more than
cluster.json's budget is shown, not saved, and exits 1 (over_budget): apply
would refuse it.

With --json it prints the plan as one JSON object (format_version 2), the same
object apply --json prints first.

With --out FILE (Terraform's -out is accepted too) it also writes the plan with what it was made from (the
state's serial and a hash of it, hashes of cluster.json and districts.json;
no secret) for transit apply FILE, which runs exactly that plan and refuses
(exit 1) if anything changed since; transit show FILE prints it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := runPlan(cmd.Context(), deps, g, f)
			if err != nil {
				return err
			}
			if err := f.render(deps.Out, p); err != nil {
				return err
			}
			if err := p.plan.Cost.Refusal(); err != nil {
				return err
			}
			// Waiting and blocked items are no changes: apply would
			// not act on them.
			if f.detailedExitcode && len(p.plan.Actions) > 0 {
				return &CodeError{Code: ExitChanges}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&f.refresh, "refresh", true, "refresh the state from the clouds first (false: use resources.json alone, call no cloud)")
	cmd.Flags().BoolVar(&f.detailedExitcode, "detailed-exitcode", false, "exit 2 when the plan has actions, 0 when it has none, 1 on error")
	cmd.Flags().BoolVar(&f.json, "json", false, "print the plan as JSON")
	cmd.Flags().StringVar(&f.out, "out", "", "write the plan to this file: transit apply FILE runs exactly it (CI: plan on a pull request, apply the reviewed plan on merge)")
	f.safety.register(cmd.Flags())
	return cmd
}

// shownPlan is a plan with what its views need to know about how it was made.
type shownPlan struct {
	plan      control.Plan
	made      time.Time
	platform  string
	order     []string // district ids in districts.json order
	refreshed bool
	destroy   bool // the plan removes the whole cluster
}

// runPlan makes the plan of the next round. It takes no lock and writes
// nothing: with refresh the drivers ask the clouds and the platform, and
// what they say stays in memory.
func runPlan(ctx context.Context, deps Deps, g *GlobalFlags, f *planFlags) (_ shownPlan, err error) {
	access := transit.ReadState
	if f.refresh {
		access = transit.Observe
	}
	o, err := g.sessionOptions(deps, access, "transit plan")
	if err != nil {
		return shownPlan{}, err
	}
	s, err := transit.Open(ctx, o)
	if err != nil {
		return shownPlan{}, err
	}
	defer closeInto(s, &err)
	po := transit.PlanOptions{
		Refresh:         f.refresh,
		AllowDestroy:    f.safety.allowDestroy,
		RebuildPlatform: f.safety.rebuildPlatform,
		ForgetMissing:   f.safety.forgetMissing,
	}
	p, err := s.Plan(ctx, po)
	if err != nil {
		return shownPlan{}, err
	}
	// A plan the budget refuses is shown, never saved: apply would
	// refuse it.
	if f.out != "" && p.Cost.Refusal() == nil {
		if err := transit.WriteSavedPlan(f.out, s.SavePlan(p, po, BuildVersion().Version)); err != nil {
			return shownPlan{}, err
		}
		// stderr: plan --json keeps stdout one JSON object.
		if _, err := fmt.Fprintf(deps.Err, "Saved the plan to %s: `transit apply %s` runs exactly it, or refuses if the state, the configuration or the clouds changed.\n", f.out, f.out); err != nil {
			return shownPlan{}, err
		}
	}
	return showPlan(deps, s, p, f.refresh), nil
}

// showPlan is p with what its views need to know.
func showPlan(deps Deps, s *transit.Session, p control.Plan, refreshed bool) shownPlan {
	return shownPlan{plan: p, made: deps.clock().Now(), platform: s.Config().Cluster.Platform, order: districtOrder(s), refreshed: refreshed}
}

func (f *planFlags) render(w io.Writer, p shownPlan) error {
	if f.json {
		return writeJSON(w, newPlanJSON(p.plan, 0, p.made, p.refreshed))
	}
	return writePlan(w, p)
}
