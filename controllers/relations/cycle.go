package relations

import (
	"context"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cloudtransit/transit/controllers/relations/api/v1alpha1"
)

// maxCycleDepth bounds the walk along start dependencies.
const maxCycleDepth = 32

// node is a workload in the graph of start dependencies.
type node struct{ kind, namespace, name string }

func (n node) String() string { return n.kind + " " + n.namespace + "/" + n.name }

// startCycle returns the cycle of start dependencies that leads from
// provider back to consumer (consumer → provider → … → consumer), or nil.
// Members of such a cycle may each wait for the other to start.
func (r *kindReconciler) startCycle(ctx context.Context, consumer, provider node) ([]node, error) {
	visited := map[node]bool{}
	var walk func(n node, path []node) ([]node, error)
	walk = func(n node, path []node) ([]node, error) {
		if n == consumer {
			return path, nil
		}
		if visited[n] || len(path) > maxCycleDepth {
			return nil, nil
		}
		visited[n] = true
		next, err := r.startDependencies(ctx, n)
		if err != nil {
			return nil, err
		}
		for _, m := range next {
			if found, err := walk(m, append(slices.Clone(path), m)); found != nil || err != nil {
				return found, err
			}
		}
		return nil, nil
	}
	return walk(provider, []node{consumer, provider})
}

// startDependencies are the workloads n waits for to start: the providers
// of its start relationships that are workloads themselves.
func (r *kindReconciler) startDependencies(ctx context.Context, n node) ([]node, error) {
	i := slices.IndexFunc(workloadKinds, func(wk workloadKind) bool { return wk.kind == n.kind })
	if i < 0 {
		return nil, nil
	}
	w := workloadKinds[i].new()
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: n.namespace, Name: n.name}, w); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	c, err := ParseConsumer(w.GetNamespace(), w.GetAnnotations())
	if err != nil || !IsConsumer(w.GetAnnotations()) {
		return nil, nil
	}
	var out []node
	for _, iface := range c.Interfaces {
		t, _, err := consumerConfig(ctx, r.Client, w.GetNamespace(), c, iface)
		if err != nil {
			return nil, err
		}
		if t.lifecycle == v1alpha1.LifecycleNone {
			continue
		}
		p, _, _, err := r.findProvider(ctx, c.Requests, iface)
		if err != nil {
			return nil, err
		}
		if p != nil {
			out = append(out, node{p.GetKind(), p.GetNamespace(), p.GetName()})
		}
	}
	return out, nil
}

// cycleString names a cycle's members in order.
func cycleString(path []node) string {
	var s []string
	for _, n := range path {
		s = append(s, n.String())
	}
	return strings.Join(s, " → ")
}
