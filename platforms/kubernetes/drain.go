package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// Drain cordons n and evicts its pods through the Eviction API, so every
// PodDisruptionBudget holds, until none is left or timeout passes. Pods of
// DaemonSets and static (mirror) pods stay, as with kubectl drain; a pod
// no controller would recreate blocks the drain instead of being lost.
// Nothing is forced and no pod is deleted directly. A drain that does not
// finish uncordons n and returns a *provider.DrainError naming the pods
// left.
func (d *driver) Drain(ctx context.Context, n districts.Node, timeout time.Duration) error {
	a, err := d.client(ctx)
	if err != nil {
		return fmt.Errorf("drain node %s: %w", n.ID, err)
	}
	if err := d.cordon(ctx, n, true); err != nil {
		return fmt.Errorf("drain node %s: cordon: %w", n.ID, err)
	}
	deadline := d.opts.Clock.Now().Add(timeout)
	nextLog := d.opts.Clock.Now().Add(30 * time.Second)
	var last drainState
	for {
		last, err = d.evict(ctx, a, n)
		if err != nil {
			return d.drainFailed(n, fmt.Errorf("drain node %s: %w", n.ID, err))
		}
		if len(last.left) == 0 {
			return nil
		}
		now := d.opts.Clock.Now()
		if !now.Before(deadline) || len(last.unmanaged) > 0 {
			break
		}
		if !now.Before(nextLog) {
			d.opts.Logger.Info("draining", "node", n.ID, "pods_left", last.left, "refused", last.refused)
			nextLog = now.Add(30 * time.Second)
		}
		if err := d.opts.Clock.Sleep(ctx, d.opts.PollInterval); err != nil {
			return d.drainFailed(n, err)
		}
	}
	// Refused: the node takes workloads again and the loop skips it.
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), apiTimeout)
	defer cancel()
	if err := d.cordon(uctx, n, false); err != nil {
		return fmt.Errorf("drain node %s refused, and uncordoning it failed: %w", n.ID, err)
	}
	reason := fmt.Sprintf("pods still on it after %s", timeout)
	switch {
	case len(last.unmanaged) > 0:
		reason = "pods no controller would recreate (delete them or give them a controller)"
		last.left = last.unmanaged
	case len(last.refused) > 0:
		reason = fmt.Sprintf("a PodDisruptionBudget refused evictions for %s", timeout)
		last.left = last.refused
	}
	return &provider.DrainError{Node: n.ID, Reason: reason, Blocking: last.left}
}

// drainFailed uncordons n after a drain that could not go on (the API
// went away, ctx ended) and returns err.
func (d *driver) drainFailed(n districts.Node, err error) error {
	uctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
	defer cancel()
	if uerr := d.cordon(uctx, n, false); uerr != nil {
		return errors.Join(err, fmt.Errorf("uncordon node %s: %w", n.ID, uerr))
	}
	return err
}

// drainState is what one pass over a node's pods found.
type drainState struct {
	left      []string // pods still to go, namespace/name
	refused   []string // of those, evictions a disruption budget refused
	unmanaged []string // of those, pods no controller would recreate
}

// evict asks once to evict every pod on n that must go.
func (d *driver) evict(ctx context.Context, a *api, n districts.Node) (drainState, error) {
	var st drainState
	pods, err := a.c.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", n.ID).String(),
	})
	if err != nil {
		return st, err
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		// The field selector asks the server; a pod of another node must
		// never be evicted, whoever answered.
		if p.Spec.NodeName != n.ID || stays(p) {
			continue
		}
		name := p.Namespace + "/" + p.Name
		st.left = append(st.left, name)
		if p.DeletionTimestamp != nil {
			continue // evicted, terminating
		}
		if metav1.GetControllerOf(p) == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			st.unmanaged = append(st.unmanaged, name)
			continue
		}
		err := a.c.PolicyV1().Evictions(p.Namespace).Evict(ctx, &policyv1.Eviction{
			ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
		})
		switch {
		case err == nil, apierrors.IsNotFound(err):
		case apierrors.IsTooManyRequests(err):
			st.refused = append(st.refused, name)
		default:
			return st, fmt.Errorf("evict pod %s: %w", name, err)
		}
	}
	slices.Sort(st.left)
	return st, nil
}

// stays says a pod is not the drain's to move: a DaemonSet's (its
// controller would put it back) or a static pod's mirror.
func stays(p *corev1.Pod) bool {
	if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
		return true
	}
	if c := metav1.GetControllerOf(p); c != nil && c.Kind == "DaemonSet" {
		return true
	}
	return false
}
