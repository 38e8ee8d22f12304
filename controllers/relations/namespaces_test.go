package relations_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/cloudtransit/transit/controllers/relations"
	"github.com/cloudtransit/transit/controllers/relations/api/v1alpha1"
)

// TestCrossNamespace: a consumer naming a provider in another namespace is
// refused (Permitted=False, nothing injected) until the provider lists its
// namespace; then the values are copied into the consumer's namespace;
// withdrawn consent takes the injection out and deletes the copies.
func TestCrossNamespace(t *testing.T) {
	e, ns := startEnv(t)
	data := e.Namespace(t) // the providers'
	startController(t, e, relations.Options{Recheck: time.Second})
	ctx := t.Context()
	c := e.Client

	pg := externalService(data, "pg", "db1.example.com")
	web := deployment(ns, "web", map[string]string{relations.AnnotationConsumes: "db", relations.AnnotationRelationship: data + "/pg"})
	createAll(t, c, pg, web)
	relKey := types.NamespacedName{Namespace: ns, Name: "deployment-web-db"}
	rel := &v1alpha1.Relationship{}
	eventually(t, "Permitted=False", func() (bool, string) {
		if err := c.Get(ctx, relKey, rel); err != nil {
			return false, err.Error()
		}
		p := meta.FindStatusCondition(rel.Status.Conditions, v1alpha1.ConditionPermitted)
		return p != nil && p.Status == metav1.ConditionFalse && strings.Contains(p.Message, "none of "+data+"/pg provides db to namespace "+ns) &&
			meta.IsStatusConditionFalse(rel.Status.Conditions, v1alpha1.ConditionReady), condString(rel)
	})
	if rel.Status.Revision != 0 || hasInjected(t, c, ns, "web") {
		t.Fatalf("a consumer not permitted got values: revision %d", rel.Status.Revision)
	}

	pg.Annotations[relations.AnnotationAllowNamespaces] = ns
	if err := c.Update(ctx, pg); err != nil {
		t.Fatal(err)
	}
	waitRevision(t, c, relKey, 1, "db1.example.com")
	waitTemplate(t, c, ns, "web", "deployment-web-db-r1", "1")

	// The provider's values come from an exposed Secret of its namespace:
	// a change of the Secret reaches the consumer in another namespace.
	host := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pg-host", Namespace: data, Labels: map[string]string{relations.LabelExpose: "true"}},
		Data: map[string][]byte{"host": []byte("from-secret.example.com")}}
	createAll(t, c, host, &v1alpha1.ProviderConfig{ObjectMeta: metav1.ObjectMeta{Name: "pg-host", Namespace: data}, Spec: v1alpha1.ProviderConfigSpec{
		Interface: "db", Values: []v1alpha1.ValueSource{{Key: "db", SecretKeyRef: &v1alpha1.KeyRef{Name: "pg-host", Key: "host"}}}}})
	pg.Annotations[relations.AnnotationConfig] = "db=pg-host"
	if err := c.Update(ctx, pg); err != nil {
		t.Fatal(err)
	}
	waitRevision(t, c, relKey, 2, "from-secret.example.com")
	host.Data["host"] = []byte("rotated.example.com")
	if err := c.Update(ctx, host); err != nil {
		t.Fatal(err)
	}
	waitRevision(t, c, relKey, 3, "rotated.example.com")

	// Consent withdrawn: the template loses the injection, the copy goes.
	delete(pg.Annotations, relations.AnnotationAllowNamespaces)
	if err := c.Update(ctx, pg); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the injection removed", func() (bool, string) { return !hasInjected(t, c, ns, "web"), "still injected" })
	// Pods of the old revisions (rollouts the test's cluster never ends)
	// keep their copies until they are gone.
	for _, r := range []string{"r1", "r2", "r3"} {
		dropUsers(t, c, ns, "web", "deployment-web-db-"+r)
	}
	eventually(t, "the copies deleted", func() (bool, string) {
		var secrets corev1.SecretList
		if err := c.List(ctx, &secrets, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		for _, s := range secrets.Items {
			if strings.HasPrefix(s.Name, "deployment-web-db-r") {
				return false, "copy " + s.Name + " left"
			}
		}
		return true, ""
	})
	if err := c.Get(ctx, relKey, rel); err != nil {
		t.Fatal(err)
	}
	if rel.Status.Revision != 0 || len(rel.Status.History) != 0 || !meta.IsStatusConditionFalse(rel.Status.Conditions, v1alpha1.ConditionPermitted) {
		t.Errorf("after withdrawal: revision %d, history %d, %s", rel.Status.Revision, len(rel.Status.History), condString(rel))
	}
}

// TestProtect: a provider annotated protect=true gains a finalizer once a
// consumer relates to it; deleting it waits (the consumer keeps its
// values) until the consumer is gone; without protect, no finalizer.
func TestProtect(t *testing.T) {
	e, ns := startEnv(t)
	startController(t, e)
	ctx := t.Context()
	c := e.Client

	pg := externalService(ns, "pg", "db1.example.com")
	pg.Annotations[relations.AnnotationProtect] = "true"
	plain := externalService(ns, "cache", "cache.example.com")
	plain.Annotations[relations.AnnotationProvides] = "cache"
	web := deployment(ns, "web", map[string]string{relations.AnnotationConsumes: "db,cache", relations.AnnotationRelationship: "pg,cache"})
	createAll(t, c, pg, plain, web)
	relKey := types.NamespacedName{Namespace: ns, Name: "deployment-web-db"}
	waitRevision(t, c, relKey, 1, "db1.example.com")
	eventually(t, "the protect finalizer", func() (bool, string) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(pg), pg); err != nil {
			return false, err.Error()
		}
		return controllerutil.ContainsFinalizer(pg, relations.ProtectFinalizer), strings.Join(pg.Finalizers, ",")
	})
	if err := c.Get(ctx, client.ObjectKeyFromObject(plain), plain); err != nil || len(plain.Finalizers) != 0 {
		t.Errorf("a provider without protect got finalizers %v (%v)", plain.Finalizers, err)
	}

	if err := c.Delete(ctx, pg); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if err := c.Get(ctx, client.ObjectKeyFromObject(pg), pg); err != nil {
		t.Fatalf("a protected provider with a consumer was deleted: %v", err)
	}
	if !hasInjected(t, c, ns, "web") {
		t.Error("the consumer of a provider being deleted lost its values")
	}
	eventually(t, "the Protected event", func() (bool, string) {
		return hasEvent(ctx, c, ns, "pg", "Protected", "deletion waits for the consumers relating to it: Deployment "+ns+"/web"), ""
	})

	// The consumer gone (its Relationships collected), the provider goes.
	if err := c.Delete(ctx, web, client.PropagationPolicy(metav1.DeletePropagationForeground)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the provider deleted", func() (bool, string) {
		err := c.Get(ctx, client.ObjectKeyFromObject(pg), pg)
		return apierrors.IsNotFound(err), strings.Join(pg.Finalizers, ",")
	})
}

// hasInjected says whether the Deployment's template carries any revision.
func hasInjected(t *testing.T, c client.Client, ns, name string) bool {
	t.Helper()
	d := deployment(ns, name, nil)
	if err := c.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: name}, d); err != nil {
		t.Fatal(err)
	}
	for k := range d.Spec.Template.Annotations {
		if strings.HasPrefix(k, relations.RevisionAnnotationPrefix) {
			return true
		}
	}
	for _, ctr := range d.Spec.Template.Spec.Containers {
		if len(ctr.Env) > 0 {
			return true
		}
	}
	return false
}

// TestBinding: binding keys project the Service Binding directory
// $SERVICE_BINDING_ROOT/db/ with the entries, type and provider, into a
// container without a root (set to /bindings) and one with its own.
func TestBinding(t *testing.T) {
	e, ns := startEnv(t)
	startController(t, e)
	ctx := t.Context()
	c := e.Client
	cc := &v1alpha1.ConsumerConfig{ObjectMeta: metav1.ObjectMeta{Name: "db-binding", Namespace: ns}, Spec: v1alpha1.ConsumerConfigSpec{
		Interface: "db", Keys: []v1alpha1.KeyInjection{{Key: "db", Binding: "host"}}}}
	web := deployment(ns, "web", map[string]string{relations.AnnotationConsumes: "db", relations.AnnotationRelationship: "pg", relations.AnnotationConfig: "db=db-binding"})
	web.Spec.Template.Spec.Containers[1].Env = []corev1.EnvVar{{Name: relations.BindingRootEnv, Value: "/var/bindings"}}
	createAll(t, c, cc, externalService(ns, "pg", "db1.example.com"), web)
	key := types.NamespacedName{Namespace: ns, Name: "web"}
	eventually(t, "the binding directory mounted", func() (bool, string) {
		if err := c.Get(ctx, key, web); err != nil {
			return false, err.Error()
		}
		cs := web.Spec.Template.Spec.Containers
		mount := func(c corev1.Container) string {
			if len(c.VolumeMounts) != 1 {
				return ""
			}
			return c.VolumeMounts[0].MountPath
		}
		return mount(cs[0]) == "/bindings/db" && mount(cs[1]) == "/var/bindings/db" &&
			envValue(cs[0], relations.BindingRootEnv) == "/bindings" && envValue(cs[1], relations.BindingRootEnv) == "/var/bindings" &&
			len(cs[1].Env) == 1, fmt.Sprintf("%+v", cs)
	})
	v := web.Spec.Template.Spec.Volumes
	if len(v) != 1 || v[0].Secret == nil {
		t.Fatalf("volumes %+v", v)
	}
	s := &corev1.Secret{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: v[0].Secret.SecretName}, s); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for _, it := range v[0].Secret.Items {
		files[it.Path] = string(s.Data[it.Key])
	}
	if files["host"] != "db1.example.com" || files["type"] != "db" || files["provider"] != ns+"/pg" {
		t.Errorf("the binding directory holds %v", files)
	}
}

// TestInPlace: an InPlace relationship mounts a mutable Secret that holds
// the running revision's values; a provider change updates its files and
// never the template (no rollout); a pin puts an older revision's values
// there.
func TestInPlace(t *testing.T) {
	e, ns := startEnv(t)
	// No recheck within the test: only the watches wake a consumer once
	// its conflict clears.
	startController(t, e, relations.Options{Recheck: time.Hour})
	ctx := t.Context()
	c := e.Client
	createInPlaceWeb(t, c, ns)
	key := types.NamespacedName{Namespace: ns, Name: "web"}
	liveKey := types.NamespacedName{Namespace: ns, Name: "deployment-web-db-live"}
	live := func(want string) func() (bool, string) {
		return func() (bool, string) {
			s := &corev1.Secret{}
			if err := c.Get(ctx, liveKey, s); err != nil {
				return false, err.Error()
			}
			return string(s.Data["db"]) == want, string(s.Data["db"])
		}
	}
	web := deployment(ns, "web", nil)
	eventually(t, "the template mounts the live Secret", func() (bool, string) {
		if err := c.Get(ctx, key, web); err != nil {
			return false, err.Error()
		}
		tpl := web.Spec.Template
		ok := tpl.Annotations[relations.RevisionAnnotationPrefix+"deployment-web-db"] == "in-place" &&
			len(tpl.Spec.Volumes) == 1 && tpl.Spec.Volumes[0].Secret != nil && tpl.Spec.Volumes[0].Secret.SecretName == liveKey.Name
		return ok, fmt.Sprintf("annotations %v volumes %+v", tpl.Annotations, tpl.Spec.Volumes)
	})
	eventually(t, "the live Secret at db1", live("db1.example.com"))
	generation := web.Generation

	setHost(t, c, ns, "pg", "db2.example.com")
	waitRevisionOf(t, c, ns, "deployment-web-db", 2)
	eventually(t, "the live Secret at db2", live("db2.example.com"))
	if err := c.Get(ctx, key, web); err != nil || web.Generation != generation {
		t.Errorf("an InPlace change wrote the template: generation %d → %d (%v)", generation, web.Generation, err)
	}

	// A pin puts revision 1's values in place.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, key, web); err != nil {
			return err
		}
		web.Annotations[relations.AnnotationPin] = "db=1"
		return c.Update(ctx, web)
	})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the live Secret back at db1", live("db1.example.com"))

	// The live Secret's name is taken by someone else's Secret: a
	// condition naming it, not a reconcile error retried forever; once it
	// is gone, the relationship injects.
	theirs := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "deployment-api-db-live", Namespace: ns}, StringData: map[string]string{"db": "theirs"}}
	createAll(t, c, theirs, deployment(ns, "api", map[string]string{relations.AnnotationConsumes: "db", relations.AnnotationRelationship: "pg", relations.AnnotationConfig: "db=db-files"}))
	rel := &v1alpha1.Relationship{}
	eventually(t, "Injected=False Conflict naming the Secret", func() (bool, string) {
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "deployment-api-db"}, rel); err != nil {
			return false, err.Error()
		}
		cond := meta.FindStatusCondition(rel.Status.Conditions, v1alpha1.ConditionInjected)
		return cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == "Conflict" &&
			strings.Contains(cond.Message, "Secret "+ns+"/deployment-api-db-live belongs to someone else"), condString(rel)
	})
	if err := c.Get(ctx, client.ObjectKeyFromObject(theirs), theirs); err != nil || string(theirs.Data["db"]) != "theirs" {
		t.Errorf("someone else's Secret was changed: %q (%v)", theirs.Data, err)
	}
	if err := c.Delete(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	eventually(t, "injected once the name is free", func() (bool, string) {
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "deployment-api-db"}, rel); err != nil {
			return false, err.Error()
		}
		return meta.IsStatusConditionTrue(rel.Status.Conditions, v1alpha1.ConditionInjected), condString(rel)
	})
}

// createInPlaceWeb creates the provider pg and the consumer web, which
// takes db as the file /etc/db/host, updated in place.
func createInPlaceWeb(t *testing.T, c client.Client, ns string) {
	t.Helper()
	cc := &v1alpha1.ConsumerConfig{ObjectMeta: metav1.ObjectMeta{Name: "db-files", Namespace: ns}, Spec: v1alpha1.ConsumerConfigSpec{
		Interface: "db", Update: v1alpha1.UpdateInPlace, Keys: []v1alpha1.KeyInjection{{Key: "db", File: "/etc/db/host"}}}}
	createAll(t, c, cc, externalService(ns, "pg", "db1.example.com"),
		deployment(ns, "web", map[string]string{relations.AnnotationConsumes: "db", relations.AnnotationRelationship: "pg", relations.AnnotationConfig: "db=db-files"}))
}
