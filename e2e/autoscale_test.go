package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloudtransit/transit/districts"
)

// autoscaleCluster is a manager in district A and autoscaled workers in
// A (0.10 an hour) and B (0.04): B is where new capacity should go. The
// flavor says 2 cores, what a local node's dockerd reports.
func autoscaleCluster() (districts.Cluster, []districts.District) {
	price := func(v float64) *float64 { return &v }
	c := districts.Cluster{
		Type: "cluster", ID: "e2e-as", Platform: "swarm",
		Flavors: []districts.Flavor{{Flavor: "small", Cores: 2, MemoryGB: 1, DiskGB: 10}},
		Deployments: []districts.Deployment{
			{District: "e2e-a", Flavor: "small", Role: districts.RoleMaster, Quantity: 1},
			{District: "e2e-a", Flavor: "small", Role: districts.RoleWorker, Autoscale: &districts.Autoscale{Max: 3}},
			{District: "e2e-b", Flavor: "small", Role: districts.RoleWorker, Autoscale: &districts.Autoscale{Max: 3}},
		},
		Autoscaler: &districts.Autoscaler{ScaleDownAfter: districts.Duration(15 * time.Second), ScaleDownDelayAfterAdd: districts.Duration(15 * time.Second)},
	}
	ds := []districts.District{
		{Type: "district", ID: "e2e-a", Provider: "local", LocalSubnet: "10.241.1.0/24", Flavors: []districts.DistrictFlavor{{Flavor: "small", HourlyPrice: price(0.10)}}},
		{Type: "district", ID: "e2e-b", Provider: "local", LocalSubnet: "10.241.2.0/24", Flavors: []districts.DistrictFlavor{{Flavor: "small", HourlyPrice: price(0.04)}}},
	}
	return c, ds
}

// autoscaleRun is what one run of the scenario measured.
type autoscaleRun struct {
	tasks                  int
	firstNode, allRunning  time.Duration // from the service's creation
	idleGone               time.Duration // from the service's removal
	grewIn                 map[string]int
	autoscaleRuns, idleRun int
}

// testAutoscale: a service whose tasks reserve more than the manager
// has left waits; transit autoscale, run as cron would, adds workers in
// the cheaper district until every task runs; the service removed, the
// idle workers go once underused for scale_down_after.
func testAutoscale(t *testing.T) {
	cfg, ds := autoscaleCluster()
	c := newCluster(t, swarmRoot, cfg, ds)
	run := autoscaleScenario(t, c, 2)
	t.Logf("autoscale: %d tasks: first new node ready after %s, all running after %s (%d runs), idle nodes gone %s after the service (%d runs); grew %v",
		run.tasks, run.firstNode, run.allRunning, run.autoscaleRuns, run.idleGone, run.idleRun, run.grewIn)
}

// autoscaleScenario runs the scenario with tasks tasks of 1.5 CPUs (one
// per node) on a fresh cluster c.
func autoscaleScenario(tb testing.TB, c *cluster, tasks int) autoscaleRun {
	c.apply()
	res := c.status()
	if len(res.Nodes) != 1 {
		tb.Fatalf("%d nodes before any decision, want the manager alone", len(res.Nodes))
	}
	m := c.manager(res)
	clusterJSON, err := os.ReadFile(filepath.Join(c.dir, "cluster.json"))
	if err != nil {
		tb.Fatal(err)
	}
	began := time.Now()
	c.mustOn(m, fmt.Sprintf(`docker service create --detach --name e2e-as-web --replicas %d --reserve-cpu 1.5 %s sleep 3600 >/dev/null`, tasks, image))
	run := autoscaleRun{tasks: tasks, grewIn: map[string]int{}}
	// cron, every 2 seconds: one run at a time, as the lock makes it.
	deadline := time.Now().Add(5 * time.Minute)
	for {
		r := c.transit("autoscale", "--json")
		run.autoscaleRuns++
		if r.code != 0 {
			tb.Fatalf("autoscale: exit %d\n%s", r.code, r)
		}
		now := c.statusNow()
		workers := 0
		for _, n := range now.Nodes {
			if n.Role == districts.RoleWorker && n.Phase == districts.PhaseJoined {
				workers++
				if run.firstNode == 0 {
					run.firstNode = time.Since(began)
				}
			}
		}
		out := c.mustOn(m, `docker service ps --filter desired-state=running --format '{{.CurrentState}}' e2e-as-web`)
		if strings.Count(out, "Running") == tasks {
			run.allRunning = time.Since(began)
			for _, n := range now.Nodes {
				if n.Role == districts.RoleWorker {
					run.grewIn[n.District]++
				}
			}
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("after %d runs of autoscale the tasks are not all running:\n%s\nlast run:\n%s", run.autoscaleRuns, out, r.stdout)
		}
		time.Sleep(2 * time.Second)
	}
	// One task fits on the manager; the others got workers in the
	// cheaper district, one each.
	if run.grewIn["e2e-b"] != tasks-1 || run.grewIn["e2e-a"] != 0 {
		tb.Errorf("workers by district %v, want %d in the cheaper e2e-b and none in e2e-a", run.grewIn, tasks-1)
	}
	if data, err := os.ReadFile(filepath.Join(c.dir, "cluster.json")); err != nil || !bytes.Equal(data, clusterJSON) {
		tb.Errorf("cluster.json was rewritten (%v):\n%s", err, data)
	}

	removed := time.Now()
	c.mustOn(m, `docker service rm e2e-as-web >/dev/null`)
	deadline = time.Now().Add(3 * time.Minute)
	for {
		r := c.transit("autoscale")
		run.idleRun++
		if r.code != 0 {
			tb.Fatalf("autoscale after the service went: exit %d\n%s", r.code, r)
		}
		if len(c.statusNow().Nodes) == 1 {
			run.idleGone = time.Since(removed)
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("idle workers still there after %d runs of autoscale:\n%s", run.idleRun, r.stdout)
		}
		time.Sleep(2 * time.Second)
	}
	return run
}

// BenchmarkAutoscale measures the scenario with more tasks: seconds from
// the workload's arrival until the first new node is ready and until
// every task runs, where the nodes went, and seconds from its removal
// until the idle nodes are gone (scale_down_after 15 s). make
// bench-autoscale.
func BenchmarkAutoscale(b *testing.B) {
	for _, tasks := range []int{2, 4} {
		b.Run(fmt.Sprintf("tasks=%d", tasks), func(b *testing.B) {
			cfg, ds := autoscaleCluster()
			cfg.Deployments[2].Autoscale.Max = tasks
			c := newCluster(b, swarmRoot, cfg, ds)
			run := autoscaleScenario(b, c, tasks)
			b.ReportMetric(run.firstNode.Seconds(), "s-first-node")
			b.ReportMetric(run.allRunning.Seconds(), "s-all-running")
			b.ReportMetric(run.idleGone.Seconds(), "s-idle-gone")
			b.Logf("%d tasks: workers by district %v", tasks, run.grewIn)
			if r := c.transit("destroy", "--auto-approve"); r.code != 0 {
				b.Fatalf("destroy: %s", r.stderr)
			}
		})
	}
}
