package relations

import (
	"encoding/json"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// TestWebhookNeverHoldsFinalizers: an update that only removes
// finalizers, or of a workload being deleted, is admitted unchanged, even
// with annotations the webhook would refuse; any other change is judged
// as ever.
func TestWebhookNeverHoldsFinalizers(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	h := &Webhook{Decoder: admission.NewDecoder(scheme)} // reads nothing for these
	old := &appsv1.Deployment{
		TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", Finalizers: []string{"example.com/a", "example.com/b"},
			Annotations: map[string]string{AnnotationConsumes: "DB"}}, // malformed: refused
		Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "busybox"}}}}},
	}
	update := func(edit func(d *appsv1.Deployment)) admission.Response {
		now := old.DeepCopy()
		edit(now)
		raw := func(d *appsv1.Deployment) runtime.RawExtension {
			data, err := json.Marshal(d)
			if err != nil {
				t.Fatal(err)
			}
			return runtime.RawExtension{Raw: data}
		}
		return h.Handle(t.Context(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
			Operation: admissionv1.Update, Namespace: "default", Name: "web",
			Kind:   metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"},
			Object: raw(now), OldObject: raw(old),
		}})
	}
	for _, c := range []struct {
		name    string
		edit    func(d *appsv1.Deployment)
		allowed bool
	}{
		{"a finalizer removed", func(d *appsv1.Deployment) { d.Finalizers = d.Finalizers[1:] }, true},
		{"every finalizer removed", func(d *appsv1.Deployment) { d.Finalizers = nil }, true},
		{"being deleted", func(d *appsv1.Deployment) { now := metav1.Now(); d.DeletionTimestamp = &now; d.Spec.Paused = true }, true},
		{"a finalizer removed and the template changed", func(d *appsv1.Deployment) {
			d.Finalizers = nil
			d.Spec.Template.Spec.Containers[0].Image = "nginx"
		}, false},
		{"a finalizer removed and labels set where there were none", func(d *appsv1.Deployment) {
			d.Finalizers = nil
			d.Labels = map[string]string{"team": "a"}
		}, false},
		{"a finalizer added", func(d *appsv1.Deployment) { d.Finalizers = append(d.Finalizers, "example.com/c") }, false},
	} {
		resp := update(c.edit)
		if resp.Allowed != c.allowed || (resp.Allowed && len(resp.Patches) > 0) {
			t.Errorf("%s: allowed %v, patches %v (%v); want allowed %v, unchanged", c.name, resp.Allowed, resp.Patches, resp.Result, c.allowed)
		}
	}
}
