package kubernetes

import (
	"errors"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/cloudtransit/transit/bundle"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// TestRelationsAddonRemovalWhileProtecting: removing the relations addon
// is refused, keeping every object, while a provider carries its protect
// finalizer (nothing would lift it once the controller is gone), naming
// the provider and what to do; once the finalizer is gone the addon is
// removed.
func TestRelationsAddonRemovalWhileProtecting(t *testing.T) {
	ctx := t.Context()
	c, dyn, a := addonsAPIServer(t)
	d := newDriver(districts.Cluster{ID: "k", Kubernetes: &districts.Kubernetes{}},
		Options{Bundles: map[string]string{"a": relationsBundle(t, bundle.RelationsRepository+":0123456789abcdef")}}, nil)
	d.api = a
	if _, err := d.applyAddons(ctx, a, []districts.Addon{{Name: "relations"}}); err != nil {
		t.Fatal(err)
	}

	// What the controller leaves while a consumer relates to a protected
	// provider: the finalizer, and the Relationship naming the provider.
	pg := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "pg", Namespace: "default", Finalizers: []string{relationsProtectFinalizer}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "db1.example.com"}}
	if _, err := c.CoreV1().Services("default").Create(ctx, pg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rel := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "relations.transit.io/v1alpha1", "kind": "Relationship",
		"metadata": map[string]any{"name": "deployment-web-db", "namespace": "default"},
		"spec": map[string]any{"interface": "db",
			"consumer": map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
			"provider": map[string]any{"apiVersion": "v1", "kind": "Service", "namespace": "default", "name": "pg"}},
	}}
	if _, err := dyn.Resource(relationshipsGVR).Namespace("default").Create(ctx, rel, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	changed, err := d.applyAddons(ctx, a, nil)
	var inUse *provider.AddonInUseError
	if !errors.Is(err, provider.ErrAddonInUse) || !errors.As(err, &inUse) || !slices.Equal(inUse.Users, []string{"Service default/pg"}) {
		t.Fatalf("removing the addon while a provider is protected: %v, want refused naming Service default/pg", err)
	}
	if !strings.Contains(err.Error(), "(Service default/pg); remove their relations.transit.io/protect annotation first") || len(changed) != 0 {
		t.Errorf("the refusal says %v, changed %q", err, changed)
	}
	if _, err := c.AppsV1().Deployments("transit-relations").Get(ctx, "transit-relations", metav1.GetOptions{}); err != nil {
		t.Errorf("the controller after a refused removal: %v", err)
	}

	// The finalizer lifted (as the controller does once protect goes).
	pg, err = c.CoreV1().Services("default").Get(ctx, "pg", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pg.Finalizers = nil
	if _, err := c.CoreV1().Services("default").Update(ctx, pg, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if changed, err := d.applyAddons(ctx, a, nil); err != nil || !slices.Equal(changed, []string{"relations removed"}) {
		t.Fatalf("removing the addon with no provider protected: changed %q, %v", changed, err)
	}
	if _, err := c.AppsV1().Deployments("transit-relations").Get(ctx, "transit-relations", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the controller after the removal: %v", err)
	}
}
