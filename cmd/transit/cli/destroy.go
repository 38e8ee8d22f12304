package cli

import (
	"fmt"
	"slices"

	"github.com/spf13/cobra"

	"github.com/cloudtransit/transit/districts"
)

var destroyChange = change{
	verb:    "destroy",
	destroy: true,
	intend: func(c districts.Cluster) districts.Cluster {
		c.Deployments = slices.Clone(c.Deployments)
		for i := range c.Deployments {
			c.Deployments[i].Quantity = 0
		}
		return c
	},
	confirm: func(c districts.Cluster) prompt {
		return prompt{
			question: fmt.Sprintf("Do you really want to destroy cluster %q? Every node transit created for it will be\n"+
				"drained, removed from the platform and terminated, and its security groups deleted.\n"+
				"There is no undo. Only the cluster id %q will be accepted:", c.ID, c.ID),
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
		Long: `Destroy applies cluster.json with every deployment's quantity set to 0: nodes
are drained, removed and terminated with the same safety rules as apply, and
the emptied districts' security groups are deleted. On a terminal it asks you
to type the cluster id; pass --auto-approve elsewhere.

Exit codes: 0 done, 1 error, 3 not converged (a drain was refused, say).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.check(deps, "destroy"); err != nil {
				return err
			}
			return applyOnce(cmd.Context(), deps, g, f, destroyChange)
		},
	}
	f.register(cmd.Flags())
	return cmd
}
