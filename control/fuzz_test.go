package control

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/cloudtransit/transit/districts"
)

// FuzzPlanFromState: `transit plan --refresh=false` on any resources.json
// that passes validation (a person may have edited it) plans without
// panicking, and every action names a node the state has or the plan
// launches.
func FuzzPlanFromState(f *testing.F) {
	c := paperCluster(3, 2, 4)
	seed := func(r districts.Resources) {
		b, err := json.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint8(1), uint8(1))
	}
	seed(districts.Resources{Type: "resources", Version: districts.ResourcesVersion, Cluster: "paper"})
	h := newHarness(f, 3, simDistricts[:2])
	h.sim.parallel = 4
	h.prepare(c)
	if _, err := h.apply(c, 0); err != nil {
		f.Fatal(err)
	}
	seed(h.load())
	st := h.load()
	for i := range st.Nodes {
		st.Nodes[i].Phase = districts.Phases[i%len(districts.Phases)]
		if i%3 == 0 {
			st.Nodes[i].District = "os-germany"
		}
	}
	seed(st)
	// What a killed run and a failing deployment leave behind.
	st = h.load()
	st.Failures = map[string]districts.Failure{"gce-europe/small/worker": {Count: 4, LastError: "join: timeout", LastAt: h.sim.clock.Peek()}}
	for i := range st.Nodes {
		n := &st.Nodes[i]
		switch i % 4 {
		case 0:
			n.Phase, n.CordonedByTransit = districts.PhaseDraining, true
		case 1:
			n.Phase, n.JoinFailed = districts.PhaseLaunched, true
		case 2:
			n.Phase, n.NotReadySince = districts.PhaseNotReady, h.sim.clock.Peek()
		}
	}
	seed(st)

	f.Fuzz(func(t *testing.T, data []byte, surge, unavailable uint8) {
		var r districts.Resources
		if json.Unmarshal(data, &r) != nil || districts.ValidateResources(r) != nil {
			return
		}
		c := c
		c.Strategy = districts.Strategy{MaxSurge: districts.Int(int(surge % 5)), MaxUnavailable: districts.Int(int(unavailable % 5))}
		p, err := MakePlan(t.Context(), Options{Cluster: c, Districts: simDistricts, State: r}, false)
		if err != nil {
			return
		}
		launched := map[string]bool{}
		for _, a := range p.Actions {
			if a.Kind == KindLaunch {
				launched[a.Node] = true
			}
		}
		for _, a := range p.Actions {
			if a.Node == "" || launched[a.Node] {
				continue
			}
			if !slices.ContainsFunc(r.Nodes, func(n districts.Node) bool { return n.ID == a.Node }) {
				t.Fatalf("action %+v names a node the state does not have", a)
			}
		}
	})
}
