package control

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cloudtransit/transit/districts"
)

// simPrices prices simDistricts' flavors differently per district; a
// large machine costs four small ones, give or take.
func simPrices(t *testing.T) districts.PriceTable {
	t.Helper()
	cfg := districts.Config{Districts: append([]districts.District(nil), simDistricts...)}
	base := map[string]float64{"aws-europe": 0.067, "gce-europe": 0.0475, "os-germany": 0.03}
	for i, d := range cfg.Districts {
		cfg.Districts[i].Flavors = append([]districts.DistrictFlavor(nil), d.Flavors...)
		for j, f := range cfg.Districts[i].Flavors {
			v := base[d.ID]
			if f.Flavor == "large" {
				v *= 4.2
			}
			cfg.Districts[i].Flavors[j].HourlyPrice = &v
		}
	}
	return cfg.PriceTable()
}

// machineCost is what the sim's cloud bills an hour: every machine of
// the cluster it runs, known to transit or not.
func (s *sim) machineCost(prices districts.PriceTable) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	total := 0.0
	for _, in := range s.instances {
		if in.launched && in.State != "terminating" && in.State != "terminated" && in.Tags[districts.TagCluster] == s.cluster {
			v, _ := prices.Hourly(in.district, in.Tags[districts.TagFlavor])
			total += v
		}
	}
	return total
}

// A plan's peak bounds what the cloud bills at any moment of the apply
// that follows (a migration's surge included), and its "after" is what
// the cloud bills once the apply converged; "now" what it billed before.
func TestPlanCostBoundsTheBill(t *testing.T) {
	prices := simPrices(t)
	for seed := range 30 {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, uint64(seed), simDistricts)
			rng := rand.New(rand.NewPCG(uint64(seed), 11))
			h.sim.parallel = 1 + rng.IntN(4)
			var c districts.Cluster
			for step := range 5 {
				c = randomCluster(rng, c)
				h.prepare(c)
				h.setFaults(rng, false)
				opts := h.options(c)
				opts.Prices = prices
				p, err := MakePlan(t.Context(), opts, true)
				if err != nil {
					t.Fatal(err)
				}
				if p.Cost == nil {
					t.Fatal("a priced plan has no cost")
				}
				if got := h.sim.machineCost(prices); !near(got, p.Cost.Now) {
					t.Fatalf("step %d: the plan says the cluster costs %.4f now, the cloud bills %.4f", step, p.Cost.Now, got)
				}
				most := 0.0
				save := opts.SaveChanged
				opts.SaveChanged = func(r districts.Resources, ch Changed) error {
					most = max(most, h.sim.machineCost(prices))
					return save(r, ch)
				}
				opts.State = h.load()
				res, err := Apply(t.Context(), opts)
				if err != nil || !res.Converged {
					t.Fatalf("step %d: apply without faults: %v %+v", step, err, res)
				}
				t.Logf("step %d: now %.4f after %.4f peak %.4f billed at most %.4f", step, p.Cost.Now, p.Cost.After, p.Cost.Peak, most)
				if most > p.Cost.Peak+1e-9 {
					t.Errorf("step %d: the cloud billed %.4f an hour during the apply, above the plan's peak %.4f (now %.4f, after %.4f)",
						step, most, p.Cost.Peak, p.Cost.Now, p.Cost.After)
				}
				if got := h.sim.machineCost(prices); !near(got, p.Cost.After) {
					t.Errorf("step %d: converged, the cloud bills %.4f, the plan said %.4f", step, got, p.Cost.After)
				}
			}
		})
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

// The budget refuses growth above it and a surge above max_surge_hourly
// (max_hourly when unset); a cluster over it may shrink and migrate to
// cheaper machines, and an unpriced flavor is named.
func TestOverBudget(t *testing.T) {
	prices := simPrices(t)
	live := func(n int, district string) worldSpec {
		var ws worldSpec
		ws.nodes = append(ws.nodes, master1)
		for i := range n {
			ws.nodes = append(ws.nodes, pnode(fmt.Sprintf("paper-worker-%d", i+1), district, districts.RoleWorker, joined))
		}
		ws.platform = platformUp
		return ws
	}
	cluster := func(workers int, district string, b *districts.Budget) districts.Cluster {
		c := withLine(withLine(districts.Cluster{Type: "cluster", ID: "paper", Platform: "swarm"}, gce, districts.RoleMaster, 1), district, districts.RoleWorker, workers)
		c.Budget = b
		return c
	}
	cost := func(c districts.Cluster, ws worldSpec) *Cost {
		w := ws.world()
		in := planInput{cluster: c, districts: simDistricts[:2], world: w, ids: newNodeNumbers(c.ID, w)}
		p := buildPlan(in)
		priceActions(in, prices, &p)
		return p.Cost
	}
	surge := func(v float64) *districts.Budget { return &districts.Budget{MaxHourly: 0.4, MaxSurgeHourly: &v} }
	for _, tc := range []struct {
		name    string
		c       districts.Cluster
		ws      worldSpec
		refused string
	}{
		{"growth within", cluster(4, gce, &districts.Budget{MaxHourly: 0.4}), live(3, gce), ""},
		{"growth over", cluster(8, gce, &districts.Budget{MaxHourly: 0.4}), live(3, gce),
			"the cluster would cost 0.4275 USD/h once converged, more than budget.max_hourly 0.4000 USD/h in cluster.json (it costs 0.1900 USD/h now); grown: gce-europe/small/worker 3 → 8 (+0.2375/h)"},
		{"shrink while over", cluster(6, gce, &districts.Budget{MaxHourly: 0.1}), live(7, gce), ""},
		// 5 workers at 0.0475 move to 0.067: 0.3825 after, up to 0.43
		// when the fifth new one runs beside the last old one.
		{"migration surge over max_hourly", cluster(5, aws, &districts.Budget{MaxHourly: 0.4}), live(5, gce),
			"while it changes the cluster may cost up to 0.4300 USD/h (new nodes run before the ones they replace leave), more than budget.max_hourly 0.4000 USD/h in cluster.json; set budget.max_surge_hourly to allow the surge, or lower strategy.max_surge"},
		{"migration surge allowed", cluster(5, aws, surge(0.43)), live(5, gce), ""},
		{"migration to cheaper while over", cluster(5, gce, &districts.Budget{MaxHourly: 0.1}), live(5, aws), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cost(tc.c, tc.ws)
			if c.OverBudget != tc.refused {
				t.Errorf("over budget:\n got %q\nwant %q\n(now %.4f after %.4f peak %.4f)", c.OverBudget, tc.refused, c.Now, c.After, c.Peak)
			}
		})
	}
	c := cost(cluster(2, "os-germany", nil), live(1, gce))
	if len(c.Unpriced) != 0 {
		t.Errorf("unpriced %v, want none", c.Unpriced)
	}
	empty := districts.PriceTable{Currency: "USD"}
	w := live(1, gce).world()
	in := planInput{cluster: cluster(2, gce, &districts.Budget{MaxHourly: 1}), districts: simDistricts[:2], world: w, ids: newNodeNumbers("paper", w)}
	p := buildPlan(in)
	priceActions(in, empty, &p)
	if p.Cost == nil || len(p.Cost.Unpriced) != 1 || p.Cost.Unpriced[0] != "gce-europe/small" {
		t.Errorf("a budget over unpriced machines: %+v", p.Cost)
	}
}
