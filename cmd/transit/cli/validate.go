package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/cloudtransit/transit"
	"github.com/cloudtransit/transit/districts"
)

// NewValidateCommand builds `transit validate`.
func NewValidateCommand(deps Deps, g *GlobalFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "validate",
		Short: "Check cluster.json, districts.json and credentials.json",
		Long: `Validate reads cluster.json, districts.json and credentials.json strictly and
checks them together. It reports every problem at once, each with its file and
JSON path, and exits 1 if there is any. It calls no cloud and reads no state.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			cfg, err := transit.LoadConfig(g.paths())
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(deps.Out, validSummary(cfg.Cluster))
			return err
		},
	}
}

func validSummary(c districts.Cluster) string {
	nodes := 0
	used := map[string]bool{}
	for _, d := range c.Deployments {
		nodes += d.Quantity
		used[d.District] = true
	}
	return fmt.Sprintf("configuration is valid: %s, %s in %s",
		plural(len(c.Deployments), "deployment"), plural(nodes, "node"), plural(len(used), "district"))
}

func plural(n int, word string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, word)
	}
	return fmt.Sprintf("%d %ss", n, word)
}
