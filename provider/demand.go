package provider

import (
	"context"

	"github.com/cloudtransit/transit/districts"
)

// Demander is a platform that reports what its workloads ask for: what
// transit autoscale decides from.
type Demander interface {
	// Demand reads the platform through its masters among nodes. An
	// unreachable platform is an error matching ErrPlatformUnreachable.
	Demand(ctx context.Context, nodes []districts.Node) (Demand, error)
}

// Demand is the workloads the platform could not place and what runs on
// each node.
type Demand struct {
	// Pending are workloads the scheduler could not place on any node
	// (Kubernetes: pods Unschedulable; Swarm: tasks pending for lack of
	// resources or a matching node).
	Pending []Workload
	// Nodes are the platform's nodes that transit made, with what runs
	// on them.
	Nodes []NodeLoad
}

// Workload is one pod or task and what it asks of a node.
type Workload struct {
	// Name identifies it for the reader: "namespace/pod", "service.slot".
	Name string
	// MilliCPU and MemoryBytes are its requests (reservations).
	MilliCPU    int64
	MemoryBytes int64
	// Selector are node labels it requires, each key equal to its value
	// (Kubernetes nodeSelector and required node affinity of one term
	// with In of one value; Swarm placement constraints node.labels.k==v).
	Selector map[string]string
	// Unmovable, on a running workload, says why it would not run
	// elsewhere if its node went ("" when it would): no controller
	// remakes it, it keeps data on the node, a disruption budget allows
	// no eviction. Workloads that go with their node anyway (Kubernetes
	// DaemonSet and mirror pods) are not listed at all.
	Unmovable string
}

// NodeLoad is one node of the platform and what runs on it.
type NodeLoad struct {
	// Node is transit's node id.
	Node string
	// Allocatable is what workloads may ask of the node.
	MilliCPU    int64
	MemoryBytes int64
	// Labels are the node's labels (transit's tags among them).
	Labels map[string]string
	// Schedulable is false for a node cordoned or not ready.
	Schedulable bool
	// Pods is how many workloads the node may run at once (Kubernetes'
	// allocatable pods); 0: no such limit.
	Pods int64
	// Overhead is what the workloads that go with the node (DaemonSets)
	// ask, and how many they are: a new node of the same flavor has that
	// much less room.
	OverheadMilliCPU    int64
	OverheadMemoryBytes int64
	OverheadPods        int64
	Workloads           []Workload
}
