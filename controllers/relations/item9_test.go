package relations_test

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cloudtransit/transit/controllers/relations"
)

// refersTo says whether spec takes anything from Secret name.
func refersTo(spec corev1.PodSpec, name string) bool {
	for _, ctr := range spec.Containers {
		for _, e := range ctr.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == name {
				return true
			}
		}
	}
	return false
}

// dropUsers deletes the ReplicaSets and pods of namespace default that
// take values from Secret name: an old revision's pods gone at the end
// of a rollout, its ReplicaSet gone from the Deployment's history.
func dropUsers(t *testing.T, c client.Client, name string) {
	t.Helper()
	var sets appsv1.ReplicaSetList
	if err := c.List(t.Context(), &sets, client.InNamespace("default")); err != nil {
		t.Fatal(err)
	}
	for i := range sets.Items {
		if refersTo(sets.Items[i].Spec.Template.Spec, name) {
			if err := c.Delete(t.Context(), &sets.Items[i]); client.IgnoreNotFound(err) != nil {
				t.Fatal(err)
			}
		}
	}
	var pods corev1.PodList
	if err := c.List(t.Context(), &pods, client.InNamespace("default")); err != nil {
		t.Fatal(err)
	}
	for i := range pods.Items {
		if refersTo(pods.Items[i].Spec, name) {
			if err := c.Delete(t.Context(), &pods.Items[i], client.GracePeriodSeconds(0)); client.IgnoreNotFound(err) != nil {
				t.Fatal(err)
			}
		}
	}
}

// usedBy waits until a pod of namespace default takes values from
// Secret name.
func usedBy(t *testing.T, c client.Client, name string) {
	t.Helper()
	eventually(t, "a pod using "+name, func() (bool, string) {
		var pods corev1.PodList
		if err := c.List(t.Context(), &pods, client.InNamespace("default")); err != nil {
			return false, err.Error()
		}
		for _, p := range pods.Items {
			if refersTo(p.Spec, name) {
				return true, ""
			}
		}
		return false, "none"
	})
}

// TestOldValuesKeptWhileUsed: a revision beyond the history keeps its
// values Secret while a pod refers to it (a rollout not finished) or the
// Deployment can roll back to it (its ReplicaSet); once both are gone,
// the next revision's prune deletes it, while r2, whose pod and
// ReplicaSet remain, stays.
func TestOldValuesKeptWhileUsed(t *testing.T) {
	e := startEnvWithWebhook(t)
	startController(t, e, relations.Options{History: 1, Recheck: time.Second})
	ctx := t.Context()
	c := e.Client
	createAll(t, c, externalService("pg", "db1.example.com"),
		deployment("web", map[string]string{relations.AnnotationConsumes: "db", relations.AnnotationRelationship: "pg"}))
	relKey := types.NamespacedName{Namespace: "default", Name: "deployment-web-db"}
	waitTemplate(t, c, "web", "deployment-web-db-r1", "1")
	usedBy(t, c, "deployment-web-db-r1")

	setHost(t, c, "pg", "db2.example.com")
	waitRevision(t, c, relKey, 2, "db2.example.com") // r1 has left the history of 1
	r1 := &corev1.Secret{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: "default", Name: "deployment-web-db-r1"}, r1); err != nil {
		t.Fatalf("r1's values Secret, which the old pod and ReplicaSet use: %v", err)
	}

	// Both gone, r1 goes at the next look: the next revision.
	dropUsers(t, c, "deployment-web-db-r1")
	setHost(t, c, "pg", "db3.example.com")
	waitRevision(t, c, relKey, 3, "db3.example.com")
	eventually(t, "r1's Secret deleted once nothing uses it", func() (bool, string) {
		err := c.Get(ctx, types.NamespacedName{Namespace: "default", Name: "deployment-web-db-r1"}, r1)
		return apierrors.IsNotFound(err), strings.Join(r1.Finalizers, ",")
	})
	if err := c.Get(ctx, types.NamespacedName{Namespace: "default", Name: "deployment-web-db-r2"}, &corev1.Secret{}); err != nil {
		t.Errorf("r2's values Secret, which its ReplicaSet uses: %v", err)
	}
}
