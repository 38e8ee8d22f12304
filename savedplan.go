package transit

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cloudtransit/transit/atomicfile"
	"github.com/cloudtransit/transit/control"
	"github.com/cloudtransit/transit/districts"
)

// SavedPlanFormat is the format of the plan files this transit writes.
const SavedPlanFormat = 1

// SavedNoState is a saved plan's state hash when the plan was made with
// no state yet.
const SavedNoState = "no state"

// SavedPlan is a plan with what it was made from, Terraform's CI pattern:
// `transit plan --out FILE` writes one, `transit apply FILE` runs exactly
// it, and refuses when the state, the configuration or the clouds moved
// since. It holds no secret: no credential, no key, only what the plan
// shows.
type SavedPlan struct {
	FormatVersion int       `json:"format_version"`
	Transit       string    `json:"transit_version,omitempty"`
	Cluster       string    `json:"cluster"`
	Made          time.Time `json:"made"`
	// Platform and Districts (districts.json's order) let a plan be shown
	// without the configuration.
	Platform  string   `json:"platform,omitempty"`
	Districts []string `json:"districts,omitempty"`
	// State is the state the plan was made from.
	State SavedState `json:"state"`
	// Inputs are the SHA-256 of cluster.json, districts.json and
	// prices.json as read ("absent" for a file that was not there).
	Inputs map[string]string `json:"inputs"`
	// Options are the plan's options, which the apply takes from it.
	Options SavedOptions `json:"options"`
	// Refreshed says the clouds and the platform were asked.
	Refreshed bool         `json:"refreshed"`
	Plan      control.Plan `json:"plan"`
}

// SavedState names a state: where it was (as given, a path or a URL), its
// lineage and serial, and a hash of its content, "no state" for none (the
// same serial can be written twice by a run killed and one forced).
type SavedState struct {
	Location string `json:"location"`
	Lineage  string `json:"lineage,omitempty"`
	Serial   int64  `json:"serial"`
	SHA256   string `json:"sha256"`
}

// SavedOptions are the options of a saved plan.
type SavedOptions struct {
	AllowDestroy    bool `json:"allow_destroy"`
	RebuildPlatform bool `json:"rebuild_platform"`
	ForgetMissing   bool `json:"forget_missing"`
	// Destroy is a plan of Destroy's teardown.
	Destroy bool `json:"destroy"`
}

// inputFiles are the inputs a saved plan records, by their label:
// prices.json too, as the budget guard reads it.
func inputFiles(p districts.Paths) map[string]string {
	in := map[string]string{"cluster.json": p.Cluster, "districts.json": p.Districts}
	if p.Prices != "" {
		in["prices.json"] = p.Prices
	}
	return in
}

// hashFile is the SHA-256 of a file's content, "absent" for none.
func hashFile(path string) (string, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "absent", nil
	}
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:]), nil
}

// stateHash is the SHA-256 of a state as the session read it, encoded
// as JSON: the same state read from a file, from a file and the journal
// a killed run left (which an apply compacts before it reads), or from a
// bucket hashes alike. A state that does not exist is "no state".
func stateHash(r districts.Resources) string {
	data, err := json.Marshal(r)
	if err != nil {
		return "unencodable"
	}
	if none, err := json.Marshal(districts.Resources{Type: "resources", Version: districts.ResourcesVersion}); err == nil && bytes.Equal(data, none) {
		return SavedNoState
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// SavePlan describes p, made by this session's Plan with o, for a plan
// file: what it was made from and how, and no secret.
func (s *Session) SavePlan(p Plan, o PlanOptions, transitVersion string) SavedPlan {
	ids := make([]string, len(s.cfg.Districts))
	for i, d := range s.cfg.Districts {
		ids[i] = d.ID
	}
	return SavedPlan{
		FormatVersion: SavedPlanFormat,
		Transit:       transitVersion,
		Cluster:       s.cfg.Cluster.ID,
		Made:          s.opts.Clock.Now().UTC(),
		Platform:      s.cfg.Cluster.Platform,
		Districts:     ids,
		State:         SavedState{Location: s.opts.Files.State, Lineage: s.state.Lineage, Serial: s.state.Serial, SHA256: s.stateSum},
		Inputs:        s.inputs,
		Options:       SavedOptions{AllowDestroy: o.AllowDestroy, RebuildPlatform: o.RebuildPlatform, ForgetMissing: o.ForgetMissing, Destroy: o.Destroy},
		Refreshed:     o.Refresh,
		Plan:          p,
	}
}

// WriteSavedPlan writes a plan file atomically, mode 0644: it holds no
// secret.
func WriteSavedPlan(path string, sp SavedPlan) error {
	data, err := json.MarshalIndent(sp, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("write the plan %s: %w", path, err)
	}
	return nil
}

// ReadSavedPlan reads a plan file. A file that is not one (truncated,
// edited, of a newer format) is an ErrConfig naming it.
func ReadSavedPlan(path string) (SavedPlan, error) {
	var sp SavedPlan
	data, err := os.ReadFile(path)
	if err != nil {
		return sp, configError(fmt.Errorf("read the plan: %w", err))
	}
	notPlan := func(why string) error {
		return configError(fmt.Errorf("%s is not a plan transit wrote (%s): make it again with transit plan --out", path, why))
	}
	// The format first: a newer one may hold what this transit cannot
	// read.
	var v struct {
		FormatVersion int    `json:"format_version"`
		Transit       string `json:"transit_version"`
	}
	if err := json.Unmarshal(data, &v); err == nil && v.FormatVersion > SavedPlanFormat {
		return sp, configError(fmt.Errorf("%s: the plan was made with a newer format (%d, by transit %s; this transit reads format %d): apply it with that transit, or make it again with this one",
			path, v.FormatVersion, orNone(v.Transit), SavedPlanFormat))
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&sp); err != nil {
		return sp, notPlan(err.Error())
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return sp, notPlan("more after the plan's end")
	}
	if sp.FormatVersion < 1 || sp.Cluster == "" || sp.Inputs == nil || sp.State.SHA256 == "" {
		return sp, notPlan("no format, cluster, inputs or state")
	}
	return sp, nil
}

// ApplySaved runs exactly the saved plan sp, Apply's or, for a plan of a
// teardown, Destroy's. It refuses, changing nothing, when the plan was
// made for another cluster, from another state (serial, lineage or
// content), or from other cluster.json or districts.json, with an error
// matching control.ErrStalePlan that says what changed; and the loop
// refuses it the same way, naming the actions that differ, when its first
// round would do anything else (the clouds or the platform moved). No
// confirmation is asked: the plan was reviewed. o's AllowDestroy,
// RebuildPlatform, ForgetMissing, Confirmed, Confirm and OnPlan are
// ignored: the plan fixes them.
func (s *Session) ApplySaved(ctx context.Context, sp SavedPlan, o ApplyOptions) (Result, error) {
	verb := "apply"
	if sp.Options.Destroy {
		verb = "destroy"
	}
	if err := s.use(Change, verb); err != nil {
		return Result{}, err
	}
	if why := s.moved(sp); len(why) > 0 {
		return Result{}, &staleSavedPlan{why: why}
	}
	o.AllowDestroy, o.RebuildPlatform, o.ForgetMissing = sp.Options.AllowDestroy, sp.Options.RebuildPlatform, sp.Options.ForgetMissing
	o.Confirmed, o.Confirm, o.OnPlan = &sp.Plan, nil, nil
	// The first round's plan says how the world moved, if it did.
	var mu sync.Mutex
	var first *Plan
	onEvent := o.OnEvent
	o.OnEvent = func(e Event) {
		if e.Type == control.EventPlan && e.Round == 1 && e.Plan != nil {
			mu.Lock()
			p := *e.Plan
			first = &p
			mu.Unlock()
		}
		if onEvent != nil {
			onEvent(e)
		}
	}
	res, err := s.change(ctx, o, sp.Options.Destroy)
	if errors.Is(err, control.ErrStalePlan) {
		mu.Lock()
		err = &staleSavedPlan{why: []string{worldMoved(sp.Plan, first)}, err: err}
		mu.Unlock()
	}
	return res, err
}

// moved says what differs between the plan's origin and this session's.
func (s *Session) moved(sp SavedPlan) []string {
	if sp.Cluster != s.cfg.Cluster.ID {
		return []string{fmt.Sprintf("the plan was made for cluster %q, cluster.json describes %q", sp.Cluster, s.cfg.Cluster.ID)}
	}
	var why []string
	st, where := sp.State, s.opts.Files.State
	if st.Location != where {
		where += " (the plan was made from " + st.Location + ")"
	}
	switch {
	case st.Lineage != s.state.Lineage && st.Lineage != "":
		why = append(why, fmt.Sprintf("%s is another state: lineage %s, the plan's %s", where, orNone(s.state.Lineage), st.Lineage))
	case st.Serial != s.state.Serial:
		why = append(why, fmt.Sprintf("%s changed since the plan: serial %d → %d", where, st.Serial, s.state.Serial))
	case st.Lineage != s.state.Lineage || st.SHA256 != s.stateSum:
		why = append(why, fmt.Sprintf("%s changed since the plan: serial %d, other content", where, st.Serial))
	}
	labels := make([]string, 0, len(sp.Inputs))
	for l := range sp.Inputs {
		labels = append(labels, l)
	}
	slices.Sort(labels)
	for _, l := range labels {
		if s.inputs[l] != sp.Inputs[l] {
			why = append(why, l+" changed since the plan")
		}
	}
	return why
}

// worldMoved says how the first round's plan, now, differs from the
// saved one.
func worldMoved(saved Plan, now *Plan) string {
	const msg = "the clouds or the platform changed since the plan (the world moved)"
	if now == nil {
		return msg
	}
	key := func(a Action) string {
		target := a.Node
		if target == "" {
			target = a.Group
		}
		if a.District != "" {
			target += " in " + a.District
		}
		return strings.TrimSpace(string(a.Kind) + " " + target)
	}
	only := func(a, b []Action) []string {
		in := map[string]bool{}
		for _, x := range b {
			in[key(x)] = true
		}
		var out []string
		for _, x := range a {
			if k := key(x); !in[k] && !slices.Contains(out, k) {
				out = append(out, k)
			}
		}
		return out
	}
	list := func(ks []string) string {
		if len(ks) > 5 {
			ks = append(ks[:5:5], fmt.Sprintf("%d more", len(ks)-5))
		}
		return strings.Join(ks, ", ")
	}
	var parts []string
	if added := only(now.Actions, saved.Actions); len(added) > 0 {
		parts = append(parts, "also "+list(added))
	}
	if dropped := only(saved.Actions, now.Actions); len(dropped) > 0 {
		parts = append(parts, "no longer "+list(dropped))
	}
	if len(parts) == 0 {
		return msg + ": the first round would do the same actions otherwise (their order, reasons or details)"
	}
	return msg + ": the first round would now " + strings.Join(parts, "; ")
}

// staleSavedPlan is a saved plan refused before anything ran: it matches
// control.ErrStalePlan.
type staleSavedPlan struct {
	why []string
	err error // the loop's refusal, if it was the loop's
}

func (e *staleSavedPlan) Error() string {
	return "the saved plan is stale, nothing was done: " + strings.Join(e.why, "; ") + "; make a new plan (transit plan --out)"
}

func (e *staleSavedPlan) Is(target error) bool { return target == control.ErrStalePlan }

func (e *staleSavedPlan) Unwrap() error { return e.err }

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
