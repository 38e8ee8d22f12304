package relations

import (
	"context"
	"fmt"
	"strings"

	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/cloudtransit/transit/controllers/relations/api/v1alpha1"
)

// available says whether provider is available, for lifecycle
// available, and why in words: a Service once one of its endpoints is
// ready (an ExternalName Service has none to observe: at once), any other
// object once its Ready or Available condition is True, a StatefulSet or
// DaemonSet without either once one replica is available.
func (r *kindReconciler) available(ctx context.Context, provider *unstructured.Unstructured) (bool, string, error) {
	id := provider.GetKind() + " " + provider.GetNamespace() + "/" + provider.GetName()
	if provider.GetKind() == "Service" && provider.GroupVersionKind().Group == "" {
		if t, _, _ := unstructured.NestedString(provider.Object, "spec", "type"); t == "ExternalName" {
			return true, id + " is an ExternalName Service (no endpoints to wait for)", nil
		}
		var slices discoveryv1.EndpointSliceList
		if err := r.Client.List(ctx, &slices, client.InNamespace(provider.GetNamespace()),
			client.MatchingLabels{discoveryv1.LabelServiceName: provider.GetName()}); err != nil {
			return false, "", err
		}
		for _, s := range slices.Items {
			for _, ep := range s.Endpoints {
				if len(ep.Addresses) > 0 && (ep.Conditions.Ready == nil || *ep.Conditions.Ready) {
					return true, id + " has a ready endpoint", nil
				}
			}
		}
		return false, "waiting for " + id + " to have a ready endpoint (its EndpointSlices list none)", nil
	}
	conds, _, _ := unstructured.NestedSlice(provider.Object, "status", "conditions")
	var seen []string
	for _, t := range []string{"Ready", "Available"} {
		for _, c := range conds {
			m, ok := c.(map[string]any)
			if !ok || m["type"] != t {
				continue
			}
			if m["status"] == string(metav1.ConditionTrue) {
				return true, fmt.Sprintf("%s is %s", id, t), nil
			}
			seen = append(seen, fmt.Sprintf("%s=%v (%v)", t, m["status"], m["reason"]))
		}
	}
	if len(seen) > 0 {
		return false, fmt.Sprintf("waiting for %s to be available: %s", id, strings.Join(seen, ", ")), nil
	}
	for _, path := range [][]string{{"status", "availableReplicas"}, {"status", "numberAvailable"}} {
		if n, ok, _ := unstructured.NestedInt64(provider.Object, path...); ok {
			if n > 0 {
				return true, fmt.Sprintf("%s has %d available replicas", id, n), nil
			}
			return false, "waiting for " + id + " to have an available replica", nil
		}
	}
	return false, "waiting for " + id + " to be available: it reports no Ready or Available condition yet", nil
}

// consumersOfEndpoints maps an EndpointSlice to the consumers of its
// Service.
func (r *kindReconciler) consumersOfEndpoints(ctx context.Context, o client.Object) []reconcile.Request {
	svc := o.GetLabels()[discoveryv1.LabelServiceName]
	if svc == "" {
		return nil
	}
	return r.consumersOf(ctx, o.GetNamespace(), svc)
}

// referenceIndex indexes ProviderConfigs by the objects their
// objectFieldRefs read ("Kind/namespace/name", the kind without group):
// a change of such an object concerns the consumers of the config's
// namespace.
const referenceIndex = "relations.transit.io/reference"

func referencedObjects(o client.Object) []string {
	var out []string
	for _, vs := range o.(*v1alpha1.ProviderConfig).Spec.Values {
		if ref := vs.ObjectFieldRef; ref != nil {
			out = append(out, referenceKey(schema.ParseGroupKind(ref.Kind).Kind, o.GetNamespace(), ref.Name))
		}
	}
	return out
}

func referenceKey(kind, namespace, name string) string { return kind + "/" + namespace + "/" + name }

// consumersOfReferenced maps an object that ProviderConfigs read by an
// objectFieldRef to the consumers their namespace concerns.
func (r *kindReconciler) consumersOfReferenced(ctx context.Context, o client.Object) []reconcile.Request {
	gvk, err := r.Client.GroupVersionKindFor(o)
	if err != nil {
		return nil
	}
	var pcs v1alpha1.ProviderConfigList
	if err := r.Client.List(ctx, &pcs, client.MatchingFields{referenceIndex: referenceKey(gvk.Kind, o.GetNamespace(), o.GetName())}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "list provider configs", "object", o.GetNamespace()+"/"+o.GetName())
		return nil
	}
	if len(pcs.Items) == 0 {
		return nil
	}
	return r.consumersInNamespace(ctx, &pcs.Items[0])
}

// object reads an object of namespace ns for an objectFieldRef: Secrets
// and ConfigMaps only when exposed, other kinds as a provider of that
// kind is read (the kinds the controller may read).
func (r *kindReconciler) object(ctx context.Context, src Source, ns, kind, name string) (*unstructured.Unstructured, string, error) {
	switch gk := schema.ParseGroupKind(kind); gk {
	case schema.GroupKind{Kind: "Secret"}:
		s, err := src.Secret(name)
		if s == nil || err != nil {
			return nil, "does not exist or lacks the label " + LabelExpose + "=true", err
		}
		u, err := decodedSecret(s)
		return u, "", err
	case schema.GroupKind{Kind: "ConfigMap"}:
		cm, err := src.ConfigMap(name)
		if cm == nil || err != nil {
			return nil, "does not exist or lacks the label " + LabelExpose + "=true", err
		}
		obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(cm)
		return &unstructured.Unstructured{Object: obj}, "", err
	}
	kinds, note, err := r.kindsOf(ctx, Request{Kind: kind, Namespace: ns, Name: name})
	if note != "" || err != nil {
		return nil, note, err
	}
	o, err := r.getProvider(ctx, kinds[0], types.NamespacedName{Namespace: ns, Name: name})
	if apierrors.IsNotFound(err) {
		return nil, "does not exist", nil
	}
	if err != nil {
		return nil, "", err
	}
	if u, ok := o.(*unstructured.Unstructured); ok {
		return u, "", nil
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
	return &unstructured.Unstructured{Object: obj}, "", err
}
