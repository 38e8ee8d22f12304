package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cloudtransit/transit"
	"github.com/cloudtransit/transit/control"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

type statusFlags struct {
	refresh bool
	json    bool
}

// NewStatusCommand builds `transit status`.
func NewStatusCommand(deps Deps, g *GlobalFlags) *cobra.Command {
	f := &statusFlags{}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the cluster's nodes and security groups",
		Long: `Status asks the clouds and the platform for the current state and prints the
nodes by district and role, with their phase, flavor, addresses and tags, and
each district's security group. It takes no lock and writes nothing
(resources.json is left as it is), so it runs while an apply holds the lock.

When the platform cannot be asked (no master answers), status still prints
the machines the clouds report, with the phases resources.json last recorded,
and a line saying the platform is unreachable and why.

With --refresh=false it prints resources.json as it is and calls no cloud.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := runStatus(cmd.Context(), deps, g, f.refresh)
			if err != nil {
				return err
			}
			if f.json {
				return writeJSON(deps.Out, newStatusJSON(st, deps.clock().Now()))
			}
			return writeStatus(deps.Out, st)
		},
	}
	cmd.Flags().BoolVar(&f.refresh, "refresh", true, "refresh the state from the clouds first (false: print resources.json, call no cloud)")
	cmd.Flags().BoolVar(&f.json, "json", false, "print the state (as in resources.json) and what the refresh found as JSON")
	return cmd
}

type shownStatus struct {
	res       districts.Resources
	cluster   districts.Cluster
	order     []string
	refreshed bool
	notes     []string // what the refresh found: adopted and forgotten nodes
	// platformError says why the platform could not be asked; the
	// nodes' phases are then those resources.json last recorded.
	platformError string
	// version is the platform's version as it reports it ("" when it
	// cannot say).
	version string
	// addons say whether each addon serves (none when not asked).
	addons []provider.AddonStatus
	// bill is what the live machines cost; nil when nothing is priced.
	bill *control.Bill
}

// runStatus reads the state, and with refresh asks the clouds and the
// platform. It takes no lock and writes nothing.
func runStatus(ctx context.Context, deps Deps, g *GlobalFlags, refresh bool) (_ shownStatus, err error) {
	access := transit.ReadState
	if refresh {
		access = transit.Observe
	}
	o, err := g.sessionOptions(deps, access, "transit status")
	if err != nil {
		return shownStatus{}, err
	}
	s, err := transit.Open(ctx, o)
	if err != nil {
		return shownStatus{}, err
	}
	defer closeInto(s, &err)
	st, err := s.Status(ctx, transit.StatusOptions{Refresh: refresh})
	if err != nil {
		return shownStatus{}, err
	}
	return shownStatus{res: st.State, cluster: st.Cluster, order: districtOrder(s), refreshed: st.Refreshed,
		notes: st.Notes, platformError: st.PlatformError, version: st.PlatformVersion, addons: st.Addons, bill: st.Bill}, nil
}

// writeStatus prints the nodes grouped by district and role.
func writeStatus(w io.Writer, st shownStatus) error {
	var b bytes.Buffer
	r := st.res
	fmt.Fprintf(&b, "Cluster %q (%s): %s and %s", st.cluster.ID, st.cluster.Platform,
		plural(len(r.Nodes), "node"), plural(len(r.SecurityGroups), "security group"))
	if r.Serial > 0 || !r.UpdatedAt.IsZero() {
		fmt.Fprintf(&b, "; state serial %d", r.Serial)
		if !r.UpdatedAt.IsZero() {
			fmt.Fprintf(&b, ", updated %s", r.UpdatedAt.UTC().Format(time.RFC3339))
		}
	}
	b.WriteString(".\n")
	if st.version != "" {
		fmt.Fprintf(&b, "Platform version %s, as its control plane reports it.\n", st.version)
	}
	if !st.refreshed {
		b.WriteString("Note: --refresh=false: this is resources.json as saved; no cloud was asked.\n")
	}

	if st.platformError != "" {
		reason := strings.TrimPrefix(st.platformError, "platform unreachable: ")
		fmt.Fprintf(&b, "Platform unreachable: %s\n", reason)
		b.WriteString("Note: the machines are those the clouds report now; their phases are those resources.json last recorded.\n")
	}
	for _, n := range st.notes {
		fmt.Fprintf(&b, "Note: %s\n", n)
	}
	for _, a := range st.addons {
		if a.Ready {
			fmt.Fprintf(&b, "Addon %s: serving.\n", a.Name)
		} else {
			fmt.Fprintf(&b, "Addon %s: not serving: %s\n", a.Name, a.Message)
		}
	}

	var keys []string
	for _, n := range r.Nodes {
		keys = append(keys, n.District)
	}
	for _, g := range r.SecurityGroups {
		keys = append(keys, g.District)
	}
	districtsShown := groupOrder(st.order, keys, func(s string) string { return s })

	// One set of column widths for the whole table.
	w1, w2, w3, w4 := 0, 0, 0, 0
	for _, n := range r.Nodes {
		w1 = max(w1, len(n.ID))
		w2 = max(w2, len(n.Phase))
		w3 = max(w3, len(n.Flavor))
		w4 = max(w4, len(addresses(n)))
	}
	districtCost := map[string]string{}
	if st.bill != nil {
		for _, d := range st.bill.Districts {
			districtCost[d.District] = fmt.Sprintf(" (%.4f %s an hour)", d.Hourly, st.bill.Currency)
		}
	}
	for _, d := range districtsShown {
		fmt.Fprintf(&b, "\n# district %s%s\n", d, districtCost[d])
		for _, g := range r.SecurityGroups {
			if g.District == d {
				fmt.Fprintf(&b, "  security group %s (%s): allows %s\n", g.ID, g.ProviderID, plural(len(g.Sources), "source"))
			}
		}
		byRole := map[string][]districts.Node{}
		for _, n := range r.Nodes {
			if n.District == d {
				byRole[n.Role] = append(byRole[n.Role], n)
			}
		}
		for _, role := range roleOrder(slices.Collect(maps.Keys(byRole))) {
			nodes := byRole[role]
			slices.SortFunc(nodes, func(a, b districts.Node) int { return districts.CompareNodeIDs(a.ID, b.ID) })
			fmt.Fprintf(&b, "  %s (%d)\n", role, len(nodes))
			for _, n := range nodes {
				line := fmt.Sprintf("    %-*s  %-*s  %-*s  %-*s  %s", w1, n.ID, w2, n.Phase, w3, n.Flavor, w4, addresses(n), tagList(n.Tags))
				b.WriteString(strings.TrimRight(line, " ") + "\n")
				if n.Message != "" {
					fmt.Fprintf(&b, "      %s\n", n.Message)
				}
			}
		}
	}
	if bill := st.bill; bill != nil {
		fmt.Fprintf(&b, "\nCost: %.4f %s an hour, %.2f a month of %d hours, for the live machines.\n", bill.Hourly, bill.Currency, bill.Hourly*districts.HoursPerMonth, districts.HoursPerMonth)
		if len(bill.Unpriced) > 0 {
			fmt.Fprintf(&b, "  ! unpriced, counted as nothing: %s\n", strings.Join(bill.Unpriced, ", "))
		}
	}
	_, err := w.Write(b.Bytes())
	return err
}

// roleOrder puts masters first, workers second, other roles by name.
func roleOrder(roles []string) []string {
	rank := func(r string) int {
		switch r {
		case districts.RoleMaster:
			return 0
		case districts.RoleWorker:
			return 1
		}
		return 2
	}
	slices.SortFunc(roles, func(a, b string) int {
		if d := rank(a) - rank(b); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	return roles
}

func addresses(n districts.Node) string {
	pub, priv := n.PublicIP, n.PrivateIP
	if pub == "" {
		pub = "-"
	}
	if priv == "" {
		priv = "-"
	}
	return pub + " / " + priv
}

func tagList(tags map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		parts = append(parts, k+"="+tags[k])
	}
	return strings.Join(parts, " ")
}
