package relations

import (
	"path/filepath"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cloudtransit/transit/controllers/relations/api/v1alpha1"
	"github.com/cloudtransit/transit/controllers/testenv"
)

// TestReinjectDefaulted: file and binding injections read back as the
// API server defaults them (a Secret volume's defaultMode: 420) are
// carried: injecting the same revision again writes nothing, however
// often, and never trips the reverting-writer guard.
func TestReinjectDefaulted(t *testing.T) {
	// The server the external tests' startPlainEnv shares.
	e := testenv.Shared(t, "plain", testenv.Options{
		CRDDirs:     []string{filepath.Join("config", "crd")},
		AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme},
	})
	ns := e.Namespace(t)
	ctx := t.Context()
	labels := map[string]string{"app": "web"}
	w := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "busybox"}}}},
		},
	}
	if err := e.Client.Create(ctx, w); err != nil {
		t.Fatal(err)
	}
	r := &kindReconciler{Reconciler: &Reconciler{Client: e.Client}, workloadKind: workloadKinds[0]}
	injections := []Injection{{Relationship: "deployment-web-db", Interface: "db", Revision: 1, Secret: "deployment-web-db-r1",
		Keys: []v1alpha1.KeyInjection{{Key: "host", File: "/etc/db/host"}, {Key: "port", Binding: "port"}}}}
	for i := range 2 * maxReapplies {
		if err := e.Client.Get(ctx, client.ObjectKeyFromObject(w), w); err != nil {
			t.Fatal(err)
		}
		owned, err := ownedFields(w)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.inject(ctx, w, owned, injections); err != nil {
			t.Fatalf("injection %d of the same revision: %v", i+1, err)
		}
	}
	if err := e.Client.Get(ctx, client.ObjectKeyFromObject(w), w); err != nil {
		t.Fatal(err)
	}
	if v := w.Spec.Template.Spec.Volumes; len(v) != 2 || v[0].Secret.DefaultMode == nil {
		t.Errorf("volumes %+v, want two, defaulted by the API server", v)
	}
	if w.Generation != 2 {
		t.Errorf("generation %d, want 2: one write", w.Generation)
	}
}
