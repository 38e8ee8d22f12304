package cli

import (
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cloudtransit/transit/clock/clocktest"
)

// jsonLine is a line of apply --json, as far as these tests read it.
type jsonLine struct {
	Type      string `json:"type"`
	Round     int    `json:"round"`
	Phase     string `json:"phase"`
	Error     string `json:"error"`
	ErrorKind string `json:"error_kind"`
	Action    *struct {
		Kind     string `json:"kind"`
		District string `json:"district"`
		Node     string `json:"node"`
		Group    string `json:"group"`
	} `json:"action"`
	Actions []struct {
		Kind     string `json:"kind"`
		District string `json:"district"`
		Node     string `json:"node"`
		Group    string `json:"group"`
	} `json:"actions"`
}

// applyLines parses apply --json's stdout; the last line must be the
// result.
func applyLines(t *testing.T, out string) []jsonLine {
	t.Helper()
	var lines []jsonLine
	for l := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		var v jsonLine
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatalf("a line of apply --json is no JSON object: %v\n%s", err, l)
		}
		lines = append(lines, v)
	}
	if len(lines) == 0 || lines[len(lines)-1].Type != "result" {
		t.Fatalf("apply --json did not end with its result:\n%s", out)
	}
	return lines
}

// lastResult is the result line of apply --json.
func lastResult(t *testing.T, out string) (kind, msg string) {
	t.Helper()
	lines := applyLines(t, out)
	last := lines[len(lines)-1]
	return last.ErrorKind, last.Error
}

// cloudAndState is what a refused apply must leave as it was.
type cloudAndState struct {
	instances, groups int
	state             string
}

func (h *harness) cloudAndState(t *testing.T) cloudAndState {
	t.Helper()
	data, err := os.ReadFile(h.path("resources.json"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	i, g := h.cloud.count()
	return cloudAndState{instances: i, groups: g, state: string(data)}
}

// CI's pattern: a plan made on a pull request and kept as an artifact is
// applied on merge, without a prompt and without --auto-approve, doing
// exactly what was reviewed.
func TestSavedPlanApplies(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.clock = clocktest.NewFake(time.Date(2026, 3, 1, 10, 30, 0, 0, time.UTC))
	plain := h.run(t, runOpts{}, "plan")
	// Terraform's single-dash -out, as CI scripts write it.
	r := h.run(t, runOpts{}, "plan", "-out", h.path("plan.bin"), "--detailed-exitcode")
	wantCode(t, r, 2)
	if r.out != plain.out {
		t.Errorf("plan -out prints another plan than plan:\n%s", cmp.Diff(plain.out, r.out))
	}
	if !strings.Contains(r.err, "Saved the plan to "+h.path("plan.bin")) {
		t.Errorf("plan -out says nothing of the file:\n%s", r.err)
	}
	fi, err := os.Stat(h.path("plan.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("plan file mode %v, want 0644", fi.Mode().Perm())
	}
	data, err := os.ReadFile(h.path("plan.bin"))
	if err != nil {
		t.Fatal(err)
	}
	// No secret of credentials.json is in the file.
	for _, secret := range []string{`"SECRET"`, `"AKID"`, "path-to-key.json", "aws_secret_access_key"} {
		if strings.Contains(string(data), secret) {
			t.Errorf("the plan file holds %s from credentials.json", secret)
		}
	}
	if _, err := os.Stat(h.path("resources.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("plan -out wrote the state: %v", err)
	}

	// stdin is no terminal and there is no --auto-approve: a saved plan
	// was reviewed, it needs neither.
	r = h.run(t, runOpts{stdin: "no\n"}, "apply", "--json", h.path("plan.bin"))
	wantCode(t, r, 0)
	lines := applyLines(t, r.out)
	if lines[0].Type != "plan" || lines[0].Round != 0 {
		t.Fatalf("the first line of apply --json FILE is no plan of round 0: %+v", lines[0])
	}
	var planned, done []string
	for _, a := range lines[0].Actions {
		planned = append(planned, a.Kind+" "+a.Node+a.Group)
	}
	for _, l := range lines {
		if l.Type == "action" && l.Phase == "start" && l.Round == 1 {
			done = append(done, l.Action.Kind+" "+l.Action.Node+l.Action.Group)
		}
	}
	slices.Sort(planned)
	slices.Sort(done)
	if len(planned) == 0 || !slices.Equal(planned, done) {
		t.Errorf("round 1 did other than the saved plan:\n%s", cmp.Diff(planned, done))
	}
	if got := len(h.state(t).Nodes); got != 16 {
		t.Fatalf("%d nodes after the saved plan, want 16", got)
	}

	// The same plan again: the state moved (it ran).
	r = h.run(t, runOpts{}, "apply", h.path("plan.bin"))
	wantCode(t, r, 1)
	if want := "resources.json changed since the plan: serial 0 → "; !strings.Contains(r.err, want) {
		t.Fatalf("a saved plan applied twice: stderr lacks %q\n%s", want, r)
	}
}

// A plan on a terminal, without --json: the plan is shown, no question is
// asked.
func TestSavedPlanAsksNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	wantCode(t, h.run(t, runOpts{}, "plan", "--out", h.path("plan.bin")), 0)
	r := h.run(t, runOpts{tty: true, stdin: "no\n"}, "apply", h.path("plan.bin"))
	wantCode(t, r, 0)
	if strings.Contains(r.out, "Do you want to perform these actions") || !strings.Contains(r.out, "Plan: 18 to add") {
		t.Errorf("apply FILE on a terminal:\n%s", r.out)
	}
}

// A saved plan is refused, changing neither the clouds nor the state,
// when what it was made from changed: the configuration, the state, the
// clouds.
func TestSavedPlanRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		// change changes the world between plan and apply and returns
		// what the refusal must say.
		change func(t *testing.T, h *harness) string
	}{
		{"cluster.json edited", func(t *testing.T, h *harness) string {
			h.setQuantity(t, "gce-europe", "worker", 4)
			return "cluster.json changed since the plan"
		}},
		{"another apply ran", func(t *testing.T, h *harness) string {
			before := h.state(t).Serial
			wantCode(t, h.run(t, runOpts{}, "apply", "--auto-approve"), 0)
			return "resources.json changed since the plan: serial " + strconv.FormatInt(before, 10) + " → " + strconv.FormatInt(h.state(t).Serial, 10)
		}},
		{"a machine vanished", func(t *testing.T, h *harness) string {
			id := h.state(t).Nodes[5].ID
			if !h.cloud.vanish(id) {
				t.Fatal("nothing vanished")
			}
			h.platform.down(id)
			return "the clouds or the platform changed since the plan (the world moved)"
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			wantCode(t, h.run(t, runOpts{}, "apply", "--auto-approve"), 0)
			h.setQuantity(t, "aws-europe", "worker", 11)
			wantCode(t, h.run(t, runOpts{}, "plan", "-out", h.path("plan.bin")), 0)
			want := c.change(t, h)
			before := h.cloudAndState(t)
			r := h.run(t, runOpts{}, "apply", "--json", h.path("plan.bin"))
			wantCode(t, r, 1)
			kind, msg := lastResult(t, r.out)
			if kind != "stale_plan" || !strings.Contains(msg, want) || !strings.Contains(r.err, want) {
				t.Fatalf("apply of a stale plan: %s %q, want stale_plan saying %q\n%s", kind, msg, want, r)
			}
			if after := h.cloudAndState(t); after != before {
				t.Errorf("a refused plan changed the clouds or the state: %d → %d machines, %d → %d groups, state rewritten: %v",
					before.instances, after.instances, before.groups, after.groups, after.state != before.state)
			}
		})
	}
}

// What is no plan of this cluster, and flags that a plan fixes, are
// refused before anything is done, naming the file or the flag.
func TestSavedPlanBadFiles(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	wantCode(t, h.run(t, runOpts{}, "plan", "-out", h.path("plan.bin")), 0)
	data, err := os.ReadFile(h.path("plan.bin"))
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, data []byte) {
		if err := os.WriteFile(h.path(name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("cut.bin", data[:len(data)/2])
	var sp map[string]any
	if err := json.Unmarshal(data, &sp); err != nil {
		t.Fatal(err)
	}
	sp["cluster"] = "someone-else"
	other, _ := json.Marshal(sp)
	write("other.bin", other)
	sp["cluster"], sp["format_version"] = "swarm-europe", 9
	newer, _ := json.Marshal(sp)
	write("newer.bin", newer)
	for file, want := range map[string]string{
		"cut.bin":     h.path("cut.bin") + " is not a plan transit wrote",
		"other.bin":   `the plan was made for cluster "someone-else", cluster.json describes "swarm-europe"`,
		"newer.bin":   h.path("newer.bin") + ": the plan was made with a newer format (9",
		"missing.bin": h.path("missing.bin"),
	} {
		r := h.run(t, runOpts{}, "apply", h.path(file))
		wantCode(t, r, 1)
		if !strings.Contains(r.err, want) {
			t.Errorf("apply %s: stderr lacks %q:\n%s", file, want, r.err)
		}
		if file != "other.bin" {
			if r := h.run(t, runOpts{}, "show", h.path(file)); r.code != 1 || !strings.Contains(r.err, want) {
				t.Errorf("show %s: stderr lacks %q:\n%s", file, want, r)
			}
		}
	}
	for _, flag := range []string{"--allow-destroy", "--rebuild-platform", "--forget-missing", "--watch"} {
		r := h.run(t, runOpts{}, "apply", "--auto-approve", flag, h.path("plan.bin"))
		wantCode(t, r, 1)
		if !strings.Contains(r.err, flag+" (or TRANSIT_") || !strings.Contains(r.err, "with a saved plan") {
			t.Errorf("apply FILE %s:\n%s", flag, r.err)
		}
	}
	if n, g := h.cloud.count(); n != 0 || g != 0 {
		t.Errorf("refused applies made %d machines and %d groups", n, g)
	}
	if _, err := os.Stat(h.path("resources.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("refused applies wrote the state: %v", err)
	}
}

// A flag the plan fixes is refused from the environment as well: CI sets
// flags there.
func TestSavedPlanRefusesFixedFlagsFromTheEnvironment(t *testing.T) {
	h := newHarness(t)
	wantCode(t, h.run(t, runOpts{}, "plan", "--out", h.path("plan.bin")), 0)
	t.Setenv("TRANSIT_FORGET_MISSING", "true")
	r := h.run(t, runOpts{}, "apply", h.path("plan.bin"))
	wantCode(t, r, 1)
	if !strings.Contains(r.err, "--forget-missing (or TRANSIT_FORGET_MISSING) with a saved plan") {
		t.Errorf("apply FILE with TRANSIT_FORGET_MISSING set:\n%s", r.err)
	}
}

// show prints a saved plan as plan printed it, after what it was made
// from, with nothing but the file: a reviewer's laptop has no
// credentials. Its JSON is one object whose plan is plan --json's.
func TestShowSavedPlan(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.clock = clocktest.NewFake(time.Date(2026, 3, 1, 10, 30, 0, 0, time.UTC))
	plan := h.run(t, runOpts{}, "plan", "--refresh=false")
	planJSON := h.run(t, runOpts{}, "plan", "--refresh=false", "--json", "--out", h.path("plan.bin"))
	wantCode(t, planJSON, 0)
	if err := os.Remove(h.path("credentials.json")); err != nil {
		t.Fatal(err)
	}
	norm := func(s string) string { return strings.ReplaceAll(s, h.dir, "$DIR") }

	r := h.run(t, runOpts{}, "show", h.path("plan.bin"))
	wantCode(t, r, 0)
	golden(t, "show-kratzke2017.golden", norm(r.out))
	if !strings.HasSuffix(r.out, plan.out) {
		t.Errorf("show does not end with the plan as plan printed it:\n%s", cmp.Diff(plan.out, r.out))
	}

	r = h.run(t, runOpts{}, "show", "--json", h.path("plan.bin"))
	wantCode(t, r, 0)
	golden(t, "show-kratzke2017.json.golden", norm(r.out))
	var shown struct {
		Type string          `json:"type"`
		Plan json.RawMessage `json:"plan"`
	}
	dec := json.NewDecoder(strings.NewReader(r.out))
	if err := dec.Decode(&shown); err != nil || dec.More() || shown.Type != "saved_plan" {
		t.Fatalf("show --json is not one saved_plan object: %v\n%s", err, r.out)
	}
	var a, b any
	if err := json.Unmarshal(shown.Plan, &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(planJSON.out), &b); err != nil {
		t.Fatalf("plan --json --out is not one JSON object: %v\n%s", err, planJSON.out)
	}
	if diff := cmp.Diff(b, a); diff != "" {
		t.Errorf("show --json's plan is not plan --json's (-plan +show):\n%s", diff)
	}
}
