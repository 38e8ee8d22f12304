package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cloudtransit/transit"
)

// NewShowCommand builds `transit show FILE`.
func NewShowCommand(deps Deps, _ *GlobalFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show FILE",
		Short: "Print a plan saved with transit plan --out",
		Long: `Show prints a plan file as transit plan printed the plan, after what it was
made from: the cluster, the state (location, serial, lineage, hash), the
hashes of cluster.json and districts.json, the options, when and by which
transit. With --json it prints one JSON object (type "saved_plan") whose
"plan" is the object plan --json printed. It needs only the file: no
configuration, no state, no cloud, no lock.`,
		Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			sp, err := transit.ReadSavedPlan(args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(deps.Out, newSavedPlanJSON(args[0], sp))
			}
			if err := writeSavedHeader(deps.Out, args[0], sp); err != nil {
				return err
			}
			return writePlan(deps.Out, shownSaved(sp))
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the saved plan as one JSON object")
	return cmd
}

// shownSaved is a saved plan as its views show it.
func shownSaved(sp transit.SavedPlan) shownPlan {
	return shownPlan{plan: sp.Plan, made: sp.Made, platform: sp.Platform, order: sp.Districts, refreshed: sp.Refreshed, destroy: sp.Options.Destroy}
}

// writeSavedHeader says what a saved plan was made from.
func writeSavedHeader(w io.Writer, file string, sp transit.SavedPlan) error {
	var b strings.Builder
	what := "Saved plan"
	if sp.Options.Destroy {
		what = "Saved teardown plan"
	}
	fmt.Fprintf(&b, "%s %s for cluster %s, made %s by transit %s from:\n", what, file, sp.Cluster, sp.Made.UTC().Format("2006-01-02 15:04:05 UTC"), orDash(sp.Transit))
	st := sp.State
	if st.SHA256 == transit.SavedNoState {
		fmt.Fprintf(&b, "  state           %s: no state yet\n", st.Location)
	} else {
		fmt.Fprintf(&b, "  state           %s: serial %d, lineage %s, sha256 %s\n", st.Location, st.Serial, orDash(st.Lineage), st.SHA256)
	}
	for _, label := range []string{"cluster.json", "districts.json"} {
		fmt.Fprintf(&b, "  %-15s sha256 %s\n", label, sp.Inputs[label])
	}
	var opts []string
	for _, o := range []struct {
		on   bool
		flag string
	}{{sp.Options.AllowDestroy, "--allow-destroy"}, {sp.Options.RebuildPlatform, "--rebuild-platform"}, {sp.Options.ForgetMissing, "--forget-missing"}} {
		if o.on {
			opts = append(opts, o.flag)
		}
	}
	if len(opts) == 0 {
		opts = []string{"none"}
	}
	fmt.Fprintf(&b, "  %-15s %s\n", "options", strings.Join(opts, " "))
	fmt.Fprintf(&b, "transit apply %s runs exactly this plan, and refuses if any of these or the clouds changed.\n\n", file)
	_, err := io.WriteString(w, b.String())
	return err
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
