package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/cloudtransit/transit"
)

var autoscaleChange = change{verb: "autoscale", autoscale: true}

// NewAutoscaleCommand builds `transit autoscale`.
func NewAutoscaleCommand(deps Deps, g *GlobalFlags) *cobra.Command {
	f := &applyFlags{}
	cmd := &cobra.Command{
		Use:   "autoscale",
		Short: "Scale autoscaled deployments to what the platform's workloads ask for, and apply",
		Long: `Autoscale reads the platform without the state lock (Kubernetes: pods the
scheduler cannot place, and what runs on each node; Swarm: tasks pending for
lack of resources or a matching node) and decides each autoscaled deployment's
quantity within its bounds ("autoscale": {"min": 1, "max": 20} in
cluster.json):

  - workloads that fit no node go onto nodes asked for earlier that have not
    joined yet, else onto new nodes of the cheapest deployment whose flavor
    and labels fit them (deployments that "spread" share them);
  - a node whose workloads ask for less than autoscaler.utilization_threshold
    of it for autoscaler.scale_down_after, and whose workloads all move and
    fit on the nodes that stay, goes (never below min, never a master, never
    within autoscaler.scale_down_delay_after_add of a growth).

Then it takes the lock, records the decision and its reason in the state
(never in cluster.json: plan shows "autoscaled to N (min, max)") and applies
it like apply
--auto-approve: drains honour disruption budgets, and a growth cluster.json's
budget refuses is not kept (exit 1, over_budget). A workload no deployment
could ever fit is reported once.

A decision made from a state another run changed meanwhile is made again.
Run it from cron, or with --watch every --interval; the lock is held only
to record and apply. With --json it prints an "autoscale" line with the
decision, then apply's lines.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f.autoApprove = true // it decides: nobody is asked
			return runChange(cmd.Context(), deps, g, f, autoscaleChange)
		},
	}
	f.register(cmd.Flags())
	_ = cmd.Flags().MarkHidden("auto-approve")
	cmd.Flags().BoolVar(&f.watch, "watch", false, "decide and apply again every --interval until interrupted")
	cmd.Flags().DurationVar(&f.interval, "interval", time.Minute, "time between two runs with --watch")
	cmd.Flags().BoolVar(&f.dryRun, "dry-run", false, "decide and show the decision; write and change nothing")
	return cmd
}

// autoscaleText is the decision as lines for people.
func autoscaleText(r transit.AutoscaleReport) []string {
	var lines []string
	for _, p := range r.Problems {
		lines = append(lines, "! "+p)
	}
	if len(r.Decisions) == 0 {
		return append(lines, fmt.Sprintf("Autoscale: no change (%s pending, %s).", plural(r.Pending, "workload"), plural(r.Nodes, "node")))
	}
	for _, d := range r.Decisions {
		line := fmt.Sprintf("Autoscale: %s %d → %d: %s", d.Key, d.From, d.To, d.Reason)
		lines = append(lines, line)
	}
	return lines
}
