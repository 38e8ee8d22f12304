// Package demandtest schedules workloads as a platform's scheduler would,
// for test platforms that report provider.Demand.
package demandtest

import (
	"maps"
	"slices"

	"github.com/cloudtransit/transit/provider"
)

// OfMembers schedules workloads on members as nodes of 1000m and 3.75
// GiB (a ready member not draining is schedulable), pinned ones on their
// node: the Demand of a test platform that keeps provider.Members.
func OfMembers(members map[string]provider.Member, pinned map[string][]provider.Workload, workloads []provider.Workload) provider.Demand {
	var nodes []provider.NodeLoad
	for _, id := range slices.Sorted(maps.Keys(members)) {
		m := members[id]
		nodes = append(nodes, provider.NodeLoad{Node: id, MilliCPU: 1000, MemoryBytes: 3840 << 20, Labels: maps.Clone(m.Labels),
			Schedulable: m.Ready && !m.Draining, Workloads: pinned[id]})
	}
	return Schedule(nodes, workloads)
}

// Schedule places each workload, in order, on the first schedulable node
// whose labels it selects with room left (nodes' Workloads already run
// there, whatever their room), and returns what runs where and what is
// left pending: a workload stays pending only when no node has room.
func Schedule(nodes []provider.NodeLoad, workloads []provider.Workload) provider.Demand {
	d := provider.Demand{Nodes: make([]provider.NodeLoad, len(nodes))}
	free := make([][2]int64, len(nodes))
	for i, n := range nodes {
		n.Workloads = append([]provider.Workload(nil), n.Workloads...)
		free[i] = [2]int64{n.MilliCPU - n.OverheadMilliCPU, n.MemoryBytes - n.OverheadMemoryBytes}
		for _, w := range n.Workloads {
			free[i][0] -= w.MilliCPU
			free[i][1] -= w.MemoryBytes
		}
		d.Nodes[i] = n
	}
	for _, w := range workloads {
		placed := false
		for i, n := range d.Nodes {
			if !n.Schedulable || w.MilliCPU > free[i][0] || w.MemoryBytes > free[i][1] || !selects(n.Labels, w.Selector) {
				continue
			}
			free[i][0] -= w.MilliCPU
			free[i][1] -= w.MemoryBytes
			d.Nodes[i].Workloads = append(d.Nodes[i].Workloads, w)
			placed = true
			break
		}
		if !placed {
			d.Pending = append(d.Pending, w)
		}
	}
	return d
}

func selects(labels, selector map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}
