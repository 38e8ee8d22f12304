package cli

import (
	"encoding/json"
	"io"
	"math"
	"time"

	"github.com/cloudtransit/transit"
	"github.com/cloudtransit/transit/control"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// FormatVersion is the version of every JSON object transit prints: plan,
// status and version --json, and each line of apply and destroy --json.
// It changes when a field is removed or changes meaning; new fields and
// new line types may appear without a change, so readers ignore what they
// do not know.
// Version 2: plans carry their cost, actions what they add or take away
// an hour.
const FormatVersion = 2

// Types of the JSON objects.
const (
	typePlan      = "plan"
	typeSaved     = "saved_plan"
	typeStatus    = "status"
	typeVersion   = "version"
	typeRound     = "round"
	typeAction    = "action"
	typeWait      = "wait"
	typeAddons    = "addons"
	typeAutoscale = "autoscale"
	typeResult    = "result"
)

// header starts every JSON object transit prints.
type header struct {
	FormatVersion int    `json:"format_version"`
	Type          string `json:"type"`
}

func newHeader(typ string) header { return header{FormatVersion: FormatVersion, Type: typ} }

// The JSON objects are views of the library's values: each names its
// fields here, so what the library keeps for itself stays out and the
// format changes only on purpose. Lists are never null.

// planJSON is a plan: what plan --json prints, and the "plan" lines of
// apply and destroy --json. Round 0 is the plan made before the loop (the
// one plan prints and apply asks to confirm); round n ≥ 1 the plan of round
// n.
type planJSON struct {
	header
	Time     time.Time    `json:"time"`
	Round    int          `json:"round"`
	Cluster  string       `json:"cluster"`
	Actions  []actionJSON `json:"actions"`
	Waiting  []string     `json:"waiting"`
	Blocked  []string     `json:"blocked"`
	Warnings []string     `json:"warnings"`
	Notes    []string     `json:"notes"`
	Summary  summaryJSON  `json:"summary"`
	// Changes says the plan has actions (plan --detailed-exitcode exits 2).
	Changes bool `json:"changes"`
	// Refreshed says the clouds and the platform were asked; false for
	// plan --refresh=false.
	Refreshed bool `json:"refreshed"`
	// Cost is what the cluster costs an hour and a month now and after
	// the plan; left out when nothing is priced and no budget set.
	Cost *costJSON `json:"cost,omitempty"`
}

// costJSON is a plan's cost (control.Cost) with monthly amounts of
// districts.HoursPerMonth hours.
type costJSON struct {
	Currency     string             `json:"currency"`
	HourlyNow    float64            `json:"hourly_now"`
	HourlyAfter  float64            `json:"hourly_after"`
	HourlyPeak   float64            `json:"hourly_peak"`
	MonthlyNow   float64            `json:"monthly_now"`
	MonthlyAfter float64            `json:"monthly_after"`
	Districts    []districtCostJSON `json:"districts"`
	Unpriced     []string           `json:"unpriced"`
	// Budget is cluster.json's, nil for none; OverBudget why apply
	// refuses the plan ("" when it does not).
	Budget     *budgetJSON `json:"budget"`
	OverBudget string      `json:"over_budget"`
}

type districtCostJSON struct {
	District    string  `json:"district"`
	HourlyNow   float64 `json:"hourly_now"`
	HourlyAfter float64 `json:"hourly_after"`
}

type budgetJSON struct {
	MaxHourly      float64 `json:"max_hourly"`
	MaxSurgeHourly float64 `json:"max_surge_hourly"`
	Currency       string  `json:"currency"`
}

// monthly is an hourly amount over a month, to the cent's ten-thousandth.
func monthly(hourly float64) float64 {
	return math.Round(hourly*districts.HoursPerMonth*1e6) / 1e6
}

func newCostJSON(c *control.Cost) *costJSON {
	if c == nil {
		return nil
	}
	v := &costJSON{
		Currency: c.Currency, HourlyNow: c.Now, HourlyAfter: c.After, HourlyPeak: c.Peak,
		MonthlyNow: monthly(c.Now), MonthlyAfter: monthly(c.After),
		Districts: make([]districtCostJSON, 0, len(c.Districts)), Unpriced: list(c.Unpriced), OverBudget: c.OverBudget,
	}
	for _, d := range c.Districts {
		v.Districts = append(v.Districts, districtCostJSON{District: d.District, HourlyNow: d.Now, HourlyAfter: d.After})
	}
	if b := c.Budget; b != nil {
		v.Budget = &budgetJSON{MaxHourly: b.MaxHourly, MaxSurgeHourly: b.SurgeLimit(), Currency: b.CurrencyCode()}
	}
	return v
}

// savedPlanJSON is what show --json prints: a saved plan's origin, and
// the plan as plan --json printed it.
type savedPlanJSON struct {
	header
	File           string               `json:"file"`
	PlanFormat     int                  `json:"plan_format"`
	TransitVersion string               `json:"transit_version"`
	Cluster        string               `json:"cluster"`
	Platform       string               `json:"platform"`
	Made           time.Time            `json:"made"`
	State          transit.SavedState   `json:"state"`
	Inputs         map[string]string    `json:"inputs"`
	Options        transit.SavedOptions `json:"options"`
	Plan           planJSON             `json:"plan"`
}

func newSavedPlanJSON(file string, sp transit.SavedPlan) savedPlanJSON {
	return savedPlanJSON{
		header: newHeader(typeSaved), File: file, PlanFormat: sp.FormatVersion, TransitVersion: sp.Transit,
		Cluster: sp.Cluster, Platform: sp.Platform, Made: sp.Made.UTC(), State: sp.State, Inputs: sp.Inputs, Options: sp.Options,
		Plan: newPlanJSON(sp.Plan, 0, sp.Made, sp.Refreshed),
	}
}

type actionJSON struct {
	Kind     string   `json:"kind"`
	District string   `json:"district"`
	Node     string   `json:"node,omitempty"`
	Role     string   `json:"role,omitempty"`
	Flavor   string   `json:"flavor,omitempty"`
	Group    string   `json:"group,omitempty"`
	Reason   string   `json:"reason"`
	After    []string `json:"after,omitempty"`
	// Hourly, on a launch or a termination, is what the machine adds to
	// (negative: takes from) the hourly cost; left out when unpriced.
	Hourly *float64 `json:"hourly,omitempty"`
}

type summaryJSON struct {
	Add    int `json:"add"`
	Change int `json:"change"`
	Remove int `json:"remove"`
}

func newPlanJSON(p control.Plan, round int, t time.Time, refreshed bool) planJSON {
	s := p.Summary()
	v := planJSON{
		header:    newHeader(typePlan),
		Time:      t.UTC(),
		Round:     round,
		Cluster:   p.Cluster,
		Actions:   make([]actionJSON, 0, len(p.Actions)),
		Waiting:   list(p.Waiting),
		Blocked:   list(p.Blocked),
		Warnings:  list(p.Warnings),
		Notes:     list(p.Notes),
		Summary:   summaryJSON{Add: s.Add, Change: s.Change, Remove: s.Remove},
		Changes:   len(p.Actions) > 0,
		Refreshed: refreshed,
		Cost:      newCostJSON(p.Cost),
	}
	for _, a := range p.Actions {
		v.Actions = append(v.Actions, newActionJSON(a))
	}
	return v
}

func newActionJSON(a control.Action) actionJSON {
	return actionJSON{
		Kind: string(a.Kind), District: a.District, Node: a.Node, Role: a.Role, Flavor: a.Flavor,
		Group: a.Group, Reason: a.Reason, After: a.After, Hourly: a.Hourly,
	}
}

// statusJSON is what status --json prints: the state with what the refresh
// found.
type statusJSON struct {
	header
	Time      time.Time `json:"time"`
	Cluster   string    `json:"cluster"`
	Platform  string    `json:"platform"`
	Refreshed bool      `json:"refreshed"`
	// PlatformError says why the platform could not be asked; "" when it
	// answered (or was not asked).
	PlatformError string `json:"platform_error"`
	// PlatformVersion is the version the platform's control plane
	// reports ("" when it was not asked or could not say).
	PlatformVersion string `json:"platform_version"`
	// Addons say whether each addon serves ([] when not asked).
	Addons []provider.AddonStatus `json:"addons"`
	Notes  []string               `json:"notes"`
	// State is the current state in the format of resources.json.
	State districts.Resources `json:"state"`
	// Cost is what the live machines cost; left out when nothing is
	// priced.
	Cost *control.Bill `json:"cost,omitempty"`
}

func newStatusJSON(st shownStatus, t time.Time) statusJSON {
	return statusJSON{
		header: newHeader(typeStatus), Time: t.UTC(), Cluster: st.cluster.ID, Platform: st.cluster.Platform,
		Refreshed: st.refreshed, PlatformError: st.platformError, PlatformVersion: st.version, Addons: list(st.addons), Notes: list(st.notes), State: st.res, Cost: st.bill,
	}
}

// versionJSON is what version --json prints.
type versionJSON struct {
	header
	VersionInfo
}

// roundJSON starts a round of the loop.
type roundJSON struct {
	header
	Time  time.Time `json:"time"`
	Round int       `json:"round"`
	Phase string    `json:"phase"` // "start"
}

// actionEventJSON is an action starting, finishing (with Error when it
// failed) or skipped (Error says why).
type actionEventJSON struct {
	header
	Time    time.Time  `json:"time"`
	Round   int        `json:"round"`
	Phase   string     `json:"phase"` // "start", "finish", "skip"
	Action  actionJSON `json:"action"`
	Error   string     `json:"error,omitempty"`
	Seconds float64    `json:"seconds"`
}

// waitJSON says the loop waits for what only time fixes.
type waitJSON struct {
	header
	Time    time.Time `json:"time"`
	Round   int       `json:"round"`
	Message string    `json:"message"`
}

// addonsJSON is the addons step's outcome, once the nodes converged.
type addonsJSON struct {
	header
	Time    time.Time `json:"time"`
	Round   int       `json:"round"`
	Changed []string  `json:"changed"`
	Error   string    `json:"error,omitempty"`
	Seconds float64   `json:"seconds"`
}

// autoscaleJSON is what transit autoscale decided: the first line of
// autoscale --json.
type autoscaleJSON struct {
	header
	Time      time.Time               `json:"time"`
	Decisions []autoscaleDecisionJSON `json:"decisions"`
	Problems  []string                `json:"problems"`
	Pending   int                     `json:"pending"`
	Nodes     int                     `json:"nodes"`
}

type autoscaleDecisionJSON struct {
	Deployment string   `json:"deployment"`
	From       int      `json:"from"`
	To         int      `json:"to"`
	Reason     string   `json:"reason"`
	Remove     []string `json:"remove"`
}

func newAutoscaleJSON(r transit.AutoscaleReport, t time.Time) autoscaleJSON {
	v := autoscaleJSON{header: newHeader(typeAutoscale), Time: t.UTC(), Decisions: []autoscaleDecisionJSON{},
		Problems: list(r.Problems), Pending: r.Pending, Nodes: r.Nodes}
	for _, d := range r.Decisions {
		v.Decisions = append(v.Decisions, autoscaleDecisionJSON{Deployment: d.Key.String(), From: d.From, To: d.To, Reason: d.Reason, Remove: list(d.Remove)})
	}
	return v
}

// resultJSON is the last line of apply and destroy --json, however the run
// ended: converged, not converged, or failed before or in the loop.
type resultJSON struct {
	header
	Time   time.Time  `json:"time"`
	Round  int        `json:"round"`
	Result resultBody `json:"result"`
	// Error is the message transit prints on stderr, ErrorKind how the
	// run failed; both are absent when it converged.
	Error     string `json:"error,omitempty"`
	ErrorKind string `json:"error_kind,omitempty"`
}

type resultBody struct {
	Converged bool     `json:"converged"`
	Rounds    int      `json:"rounds"`
	Problems  []string `json:"problems"`
	Warnings  []string `json:"warnings"`
	Left      []string `json:"left"`
}

func newResultJSON(res control.Result, err error, t time.Time) resultJSON {
	v := resultJSON{
		header: newHeader(typeResult), Time: t.UTC(), Round: res.Rounds,
		Result: resultBody{
			Converged: res.Converged && err == nil, Rounds: res.Rounds,
			Problems: list(unique(res.Problems)), Warnings: list(unique(res.Warnings)), Left: list(res.Left),
		},
		ErrorKind: errorKind(err),
	}
	if err != nil {
		v.Error = err.Error()
	}
	return v
}

// otherEventJSON carries an event type this build does not know.
type otherEventJSON struct {
	header
	Time    time.Time `json:"time"`
	Round   int       `json:"round"`
	Phase   string    `json:"phase,omitempty"`
	Message string    `json:"message,omitempty"`
	Error   string    `json:"error,omitempty"`
}

// eventJSON is the JSON line of a loop event; ok is false for events that
// print no line (the loop's own result: the command prints the result).
func eventJSON(e control.Event) (_ any, ok bool) {
	switch e.Type {
	case control.EventResult:
		return nil, false
	case control.EventRound:
		return roundJSON{header: newHeader(typeRound), Time: e.Time.UTC(), Round: e.Round, Phase: e.Phase}, true
	case control.EventPlan:
		if e.Plan == nil {
			return nil, false
		}
		return newPlanJSON(*e.Plan, e.Round, e.Time, true), true
	case control.EventAction:
		if e.Action == nil {
			return nil, false
		}
		return actionEventJSON{header: newHeader(typeAction), Time: e.Time.UTC(), Round: e.Round, Phase: e.Phase,
			Action: newActionJSON(*e.Action), Error: e.Error, Seconds: e.Seconds}, true
	case control.EventWait:
		return waitJSON{header: newHeader(typeWait), Time: e.Time.UTC(), Round: e.Round, Message: e.Message}, true
	case control.EventAddons:
		if e.Phase != control.PhaseFinish {
			return nil, false
		}
		return addonsJSON{header: newHeader(typeAddons), Time: e.Time.UTC(), Round: e.Round,
			Changed: append([]string{}, e.Changed...), Error: e.Error, Seconds: e.Seconds}, true
	}
	return otherEventJSON{header: newHeader(e.Type), Time: e.Time.UTC(), Round: e.Round, Phase: e.Phase, Message: e.Message, Error: e.Error}, true
}

// unique is l without repeated lines, in order: a reason the loop met in
// two rounds is one reason.
func unique(l []string) []string {
	seen := make(map[string]bool, len(l))
	var out []string
	for _, s := range l {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// list is l, or an empty list instead of nil.
func list[T any](l []T) []T {
	if l == nil {
		return []T{}
	}
	return l
}

// writeJSON prints one JSON document, indented.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
