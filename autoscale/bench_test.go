package autoscale

import (
	"fmt"
	"testing"
	"time"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// BenchmarkDecide: the decider at 1,000 nodes (ten deployments in five
// districts, each node nearly full with 20 workloads) and 10,000
// pending workloads of mixed sizes and selectors (goal: under a second).
func BenchmarkDecide(b *testing.B) {
	var gs []Group
	in := Input{NodeGroup: map[string]districts.DeploymentKey{}, UnderusedSince: map[string]time.Time{}, Settings: settings(), Now: now}
	for i := range 10 {
		k := districts.DeploymentKey{District: fmt.Sprintf("d%d", i%5), Flavor: fmt.Sprintf("f%d", i/5), Role: districts.RoleWorker}
		gs = append(gs, Group{Key: k, Current: 100, Max: 1000, Labels: map[string]string{"zone": k.District}, MilliCPU: 3900 * int64(1+i/5), MemoryBytes: 14 * gib * int64(1+i/5), Price: 0.1 + float64(i)/100, Priced: true})
		for j := range 100 {
			id := fmt.Sprintf("%s-%s-%d", k.District, k.Flavor, j)
			n := provider.NodeLoad{Node: id, MilliCPU: 3900, MemoryBytes: 14 * gib, Schedulable: true, Labels: map[string]string{"zone": k.District}}
			for w := range 20 {
				n.Workloads = append(n.Workloads, provider.Workload{Name: fmt.Sprintf("ns/%s-%d", id, w), MilliCPU: int64(185 + j%3), MemoryBytes: 640 << 20})
			}
			in.Demand.Nodes = append(in.Demand.Nodes, n)
			in.NodeGroup[id] = k
			if j%10 == 0 {
				in.UnderusedSince[id] = now.Add(-time.Hour)
			}
		}
	}
	in.Groups = gs
	for i := range 10000 {
		w := provider.Workload{Name: fmt.Sprintf("ns/p-%d", i), MilliCPU: int64(100 + i%20*50), MemoryBytes: int64(128+i%16*64) << 20}
		if i%3 == 0 {
			w.Selector = map[string]string{"zone": fmt.Sprintf("d%d", i%5)}
		}
		in.Demand.Pending = append(in.Demand.Pending, w)
	}
	b.ResetTimer()
	for b.Loop() {
		out := Decide(in)
		if len(out.Decisions) == 0 {
			b.Fatal("no decision")
		}
	}
}

// BenchmarkDecideScaleDown: 1,000 nodes, nothing pending, a tenth of
// them underused for long: the decider finds what may go.
func BenchmarkDecideScaleDown(b *testing.B) {
	in := Input{NodeGroup: map[string]districts.DeploymentKey{}, UnderusedSince: map[string]time.Time{}, Settings: settings(), Now: now}
	for i := range 10 {
		k := districts.DeploymentKey{District: fmt.Sprintf("d%d", i), Flavor: "small", Role: districts.RoleWorker}
		in.Groups = append(in.Groups, Group{Key: k, Current: 100, Max: 1000, MilliCPU: 3900, MemoryBytes: 14 * gib, Price: 0.1, Priced: true})
		for j := range 100 {
			id := fmt.Sprintf("%s-%d", k.District, j)
			n := provider.NodeLoad{Node: id, MilliCPU: 3900, MemoryBytes: 14 * gib, Schedulable: true}
			load := 2500
			if j%10 == 0 {
				load = 300
				in.UnderusedSince[id] = now.Add(-time.Hour)
			}
			for w := range 10 {
				n.Workloads = append(n.Workloads, provider.Workload{Name: fmt.Sprintf("ns/%s-%d", id, w), MilliCPU: int64(load / 10), MemoryBytes: 256 << 20})
			}
			in.Demand.Nodes = append(in.Demand.Nodes, n)
			in.NodeGroup[id] = k
		}
	}
	for b.Loop() {
		out := Decide(in)
		if len(out.Decisions) != 1 {
			b.Fatalf("%d decisions, want the one node that goes", len(out.Decisions))
		}
	}
}
