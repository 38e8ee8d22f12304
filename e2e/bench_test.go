package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/cloudtransit/transit/districts"
)

// BenchmarkSwarm10 brings a 10-node Swarm (1 manager, 9 workers) on local
// nodes from nothing to converged, then destroys it, and reports both
// times. One iteration takes tens of seconds; `go test -bench` runs one.
func BenchmarkSwarm10(b *testing.B) {
	cfg, ds := exampleCluster()
	cfg.ID = "bench"
	cfg.Deployments = []districts.Deployment{
		{District: "e2e-a", Flavor: "small", Role: districts.RoleMaster, Quantity: 1},
		{District: "e2e-a", Flavor: "small", Role: districts.RoleWorker, Quantity: 9},
	}
	ds = ds[:1]
	c := newCluster(b, swarmRoot, cfg, ds)
	var converge, destroy time.Duration
	for b.Loop() {
		start := time.Now()
		c.apply()
		converge += time.Since(start)
		if res := c.status(); len(res.Nodes) != 10 {
			b.Fatalf("%d nodes, want 10", len(res.Nodes))
		}
		start = time.Now()
		if r := c.transit("destroy", "--auto-approve"); r.code != 0 {
			b.Fatalf("destroy: exit %d\n%s", r.code, r.stderr)
		}
		destroy += time.Since(start)
	}
	b.ReportMetric(converge.Seconds()/float64(b.N), "converge-s")
	b.ReportMetric(destroy.Seconds()/float64(b.N), "destroy-s")
}

// BenchmarkKubernetes10 brings a 10-node Kubernetes cluster (1 master, 9
// workers) on local nodes from nothing to every Node Ready, as the API
// server reports it; then drains and removes one worker whose pods a
// PodDisruptionBudget protects; then destroys it. One iteration takes about
// a minute.
func BenchmarkKubernetes10(b *testing.B) {
	cfg, ds := kubernetesCluster(b)
	cfg.ID = "bench-k8s"
	cfg.Deployments = []districts.Deployment{
		{District: "e2e-a", Flavor: "small", Role: districts.RoleMaster, Quantity: 1},
		{District: "e2e-a", Flavor: "small", Role: districts.RoleWorker, Quantity: 9},
	}
	ds = ds[:1]
	c := newCluster(b, kubeRoot, cfg, ds)
	var ready, drain, destroy time.Duration
	for b.Loop() {
		c.setQuantity("e2e-a", districts.RoleWorker, 9)
		start := time.Now()
		c.apply()
		res := c.status()
		k := c.kube()
		eventually(b, 5*time.Minute, "10 Nodes Ready", func(ctx context.Context) error { return checkNodes(ctx, k, res) })
		ready += time.Since(start)

		ctx := context.Background()
		c.deployWeb(ctx, k, "guarded", 9, nil)
		eventually(b, 3*time.Minute, "guarded available", func(ctx context.Context) error { return available(ctx, k, "guarded", 9) })
		c.guard(ctx, k, "guarded", 8)
		c.setQuantity("e2e-a", districts.RoleWorker, 8)
		start = time.Now()
		c.apply()
		drain += time.Since(start)

		start = time.Now()
		if r := c.transit("destroy", "--auto-approve"); r.code != 0 {
			b.Fatalf("destroy: exit %d\n%s", r.code, r.stderr)
		}
		destroy += time.Since(start)
	}
	b.ReportMetric(ready.Seconds()/float64(b.N), "ready-s")
	b.ReportMetric(drain.Seconds()/float64(b.N), "drain-remove-s")
	b.ReportMetric(destroy.Seconds()/float64(b.N), "destroy-s")
}

// BenchmarkStreamsOnCluster is the e2e's streams step (streamsOnCluster)
// with 20 upgrades and the addon's default history (10) on the Kubernetes
// lifecycle's cluster shape: the full count the test's 5 stand for. It
// fails on a lost or repeated id, and reports the pauses at the sink and
// the times from pin to the first new record where the sink's writer
// changed (medians and maxima).
func BenchmarkStreamsOnCluster(b *testing.B) {
	cfg, ds := kubernetesCluster(b)
	c := newCluster(b, kubeRoot, cfg, ds)
	c.apply()
	var m streamsMeasure
	for b.Loop() {
		m = streamsOnCluster(b, c, 20, 0)
	}
	if m.dups > 0 {
		b.Errorf("%d duplicates in an exactly-once pipeline", m.dups)
	}
	b.ReportMetric(median(m.pauses).Seconds(), "pause-median-s")
	b.ReportMetric(slices.Max(m.pauses).Seconds(), "pause-max-s")
	b.ReportMetric(median(m.updates).Seconds(), "update-median-s")
	b.ReportMetric(slices.Max(m.updates).Seconds(), "update-max-s")
}
