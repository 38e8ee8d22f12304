package streams

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/cloudtransit/transit/controllers/streams/api/v1alpha1"
	"github.com/cloudtransit/transit/controllers/streams/kafka"
	"github.com/cloudtransit/transit/controllers/streams/sidecar"
	"github.com/cloudtransit/transit/controllers/streams/topology"
)

// Options tune the controller.
type Options struct {
	// Bootstrap is the Kafka of endpoints that name none (the addon's).
	Bootstrap string
	// SidecarImage runs beside every function.
	SidecarImage string
	// History is how many finished revisions a Topology keeps (10).
	History int
	// UpgradeTimeout is the standby upgrade timeout of topologies that set
	// none (5m).
	UpgradeTimeout time.Duration
	// Security is how the controller's own clients reach the Kafka of
	// Bootstrap (the caller gives it to the Admin: Admin.Secure); its
	// Explain words the conditions.
	Security kafka.Security
	// KafkaSecret names the Secret every processor pod that uses the
	// Kafka of Bootstrap mounts from its own namespace for its sidecar's
	// clients (kafka.LoadSecurity's files), unless the topology names one
	// of its own for it (kafkaSecret); "" is plaintext. Other clusters are
	// reached with the topology's kafkaSecret for them, else in plaintext.
	KafkaSecret string
	// Now is the clock (time.Now).
	Now func() time.Time
}

func (o Options) withDefaults() Options {
	if o.History <= 0 {
		o.History = 10
	}
	if o.UpgradeTimeout <= 0 {
		o.UpgradeTimeout = 5 * time.Minute
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Reasons of the Upgrading condition; Switching is written before the old
// source readers are deleted: from then on the upgrade only goes forward.
const (
	reasonStarting  = "Starting"
	reasonSwitching = "Switching"
	reasonSwitched  = "Switched"
)

// TopologyReconciler runs Topologies: Updater, Syncer and garbage
// collector (see the package documentation).
type TopologyReconciler struct {
	Client client.Client
	// Reader reads the API server directly: what decides a destructive
	// step (pods gone, nothing alive) is never the cache's word.
	Reader   client.Reader
	Kafka    *kafka.Admin
	Recorder record.EventRecorder
	Options

	scalers autoscalers
}

// CacheOptions limit the manager's cache to the controller's own
// Deployments and pods.
func CacheOptions() cache.Options {
	managed, _ := labels.NewRequirement(LabelTopology, selection.Exists, nil)
	sel := labels.NewSelector().Add(*managed)
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&appsv1.Deployment{}: {Label: sel},
		&corev1.Pod{}:        {Label: sel},
	}}
}

// SetupWithManager registers the reconciler.
func (r *TopologyReconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Options = r.withDefaults()
	byLabel := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		if name := o.GetLabels()[LabelTopology]; name != "" {
			return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: name}}}
		}
		return nil
	})
	byPart := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		var topos v1alpha1.TopologyList
		if err := mgr.GetClient().List(ctx, &topos, client.InNamespace(o.GetNamespace())); err != nil {
			return nil
		}
		part := o.(*v1alpha1.TopologyPartRevision).Spec.Part
		var reqs []reconcile.Request
		for _, t := range topos.Items {
			if slices.ContainsFunc(t.Spec.Parts, func(p v1alpha1.PartRef) bool { return p.Name == part }) {
				reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&t)})
			}
		}
		return reqs
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("topology").
		For(&v1alpha1.Topology{}).
		Owns(&v1alpha1.TopologyRevision{}).
		Watches(&appsv1.Deployment{}, byLabel, builder.WithPredicates(predicate.ResourceVersionChangedPredicate{})).
		Watches(&corev1.Pod{}, byLabel).
		Watches(&v1alpha1.TopologyPartRevision{}, byPart).
		Complete(r)
}

// observed is what runs, read at the start of a reconcile.
type observed struct {
	revisions   map[string]*v1alpha1.TopologyRevision
	deployments map[string]*appsv1.Deployment // by name
}

func (o *observed) deployment(rev, processor string) *appsv1.Deployment {
	return o.deployments[deploymentName(rev, processor)]
}

// Reconcile moves a Topology one step towards its spec. A write that
// conflicts (the cache was behind) starts over from a fresh read.
func (r *TopologyReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	res, err := r.reconcile(ctx, req)
	if apierrors.IsConflict(err) {
		return reconcile.Result{Requeue: true}, nil
	}
	return res, err
}

func (r *TopologyReconciler) reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var t v1alpha1.Topology
	if err := r.Client.Get(ctx, req.NamespacedName, &t); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !t.DeletionTimestamp.IsZero() {
		return r.finalize(ctx, &t)
	}
	if controllerutil.AddFinalizer(&t, FinalizerKafka) {
		if err := r.Client.Update(ctx, &t); err != nil {
			return reconcile.Result{}, err
		}
	}
	if err := r.ensureAccount(ctx, t.Namespace); err != nil {
		return reconcile.Result{}, err
	}
	obs, err := r.observe(ctx, &t)
	if err != nil {
		return reconcile.Result{}, err
	}
	before := t.Status.DeepCopy()
	t.Status.ObservedGeneration = t.Generation

	composed, probs, err := r.compose(ctx, &t, obs.revisions[t.Status.Active])
	if err != nil {
		return reconcile.Result{}, err
	}
	if probs != nil {
		t.Status.Problems = probs.Strings()
		r.condition(&t, v1alpha1.ConditionValid, false, "Invalid", fmt.Sprintf("%d problems: %s", len(probs), probs.Error()))
	} else {
		t.Status.Problems = nil
		r.condition(&t, v1alpha1.ConditionValid, true, "Composed", "revision "+topology.Name(composed))
	}

	specs := []*v1alpha1.TopologyRevisionSpec{composed}
	for _, name := range append([]string{t.Status.Active, t.Status.Next}, t.Status.PhasingOut...) {
		if rev := obs.revisions[name]; rev != nil {
			specs = append(specs, &rev.Spec)
		}
	}
	ctx, kafkaErr := r.kafkaSecurity(ctx, &t, specs...)
	if kafkaErr == nil {
		kafkaErr = r.reachable(ctx, &t, obs, composed)
	}
	if kafkaErr != nil {
		r.condition(&t, v1alpha1.ConditionKafkaReachable, false, "Unreachable", kafkaErr.Error()+": no revision is made, switched or collected until it answers")
	} else {
		r.condition(&t, v1alpha1.ConditionKafkaReachable, true, "Reachable", "")
	}

	var wrote bool
	if kafkaErr == nil {
		// First: the switch and the collector read committed offsets
		// and ends that a dead pod's open transaction holds back.
		if err := r.fenceGone(ctx, &t, obs); err != nil {
			return reconcile.Result{}, err
		}
		steps := []func(context.Context, *v1alpha1.Topology, *observed, *v1alpha1.TopologyRevisionSpec) (bool, error){
			r.update, r.upgrade,
		}
		for _, step := range steps {
			if wrote, err = step(ctx, &t, obs, composed); err != nil || wrote {
				break
			}
		}
		if err != nil {
			return reconcile.Result{}, err
		}
		if wrote {
			return reconcile.Result{Requeue: true}, nil
		}
	}
	if kafkaErr == nil {
		r.autoscale(ctx, &t, obs)
	}
	if err := r.sync(ctx, &t, obs); err != nil {
		return reconcile.Result{}, err
	}
	if kafkaErr == nil {
		if wrote, err = r.collect(ctx, &t, obs); err != nil {
			return reconcile.Result{}, err
		}
		if wrote {
			return reconcile.Result{Requeue: true}, nil
		}
	}
	r.readiness(ctx, &t, obs)
	if !equality.Semantic.DeepEqual(before, &t.Status) {
		if err := r.Client.Status().Update(ctx, &t); err != nil {
			return reconcile.Result{}, err
		}
	}
	switch {
	case kafkaErr != nil:
		return reconcile.Result{RequeueAfter: 5 * time.Second}, nil
	case upgrading(&t) == reasonSwitching:
		return reconcile.Result{RequeueAfter: 200 * time.Millisecond}, nil
	case t.Status.Next != "" || len(t.Status.PhasingOut) > 0:
		return reconcile.Result{RequeueAfter: time.Second}, nil
	case t.Status.Active != "" && !t.Spec.Scaling.Disabled:
		return reconcile.Result{RequeueAfter: sampleEvery}, nil
	}
	return reconcile.Result{}, nil
}

func (r *TopologyReconciler) observe(ctx context.Context, t *v1alpha1.Topology) (*observed, error) {
	obs := &observed{revisions: map[string]*v1alpha1.TopologyRevision{}, deployments: map[string]*appsv1.Deployment{}}
	var revs v1alpha1.TopologyRevisionList
	if err := r.Client.List(ctx, &revs, client.InNamespace(t.Namespace), client.MatchingLabels{LabelTopology: t.Name}); err != nil {
		return nil, err
	}
	for i := range revs.Items {
		if metav1.IsControlledBy(&revs.Items[i], t) {
			obs.revisions[revs.Items[i].Name] = &revs.Items[i]
		}
	}
	// The cache may not have seen a revision the status names yet: only the
	// API server may say it is gone.
	for _, name := range append([]string{t.Status.Active, t.Status.Next}, t.Status.PhasingOut...) {
		if name == "" || obs.revisions[name] != nil {
			continue
		}
		var rev v1alpha1.TopologyRevision
		err := r.Reader.Get(ctx, client.ObjectKey{Namespace: t.Namespace, Name: name}, &rev)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, err
		case metav1.IsControlledBy(&rev, t):
			obs.revisions[name] = &rev
		}
	}
	var deps appsv1.DeploymentList
	if err := r.Client.List(ctx, &deps, client.InNamespace(t.Namespace), client.MatchingLabels{LabelTopology: t.Name}); err != nil {
		return nil, err
	}
	for i := range deps.Items {
		obs.deployments[deps.Items[i].Name] = &deps.Items[i]
	}
	return obs, nil
}

// compose reads the pinned part revisions and composes them.
func (r *TopologyReconciler) compose(ctx context.Context, t *v1alpha1.Topology, active *v1alpha1.TopologyRevision) (*v1alpha1.TopologyRevisionSpec, topology.Problems, error) {
	in := topology.Input{Namespace: t.Namespace, Name: t.Name, Spec: t.Spec, Bootstrap: r.Bootstrap,
		Parts: map[string]v1alpha1.PartSpec{}, Predecessor: active}
	for _, ref := range t.Spec.Parts {
		var pr v1alpha1.TopologyPartRevision
		err := r.Client.Get(ctx, client.ObjectKey{Namespace: t.Namespace, Name: fmt.Sprintf("%s-%d", ref.Name, ref.Revision)}, &pr)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, nil, err
		case pr.Spec.Part == ref.Name && pr.Spec.Revision == ref.Revision:
			in.Parts[ref.Name] = pr.Spec.Spec
		}
	}
	rev, probs := topology.Compose(in)
	return rev, probs, nil
}

// kafkaSecurity returns ctx carrying how to reach the clusters the
// revisions name Secrets for (the topology's kafkaSecrets), read from the
// topology's namespace — but the addon's Kafka, which the controller
// reaches with its own login. A Secret that is missing or wrong is an
// error naming it.
func (r *TopologyReconciler) kafkaSecurity(ctx context.Context, t *v1alpha1.Topology, specs ...*v1alpha1.TopologyRevisionSpec) (context.Context, error) {
	by := map[string]kafka.Security{}
	for _, spec := range specs {
		if spec == nil {
			continue
		}
		for _, cs := range spec.KafkaSecrets {
			key := kafka.ClusterKey(cs.Bootstrap)
			if _, done := by[key]; done || key == kafka.ClusterKey(r.Bootstrap) {
				continue
			}
			var secret corev1.Secret
			if err := r.Reader.Get(ctx, client.ObjectKey{Namespace: t.Namespace, Name: cs.Secret}, &secret); err != nil {
				return ctx, fmt.Errorf("kafka %s: its kafkaSecret %s/%s: %w", cs.Bootstrap, t.Namespace, cs.Secret, err)
			}
			sec, err := kafka.SecurityFromSecret(t.Namespace+"/"+cs.Secret, secret.Data)
			if err != nil {
				return ctx, fmt.Errorf("kafka %s: %w", cs.Bootstrap, err)
			}
			by[key] = sec
		}
	}
	return kafka.WithSecurity(ctx, by), nil
}

// reachable asks every Kafka the topology uses.
func (r *TopologyReconciler) reachable(ctx context.Context, t *v1alpha1.Topology, obs *observed, composed *v1alpha1.TopologyRevisionSpec) error {
	seen := map[string]bool{}
	var errs []error
	check := func(spec *v1alpha1.TopologyRevisionSpec) {
		for _, p := range spec.Processors {
			for _, e := range append([]v1alpha1.Endpoint{p.Input, p.DeadLetter}, p.Outputs...) {
				if seen[e.Bootstrap] {
					continue
				}
				seen[e.Bootstrap] = true
				actx, cancel := context.WithTimeout(ctx, 5*time.Second)
				if err := r.Kafka.Reachable(actx, e.Bootstrap); err != nil {
					errs = append(errs, errors.New(r.explain(ctx, e.Bootstrap, err)))
				}
				cancel()
			}
		}
	}
	if composed != nil {
		check(composed)
	}
	for _, name := range append([]string{t.Status.Active, t.Status.Next}, t.Status.PhasingOut...) {
		if rev := obs.revisions[name]; rev != nil {
			check(&rev.Spec)
		}
	}
	return errors.Join(errs...)
}

// explain words err, of a client of the cluster bootstrap names, by the
// security that client used: the topology's Secret for that cluster,
// the addon's for its own Kafka, else none (plaintext).
func (r *TopologyReconciler) explain(ctx context.Context, bootstrap string, err error) string {
	if s, ok := kafka.SecurityOf(ctx, bootstrap); ok {
		return s.Explain(err)
	}
	if kafka.ClusterKey(bootstrap) == kafka.ClusterKey(r.Bootstrap) {
		return r.Security.Explain(err)
	}
	return kafka.Security{}.Explain(err)
}

// update is the Updater: the first revision becomes active at once; a new
// composition becomes next; a scale-only change applies in place.
func (r *TopologyReconciler) update(ctx context.Context, t *v1alpha1.Topology, obs *observed, composed *v1alpha1.TopologyRevisionSpec) (bool, error) {
	if composed == nil {
		return false, nil
	}
	active := obs.revisions[t.Status.Active]
	if active == nil {
		rev, err := r.ensureRevision(ctx, t, obs, composed)
		if err != nil {
			return false, err
		}
		if err := r.startOffsets(ctx, rev, nil); err != nil {
			return false, err
		}
		t.Status.Active = rev.Name
		r.condition(t, v1alpha1.ConditionUpgrading, false, reasonSwitched, "revision "+rev.Name+" is active")
		if err := r.Client.Status().Update(ctx, t); err != nil {
			return false, err
		}
		r.Recorder.Eventf(t, corev1.EventTypeNormal, "Activated", "revision %s reads the sources", rev.Name)
		return true, r.markSwitched(ctx, rev)
	}
	if composed.Hash == active.Spec.Hash {
		if err := r.scaleInPlace(ctx, active, composed); err != nil {
			return false, err
		}
		if t.Status.Next != "" && upgrading(t) != reasonSwitching {
			r.Recorder.Eventf(t, corev1.EventTypeNormal, "UpgradeCancelled", "revision %s dropped: the topology pins the active revision's parts again", t.Status.Next)
			t.Status.Next = ""
			r.condition(t, v1alpha1.ConditionUpgrading, false, "Cancelled", "the parts pinned are the active revision's")
			return true, r.Client.Status().Update(ctx, t)
		}
		return false, nil
	}
	want := topology.Name(composed)
	if t.Status.Next == want || t.Status.Failed == want || upgrading(t) == reasonSwitching {
		return false, nil // a switch in progress finishes first
	}
	// A next revision replaced is dropped by the collector, as an orphan.
	rev, err := r.ensureRevision(ctx, t, obs, composed)
	if err != nil {
		return false, err
	}
	t.Status.Next = rev.Name
	// A next revision replacing another gets its own upgradeTimeout: the
	// condition's transition time is when its upgrade started.
	meta.RemoveStatusCondition(&t.Status.Conditions, v1alpha1.ConditionUpgrading)
	r.condition(t, v1alpha1.ConditionUpgrading, true, reasonStarting, "starting revision "+rev.Name)
	meta.RemoveStatusCondition(&t.Status.Conditions, v1alpha1.ConditionUpgradeFailed)
	r.Recorder.Eventf(t, corev1.EventTypeNormal, "Upgrading", "revision %s follows %s", rev.Name, active.Name)
	return true, r.Client.Status().Update(ctx, t)
}

// ensureRevision gets or creates the composed revision and its topics.
func (r *TopologyReconciler) ensureRevision(ctx context.Context, t *v1alpha1.Topology, obs *observed, spec *v1alpha1.TopologyRevisionSpec) (*v1alpha1.TopologyRevision, error) {
	name := topology.Name(spec)
	rev := obs.revisions[name]
	if rev == nil {
		rev = &v1alpha1.TopologyRevision{
			ObjectMeta: metav1.ObjectMeta{Namespace: t.Namespace, Name: name, Labels: map[string]string{LabelTopology: t.Name}},
			Spec:       *spec,
		}
		if err := controllerutil.SetControllerReference(t, rev, r.Client.Scheme()); err != nil {
			return nil, err
		}
		if err := r.Client.Create(ctx, rev); err != nil {
			if !apierrors.IsAlreadyExists(err) {
				return nil, fmt.Errorf("create revision %s: %w", name, err)
			}
			if err := r.Reader.Get(ctx, client.ObjectKeyFromObject(rev), rev); err != nil {
				return nil, err
			}
		}
		obs.revisions[name] = rev
	}
	// Topics the revision writes and reads must exist before its pods run:
	// its own are made, the parts' sources and sinks must be there.
	var missing []string
	for _, p := range rev.Spec.Processors {
		if err := r.Kafka.EnsureTopic(ctx, p.DeadLetter.Bootstrap, p.DeadLetter.Topic, 1); err != nil {
			return nil, err
		}
		ends := p.Outputs
		if p.ReadsSource {
			ends = append([]v1alpha1.Endpoint{p.Input}, ends...)
		}
		for _, e := range ends {
			if slices.ContainsFunc(rev.Spec.Topics, func(it v1alpha1.InternalTopic) bool { return it.Name == e.Topic }) {
				continue
			}
			if _, err := r.Kafka.Partitions(ctx, e.Bootstrap, e.Topic); err != nil {
				missing = append(missing, fmt.Sprintf("processor %q: %v", p.Name, err))
			}
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return nil, fmt.Errorf("revision %s: %s (create them: the controller makes only the topics between processors)", name, strings.Join(slices.Compact(missing), "; "))
	}
	for _, it := range rev.Spec.Topics {
		if err := r.Kafka.EnsureTopic(ctx, it.Bootstrap, it.Name, it.Partitions); err != nil {
			return nil, err
		}
	}
	return rev, nil
}

// startOffsets records where the revision's source readers begin (the
// upgrade point): per partition, where the reader's predecessors stopped
// (the earliest of their commits: records may repeat into a sink one of
// them fed further, none is lost), else, for a new branch, the source's
// end. Recorded once, before the switch: the readers, in their groups
// already, take a partition their group never committed from there as
// their gate opens.
func (r *TopologyReconciler) startOffsets(ctx context.Context, rev *v1alpha1.TopologyRevision, old *v1alpha1.TopologyRevision) error {
	if rev.Status.StartOffsets != nil {
		return nil
	}
	recorded := []v1alpha1.GroupOffsets{}
	for _, p := range rev.Spec.Processors {
		if !p.ReadsSource {
			continue
		}
		start, err := r.Kafka.Ends(ctx, p.Input.Bootstrap, p.Input.Topic, false)
		if err != nil {
			return err
		}
		if old != nil {
			if start, err = r.predecessorsStop(ctx, old, predecessors(&rev.Spec, &old.Spec, p), p.Input, start); err != nil {
				return err
			}
		}
		g := v1alpha1.GroupOffsets{Group: p.Group, Bootstrap: p.Input.Bootstrap, Topic: p.Input.Topic, Offsets: make([]int64, len(start))}
		for part, at := range start {
			if int(part) < len(g.Offsets) {
				g.Offsets[part] = at
			}
		}
		recorded = append(recorded, g)
	}
	rev.Status.StartOffsets = recorded
	if err := r.Client.Status().Update(ctx, rev); err != nil {
		return fmt.Errorf("record start offsets of %s: %w", rev.Name, err)
	}
	return nil
}

// predecessorsStop is where a new source reader starts, given its
// predecessors in old: per partition the earliest of their commits (a
// partition one never committed: where it began, its recorded start or
// the topic's start); with no predecessor, ends.
func (r *TopologyReconciler) predecessorsStop(ctx context.Context, old *v1alpha1.TopologyRevision, preds []v1alpha1.ComposedProcessor, in v1alpha1.Endpoint, ends kafka.Offsets) (kafka.Offsets, error) {
	if len(preds) == 0 {
		return ends, nil
	}
	start := kafka.Offsets{}
	for _, q := range preds {
		from, err := r.Kafka.Positions(ctx, in.Bootstrap, q.Group, in.Topic, ends, old.Status.StartOf(q.Group, q.Input.Topic))
		if err != nil {
			return nil, err
		}
		for part, at := range from {
			if was, seen := start[part]; !seen || at < was {
				start[part] = at
			}
		}
	}
	return start, nil
}

// predecessors are the readers of old whose place the new source reader p
// of next takes: old's reader of the same name and source (p continues
// its stream: nothing repeats), else old's readers of the same source that
// fed a sink p feeds (through the processors downstream of each), else
// those of p's part. None: p begins a new branch. Another team's reader
// of the same source is never one, however far it read.
func predecessors(next, old *v1alpha1.TopologyRevisionSpec, p v1alpha1.ComposedProcessor) []v1alpha1.ComposedProcessor {
	mine := sinksFed(next, p)
	var bySink, byPart []v1alpha1.ComposedProcessor
	for _, q := range old.Processors {
		if !q.ReadsSource || q.Input != p.Input {
			continue
		}
		if q.Name == p.Name {
			return []v1alpha1.ComposedProcessor{q}
		}
		if slices.ContainsFunc(sinksFed(old, q), func(e v1alpha1.Endpoint) bool { return slices.Contains(mine, e) }) {
			bySink = append(bySink, q)
		}
		if q.Part == p.Part {
			byPart = append(byPart, q)
		}
	}
	if len(bySink) > 0 {
		return bySink
	}
	return byPart
}

// sinksFed are the sinks p's output reaches: its own and those of every
// processor downstream of it (topics between processors are not sinks).
func sinksFed(spec *v1alpha1.TopologyRevisionSpec, p v1alpha1.ComposedProcessor) []v1alpha1.Endpoint {
	internal := func(e v1alpha1.Endpoint) bool {
		return slices.ContainsFunc(spec.Topics, func(it v1alpha1.InternalTopic) bool { return it.Name == e.Topic && it.Bootstrap == e.Bootstrap })
	}
	var sinks []v1alpha1.Endpoint
	seen := map[string]bool{p.Name: true}
	for queue := []v1alpha1.ComposedProcessor{p}; len(queue) > 0; queue = queue[1:] {
		q := queue[0]
		for _, e := range q.Outputs {
			if !internal(e) && !slices.Contains(sinks, e) {
				sinks = append(sinks, e)
			}
		}
		for _, d := range spec.Processors {
			if !d.ReadsSource && d.InputFrom == q.Name && !seen[d.Name] {
				seen[d.Name] = true
				queue = append(queue, d)
			}
		}
	}
	return sinks
}

// scaleInPlace writes a scale-only change into the running revision.
func (r *TopologyReconciler) scaleInPlace(ctx context.Context, active *v1alpha1.TopologyRevision, composed *v1alpha1.TopologyRevisionSpec) error {
	patch := client.MergeFromWithOptions(active.DeepCopy(), client.MergeFromWithOptimisticLock{})
	changed := false
	for i := range active.Spec.Processors {
		p := &active.Spec.Processors[i]
		for _, c := range composed.Processors {
			if c.Name == p.Name && (c.MinScale != p.MinScale || c.MaxScale != p.MaxScale) {
				p.MinScale, p.MaxScale, changed = c.MinScale, c.MaxScale, true
			}
		}
	}
	if !changed {
		return nil
	}
	return r.Client.Patch(ctx, active, patch)
}

// orphanAge is how old a revision no status names must be before it is
// dropped: younger, it may be one this controller just made and named in
// a status write the cache has not shown yet.
const orphanAge = 30 * time.Second

// dropOrphans drops revisions that never read a source and never will: a
// next replaced or failed, or one made before a crash that lost its status
// write. Their Deployments go (the Syncer wants none), then, once their
// pods are gone, their topics, groups and the revision itself. The
// Topology is read from the API server first: only its word says a
// revision is unnamed.
func (r *TopologyReconciler) dropOrphans(ctx context.Context, t *v1alpha1.Topology, obs *observed) error {
	var orphans []*v1alpha1.TopologyRevision
	for name, rev := range obs.revisions {
		if rev.Status.Finished != nil || rev.Status.Switched != nil || name == t.Status.Active || name == t.Status.Next || slices.Contains(t.Status.PhasingOut, name) {
			continue
		}
		if r.Now().Sub(rev.CreationTimestamp.Time) < orphanAge && name != t.Status.Failed {
			continue
		}
		orphans = append(orphans, rev)
	}
	if len(orphans) == 0 {
		return nil
	}
	var live v1alpha1.Topology
	if err := r.Reader.Get(ctx, client.ObjectKeyFromObject(t), &live); err != nil {
		return err
	}
	for _, rev := range orphans {
		if rev.Name == live.Status.Active || rev.Name == live.Status.Next || slices.Contains(live.Status.PhasingOut, rev.Name) {
			continue
		}
		alive, err := r.podsAlive(ctx, t.Namespace, rev.Name)
		if err != nil {
			return err
		}
		if len(alive) > 0 {
			continue // the Syncer deleted their Deployments; pods end first
		}
		if err := r.dropKafka(ctx, rev, t); err != nil {
			return err
		}
		if err := r.Client.Delete(ctx, rev); client.IgnoreNotFound(err) != nil {
			return err
		}
		delete(obs.revisions, rev.Name)
	}
	return nil
}

// dropKafka deletes a revision's topics and the groups only it uses.
func (r *TopologyReconciler) dropKafka(ctx context.Context, rev *v1alpha1.TopologyRevision, t *v1alpha1.Topology) error {
	for _, p := range rev.Spec.Processors {
		if r.groupInUse(ctx, t, rev.Name, p.Group) {
			continue
		}
		if err := r.Kafka.DeleteGroup(ctx, p.Input.Bootstrap, p.Group); err != nil {
			return err
		}
	}
	for _, it := range rev.Spec.Topics {
		if err := r.Kafka.DeleteTopic(ctx, it.Bootstrap, it.Name); err != nil {
			return err
		}
	}
	return nil
}

// groupInUse says another live revision of the topology reads in group
// (revisions made before groups were per revision shared their source
// readers' groups).
func (r *TopologyReconciler) groupInUse(ctx context.Context, t *v1alpha1.Topology, except, group string) bool {
	for _, name := range append([]string{t.Status.Active, t.Status.Next}, t.Status.PhasingOut...) {
		if name == "" || name == except {
			continue
		}
		var rev v1alpha1.TopologyRevision
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: t.Namespace, Name: name}, &rev); err != nil {
			return true // unknown: keep the group
		}
		if slices.ContainsFunc(rev.Spec.Processors, func(p v1alpha1.ComposedProcessor) bool { return p.Group == group }) {
			return true
		}
	}
	return false
}

// upgrade is the Syncer's switch: wait for the standby revision, cut the
// old source readers, then switch in one status write.
func (r *TopologyReconciler) upgrade(ctx context.Context, t *v1alpha1.Topology, obs *observed, _ *v1alpha1.TopologyRevisionSpec) (bool, error) {
	next, active := obs.revisions[t.Status.Next], obs.revisions[t.Status.Active]
	if t.Status.Next != "" && next == nil {
		t.Status.Next = "" // deleted behind our back: start over
		r.condition(t, v1alpha1.ConditionUpgrading, false, "Lost", "the next revision was deleted")
		return true, r.Client.Status().Update(ctx, t)
	}
	if next == nil || active == nil {
		return false, nil
	}
	if upgrading(t) != reasonSwitching {
		if t.Spec.Upgrade != v1alpha1.Cold {
			notReady := r.notReady(ctx, next, obs)
			if notReady != "" {
				if since := r.upgradingSince(t); r.Now().Sub(since) > r.upgradeTimeout(t) {
					return true, r.fail(ctx, t, next, notReady)
				}
				return false, nil
			}
		}
		r.condition(t, v1alpha1.ConditionUpgrading, true, reasonSwitching, "stopping the source readers of "+active.Name)
		return true, r.Client.Status().Update(ctx, t)
	}

	// Switching: the Syncer deletes the old source readers; wait until no
	// pod of theirs lives and Kafka shows their groups empty. The
	// condition says what is still waited for.
	waiting, err := r.switchWaits(ctx, t, obs, active)
	if err != nil {
		return false, err
	}
	if waiting != "" {
		r.condition(t, v1alpha1.ConditionUpgrading, true, reasonSwitching, "stopping the source readers of "+active.Name+": waiting for "+waiting)
		return false, nil
	}
	if err := r.startOffsets(ctx, next, active); err != nil {
		return false, err
	}
	t.Status.Active, t.Status.Next = next.Name, ""
	t.Status.PhasingOut = append(t.Status.PhasingOut, active.Name)
	r.condition(t, v1alpha1.ConditionUpgrading, false, reasonSwitched, fmt.Sprintf("revision %s is active; %s drains", next.Name, active.Name))
	if err := r.Client.Status().Update(ctx, t); err != nil {
		return false, err // a conflict: someone wrote since we read; start over
	}
	r.Recorder.Eventf(t, corev1.EventTypeNormal, "Switched", "revision %s reads the sources; %s drains", next.Name, active.Name)
	return true, r.markSwitched(ctx, next)
}

// switchWaits names what the switch from active still waits for: a
// source reader of active whose Deployment the cache still shows, whose
// pods live (read from the API server), whose group Kafka shows with
// members or rebalancing, or (exactly-once) whose transactions have not
// ended; "" when nothing. The words are stable while the wait is the
// same: they go into the Upgrading condition.
func (r *TopologyReconciler) switchWaits(ctx context.Context, t *v1alpha1.Topology, obs *observed, active *v1alpha1.TopologyRevision) (string, error) {
	var pods corev1.PodList
	if err := r.Reader.List(ctx, &pods, client.InNamespace(t.Namespace), client.MatchingLabels{LabelRevision: active.Name}); err != nil {
		return "", err
	}
	for _, p := range active.Spec.Processors {
		if !p.ReadsSource {
			continue
		}
		if d := obs.deployment(active.Name, p.Name); d != nil {
			state := "not deleted yet"
			if !d.DeletionTimestamp.IsZero() {
				state = "deleted at " + d.DeletionTimestamp.UTC().Format(time.TimeOnly) + ", still there (finalizers " + strings.Join(d.Finalizers, ", ") + ")"
			}
			return fmt.Sprintf("source reader %s: its Deployment %s is %s", p.Name, d.Name, state), nil
		}
		var living []string
		for _, pod := range pods.Items {
			if pod.Labels[LabelProcessor] != p.Name {
				continue
			}
			state := "not deleted yet"
			if !pod.DeletionTimestamp.IsZero() {
				state = "terminating, its grace period ends " + pod.DeletionTimestamp.UTC().Format(time.TimeOnly)
			}
			living = append(living, fmt.Sprintf("%s (%s)", pod.Name, state))
		}
		if len(living) > 0 {
			slices.Sort(living)
			more := ""
			if len(living) > 3 {
				living, more = living[:3], fmt.Sprintf(" and %d more", len(living)-3)
			}
			return fmt.Sprintf("source reader %s: its pods to end: %s%s", p.Name, strings.Join(living, ", "), more), nil
		}
		state, members, err := r.Kafka.GroupState(ctx, p.Input.Bootstrap, p.Group)
		if err != nil {
			return "", err
		}
		if len(members) > 0 || (state != "Empty" && state != "Dead") {
			return fmt.Sprintf("source reader %s: its group %s to empty (Kafka: %s, %d members)", p.Name, p.Group, state, len(members)), nil
		}
		// A reader whose transaction has not ended has not stopped: its
		// offsets are not committed yet (its successor would start short
		// of them). One whose pod is gone is aborted by fenceGone.
		if active.Spec.Delivery == v1alpha1.ExactlyOnce {
			open, err := r.Kafka.UnfinishedTransactions(ctx, p.Input.Bootstrap)
			if err != nil {
				return "", err
			}
			prefix := sidecar.TransactionalID(p.Group, deploymentName(active.Name, p.Name)+"-")
			open = slices.DeleteFunc(open, func(id string) bool { return !strings.HasPrefix(id, prefix) })
			if len(open) > 0 {
				slices.Sort(open)
				return fmt.Sprintf("source reader %s: its transactions to end: %s", p.Name, strings.Join(open, ", ")), nil
			}
		}
	}
	return "", nil
}

// markSwitched records when a revision became active (for people: the
// Topology's status is what counts).
func (r *TopologyReconciler) markSwitched(ctx context.Context, rev *v1alpha1.TopologyRevision) error {
	patch := client.MergeFrom(rev.DeepCopy())
	rev.Status.Switched = &metav1.Time{Time: r.Now()}
	return r.Client.Status().Patch(ctx, rev, patch)
}

// notReady names a processor of the revision whose pods are not all Ready,
// with the reason a pod gives; "" when every one is.
func (r *TopologyReconciler) notReady(ctx context.Context, rev *v1alpha1.TopologyRevision, obs *observed) string {
	for _, p := range rev.Spec.Processors {
		d := obs.deployment(rev.Name, p.Name)
		if d == nil {
			return fmt.Sprintf("processor %s: no Deployment yet", p.Name)
		}
		want := ptr.Deref(d.Spec.Replicas, 1)
		if d.Status.ObservedGeneration >= d.Generation && d.Status.ReadyReplicas >= want && d.Status.UpdatedReplicas >= want {
			continue
		}
		return fmt.Sprintf("processor %s: %d of %d pods Ready%s", p.Name, d.Status.ReadyReplicas, want, r.podReason(ctx, rev, p.Name))
	}
	return ""
}

// podReason is why a pod of a processor is not Ready, as its containers
// say: a container waiting (an image pull) or stopped, or one whose last
// exit left a message (a crash loop: the sidecar's last words, a refused
// login or an ACL), before one merely not ready.
func (r *TopologyReconciler) podReason(ctx context.Context, rev *v1alpha1.TopologyRevision, processor string) string {
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(rev.Namespace), client.MatchingLabels(processorLabels(rev.Spec.Topology, rev.Name, processor))); err != nil {
		return ""
	}
	// By name: the same pods give the same reason (no status churn).
	slices.SortFunc(pods.Items, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	var notReady string
	for _, pod := range pods.Items {
		for _, cs := range pod.Status.ContainerStatuses {
			var last string
			if t := cs.LastTerminationState.Terminated; t != nil && t.Message != "" {
				last = fmt.Sprintf("; it last exited %d: %s", t.ExitCode, strings.TrimSpace(t.Message))
			}
			switch {
			case cs.State.Waiting != nil && cs.State.Waiting.Reason != "":
				return fmt.Sprintf("; pod %s, container %s: %s: %s%s", pod.Name, cs.Name, cs.State.Waiting.Reason, cs.State.Waiting.Message, last)
			case cs.State.Terminated != nil:
				return fmt.Sprintf("; pod %s, container %s: exited %d (%s)%s", pod.Name, cs.Name, cs.State.Terminated.ExitCode, cs.State.Terminated.Reason, last)
			case !cs.Ready && last != "":
				return fmt.Sprintf("; pod %s, container %s: not ready%s", pod.Name, cs.Name, last)
			case !cs.Ready && notReady == "":
				notReady = fmt.Sprintf("; pod %s, container %s: not ready", pod.Name, cs.Name)
			}
		}
		if pod.Spec.NodeName == "" && notReady == "" {
			notReady = fmt.Sprintf("; pod %s: not scheduled", pod.Name)
		}
	}
	return notReady
}

// fail abandons a standby revision that did not get Ready in time: the
// running revision goes on untouched.
func (r *TopologyReconciler) fail(ctx context.Context, t *v1alpha1.Topology, next *v1alpha1.TopologyRevision, why string) error {
	msg := fmt.Sprintf("revision %s was not Ready within %s: %s; %s runs on", next.Name, r.upgradeTimeout(t), why, t.Status.Active)
	t.Status.Failed, t.Status.Next = next.Name, ""
	r.condition(t, v1alpha1.ConditionUpgradeFailed, true, "NotReady", msg)
	r.condition(t, v1alpha1.ConditionUpgrading, false, "Failed", msg)
	r.Recorder.Event(t, corev1.EventTypeWarning, "UpgradeFailed", msg)
	return r.Client.Status().Update(ctx, t)
}

func (r *TopologyReconciler) upgradeTimeout(t *v1alpha1.Topology) time.Duration {
	if t.Spec.UpgradeTimeout != nil && t.Spec.UpgradeTimeout.Duration > 0 {
		return t.Spec.UpgradeTimeout.Duration
	}
	return r.UpgradeTimeout
}

func (r *TopologyReconciler) upgradingSince(t *v1alpha1.Topology) time.Time {
	if c := meta.FindStatusCondition(t.Status.Conditions, v1alpha1.ConditionUpgrading); c != nil {
		return c.LastTransitionTime.Time
	}
	return r.Now()
}

func upgrading(t *v1alpha1.Topology) string {
	if c := meta.FindStatusCondition(t.Status.Conditions, v1alpha1.ConditionUpgrading); c != nil && c.Status == metav1.ConditionTrue {
		return c.Reason
	}
	return ""
}

// podsAlive counts, per processor, the pods of a revision that exist,
// terminating ones included, read from the API server.
func (r *TopologyReconciler) podsAlive(ctx context.Context, namespace, rev string) (map[string]int, error) {
	var pods corev1.PodList
	if err := r.Reader.List(ctx, &pods, client.InNamespace(namespace), client.MatchingLabels{LabelRevision: rev}); err != nil {
		return nil, err
	}
	alive := map[string]int{}
	for _, p := range pods.Items {
		alive[p.Labels[LabelProcessor]]++
	}
	return alive, nil
}

// sync is the Syncer: the Deployments the revisions' states call for, and
// no other.
func (r *TopologyReconciler) sync(ctx context.Context, t *v1alpha1.Topology, obs *observed) error {
	want := map[string]*appsv1.Deployment{}
	add := func(rev *v1alpha1.TopologyRevision, keep func(v1alpha1.ComposedProcessor) bool) {
		for _, p := range rev.Spec.Processors {
			if keep(p) {
				d := deployment(rev, p, r.replicas(t, obs, rev.Name, p), r.Options)
				want[d.Name] = d
			}
		}
	}
	switching := upgrading(t) == reasonSwitching
	if rev := obs.revisions[t.Status.Active]; rev != nil {
		add(rev, func(p v1alpha1.ComposedProcessor) bool { return !(switching && p.ReadsSource) })
	}
	if rev := obs.revisions[t.Status.Next]; rev != nil && t.Spec.Upgrade != v1alpha1.Cold {
		add(rev, func(v1alpha1.ComposedProcessor) bool { return true })
	}
	for _, name := range t.Status.PhasingOut {
		if rev := obs.revisions[name]; rev != nil {
			add(rev, func(p v1alpha1.ComposedProcessor) bool {
				return !p.ReadsSource && !slices.Contains(rev.Status.Deleted, p.Name)
			})
		}
	}
	for name, d := range obs.deployments {
		if obs.revisions[d.Labels[LabelRevision]] == nil {
			continue // the revision's deletion takes its Deployments
		}
		if _, ok := want[name]; !ok && d.DeletionTimestamp.IsZero() {
			if err := r.Client.Delete(ctx, d); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("delete %s: %w", name, err)
			}
			delete(obs.deployments, name)
		}
	}
	for name, d := range want {
		have := obs.deployments[name]
		if have == nil {
			if err := r.Client.Create(ctx, d); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("create %s: %w", name, err)
			}
			obs.deployments[name] = d
			continue
		}
		if ptr.Deref(have.Spec.Replicas, 1) == *d.Spec.Replicas && equality.Semantic.DeepDerivative(d.Spec.Template, have.Spec.Template) {
			continue
		}
		have.Spec.Replicas, have.Spec.Template = d.Spec.Replicas, d.Spec.Template
		if err := r.Client.Update(ctx, have); err != nil {
			return fmt.Errorf("update %s: %w", name, err)
		}
	}
	return nil
}

// replicas is a processor's replica count: the autoscaler's for the active
// revision; for a revision starting, what its namesake in the active one
// runs; otherwise what runs, within its range. Without the autoscaler,
// minScale (at least one: nothing would wake it).
func (r *TopologyReconciler) replicas(t *v1alpha1.Topology, obs *observed, rev string, p v1alpha1.ComposedProcessor) int32 {
	if t.Spec.Scaling.Disabled {
		return max(p.MinScale, 1)
	}
	if rev == t.Status.Active {
		r.scalers.mu.Lock()
		as := r.scalers.m[types.NamespacedName{Namespace: t.Namespace, Name: t.Name}]
		var d, ok = scaleDecision(as, rev, p.Name)
		r.scalers.mu.Unlock()
		if ok {
			return min(max(d, p.MinScale), p.MaxScale)
		}
	}
	have := obs.deployment(rev, p.Name)
	if have == nil && rev != t.Status.Active {
		have = obs.deployment(t.Status.Active, p.Name)
	}
	n := max(p.MinScale, 1)
	if have != nil && have.Spec.Replicas != nil {
		n = *have.Spec.Replicas
	}
	return min(max(n, p.MinScale), p.MaxScale)
}

func scaleDecision(as *autoscaler, rev, processor string) (int32, bool) {
	if as == nil || as.revision != rev {
		return 0, false
	}
	d, ok := as.decisions[processor]
	return d.Replicas, ok
}

// collect is the garbage collector, over the phasing-out revisions.
func (r *TopologyReconciler) collect(ctx context.Context, t *v1alpha1.Topology, obs *observed) (bool, error) {
	if err := r.dropOrphans(ctx, t, obs); err != nil {
		return false, err
	}
	for _, name := range t.Status.PhasingOut {
		rev := obs.revisions[name]
		if rev == nil {
			t.Status.PhasingOut = slices.DeleteFunc(t.Status.PhasingOut, func(n string) bool { return n == name })
			return true, r.Client.Status().Update(ctx, t)
		}
		alive, err := r.podsAlive(ctx, t.Namespace, name)
		if err != nil {
			return false, err
		}
		var kafkaErr error
		running := topology.Running{
			Alive: func(p string) bool { return alive[p] > 0 || obs.deployment(name, p) != nil },
			Drained: func(p string) bool {
				for _, cp := range rev.Spec.Processors {
					if cp.Name == p {
						d, err := r.Kafka.Drained(ctx, cp.Input.Bootstrap, cp.Group, cp.Input.Topic, rev.Spec.Delivery == v1alpha1.ExactlyOnce)
						kafkaErr = errors.Join(kafkaErr, err)
						return d && err == nil
					}
				}
				return false
			},
		}
		procs, topics := topology.Deletable(&rev.Spec, running)
		if kafkaErr != nil {
			return false, kafkaErr
		}
		if len(procs) > 0 {
			// Recorded first: the Syncer never brings a collected
			// processor back, even after a crash here.
			rev.Status.Deleted = append(rev.Status.Deleted, procs...)
			slices.Sort(rev.Status.Deleted)
			rev.Status.Deleted = slices.Compact(rev.Status.Deleted)
			if err := r.Client.Status().Update(ctx, rev); err != nil {
				return false, err
			}
			for _, p := range procs {
				if d := obs.deployment(name, p); d != nil {
					if err := r.Client.Delete(ctx, d); client.IgnoreNotFound(err) != nil {
						return false, err
					}
				}
			}
			r.Recorder.Eventf(t, corev1.EventTypeNormal, "Collected", "revision %s: %s read their input to its end", name, strings.Join(procs, ", "))
		}
		for _, topic := range topics {
			for _, it := range rev.Spec.Topics {
				if it.Name == topic {
					if err := r.Kafka.DeleteTopic(ctx, it.Bootstrap, it.Name); err != nil {
						return false, err
					}
				}
			}
		}
		done := len(topics) == len(rev.Spec.Topics)
		for _, p := range rev.Spec.Processors {
			if running.Alive(p.Name) && !slices.Contains(procs, p.Name) {
				done = false
			}
		}
		if !done {
			continue
		}
		if alive, err := r.podsAlive(ctx, t.Namespace, name); err != nil || len(alive) > 0 {
			return false, err // groups go once no member can be left
		}
		if err := r.dropKafka(ctx, rev, t); err != nil {
			return false, err
		}
		rev.Status.Finished = &metav1.Time{Time: r.Now()}
		if err := r.Client.Status().Update(ctx, rev); err != nil {
			return false, err
		}
		t.Status.PhasingOut = slices.DeleteFunc(t.Status.PhasingOut, func(n string) bool { return n == name })
		r.Recorder.Eventf(t, corev1.EventTypeNormal, "Finished", "revision %s drained and was removed", name)
		if err := r.Client.Status().Update(ctx, t); err != nil {
			return false, err
		}
		return true, r.prune(ctx, t, obs)
	}
	return false, nil
}

// prune keeps the History newest finished revisions.
func (r *TopologyReconciler) prune(ctx context.Context, t *v1alpha1.Topology, obs *observed) error {
	var finished []*v1alpha1.TopologyRevision
	for _, rev := range obs.revisions {
		if rev.Status.Finished != nil && rev.Name != t.Status.Active && rev.Name != t.Status.Next && !slices.Contains(t.Status.PhasingOut, rev.Name) {
			finished = append(finished, rev)
		}
	}
	slices.SortFunc(finished, func(a, b *v1alpha1.TopologyRevision) int { return b.Status.Finished.Compare(a.Status.Finished.Time) })
	for _, rev := range finished[min(len(finished), r.History):] {
		if err := r.Client.Delete(ctx, rev); client.IgnoreNotFound(err) != nil {
			return err
		}
	}
	return nil
}

// readiness sets Ready: the active revision's processors all have their
// pods Ready.
func (r *TopologyReconciler) readiness(ctx context.Context, t *v1alpha1.Topology, obs *observed) {
	active := obs.revisions[t.Status.Active]
	if active == nil {
		reason := "NoRevision"
		if meta.IsStatusConditionFalse(t.Status.Conditions, v1alpha1.ConditionValid) {
			reason = "Invalid"
		}
		r.condition(t, v1alpha1.ConditionReady, false, reason, "no revision runs")
		return
	}
	t.Status.Processors = nil
	var waiting []string
	for _, p := range active.Spec.Processors {
		d := obs.deployment(active.Name, p.Name)
		if d == nil {
			waiting = append(waiting, p.Name+" (no Deployment yet)")
			continue
		}
		ps := v1alpha1.ProcessorStatus{Name: p.Name, Replicas: ptr.Deref(d.Spec.Replicas, 0)}
		r.scalers.mu.Lock()
		if as := r.scalers.m[client.ObjectKeyFromObject(t)]; as != nil && as.revision == active.Name {
			ps.Lag = as.decisions[p.Name].Lag
		}
		r.scalers.mu.Unlock()
		t.Status.Processors = append(t.Status.Processors, ps)
		if want := ptr.Deref(d.Spec.Replicas, 0); d.Status.ReadyReplicas < want {
			waiting = append(waiting, fmt.Sprintf("%s (%d of %d pods Ready%s)", p.Name, d.Status.ReadyReplicas, want, r.podReason(ctx, active, p.Name)))
		}
	}
	if len(waiting) > 0 {
		r.condition(t, v1alpha1.ConditionReady, false, "PodsNotReady", "revision "+active.Name+": waiting for "+strings.Join(waiting, ", "))
		return
	}
	r.condition(t, v1alpha1.ConditionReady, true, "Running", "revision "+active.Name+" runs")
}

func (r *TopologyReconciler) condition(t *v1alpha1.Topology, typ string, ok bool, reason, msg string) {
	status := metav1.ConditionFalse
	if ok {
		status = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&t.Status.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg,
		ObservedGeneration: t.Generation, LastTransitionTime: metav1.Time{Time: r.Now()}})
}

// finalize removes a deleted Topology's pods, then its Kafka topics and
// groups, then lets it go.
func (r *TopologyReconciler) finalize(ctx context.Context, t *v1alpha1.Topology) (reconcile.Result, error) {
	if !controllerutil.ContainsFinalizer(t, FinalizerKafka) {
		return reconcile.Result{}, nil
	}
	obs, err := r.observe(ctx, t)
	if err != nil {
		return reconcile.Result{}, err
	}
	for _, d := range obs.deployments {
		if err := r.Client.Delete(ctx, d); client.IgnoreNotFound(err) != nil {
			return reconcile.Result{}, err
		}
	}
	var pods corev1.PodList
	if err := r.Reader.List(ctx, &pods, client.InNamespace(t.Namespace), client.MatchingLabels{LabelTopology: t.Name}); err != nil {
		return reconcile.Result{}, err
	}
	if len(pods.Items) > 0 {
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	if t.Annotations[AnnotationSkipKafkaCleanup] != "true" {
		var specs []*v1alpha1.TopologyRevisionSpec
		for _, rev := range obs.revisions {
			specs = append(specs, &rev.Spec)
		}
		ctx, err := r.kafkaSecurity(ctx, t, specs...)
		if err != nil {
			r.Recorder.Eventf(t, corev1.EventTypeWarning, "KafkaCleanup", "%v (annotate %s=true to leave Kafka as it is)", err, AnnotationSkipKafkaCleanup)
			return reconcile.Result{RequeueAfter: 5 * time.Second}, nil
		}
		for _, rev := range obs.revisions {
			if rev.Status.Finished != nil {
				continue
			}
			for _, p := range rev.Spec.Processors {
				if err := r.Kafka.DeleteGroup(ctx, p.Input.Bootstrap, p.Group); err != nil {
					r.Recorder.Eventf(t, corev1.EventTypeWarning, "KafkaCleanup", "%s (annotate %s=true to leave Kafka as it is)", r.explain(ctx, p.Input.Bootstrap, err), AnnotationSkipKafkaCleanup)
					return reconcile.Result{RequeueAfter: 5 * time.Second}, nil
				}
			}
			for _, it := range rev.Spec.Topics {
				if err := r.Kafka.DeleteTopic(ctx, it.Bootstrap, it.Name); err != nil {
					r.Recorder.Eventf(t, corev1.EventTypeWarning, "KafkaCleanup", "%s (annotate %s=true to leave Kafka as it is)", r.explain(ctx, it.Bootstrap, err), AnnotationSkipKafkaCleanup)
					return reconcile.Result{RequeueAfter: 5 * time.Second}, nil
				}
			}
		}
	}
	r.scalers.forget(client.ObjectKeyFromObject(t))
	controllerutil.RemoveFinalizer(t, FinalizerKafka)
	return reconcile.Result{}, r.Client.Update(ctx, t)
}

// processorRules are what processor pods may do: read Topologies and
// their revisions (the sidecar's gate and its start offsets).
var processorRules = []rbacv1.PolicyRule{{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"topologies"}, Verbs: []string{"get", "list", "watch"}},
	{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"topologyrevisions"}, Verbs: []string{"get"}}}

// ensureAccount gives a namespace the service account processor pods run
// as, allowed processorRules (a Role an earlier version made gets them).
func (r *TopologyReconciler) ensureAccount(ctx context.Context, namespace string) error {
	objs := []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: ProcessorAccount}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: ProcessorAccount}, Rules: processorRules},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: ProcessorAccount},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: ProcessorAccount},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: ProcessorAccount}}},
	}
	for _, o := range objs {
		have := o.DeepCopyObject().(client.Object)
		if err := r.Reader.Get(ctx, client.ObjectKeyFromObject(o), have); err == nil {
			if role, ok := have.(*rbacv1.Role); ok && !equality.Semantic.DeepEqual(role.Rules, processorRules) {
				role.Rules = processorRules
				if err := r.Client.Update(ctx, role); err != nil {
					return fmt.Errorf("update Role %s/%s: %w", namespace, role.Name, err)
				}
			}
			continue
		} else if !apierrors.IsNotFound(err) {
			return err
		}
		if err := r.Client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create %T %s/%s: %w", o, namespace, o.GetName(), err)
		}
	}
	return nil
}
