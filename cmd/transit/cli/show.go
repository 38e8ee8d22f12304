package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/cloudtransit/transit"
)

// NewShowCommand builds `transit show FILE`.
func NewShowCommand(deps Deps, g *GlobalFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show FILE",
		Short: "Print a plan saved with transit plan -out",
		Long: `Show prints a plan file as transit plan printed the plan, after what it was
made from: the cluster, the state's serial, when. With --json it prints the
whole file's content as one JSON object. It reads the configuration for the
districts' order; no cloud, no lock.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			sp, err := transit.ReadSavedPlan(args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(deps.Out, sp)
			}
			o, err := g.sessionOptions(deps, transit.ReadState, "transit show")
			if err != nil {
				return err
			}
			s, err := transit.Open(cmd.Context(), o)
			if err != nil {
				return err
			}
			defer closeInto(s, &err)
			if _, err := fmt.Fprintf(deps.Out, "Saved plan for cluster %s, made %s from %s at serial %d.\n\n",
				sp.Cluster, sp.Made.Format("2006-01-02 15:04:05 UTC"), sp.State.Location, sp.State.Serial); err != nil {
				return err
			}
			shown := showPlan(deps, s, sp.Plan, sp.Refreshed)
			shown.made = sp.Made
			return writePlan(deps.Out, shown)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the plan file as JSON")
	return cmd
}
