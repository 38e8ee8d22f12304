package relations_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cloudtransit/transit/controllers/relations"
	"github.com/cloudtransit/transit/controllers/relations/api/v1alpha1"
)

// TestProviderKinds: a workload provides its Service's name; an exposed
// Secret provides through a ProviderConfig, and a change of it is a new
// revision; two objects of one name that both provide an interface are
// ambiguous, both named, and the template stays as it is.
func TestProviderKinds(t *testing.T) {
	e := startEnv(t)
	startController(t, e)
	ctx := t.Context()
	c := e.Client

	api := deployment("api", map[string]string{relations.AnnotationProvides: "api"})
	creds := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: "default",
		Labels:      map[string]string{relations.LabelExpose: "true"},
		Annotations: map[string]string{relations.AnnotationProvides: "creds", relations.AnnotationConfig: "creds=creds"}},
		Data: map[string][]byte{"password": []byte("s3cret")}}
	pc := &v1alpha1.ProviderConfig{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: "default"}, Spec: v1alpha1.ProviderConfigSpec{
		Interface: "creds", Values: []v1alpha1.ValueSource{{Key: "password", SecretKeyRef: &v1alpha1.KeyRef{Name: "creds", Key: "password"}}}}}
	cc := &v1alpha1.ConsumerConfig{ObjectMeta: metav1.ObjectMeta{Name: "creds-env", Namespace: "default"}, Spec: v1alpha1.ConsumerConfigSpec{
		Interface: "creds", Keys: []v1alpha1.KeyInjection{{Key: "password", Env: "DB_PASSWORD"}}}}
	web := deployment("web", map[string]string{relations.AnnotationConsumes: "api,creds", relations.AnnotationRelationship: "api,creds",
		relations.AnnotationConfig: "creds=creds-env"})
	createAll(t, c, api, creds, pc, cc, web)
	env := func() map[string]string {
		d := deployment("web", nil)
		if err := c.Get(ctx, types.NamespacedName{Namespace: "default", Name: "web"}, d); err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, v := range d.Spec.Template.Spec.Containers[0].Env {
			if v.ValueFrom != nil && v.ValueFrom.SecretKeyRef != nil {
				s := &corev1.Secret{}
				if err := c.Get(ctx, types.NamespacedName{Namespace: "default", Name: v.ValueFrom.SecretKeyRef.Name}, s); err == nil {
					out[v.Name] = string(s.Data[v.ValueFrom.SecretKeyRef.Key])
				}
			}
		}
		return out
	}
	eventually(t, "both relationships injected", func() (bool, string) {
		got := env()
		return got["API"] == "api.default.svc.cluster.local" && got["DB_PASSWORD"] == "s3cret", strings.Join(mapKeys(got), ",")
	})
	creds.Data["password"] = []byte("rotated")
	if err := c.Update(ctx, creds); err != nil {
		t.Fatal(err)
	}
	waitRevisionOf(t, c, "deployment-web-creds", 2)
	eventually(t, "the rotated password injected", func() (bool, string) { return env()["DB_PASSWORD"] == "rotated", env()["DB_PASSWORD"] })

	// Two providers of one name and interface.
	createAll(t, c,
		externalService("dup", "a.example.com"),
		deployment("dup", map[string]string{relations.AnnotationProvides: "db"}),
		deployment("amb", map[string]string{relations.AnnotationConsumes: "db", relations.AnnotationRelationship: "dup"}),
	)
	rel := &v1alpha1.Relationship{}
	eventually(t, "ProviderFound=False Ambiguous", func() (bool, string) {
		if err := c.Get(ctx, types.NamespacedName{Namespace: "default", Name: "deployment-amb-db"}, rel); err != nil {
			return false, err.Error()
		}
		cond := meta.FindStatusCondition(rel.Status.Conditions, v1alpha1.ConditionProviderFound)
		return cond != nil && cond.Reason == "Ambiguous" && strings.Contains(cond.Message, "Service default/dup") &&
			strings.Contains(cond.Message, "Deployment default/dup"), condString(rel)
	})
}

// waitRevisionOf waits until the Relationship is at revision.
func waitRevisionOf(t *testing.T, c client.Client, name string, revision int64) {
	t.Helper()
	rel := &v1alpha1.Relationship{}
	eventually(t, name+" at revision "+strconvI(revision), func() (bool, string) {
		if err := c.Get(t.Context(), types.NamespacedName{Namespace: "default", Name: name}, rel); err != nil {
			return false, err.Error()
		}
		return rel.Status.Revision == revision, condString(rel)
	})
}
