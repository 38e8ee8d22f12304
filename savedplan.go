package transit

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cloudtransit/transit/atomicfile"
	"github.com/cloudtransit/transit/control"
	"github.com/cloudtransit/transit/districts"
)

// SavedPlanFormat is the format of the plan files this transit writes.
const SavedPlanFormat = 1

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
	// State is the state the plan was made from.
	State SavedState `json:"state"`
	// Inputs are the SHA-256 of cluster.json and districts.json as read.
	Inputs map[string]string `json:"inputs"`
	// Options are the plan's options, which the apply takes from it.
	Options SavedOptions `json:"options"`
	// Refreshed says the clouds and the platform were asked.
	Refreshed bool         `json:"refreshed"`
	Plan      control.Plan `json:"plan"`
}

// SavedState names a state: where it was, its lineage and serial, and a
// hash of its content (the same serial can be written twice by a run
// killed and one forced).
type SavedState struct {
	Location string `json:"location"`
	Lineage  string `json:"lineage,omitempty"`
	Serial   int64  `json:"serial"`
	SHA256   string `json:"sha256"`
}

// SavedOptions are the options of a saved plan.
type SavedOptions struct {
	AllowDestroy    bool `json:"allow_destroy,omitempty"`
	RebuildPlatform bool `json:"rebuild_platform,omitempty"`
	ForgetMissing   bool `json:"forget_missing,omitempty"`
}

// inputFiles are the inputs a saved plan records, by their label.
func inputFiles(p districts.Paths) map[string]string {
	return map[string]string{"cluster.json": p.Cluster, "districts.json": p.Districts}
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

// stateHash is the SHA-256 of a state as JSON: the same state read from
// a file, a file with its journal, or a bucket hashes alike.
func stateHash(r districts.Resources) string {
	data, err := json.Marshal(r)
	if err != nil {
		return "unencodable"
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// SavePlan describes p, made by this session with o, for a plan file.
func (s *Session) SavePlan(p Plan, o PlanOptions, transitVersion string) SavedPlan {
	return SavedPlan{
		FormatVersion: SavedPlanFormat,
		Transit:       transitVersion,
		Cluster:       s.cfg.Cluster.ID,
		Made:          s.opts.Clock.Now().UTC(),
		State:         SavedState{Location: s.opts.Files.State, Lineage: s.state.Lineage, Serial: s.state.Serial, SHA256: s.stateSum},
		Inputs:        s.inputs,
		Options:       SavedOptions{AllowDestroy: o.AllowDestroy, RebuildPlatform: o.RebuildPlatform, ForgetMissing: o.ForgetMissing},
		Refreshed:     o.Refresh,
		Plan:          p,
	}
}

// WriteSavedPlan writes a plan file atomically.
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
// another format, a newer transit's) is an ErrConfig naming it.
func ReadSavedPlan(path string) (SavedPlan, error) {
	var sp SavedPlan
	data, err := os.ReadFile(path)
	if err != nil {
		return sp, configError(fmt.Errorf("read the plan: %w", err))
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&sp); err != nil {
		return sp, configError(fmt.Errorf("%s is not a plan transit wrote (%w): make it again with transit plan --out", filepath.Base(path), err))
	}
	switch {
	case sp.FormatVersion > SavedPlanFormat:
		return sp, configError(fmt.Errorf("%s was written by a newer transit (plan format %d, this one reads %d)", filepath.Base(path), sp.FormatVersion, SavedPlanFormat))
	case sp.FormatVersion < 1 || sp.Cluster == "" || sp.Inputs == nil:
		return sp, configError(fmt.Errorf("%s is not a plan transit wrote (no format, cluster or inputs): make it again with transit plan --out", filepath.Base(path)))
	}
	return sp, nil
}

// ApplySaved runs exactly the saved plan sp: it refuses, changing nothing,
// when it was made for another cluster, from another state (serial,
// lineage or content), or from other cluster.json or districts.json, with
// an error matching control.ErrStalePlan that says what changed; and the
// loop refuses it the same way when its first round would do anything
// else (the clouds moved). No confirmation is asked: the plan was
// reviewed. o's AllowDestroy, RebuildPlatform, ForgetMissing and
// Confirmed come from the plan.
func (s *Session) ApplySaved(ctx context.Context, sp SavedPlan, o ApplyOptions) (Result, error) {
	if err := s.use(Change, "apply"); err != nil {
		return Result{}, err
	}
	if why := s.moved(sp); len(why) > 0 {
		return Result{}, &staleSavedPlan{why: why}
	}
	o.AllowDestroy, o.RebuildPlatform, o.ForgetMissing = sp.Options.AllowDestroy, sp.Options.RebuildPlatform, sp.Options.ForgetMissing
	o.Confirmed, o.Confirm, o.OnPlan = &sp.Plan, nil, nil
	return s.change(ctx, o, false)
}

// moved says what differs between the plan's origin and this session's.
func (s *Session) moved(sp SavedPlan) []string {
	var why []string
	if sp.Cluster != s.cfg.Cluster.ID {
		return []string{fmt.Sprintf("the plan was made for cluster %q, cluster.json describes %q", sp.Cluster, s.cfg.Cluster.ID)}
	}
	st := sp.State
	switch {
	case st.Serial != s.state.Serial:
		why = append(why, fmt.Sprintf("%s changed since the plan: serial %d → %d", s.opts.Files.State, st.Serial, s.state.Serial))
	case st.Lineage != s.state.Lineage:
		why = append(why, fmt.Sprintf("the state is of another lineage (%s, the plan's %s)", orNone(s.state.Lineage), orNone(st.Lineage)))
	case st.SHA256 != s.stateSum:
		why = append(why, fmt.Sprintf("%s changed since the plan (serial %d, other content)", s.opts.Files.State, st.Serial))
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

// staleSavedPlan is a saved plan refused before anything ran: it matches
// control.ErrStalePlan.
type staleSavedPlan struct{ why []string }

func (e *staleSavedPlan) Error() string {
	return "the saved plan is stale: " + strings.Join(e.why, "; ") + "; make a new plan (transit plan --out)"
}

func (e *staleSavedPlan) Is(target error) bool { return target == control.ErrStalePlan }

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
