package streams

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cloudtransit/transit/controllers/streams/api/v1alpha1"
	"github.com/cloudtransit/transit/controllers/streams/sidecar"
)

// fenceGone aborts the transactions that exactly-once sidecars of pods now
// gone left open: a sidecar killed inside a transaction (a crash, the end
// of its grace period) whose pod was deleted before a restarted sidecar
// fenced it, as sidecar.Run does first thing. Until then read-committed
// readers of every partition such a transaction wrote stop at it, for up
// to its timeout (minutes): the next processor, the sink, and the
// collector, which would count the records behind it as read. Kafka says
// which transactions are open, the API server which pods exist, read
// after Kafka: a transaction's pod is seen unless it is gone.
func (r *TopologyReconciler) fenceGone(ctx context.Context, t *v1alpha1.Topology, obs *observed) error {
	// A pod's transactional ID is <group>-<pod>, and its pod's name
	// <revision>-<processor>-<replica set>-<suffix>.
	type owner struct{ group, prefix string }
	owners := map[string][]owner{} // by cluster
	for _, rev := range obs.revisions {
		if rev.Spec.Delivery != v1alpha1.ExactlyOnce {
			continue
		}
		for _, p := range rev.Spec.Processors {
			owners[p.Input.Bootstrap] = append(owners[p.Input.Bootstrap],
				owner{p.Group, sidecar.TransactionalID(p.Group, deploymentName(rev.Name, p.Name)+"-")})
		}
	}
	for _, bootstrap := range slices.Sorted(maps.Keys(owners)) {
		open, err := r.Kafka.OpenTransactions(ctx, bootstrap)
		if err != nil {
			return err
		}
		var pods map[string]bool // read after this cluster's transactions
		var gone, names []string
		for _, id := range open {
			for _, o := range owners[bootstrap] {
				if !strings.HasPrefix(id, o.prefix) {
					continue
				}
				if pods == nil {
					if pods, err = r.podNames(ctx, t); err != nil {
						return err
					}
				}
				if pod := strings.TrimPrefix(id, o.group+"-"); !pods[pod] {
					gone, names = append(gone, id), append(names, pod)
				}
				break
			}
		}
		if len(gone) == 0 {
			continue
		}
		if err := r.Kafka.FenceTransactions(ctx, bootstrap, gone...); err != nil {
			return err
		}
		r.Recorder.Eventf(t, corev1.EventTypeNormal, "Fenced", "aborted the open transactions of pods gone: %s", strings.Join(names, ", "))
	}
	return nil
}

// podNames are the names of the topology's pods, from the API server.
func (r *TopologyReconciler) podNames(ctx context.Context, t *v1alpha1.Topology) (map[string]bool, error) {
	var pods corev1.PodList
	if err := r.Reader.List(ctx, &pods, client.InNamespace(t.Namespace), client.MatchingLabels{LabelTopology: t.Name}); err != nil {
		return nil, fmt.Errorf("list the pods of %s: %w", t.Name, err)
	}
	names := map[string]bool{}
	for _, p := range pods.Items {
		names[p.Name] = true
	}
	return names, nil
}
