package cli

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/cloudtransit/transit/control"
	"github.com/cloudtransit/transit/districts"
)

// writePlan prints a plan the way terraform does: a header, the actions
// grouped by district, what observation found, what only time fixes, what
// apply cannot do now, and a summary line.
func writePlan(w io.Writer, p shownPlan) error {
	var b bytes.Buffer
	pl := p.plan
	if !p.refreshed {
		b.WriteString("Note: --refresh=false: this plan is made from resources.json alone; no cloud was asked.\n\n")
	}
	if len(pl.Actions) > 0 {
		fmt.Fprintf(&b, "transit will perform the following actions on cluster %q (%s):\n", pl.Cluster, p.platform)
		b.WriteString("  + add   ~ change   - remove\n")
		writeActions(&b, pl.Actions, p.order)
		b.WriteString("\n")
	}
	writeNotes(&b, pl)
	writeCost(&b, pl.Cost)
	switch s := pl.Summary(); {
	case len(pl.Actions) > 0:
		fmt.Fprintf(&b, "Plan: %d to add, %d to change, %d to remove", s.Add, s.Change, s.Remove)
		if n := len(pl.Blocked); n > 0 {
			fmt.Fprintf(&b, "; %d blocked", n)
		}
		b.WriteString(".\n")
	case len(pl.Blocked) > 0:
		b.WriteString("No actions, but the cluster does not match cluster.json: what is blocked above is not done now, and apply would end not converged.\n")
	case len(pl.Waiting) > 0:
		b.WriteString("No actions: apply would wait for what is listed above.\n")
	case p.destroy:
		fmt.Fprintf(&b, "No changes. Cluster %q has no nodes or security groups left.\n", pl.Cluster)
	default:
		b.WriteString("No changes. The cluster matches cluster.json.\n")
	}
	_, err := w.Write(b.Bytes())
	return err
}

// writeNotes prints the plan's lists: notes and waits marked "-",
// warnings and blocked items "!".
func writeNotes(b *bytes.Buffer, p control.Plan) {
	for _, sec := range []struct {
		title string
		mark  string
		lines []string
	}{
		{"Notes", "-", p.Notes},
		{"Warnings (not fixed and not waited for)", "!", p.Warnings},
		{"Waiting", "-", p.Waiting},
		{"Blocked (differs from cluster.json, but will not be done now)", "!", p.Blocked},
	} {
		if len(sec.lines) == 0 {
			continue
		}
		fmt.Fprintf(b, "%s:\n", sec.title)
		for _, l := range sec.lines {
			fmt.Fprintf(b, "  %s %s\n", sec.mark, l)
		}
		b.WriteString("\n")
	}
}

// writeCost prints what the cluster costs now and after, per district,
// what it may cost while it changes, and the budget's verdict.
func writeCost(b *bytes.Buffer, c *control.Cost) {
	if c == nil {
		return
	}
	fmt.Fprintf(b, "Cost (%s an hour; a month is %d hours):\n", c.Currency, districts.HoursPerMonth)
	w := len("cluster")
	for _, d := range c.Districts {
		w = max(w, len(d.District))
	}
	fmt.Fprintf(b, "  %-*s  %10s  %10s\n", w, "", "now", "after")
	for _, d := range c.Districts {
		fmt.Fprintf(b, "  %-*s  %10.4f  %10.4f\n", w, d.District, d.Now, d.After)
	}
	fmt.Fprintf(b, "  %-*s  %10.4f  %10.4f\n", w, "cluster", c.Now, c.After)
	fmt.Fprintf(b, "  a month: %.2f now, %.2f after", c.Now*districts.HoursPerMonth, c.After*districts.HoursPerMonth)
	if c.Peak > max(c.Now, c.After) {
		fmt.Fprintf(b, "; up to %.4f an hour while it changes", c.Peak)
	}
	b.WriteString("\n")
	if len(c.Unpriced) > 0 {
		fmt.Fprintf(b, "  ! unpriced, counted as nothing: %s (set hourly_price in districts.json, or run transit prices)\n", strings.Join(c.Unpriced, ", "))
	}
	if bu := c.Budget; bu != nil {
		switch {
		case c.OverBudget != "":
			fmt.Fprintf(b, "  ! budget: apply refuses this plan: %s\n", c.OverBudget)
		case c.Now > bu.MaxHourly:
			fmt.Fprintf(b, "  ! budget: %.4f an hour (cluster.json), exceeded now; only growth is refused\n", bu.MaxHourly)
		default:
			fmt.Fprintf(b, "  budget: %.4f an hour (cluster.json): within\n", bu.MaxHourly)
		}
	}
	b.WriteString("\n")
}

// writeActions prints actions grouped by district, in the order of
// districts.json, each group keeping the plan's order.
func writeActions(b *bytes.Buffer, actions []control.Action, order []string) {
	kindW, targetW, detailW := 0, 0, 0
	for _, a := range actions {
		kindW = max(kindW, len(a.Kind))
		targetW = max(targetW, len(actionTarget(a)))
		detailW = max(detailW, len(actionDetails(a)))
	}
	for _, d := range groupOrder(order, actions, func(a control.Action) string { return a.District }) {
		if d == "" {
			b.WriteString("\n# cluster\n")
		} else {
			fmt.Fprintf(b, "\n# district %s\n", d)
		}
		for _, a := range actions {
			if a.District != d {
				continue
			}
			line := fmt.Sprintf("  %s %-*s  %-*s  %-*s", a.Kind.Symbol(), kindW, a.Kind, targetW, actionTarget(a), detailW, actionDetails(a))
			if why := actionReason(a); why != "" {
				line += " — " + why
			}
			b.WriteString(strings.TrimRight(line, " ") + "\n")
		}
	}
}

// actionLine is one action on one line without padding, for progress views.
func actionLine(a control.Action) string {
	parts := []string{string(a.Kind), actionTarget(a)}
	if d := actionDetails(a); d != "" {
		parts = append(parts, d)
	}
	return strings.Join(parts, " ")
}

func actionTarget(a control.Action) string {
	if a.Kind == control.KindMesh {
		return "mesh"
	}
	if a.Node != "" {
		return a.Node
	}
	if a.Group != "" {
		return a.Group
	}
	return a.District
}

func actionDetails(a control.Action) string {
	var parts []string
	if a.Role != "" {
		parts = append(parts, "role "+a.Role)
	}
	if a.Flavor != "" {
		parts = append(parts, "flavor "+a.Flavor)
	}
	if a.Hourly != nil {
		parts = append(parts, fmt.Sprintf("%+.4f/h", *a.Hourly))
	}
	if len(parts) == 0 {
		return ""
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// actionReason is why the action is planned and what it waits for.
func actionReason(a control.Action) string {
	var parts []string
	if a.Reason != "" {
		parts = append(parts, a.Reason)
	}
	switch n := len(a.After); {
	case n == 0:
	case n <= 3:
		parts = append(parts, "after "+strings.Join(a.After, ", "))
	default:
		parts = append(parts, fmt.Sprintf("after %d new nodes", n))
	}
	if a.KeepReady > 0 {
		parts = append(parts, fmt.Sprintf("once %d other %ss are ready", a.KeepReady, a.Role))
	}
	return strings.Join(parts, "; ")
}

// groupOrder returns the keys items fall into: those named in order first,
// in that order, then the others in the order they appear.
func groupOrder[T any](order []string, items []T, key func(T) string) []string {
	seen := map[string]bool{}
	for _, it := range items {
		seen[key(it)] = true
	}
	var out []string
	for _, k := range order {
		if seen[k] {
			out = append(out, k)
			delete(seen, k)
		}
	}
	for _, it := range items {
		if k := key(it); seen[k] {
			out = append(out, k)
			delete(seen, k)
		}
	}
	return slices.Clip(out)
}
