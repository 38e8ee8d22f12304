package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/cloudtransit/transit/districts"
)

var destroyChange = change{
	verb:    "destroy",
	destroy: true,
	confirm: func(c districts.Cluster) prompt {
		return prompt{
			question: fmt.Sprintf("Do you really want to destroy cluster %q? Every machine transit created for it\n"+
				"will be terminated, without draining: the platform and its workloads go away with them.\n"+
				"Then its security groups are deleted. There is no undo. Only the cluster id %q will be accepted:", c.ID, c.ID),
			answer: c.ID,
		}
	},
}

// NewDestroyCommand builds `transit destroy`.
func NewDestroyCommand(deps Deps, g *GlobalFlags) *cobra.Command {
	f := &applyFlags{}
	cmd := &cobra.Command{
		Use:   "destroy",
		Short: "Remove every node and security group of the cluster",
		Long: `Destroy tears the cluster down: it terminates every machine transit created
for the cluster (found by transit's identity tags, in parallel) and deletes
each district's security group once its machines are gone. Nothing is
drained or removed from the platform first: the platform and its workloads
go away with the machines. Destroy never asks the platform, so it works when
the masters are unreachable. cluster.json is not changed.

It takes the state lock and saves resources.json after every action, like
apply. On a terminal it asks you to type the cluster id; pass --auto-approve
elsewhere.

Exit codes: 0 done, 1 error, 3 not converged (a cloud refused to terminate a
machine, say; the next run retries), 130 interrupted.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runChange(cmd.Context(), deps, g, f, destroyChange)
		},
	}
	f.register(cmd.Flags())
	registerForgetMissing(cmd.Flags(), &f.safety.forgetMissing)
	return cmd
}
