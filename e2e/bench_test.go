package e2e

import (
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
	c := newCluster(b, cfg, ds)
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
