package relations

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/cloudtransit/transit/controllers/relations/api/v1alpha1"
)

// WebhookPath is where the mutating webhook is served.
const WebhookPath = "/mutate-workloads"

// Webhook is the mutating admission webhook of consumer workloads: it
// refuses malformed annotations, injects every relationship's persisted
// revision that takes no name the user set (a rewritten template rolls
// nothing), and holds a consumer whose start depends on a relationship
// not yet established with the wait init container, which it removes
// once every one is.
type Webhook struct {
	// Reader reads Relationships and ConsumerConfigs uncached: only a
	// persisted revision is ever injected.
	Reader  client.Reader
	Decoder admission.Decoder
	// Image is the controller's own image, which the wait container runs.
	Image string
}

// Handle mutates one workload.
func (h *Webhook) Handle(ctx context.Context, req admission.Request) admission.Response {
	var obj, old client.Object
	switch req.Kind.Kind {
	case "Deployment":
		obj, old = &appsv1.Deployment{}, &appsv1.Deployment{}
	case "StatefulSet":
		obj, old = &appsv1.StatefulSet{}, &appsv1.StatefulSet{}
	case "DaemonSet":
		obj, old = &appsv1.DaemonSet{}, &appsv1.DaemonSet{}
	default:
		return admission.Allowed("not a workload")
	}
	if err := h.Decoder.Decode(req, obj); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if !obj.GetDeletionTimestamp().IsZero() {
		// Its finalizers go as they may: a deletion is never held.
		return admission.Allowed("being deleted")
	}
	if req.Operation == admissionv1.Update && len(req.OldObject.Raw) > 0 {
		if err := h.Decoder.DecodeRaw(req.OldObject, old); err != nil {
			return admission.Errored(http.StatusBadRequest, err)
		}
		if onlyFinalizersRemoved(old, obj) {
			return admission.Allowed("only finalizers removed")
		}
	}
	tpl := template(obj)
	if !IsConsumer(obj.GetAnnotations()) {
		// Annotations removed: the wait goes with them.
		if !removeWait(tpl) {
			return admission.Allowed("")
		}
		return patched(req, obj)
	}
	c, err := ParseConsumer(req.Namespace, obj.GetAnnotations())
	if err != nil {
		return admission.Denied(err.Error())
	}
	var injections []Injection
	var waiting, vars []string
	for _, iface := range c.Interfaces {
		t, missing, err := consumerConfig(ctx, h.Reader, req.Namespace, c, iface)
		if err != nil {
			return admission.Errored(http.StatusInternalServerError, err)
		}
		rel := &v1alpha1.Relationship{}
		err = h.Reader.Get(ctx, types.NamespacedName{Namespace: req.Namespace, Name: relationshipName(req.Kind.Kind, obj.GetName(), iface)}, rel)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return admission.Errored(http.StatusInternalServerError, err)
		case !consumedBy(rel, req, obj, iface):
			// Another consumer's: its values are never injected here.
		case rel.Status.Revision > 0 && missing == "":
			in := Injection{Relationship: rel.Name, Interface: iface, Revision: rel.Status.Revision, Secret: rel.Status.Secret, Keys: t.keys}
			values := &corev1.Secret{}
			if t.inPlace {
				// The mutable Secret only once the controller wrote it.
				err := h.Reader.Get(ctx, types.NamespacedName{Namespace: req.Namespace, Name: liveSecretName(rel.Name)}, values)
				if err != nil && !apierrors.IsNotFound(err) {
					return admission.Errored(http.StatusInternalServerError, err)
				}
				if err == nil && metav1.IsControlledBy(values, rel) {
					in.Secret, in.InPlace = values.Name, true
				} else {
					values = &corev1.Secret{}
				}
			}
			if !in.InPlace {
				err := h.Reader.Get(ctx, types.NamespacedName{Namespace: req.Namespace, Name: in.Secret}, values)
				if err != nil && !apierrors.IsNotFound(err) {
					return admission.Errored(http.StatusInternalServerError, err)
				}
			}
			in.Keys = heldKeys(in.Keys, values)
			injections = append(injections, in)
			continue
		}
		if t.lifecycle != v1alpha1.LifecycleNone {
			what := "interface " + iface + " from " + requestsString(c.Requests)
			if missing != "" {
				what += " (" + missing + ")"
			}
			if a := meta.FindStatusCondition(rel.Status.Conditions, v1alpha1.ConditionProviderAvailable); t.lifecycle == v1alpha1.LifecycleAvailable && a != nil && a.Status != metav1.ConditionTrue {
				what += " (" + a.Message + ")"
			}
			waiting = append(waiting, what)
			vars = append(vars, awaited(iface, t.keys)...)
		}
	}
	// The controller's conflict rule: a variable or mount the user set is
	// never overwritten (the controller says so on the Relationship).
	owned, err := ownedFields(obj)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	injections, _, _ = admit(obj, owned, injections)
	injectInto(tpl, injections)
	if len(waiting) > 0 {
		h.addWait(tpl, waiting, vars)
	} else {
		removeWait(tpl)
	}
	return patched(req, obj)
}

// heldKeys are those of keys that values holds: a key the consumer
// takes that its revision lacks (a ConsumerConfig edited since; the
// controller says MissingKey and keeps the template) is not injected, so
// new pods never point at it. A Secret not found (the controller
// replacing its own) keeps them all: the controller heals the template.
func heldKeys(keys []v1alpha1.KeyInjection, values *corev1.Secret) []v1alpha1.KeyInjection {
	if values.Name == "" {
		return keys
	}
	return slices.DeleteFunc(slices.Clone(keys), func(k v1alpha1.KeyInjection) bool {
		_, ok := values.Data[k.Key]
		return !ok
	})
}

// onlyFinalizersRemoved says whether the update from old to obj only
// removes finalizers: never refused, nothing injected.
func onlyFinalizersRemoved(old, obj client.Object) bool {
	removed := len(obj.GetFinalizers()) < len(old.GetFinalizers()) &&
		!slices.ContainsFunc(obj.GetFinalizers(), func(f string) bool { return !slices.Contains(old.GetFinalizers(), f) })
	if !removed {
		return false
	}
	// Everything else as it was: compare with the finalizers and the
	// server's bookkeeping (managed fields, versions) set alike.
	was, now := old.DeepCopyObject().(client.Object), obj.DeepCopyObject().(client.Object)
	for _, o := range []client.Object{was, now} {
		o.SetFinalizers(nil)
		o.SetManagedFields(nil)
		o.SetResourceVersion("")
		o.SetGeneration(0)
	}
	return equality.Semantic.DeepEqual(was, now)
}

// consumedBy says whether rel is obj's relationship over iface: by its
// spec, and by its owner once obj has an identity (not at creation).
func consumedBy(rel *v1alpha1.Relationship, req admission.Request, obj client.Object, iface string) bool {
	c := rel.Spec.Consumer
	return c.Kind == req.Kind.Kind && c.Name == obj.GetName() && rel.Spec.Interface == iface &&
		(obj.GetUID() == "" || metav1.IsControlledBy(rel, obj))
}

// patched answers with the patch from the request's object to obj.
func patched(req admission.Request, obj client.Object) admission.Response {
	data, err := json.Marshal(obj)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	return admission.PatchResponseFromRaw(req.Object.Raw, data)
}

// addWait puts the wait container first among the init containers.
func (h *Webhook) addWait(tpl *corev1.PodTemplateSpec, waiting, vars []string) {
	removeWait(tpl)
	wait := corev1.Container{
		Name:            WaitContainer,
		Image:           h.Image,
		ImagePullPolicy: corev1.PullNever,
		Args:            []string{"wait"},
		Env: []corev1.EnvVar{
			// Not in this container's environment: the rollout that
			// establishes the relationships replaces the pod without it.
			{Name: WaitForEnv, Value: strings.Join(vars, ",")},
			{Name: WaitWhatEnv, Value: strings.Join(waiting, "; ")},
		},
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false), RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532),
			ReadOnlyRootFilesystem: ptr.To(true), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
	}
	tpl.Spec.InitContainers = append([]corev1.Container{wait}, tpl.Spec.InitContainers...)
}

// awaited names what a consumer waits for: the variables its keys
// become, or for keys that are files or binding entries the interface's
// variable name.
func awaited(iface string, keys []v1alpha1.KeyInjection) []string {
	var out []string
	for _, k := range keys {
		if k.Env != "" {
			out = append(out, k.Env)
		}
	}
	if len(out) == 0 {
		out = append(out, EnvName(iface))
	}
	return out
}

// removeWait removes the wait container; it says whether there was one.
func removeWait(tpl *corev1.PodTemplateSpec) bool {
	n := len(tpl.Spec.InitContainers)
	tpl.Spec.InitContainers = slices.DeleteFunc(tpl.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == WaitContainer })
	if len(tpl.Spec.InitContainers) == 0 {
		tpl.Spec.InitContainers = nil
	}
	return len(tpl.Spec.InitContainers) != n
}

// takes is how a consumer takes an interface.
type takes struct {
	keys      []v1alpha1.KeyInjection
	lifecycle string
	// inPlace: files updated in a mutable Secret, no rollout.
	inPlace bool
	// config is the ConsumerConfig's namespace/name ("": none).
	config string
}

// consumerConfig is how a consumer takes iface: its keys and lifecycle
// (ConsumerConfig, else the default interface's). A ConsumerConfig the
// annotation names but that does not exist or is for another interface is
// missing (said why): the keys are unknown and the lifecycle is start.
func consumerConfig(ctx context.Context, r client.Reader, namespace string, c ConsumerAnnotations, iface string) (_ takes, missing string, _ error) {
	name, ok := c.Configs[iface]
	if !ok {
		return takes{keys: DefaultKeys(iface), lifecycle: v1alpha1.LifecycleStart}, "", nil
	}
	unknown := takes{lifecycle: v1alpha1.LifecycleStart}
	cc := &v1alpha1.ConsumerConfig{}
	err := r.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, cc)
	switch {
	case apierrors.IsNotFound(err):
		return unknown, fmt.Sprintf("ConsumerConfig %s/%s does not exist", namespace, name), nil
	case err != nil:
		return takes{}, "", err
	case cc.Spec.Interface != iface:
		return unknown, fmt.Sprintf("ConsumerConfig %s/%s is for interface %s, not %s", namespace, name, cc.Spec.Interface, iface), nil
	}
	t := takes{keys: cc.Spec.Keys, lifecycle: cc.Spec.Lifecycle, inPlace: cc.Spec.Update == v1alpha1.UpdateInPlace, config: namespace + "/" + name}
	if t.lifecycle == "" {
		t.lifecycle = v1alpha1.LifecycleStart
	}
	return t, "", nil
}

// MutatingWebhookConfiguration is the webhook's registration, calling
// clientConfig: CREATE and UPDATE of Deployments, StatefulSets and
// DaemonSets that carry (or carried) the consumes annotation, outside
// kube-system, not being deleted, and not the controller's own patches
// that only bring revisions; a webhook that does not answer refuses the
// change.
func MutatingWebhookConfiguration(name string, clientConfig admissionregistrationv1.WebhookClientConfig) *admissionregistrationv1.MutatingWebhookConfiguration {
	annotated := func(o string) string {
		return "has(" + o + ".metadata.annotations) && '" + AnnotationConsumes + "' in " + o + ".metadata.annotations"
	}
	waiting := func(o string) string {
		return "has(" + o + ".spec.template.spec.initContainers) && " + o + ".spec.template.spec.initContainers.exists(c, c.name == '" + WaitContainer + "')"
	}
	templateAnnotations := func(o string) string {
		return "has(" + o + ".spec.template.metadata) && has(" + o + ".spec.template.metadata.annotations)"
	}
	// An injection's revision annotation of the old template is not in
	// the new one.
	removed := templateAnnotations("oldObject") + " && oldObject.spec.template.metadata.annotations.exists(k, k.startsWith('" + RevisionAnnotationPrefix + "') && !(" +
		templateAnnotations("object") + " && k in object.spec.template.metadata.annotations))"
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:         "workloads.relations.transit.io",
			ClientConfig: clientConfig,
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"},
					Resources: []string{"deployments", "statefulsets", "daemonsets"}, Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
			}},
			NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
				Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"kube-system"}}}},
			MatchConditions: []admissionregistrationv1.MatchCondition{{
				Name:       "consumers",
				Expression: annotated("object") + " || (oldObject != null && " + annotated("oldObject") + ")",
			}, {
				// The garbage collector's removal of a finalizer from a
				// workload being deleted never waits for the webhook.
				Name:       "not-deleted",
				Expression: "!has(object.metadata.deletionTimestamp)",
			}, {
				// The controller's patches that bring new revisions carry
				// what the webhook would inject (one injection function,
				// one conflict rule), so they skip its round trip, which
				// halves a provider change's time at a thousand consumers.
				// Not where the wait container is concerned: while it is
				// there (the webhook added it under the user's field
				// manager, which the controller's apply cannot remove; the
				// webhook's admission of the establishing patch does), and
				// when an injection is taken out (consent withdrawn: the
				// webhook puts the wait back).
				Name: "not-the-controllers-new-revision",
				Expression: "request.userInfo.username != '" + ControllerUser + "' || oldObject == null || " +
					waiting("object") + " || " + waiting("oldObject") + " || " + removed,
			}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To[int32](10),
			ReinvocationPolicy:      ptr.To(admissionregistrationv1.IfNeededReinvocationPolicy),
		}},
	}
}
