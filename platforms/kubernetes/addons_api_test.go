package kubernetes

import (
	"errors"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	clientset "k8s.io/client-go/kubernetes"

	"github.com/cloudtransit/transit/controllers/testenv"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// TestStreamsAddonOnAPIServer installs, changes and removes the streams
// addon on a real API server (envtest on the bundle's kube-apiserver; no
// kubelet, so no pod runs): every object is accepted, the CRDs are
// served before the rest, status says what does not serve, switching to a
// Kafka of the user's prunes the broker without asking about topologies,
// and removing the addon is refused, keeping every object, while a
// Topology exists, then done once it is gone (the CRDs stay).
func TestStreamsAddonOnAPIServer(t *testing.T) {
	ctx := t.Context()
	c, dyn, a := addonsAPIServer(t)
	d := newDriver(districts.Cluster{ID: "k", Kubernetes: &districts.Kubernetes{}},
		Options{Bundles: map[string]string{"a": testBundle(t, streamsRefs...)}}, nil)
	d.api = a
	topologies := addonUsers["streams"]

	// No CRD yet: there are no topologies, and nothing keeps the addon.
	if inUse, err := addonInUse(ctx, dyn, "streams"); inUse != nil || err != nil {
		t.Fatalf("without the CRD: %v, %v", inUse, err)
	}

	streams := districts.Addon{Name: "streams"}
	changed, err := d.applyAddons(ctx, a, []districts.Addon{streams})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(changed, []string{"streams installed"}) {
		t.Errorf("changed %q, want [streams installed]", changed)
	}
	crd, err := dyn.Resource(crdGVR).Get(ctx, "topologies.streams.transit.io", metav1.GetOptions{})
	if err != nil || !crdEstablished(crd) {
		t.Fatalf("the Topology CRD is not served once the addon is applied: %v", err)
	}
	if changed, err := d.applyAddons(ctx, a, []districts.Addon{streams}); err != nil || len(changed) != 0 {
		t.Errorf("applied again: changed %q, %v; want nothing", changed, err)
	}

	// Status: nothing runs pods here, so the Deployments are not
	// available; once they report so, the addon serves; without its
	// broker it does not.
	status := func() provider.AddonStatus {
		t.Helper()
		sts, err := d.AddonStatus(ctx, []districts.Addon{streams})
		if err != nil {
			t.Fatal(err)
		}
		return sts[len(sts)-1]
	}
	if st := status(); st.Name != "streams" || st.Ready || !strings.Contains(st.Message, "deployment transit-streams/") {
		t.Errorf("status before the pods run: %+v", st)
	}
	for _, name := range []string{"transit-streams", "streams-broker"} {
		markAvailable(t, c, "transit-streams", name)
	}
	if st := status(); !st.Ready {
		t.Errorf("status with both Deployments available: %+v", st)
	}
	if err := c.AppsV1().Deployments("transit-streams").Delete(ctx, "streams-broker", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if st := status(); st.Ready || st.Message != "deployment transit-streams/streams-broker does not exist" {
		t.Errorf("status without the broker: %+v", st)
	}
	if addonNamespace("streams") != "transit-streams" {
		t.Errorf("addonNamespace(streams) = %q", addonNamespace("streams"))
	}

	// A Topology exists.
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	topo := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "streams.transit.io/v1alpha1", "kind": "Topology",
		"metadata": map[string]any{"name": "orders", "namespace": "team-a"},
		"spec":     map[string]any{"parts": []any{map[string]any{"name": "ingest", "revision": int64(1)}}},
	}}
	if _, err := dyn.Resource(topologies).Namespace("team-a").Create(ctx, topo, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// A Kafka of the user's: the broker goes, the addon stays (its
	// topologies do not matter).
	withKafka := districts.Addon{Name: "streams", Settings: map[string]string{"bootstrap": "kafka:9092"}}
	if changed, err := d.applyAddons(ctx, a, []districts.Addon{withKafka}); err != nil || !slices.Equal(changed, []string{"streams upgraded"}) {
		t.Errorf("switched to a Kafka of the user's: changed %q, %v; want [streams upgraded]", changed, err)
	}
	if _, err := c.CoreV1().Services("transit-streams").Get(ctx, "streams-broker", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the broker's Service is still there: %v", err)
	}

	// Removing the addon is refused, naming the Topology; nothing goes.
	changed, err = d.applyAddons(ctx, a, nil)
	var inUse *provider.AddonInUseError
	if !errors.Is(err, provider.ErrAddonInUse) || !errors.As(err, &inUse) || !slices.Equal(inUse.Users, []string{"team-a/orders"}) {
		t.Fatalf("removing the addon with a Topology: %v, want refused naming team-a/orders", err)
	}
	if !strings.Contains(err.Error(), "removing addon streams refused: 1 topologies.streams.transit.io still exist (team-a/orders); delete them first") {
		t.Errorf("the refusal says: %v", err)
	}
	if len(changed) != 0 {
		t.Errorf("changed %q while refused", changed)
	}
	kept := []struct {
		gvr       schema.GroupVersionResource
		namespace string
		name      string
	}{
		{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, "transit-streams", "transit-streams"},
		{schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}, "", "transit-streams"},
		{schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicies"}, "", "transit-streams-revisions"},
		{schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, "", "transit-streams"},
	}
	for _, k := range kept {
		if _, err := dyn.Resource(k.gvr).Namespace(k.namespace).Get(ctx, k.name, metav1.GetOptions{}); err != nil {
			t.Errorf("%s %s/%s after a refused removal: %v", k.gvr.Resource, k.namespace, k.name, err)
		}
	}

	// Once the Topology is gone, the addon is removed; its CRDs stay.
	if err := dyn.Resource(topologies).Namespace("team-a").Delete(ctx, "orders", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if changed, err := d.applyAddons(ctx, a, nil); err != nil || !slices.Equal(changed, []string{"streams removed"}) {
		t.Fatalf("removing the addon without topologies: changed %q, %v", changed, err)
	}
	for _, k := range kept[:3] {
		if _, err := dyn.Resource(k.gvr).Namespace(k.namespace).Get(ctx, k.name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("%s %s/%s after the removal: %v", k.gvr.Resource, k.namespace, k.name, err)
		}
	}
	if _, err := dyn.Resource(crdGVR).Get(ctx, "topologies.streams.transit.io", metav1.GetOptions{}); err != nil {
		t.Errorf("the Topology CRD went with the addon: %v", err)
	}
	// A Topology made later, with the addon gone, keeps nothing: there is
	// nothing left to remove.
	if _, err := dyn.Resource(topologies).Namespace("team-a").Create(ctx, topo, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if changed, err := d.applyAddons(ctx, a, nil); err != nil || len(changed) != 0 {
		t.Errorf("apply without the addon, a Topology left: changed %q, %v", changed, err)
	}
}

// markAvailable writes the status a Deployment's controller would once
// every replica is available.
func markAvailable(t *testing.T, c clientset.Interface, namespace, name string) {
	t.Helper()
	dep, err := c.AppsV1().Deployments(namespace).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := *dep.Spec.Replicas
	dep.Status = appsv1.DeploymentStatus{ObservedGeneration: dep.Generation, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n}
	if _, err := c.AppsV1().Deployments(namespace).UpdateStatus(t.Context(), dep, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// addonsAPIServer starts an API server (envtest on the bundle's; no
// kubelet) and returns its clients and the driver's api on it.
func addonsAPIServer(t *testing.T) (clientset.Interface, dynamic.Interface, *api) {
	t.Helper()
	env := testenv.Start(t, testenv.Options{})
	c, err := clientset.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	return c, dyn, &api{c: c, cfg: env.Config}
}
