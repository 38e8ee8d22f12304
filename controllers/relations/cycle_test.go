package relations_test

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/cloudtransit/transit/controllers/relations"
	"github.com/cloudtransit/transit/controllers/relations/api/v1alpha1"
)

// TestStartCycle: two workloads that each start only after the other is
// a cycle, reported on each member's Relationship (Ready=False, Cycle,
// naming the members) and by an event; giving one side another provider
// ends it.
func TestStartCycle(t *testing.T) {
	e, ns := startEnv(t)
	startController(t, e)
	ctx := t.Context()
	c := e.Client
	a := deployment(ns, "a", map[string]string{relations.AnnotationProvides: "a", relations.AnnotationConsumes: "b", relations.AnnotationRelationship: "b"})
	b := deployment(ns, "b", map[string]string{relations.AnnotationProvides: "b", relations.AnnotationConsumes: "a", relations.AnnotationRelationship: "a"})
	createAll(t, c, a, b)
	for _, m := range []struct{ rel, path string }{
		{"deployment-a-b", "Deployment " + ns + "/a → Deployment " + ns + "/b → Deployment " + ns + "/a"},
		{"deployment-b-a", "Deployment " + ns + "/b → Deployment " + ns + "/a → Deployment " + ns + "/b"},
	} {
		eventually(t, m.rel+" Cycle", func() (bool, string) {
			rel := &v1alpha1.Relationship{}
			if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: m.rel}, rel); err != nil {
				return false, err.Error()
			}
			r := meta.FindStatusCondition(rel.Status.Conditions, v1alpha1.ConditionReady)
			return r != nil && r.Reason == "Cycle" && strings.HasPrefix(r.Message, m.path), condString(rel)
		})
	}
	eventually(t, "the Cycle event", func() (bool, string) {
		return hasEvent(ctx, c, ns, "a", "Cycle", "b: Deployment "+ns+"/a → Deployment "+ns+"/b"), ""
	})

	// b relates to another provider of a: no cycle any more.
	ext := externalService(ns, "ext", "a.example.com")
	ext.Annotations[relations.AnnotationProvides] = "a"
	createAll(t, c, ext)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d := deployment(ns, "b", nil)
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "b"}, d); err != nil {
			return err
		}
		d.Annotations[relations.AnnotationRelationship] = "ext"
		return c.Update(ctx, d)
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"deployment-a-b", "deployment-b-a"} {
		eventually(t, name+" Ready", func() (bool, string) {
			rel := &v1alpha1.Relationship{}
			if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, rel); err != nil {
				return false, err.Error()
			}
			return meta.IsStatusConditionTrue(rel.Status.Conditions, v1alpha1.ConditionReady), condString(rel)
		})
	}
}
