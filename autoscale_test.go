package transit_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cloudtransit/transit"
	"github.com/cloudtransit/transit/control"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// autoscaled makes the paper's workers autoscaled: GCE's (scheduling
// low, 0.0475 an hour) between 1 and 5, AWS's (high, 0.067) between 2
// and 12; the masters stay 3.
func (w *world) autoscaled(t *testing.T, budget *districts.Budget) {
	t.Helper()
	cfg, err := districts.Load(districts.Paths{Cluster: w.path("cluster.json"), Districts: w.path("districts.json")})
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range cfg.Cluster.Deployments {
		switch {
		case d.Role == districts.RoleMaster:
		case d.District == "gce-europe":
			cfg.Cluster.Deployments[i].Quantity, cfg.Cluster.Deployments[i].Autoscale = 0, &districts.Autoscale{Min: 1, Max: 5}
		default:
			cfg.Cluster.Deployments[i].Quantity, cfg.Cluster.Deployments[i].Autoscale = 0, &districts.Autoscale{Min: 2, Max: 12}
		}
	}
	cfg.Cluster.Budget = budget
	prices := map[string]float64{"gce-europe": 0.0475, "aws-europe": 0.067}
	for i, d := range cfg.Districts {
		for j := range d.Flavors {
			v := prices[d.ID]
			cfg.Districts[i].Flavors[j].HourlyPrice = &v
		}
	}
	for name, v := range map[string]any{"cluster.json": cfg.Cluster, "districts.json": cfg.Districts} {
		data, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(w.path(name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// session runs f in a session of its own, closed after it (its lock
// freed for the next).
func (w *world) session(t *testing.T, a transit.Access, f func(*transit.Session)) {
	t.Helper()
	s, err := transit.Open(t.Context(), w.options(a, "transit test"))
	if err != nil {
		t.Fatal(err)
	}
	f(s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// autoscale decides in a session without the lock, then (unless dry)
// applies the decision in one that holds it, as transit autoscale does.
func (w *world) autoscale(t *testing.T, dry bool) (report transit.AutoscaleReport, res transit.Result, err error) {
	t.Helper()
	var d transit.AutoscaleDecision
	w.session(t, transit.Observe, func(s *transit.Session) {
		d, err = s.DecideAutoscale(t.Context())
	})
	if err != nil || dry {
		return d.Report, res, err
	}
	w.session(t, transit.Change, func(s *transit.Session) {
		res, err = s.Autoscale(t.Context(), d, transit.AutoscaleOptions{})
	})
	return d.Report, res, err
}

func (w *world) workers(t *testing.T, district string) []string {
	t.Helper()
	var ids []string
	for _, n := range w.state(t).Nodes {
		if n.District == district && n.Role == districts.RoleWorker && n.Phase == districts.PhaseJoined {
			ids = append(ids, n.ID)
		}
	}
	return ids
}

// busyNodes pins a 900m workload on every node of the state: four of
// 600m then fit on none.
func (w *world) busyNodes(t *testing.T) map[string][]provider.Workload {
	t.Helper()
	busy := map[string][]provider.Workload{}
	for _, n := range w.state(t).Nodes {
		busy[n.ID] = []provider.Workload{{Name: "default/filler-" + n.ID, MilliCPU: 900}}
	}
	return busy
}

func workloads(n int, cpu int64, selector map[string]string) []provider.Workload {
	var out []provider.Workload
	for i := range n {
		out = append(out, provider.Workload{Name: fmt.Sprintf("default/web-%d", i), MilliCPU: cpu, MemoryBytes: 256 << 20, Selector: selector})
	}
	return out
}

// transit autoscale, run by cron: pending workloads get nodes in the
// cheapest deployment that fits them, within its bounds; the decision is
// kept in the state, never in cluster.json, and plan shows it; idle nodes
// go once underused for long enough, the ones the autoscaler chose and
// not the loop's usual pick; the budget refuses growth past it.
func TestAutoscale(t *testing.T) {
	w := newWorld(t)
	w.autoscaled(t, &districts.Budget{MaxHourly: 0.8})
	clusterJSON, err := os.ReadFile(w.path("cluster.json"))
	if err != nil {
		t.Fatal(err)
	}
	w.session(t, transit.Change, func(s *transit.Session) {
		if _, err := s.Apply(t.Context(), transit.ApplyOptions{}); err != nil {
			t.Fatal(err)
		}
	})
	if gce, aws := len(w.workers(t, "gce-europe")), len(w.workers(t, "aws-europe")); gce != 1 || aws != 2 {
		t.Fatalf("before any decision %d GCE and %d AWS workers, want the mins 1 and 2", gce, aws)
	}

	// Every node runs 900m of its 1000m; four workloads of 600m fit on
	// none: GCE is cheaper.
	filled := w.busyNodes(t)
	w.platform.mu.Lock()
	w.platform.pinned = filled
	w.platform.workloads = workloads(4, 600, nil)
	w.platform.mu.Unlock()
	report, _, err := w.autoscale(t, true)
	if err != nil || len(report.Decisions) != 1 || report.Decisions[0].To != 5 {
		t.Fatalf("dry run: %+v, %v", report, err)
	}
	if w.state(t).Autoscale != nil {
		t.Fatal("a dry run wrote its decision")
	}
	report, res, err := w.autoscale(t, false)
	if err != nil || !res.Converged {
		t.Fatalf("autoscale: %v %+v", err, res)
	}
	if d := report.Decisions; len(d) != 1 || d[0].Key.District != "gce-europe" || d[0].From != 1 || d[0].To != 5 ||
		!strings.Contains(d[0].Reason, "4 workloads unschedulable (default/web-0, default/web-1, default/web-2 and 1 more): 4 new node(s) at 0.0475/h each") {
		t.Fatalf("decisions %+v", d)
	}
	if n := len(w.workers(t, "gce-europe")); n != 5 {
		t.Fatalf("%d GCE workers after the scale-up, want 5", n)
	}
	after, _ := os.ReadFile(w.path("cluster.json"))
	if !bytes.Equal(after, clusterJSON) {
		t.Error("autoscale rewrote cluster.json")
	}
	var p transit.Plan
	w.session(t, transit.ReadState, func(s *transit.Session) {
		if p, err = s.Plan(t.Context(), transit.PlanOptions{}); err != nil {
			t.Fatal(err)
		}
	})
	if !slices.ContainsFunc(p.Notes, func(n string) bool {
		return strings.HasPrefix(n, "gce-europe/small/worker: autoscaled to 5 (min 1, max 5) on 2026-03-01 10:00: 4 workloads unschedulable")
	}) || len(p.Actions) != 0 {
		t.Errorf("plan after the scale-up: actions %v, notes %q", p.Actions, p.Notes)
	}

	// The workloads run on the new nodes: another run asks for nothing.
	if report, _, err := w.autoscale(t, false); err != nil || len(report.Decisions) != 0 || report.Pending != 0 {
		t.Fatalf("a run right after the scale-up: %+v, %v", report, err)
	}
	// They end, but for one, on the newest GCE worker (the loop's usual
	// first pick). Eleven minutes later the three idle new GCE workers
	// have been underused for long enough; the busy one and the first,
	// which runs 900m, stay.
	gce := w.workers(t, "gce-europe")
	busy := gce[len(gce)-1]
	w.platform.mu.Lock()
	w.platform.workloads = nil
	w.platform.pinned[busy] = workloads(1, 900, nil)
	w.platform.mu.Unlock()
	if report, _, err := w.autoscale(t, false); err != nil || len(report.Decisions) != 0 {
		t.Fatalf("a run once the workloads ended: %+v, %v", report, err)
	}
	w.clock.Advance(11 * time.Minute)
	report, res, err = w.autoscale(t, false)
	if err != nil || !res.Converged {
		t.Fatalf("scale-down: %v %+v", err, res)
	}
	if len(report.Decisions) != 1 || report.Decisions[0].To != 2 {
		t.Fatalf("scale-down decisions %+v", report.Decisions)
	}
	if got := w.workers(t, "gce-europe"); len(got) != 2 || !slices.Contains(got, busy) || !slices.Contains(got, gce[0]) {
		t.Errorf("GCE workers after the scale-down %v, want %s and the busy %s", got, gce[0], busy)
	}

	// Workloads only AWS fits, more than the budget pays for: refused,
	// and the decision is not kept.
	w.platform.mu.Lock()
	w.platform.workloads = workloads(10, 600, map[string]string{"scheduling-priority": "high"})
	w.platform.mu.Unlock()
	_, _, err = w.autoscale(t, false)
	if !errors.Is(err, control.ErrOverBudget) {
		t.Fatalf("growth past the budget: %v", err)
	}
	if n := len(w.workers(t, "aws-europe")); n != 2 {
		t.Errorf("%d AWS workers after a refused growth, want 2", n)
	}
	if a := w.state(t).Autoscale; a == nil || a.Deployments["aws-europe/small/worker"].Quantity > 2 {
		t.Errorf("the refused decision was kept: %+v", a)
	}
}

// transit autoscale reads the platform without the lock: an apply runs
// while it decides; the decision, made from a state that apply changed,
// is refused as stale and nothing of it written; decided again, it
// applies.
func TestAutoscaleDecidesWithoutTheLock(t *testing.T) {
	w := newWorld(t)
	w.autoscaled(t, nil)
	w.session(t, transit.Change, func(s *transit.Session) {
		if _, err := s.Apply(t.Context(), transit.ApplyOptions{}); err != nil {
			t.Fatal(err)
		}
	})
	filled := w.busyNodes(t)
	w.platform.mu.Lock()
	w.platform.pinned = filled
	w.platform.workloads = workloads(4, 600, nil)
	w.platform.onDemand = func() {
		// Reading the platform: another run takes the lock and applies
		// (the GCE workers' minimum raised to 2).
		w.platform.mu.Lock()
		w.platform.onDemand = nil
		w.platform.mu.Unlock()
		cfg, err := districts.Load(districts.Paths{Cluster: w.path("cluster.json"), Districts: w.path("districts.json")})
		if err != nil {
			t.Error(err)
			return
		}
		for i, d := range cfg.Cluster.Deployments {
			if d.District == "gce-europe" && d.Autoscale != nil {
				cfg.Cluster.Deployments[i].Autoscale.Min = 2
			}
		}
		data, err := json.MarshalIndent(cfg.Cluster, "", "  ")
		if err != nil {
			t.Error(err)
			return
		}
		if err := os.WriteFile(w.path("cluster.json"), data, 0o600); err != nil {
			t.Error(err)
			return
		}
		s, err := transit.Open(t.Context(), w.options(transit.Change, "transit apply"))
		if err != nil {
			t.Errorf("an apply while autoscale reads the platform: %v", err)
			return
		}
		defer s.Close()
		if _, err := s.Apply(t.Context(), transit.ApplyOptions{}); err != nil {
			t.Errorf("an apply while autoscale reads the platform: %v", err)
		}
	}
	w.platform.mu.Unlock()

	var d transit.AutoscaleDecision
	var err error
	w.session(t, transit.Observe, func(s *transit.Session) {
		d, err = s.DecideAutoscale(t.Context())
	})
	if err != nil || len(d.Report.Decisions) == 0 {
		t.Fatalf("decide: %+v, %v", d.Report, err)
	}
	before := w.state(t)
	w.session(t, transit.Change, func(s *transit.Session) {
		_, err = s.Autoscale(t.Context(), d, transit.AutoscaleOptions{})
	})
	if !errors.Is(err, transit.ErrStaleDecision) {
		t.Fatalf("a decision made before another run's apply: %v, want ErrStaleDecision", err)
	}
	if after := w.state(t); after.Serial != before.Serial || after.Autoscale != nil {
		t.Errorf("a stale decision wrote the state: serial %d → %d, autoscale %+v", before.Serial, after.Serial, after.Autoscale)
	}
	if n := len(w.workers(t, "gce-europe")); n != 2 {
		t.Fatalf("%d GCE workers after the other run's apply, want 2", n)
	}
	report, res, err := w.autoscale(t, false)
	if err != nil || !res.Converged || len(report.Decisions) == 0 {
		t.Fatalf("decided again: %+v %+v, %v", report, res, err)
	}
}
