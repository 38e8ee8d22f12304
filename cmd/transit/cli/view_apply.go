package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cloudtransit/transit"
	"github.com/cloudtransit/transit/control"
)

// progress shows an apply as it happens: JSON lines with --json, a human
// view on a terminal, log lines otherwise. The control loop calls event from
// several goroutines.
type progress struct {
	mu   sync.Mutex
	out  io.Writer
	verb string
	now  func() time.Time

	json       *json.Encoder // one compact object per line
	tty        bool          // human view with a status line
	log        *slog.Logger  // plain log lines
	running    []string      // actions under way, for the status line
	statusLine bool          // a status line is on screen
	// writeErr is the first failed write of a JSON line; the loop goes
	// on (the state file is the record) and result reports it.
	writeErr error
}

func newProgress(deps Deps, g *GlobalFlags, asJSON bool, verb string) (*progress, error) {
	v := &progress{out: deps.Out, verb: verb, now: deps.clock().Now}
	switch {
	case asJSON:
		v.json = json.NewEncoder(deps.Out)
	case deps.isTerminal(deps.Out):
		v.tty = true
	default:
		logger, err := g.logger(deps.Out)
		if err != nil {
			return nil, err
		}
		v.log = logger
	}
	return v, nil
}

// plan shows the plan about to be applied.
func (v *progress) plan(p shownPlan) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.json != nil {
		return v.json.Encode(newPlanJSON(p.plan, 0, p.made, p.refreshed))
	}
	return writePlan(v.out, p)
}

// event shows one event of the control loop.
func (v *progress) event(e control.Event) {
	v.mu.Lock()
	defer v.mu.Unlock()
	switch {
	case v.json != nil:
		if line, ok := eventJSON(e); ok {
			v.encode(line)
		}
	case v.tty:
		v.ttyEvent(e)
	default:
		v.logEvent(e)
	}
}

func (v *progress) ttyEvent(e control.Event) {
	switch e.Type {
	case control.EventRound:
		if e.Phase == control.PhaseStart {
			v.println(fmt.Sprintf("\nRound %d%s", e.Round, suffix(": ", e.Message)))
		}
	case control.EventPlan:
		if e.Plan != nil && len(e.Plan.Actions) > 0 {
			s := e.Plan.Summary()
			v.println(fmt.Sprintf("  planned: %d to add, %d to change, %d to remove", s.Add, s.Change, s.Remove))
		}
	case control.EventAction:
		if e.Action == nil {
			return
		}
		line := actionLine(*e.Action)
		short := string(e.Action.Kind) + " " + actionTarget(*e.Action)
		switch e.Phase {
		case control.PhaseStart:
			v.running = append(v.running, short)
		case control.PhaseFinish, control.PhaseSkip:
			if i := slices.Index(v.running, short); i >= 0 {
				v.running = slices.Delete(v.running, i, i+1)
			}
			mark, what := "✓", ""
			switch {
			case e.Phase == control.PhaseSkip:
				mark, what = "–", " skipped: "+e.Error
			case e.Error != "":
				mark, what = "✗", ": "+e.Error
			}
			v.println(fmt.Sprintf("  %s %s  %s%s", mark, line, seconds(e.Seconds), what))
		}
	case control.EventWait:
		v.println("  … " + e.Message)
	case control.EventAddons:
		if e.Phase != control.PhaseFinish {
			return
		}
		switch {
		case e.Error != "":
			v.println(fmt.Sprintf("  ✗ addons  %s: %s", seconds(e.Seconds), e.Error))
		case e.Message == "":
			v.println(fmt.Sprintf("  ✓ addons up to date  %s", seconds(e.Seconds)))
		default:
			v.println(fmt.Sprintf("  ✓ addons: %s  %s", e.Message, seconds(e.Seconds)))
		}
	}
	v.status()
}

// println prints a line above the status line.
func (v *progress) println(line string) {
	v.clearStatus()
	fmt.Fprintln(v.out, line)
}

// status shows what is running on one line that the next print replaces.
func (v *progress) status() {
	v.clearStatus()
	if len(v.running) == 0 {
		return
	}
	line := fmt.Sprintf("  ⋯ %d running: %s", len(v.running), strings.Join(v.running, "; "))
	if r := []rune(line); len(r) > 100 {
		line = string(r[:99]) + "…"
	}
	fmt.Fprint(v.out, line)
	v.statusLine = true
}

func (v *progress) clearStatus() {
	if v.statusLine {
		fmt.Fprint(v.out, "\r\033[K")
		v.statusLine = false
	}
}

func (v *progress) logEvent(e control.Event) {
	switch e.Type {
	case control.EventRound:
		if e.Phase == control.PhaseStart {
			v.log.Info("round", "round", e.Round)
		}
	case control.EventPlan:
		if e.Plan != nil {
			s := e.Plan.Summary()
			v.log.Info("plan", "round", e.Round, "add", s.Add, "change", s.Change, "remove", s.Remove)
		}
	case control.EventAction:
		if e.Action == nil {
			return
		}
		a := e.Action
		attrs := []any{"round", e.Round, "kind", a.Kind, "district", a.District, "target", actionTarget(*a)}
		switch {
		case e.Phase == control.PhaseStart:
			v.log.Debug("action started", attrs...)
		case e.Phase == control.PhaseSkip:
			v.log.Warn("action skipped", append(attrs, "reason", e.Error)...)
		case e.Error != "":
			v.log.Error("action failed", append(attrs, "seconds", round1(e.Seconds), "err", e.Error)...)
		default:
			v.log.Info("action done", append(attrs, "seconds", round1(e.Seconds))...)
		}
	case control.EventWait:
		v.log.Info("waiting", "round", e.Round, "message", e.Message)
	case control.EventAddons:
		switch {
		case e.Phase == control.PhaseStart:
			v.log.Debug("addons step started", "round", e.Round)
		case e.Error != "":
			v.log.Error("addons step failed", "round", e.Round, "seconds", round1(e.Seconds), "err", e.Error)
		default:
			v.log.Info("addons step done", "round", e.Round, "seconds", round1(e.Seconds), "changed", e.Message)
		}
	}
}

func (v *progress) encode(line any) {
	if err := v.json.Encode(line); err != nil && v.writeErr == nil {
		v.writeErr = fmt.Errorf("write progress: %w", err)
	}
}

// autoscale shows what transit autoscale decided.
func (v *progress) autoscale(r transit.AutoscaleReport) {
	v.mu.Lock()
	defer v.mu.Unlock()
	switch {
	case v.json != nil:
		v.encode(newAutoscaleJSON(r, v.now()))
	case v.tty:
		v.clearStatus()
		for _, l := range autoscaleText(r) {
			fmt.Fprintln(v.out, l)
		}
	default:
		for _, d := range r.Decisions {
			v.log.Info("autoscale", "deployment", d.Key.String(), "from", d.From, "to", d.To, "reason", d.Reason, "remove", d.Remove)
		}
		for _, p := range r.Problems {
			v.log.Warn("autoscale", "problem", p)
		}
		if len(r.Decisions) == 0 {
			v.log.Info("autoscale: no change", "pending", r.Pending, "nodes", r.Nodes)
		}
	}
}

// result shows how the run ended, in every view: with --json it is the
// last line, also when the run failed before the loop started. It returns
// err, or else a failed write of the JSON lines.
func (v *progress) result(res control.Result, err error) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	switch {
	case v.json != nil:
		v.encode(newResultJSON(res, err, v.now()))
	case v.tty:
		v.running = nil
		v.clearStatus()
		v.ttyResult(res, err)
	default:
		v.logResult(res, err)
	}
	if err != nil {
		return err
	}
	return v.writeErr
}

func (v *progress) ttyResult(res control.Result, err error) {
	verb := capitalize(v.verb)
	_, interrupted := errors.AsType[*interruptedError](err)
	switch {
	case err == nil && res.Rounds == 0:
		// Nothing to do: the plan said so, with its warnings.
		return
	case err == nil && v.verb == "destroy":
		fmt.Fprintf(v.out, "\n%s complete: the cluster's machines and security groups are gone after %s.\n", verb, plural(res.Rounds, "round"))
	case err == nil:
		fmt.Fprintf(v.out, "\n%s complete: the cluster matches the intended state after %s.\n", verb, plural(res.Rounds, "round"))
	case interrupted:
		fmt.Fprintf(v.out, "\n%s interrupted in round %d; the state is saved.\n", verb, res.Rounds)
	case errors.Is(err, control.ErrNotConverged):
		fmt.Fprintf(v.out, "\n%s stopped after %s without converging; the next run retries.\n", verb, plural(res.Rounds, "round"))
		writeList(v.out, "Problems", unique(res.Problems))
	default:
		return // the error says it all
	}
	writeList(v.out, "Warnings", unique(res.Warnings))
}

// writeList prints a titled list of lines, nothing when it is empty.
func writeList(w io.Writer, title string, lines []string) {
	if len(lines) == 0 {
		return
	}
	fmt.Fprintf(w, "%s:\n", title)
	for _, l := range lines {
		fmt.Fprintf(w, "  - %s\n", l)
	}
}

func (v *progress) logResult(res control.Result, err error) {
	_, interrupted := errors.AsType[*interruptedError](err)
	switch {
	case err == nil:
		v.log.Info(v.verb+" converged", "rounds", res.Rounds, "warnings", len(res.Warnings))
	case interrupted:
		v.log.Warn(v.verb+" interrupted; the state is saved", "round", res.Rounds, "left", len(res.Left))
	case errors.Is(err, control.ErrNotConverged):
		problems := unique(res.Problems)
		v.log.Warn(v.verb+" not converged", "rounds", res.Rounds, "problems", len(problems))
		for _, p := range problems {
			v.log.Warn("problem", "problem", p)
		}
	default:
		return
	}
	for _, w := range unique(res.Warnings) {
		v.log.Warn("warning", "warning", w)
	}
}

func seconds(s float64) string {
	return (time.Duration(s * float64(time.Second))).Round(100 * time.Millisecond).String()
}

func round1(s float64) float64 {
	return float64(int64(s*10+0.5)) / 10
}

func suffix(sep, s string) string {
	if s == "" {
		return ""
	}
	return sep + s
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
