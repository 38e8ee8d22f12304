package relations

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	"sigs.k8s.io/structured-merge-diff/v4/fieldpath"

	"github.com/cloudtransit/transit/controllers/relations/api/v1alpha1"
)

// Options tune the controller.
type Options struct {
	// Workers reconcile consumers in parallel (per workload kind).
	Workers int
	// History is how many revisions a Relationship keeps (10).
	History int
	// ClusterDomain is the cluster's DNS domain (cluster.local).
	ClusterDomain string
	// Recheck is how soon a consumer that a conflict blocks is looked at
	// again when no event wakes it (1 minute): a safety net, since the
	// watches wake it as the conflict clears. It is also how often old
	// values Secrets that pods still use are looked at again.
	Recheck time.Duration
}

func (o Options) withDefaults() Options {
	if o.Workers <= 0 {
		o.Workers = 4
	}
	if o.History <= 0 {
		o.History = 10
	}
	if o.ClusterDomain == "" {
		o.ClusterDomain = "cluster.local"
	}
	if o.Recheck <= 0 {
		o.Recheck = time.Minute
	}
	return o
}

// Labels and index of the controller's own objects.
const (
	// labelRelationship marks a revision's values Secret with its
	// Relationship's name.
	labelRelationship = Prefix + "relationship"
	// annotationHash is a values Secret's values hash.
	annotationHash = Prefix + "hash"
	// annotationApplied, on a consumer, identifies the template patch the
	// controller applied last.
	annotationApplied = Prefix + "applied"
	// providerIndex indexes consumers by the providers they name
	// ("namespace/name").
	providerIndex = "relations.transit.io/provider"
	// consumerIndex indexes Relationships by their consumer ("Kind/name"):
	// a reconcile reads its own, never the namespace's every one.
	consumerIndex = "relations.transit.io/consumer"
	// providerNamespaceIndex indexes Relationships whose provider is in
	// another namespace by that namespace: a change there (a config, an
	// exposed Secret) concerns their consumers too.
	providerNamespaceIndex = "relations.transit.io/provider-namespace"
	// interfaceIndex indexes Relationships by their interface: a change
	// of its Interface concerns their consumers.
	interfaceIndex = "relations.transit.io/interface"
	// valuesIndex indexes the Secret names cache by the Relationship a
	// values Secret is labelled with: pruning reads a relationship's own
	// Secrets, not the namespace's every one (a live list by label scans
	// them all in the API server, for each consumer of a change).
	valuesIndex = "relations.transit.io/values-of"
)

// workloadKinds are the kinds a consumer may be.
var workloadKinds = []workloadKind{
	{"Deployment", func() client.Object { return &appsv1.Deployment{} }, func() client.ObjectList { return &appsv1.DeploymentList{} }},
	{"StatefulSet", func() client.Object { return &appsv1.StatefulSet{} }, func() client.ObjectList { return &appsv1.StatefulSetList{} }},
	{"DaemonSet", func() client.Object { return &appsv1.DaemonSet{} }, func() client.ObjectList { return &appsv1.DaemonSetList{} }},
}

type workloadKind struct {
	kind    string
	new     func() client.Object
	newList func() client.ObjectList
}

// template is a workload's pod template.
func template(o client.Object) *corev1.PodTemplateSpec {
	switch w := o.(type) {
	case *appsv1.Deployment:
		return &w.Spec.Template
	case *appsv1.StatefulSet:
		return &w.Spec.Template
	case *appsv1.DaemonSet:
		return &w.Spec.Template
	}
	return nil
}

// Reconciler relates consumers to providers: per consumer workload and
// interface it keeps a Relationship, a values Secret per revision, and the
// workload's pod template pointing at the current one.
type Reconciler struct {
	Client client.Client
	// Reader reads what the cache does not hold (the values Secrets).
	Reader   client.Reader
	Recorder record.EventRecorder
	Options  Options

	written   written
	reapplies reapplies
	prunes    *pruner

	// Set up by SetupWithManager: what watching another provider kind
	// from its first use takes.
	mgr                 manager.Manager
	cache               cache.Cache
	secretNames         cache.Cache
	consumerControllers []consumerController
	others              otherKinds
}

// consumerController is a consumer kind's controller and the handler that
// maps a provider to its consumers.
type consumerController struct {
	ctrl       controller.Controller
	byProvider handler.EventHandler
	// byReference maps an object ProviderConfigs read to its consumers.
	byReference handler.EventHandler
}

// SetupWithManager registers one controller per workload kind, the
// consumers-by-provider index and the watches of providers and configs.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Options = r.Options.withDefaults()
	r.mgr, r.cache = mgr, mgr.GetCache()
	err := mgr.GetFieldIndexer().IndexField(context.Background(), &v1alpha1.Relationship{}, consumerIndex, func(o client.Object) []string {
		if ref := metav1.GetControllerOf(o); ref != nil {
			return []string{ref.Kind + "/" + ref.Name}
		}
		return nil
	})
	if err != nil {
		return err
	}
	err = mgr.GetFieldIndexer().IndexField(context.Background(), &v1alpha1.Relationship{}, providerNamespaceIndex, func(o client.Object) []string {
		rel := o.(*v1alpha1.Relationship)
		if ns := rel.Spec.Provider.Namespace; ns != rel.Namespace {
			return []string{ns}
		}
		return nil
	})
	if err != nil {
		return err
	}
	err = mgr.GetFieldIndexer().IndexField(context.Background(), &v1alpha1.Relationship{}, interfaceIndex, func(o client.Object) []string {
		return []string{o.(*v1alpha1.Relationship).Spec.Interface}
	})
	if err != nil {
		return err
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &v1alpha1.ProviderConfig{}, referenceIndex, referencedObjects); err != nil {
		return err
	}
	if r.secretNames, err = secretNamesCache(mgr); err != nil {
		return err
	}
	r.prunes = newPruner()
	if err := mgr.Add(r.prunes); err != nil {
		return err
	}
	for _, wk := range workloadKinds {
		if err := mgr.GetFieldIndexer().IndexField(context.Background(), wk.new(), providerIndex, requestedProviders); err != nil {
			return err
		}
		rec := &kindReconciler{Reconciler: r, workloadKind: wk}
		r.prunes.kinds[wk.kind] = rec
		byProvider := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return rec.consumersOf(ctx, o.GetNamespace(), o.GetName())
		})
		byReference := handler.EnqueueRequestsFromMapFunc(rec.consumersOfReferenced)
		c, err := ctrl.NewControllerManagedBy(mgr).
			Named("relations-"+strings.ToLower(wk.kind)).
			For(wk.new(), builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
				_, consumes := o.GetAnnotations()[AnnotationConsumes]
				return consumes || hasInjections(o)
			}))).
			// Its own status writes wake nobody: only a changed spec or a
			// deleted Relationship is repaired.
			Owns(&v1alpha1.Relationship{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
			Watches(&corev1.Service{}, byProvider, builder.WithPredicates(providerOrAnnotated())).
			Watches(&appsv1.Deployment{}, byProvider, builder.WithPredicates(providerOrAnnotated())).
			Watches(&appsv1.StatefulSet{}, byProvider, builder.WithPredicates(providerOrAnnotated())).
			Watches(&appsv1.DaemonSet{}, byProvider, builder.WithPredicates(providerOrAnnotated())).
			Watches(&corev1.Service{}, byReference).
			Watches(&appsv1.Deployment{}, byReference).
			Watches(&appsv1.StatefulSet{}, byReference).
			Watches(&appsv1.DaemonSet{}, byReference).
			Watches(&discoveryv1.EndpointSlice{}, handler.EnqueueRequestsFromMapFunc(rec.consumersOfEndpoints)).
			Watches(&v1alpha1.ProviderConfig{}, handler.EnqueueRequestsFromMapFunc(rec.consumersInNamespace)).
			Watches(&v1alpha1.ConsumerConfig{}, handler.EnqueueRequestsFromMapFunc(rec.consumersInNamespace)).
			Watches(&v1alpha1.Interface{}, handler.EnqueueRequestsFromMapFunc(rec.consumersOfInterface)).
			Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(rec.consumersOfData)).
			Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(rec.consumersOfData)).
			WatchesRawSource(source.Kind(r.secretNames, secretMetadata(), handler.TypedEnqueueRequestsFromMapFunc(rec.consumerOfLiveName), foreignLiveName())).
			WithOptions(controller.Options{MaxConcurrentReconciles: r.Options.Workers}).
			Build(rec)
		if err != nil {
			return err
		}
		r.consumerControllers = append(r.consumerControllers, consumerController{c, byProvider, byReference})
	}
	return r.setupProtection(mgr)
}

// secretNamesCache is a second cache, of every Secret's metadata (no
// data), started with the manager's caches. The main cache holds only
// exposed Secrets, so it never sees someone else's Secret that takes a
// relationship's mutable values Secret's name go: the conflict would
// clear unnoticed until the next recheck. It also answers which values
// Secrets a relationship has (valuesIndex).
func secretNamesCache(mgr ctrl.Manager) (cache.Cache, error) {
	c, err := cluster.New(mgr.GetConfig(), func(o *cluster.Options) {
		o.Scheme, o.MapperProvider = mgr.GetScheme(), func(*rest.Config, *http.Client) (meta.RESTMapper, error) { return mgr.GetRESTMapper(), nil }
		o.HTTPClient = mgr.GetHTTPClient()
		o.Cache.DefaultTransform = cache.TransformStripManagedFields()
	})
	if err != nil {
		return nil, fmt.Errorf("the cache of Secrets' names: %w", err)
	}
	err = c.GetCache().IndexField(context.Background(), secretMetadata(), valuesIndex, func(o client.Object) []string {
		if rel := o.GetLabels()[labelRelationship]; rel != "" {
			return []string{rel}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := mgr.Add(c); err != nil {
		return nil, err
	}
	return c.GetCache(), nil
}

// valuesSecrets lists the metadata of the values Secrets labelled as
// rel's, from the Secret names cache: one a moment old may be missing
// (the next prune sees it), one just deleted may still be there.
func (r *Reconciler) valuesSecrets(ctx context.Context, rel *v1alpha1.Relationship) ([]metav1.PartialObjectMetadata, error) {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("SecretList"))
	if err := r.secretNames.List(ctx, list, client.InNamespace(rel.Namespace), client.MatchingFields{valuesIndex: rel.Name}); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// secretMetadata is a Secret's metadata, what secretNamesCache holds.
func secretMetadata() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	return m
}

// foreignLiveName passes Secrets named as a mutable values Secret that no
// Relationship controls: someone else's, whose going frees the name.
func foreignLiveName() predicate.TypedPredicate[*metav1.PartialObjectMetadata] {
	return predicate.NewTypedPredicateFuncs(func(o *metav1.PartialObjectMetadata) bool {
		ref := metav1.GetControllerOf(o)
		ours := ref != nil && ref.Kind == "Relationship" && strings.HasPrefix(ref.APIVersion, v1alpha1.GroupVersion.Group+"/")
		return strings.HasSuffix(o.Name, liveSuffix) && !ours
	})
}

// consumerOfLiveName maps a Secret named as a Relationship's mutable
// values Secret to that Relationship's consumer.
func (r *kindReconciler) consumerOfLiveName(ctx context.Context, o *metav1.PartialObjectMetadata) []reconcile.Request {
	rel := &v1alpha1.Relationship{}
	key := types.NamespacedName{Namespace: o.Namespace, Name: strings.TrimSuffix(o.Name, liveSuffix)}
	if err := r.Client.Get(ctx, key, rel); err != nil {
		if !apierrors.IsNotFound(err) {
			ctrl.LoggerFrom(ctx).Error(err, "get relationship", "relationship", key)
		}
		return nil
	}
	if rel.Spec.Consumer.Kind != r.kind {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: rel.Namespace, Name: rel.Spec.Consumer.Name}}}
}

// providerOrAnnotated passes objects that provide, and deletions (a
// provider that goes away).
func providerOrAnnotated() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool { return IsProvider(e.Object.GetAnnotations()) },
		UpdateFunc: func(e event.UpdateEvent) bool {
			return IsProvider(e.ObjectOld.GetAnnotations()) || IsProvider(e.ObjectNew.GetAnnotations())
		},
		DeleteFunc:  func(e event.DeleteEvent) bool { return IsProvider(e.Object.GetAnnotations()) },
		GenericFunc: func(e event.GenericEvent) bool { return IsProvider(e.Object.GetAnnotations()) },
	}
}

// requestedProviders indexes a consumer by the providers it names.
func requestedProviders(o client.Object) []string {
	c, err := ParseConsumer(o.GetNamespace(), o.GetAnnotations())
	if err != nil {
		return nil
	}
	var out []string
	for _, r := range c.Requests {
		out = append(out, r.Key())
	}
	return out
}

// hasInjections says whether the controller injected into o's template:
// a consumer whose annotations were removed still needs one more pass.
func hasInjections(o client.Object) bool {
	tpl := template(o)
	if tpl == nil {
		return false
	}
	for k := range tpl.Annotations {
		if strings.HasPrefix(k, RevisionAnnotationPrefix) {
			return true
		}
	}
	return false
}

// kindReconciler reconciles consumers of one workload kind.
type kindReconciler struct {
	*Reconciler
	workloadKind
}

func (r *kindReconciler) consumersOf(ctx context.Context, namespace, name string) []reconcile.Request {
	list := r.newList()
	if err := r.Client.List(ctx, list, client.MatchingFields{providerIndex: namespace + "/" + name}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "list consumers", "provider", namespace+"/"+name)
		return nil
	}
	var out []reconcile.Request
	_ = meta.EachListItem(list, func(o runtime.Object) error {
		m := o.(client.Object)
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: m.GetNamespace(), Name: m.GetName()}})
		return nil
	})
	return out
}

// consumersOfData maps an exposed Secret or ConfigMap to the consumers
// that name it as their provider and those of its namespace (whose
// providers' configs may read it).
func (r *kindReconciler) consumersOfData(ctx context.Context, o client.Object) []reconcile.Request {
	out := r.consumersOf(ctx, o.GetNamespace(), o.GetName())
	for _, req := range r.consumersInNamespace(ctx, o) {
		if !slices.Contains(out, req) {
			out = append(out, req)
		}
	}
	return out
}

// consumersInNamespace maps a config, Secret or ConfigMap to the consumers
// of its namespace and those elsewhere whose providers live there.
func (r *kindReconciler) consumersInNamespace(ctx context.Context, o client.Object) []reconcile.Request {
	ns := o.GetNamespace()
	list := r.newList()
	if err := r.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "list consumers", "namespace", ns)
		return nil
	}
	var out []reconcile.Request
	_ = meta.EachListItem(list, func(obj runtime.Object) error {
		if w := obj.(client.Object); IsConsumer(w.GetAnnotations()) {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: w.GetNamespace(), Name: w.GetName()}})
		}
		return nil
	})
	var rels v1alpha1.RelationshipList
	if err := r.Client.List(ctx, &rels, client.MatchingFields{providerNamespaceIndex: ns}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "list relationships", "provider namespace", ns)
		return out
	}
	for _, rel := range rels.Items {
		req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: rel.Namespace, Name: rel.Spec.Consumer.Name}}
		if rel.Spec.Consumer.Kind == r.kind && !slices.Contains(out, req) {
			out = append(out, req)
		}
	}
	return out
}

// consumersOfInterface maps an Interface to the consumers of its
// interface, whose values are held to it.
func (r *kindReconciler) consumersOfInterface(ctx context.Context, o client.Object) []reconcile.Request {
	var rels v1alpha1.RelationshipList
	if err := r.Client.List(ctx, &rels, client.MatchingFields{interfaceIndex: o.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "list relationships", "interface", o.GetName())
		return nil
	}
	var out []reconcile.Request
	for _, rel := range rels.Items {
		req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: rel.Namespace, Name: rel.Spec.Consumer.Name}}
		if rel.Spec.Consumer.Kind == r.kind && !slices.Contains(out, req) {
			out = append(out, req)
		}
	}
	return out
}

// Reconcile brings one consumer's relationships and template in line.
func (r *kindReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	return retryConflicts(r.reconcile(ctx, req))
}

// conflictRetry is how soon a reconcile that lost a write race runs
// again: the cache has by then seen the write that won.
const conflictRetry = 100 * time.Millisecond

// retryConflicts turns a conflict (a write from a stale cache read, often
// the controller's own previous write) into a prompt retry. Returned as an
// error it would wait in the workqueue's rate limiter, shared by every
// failing item (10 per second): a burst of them would take minutes.
func retryConflicts(res reconcile.Result, err error) (reconcile.Result, error) {
	if apierrors.IsConflict(err) {
		return reconcile.Result{RequeueAfter: conflictRetry}, nil
	}
	return res, err
}

func (r *kindReconciler) reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	w := r.new()
	if err := r.Client.Get(ctx, req.NamespacedName, w); err != nil {
		// Gone: its Relationships and Secrets go with it (owner references).
		if apierrors.IsNotFound(err) {
			r.reapplies.forget(req.NamespacedName)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !w.GetDeletionTimestamp().IsZero() {
		return reconcile.Result{}, nil
	}
	var injections []Injection
	// Injections left out, and why: they would take what someone else
	// owns (a variable, a mount, the mutable values Secret's name).
	var blocked []Injection
	var why []string
	var revoked []*v1alpha1.Relationship
	rels := map[string]*v1alpha1.Relationship{}
	var retry, hold bool
	if IsConsumer(w.GetAnnotations()) {
		c, err := ParseConsumer(w.GetNamespace(), w.GetAnnotations())
		if err != nil {
			r.Recorder.Event(w, corev1.EventTypeWarning, "BadAnnotation", err.Error())
			return reconcile.Result{}, nil // the user's edit brings it back
		}
		for _, iface := range c.Interfaces {
			o, err := r.relate(ctx, w, c, iface)
			if err != nil {
				return reconcile.Result{}, err
			}
			retry, hold = retry || o.again, hold || o.hold
			if o.in != nil {
				in, foreign, err := r.complete(ctx, o.rel, o.in, o.takes)
				if err != nil {
					return reconcile.Result{}, err
				}
				if foreign != "" {
					blocked, why = append(blocked, *in), append(why, foreign)
					r.Recorder.Eventf(w, corev1.EventTypeWarning, "Conflict", "relationship %s: %s", in.Relationship, foreign)
				} else {
					injections = append(injections, *in)
				}
			}
			if o.revoked != nil {
				revoked = append(revoked, o.revoked)
			}
			if o.rel != nil {
				rels[o.rel.Name] = o.rel
			}
		}
		if err := r.pruneRelationships(ctx, w, c.Interfaces); err != nil {
			return reconcile.Result{}, err
		}
	} else if err := r.pruneRelationships(ctx, w, nil); err != nil {
		return reconcile.Result{}, err
	}
	if hold {
		// What to inject is unknown this round (two providers, a missing
		// config): the template keeps what it has.
		return reconcile.Result{RequeueAfter: 30 * time.Second}, nil
	}
	// Injections that would take a variable or mount someone else set are
	// left out (their fields, applied before, go): never overwritten.
	// The fields the controller applied before, read once for every
	// injection.
	owned, err := ownedFields(w)
	if err != nil {
		return reconcile.Result{}, err
	}
	apply, conflicts, msgs := admit(w, owned, injections)
	for i, in := range conflicts {
		r.Recorder.Eventf(w, corev1.EventTypeWarning, "Conflict", "relationship %s: %s; rename it, or remove it to let the relationship inject", in.Relationship, msgs[i])
	}
	blocked, why = append(blocked, conflicts...), append(why, msgs...)
	live, err := r.inject(ctx, w, owned, apply)
	var reverted errReverted
	if errors.As(err, &reverted) {
		r.Recorder.Event(w, corev1.EventTypeWarning, "Conflict", err.Error())
		return reconcile.Result{RequeueAfter: reapplyWindow}, r.markInjected(ctx, w, rels, injections, nil, metav1.ConditionFalse, "Conflict", err.Error())
	}
	if err != nil {
		if !apierrors.IsConflict(err) && !apierrors.IsInvalid(err) {
			return reconcile.Result{}, err
		}
		// Another manager holds a field the injections set, or the merged
		// template is invalid: a condition, never a loop.
		r.Recorder.Event(w, corev1.EventTypeWarning, "Conflict", err.Error())
		return reconcile.Result{RequeueAfter: time.Minute}, r.markInjected(ctx, w, rels, injections, nil, metav1.ConditionFalse, "Conflict", err.Error())
	}
	if err := r.markInjected(ctx, w, rels, blocked, why, metav1.ConditionFalse, "Conflict", ""); err != nil {
		return reconcile.Result{}, err
	}
	// Values of a relationship no longer permitted go once the template
	// no longer refers to them.
	for _, rel := range revoked {
		r.prunes.add(r.kind, client.ObjectKeyFromObject(rel))
	}
	rolled, rollMsg := rolledOut(live)
	rollStatus := metav1.ConditionFalse
	if rolled {
		rollStatus = metav1.ConditionTrue
	}
	if err := r.markInjected(ctx, w, rels, apply, nil, metav1.ConditionTrue, "Injected", "the pod template carries the revision",
		metav1.Condition{Type: v1alpha1.ConditionRolledOut, Status: rollStatus, Reason: map[bool]string{true: "RolledOut", false: "RollingOut"}[rolled], Message: rollMsg}); err != nil {
		return reconcile.Result{}, err
	}
	if r.kind == "StatefulSet" {
		if err := r.unblockStatefulSet(ctx, live); err != nil {
			return reconcile.Result{}, err
		}
	}
	// A conflict: look again.
	if len(blocked) > 0 {
		return reconcile.Result{RequeueAfter: r.Options.Recheck}, nil
	}
	if retry {
		return reconcile.Result{RequeueAfter: 30 * time.Second}, nil
	}
	return reconcile.Result{}, nil
}

// relationshipName is a consumer's Relationship for an interface: kind,
// consumer and interface joined by "-", a DNS label. Joined, an interface
// with a "-" could read as another split ("web"+"db-main" and
// "web-db"+"main"): its name ends in a hash of the three apart, as does a
// name too long (shortened). Other names are as they always were.
func relationshipName(kind, consumer, iface string) string {
	n := strings.ToLower(kind) + "-" + consumer + "-" + iface
	ambiguous := strings.Contains(iface, "-")
	if len(n) <= 63 && !ambiguous {
		return n
	}
	key := n
	if ambiguous {
		key = strings.ToLower(kind) + "/" + consumer + "/" + iface
	}
	if len(n) > 50 {
		n = strings.TrimRight(n[:50], "-.")
	}
	sum := sha256.Sum256([]byte(key))
	return n + "-" + hex.EncodeToString(sum[:])[:12]
}

// outcome is what relating one interface asks of its consumer's template.
type outcome struct {
	// in is the revision to inject (nil while none exists); Reconcile
	// completes it with the keys of takes.
	in *Injection
	// again asks for a later look (a provider not found yet); hold keeps
	// the template as it is (what to inject is unknown).
	again, hold bool
	// revoked is a Relationship whose values must go once the template no
	// longer refers to them (consent withdrawn).
	revoked *v1alpha1.Relationship
	// rel is the Relationship as last written, for later status writes
	// (the cache may not have it yet).
	rel *v1alpha1.Relationship
	// takes is how the consumer takes the interface: where in's keys go.
	takes takes
}

// relate keeps the Relationship of w over iface and returns what to
// inject.
func (r *kindReconciler) relate(ctx context.Context, w client.Object, c ConsumerAnnotations, iface string) (outcome, error) {
	rel := &v1alpha1.Relationship{ObjectMeta: metav1.ObjectMeta{Name: relationshipName(r.kind, w.GetName(), iface), Namespace: w.GetNamespace()}}
	gvk, err := r.Client.GroupVersionKindFor(w)
	if err != nil {
		return outcome{}, err
	}
	var pin *int64
	if n, ok := c.Pins[iface]; ok {
		pin = ptr.To(n)
	}
	provider, candidates, notes, err := r.findProvider(ctx, c.Requests, iface)
	if err != nil {
		return outcome{}, err
	}
	ref := v1alpha1.ObjectRef{}
	// An object of another namespace that does not consent is not shown:
	// neither its kind nor that it exists.
	permitted := provider == nil || consents(provider, w.GetNamespace())
	if provider != nil && permitted {
		ref = v1alpha1.ObjectRef{APIVersion: provider.GetAPIVersion(), Kind: provider.GetKind(), Namespace: provider.GetNamespace(), Name: provider.GetName()}
	} else if provider != nil {
		ref = v1alpha1.ObjectRef{Namespace: provider.GetNamespace(), Name: provider.GetName()}
	} else if len(c.Requests) > 0 {
		ref = v1alpha1.ObjectRef{Namespace: c.Requests[0].Namespace, Name: c.Requests[0].Name}
	}
	if err := r.ensureRelationship(ctx, w, rel, v1alpha1.RelationshipSpec{
		Consumer:  v1alpha1.ObjectRef{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Name: w.GetName()},
		Provider:  ref,
		Interface: iface,
		Pin:       pin,
	}); err != nil {
		return outcome{}, err
	}
	st := rel.Status.DeepCopy()
	st.ObservedGeneration = rel.Generation
	set := func(t string, ok bool, reason, msg string) {
		s := metav1.ConditionFalse
		if ok {
			s = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg, ObservedGeneration: rel.Generation})
	}
	cycle := "" // a cycle of start dependencies this relationship closes
	// unavailable says what a lifecycle available consumer's first start
	// waits for: its provider to be available.
	unavailable := ""
	finish := func() error {
		ready := true
		for _, t := range []string{v1alpha1.ConditionProviderFound, v1alpha1.ConditionPermitted, v1alpha1.ConditionInterfaceMatched, v1alpha1.ConditionValuesResolved} {
			if !meta.IsStatusConditionTrue(st.Conditions, t) {
				ready = false
				c := meta.FindStatusCondition(st.Conditions, t)
				reason, msg := "Pending", t+" is not true"
				if c != nil {
					reason, msg = c.Reason, c.Message
				}
				set(v1alpha1.ConditionReady, false, reason, msg)
				break
			}
		}
		switch {
		case ready && cycle != "":
			set(v1alpha1.ConditionReady, false, "Cycle", cycle+": each waits for the next to start; give one of these relationships lifecycle none (a ConsumerConfig)")
		case ready && unavailable != "":
			set(v1alpha1.ConditionReady, false, "ProviderUnavailable", unavailable+"; the consumer's pods wait in "+WaitContainer+" until then (lifecycle available)")
		case ready:
			set(v1alpha1.ConditionReady, true, "Established", fmt.Sprintf("revision %d", st.Revision))
		}
		if equalStatus(&rel.Status, st) {
			return nil
		}
		rel.Status = *st
		return r.updateStatus(ctx, rel)
	}
	current := func() *Injection {
		if st.Revision == 0 {
			return nil
		}
		return &Injection{Relationship: rel.Name, Interface: iface, Revision: st.Revision, Secret: st.Secret}
	}

	switch {
	case len(candidates) > 1:
		set(v1alpha1.ConditionProviderFound, false, "Ambiguous", fmt.Sprintf("%s all provide %s: name one provider per interface", strings.Join(candidates, ", "), iface))
		// The template stays as it is until one provider is named.
		return outcome{hold: true, rel: rel}, finish()
	case provider == nil || !permitted:
		t, missing, err := consumerConfig(ctx, r.Client, w.GetNamespace(), c, iface)
		if err != nil {
			return outcome{}, err
		}
		if !permitted {
			// Consent withdrawn (or never given): nothing of it stays,
			// not even the copies of its values here.
			st.Revision, st.Hash, st.Secret, st.History = 0, "", "", nil
			meta.RemoveStatusCondition(&st.Conditions, v1alpha1.ConditionPinned)
		}
		// Not permitted reads as not found: nothing tells an object of
		// another namespace exists.
		msg := notFound(c.Requests, iface, w.GetNamespace(), notes)
		if st.Revision == 0 && t.lifecycle != v1alpha1.LifecycleNone {
			msg += "; meanwhile the consumer's new pods wait in " + WaitContainer + " (lifecycle " + t.lifecycle + "), running ones go on, until a provider is found that consents, the relationship is removed or its lifecycle is none"
		}
		set(v1alpha1.ConditionProviderFound, false, "NotFound", msg)
		if slices.ContainsFunc(c.Requests, func(req Request) bool { return req.Namespace != w.GetNamespace() }) {
			set(v1alpha1.ConditionPermitted, false, "NotPermitted", msg)
		}
		if st.Revision == 0 {
			r.Recorder.Event(w, corev1.EventTypeNormal, "RelationshipPending", msg)
		}
		if !permitted {
			if err := finish(); err != nil {
				return outcome{}, err
			}
			return outcome{revoked: rel, rel: rel}, nil
		}
		// The values of the last revision stay: a deleted provider's
		// consumers keep running as they are.
		return outcome{in: current(), takes: t, again: true, hold: missing != "", rel: rel}, finish()
	}
	set(v1alpha1.ConditionProviderFound, true, "Found", fmt.Sprintf("%s %s/%s", provider.GetKind(), provider.GetNamespace(), provider.GetName()))
	set(v1alpha1.ConditionPermitted, true, "Permitted", "")
	t, missing, err := consumerConfig(ctx, r.Client, w.GetNamespace(), c, iface)
	if err != nil {
		return outcome{}, err
	}
	if missing != "" {
		set(v1alpha1.ConditionInterfaceMatched, false, "ConfigMissing", missing)
		return outcome{again: true, hold: true, rel: rel}, finish()
	}
	set(v1alpha1.ConditionInterfaceMatched, true, "Matched", "")
	if t.lifecycle != v1alpha1.LifecycleNone {
		path, err := r.startCycle(ctx, node{r.kind, w.GetNamespace(), w.GetName()}, node{provider.GetKind(), provider.GetNamespace(), provider.GetName()})
		if err != nil {
			return outcome{}, err
		}
		if path != nil {
			cycle = cycleString(path)
			r.Recorder.Eventf(w, corev1.EventTypeWarning, "Cycle", "%s: %s", iface, cycle)
		}
	}
	src, problems, err := r.source(ctx, provider, iface)
	if err != nil {
		return outcome{}, err
	}
	// The interface's type, if it has one: both sides are held to it.
	it := &v1alpha1.Interface{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: iface}, it); apierrors.IsNotFound(err) {
		it = nil
	} else if err != nil {
		return outcome{}, err
	}
	var vals Values
	if problems == nil {
		if vals, problems, err = Resolve(iface, src, it); err != nil {
			return outcome{}, err
		}
	}
	resolved := vals != nil
	if resolved {
		problems = checkTakes(t.keys, vals, it, t.config)
	}
	if len(problems) > 0 {
		report(set, problems, resolved)
		// A key the consumer takes that the values lack: the template
		// keeps what it has (it would point at a key its Secret lacks).
		return outcome{in: current(), takes: t, again: true, hold: resolved, rel: rel}, finish()
	}
	set(v1alpha1.ConditionValuesResolved, true, "Resolved", "")
	if slices.ContainsFunc(t.keys, func(k v1alpha1.KeyInjection) bool { return k.Binding != "" }) {
		// The binding directory's type and provider travel with the values.
		vals[bindingTypeKey], vals[bindingProviderKey] = iface, provider.GetNamespace()+"/"+provider.GetName()
	}
	latest := v1alpha1.RevisionRecord{}
	trimmed := false
	if len(st.History) > 0 {
		latest = st.History[0]
	}
	if hash := vals.Hash(); hash != latest.Hash {
		next := latest.Revision + 1
		secret, foreign, err := r.writeRevision(ctx, rel, next, hash, vals)
		if err != nil {
			return outcome{}, err
		}
		if foreign != "" {
			set(v1alpha1.ConditionValuesResolved, false, "SecretConflict", foreign)
			r.Recorder.Event(w, corev1.EventTypeWarning, "SecretConflict", foreign)
			return outcome{in: current(), takes: t, again: true, rel: rel}, finish()
		}
		// The revision is persisted before any template refers to it.
		latest = v1alpha1.RevisionRecord{Revision: next, Hash: hash, Secret: secret, Created: metav1.Now()}
		all := append([]v1alpha1.RevisionRecord{latest}, st.History...)
		st.History = all[:min(len(all), r.Options.History)]
		trimmed = len(all) > r.Options.History
		// A pinned revision stays kept beyond the history: it runs.
		if pin != nil {
			if i := slices.IndexFunc(all, func(h v1alpha1.RevisionRecord) bool { return h.Revision == *pin }); i >= r.Options.History {
				st.History = append(st.History, all[i])
			}
		}
	}
	// The template runs the latest revision, or the pinned one while it is
	// kept; a pin to a revision no longer kept holds what runs.
	run := latest
	if pin != nil {
		i := slices.IndexFunc(st.History, func(h v1alpha1.RevisionRecord) bool { return h.Revision == *pin })
		switch {
		case i >= 0:
			run = st.History[i]
			set(v1alpha1.ConditionPinned, true, "Pinned", fmt.Sprintf("held at r%d (the latest is r%d)", *pin, latest.Revision))
		case st.Revision > 0:
			run = v1alpha1.RevisionRecord{Revision: st.Revision, Hash: st.Hash, Secret: st.Secret}
			set(v1alpha1.ConditionPinned, false, "NotKept", fmt.Sprintf("r%d is not among the %d revisions kept; r%d stays", *pin, len(st.History), st.Revision))
		default:
			set(v1alpha1.ConditionPinned, false, "NotKept", fmt.Sprintf("r%d is not among the %d revisions kept", *pin, len(st.History)))
		}
	} else {
		meta.RemoveStatusCondition(&st.Conditions, v1alpha1.ConditionPinned)
	}
	if run.Revision != latest.Revision {
		// An older revision runs (a pin): it must hold the keys taken too.
		s := &corev1.Secret{}
		if err := r.Reader.Get(ctx, types.NamespacedName{Namespace: rel.Namespace, Name: run.Secret}, s); err != nil {
			return outcome{}, err
		}
		if problems := checkTakes(t.keys, secretValues(s), nil, t.config); len(problems) > 0 {
			for i := range problems {
				problems[i].Detail = fmt.Sprintf("r%d (pinned): %s", run.Revision, problems[i].Detail)
			}
			report(set, problems, true)
			return outcome{in: current(), takes: t, again: true, hold: true, rel: rel}, finish()
		}
	}
	if t.lifecycle == v1alpha1.LifecycleAvailable {
		ok, why, err := r.available(ctx, provider)
		if err != nil {
			return outcome{}, err
		}
		set(v1alpha1.ConditionProviderAvailable, ok, map[bool]string{true: "Available", false: "Unavailable"}[ok], why)
		if !ok && st.Revision == 0 {
			// Only the first start waits: the revision is made, the
			// template gets it once the provider is available.
			unavailable, run = why, v1alpha1.RevisionRecord{}
		}
	} else {
		meta.RemoveStatusCondition(&st.Conditions, v1alpha1.ConditionProviderAvailable)
	}
	if run.Revision != st.Revision && st.Revision > 0 {
		r.Recorder.Eventf(w, corev1.EventTypeNormal, "ProviderChanged", "%s: r%d→r%d", iface, st.Revision, run.Revision)
	}
	st.Revision, st.Hash, st.Secret = run.Revision, run.Hash, run.Secret
	if err := finish(); err != nil {
		return outcome{}, err
	}
	if trimmed {
		// Revisions left the history: their Secrets go (and any a crash
		// left behind), behind the template's patch.
		r.prunes.add(r.kind, client.ObjectKeyFromObject(rel))
	}
	return outcome{in: current(), takes: t, rel: rel}, nil
}

// report sets the conditions problems are of: InterfaceMatched for those
// of the agreed interface, ValuesResolved for those of the sources (true
// when the values resolved).
func report(set func(t string, ok bool, reason, msg string), problems []Problem, resolved bool) {
	var typed, sourced []string
	for _, p := range problems {
		if p.Interface {
			typed = append(typed, p.String())
		} else {
			sourced = append(sourced, p.String())
		}
	}
	reason := func(typed bool) string {
		return problems[slices.IndexFunc(problems, func(p Problem) bool { return p.Interface == typed })].Reason
	}
	if len(typed) > 0 {
		set(v1alpha1.ConditionInterfaceMatched, false, reason(true), strings.Join(typed, "; "))
	}
	switch {
	case len(sourced) > 0:
		set(v1alpha1.ConditionValuesResolved, false, reason(false), strings.Join(sourced, "; "))
	case resolved:
		set(v1alpha1.ConditionValuesResolved, true, "Resolved", "")
	default:
		set(v1alpha1.ConditionValuesResolved, false, reason(true), strings.Join(typed, "; "))
	}
}

// ensureRelationship reads rel (by its name) and creates or updates it
// to carry spec, owned by its consumer w.
func (r *kindReconciler) ensureRelationship(ctx context.Context, w client.Object, rel *v1alpha1.Relationship, spec v1alpha1.RelationshipSpec) error {
	err := r.written.get(ctx, r.Client, client.ObjectKeyFromObject(rel), rel)
	if apierrors.IsNotFound(err) {
		rel.Spec = spec
		if err := controllerutil.SetControllerReference(w, rel, r.Client.Scheme()); err != nil {
			return err
		}
		return r.Client.Create(ctx, rel)
	}
	if err != nil {
		return err
	}
	was := rel.DeepCopy()
	rel.Spec = spec
	if err := controllerutil.SetControllerReference(w, rel, r.Client.Scheme()); err != nil {
		return err
	}
	if equality.Semantic.DeepEqual(was.Spec, rel.Spec) && equality.Semantic.DeepEqual(was.OwnerReferences, rel.OwnerReferences) {
		return nil
	}
	if err := r.Client.Update(ctx, rel); err != nil {
		return err
	}
	r.written.wrote(was.ResourceVersion, rel)
	return nil
}

// updateStatus writes rel's status and remembers the write until the
// cache shows it.
func (r *kindReconciler) updateStatus(ctx context.Context, rel *v1alpha1.Relationship) error {
	before := rel.ResourceVersion
	if err := r.Client.Status().Update(ctx, rel); err != nil {
		return err
	}
	r.written.wrote(before, rel)
	return nil
}

// pruneRevisions deletes the values Secrets of revisions no longer kept
// (beyond the history) and not running: none a pod refers to, nor, unless
// consent was withdrawn (no history left), a revision the workload can
// roll back to. held: some pods still use one, which is to be looked at
// again.
func (r *kindReconciler) pruneRevisions(ctx context.Context, rel *v1alpha1.Relationship) (held bool, _ error) {
	secrets, err := r.valuesSecrets(ctx, rel)
	if err != nil {
		return false, err
	}
	st := &rel.Status
	var gone []*metav1.PartialObjectMetadata
	var names []string
	for i := range secrets {
		s := &secrets[i]
		kept := s.Name == st.Secret || s.Name == liveSecretName(rel.Name) || slices.ContainsFunc(st.History, func(h v1alpha1.RevisionRecord) bool { return h.Secret == s.Name })
		if !kept && metav1.IsControlledBy(s, rel) {
			gone, names = append(gone, s), append(names, s.Name)
		}
	}
	if len(gone) == 0 {
		return false, nil // nothing to delete: no need to read what uses them
	}
	used, err := r.secretsInUse(ctx, rel, names, len(st.History) > 0)
	if err != nil {
		return false, err
	}
	for _, s := range gone {
		if used.targets[s.Name] {
			continue
		}
		if used.pods[s.Name] {
			held = true
			continue
		}
		// The cached copy may be of a Secret since deleted (not found) or
		// replaced under its name (another UID: a conflict): not this one.
		err := r.Client.Delete(ctx, s, client.Preconditions{UID: &s.UID})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return held, err
		}
	}
	return held, nil
}

// complete gives an injection its keys (none: the default interface's).
// An InPlace one refers to the relationship's mutable Secret, made to hold
// the values of the revision that runs: new values change its files, not
// the template.
func (r *kindReconciler) complete(ctx context.Context, rel *v1alpha1.Relationship, in *Injection, t takes) (_ *Injection, foreign string, _ error) {
	in.Keys = t.keys
	if !t.inPlace {
		return in, "", nil
	}
	revision := &corev1.Secret{}
	if err := r.Reader.Get(ctx, types.NamespacedName{Namespace: rel.Namespace, Name: in.Secret}, revision); err != nil {
		return nil, "", err
	}
	// Read from the API: the cache holds only exposed Secrets.
	live := &corev1.Secret{}
	key := types.NamespacedName{Namespace: rel.Namespace, Name: liveSecretName(rel.Name)}
	err := r.Reader.Get(ctx, key, live)
	switch {
	case apierrors.IsNotFound(err):
		live = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace,
			Labels: map[string]string{labelRelationship: rel.Name}}, Data: revision.Data}
		if err := controllerutil.SetControllerReference(rel, live, r.Client.Scheme()); err != nil {
			return nil, "", err
		}
		if err := r.Client.Create(ctx, live); err != nil {
			return nil, "", err
		}
	case err != nil:
		return nil, "", err
	case !metav1.IsControlledBy(live, rel):
		return in, fmt.Sprintf("the relationship's mutable values Secret %s/%s belongs to someone else: delete or rename it", key.Namespace, key.Name), nil
	case !equality.Semantic.DeepEqual(live.Data, revision.Data):
		live.Data = revision.Data
		if err := r.Client.Update(ctx, live); err != nil {
			return nil, "", err
		}
	}
	in.Secret, in.InPlace = live.Name, true
	return in, "", nil
}

// consents says whether provider lets consumers of namespace relate to
// it: its own namespace's, and those its allow-namespaces annotation
// lists.
func consents(provider client.Object, namespace string) bool {
	if provider.GetNamespace() == namespace {
		return true
	}
	p, _ := ParseProvider(provider.GetAnnotations())
	return p.AllowAll || slices.Contains(p.AllowNamespaces, namespace)
}

// notFound says that none of requests provides iface to consumers of
// namespace. Notes about objects of other namespaces are left out.
func notFound(requests []Request, iface, namespace string, notes []string) string {
	msg := fmt.Sprintf("none of %s provides %s", requestsString(requests), iface)
	foreign := false
	for _, req := range requests {
		if req.Namespace == namespace {
			continue
		}
		foreign = true
		notes = slices.DeleteFunc(notes, func(n string) bool { return strings.Contains(n, " "+req.Key()+": ") })
	}
	if foreign {
		msg += " to namespace " + namespace + " (an object of another namespace is seen only where its " + AnnotationAllowNamespaces + " lists this one)"
	}
	if len(notes) > 0 {
		msg += " (" + strings.Join(notes, "; ") + ")"
	}
	return msg
}

func requestsString(rs []Request) string {
	var s []string
	for _, r := range rs {
		s = append(s, r.String())
	}
	return strings.Join(s, ", ")
}

// equalStatus: a status write only when something changed.
func equalStatus(a, b *v1alpha1.RelationshipStatus) bool {
	return equality.Semantic.DeepEqual(a, b)
}

// CacheOptions are the manager's cache settings the controller needs: of
// Secrets and ConfigMaps only those labelled expose=true are watched.
func CacheOptions() cache.Options {
	exposed := labels.SelectorFromSet(labels.Set{LabelExpose: "true"})
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.Secret{}:    {Label: exposed},
		&corev1.ConfigMap{}: {Label: exposed},
	}}
}

// source is where a provider's values come from. A ProviderConfig the
// provider names that does not exist, or is of another interface, is a
// problem.
func (r *kindReconciler) source(ctx context.Context, provider *unstructured.Unstructured, iface string) (Source, []Problem, error) {
	src := Source{Provider: provider, ClusterDomain: r.Options.ClusterDomain}
	ns := provider.GetNamespace()
	src.Secret = func(name string) (*corev1.Secret, error) {
		s := &corev1.Secret{}
		err := r.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, s)
		if apierrors.IsNotFound(err) || (err == nil && s.Labels[LabelExpose] != "true") {
			return nil, nil
		}
		return s, err
	}
	src.ConfigMap = func(name string) (*corev1.ConfigMap, error) {
		cm := &corev1.ConfigMap{}
		err := r.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, cm)
		if apierrors.IsNotFound(err) || (err == nil && cm.Labels[LabelExpose] != "true") {
			return nil, nil
		}
		return cm, err
	}
	src.Object = func(kind, name string) (*unstructured.Unstructured, string, error) {
		return r.object(ctx, src, ns, kind, name)
	}
	p, err := ParseProvider(provider.GetAnnotations())
	if err != nil {
		return src, nil, nil
	}
	if name, ok := p.Configs[iface]; ok {
		pc := &v1alpha1.ProviderConfig{}
		err := r.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, pc)
		switch {
		case apierrors.IsNotFound(err):
			return src, []Problem{{Reason: "ConfigMissing", Detail: fmt.Sprintf("ProviderConfig %s/%s does not exist (%s %s/%s names it for %s in %s): create it, or name another",
				ns, name, provider.GetKind(), ns, provider.GetName(), iface, AnnotationConfig)}}, nil
		case err != nil:
			return src, nil, err
		case pc.Spec.Interface != iface:
			return src, []Problem{{Reason: "InterfaceMismatch", Interface: true, Detail: fmt.Sprintf("ProviderConfig %s/%s is for interface %s, but %s %s/%s names it for %s in %s",
				ns, name, pc.Spec.Interface, provider.GetKind(), ns, provider.GetName(), iface, AnnotationConfig)}}, nil
		}
		src.Config = pc
	}
	return src, nil, nil
}

// writeRevision creates the immutable values Secret of a revision, owned
// by the Relationship. One left by a run that crashed before recording it
// is reused when it holds the same values, and replaced when it holds
// others: no template refers to a revision not recorded.
func (r *kindReconciler) writeRevision(ctx context.Context, rel *v1alpha1.Relationship, revision int64, hash string, vals Values) (name, foreign string, _ error) {
	name = rel.Name + "-r" + strconv.FormatInt(revision, 10)
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: rel.Namespace,
			Labels:      map[string]string{labelRelationship: rel.Name},
			Annotations: map[string]string{annotationHash: hash}},
		Immutable: ptr.To(true),
		Data:      map[string][]byte{},
	}
	for k, v := range vals {
		s.Data[k] = []byte(v)
	}
	if err := controllerutil.SetControllerReference(rel, s, r.Client.Scheme()); err != nil {
		return "", "", err
	}
	err := r.Client.Create(ctx, s)
	if apierrors.IsAlreadyExists(err) {
		old := &corev1.Secret{}
		if err := r.Reader.Get(ctx, client.ObjectKeyFromObject(s), old); err != nil {
			return "", "", err
		}
		if old.Annotations[annotationHash] == hash && metav1.IsControlledBy(old, rel) {
			return name, "", nil
		}
		if ownWrite(old, rel) {
			if err := r.Client.Delete(ctx, old, client.Preconditions{UID: &old.UID}); client.IgnoreNotFound(err) != nil {
				return "", "", err
			}
			return name, "", r.Client.Create(ctx, s)
		}
		// Someone else's values under this revision's name: never rewrite
		// them.
		return "", fmt.Sprintf("Secret %s/%s, revision %d's name, holds other values: delete it if no pod uses it", rel.Namespace, name, revision), nil
	}
	return name, "", err
}

// ownWrite says whether s is a values Secret the controller wrote for
// rel, untouched: its label, its owner, and values of its recorded hash.
func ownWrite(s *corev1.Secret, rel *v1alpha1.Relationship) bool {
	return metav1.IsControlledBy(s, rel) && s.Labels[labelRelationship] == rel.Name && s.Annotations[annotationHash] == secretValues(s).Hash()
}

// inject applies w's template patch as the controller's field manager,
// unless the workload already carries exactly this patch: a reconcile
// that changes nothing writes nothing.
func (r *kindReconciler) inject(ctx context.Context, w client.Object, owned *fieldpath.Set, injections []Injection) (*unstructured.Unstructured, error) {
	tpl := template(w)
	gvk, err := r.Client.GroupVersionKindFor(w)
	if err != nil {
		return nil, err
	}
	tplPatch := templatePatch(patchContainers(tpl, owned), injections)
	md := map[string]any{"name": w.GetName(), "namespace": w.GetNamespace()}
	if len(injections) > 0 {
		hash, err := patchHash(tplPatch)
		if err != nil {
			return nil, err
		}
		if w.GetAnnotations()[annotationApplied] == hash && carries(tpl, tplPatch) {
			obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(w)
			if err != nil {
				return nil, err
			}
			live := &unstructured.Unstructured{Object: obj}
			live.SetGroupVersionKind(gvk)
			return live, nil
		}
		md["annotations"] = map[string]any{annotationApplied: hash}
		if err := r.reapplies.applying(client.ObjectKeyFromObject(w), hash, time.Now()); err != nil {
			return nil, err
		}
	}
	patch := &unstructured.Unstructured{Object: map[string]any{
		"metadata": md,
		"spec":     map[string]any{"template": tplPatch},
	}}
	patch.SetGroupVersionKind(gvk)
	// The answer is the workload as it is now: its generation and status.
	return patch, r.Client.Patch(ctx, patch, client.Apply, client.FieldOwner(FieldManager))
}

// patchHash identifies a template patch.
func patchHash(patch map[string]any) (string, error) {
	data, err := json.Marshal(patch) // maps marshal with sorted keys
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8]), nil
}

// carries says whether tpl holds every field of the template patch as
// it was applied (no one removed or changed an injected field since).
// Only the fields the patch sets are compared: what the API server
// defaults beside them (a Secret volume's defaultMode) is no change.
func carries(tpl *corev1.PodTemplateSpec, patch map[string]any) bool {
	live, err := runtime.DefaultUnstructuredConverter.ToUnstructured(tpl)
	return err == nil && holds(live, patch)
}

// holds says whether live has every field of want, with want's value.
// List elements are matched by their key (a mount's mountPath, else
// name), a list of elements without one (a volume's items) by position.
func holds(live, want any) bool {
	switch w := want.(type) {
	case map[string]any:
		l, ok := live.(map[string]any)
		if !ok {
			return false
		}
		for k, v := range w {
			if !holds(l[k], v) {
				return false
			}
		}
		return true
	case []any:
		l, ok := live.([]any)
		if !ok {
			return false
		}
		keyOf := func(e any) (string, any) {
			m, _ := e.(map[string]any)
			for _, k := range []string{"mountPath", "name"} {
				if v, ok := m[k]; ok {
					return k, v
				}
			}
			return "", nil
		}
		for i, e := range w {
			k, v := keyOf(e)
			if k == "" {
				if len(l) != len(w) || !holds(l[i], e) {
					return false
				}
				continue
			}
			j := slices.IndexFunc(l, func(le any) bool { m, _ := le.(map[string]any); return m[k] == v })
			if j < 0 || !holds(l[j], e) {
				return false
			}
		}
		return true
	}
	return live == want
}

// rolledOut says whether the workload's pods all run its current
// template, as `kubectl rollout status` judges it.
func rolledOut(w *unstructured.Unstructured) (bool, string) {
	num := func(path ...string) int64 {
		v, _, _ := unstructured.NestedFieldNoCopy(w.Object, path...)
		switch n := v.(type) {
		case int64:
			return n
		case float64:
			return int64(n)
		}
		return 0
	}
	str := func(path ...string) string { v, _, _ := unstructured.NestedString(w.Object, path...); return v }
	if num("status", "observedGeneration") < w.GetGeneration() {
		return false, "the workload's controller has not seen the new template yet"
	}
	switch w.GetKind() {
	case "Deployment":
		want := int64(1)
		if v, ok, _ := unstructured.NestedFieldNoCopy(w.Object, "spec", "replicas"); ok && v != nil {
			want = num("spec", "replicas")
		}
		updated, total, available := num("status", "updatedReplicas"), num("status", "replicas"), num("status", "availableReplicas")
		if updated < want || total > updated || available < updated {
			return false, fmt.Sprintf("%d of %d pods run the current template, %d available", updated, want, available)
		}
	case "StatefulSet":
		if str("status", "updateRevision") != str("status", "currentRevision") || num("status", "readyReplicas") < num("spec", "replicas") {
			return false, fmt.Sprintf("%d of %d pods run the current revision, %d ready", num("status", "updatedReplicas"), num("spec", "replicas"), num("status", "readyReplicas"))
		}
	case "DaemonSet":
		desired := num("status", "desiredNumberScheduled")
		if num("status", "updatedNumberScheduled") < desired || num("status", "numberAvailable") < desired {
			return false, fmt.Sprintf("%d of %d pods run the current template, %d available", num("status", "updatedNumberScheduled"), desired, num("status", "numberAvailable"))
		}
	}
	return true, "every pod runs the current template"
}

// unblockStatefulSet deletes the StatefulSet's pods of an older revision
// that wait in the wait container: with OrderedReady the controller
// would wait forever for them to be Ready before updating them.
func (r *kindReconciler) unblockStatefulSet(ctx context.Context, sts *unstructured.Unstructured) error {
	update, _, _ := unstructured.NestedString(sts.Object, "status", "updateRevision")
	observed, _, _ := unstructured.NestedInt64(sts.Object, "status", "observedGeneration")
	if update == "" || observed < sts.GetGeneration() {
		return nil // the StatefulSet controller has not computed the new revision yet
	}
	sel, _, _ := unstructured.NestedStringMap(sts.Object, "spec", "selector", "matchLabels")
	if len(sel) == 0 {
		return nil
	}
	var pods corev1.PodList
	if err := r.Reader.List(ctx, &pods, client.InNamespace(sts.GetNamespace()), client.MatchingLabels(sel)); err != nil {
		return err
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if !metav1.IsControlledBy(p, sts) || p.Labels[appsv1.ControllerRevisionHashLabelKey] == update || !waiting(p) {
			continue
		}
		if err := r.Client.Delete(ctx, p, client.Preconditions{UID: &p.UID}); client.IgnoreNotFound(err) != nil {
			return err
		}
		r.Recorder.Eventf(sts, corev1.EventTypeNormal, "Unblocked", "deleted pod %s, waiting at an old revision, so the rollout can go on", p.Name)
	}
	return nil
}

// waiting says whether the pod sits in the wait container.
func waiting(p *corev1.Pod) bool {
	for _, s := range p.Status.InitContainerStatuses {
		if s.Name == WaitContainer && s.State.Terminated == nil {
			return true
		}
	}
	return false
}

// markInjected records on each Relationship whether its injection is in
// the template.
func (r *kindReconciler) markInjected(ctx context.Context, w client.Object, rels map[string]*v1alpha1.Relationship, injections []Injection, msgs []string, status metav1.ConditionStatus, reason, msg string, also ...metav1.Condition) error {
	var errs []error
	for i, in := range injections {
		if i < len(msgs) {
			msg = msgs[i]
		}
		rel := rels[in.Relationship]
		if rel == nil {
			rel = &v1alpha1.Relationship{}
			if err := r.written.get(ctx, r.Client, types.NamespacedName{Namespace: w.GetNamespace(), Name: in.Relationship}, rel); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		changed := meta.SetStatusCondition(&rel.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionInjected, Status: status, Reason: reason, Message: msg, ObservedGeneration: rel.Generation})
		for _, c := range also {
			c.ObservedGeneration = rel.Generation
			changed = meta.SetStatusCondition(&rel.Status.Conditions, c) || changed
		}
		if changed {
			errs = append(errs, r.updateStatus(ctx, rel))
		}
	}
	return errors.Join(errs...)
}

// pruneRelationships deletes w's Relationships of interfaces it no longer
// consumes, and those of a name no longer theirs (an interface with a "-"
// named before its name had a hash).
func (r *kindReconciler) pruneRelationships(ctx context.Context, w client.Object, ifaces []string) error {
	var list v1alpha1.RelationshipList
	if err := r.Client.List(ctx, &list, client.InNamespace(w.GetNamespace()), client.MatchingFields{consumerIndex: r.kind + "/" + w.GetName()}); err != nil {
		return err
	}
	for i := range list.Items {
		rel := &list.Items[i]
		if !metav1.IsControlledBy(rel, w) || slices.Contains(ifaces, rel.Spec.Interface) && rel.Name == relationshipName(r.kind, w.GetName(), rel.Spec.Interface) {
			continue
		}
		if err := r.Client.Delete(ctx, rel); client.IgnoreNotFound(err) != nil {
			return err
		}
		r.written.forget(client.ObjectKeyFromObject(rel))
	}
	return nil
}
