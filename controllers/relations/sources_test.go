package relations_test

import (
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cloudtransit/transit/controllers/relations"
	"github.com/cloudtransit/transit/controllers/relations/api/v1alpha1"
)

// injectedEnv reads the values the Deployment's first container takes
// from Secrets, by variable.
func injectedEnv(t *testing.T, c client.Client, ns, name string) map[string]string {
	t.Helper()
	d := deployment(ns, name, nil)
	if err := c.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: name}, d); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, v := range d.Spec.Template.Spec.Containers[0].Env {
		if v.ValueFrom != nil && v.ValueFrom.SecretKeyRef != nil {
			s := &corev1.Secret{}
			if err := c.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: v.ValueFrom.SecretKeyRef.Name}, s); err == nil {
				out[v.Name] = string(s.Data[v.ValueFrom.SecretKeyRef.Key])
			}
		}
	}
	return out
}

// TestObjectFieldSource: a ProviderConfig takes values from fields of
// other objects of the provider's namespace (objectFieldRef: kind, name,
// JSONPath): an exposed ConfigMap, an exposed Secret (its data decoded),
// a Service that provides nothing; a change of that Service is a new
// revision. The controller runs with the addon's own RBAC: a Secret not
// exposed and a kind no ClusterRole lets it read are conditions naming
// what to do, never read.
func TestObjectFieldSource(t *testing.T) {
	e, ns := startEnvWithKinds(t)
	ctx := t.Context()
	c := e.Client
	as := asAddon(t, e)
	startControllerAs(t, e, as)

	exposed := map[string]string{relations.LabelExpose: "true"}
	settings := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: ns, Labels: exposed},
		Data: map[string]string{"host": "db1.example.com"}}
	admin := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pg-admin", Namespace: ns, Labels: exposed},
		Data: map[string][]byte{"password": []byte("s3cret")}}
	hidden := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "hidden", Namespace: ns}, Data: map[string][]byte{"password": []byte("x")}}
	primary := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "pg-primary", Namespace: ns},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 5432}}}}
	ref := func(kind, name, field string) *v1alpha1.ObjectFieldRef {
		return &v1alpha1.ObjectFieldRef{Kind: kind, Name: name, Field: field}
	}
	pc := func(name string, values ...v1alpha1.ValueSource) *v1alpha1.ProviderConfig {
		return &v1alpha1.ProviderConfig{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: v1alpha1.ProviderConfigSpec{Interface: "db", Values: values}}
	}
	provider := func(name, config string) *corev1.Service {
		s := externalService(ns, name, "unused.example.com")
		s.Annotations[relations.AnnotationConfig] = "db=" + config
		return s
	}
	cc := &v1alpha1.ConsumerConfig{ObjectMeta: metav1.ObjectMeta{Name: "db-env", Namespace: ns}, Spec: v1alpha1.ConsumerConfigSpec{
		Interface: "db", Keys: []v1alpha1.KeyInjection{{Key: "host", Env: "HOST"}, {Key: "password", Env: "PASSWORD"}, {Key: "port", Env: "PORT"}}}}
	web := deployment(ns, "web", map[string]string{relations.AnnotationConsumes: "db", relations.AnnotationRelationship: "pg", relations.AnnotationConfig: "db=db-env"})
	createAll(t, c, settings, admin, hidden, primary, cc,
		pc("pg-config",
			v1alpha1.ValueSource{Key: "host", ObjectFieldRef: ref("ConfigMap", "settings", "{.data.host}")},
			v1alpha1.ValueSource{Key: "password", ObjectFieldRef: ref("Secret", "pg-admin", "{.data.password}")},
			v1alpha1.ValueSource{Key: "port", ObjectFieldRef: ref("Service", "pg-primary", "{.spec.ports[0].port}")}),
		provider("pg", "pg-config"), web)
	eventually(t, "the three fields injected", func() (bool, string) {
		got := injectedEnv(t, c, ns, "web")
		return got["HOST"] == "db1.example.com" && got["PASSWORD"] == "s3cret" && got["PORT"] == "5432", strings.Join(mapKeys(got), ",")
	})

	// The Service provides nothing: its change is heard all the same.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(primary), primary); err != nil {
			return err
		}
		primary.Spec.Ports[0].Port = 6432
		return c.Update(ctx, primary)
	})
	if err != nil {
		t.Fatal(err)
	}
	waitRevisionOf(t, c, ns, "deployment-web-db", 2)
	eventually(t, "the new port injected", func() (bool, string) {
		return injectedEnv(t, c, ns, "web")["PORT"] == "6432", injectedEnv(t, c, ns, "web")["PORT"]
	})

	// A Secret not exposed, a kind the controller may not read.
	createAll(t, c,
		pc("hidden-config", v1alpha1.ValueSource{Key: "password", ObjectFieldRef: ref("Secret", "hidden", "{.data.password}")}),
		pc("queue-config", v1alpha1.ValueSource{Key: "host", ObjectFieldRef: ref("Queue.example.com", "jobs", "{.spec.host}")}),
		provider("pg-hidden", "hidden-config"), provider("pg-queue", "queue-config"),
		deployment(ns, "hid", map[string]string{relations.AnnotationConsumes: "db", relations.AnnotationRelationship: "pg-hidden"}),
		deployment(ns, "que", map[string]string{relations.AnnotationConsumes: "db", relations.AnnotationRelationship: "pg-queue"}))
	waitCondition(t, c, ns, "deployment-hid-db", v1alpha1.ConditionValuesResolved, metav1.ConditionFalse, "NotReadable",
		"key password: Secret hidden: does not exist or lacks the label relations.transit.io/expose=true")
	waitCondition(t, c, ns, "deployment-que-db", v1alpha1.ConditionValuesResolved, metav1.ConditionFalse, "NotReadable",
		"the controller may not get queues.example.com: label a ClusterRole granting get, list and watch on queues.example.com servicebinding.io/controller=true")
}

// TestWholeSecretSource: valuesFrom takes every key of an exposed Secret
// (a key values also names takes values' source); a key added to the
// Secret is a new revision; a key that cannot be an interface key, and a
// Secret not exposed, are conditions naming them. A ProviderConfig
// without any source is refused.
func TestWholeSecretSource(t *testing.T) {
	e, ns := startEnv(t)
	startController(t, e)
	ctx := t.Context()
	c := e.Client

	creds := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pg-creds", Namespace: ns, Labels: map[string]string{relations.LabelExpose: "true"}},
		Data: map[string][]byte{"user": []byte("admin"), "password": []byte("s3cret")}}
	pc := &v1alpha1.ProviderConfig{ObjectMeta: metav1.ObjectMeta{Name: "pg-config", Namespace: ns}, Spec: v1alpha1.ProviderConfigSpec{
		Interface:  "db",
		ValuesFrom: []v1alpha1.ValuesFromSource{{SecretRef: v1alpha1.LocalRef{Name: "pg-creds"}}},
		Values:     []v1alpha1.ValueSource{{Key: "user", Field: "{.metadata.name}"}}}}
	pg := externalService(ns, "pg", "db1.example.com")
	pg.Annotations[relations.AnnotationConfig] = "db=pg-config"
	// The consumer takes the keys the Secret has (the default, a key named
	// like the interface, is supplied by none: InterfaceMatched=False).
	cc := &v1alpha1.ConsumerConfig{ObjectMeta: metav1.ObjectMeta{Name: "creds-env", Namespace: ns}, Spec: v1alpha1.ConsumerConfigSpec{
		Interface: "db", Keys: []v1alpha1.KeyInjection{{Key: "user", Env: "DB_USER"}, {Key: "password", Env: "DB_PASSWORD"}}}}
	web := deployment(ns, "web", map[string]string{relations.AnnotationConsumes: "db", relations.AnnotationRelationship: "pg", relations.AnnotationConfig: "db=creds-env"})
	createAll(t, c, creds, pc, pg, cc, web)
	rel := &v1alpha1.Relationship{}
	values := func() map[string]string {
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "deployment-web-db"}, rel); err != nil || rel.Status.Secret == "" {
			return nil
		}
		s := &corev1.Secret{}
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: rel.Status.Secret}, s); err != nil {
			return nil
		}
		out := map[string]string{}
		for k, v := range s.Data {
			out[k] = string(v)
		}
		return out
	}
	eventually(t, "every key of the Secret, user from values", func() (bool, string) {
		v := values()
		return len(v) == 2 && v["user"] == "pg" && v["password"] == "s3cret", strings.Join(mapKeys(v), ",") + " " + condString(rel)
	})

	creds.Data["port"] = []byte("5432")
	if err := c.Update(ctx, creds); err != nil {
		t.Fatal(err)
	}
	waitRevisionOf(t, c, ns, "deployment-web-db", 2)
	if v := values(); v["port"] != "5432" || len(v) != 3 {
		t.Errorf("revision 2's values: keys %v, want user, password and port", mapKeys(v))
	}

	creds.Data["1st"] = []byte("x")
	if err := c.Update(ctx, creds); err != nil {
		t.Fatal(err)
	}
	waitCondition(t, c, ns, "deployment-web-db", v1alpha1.ConditionValuesResolved, metav1.ConditionFalse, "BadKey", "key 1st: Secret pg-creds (valuesFrom): not an interface key")
	delete(creds.Labels, relations.LabelExpose)
	delete(creds.Data, "1st")
	if err := c.Update(ctx, creds); err != nil {
		t.Fatal(err)
	}
	waitCondition(t, c, ns, "deployment-web-db", v1alpha1.ConditionValuesResolved, metav1.ConditionFalse, "NotExposed", "Secret pg-creds (valuesFrom) does not exist or lacks the label relations.transit.io/expose=true")

	empty := &v1alpha1.ProviderConfig{ObjectMeta: metav1.ObjectMeta{Name: "empty", Namespace: ns}, Spec: v1alpha1.ProviderConfigSpec{Interface: "db"}}
	if err := c.Create(ctx, empty); err == nil || !strings.Contains(err.Error(), "values or valuesFrom must name a source") {
		t.Errorf("a ProviderConfig without a source: %v, want refused", err)
	}
}

// TestLifecycleAvailable, with the webhook as installed: a consumer with
// lifecycle available waits in the wait container while its provider is
// present but not available (a Service without a ready endpoint, a
// Database whose Ready condition is False), the Relationship saying what
// it waits for (ProviderAvailable=False, Ready=False ProviderUnavailable)
// and the wait container too; once available, the values are injected and
// the wait goes. Only the first start waits: a provider unavailable later
// leaves the injection in place.
func TestLifecycleAvailable(t *testing.T) {
	e, ns := startEnvWithWebhook(t, filepath.Join("testdata", "crd"))
	ctx := t.Context()
	c := e.Client
	// The controller runs as the addon (the webhook is registered): it
	// reads Databases once a ClusterRole it aggregates lets it.
	reader := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "databases-available", Labels: map[string]string{relations.LabelAggregateController: "true"}},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"example.com"}, Resources: []string{"databases"}, Verbs: []string{"get", "list", "watch"}}}}
	createAll(t, c, reader)
	t.Cleanup(func() { deleteClusterRoles(t, c, "example.com", "databases", reader.Name) })
	startController(t, e)

	pg := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "pg", Namespace: ns, Annotations: map[string]string{relations.AnnotationProvides: "db"}},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 5432}}}}
	available := &v1alpha1.ConsumerConfig{ObjectMeta: metav1.ObjectMeta{Name: "db-available", Namespace: ns}, Spec: v1alpha1.ConsumerConfigSpec{
		Interface: "db", Lifecycle: v1alpha1.LifecycleAvailable, Keys: []v1alpha1.KeyInjection{{Key: "db", Env: "DB"}}}}
	web := deployment(ns, "web", map[string]string{relations.AnnotationConsumes: "db", relations.AnnotationRelationship: "pg", relations.AnnotationConfig: "db=db-available"})
	createAll(t, c, pg, available, web)
	waitCondition(t, c, ns, "deployment-web-db", v1alpha1.ConditionProviderAvailable, metav1.ConditionFalse, "Unavailable",
		"waiting for Service "+ns+"/pg to have a ready endpoint")
	rel := waitCondition(t, c, ns, "deployment-web-db", v1alpha1.ConditionReady, metav1.ConditionFalse, "ProviderUnavailable", "wait in transit-relations-wait")
	if rel.Status.Revision != 0 || len(rel.Status.History) != 1 || hasInjected(t, c, ns, "web") {
		t.Fatalf("while the provider is unavailable: revision %d, history %d, injected %v; want the revision made, not injected",
			rel.Status.Revision, len(rel.Status.History), hasInjected(t, c, ns, "web"))
	}
	waiting := func(name string) string {
		d := deployment(ns, name, nil)
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, d); err != nil {
			t.Fatal(err)
		}
		for _, ic := range d.Spec.Template.Spec.InitContainers {
			if ic.Name == relations.WaitContainer {
				return envValue(ic, relations.WaitWhatEnv)
			}
		}
		return ""
	}
	if waiting("web") == "" {
		t.Fatal("a consumer whose provider is not available has no wait container")
	}
	// The wait container says it too, from the workload's next change.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d := deployment(ns, "web", nil)
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "web"}, d); err != nil {
			return err
		}
		d.Labels = map[string]string{"touched": "yes"}
		return c.Update(ctx, d)
	})
	if err != nil {
		t.Fatal(err)
	}
	if w := waiting("web"); !strings.Contains(w, "interface db from "+ns+"/pg (waiting for Service "+ns+"/pg to have a ready endpoint") {
		t.Errorf("the wait container of a consumer whose provider is unavailable says %q", w)
	}

	slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "pg-1", Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: "pg"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.7"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)}}}}
	createAll(t, c, slice)
	slice.Endpoints[0].Conditions.Ready = ptr.To(true)
	if err := c.Update(ctx, slice); err != nil {
		t.Fatal(err)
	}
	waitCondition(t, c, ns, "deployment-web-db", v1alpha1.ConditionReady, metav1.ConditionTrue, "Established", "revision 1")
	eventually(t, "the values injected and the wait gone", func() (bool, string) {
		return injectedEnv(t, c, ns, "web")["DB"] == "pg."+ns+".svc.cluster.local" && waiting("web") == "", waiting("web")
	})

	// Unavailable again: what runs stays.
	slice.Endpoints[0].Conditions.Ready = ptr.To(false)
	if err := c.Update(ctx, slice); err != nil {
		t.Fatal(err)
	}
	waitCondition(t, c, ns, "deployment-web-db", v1alpha1.ConditionProviderAvailable, metav1.ConditionFalse, "Unavailable", "ready endpoint")
	rel = waitCondition(t, c, ns, "deployment-web-db", v1alpha1.ConditionReady, metav1.ConditionTrue, "Established", "")
	if rel.Status.Revision != 1 || waiting("web") != "" || injectedEnv(t, c, ns, "web")["DB"] == "" {
		t.Errorf("a provider unavailable after the first start: revision %d, wait %q; want the injection kept", rel.Status.Revision, waiting("web"))
	}

	// A provider of another kind: its Ready condition.
	db := &unstructured.Unstructured{}
	db.SetGroupVersionKind(schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Database"})
	db.SetNamespace(ns)
	db.SetName("orders")
	db.SetAnnotations(map[string]string{relations.AnnotationProvides: "db", relations.AnnotationConfig: "db=orders-config"})
	db.Object["spec"] = map[string]any{"url": "postgres://orders"}
	createAll(t, c, db, &v1alpha1.ProviderConfig{ObjectMeta: metav1.ObjectMeta{Name: "orders-config", Namespace: ns}, Spec: v1alpha1.ProviderConfigSpec{
		Interface: "db", Values: []v1alpha1.ValueSource{{Key: "db", Field: "{.spec.url}"}}}},
		deployment(ns, "shop", map[string]string{relations.AnnotationConsumes: "db", relations.AnnotationRelationship: "Database.example.com/orders", relations.AnnotationConfig: "db=db-available"}))
	setReady := func(status string) {
		t.Helper()
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := c.Get(ctx, client.ObjectKeyFromObject(db), db); err != nil {
				return err
			}
			db.Object["status"] = map[string]any{"conditions": []any{map[string]any{"type": "Ready", "status": status, "reason": "Provisioning"}}}
			return c.Status().Update(ctx, db)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	setReady("False")
	waitCondition(t, c, ns, "deployment-shop-db", v1alpha1.ConditionProviderAvailable, metav1.ConditionFalse, "Unavailable",
		"waiting for Database "+ns+"/orders to be available: Ready=False (Provisioning)")
	if hasInjected(t, c, ns, "shop") || waiting("shop") == "" {
		t.Fatalf("a consumer of a Database not Ready: injected %v, wait %q", hasInjected(t, c, ns, "shop"), waiting("shop"))
	}
	setReady("True")
	waitCondition(t, c, ns, "deployment-shop-db", v1alpha1.ConditionReady, metav1.ConditionTrue, "Established", "")
	eventually(t, "the Database's values injected and the wait gone", func() (bool, string) {
		return injectedEnv(t, c, ns, "shop")["DB"] == "postgres://orders" && waiting("shop") == "", waiting("shop")
	})
}
