package control

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
	"github.com/cloudtransit/transit/state"
	"github.com/cloudtransit/transit/statestore"
	"github.com/cloudtransit/transit/statestore/s3store"
	"github.com/cloudtransit/transit/statestore/s3store/s3test"
)

// bigWorld is a 10,000-node cluster in three districts, as resources.json
// would describe it, with a change pending: os-germany's 2,000 workers
// move to aws-europe, gce-europe grows by 500, and some labels changed.
func bigWorld() (districts.Cluster, world) {
	c := districts.Cluster{Type: "cluster", ID: "big", Platform: "kubernetes",
		Flavors: []districts.Flavor{{Flavor: "small"}, {Flavor: "large"}},
		Deployments: []districts.Deployment{
			{District: "gce-europe", Flavor: "small", Role: "master", Quantity: 5, Tags: map[string]string{"tier": "control"}},
			{District: "gce-europe", Flavor: "large", Role: "worker", Quantity: 4_495, Tags: map[string]string{"location": "Europe"}},
			{District: "aws-europe", Flavor: "large", Role: "worker", Quantity: 6_000, Tags: map[string]string{"location": "Germany"}},
			{District: "os-germany", Flavor: "large", Role: "worker", Quantity: 0},
		}}
	have := map[districts.DeploymentKey]int{
		{District: "gce-europe", Flavor: "small", Role: "master"}: 5,
		{District: "gce-europe", Flavor: "large", Role: "worker"}: 3_995,
		{District: "aws-europe", Flavor: "large", Role: "worker"}: 4_000,
		{District: "os-germany", Flavor: "large", Role: "worker"}: 2_000,
	}
	tags := map[string]map[string]string{}
	for _, d := range c.Deployments {
		tags[d.District+d.Role] = d.Tags
	}
	var w world
	w.terminating = map[string]int{}
	i := 0
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for k, n := range have {
		for range n {
			i++
			node := districts.Node{ID: fmt.Sprintf("big-%s-%d", k.Role, i), Cluster: "big", District: k.District, Role: k.Role,
				Flavor: k.Flavor, ProviderID: fmt.Sprintf("i-%08d", i), PublicIP: fmt.Sprintf("198.%d.%d.%d", i>>16, (i>>8)&255, i&255),
				Phase: districts.PhaseJoined, Tags: tags[k.District+k.Role], CreatedAt: t0.Add(time.Duration(i) * time.Second)}
			if i%100 == 0 {
				node.Tags = map[string]string{"location": "stale"}
			}
			w.state.Nodes = append(w.state.Nodes, node)
		}
	}
	sortState(&w.state)
	for _, d := range simDistricts {
		w.state.SecurityGroups = append(w.state.SecurityGroups, districts.SecurityGroup{ID: provider.GroupName("big", d.ID), District: d.ID, Sources: addressesOf(liveNodes(w.state))})
	}
	w.platform = platformUp
	w.members = map[string]provider.Member{}
	for _, n := range w.state.Nodes {
		w.members[n.ID] = provider.Member{NodeID: n.ID, Role: n.Role, Ready: true, Labels: n.Tags}
	}
	return c, w
}

// BenchmarkBuildPlan10000Nodes measures the plan of a 10,000-node cluster
// with a migration, a scale-up and label changes pending (target < 100 ms).
func BenchmarkBuildPlan10000Nodes(b *testing.B) {
	c, w := bigWorld()
	var p Plan
	for b.Loop() {
		p = buildPlan(planInput{cluster: c, districts: simDistricts, world: w, ids: newNodeNumbers(c.ID, w)})
	}
	b.ReportMetric(float64(len(p.Actions)), "actions")
}

// BenchmarkMakePlanWithoutRefresh10000Nodes adds what `transit plan
// --refresh=false` does around the plan: building the world from state.
func BenchmarkMakePlanWithoutRefresh10000Nodes(b *testing.B) {
	c, w := bigWorld()
	opts := Options{Cluster: c, Districts: simDistricts, State: w.state}
	for b.Loop() {
		if _, err := MakePlan(b.Context(), opts, false); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkApply measures the loop itself bringing a cluster from nothing
// to converged against the in-memory sim (its invariant checks that scan
// every machine per call off: the property tests run them), saving the
// state after every action as transit does: through state.Journal into a
// file (the file store), each save fsynced.
func BenchmarkApply(b *testing.B) {
	for _, workers := range []int{1000, 9997} {
		c, ds := bigSetup(workers)
		b.Run(fmt.Sprintf("%d-nodes-file", workers+3), func(b *testing.B) {
			benchApply(b, c, ds, func(*state.Journal) {})
		})
	}
	// The S3 store as a session uses it: a journal line object per save
	// (after a look at the state object), the state written whole now
	// and then (statestore.StateLog), on a real versitygw on loopback.
	srv := s3test.Start(b)
	srv.Bucket(b, "bench")
	for _, workers := range []int{1000, 9997} {
		c, ds := bigSetup(workers)
		b.Run(fmt.Sprintf("%d-nodes-s3", workers+3), func(b *testing.B) {
			benchApply(b, c, ds, func(j *state.Journal) {
				store, err := s3store.New(b.Context(), "bench", fmt.Sprintf("run-%d", time.Now().UnixNano()), srv.Options())
				if err != nil {
					b.Fatal(err)
				}
				j.Sink = &statestore.StateLog{Store: store, Name: "resources.json"}
			})
		})
	}
}

// benchApply applies c from nothing, saving through a journal into a file
// that sink may give a remote copy.
func benchApply(b *testing.B, c districts.Cluster, ds []districts.District, sink func(*state.Journal)) {
	for b.Loop() {
		h := newHarness(b, 1, ds)
		h.sim.parallel = DefaultParallel
		h.sim.unchecked = true
		opts := h.options(c)
		opts.MaxRounds = 5
		j := state.NewJournal(filepath.Join(b.TempDir(), "resources.json"), 0, nil)
		sink(j)
		saves := 0
		opts.SaveChanged = func(r districts.Resources, ch Changed) error {
			saves++
			return j.Save(r, ch.Nodes, ch.Groups, ch.All)
		}
		res, err := Apply(b.Context(), opts)
		if err != nil || !res.Converged {
			b.Fatalf("converged=%v err=%v", res.Converged, err)
		}
		if err := j.Close(); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(saves), "saves")
	}
}

// bigSetup is n workers spread over lines of at most 1,000 (3 districts ×
// 4 flavors) and 3 masters.
func bigSetup(n int) (districts.Cluster, []districts.District) {
	flavors := []string{"small", "large", "xl", "xxl"}
	ds := make([]districts.District, len(simDistricts))
	for i, d := range simDistricts {
		d.Flavors = nil
		for _, f := range flavors {
			df := districts.DistrictFlavor{Flavor: f}
			switch d.Provider {
			case districts.ProviderAWS:
				df.InstanceType = "m3.medium"
			case districts.ProviderGCE:
				df.MachineType = "n1-standard-1"
			default:
				df.OSFlavor = "m1.small"
			}
			d.Flavors = append(d.Flavors, df)
		}
		ds[i] = d
	}
	c := districts.Cluster{Type: "cluster", ID: "paper", Platform: "swarm"}
	for _, f := range flavors {
		c.Flavors = append(c.Flavors, districts.Flavor{Flavor: f, Cores: 1, MemoryGB: 2})
	}
	c.Deployments = append(c.Deployments, districts.Deployment{District: ds[0].ID, Flavor: "small", Role: districts.RoleMaster, Quantity: 3})
	lines := len(ds) * len(flavors)
	for i := range lines {
		q := n / lines
		if i < n%lines {
			q++
		}
		c.Deployments = append(c.Deployments, districts.Deployment{District: ds[i%len(ds)].ID, Flavor: flavors[i/len(ds)], Role: districts.RoleWorker, Quantity: q})
	}
	return c, ds
}
