package relations

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// providerKind is a kind a provider may be.
type providerKind struct {
	gvk schema.GroupVersionKind
	new func() client.Object
}

func (pk providerKind) groupKind() schema.GroupKind { return pk.gvk.GroupKind() }

// builtinKinds are the kinds a provider named without a kind may be, in
// the order they are looked up. Secrets and ConfigMaps are seen only when
// labelled relations.transit.io/expose=true (the cache holds no other).
var builtinKinds = []providerKind{
	{corev1.SchemeGroupVersion.WithKind("Service"), func() client.Object { return &corev1.Service{} }},
	{appsv1.SchemeGroupVersion.WithKind("Deployment"), func() client.Object { return &appsv1.Deployment{} }},
	{appsv1.SchemeGroupVersion.WithKind("StatefulSet"), func() client.Object { return &appsv1.StatefulSet{} }},
	{appsv1.SchemeGroupVersion.WithKind("DaemonSet"), func() client.Object { return &appsv1.DaemonSet{} }},
	{corev1.SchemeGroupVersion.WithKind("Secret"), func() client.Object { return &corev1.Secret{} }},
	{corev1.SchemeGroupVersion.WithKind("ConfigMap"), func() client.Object { return &corev1.ConfigMap{} }},
}

// readTimeout bounds a read of a provider of another kind from the cache,
// which waits for its informer's first list.
const readTimeout = 30 * time.Second

// otherKinds are the kinds beyond the built-in ones that consumers named
// and the controller may read (the Service Binding specification's
// provisioned services and the like): each is watched from its first use.
type otherKinds struct {
	mu      sync.Mutex
	watched map[schema.GroupKind]providerKind
}

// kindsOf are the kinds req may name. A kind that cannot be used is a
// note saying why, for the relationship's condition.
func (r *kindReconciler) kindsOf(ctx context.Context, req Request) ([]providerKind, string, error) {
	if req.Kind == "" {
		return builtinKinds, "", nil
	}
	gk := schema.ParseGroupKind(req.Kind)
	for _, pk := range builtinKinds {
		if gk.Kind == pk.gvk.Kind && (gk.Group == "" || gk.Group == pk.gvk.Group) {
			return []providerKind{pk}, "", nil
		}
	}
	r.others.mu.Lock()
	pk, ok := r.others.watched[gk]
	r.others.mu.Unlock()
	if ok {
		return []providerKind{pk}, "", nil
	}
	m, err := r.Client.RESTMapper().RESTMapping(gk)
	if meta.IsNoMatchError(err) {
		return nil, fmt.Sprintf("the API server serves no kind %s (give its group: Kind.group)", req.Kind), nil
	}
	if err != nil {
		return nil, "", err
	}
	if m.Scope.Name() != meta.RESTScopeNameNamespace {
		return nil, fmt.Sprintf("%s is cluster-scoped: a provider lives in a namespace", req.Kind), nil
	}
	for _, verb := range []string{"get", "list", "watch"} {
		review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Group: m.Resource.Group, Resource: m.Resource.Resource}}}
		if err := r.Client.Create(ctx, review); err != nil {
			return nil, "", err
		}
		if !review.Status.Allowed {
			return nil, fmt.Sprintf("the controller may not %s %s: label a ClusterRole granting get, list and watch on %s %s=true",
				verb, m.Resource.GroupResource(), m.Resource.GroupResource(), LabelAggregateController), nil
		}
	}
	pk = providerKind{gvk: m.GroupVersionKind}
	pk.new = func() client.Object {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(pk.gvk)
		return u
	}
	r.others.mu.Lock()
	defer r.others.mu.Unlock()
	if w, ok := r.others.watched[gk]; ok {
		return []providerKind{w}, "", nil
	}
	if err := r.watchOther(pk); err != nil {
		return nil, "", err
	}
	if r.others.watched == nil {
		r.others.watched = map[schema.GroupKind]providerKind{}
	}
	r.others.watched[gk] = pk
	return []providerKind{pk}, "", nil
}

// The labels of ClusterRoles the relations controller's role aggregates:
// the Service Binding specification's, which lets binding controllers
// read a kind, and transit's own (to grant update, for protect).
const (
	LabelAggregateController = "servicebinding.io/controller"
	LabelAggregateRelations  = Prefix + "controller"
)

// getProvider reads a provider: the built-in kinds through the client's
// cache, other kinds through the cache of their informer, bounded (its
// first list may fail, if the controller's access was taken away).
func (r *kindReconciler) getProvider(ctx context.Context, pk providerKind, key types.NamespacedName) (client.Object, error) {
	o := pk.new()
	if _, ok := o.(*unstructured.Unstructured); !ok {
		return o, r.Client.Get(ctx, key, o)
	}
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	return o, r.cache.Get(ctx, key, o)
}

// findProvider looks up the requested objects that provide iface. More
// than one is ambiguous: every candidate is named. notes say why a
// request could not be looked up, or a candidate's annotations are wrong.
func (r *kindReconciler) findProvider(ctx context.Context, requests []Request, iface string) (_ *unstructured.Unstructured, candidates, notes []string, _ error) {
	var found *unstructured.Unstructured
	for _, req := range requests {
		kinds, note, err := r.kindsOf(ctx, req)
		if err != nil {
			return nil, nil, nil, err
		}
		if note != "" {
			notes = append(notes, req.String()+": "+note)
			continue
		}
		for _, pk := range kinds {
			o, err := r.getProvider(ctx, pk, types.NamespacedName{Namespace: req.Namespace, Name: req.Name})
			if apierrors.IsNotFound(err) {
				continue
			}
			if err != nil {
				return nil, nil, nil, fmt.Errorf("read %s %s: %w", pk.gvk.Kind, req.Key(), err)
			}
			id := pk.gvk.Kind + " " + req.Key()
			p, err := ParseProvider(o.GetAnnotations())
			if err != nil && IsProvider(o.GetAnnotations()) {
				notes = append(notes, id+": "+err.Error())
			}
			if err != nil || !slices.Contains(p.Interfaces, iface) || slices.Contains(candidates, id) {
				continue
			}
			u, ok := o.(*unstructured.Unstructured)
			if !ok {
				obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
				if err != nil {
					return nil, nil, nil, err
				}
				u = &unstructured.Unstructured{Object: obj}
				u.SetGroupVersionKind(pk.gvk)
			}
			candidates = append(candidates, id)
			found = u
		}
	}
	if len(candidates) > 1 {
		return nil, candidates, notes, nil
	}
	return found, candidates, notes, nil
}

// watchOther starts the watches of another provider kind: each consumer
// controller hears of its objects, and a protect controller keeps its
// finalizer.
func (r *Reconciler) watchOther(pk providerKind) error {
	for _, c := range r.consumerControllers {
		if err := c.ctrl.Watch(source.Kind(r.cache, pk.new(), c.byProvider, providerOrAnnotated())); err != nil {
			return err
		}
		if err := c.ctrl.Watch(source.Kind(r.cache, pk.new(), c.byReference)); err != nil {
			return err
		}
	}
	return r.protectKind(pk)
}
