package transit_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cloudtransit/transit"
	"github.com/cloudtransit/transit/control"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/platforms/ssh"
	"github.com/cloudtransit/transit/statestore/s3store/s3test"
	"github.com/cloudtransit/transit/statestore/seal"
)

// savePlan makes a refreshed plan without the lock and writes it to
// plan.json, as `transit plan --out plan.json` does.
func (w *world) savePlan(t *testing.T, o transit.Options, po transit.PlanOptions) (transit.SavedPlan, string) {
	t.Helper()
	s := openSession(t, o)
	p, err := s.Plan(t.Context(), po)
	if err != nil {
		t.Fatal(err)
	}
	sp := s.SavePlan(p, po, "v1.2.3-test")
	path := w.path("plan.json")
	if err := transit.WriteSavedPlan(path, sp); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return sp, path
}

// appliedSaved is what an apply of a saved plan did.
type appliedSaved struct {
	res   transit.Result
	err   error
	first []transit.Action // the actions round 1 started
}

// applySaved reads the plan file and runs it holding the lock, as
// `transit apply plan.json` does.
func applySaved(t *testing.T, o transit.Options, path string, ao transit.ApplyOptions) appliedSaved {
	t.Helper()
	sp, err := transit.ReadSavedPlan(path)
	if err != nil {
		t.Fatal(err)
	}
	s := openSession(t, o)
	var mu sync.Mutex
	var got appliedSaved
	ao.OnEvent = func(e transit.Event) {
		if e.Type == control.EventAction && e.Phase == control.PhaseStart && e.Round == 1 && e.Action != nil {
			mu.Lock()
			got.first = append(got.first, *e.Action)
			mu.Unlock()
		}
	}
	got.res, got.err = s.ApplySaved(t.Context(), sp, ao)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return got
}

// untouched records the clouds and the state, to check that a refused
// apply changed neither.
type untouched struct {
	calls     int32
	instances int
	state     []byte
}

func (w *world) untouched(t *testing.T) untouched {
	t.Helper()
	data, err := os.ReadFile(w.path("resources.json"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	n, _ := w.cloud.count()
	return untouched{calls: w.cloud.calls.Load(), instances: n, state: data}
}

func (u untouched) check(t *testing.T, w *world) {
	t.Helper()
	now := w.untouched(t)
	if now.calls != u.calls || now.instances != u.instances {
		t.Errorf("a refused apply changed the clouds: %d calls that change them, machines %d → %d", now.calls-u.calls, u.instances, now.instances)
	}
	if string(now.state) != string(u.state) {
		t.Errorf("a refused apply wrote resources.json:\n%s", cmp.Diff(string(u.state), string(now.state)))
	}
}

func sha256File(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// actionKeys are actions as an order-free list: the loop runs a round's
// actions in parallel.
func actionKeys(as []transit.Action) []string {
	keys := make([]string, len(as))
	for i, a := range as {
		keys[i] = fmt.Sprintf("%s %s %s%s", a.Kind, a.District, a.Node, a.Group)
	}
	slices.Sort(keys)
	return keys
}

// converge applies cluster.json as it is.
func (w *world) converge(t *testing.T) {
	t.Helper()
	applyWith(t, w.options(transit.Change, "transit apply"))
}

// CI's pattern: the plan made on a pull request is applied on merge, and
// the apply's first round does exactly its actions, then converges.
func TestSavedPlanRunsExactlyThePlan(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	sp, path := w.savePlan(t, w.options(transit.Observe, "transit plan"), transit.PlanOptions{Refresh: true})

	// What it was made from.
	if _, err := os.Stat(w.path("resources.json")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("plan wrote resources.json: %v", err)
	}
	want := transit.SavedState{Location: w.path("resources.json"), Serial: 0, SHA256: transit.SavedNoState}
	if diff := cmp.Diff(want, sp.State); diff != "" {
		t.Errorf("the state of a new cluster (-want +got):\n%s", diff)
	}
	inputs := map[string]string{"cluster.json": sha256File(t, w.path("cluster.json")), "districts.json": sha256File(t, w.path("districts.json"))}
	if diff := cmp.Diff(inputs, sp.Inputs); diff != "" {
		t.Errorf("inputs (-want +got):\n%s", diff)
	}
	if sp.FormatVersion != transit.SavedPlanFormat || sp.Transit != "v1.2.3-test" || sp.Cluster != "swarm-europe" || !sp.Made.Equal(w.clock.Now()) || !sp.Refreshed {
		t.Errorf("saved plan's origin: format %d, transit %q, cluster %q, made %s, refreshed %v", sp.FormatVersion, sp.Transit, sp.Cluster, sp.Made, sp.Refreshed)
	}
	if sum := sp.Plan.Summary(); sum != (control.Summary{Add: 18}) {
		t.Errorf("saved plan: %+v, want 18 to add", sum)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("plan file mode %v, want 0644", fi.Mode().Perm())
	}
	read, err := transit.ReadSavedPlan(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sp, read); diff != "" {
		t.Errorf("read back (-written +read):\n%s", diff)
	}

	// The plan fixes the options: the caller's are ignored.
	got := applySaved(t, w.options(transit.Change, "transit apply"), path, transit.ApplyOptions{AllowDestroy: true, ForgetMissing: true})
	if got.err != nil || !got.res.Converged {
		t.Fatalf("apply of the saved plan: %+v, %v", got.res, got.err)
	}
	if diff := cmp.Diff(actionKeys(sp.Plan.Actions), actionKeys(got.first)); diff != "" {
		t.Errorf("round 1 did other than the plan (-plan +done):\n%s", diff)
	}
	st := w.state(t)
	if len(st.Nodes) != 16 || st.Serial == 0 || st.Lineage == "" {
		t.Errorf("after the saved plan: %d nodes, serial %d, lineage %q", len(st.Nodes), st.Serial, st.Lineage)
	}

	// A plan made on a running cluster, from its state, runs as well.
	w.setQuantity(t, "aws-europe", districts.RoleWorker, 7)
	sp, path = w.savePlan(t, w.options(transit.Observe, "transit plan"), transit.PlanOptions{Refresh: true})
	if sp.State.Serial != st.Serial || sp.State.Lineage != st.Lineage || len(sp.State.SHA256) != 64 {
		t.Errorf("state of the second plan %+v, want serial %d, lineage %s and a SHA-256", sp.State, st.Serial, st.Lineage)
	}
	got = applySaved(t, w.options(transit.Change, "transit apply"), path, transit.ApplyOptions{})
	if got.err != nil || !got.res.Converged {
		t.Fatalf("apply of the second saved plan: %+v, %v", got.res, got.err)
	}
	if diff := cmp.Diff(actionKeys(sp.Plan.Actions), actionKeys(got.first)); diff != "" {
		t.Errorf("round 1 did other than the second plan (-plan +done):\n%s", diff)
	}
	joined := 0
	for _, n := range w.state(t).Nodes {
		if n.Phase == districts.PhaseJoined {
			joined++
		}
	}
	if joined != 13 {
		t.Errorf("%d nodes joined after scaling AWS workers down to 7, want 13", joined)
	}
}

// Whatever changed between the plan and its apply, the apply refuses,
// says exactly what changed, and changes neither the clouds nor the
// state.
func TestSavedPlanRefusedWhenItsOriginChanged(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		// change happens between plan and apply; it returns what the
		// refusal must say.
		change  func(t *testing.T, w *world, before districts.Resources) []string
		notSaid []string
	}{
		{"another apply ran", func(t *testing.T, w *world, before districts.Resources) []string {
			// A second pipeline applied the same cluster.json first.
			w.converge(t)
			after := w.state(t)
			return []string{fmt.Sprintf("resources.json changed since the plan: serial %d → %d", before.Serial, after.Serial)}
		}, []string{"cluster.json", "districts.json"}},
		{"cluster.json edited", func(t *testing.T, w *world, _ districts.Resources) []string {
			w.setQuantity(t, "aws-europe", districts.RoleWorker, 12)
			return []string{"cluster.json changed since the plan"}
		}, []string{"resources.json", "districts.json"}},
		{"districts.json edited", func(t *testing.T, w *world, _ districts.Resources) []string {
			data, err := os.ReadFile(w.path("districts.json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(w.path("districts.json"), append(data, '\n'), 0o600); err != nil {
				t.Fatal(err)
			}
			return []string{"districts.json changed since the plan"}
		}, []string{"resources.json", "cluster.json"}},
		{"the same serial written twice", func(t *testing.T, w *world, before districts.Resources) []string {
			// A run killed and one forced both wrote this serial.
			r := before
			r.Nodes = slices.Clone(r.Nodes)
			r.Nodes[0].PublicIP = "198.51.100.7"
			writeState(t, w, r)
			return []string{fmt.Sprintf("resources.json changed since the plan: serial %d, other content", before.Serial)}
		}, []string{"→", "cluster.json"}},
		{"another lineage", func(t *testing.T, w *world, before districts.Resources) []string {
			r := before
			r.Lineage = "another-lineage"
			writeState(t, w, r)
			return []string{"is another state: lineage another-lineage, the plan's " + before.Lineage}
		}, []string{"cluster.json"}},
		{"the world moved", func(t *testing.T, w *world, before districts.Resources) []string {
			// A machine vanished behind transit's back.
			if !w.vanish(before.Nodes[4].ID) {
				t.Fatal("nothing vanished")
			}
			return []string{"the world moved", "the first round would now also ", "launch swarm-europe-worker-15 in aws-europe"}
		}, []string{"changed since the plan:", "cluster.json"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			w.converge(t)
			w.setQuantity(t, "aws-europe", districts.RoleWorker, 11)
			_, path := w.savePlan(t, w.options(transit.Observe, "transit plan"), transit.PlanOptions{Refresh: true})
			want := c.change(t, w, w.state(t))
			before := w.untouched(t)

			got := applySaved(t, w.options(transit.Change, "transit apply"), path, transit.ApplyOptions{})
			if !errors.Is(got.err, control.ErrStalePlan) || errors.Is(got.err, transit.ErrConfig) {
				t.Fatalf("apply: %v, want control.ErrStalePlan", got.err)
			}
			msg := got.err.Error()
			for _, s := range append(want, "nothing was done", "make a new plan (transit plan --out)") {
				if !strings.Contains(msg, s) {
					t.Errorf("the refusal does not say %q:\n%s", s, msg)
				}
			}
			for _, s := range c.notSaid {
				if strings.Contains(msg, s) {
					t.Errorf("the refusal says %q, which did not change:\n%s", s, msg)
				}
			}
			if len(got.first) > 0 {
				t.Errorf("a refused plan started %d actions", len(got.first))
			}
			before.check(t, w)
		})
	}
}

// writeState writes r as resources.json, as a person or another tool
// might.
func writeState(t *testing.T, w *world, r districts.Resources) {
	t.Helper()
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(w.path("resources.json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// Only content counts: files rewritten the same, and the same state read
// another way, leave the plan good.
func TestSavedPlanSurvivesRewritesOfTheSame(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.converge(t)
	w.setQuantity(t, "aws-europe", districts.RoleWorker, 11)
	_, path := w.savePlan(t, w.options(transit.Observe, "transit plan"), transit.PlanOptions{Refresh: true})
	for _, name := range []string{"cluster.json", "districts.json"} {
		data, err := os.ReadFile(w.path(name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(w.path(name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The state re-encoded: other bytes, the same state.
	writeState(t, w, w.state(t))
	got := applySaved(t, w.options(transit.Change, "transit apply"), path, transit.ApplyOptions{})
	if got.err != nil || !got.res.Converged {
		t.Fatalf("apply: %+v, %v", got.res, got.err)
	}
	if len(w.state(t).Nodes) != 17 {
		t.Errorf("%d nodes, want 17", len(w.state(t).Nodes))
	}
}

// A plan made for one cluster is not applied to another, whatever the
// files say.
func TestSavedPlanOfAnotherCluster(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	sp, path := w.savePlan(t, w.options(transit.Observe, "transit plan"), transit.PlanOptions{Refresh: true})
	sp.Cluster = "swarm-america"
	if err := transit.WriteSavedPlan(path, sp); err != nil {
		t.Fatal(err)
	}
	before := w.untouched(t)
	got := applySaved(t, w.options(transit.Change, "transit apply"), path, transit.ApplyOptions{})
	if !errors.Is(got.err, control.ErrStalePlan) || !strings.Contains(got.err.Error(), `the plan was made for cluster "swarm-america", cluster.json describes "swarm-europe"`) {
		t.Fatalf("apply of another cluster's plan: %v", got.err)
	}
	before.check(t, w)
}

// A plan file holds no secret: not the credentials, not the state key,
// not the cluster's SSH private key.
func TestSavedPlanHoldsNoSecret(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	_, stateKey, err := seal.Generate()
	if err != nil {
		t.Fatal(err)
	}
	secrets := []string{"AKIASAVEDPLANKEYID01", "wJalrXUtnSAVEDPLANsecretEXAMPLEKEY", "FQoGZXIvYXdzSAVEDPLANsessiontoken", "/secret/gce-SAVEDPLAN-key.json", stateKey}
	creds := fmt.Sprintf(`[
  {"type": "credential", "id": "gce_default", "provider": "gce", "gce_key_file": %q},
  {"type": "credential", "id": "aws_default", "provider": "aws", "aws_access_key_id": %q, "aws_secret_access_key": %q, "aws_session_token": %q, "state_key": %q}
]`, secrets[3], secrets[0], secrets[1], secrets[2], secrets[4])
	if err := os.WriteFile(w.path("credentials.json"), []byte(creds), 0o600); err != nil {
		t.Fatal(err)
	}
	w.converge(t)
	w.setQuantity(t, "gce-europe", districts.RoleWorker, 5)
	_, path := w.savePlan(t, w.options(transit.Observe, "transit plan"), transit.PlanOptions{Refresh: true})
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	key, err := os.ReadFile(ssh.KeyPath(w.dir, "swarm-europe"))
	if err != nil {
		t.Fatal(err)
	}
	// Any line of the private key's body would be a part of it.
	for _, line := range strings.Split(string(key), "\n") {
		if len(line) >= 16 && !strings.HasPrefix(line, "-----") {
			secrets = append(secrets, line)
		}
	}
	for _, s := range append(secrets, "PRIVATE KEY", "AGE-SECRET-KEY") {
		if strings.Contains(string(data), s) {
			t.Errorf("the plan file holds the secret %q", s)
		}
	}
}

// A file that is not a whole plan of this format is refused naming it,
// before anything is opened.
func TestReadSavedPlanRefusesWhatIsNoPlan(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	_, path := w.savePlan(t, w.options(transit.Observe, "transit plan"), transit.PlanOptions{Refresh: true})
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	edit := func(f func(map[string]any)) []byte {
		var m map[string]any
		if err := json.Unmarshal(good, &m); err != nil {
			t.Fatal(err)
		}
		f(m)
		data, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	for _, c := range []struct {
		name string
		data []byte // nil: no file
		want string
	}{
		{"missing", nil, "no such file"},
		{"empty", []byte{}, "is not a plan transit wrote"},
		{"truncated", good[:len(good)/2], "is not a plan transit wrote (unexpected EOF)"},
		{"cut at a brace", good[:len(good)-2], "is not a plan transit wrote"},
		{"not JSON", []byte("Plan: 18 to add, 0 to change, 0 to remove.\n"), "is not a plan transit wrote"},
		{"two plans", append(append([]byte{}, good...), good...), "more after the plan's end"},
		{"a field unknown", edit(func(m map[string]any) { m["apply_also"] = "rm -rf /" }), `unknown field "apply_also"`},
		{"no cluster", edit(func(m map[string]any) { delete(m, "cluster") }), "no format, cluster, inputs or state"},
		{"no state hash", edit(func(m map[string]any) { m["state"] = map[string]any{"location": "x", "serial": 0} }), "no format, cluster, inputs or state"},
		{"a newer format", edit(func(m map[string]any) { m["format_version"] = 2; m["transit_version"] = "v9.0.0"; m["new"] = true }),
			"the plan was made with a newer format (2, by transit v9.0.0; this transit reads format 1)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := w.path(strings.ReplaceAll(c.name, " ", "-") + ".plan")
			if c.data != nil {
				if err := os.WriteFile(p, c.data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			_, err := transit.ReadSavedPlan(p)
			if !errors.Is(err, transit.ErrConfig) || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("ReadSavedPlan: %v, want an ErrConfig naming %s and saying %q", err, p, c.want)
			}
		})
	}
}

// A saved plan changes the cluster only through a session that may.
func TestApplySavedNeedsChangeAccess(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	sp, _ := w.savePlan(t, w.options(transit.Observe, "transit plan"), transit.PlanOptions{Refresh: true})
	s := w.open(t, transit.Observe, "transit plan")
	before := w.untouched(t)
	if _, err := s.ApplySaved(t.Context(), sp, transit.ApplyOptions{}); err == nil || !strings.Contains(err.Error(), "needs a session opened with") {
		t.Fatalf("ApplySaved on an Observe session: %v", err)
	}
	before.check(t, w)
}

// The plan's options and kind are the apply's: a teardown plan made with
// Destroy tears down, a plan made with AllowDestroy removes every node
// without the caller allowing it again.
func TestSavedPlanKeepsItsOptions(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		po   transit.PlanOptions
	}{
		{"destroy", transit.PlanOptions{Refresh: true, Destroy: true}},
		{"allow-destroy", transit.PlanOptions{Refresh: true, AllowDestroy: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			w.converge(t)
			if c.po.AllowDestroy {
				for _, r := range []string{districts.RoleWorker, districts.RoleMaster} {
					for _, d := range []string{"aws-europe", "gce-europe"} {
						w.setQuantity(t, d, r, 0)
					}
				}
			}
			sp, path := w.savePlan(t, w.options(transit.Observe, "transit plan"), c.po)
			if sp.Options.Destroy != c.po.Destroy || sp.Options.AllowDestroy != c.po.AllowDestroy {
				t.Errorf("saved options %+v, want those of %+v", sp.Options, c.po)
			}
			got := applySaved(t, w.options(transit.Change, "transit apply"), path, transit.ApplyOptions{})
			if got.err != nil || !got.res.Converged {
				t.Fatalf("apply of the saved %s plan: %+v, %v", c.name, got.res, got.err)
			}
			if diff := cmp.Diff(actionKeys(sp.Plan.Actions), actionKeys(got.first)); diff != "" {
				t.Errorf("round 1 did other than the plan (-plan +done):\n%s", diff)
			}
			if n, g := w.cloud.count(); n != 0 || (c.po.Destroy && g != 0) {
				t.Errorf("%d machines and %d groups left after the saved %s plan", n, g, c.name)
			}
		})
	}
}

// Two CI runners share a state in a bucket: a plan one saved is applied
// by the other, and refused once a third run moved the state; the
// refusal names the bucket.
func TestSavedPlanOnARemoteState(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	srv := s3test.Start(t)
	srv.Bucket(t, "state")
	w := newWorld(t)
	w.cloud.guard = ""
	url, key := onS3(t, w, srv, "ci")
	applyWith(t, w.optionsAt(url, key, transit.Change, "transit apply"))

	w.setQuantity(t, "aws-europe", districts.RoleWorker, 11)
	sp, path := w.savePlan(t, w.optionsAt(url, key, transit.Observe, "transit plan"), transit.PlanOptions{Refresh: true})
	if sp.State.Location != url || sp.State.Serial == 0 || len(sp.State.SHA256) != 64 {
		t.Fatalf("state of a plan on a bucket: %+v", sp.State)
	}
	got := applySaved(t, w.optionsAt(url, key, transit.Change, "transit apply"), path, transit.ApplyOptions{})
	if got.err != nil || !got.res.Converged {
		t.Fatalf("apply of the saved plan from the bucket: %+v, %v", got.res, got.err)
	}

	w.setQuantity(t, "aws-europe", districts.RoleWorker, 12)
	sp, path = w.savePlan(t, w.optionsAt(url, key, transit.Observe, "transit plan"), transit.PlanOptions{Refresh: true})
	applyWith(t, w.optionsAt(url, key, transit.Change, "another pipeline"))
	n, _ := w.cloud.count()
	got = applySaved(t, w.optionsAt(url, key, transit.Change, "transit apply"), path, transit.ApplyOptions{})
	want := fmt.Sprintf("%s changed since the plan: serial %d → ", url, sp.State.Serial)
	if !errors.Is(got.err, control.ErrStalePlan) || !strings.Contains(got.err.Error(), want) {
		t.Fatalf("apply of a plan the bucket moved past: %v, want it to say %q", got.err, want)
	}
	if now, _ := w.cloud.count(); now != n {
		t.Errorf("a refused plan changed the machines: %d → %d", n, now)
	}
}
