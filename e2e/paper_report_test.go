package e2e

import (
	"bytes"
	"fmt"
	"html"
	"io"
	"math"
	"strings"
	"text/tabwriter"
)

// paperRow is one experiment's outcome, in real (unscaled) seconds: the
// run's wall times divided back by the profile's scale where they are the
// cloud's, kept where they are the platform's (see realSeconds).
type paperRow struct {
	Platform   string  `json:"platform"`   // swarm, kubernetes
	Experiment string  `json:"experiment"` // E1 … E5
	Title      string  `json:"title"`
	Route      string  `json:"route"`      // "aws", "gce→aws"
	Makespan   float64 `json:"makespan_s"` // transit, from the command's start to its exit
	Paper      float64 `json:"paper_s,omitempty"`
	Bound      float64 `json:"lower_bound_s"` // the critical path under the same profile
	Ratio      float64 `json:"ratio"`         // makespan ÷ bound
	Target     float64 `json:"target_s,omitempty"`
	Pass       bool    `json:"pass"` // ratio ≤ maxRatio and within Target
	WallS      float64 `json:"wall_s"`
}

// maxRatio is the goal for every experiment's makespan ÷ lower bound.
const maxRatio = 1.05

// minRatio: a run cannot beat its own lower bound; one that seems to
// (beyond timer noise) shows the bound is wrong, and fails.
const minRatio = 0.99

// label is the row's title, with its platform when it is not the paper's.
func (r paperRow) label() string {
	if r.Platform == "kubernetes" {
		return r.Title + ", Kubernetes"
	}
	return r.Title
}

func (r *paperRow) judge() {
	r.Pass = r.Ratio >= minRatio && r.Ratio <= maxRatio && (r.Target == 0 || r.Makespan <= r.Target)
}

// writeTable prints the rows as the README shows them.
func writeTable(w io.Writer, rows []paperRow) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "experiment\troute\ttransit (s)\tpaper (s)\tlower bound (s)\tratio\ttarget\t\t")
	for _, r := range rows {
		paper, target := "–", "–"
		if r.Paper > 0 {
			paper = fmt.Sprintf("%.0f", r.Paper)
		}
		if r.Target > 0 {
			target = fmt.Sprintf("≤ %.0f s", r.Target)
		}
		verdict := "ok"
		if !r.Pass {
			verdict = "MISSED"
		}
		fmt.Fprintf(tw, "%s %s\t%s\t%.0f\t%s\t%.0f\t%.3f\t%s\t%s\t\n", r.Experiment, r.label(), r.Route, r.Makespan, paper, r.Bound, r.Ratio, target, verdict)
	}
	return tw.Flush()
}

// markdownTable is the table in the README's form.
func markdownTable(rows []paperRow) string {
	var b strings.Builder
	b.WriteString("| experiment | route | transit | paper | lower bound | ratio |\n|---|---|---:|---:|---:|---:|\n")
	for _, r := range rows {
		paper := "–"
		if r.Paper > 0 {
			paper = fmt.Sprintf("%.0f s", r.Paper)
		}
		fmt.Fprintf(&b, "| %s %s | %s | %.0f s | %s | %.0f s | %.3f |\n", r.Experiment, r.label(), r.Route, r.Makespan, paper, r.Bound, r.Ratio)
	}
	return b.String()
}

// svgChart draws transit's makespan beside the paper's number for each
// experiment (grouped horizontal bars, seconds).
func svgChart(rows []paperRow) []byte {
	const (
		left, right, top, barH, gap, width = 230, 70, 40, 12, 10, 760
	)
	maxS := 1.0
	for _, r := range rows {
		maxS = math.Max(maxS, math.Max(r.Makespan, r.Paper))
	}
	step := niceStep(maxS / 5)
	maxS = math.Ceil(maxS/step) * step
	plotW := float64(width - left - right)
	x := func(s float64) float64 { return left + s/maxS*plotW }
	height := top + len(rows)*(2*barH+gap) + 40

	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="%d" y="18" font-size="13" font-weight="bold">transit vs. Kratzke 2017 (seconds, 10 nodes, kratzke2017 latency profile)</text>`+"\n", left-220)
	fmt.Fprintf(&b, `<rect x="%d" y="26" width="10" height="8" fill="#2b6cb0"/><text x="%d" y="34">transit</text>`, left, left+14)
	fmt.Fprintf(&b, `<rect x="%d" y="26" width="10" height="8" fill="#c05621"/><text x="%d" y="34">paper</text>`+"\n", left+70, left+84)
	axisY := top + len(rows)*(2*barH+gap)
	for s := 0.0; s <= maxS+1e-9; s += step {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/><text x="%.1f" y="%d" text-anchor="middle">%.0f</text>`+"\n",
			x(s), top-4, x(s), axisY, x(s), axisY+14, s)
	}
	for i, r := range rows {
		y := top + i*(2*barH+gap)
		label := html.EscapeString(fmt.Sprintf("%s %s (%s)", r.Experiment, r.label(), r.Route))
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", left-6, y+barH+4, label)
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="#2b6cb0"/><text x="%.1f" y="%d">%.0f</text>`+"\n",
			left, y, x(r.Makespan)-left, barH, x(r.Makespan)+3, y+barH-2, r.Makespan)
		if r.Paper > 0 {
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="#c05621"/><text x="%.1f" y="%d">%.0f</text>`+"\n",
				left, y+barH, x(r.Paper)-left, barH, x(r.Paper)+3, y+2*barH-2, r.Paper)
		} else {
			fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#888">no number in the paper</text>`+"\n", left+3, y+2*barH-2)
		}
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">seconds</text>`+"\n", x(maxS/2), axisY+30)
	b.WriteString("</svg>\n")
	return b.Bytes()
}

// niceStep rounds a tick interval up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if raw <= m*p {
			return m * p
		}
	}
	return 10 * p
}
