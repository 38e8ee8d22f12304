package cli

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// lastResult is the result line of apply --json.
func lastResult(t *testing.T, out string) (kind, msg string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var last struct {
		Type      string `json:"type"`
		Error     string `json:"error"`
		ErrorKind string `json:"error_kind"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil || last.Type != "result" {
		t.Fatalf("last line of apply --json: %v\n%s", err, out)
	}
	return last.ErrorKind, last.Error
}

// CI's pattern: a plan made on a pull request and kept as an artifact is
// applied on merge, without a prompt, doing exactly what was reviewed.
func TestSavedPlanApplies(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := h.run(t, runOpts{}, "plan", "-out", h.path("plan.bin"), "--detailed-exitcode")
	wantCode(t, r, 2)
	if !strings.Contains(r.err, "Saved the plan to") {
		t.Errorf("plan -out says nothing of the file:\n%s", r.err)
	}
	data, err := os.ReadFile(h.path("plan.bin"))
	if err != nil {
		t.Fatal(err)
	}
	// No secret of credentials.json is in the file.
	for _, secret := range []string{"SECRET", "AKID", "path-to-key.json"} {
		if strings.Contains(string(data), secret) {
			t.Errorf("the plan file holds %q from credentials.json", secret)
		}
	}
	show := h.run(t, runOpts{}, "show", h.path("plan.bin"))
	wantCode(t, show, 0)
	if !strings.Contains(show.out, "Saved plan for cluster swarm-europe") || !strings.Contains(show.out, "Plan: 18 to add") {
		t.Errorf("show:\n%s", show.out)
	}
	wantCode(t, h.run(t, runOpts{}, "show", "--json", h.path("plan.bin")), 0)

	r = h.run(t, runOpts{}, "apply", "--json", h.path("plan.bin")) // no --auto-approve, no terminal
	wantCode(t, r, 0)
	if kind, msg := lastResult(t, r.out); kind != "" {
		t.Fatalf("apply of the saved plan: %s %s", kind, msg)
	}
	if got := len(h.state(t).Nodes); got != 16 {
		t.Fatalf("%d nodes after the saved plan, want 16", got)
	}
	// The same plan again: the state moved (it ran).
	r = h.run(t, runOpts{}, "apply", "--json", h.path("plan.bin"))
	wantCode(t, r, 1)
	if kind, msg := lastResult(t, r.out); kind != "stale_plan" || !strings.Contains(msg, "changed since the plan: serial 0 →") {
		t.Fatalf("a saved plan applied twice: %s %s", kind, msg)
	}
}

// A saved plan is refused, changing nothing, when what it was made from
// changed: the configuration, the state, the clouds.
func TestSavedPlanRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, want string
		change     func(t *testing.T, h *harness)
	}{
		{"cluster.json edited", "cluster.json changed since the plan", func(t *testing.T, h *harness) {
			h.setQuantity(t, "gce-europe", "worker", 4)
		}},
		{"another apply ran", "resources.json changed since the plan", func(t *testing.T, h *harness) {
			h.setQuantity(t, "gce-europe", "worker", 4)
			wantCode(t, h.run(t, runOpts{}, "apply", "--auto-approve"), 0)
			h.setQuantity(t, "gce-europe", "worker", 3)
		}},
		{"a machine died", "", func(t *testing.T, h *harness) {
			id := h.state(t).Nodes[5].ID
			if !h.cloud.vanish(id) {
				t.Fatal("nothing vanished")
			}
			h.platform.down(id)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			wantCode(t, h.run(t, runOpts{}, "apply", "--auto-approve"), 0)
			h.setQuantity(t, "aws-europe", "worker", 11)
			wantCode(t, h.run(t, runOpts{}, "plan", "-out", h.path("plan.bin")), 0)
			c.change(t, h)
			before := h.state(t)
			instances, _ := h.cloud.count()
			r := h.run(t, runOpts{}, "apply", "--json", h.path("plan.bin"))
			wantCode(t, r, 1)
			kind, msg := lastResult(t, r.out)
			if kind != "stale_plan" || !strings.Contains(msg, c.want) {
				t.Fatalf("apply of a stale plan: %s %q, want stale_plan saying %q", kind, msg, c.want)
			}
			if now, _ := h.cloud.count(); now != instances {
				t.Errorf("a refused plan changed the machines: %d → %d", instances, now)
			}
			if after := h.state(t); after.Serial != before.Serial && c.want != "" {
				t.Errorf("a refused plan wrote the state: serial %d → %d", before.Serial, after.Serial)
			}
		})
	}
}

func TestSavedPlanBadFiles(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	wantCode(t, h.run(t, runOpts{}, "plan", "-out", h.path("plan.bin")), 0)
	data, _ := os.ReadFile(h.path("plan.bin"))
	if err := os.WriteFile(h.path("cut.bin"), data[:len(data)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	var sp map[string]any
	_ = json.Unmarshal(data, &sp)
	sp["cluster"] = "someone-else"
	other, _ := json.Marshal(sp)
	if err := os.WriteFile(h.path("other.bin"), other, 0o644); err != nil {
		t.Fatal(err)
	}
	sp["cluster"], sp["format_version"] = "swarm-europe", 9
	newer, _ := json.Marshal(sp)
	if err := os.WriteFile(h.path("newer.bin"), newer, 0o644); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{
		"cut.bin":     "cut.bin is not a plan transit wrote",
		"other.bin":   `made for cluster "someone-else"`,
		"newer.bin":   "newer transit",
		"missing.bin": "missing.bin",
	} {
		r := h.run(t, runOpts{}, "apply", h.path(file))
		wantCode(t, r, 1)
		if !strings.Contains(r.err, want) {
			t.Errorf("apply %s: stderr lacks %q:\n%s", file, want, r.err)
		}
	}
	r := h.run(t, runOpts{}, "apply", "--allow-destroy", h.path("plan.bin"))
	wantCode(t, r, 1)
	if !strings.Contains(r.err, "--allow-destroy with a saved plan") {
		t.Errorf("apply FILE --allow-destroy:\n%s", r.err)
	}
	if n, _ := h.cloud.count(); n != 0 {
		t.Errorf("refused applies launched %d machines", n)
	}
}
