package streams

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/cloudtransit/transit/controllers/streams/api/v1alpha1"
	"github.com/cloudtransit/transit/controllers/streams/topology"
)

// PartReconciler keeps each TopologyPart's revisions: a new one for every
// spec change, the in-use label on those a Topology or a running revision
// names, and at most History unused ones.
type PartReconciler struct {
	Client  client.Client
	History int
}

// SetupWithManager registers the reconciler: parts, and the topologies
// and topology revisions naming them.
func (r *PartReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.History <= 0 {
		r.History = 10
	}
	partsOf := func(_ context.Context, o client.Object) []reconcile.Request {
		var refs []v1alpha1.PartRef
		switch o := o.(type) {
		case *v1alpha1.Topology:
			refs = o.Spec.Parts
		case *v1alpha1.TopologyRevision:
			refs = o.Spec.Parts
		}
		var reqs []reconcile.Request
		for _, p := range refs {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: p.Name}})
		}
		return reqs
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("topologypart").
		For(&v1alpha1.TopologyPart{}).
		Watches(&v1alpha1.TopologyPartRevision{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: o.GetLabels()[LabelPart]}}}
		})).
		Watches(&v1alpha1.Topology{}, handler.EnqueueRequestsFromMapFunc(partsOf)).
		Watches(&v1alpha1.TopologyRevision{}, handler.EnqueueRequestsFromMapFunc(partsOf)).
		Complete(r)
}

// Reconcile makes the part's revisions match its spec and its users.
func (r *PartReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var revs v1alpha1.TopologyPartRevisionList
	if err := r.Client.List(ctx, &revs, client.InNamespace(req.Namespace), client.MatchingLabels{LabelPart: req.Name}); err != nil {
		return reconcile.Result{}, err
	}
	items := revs.Items
	slices.SortFunc(items, func(a, b v1alpha1.TopologyPartRevision) int { return int(a.Spec.Revision - b.Spec.Revision) })

	var part v1alpha1.TopologyPart
	err := r.Client.Get(ctx, req.NamespacedName, &part)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return reconcile.Result{}, err
	case part.DeletionTimestamp.IsZero():
		hash := topology.PartHash(part.Spec)
		latest := int64(0)
		if n := len(items); n > 0 {
			latest = items[n-1].Spec.Revision
		}
		if latest == 0 || items[len(items)-1].Spec.Hash != hash {
			rev := v1alpha1.TopologyPartRevision{
				ObjectMeta: metav1.ObjectMeta{Namespace: part.Namespace, Name: fmt.Sprintf("%s-%d", part.Name, latest+1),
					Labels: map[string]string{LabelPart: part.Name}},
				Spec: v1alpha1.TopologyPartRevisionSpec{Part: part.Name, Revision: latest + 1, Hash: hash, Spec: part.Spec},
			}
			// A name taken (a crash after the create, before the cache saw
			// it) fails here; the revision's own event brings us back.
			if err := r.Client.Create(ctx, &rev); err != nil {
				return reconcile.Result{}, fmt.Errorf("create %s: %w", rev.Name, err)
			}
			items = append(items, rev)
			latest++
		}
		if part.Status.LatestRevision != latest || part.Status.ObservedGeneration != part.Generation {
			patch := client.MergeFrom(part.DeepCopy())
			part.Status.LatestRevision, part.Status.ObservedGeneration = latest, part.Generation
			if err := r.Client.Status().Patch(ctx, &part, patch); err != nil {
				return reconcile.Result{}, err
			}
		}
	}

	used, err := r.users(ctx, req.Namespace, req.Name)
	if err != nil {
		return reconcile.Result{}, err
	}
	keep := r.History
	if part.Name == "" || !part.DeletionTimestamp.IsZero() {
		keep = 0
	}
	for i := range items {
		rev := &items[i]
		users := used[rev.Spec.Revision]
		if len(users) == 0 && i < len(items)-keep {
			// The policy refuses deleting what is labelled in use.
			if err := r.markUse(ctx, rev, nil); err != nil {
				return reconcile.Result{}, err
			}
			if err := r.Client.Delete(ctx, rev); err != nil && !apierrors.IsNotFound(err) {
				return reconcile.Result{}, fmt.Errorf("delete unused %s: %w", rev.Name, err)
			}
			continue
		}
		if err := r.markUse(ctx, rev, users); err != nil {
			return reconcile.Result{}, err
		}
	}
	return reconcile.Result{}, nil
}

// users are, per revision number, the topologies pinning it and the
// topology revisions (running or draining) built of it.
func (r *PartReconciler) users(ctx context.Context, namespace, part string) (map[int64][]string, error) {
	used := map[int64][]string{}
	var topos v1alpha1.TopologyList
	if err := r.Client.List(ctx, &topos, client.InNamespace(namespace)); err != nil {
		return nil, err
	}
	for _, t := range topos.Items {
		for _, p := range t.Spec.Parts {
			if p.Name == part {
				used[p.Revision] = append(used[p.Revision], "Topology "+t.Name)
			}
		}
	}
	var trs v1alpha1.TopologyRevisionList
	if err := r.Client.List(ctx, &trs, client.InNamespace(namespace)); err != nil {
		return nil, err
	}
	for _, tr := range trs.Items {
		if tr.Status.Finished != nil {
			continue
		}
		for _, p := range tr.Spec.Parts {
			if p.Name == part {
				used[p.Revision] = append(used[p.Revision], "TopologyRevision "+tr.Name)
			}
		}
	}
	for n := range used {
		slices.Sort(used[n])
	}
	return used, nil
}

// markUse sets or clears the in-use label the admission policy reads.
func (r *PartReconciler) markUse(ctx context.Context, rev *v1alpha1.TopologyPartRevision, users []string) error {
	by := strings.Join(users, ", ")
	_, labelled := rev.Labels[LabelInUse]
	if labelled == (len(users) > 0) && rev.Annotations[AnnotationUsedBy] == by {
		return nil
	}
	patch := client.MergeFrom(rev.DeepCopy())
	if len(users) > 0 {
		if rev.Labels == nil {
			rev.Labels = map[string]string{}
		}
		if rev.Annotations == nil {
			rev.Annotations = map[string]string{}
		}
		rev.Labels[LabelInUse] = strconv.Itoa(len(users))
		rev.Annotations[AnnotationUsedBy] = by
	} else {
		delete(rev.Labels, LabelInUse)
		delete(rev.Annotations, AnnotationUsedBy)
	}
	if err := r.Client.Patch(ctx, rev, patch); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("mark %s in use: %w", rev.Name, err)
	}
	return nil
}
