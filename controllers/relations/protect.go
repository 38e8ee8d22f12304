package relations

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/cloudtransit/transit/controllers/relations/api/v1alpha1"
)

// ProtectFinalizer holds a provider annotated protect=true while
// consumers relate to it: deleting it waits until they are gone.
const ProtectFinalizer = Prefix + "protect"

// relProviderIndex indexes Relationships by the provider they found
// ("Kind/namespace/name").
const relProviderIndex = "relations.transit.io/found-provider"

func providerKey(kind, namespace, name string) string {
	return kind + "/" + namespace + "/" + name
}

// setupProtection registers, per provider kind, the controller that keeps
// the protect finalizer exactly while a permitted Relationship names the
// provider.
func (r *Reconciler) setupProtection(mgr manager.Manager) error {
	err := mgr.GetFieldIndexer().IndexField(context.Background(), &v1alpha1.Relationship{}, relProviderIndex, func(o client.Object) []string {
		p := o.(*v1alpha1.Relationship).Spec.Provider
		if p.Kind == "" {
			return nil
		}
		return []string{providerKey(p.Kind, p.Namespace, p.Name)}
	})
	if err != nil {
		return err
	}
	for _, pk := range providerKinds {
		p := &protector{Reconciler: r, kind: pk.kind, new: pk.new}
		err := ctrl.NewControllerManagedBy(mgr).
			Named("relations-protect-"+strings.ToLower(pk.kind)).
			For(pk.new(), builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
				return o.GetAnnotations()[AnnotationProtect] != "" || controllerutil.ContainsFinalizer(o, ProtectFinalizer)
			}))).
			Watches(&v1alpha1.Relationship{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
				ref := o.(*v1alpha1.Relationship).Spec.Provider
				if ref.Kind != p.kind {
					return nil
				}
				return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}}}
			})).
			Complete(p)
		if err != nil {
			return err
		}
	}
	return nil
}

// protector keeps the protect finalizer on providers of one kind.
type protector struct {
	*Reconciler
	kind string
	new  func() client.Object
}

func (p *protector) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	return retryConflicts(p.reconcile(ctx, req))
}

func (p *protector) reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	o := p.new()
	if err := p.Client.Get(ctx, req.NamespacedName, o); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	prov, _ := ParseProvider(o.GetAnnotations())
	has := controllerutil.ContainsFinalizer(o, ProtectFinalizer)
	if !prov.Protect && !has {
		return reconcile.Result{}, nil // most providers: nothing to keep
	}
	consumers, err := p.protecting(ctx, o)
	if err != nil {
		return reconcile.Result{}, err
	}
	deleting := !o.GetDeletionTimestamp().IsZero()
	want := prov.Protect && len(consumers) > 0
	switch {
	case want && deleting:
		p.Recorder.Eventf(o, corev1.EventTypeNormal, "Protected", "deletion waits for the consumers relating to it: %s", strings.Join(consumers, ", "))
		return reconcile.Result{}, nil
	case want && !has:
		// A finalizer cannot be added to an object being deleted: only a
		// living provider gains one.
		controllerutil.AddFinalizer(o, ProtectFinalizer)
	case !want && has:
		controllerutil.RemoveFinalizer(o, ProtectFinalizer)
	default:
		return reconcile.Result{}, nil
	}
	// An update carries the resourceVersion read: a finalizer another
	// writer changed meanwhile is never lost.
	return reconcile.Result{}, p.Client.Update(ctx, o)
}

// protecting names the consumers whose permitted Relationships found o.
func (p *protector) protecting(ctx context.Context, o client.Object) ([]string, error) {
	var rels v1alpha1.RelationshipList
	if err := p.Client.List(ctx, &rels, client.MatchingFields{relProviderIndex: providerKey(p.kind, o.GetNamespace(), o.GetName())}); err != nil {
		return nil, err
	}
	var out []string
	for _, rel := range rels.Items {
		if !rel.DeletionTimestamp.IsZero() || !meta.IsStatusConditionTrue(rel.Status.Conditions, v1alpha1.ConditionPermitted) {
			continue
		}
		name := fmt.Sprintf("%s %s/%s", rel.Spec.Consumer.Kind, rel.Namespace, rel.Spec.Consumer.Name)
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out, nil
}
