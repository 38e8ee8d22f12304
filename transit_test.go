package transit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudtransit/transit"
	"github.com/cloudtransit/transit/clock/clocktest"
	"github.com/cloudtransit/transit/control"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/filelock"
)

// paper is the multi-cloud example transit's formats come from: a Swarm of
// 3 masters and 13 workers in a GCE and an AWS district.
const paper = "testdata/kratzke2017"

// world is a working directory with the paper's files, and the fake cloud
// and platform every session of a test shares.
type world struct {
	dir      string
	cloud    *fakeCloud
	platform *fakePlatform
	clock    *clocktest.Fake
}

// vanish deletes node's machine behind transit's back; its member goes
// down, as the platform sees once its heartbeats stop.
func (w *world) vanish(node string) bool {
	if !w.cloud.vanish(node) {
		return false
	}
	p := w.platform
	p.mu.Lock()
	defer p.mu.Unlock()
	if m, ok := p.members[node]; ok {
		m.Ready = false
		p.members[node] = m
	}
	return true
}

func newWorld(t *testing.T) *world {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{"cluster.json", "districts.json", "credentials.json"} {
		data, err := os.ReadFile(filepath.Join(paper, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	w := &world{dir: dir, platform: newFakePlatform(), clock: clocktest.NewFake(time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC))}
	w.cloud = newFakeCloud(w.path("resources.json"))
	return w
}

func (w *world) path(name string) string { return filepath.Join(w.dir, name) }

// options are a session's options in the world, as a MAPE loop would give
// them.
func (w *world) options(a transit.Access, command string) transit.Options {
	return transit.Options{
		Files: districts.Paths{
			Cluster:     w.path("cluster.json"),
			Districts:   w.path("districts.json"),
			Credentials: w.path("credentials.json"),
			State:       w.path("resources.json"),
		},
		Access:  a,
		Command: command,
		Drivers: registry(w.cloud, w.platform),
		Clock:   w.clock,
	}
}

func (w *world) open(t *testing.T, a transit.Access, command string) *transit.Session {
	t.Helper()
	return openSession(t, w.options(a, command))
}

// openSession opens a session the test's cleanup closes.
func openSession(t *testing.T, o transit.Options) *transit.Session {
	t.Helper()
	s, err := transit.Open(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// state reads resources.json as it is on disk.
func (w *world) state(t *testing.T) districts.Resources {
	t.Helper()
	r, err := districts.LoadResources(w.path("resources.json"))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// setQuantity rewrites cluster.json with a new quantity for one line, as a
// monitor does.
func (w *world) setQuantity(t *testing.T, district, role string, quantity int) {
	t.Helper()
	cfg, err := districts.Load(districts.Paths{Cluster: w.path("cluster.json"), Districts: w.path("districts.json")})
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range cfg.Cluster.Deployments {
		if d.District == district && d.Role == role {
			cfg.Cluster.Deployments[i].Quantity = quantity
		}
	}
	data, err := json.MarshalIndent(cfg.Cluster, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(w.path("cluster.json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// savedEachAction returns an OnEvent that checks, whenever an action
// finishes, that resources.json on disk already holds what it did, and
// that the serial never goes back. Problems are reported through errs.
func savedEachAction(w *world, errs *[]string, mu *sync.Mutex) func(transit.Event) {
	var last int64
	return func(e transit.Event) {
		if e.Type != control.EventAction || e.Phase != control.PhaseFinish || e.Error != "" || e.Action == nil {
			return
		}
		a := *e.Action
		// Read under the lock: the file's serial only grows, so reads in
		// the lock's order see it grow.
		mu.Lock()
		defer mu.Unlock()
		r, err := districts.LoadResources(w.path("resources.json"))
		fail := func(format string, args ...any) {
			*errs = append(*errs, fmt.Sprintf("after %s %s%s: ", a.Kind, a.Node, a.Group)+fmt.Sprintf(format, args...))
		}
		if err != nil {
			fail("%v", err)
			return
		}
		if r.Serial < last {
			fail("serial went back from %d to %d", last, r.Serial)
		}
		last = r.Serial
		node, hasNode := findNode(r, a.Node)
		hasGroup := false
		for _, g := range r.SecurityGroups {
			hasGroup = hasGroup || g.ID == a.Group
		}
		switch a.Kind {
		case control.KindLaunch:
			if !hasNode || node.ProviderID == "" {
				fail("resources.json has no machine for the node: %+v", node)
			}
		case control.KindInit, control.KindJoin:
			if node.Phase != districts.PhaseJoined {
				fail("resources.json says the node is %q, not joined", node.Phase)
			}
		case control.KindCreateGroup:
			if !hasGroup {
				fail("resources.json has no such group")
			}
		case control.KindTerminate:
			if hasNode && node.Phase != districts.PhaseTerminating {
				fail("resources.json says the node is %q, not terminating", node.Phase)
			}
		case control.KindDeleteGroup:
			if hasGroup {
				fail("resources.json still has the group")
			}
		}
	}
}

func findNode(r districts.Resources, id string) (districts.Node, bool) {
	for _, n := range r.Nodes {
		if n.ID == id {
			return n, true
		}
	}
	return districts.Node{}, false
}

// TestMAPELoop embeds transit as an auto-scaling loop would: open, plan,
// apply the approved plan, read the result, close; then a monitor scales
// the workers down and the next iteration applies that.
func TestMAPELoop(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := t.Context()

	s, err := transit.Open(ctx, w.options(transit.Change, "autoscaler"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Plan(ctx, transit.PlanOptions{Refresh: true})
	if err != nil {
		t.Fatal(err)
	}
	if sum := p.Summary(); sum != (control.Summary{Add: 18}) {
		t.Errorf("plan of a new cluster: %+v, want 18 to add", sum)
	}
	if _, err := os.Stat(w.path("resources.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Plan wrote resources.json: %v", err)
	}

	var mu sync.Mutex
	var problems []string
	saved := savedEachAction(w, &problems, &mu)
	var second error
	var secondOnce sync.Once
	res, err := s.Apply(ctx, transit.ApplyOptions{
		Confirmed: &p,
		OnEvent: func(e transit.Event) {
			saved(e)
			// While the loop runs, another run cannot take the cluster.
			if e.Type == control.EventAction && e.Phase == control.PhaseStart {
				secondOnce.Do(func() {
					s2, err := transit.Open(ctx, w.options(transit.Change, "a person"))
					if err == nil {
						err = errors.Join(errors.New("a second session opened for apply"), s2.Close())
					}
					second = err
				})
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
	if !res.Converged || res.Rounds < 1 {
		t.Errorf("result %+v, want converged", res)
	}
	if !errors.Is(second, transit.ErrLocked) {
		t.Fatalf("second Open during Apply: %v, want ErrLocked", second)
	}
	want := fmt.Sprintf(`resources.json is locked by pid %d on host `, os.Getpid())
	if msg := second.Error(); !strings.Contains(msg, want) || !strings.Contains(msg, `("autoscaler", started `) {
		t.Errorf("second Open's error %q does not name the holder", msg)
	}

	// The result: the session's state is what is on disk.
	onDisk := w.state(t)
	if got := s.State(); got.Serial != onDisk.Serial || len(got.Nodes) != 16 || len(got.SecurityGroups) != 2 {
		t.Errorf("session state: serial %d, %d nodes, %d groups; on disk serial %d", got.Serial, len(got.Nodes), len(got.SecurityGroups), onDisk.Serial)
	}
	for _, n := range onDisk.Nodes {
		if n.Phase != districts.PhaseJoined {
			t.Errorf("node %s is %s", n.ID, n.Phase)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := s.Plan(ctx, transit.PlanOptions{}); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("Plan after Close: %v", err)
	}

	// Close released the lock: the next iteration opens, after the
	// monitor asked for 4 AWS workers instead of 10.
	w.setQuantity(t, "aws-europe", districts.RoleWorker, 4)
	s = w.open(t, transit.Change, "autoscaler")
	problems = nil
	saved = savedEachAction(w, &problems, &mu)
	var confirmed *transit.Plan
	res, err = s.Apply(ctx, transit.ApplyOptions{
		MaxRounds: 20,
		Confirm: func(_ context.Context, p transit.Plan) error {
			if sum := p.Summary(); sum.Remove != 6 || sum.Add != 0 {
				return fmt.Errorf("the monitor wanted 6 removals, the plan has %+v", sum)
			}
			confirmed = &p
			return nil
		},
		OnEvent: saved,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
	if confirmed == nil || !res.Converged {
		t.Fatalf("scale-down: confirmed %v, result %+v", confirmed != nil, res)
	}
	// Terminations are asynchronous: the removed machines may still be
	// terminating when the loop converged.
	live := 0
	for _, n := range w.state(t).Nodes {
		switch n.Phase {
		case districts.PhaseJoined:
			live++
		case districts.PhaseTerminating:
		default:
			t.Errorf("node %s is %s after the scale-down", n.ID, n.Phase)
		}
	}
	if live != 10 {
		t.Errorf("%d joined nodes in resources.json after the scale-down, want 10", live)
	}
}

// Destroy never builds the platform driver and leaves nothing behind.
func TestDestroy(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	s := w.open(t, transit.Change, "autoscaler")
	if _, err := s.Apply(t.Context(), transit.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	built := w.platform.built.Load()

	s = w.open(t, transit.Change, "teardown")
	p, err := s.Plan(t.Context(), transit.PlanOptions{Refresh: true, Destroy: true})
	if err != nil {
		t.Fatal(err)
	}
	// The groups go in a later round, once their machines are gone.
	if sum := p.Summary(); sum.Remove != 16 {
		t.Errorf("destroy plan %+v, want 16 to remove", sum)
	}
	var mu sync.Mutex
	var problems []string
	res, err := s.Destroy(t.Context(), transit.ApplyOptions{Confirmed: &p, OnEvent: savedEachAction(w, &problems, &mu)})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
	if !res.Converged {
		t.Errorf("destroy: %+v", res)
	}
	if w.platform.built.Load() != built {
		t.Error("Destroy built the platform driver")
	}
	if n, g := w.cloud.count(); n != 0 || g != 0 {
		t.Errorf("%d machines and %d groups after destroy", n, g)
	}
	if st := w.state(t); len(st.Nodes) != 0 || len(st.SecurityGroups) != 0 {
		t.Errorf("resources.json after destroy: %d nodes, %d groups", len(st.Nodes), len(st.SecurityGroups))
	}
}

// A plan the caller does not approve changes nothing.
func TestConfirmRefused(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	s := w.open(t, transit.Change, "autoscaler")
	shown := 0
	_, err := s.Apply(t.Context(), transit.ApplyOptions{
		OnPlan:  func(transit.Plan) error { shown++; return nil },
		Confirm: func(context.Context, transit.Plan) error { return errors.New("18 machines is over budget") },
	})
	if !errors.Is(err, transit.ErrCancelled) || err.Error() != "apply cancelled: 18 machines is over budget" {
		t.Errorf("got %v, want ErrCancelled saying why", err)
	}
	if shown != 1 {
		t.Errorf("OnPlan called %d times", shown)
	}
	if w.cloud.calls.Load() != 0 {
		t.Errorf("%d calls changed the cloud", w.cloud.calls.Load())
	}
	if _, err := os.Stat(w.path("resources.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused apply wrote resources.json: %v", err)
	}
}

// Bad input is a clear error naming the file and the field; resources.json
// stays as it was, byte for byte, and no lock is left held.
func TestBadInput(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		file  string // rewritten with data
		data  string
		wants []string
		// drivers says the drivers were built before the problem showed.
		drivers bool
	}{
		{
			name: "unknown district",
			file: "cluster.json",
			data: `{"type": "cluster", "id": "swarm-europe", "platform": "swarm",
  "flavors": [{"flavor": "small", "cores": 1, "memory_gb": 3.75, "disk_gb": 20}],
  "deployments": [{"district": "gce-eu", "flavor": "small", "role": "master", "quantity": 1}]}`,
			wants: []string{`cluster.json: deployments[0].district: "gce-eu" is not defined in districts.json (known: gce-europe, aws-europe); did you mean "gce-europe"?`},
		},
		{
			name:  "malformed cluster.json",
			file:  "cluster.json",
			data:  `{"type": "cluster", "id": "swarm-europe",`,
			wants: []string{"cluster.json: ", "line 1"},
		},
		{
			name:  "malformed districts.json",
			file:  "districts.json",
			data:  `[{"type": "district", "id": "gce-europe" "provider": "gce"}]`,
			wants: []string{"districts.json: ", "line 1"},
		},
		{
			name:  "misspelt key in districts.json",
			file:  "districts.json",
			data:  `[{"type": "district", "id": "gce-europe", "provider": "gce", "gce_project": "p", "gce_region": "europe-west1", "gce_zones": ["europe-west1-b"], "flavors": [{"flavor": "small", "machine_type": "n1-standard-1"}]}]`,
			wants: []string{`districts.json: [0]: unknown key "gce_project"`},
		},
		{
			name:  "malformed resources.json",
			file:  "resources.json",
			data:  `{"type": "resources", "version": 2, "cluster": "swarm-europe", "nodes": [{"id": 7}]}`,
			wants: []string{"resources.json: nodes[0].id"},
		},
		{
			name:  "state of another cluster",
			file:  "resources.json",
			data:  `{"type": "resources", "version": 2, "cluster": "other"}`,
			wants: []string{`resources.json holds the state of cluster "other", but cluster.json describes cluster "swarm-europe"`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			// A cluster runs; then one of its files goes bad.
			s := w.open(t, transit.Change, "autoscaler")
			if _, err := s.Apply(t.Context(), transit.ApplyOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(w.path(tc.file), []byte(tc.data), 0o600); err != nil {
				t.Fatal(err)
			}
			before, err := os.ReadFile(w.path("resources.json"))
			if err != nil {
				t.Fatal(err)
			}
			built, calls := w.cloud.built.Load(), w.cloud.calls.Load()

			for _, a := range []transit.Access{transit.Change, transit.Observe, transit.ReadState} {
				_, err := transit.Open(t.Context(), w.options(a, "autoscaler"))
				if !errors.Is(err, transit.ErrConfig) {
					t.Fatalf("Open(%v): %v, want ErrConfig", a, err)
				}
				for _, want := range tc.wants {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("Open(%v): %q does not say %q", a, err, want)
					}
				}
			}
			after, err := os.ReadFile(w.path("resources.json"))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(before, after) {
				t.Error("resources.json changed")
			}
			if w.cloud.built.Load() != built || w.cloud.calls.Load() != calls {
				t.Error("a driver was built or the cloud changed")
			}
			l, err := filelock.Acquire(t.Context(), w.path("resources.json"), filelock.Options{})
			if err != nil {
				t.Fatalf("the lock is still held: %v", err)
			}
			if err := l.Release(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Plan and Status observe without the lock and write nothing, beside a
// session that holds it; a session that only reads needs no driver.
func TestObserveBesideTheLock(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	s := w.open(t, transit.Change, "autoscaler")
	if _, err := s.Apply(t.Context(), transit.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	if !w.vanish("swarm-europe-worker-4") {
		t.Fatal("no machine swarm-europe-worker-4")
	}
	before, err := os.ReadFile(w.path("resources.json"))
	if err != nil {
		t.Fatal(err)
	}

	calls := w.cloud.calls.Load()

	// The apply's session still holds the lock; a session that only
	// observes needs none, and changes nothing.
	o := w.open(t, transit.Observe, "")
	st, err := o.Status(t.Context(), transit.StatusOptions{Refresh: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.State.Nodes) != 15 || !st.Refreshed || st.PlatformError != "" {
		t.Errorf("status: %d nodes, refreshed %v, platform error %q", len(st.State.Nodes), st.Refreshed, st.PlatformError)
	}
	p, err := o.Plan(t.Context(), transit.PlanOptions{Refresh: true})
	if err != nil {
		t.Fatal(err)
	}
	if sum := p.Summary(); sum.Add != 1 {
		t.Errorf("plan after a machine vanished: %+v, want 1 to add", sum)
	}

	r := w.open(t, transit.ReadState, "")
	if st, err := r.Status(t.Context(), transit.StatusOptions{}); err != nil || len(st.State.Nodes) != 16 || st.Refreshed {
		t.Errorf("status of resources.json: %v, %d nodes", err, len(st.State.Nodes))
	}
	if _, err := r.Plan(t.Context(), transit.PlanOptions{Refresh: true}); err == nil || !strings.Contains(err.Error(), "needs a session opened with Observe access") {
		t.Errorf("refresh with ReadState access: %v", err)
	}
	if _, err := r.Apply(t.Context(), transit.ApplyOptions{}); err == nil || !strings.Contains(err.Error(), "needs a session opened with Change access") {
		t.Errorf("apply with ReadState access: %v", err)
	}
	if _, err := r.Kubeconfig(t.Context()); !errors.Is(err, transit.ErrNotKubernetes) {
		t.Errorf("kubeconfig of a swarm: %v", err)
	}

	after, err := os.ReadFile(w.path("resources.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Error("Plan or Status wrote resources.json")
	}
	if w.cloud.calls.Load() != calls {
		t.Error("Plan or Status changed the cloud")
	}
}

// Without a driver for a district's provider, Open says which and what the
// build has.
func TestNoDriver(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	o := w.options(transit.Observe, "")
	o.Drivers = transit.Drivers{}
	_, err := transit.Open(t.Context(), o)
	if !errors.Is(err, transit.ErrConfig) || !strings.Contains(err.Error(), `district "gce-europe": no infrastructure driver for provider "gce" in this build (available: none)`) {
		t.Errorf("got %v", err)
	}
}

// A cancelled apply saves what it did: the next session finishes.
func TestApplyInterrupted(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	w.platform.onInstall = func(ictx context.Context, _ districts.Node) error {
		cancel()
		<-ictx.Done()
		return ictx.Err()
	}
	s := w.open(t, transit.Change, "autoscaler")
	res, err := s.Apply(ctx, transit.ApplyOptions{})
	if !errors.Is(err, context.Canceled) || res.Rounds != 1 || len(res.Left) == 0 {
		t.Fatalf("interrupted apply: %v, %+v", err, res)
	}
	n, _ := w.cloud.count()
	if got := len(w.state(t).Nodes); n == 0 || got != n {
		t.Errorf("resources.json has %d nodes, the cloud %d machines", got, n)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	w.platform.mu.Lock()
	w.platform.onInstall = nil
	w.platform.mu.Unlock()
	s = w.open(t, transit.Change, "autoscaler")
	if res, err := s.Apply(t.Context(), transit.ApplyOptions{}); err != nil || !res.Converged {
		t.Fatalf("the next apply: %v, %+v", err, res)
	}
	if n, _ := w.cloud.count(); n != 16 {
		t.Errorf("%d machines, want 16", n)
	}
}
