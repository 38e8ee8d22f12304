package relations

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/cloudtransit/transit/controllers/relations/api/v1alpha1"
)

// ProtectFinalizer holds a provider annotated protect=true while
// consumers relate to it: deleting it waits until they are gone.
const ProtectFinalizer = Prefix + "protect"

// relProviderIndex indexes Relationships by the provider they found
// ("Kind.group/namespace/name").
const relProviderIndex = "relations.transit.io/found-provider"

func providerKey(gk schema.GroupKind, namespace, name string) string {
	return gk.String() + "/" + namespace + "/" + name
}

// setupProtection registers the index of Relationships by provider and,
// per built-in provider kind, the controller that keeps the protect
// finalizer exactly while a permitted Relationship names the provider.
func (r *Reconciler) setupProtection(mgr manager.Manager) error {
	err := mgr.GetFieldIndexer().IndexField(context.Background(), &v1alpha1.Relationship{}, relProviderIndex, func(o client.Object) []string {
		p := o.(*v1alpha1.Relationship).Spec.Provider
		if p.Kind == "" {
			return nil
		}
		return []string{providerKey(schema.FromAPIVersionAndKind(p.APIVersion, p.Kind).GroupKind(), p.Namespace, p.Name)}
	})
	if err != nil {
		return err
	}
	for _, pk := range builtinKinds {
		if err := r.protectKind(pk); err != nil {
			return err
		}
	}
	return nil
}

// protectKind starts the protect controller of one provider kind; it
// may run before the manager starts or after (a kind first named then).
func (r *Reconciler) protectKind(pk providerKind) error {
	p := &protector{Reconciler: r, kind: pk}
	c, err := controller.New("relations-protect-"+strings.ToLower(pk.groupKind().String()), r.mgr, controller.Options{Reconciler: p})
	if err != nil {
		return err
	}
	protected := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.GetAnnotations()[AnnotationProtect] != "" || controllerutil.ContainsFinalizer(o, ProtectFinalizer)
	})
	if err := c.Watch(source.Kind(r.cache, pk.new(), &handler.EnqueueRequestForObject{}, protected)); err != nil {
		return err
	}
	return c.Watch(source.Kind[client.Object](r.cache, &v1alpha1.Relationship{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		ref := o.(*v1alpha1.Relationship).Spec.Provider
		if schema.FromAPIVersionAndKind(ref.APIVersion, ref.Kind).GroupKind() != pk.groupKind() {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}}}
	})))
}

// protector keeps the protect finalizer on providers of one kind.
type protector struct {
	*Reconciler
	kind providerKind
}

func (p *protector) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	return retryConflicts(p.reconcile(ctx, req))
}

func (p *protector) reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	o := p.kind.new()
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
	err = p.Client.Update(ctx, o)
	if apierrors.IsForbidden(err) {
		// A kind whose aggregated role grants reading only: said once per
		// change of the provider, not retried in a loop.
		gr := p.kind.groupKind().String()
		p.Recorder.Eventf(o, corev1.EventTypeWarning, "ProtectForbidden", "the relations controller may not update %s to keep its finalizer: label a ClusterRole granting update on it %s=true", gr, LabelAggregateRelations)
		return reconcile.Result{}, nil
	}
	return reconcile.Result{}, err
}

// protecting names the consumers whose permitted Relationships found o.
func (p *protector) protecting(ctx context.Context, o client.Object) ([]string, error) {
	var rels v1alpha1.RelationshipList
	if err := p.Client.List(ctx, &rels, client.MatchingFields{relProviderIndex: providerKey(p.kind.groupKind(), o.GetNamespace(), o.GetName())}); err != nil {
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
