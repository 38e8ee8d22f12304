package cli

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cloudtransit/transit/clock/clocktest"
	"github.com/cloudtransit/transit/control"
	"github.com/cloudtransit/transit/districts"
)

// priced gives the paper's example prices (prices.json for GCE, an
// hourly_price in districts.json for AWS) and budget, or none for nil.
func (h *harness) priced(t *testing.T, budget *districts.Budget) {
	t.Helper()
	writeJSONFile(t, h.path("prices.json"), districts.PriceList{Type: "prices", Currency: "USD", Prices: []districts.Price{
		{District: "gce-europe", Flavor: "small", MachineType: "n1-standard-1", HourlyPrice: 0.0475, Source: "test"},
	}})
	cfg, err := districts.Load(districts.Paths{Cluster: h.path("cluster.json"), Districts: h.path("districts.json"), Prices: h.path("prices.json")})
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range cfg.Districts[1].Flavors {
		if f.Flavor == "small" {
			v := 0.067
			cfg.Districts[1].Flavors[i].HourlyPrice = &v
		}
	}
	writeJSONFile(t, h.path("districts.json"), cfg.Districts)
	cfg.Cluster.Budget = budget
	writeJSONFile(t, h.path("cluster.json"), cfg.Cluster)
}

// The paper's cluster: 6 GCE nodes at 0.0475 and 10 AWS ones at 0.067,
// 0.955 an hour.
func TestPlanPricedGolden(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.clock = clocktest.NewFake(time.Date(2026, 3, 1, 10, 30, 0, 0, time.UTC))
	h.priced(t, &districts.Budget{MaxHourly: 1})
	r := h.run(t, runOpts{}, "plan", "--refresh=false")
	wantCode(t, r, 0)
	golden(t, "plan-kratzke2017-priced.golden", r.out)
	r = h.run(t, runOpts{}, "plan", "--refresh=false", "--json")
	wantCode(t, r, 0)
	checkJSON(t, []byte(r.out))
	for _, want := range []string{`"hourly_after": 0.955`, `"monthly_after": 697.15`, `"hourly": 0.067`, `"max_hourly": 1`, `"over_budget": ""`} {
		if !strings.Contains(r.out, want) {
			t.Errorf("plan --json lacks %s:\n%s", want, r.out)
		}
	}
}

// A plan over the budget is refused before anything is launched; only
// growth is refused: a cluster over a lowered budget may still shrink,
// and destroy always runs.
func TestBudgetRefusesGrowth(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.priced(t, &districts.Budget{MaxHourly: 0.5})
	r := h.run(t, runOpts{}, "apply", "--auto-approve", "--json")
	wantCode(t, r, 1)
	if !errors.Is(r.error, control.ErrOverBudget) || !strings.Contains(r.out, `"error_kind":"over_budget"`) ||
		!strings.Contains(r.err, "0.9550 USD/h once converged, more than budget.max_hourly 0.5000 USD/h") ||
		!strings.Contains(r.err, "aws-europe/small/worker 0 → 10 (+0.6700/h)") {
		t.Errorf("apply over budget:\n%s", r)
	}
	if n, g := h.cloud.count(); n != 0 || g != 0 {
		t.Fatalf("%d machines and %d groups after an apply over budget, want none", n, g)
	}
	r = h.run(t, runOpts{}, "plan", "--out", h.path("plan.bin"))
	wantCode(t, r, 1)
	if !strings.Contains(r.out, "! budget: apply refuses this plan") {
		t.Errorf("plan over budget does not say apply refuses it:\n%s", r)
	}
	if _, err := os.Stat(h.path("plan.bin")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("plan over budget saved the plan: %v", err)
	}

	h.priced(t, &districts.Budget{MaxHourly: 1})
	wantCode(t, h.run(t, runOpts{}, "apply", "--auto-approve"), 0)
	r = h.run(t, runOpts{}, "status")
	wantCode(t, r, 0)
	for _, want := range []string{"# district aws-europe (0.6700 USD an hour)", "Cost: 0.9550 USD an hour, 697.15 a month of 730 hours"} {
		if !strings.Contains(r.out, want) {
			t.Errorf("status lacks %q:\n%s", want, r.out)
		}
	}
	r = h.run(t, runOpts{}, "status", "--json")
	wantCode(t, r, 0)
	checkJSON(t, []byte(r.out))
	if !strings.Contains(r.out, `"hourly": 0.955`) || !strings.Contains(r.out, `"machines": 10`) {
		t.Errorf("status --json lacks the cost:\n%s", r.out)
	}
	h.setQuantity(t, "aws-europe", "worker", 12) // 1.089 an hour
	r = h.run(t, runOpts{}, "apply", "--auto-approve")
	wantCode(t, r, 1)
	if !errors.Is(r.error, control.ErrOverBudget) || !strings.Contains(r.err, "aws-europe/small/worker 10 → 12 (+0.1340/h)") {
		t.Errorf("growth over budget:\n%s", r)
	}
	if n, _ := h.cloud.count(); n != 16 {
		t.Fatalf("%d machines after a refused growth, want 16", n)
	}

	// A budget below what runs now: shrinking to 0.821 an hour, still
	// over 0.8, runs; the plan says the budget is exceeded.
	h.priced(t, &districts.Budget{MaxHourly: 0.8})
	h.setQuantity(t, "aws-europe", "worker", 8)
	r = h.run(t, runOpts{}, "plan")
	wantCode(t, r, 0)
	if !strings.Contains(r.out, "-0.0670/h") || !strings.Contains(r.out, "exceeded now; only growth is refused") {
		t.Errorf("plan of a shrink over budget:\n%s", r)
	}
	wantCode(t, h.run(t, runOpts{}, "apply", "--auto-approve"), 0)
	if n, _ := h.cloud.count(); n != 14 {
		t.Fatalf("%d machines after shrinking, want 14", n)
	}
	h.priced(t, &districts.Budget{MaxHourly: 0.01})
	wantCode(t, h.run(t, runOpts{}, "destroy", "--auto-approve"), 0)
	if n, g := h.cloud.count(); n != 0 || g != 0 {
		t.Errorf("%d machines and %d groups after destroy over budget, want none", n, g)
	}
}

// Bad prices and budgets are configuration errors naming the file and
// field.
func TestBudgetConfigErrors(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.priced(t, &districts.Budget{MaxHourly: 1, Currency: "EUR"})
	r := h.run(t, runOpts{}, "plan", "--refresh=false")
	wantCode(t, r, 1)
	if !strings.Contains(r.err, "cluster.json: budget.currency: the budget is in EUR, the prices (prices.json) in USD") {
		t.Errorf("a budget in another currency:\n%s", r)
	}
	if err := os.WriteFile(h.path("prices.json"), []byte(`{"type": "prices", "prices": [{"district": "gce-europe", "flavor": "small", "hourly_price": -1}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	r = h.run(t, runOpts{}, "plan", "--refresh=false")
	wantCode(t, r, 1)
	if !strings.Contains(r.err, "prices.json: prices[0].hourly_price: must not be negative, got -1") {
		t.Errorf("a negative price:\n%s", r)
	}
}
