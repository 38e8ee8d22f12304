package relations_test

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cloudtransit/transit/controllers/relations"
	"github.com/cloudtransit/transit/controllers/relations/api/v1alpha1"
)

// waitCondition waits until the Relationship ns/name has the condition typ
// with status and reason ("": any), its message holding every one of
// msgs.
func waitCondition(t *testing.T, c client.Client, ns, name, typ string, status metav1.ConditionStatus, reason string, msgs ...string) *v1alpha1.Relationship {
	t.Helper()
	rel := &v1alpha1.Relationship{}
	eventually(t, typ+"="+string(status)+" "+reason, func() (bool, string) {
		if err := c.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: name}, rel); err != nil {
			return false, err.Error()
		}
		cond := meta.FindStatusCondition(rel.Status.Conditions, typ)
		if cond == nil || cond.Status != status || reason != "" && cond.Reason != reason {
			return false, condString(rel)
		}
		for _, m := range msgs {
			if !strings.Contains(cond.Message, m) {
				return false, condString(rel)
			}
		}
		return true, ""
	})
	return rel
}

// takesKey says whether a container of the Deployment takes key of a
// Secret.
func takesKey(d *appsv1.Deployment, key string) bool {
	for _, ctr := range d.Spec.Template.Spec.Containers {
		for _, e := range ctr.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Key == key {
				return true
			}
		}
	}
	return false
}

// TestConsumerKeyNotSupplied: a ConsumerConfig that takes a key the
// provider does not supply is InterfaceMatched=False naming the key and
// the config, not Ready, and no template points at the key; once the
// config takes only what is supplied, the relationship is established.
// Taken again, the key stays out of the template after the team's own
// edit of the workload too (the webhook injects what the revision holds).
func TestConsumerKeyNotSupplied(t *testing.T) {
	e, ns := startEnvWithWebhook(t)
	startController(t, e)
	ctx := t.Context()
	c := e.Client
	cc := &v1alpha1.ConsumerConfig{ObjectMeta: metav1.ObjectMeta{Name: "db-port", Namespace: ns}, Spec: v1alpha1.ConsumerConfigSpec{
		Interface: "db", Keys: []v1alpha1.KeyInjection{{Key: "db", Env: "DB_HOST"}, {Key: "port", Env: "DB_PORT"}}}}
	web := deployment(ns, "web", map[string]string{relations.AnnotationConsumes: "db", relations.AnnotationRelationship: "pg", relations.AnnotationConfig: "db=db-port"})
	createAll(t, c, cc, externalService(ns, "pg", "db1.example.com"), web)
	rel := waitCondition(t, c, ns, "deployment-web-db", v1alpha1.ConditionInterfaceMatched, metav1.ConditionFalse, "MissingKey",
		"key port: ConsumerConfig "+ns+"/db-port takes it, but the provider supplies only db")
	if meta.IsStatusConditionTrue(rel.Status.Conditions, v1alpha1.ConditionReady) {
		t.Errorf("Ready with a key the provider does not supply: %s", condString(rel))
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(web), web); err != nil {
		t.Fatal(err)
	}
	if takesKey(web, "port") {
		t.Errorf("the template takes key port, which no values Secret holds: %+v", web.Spec.Template.Spec.Containers)
	}

	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(cc), cc); err != nil {
			return err
		}
		cc.Spec.Keys = cc.Spec.Keys[:1]
		return c.Update(ctx, cc)
	})
	if err != nil {
		t.Fatal(err)
	}
	waitCondition(t, c, ns, "deployment-web-db", v1alpha1.ConditionReady, metav1.ConditionTrue, "Established")
	eventually(t, "DB_HOST injected", func() (bool, string) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(web), web); err != nil {
			return false, err.Error()
		}
		return takesKey(web, "db") && !takesKey(web, "port"), "not yet"
	})

	// The key taken again, then the team edits its workload: the webhook
	// injects only what the revision's Secret holds, as the controller
	// keeps the template — new pods never point at key port.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(cc), cc); err != nil {
			return err
		}
		cc.Spec.Keys = append(cc.Spec.Keys, v1alpha1.KeyInjection{Key: "port", Env: "DB_PORT"})
		return c.Update(ctx, cc)
	})
	if err != nil {
		t.Fatal(err)
	}
	waitCondition(t, c, ns, "deployment-web-db", v1alpha1.ConditionInterfaceMatched, metav1.ConditionFalse, "MissingKey", "key port")
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(web), web); err != nil {
			return err
		}
		web.Spec.Template.Labels["edited"] = "by-the-team"
		return c.Update(ctx, web)
	})
	if err != nil {
		t.Fatal(err)
	}
	if !takesKey(web, "db") || takesKey(web, "port") {
		t.Errorf("after the team's edit the template takes key port, which no values Secret holds (or lost db): %+v", web.Spec.Template.Spec.Containers)
	}
}

// TestProviderConfigMissing: a ProviderConfig the provider names that
// does not exist is ValuesResolved=False naming it (not a reconcile error
// retried with no word); created, the relationship is established.
func TestProviderConfigMissing(t *testing.T) {
	e, ns := startEnvWithWebhook(t)
	startController(t, e)
	c := e.Client
	pg := externalService(ns, "pg", "db1.example.com")
	pg.Annotations[relations.AnnotationConfig] = "db=pg-config"
	createAll(t, c, pg, deployment(ns, "web", map[string]string{relations.AnnotationConsumes: "db", relations.AnnotationRelationship: "pg"}))
	waitCondition(t, c, ns, "deployment-web-db", v1alpha1.ConditionValuesResolved, metav1.ConditionFalse, "ConfigMissing",
		"ProviderConfig "+ns+"/pg-config does not exist", "Service "+ns+"/pg names it for db")
	createAll(t, c, &v1alpha1.ProviderConfig{ObjectMeta: metav1.ObjectMeta{Name: "pg-config", Namespace: ns}, Spec: v1alpha1.ProviderConfigSpec{
		Interface: "db", Values: []v1alpha1.ValueSource{{Key: "db", Field: "{.spec.externalName}"}}}})
	waitRevision(t, c, types.NamespacedName{Namespace: ns, Name: "deployment-web-db"}, 1, "db1.example.com")
}

// TestInterfaceEnforced: an Interface holds both sides: a required key
// without a value, a value not of its format, a sensitive value from a
// ConfigMap, a consumer taking a key the Interface does not declare and a
// ProviderConfig of another interface are each InterfaceMatched=False
// naming the key or config (a sensitive value never shown), and not
// Ready; what keeps to it is established.
func TestInterfaceEnforced(t *testing.T) {
	e, ns := startEnvWithWebhook(t)
	c := e.Client
	// An Interface is cluster-wide: it goes when the test ends (its
	// controller stopped), before another test on the shared server
	// relates interface db.
	iface := &v1alpha1.Interface{ObjectMeta: metav1.ObjectMeta{Name: "db"}, Spec: v1alpha1.InterfaceSpec{Keys: []v1alpha1.InterfaceKey{
		{Name: "host", Required: true, Format: "host"}, {Name: "port", Format: "port"}, {Name: "password", Required: true, Sensitive: true}}}}
	t.Cleanup(func() { deleteAndWait(t, c, iface) })
	startController(t, e)
	expose := map[string]string{relations.LabelExpose: "true"}
	exposedMeta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: ns, Labels: expose}
	}
	createAll(t, c, iface,
		&corev1.Secret{ObjectMeta: exposedMeta("creds"), StringData: map[string]string{"password": "s3cret-value", "port": "5432"}},
		&corev1.ConfigMap{ObjectMeta: exposedMeta("cfg"), Data: map[string]string{"password": "cm-s3cret", "port": "http"}},
		&v1alpha1.ConsumerConfig{ObjectMeta: metav1.ObjectMeta{Name: "db-all", Namespace: ns}, Spec: v1alpha1.ConsumerConfigSpec{
			Interface: "db", Keys: []v1alpha1.KeyInjection{{Key: "host", Env: "DB_HOST"}, {Key: "port", Env: "DB_PORT"}, {Key: "password", Env: "DB_PASSWORD"}}}},
		&v1alpha1.ConsumerConfig{ObjectMeta: metav1.ObjectMeta{Name: "db-user", Namespace: ns}, Spec: v1alpha1.ConsumerConfigSpec{
			Interface: "db", Keys: []v1alpha1.KeyInjection{{Key: "host", Env: "DB_HOST"}, {Key: "user", Env: "DB_USER"}}}},
	)
	host := v1alpha1.ValueSource{Key: "host", Field: "{.spec.externalName}"}
	secret := func(key string) v1alpha1.ValueSource {
		return v1alpha1.ValueSource{Key: key, SecretKeyRef: &v1alpha1.KeyRef{Name: "creds", Key: key}}
	}
	configMap := func(key string) v1alpha1.ValueSource {
		return v1alpha1.ValueSource{Key: key, ConfigMapKeyRef: &v1alpha1.KeyRef{Name: "cfg", Key: key}}
	}
	for _, p := range []struct {
		name, iface, consumerConfig string
		values                      []v1alpha1.ValueSource
	}{
		{"ok", "db", "db-all", []v1alpha1.ValueSource{host, secret("port"), secret("password")}},
		{"required", "db", "db-all", []v1alpha1.ValueSource{host, secret("port")}},
		{"format", "db", "db-all", []v1alpha1.ValueSource{host, configMap("port"), secret("password")}},
		{"sensitive", "db", "db-all", []v1alpha1.ValueSource{host, secret("port"), configMap("password")}},
		{"undeclared", "db", "db-user", []v1alpha1.ValueSource{host, secret("port"), secret("password")}},
		{"other", "cache", "db-all", []v1alpha1.ValueSource{host, secret("port"), secret("password")}},
	} {
		svc := externalService(ns, p.name, p.name+".example.com")
		svc.Annotations[relations.AnnotationConfig] = "db=" + p.name
		createAll(t, c, svc,
			&v1alpha1.ProviderConfig{ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: ns}, Spec: v1alpha1.ProviderConfigSpec{Interface: p.iface, Values: p.values}},
			deployment(ns, "c-"+p.name, map[string]string{relations.AnnotationConsumes: "db", relations.AnnotationRelationship: p.name, relations.AnnotationConfig: "db=" + p.consumerConfig}))
	}
	waitCondition(t, c, ns, "deployment-c-ok-db", v1alpha1.ConditionReady, metav1.ConditionTrue, "Established")
	for _, want := range []struct{ consumer, reason, msg string }{
		{"required", "MissingKey", "key password: required by Interface db, no value"},
		{"format", "BadFormat", `key port: "http" is not a port (1-65535)`},
		{"sensitive", "SensitiveInConfigMap", "key password: sensitive in Interface db, but ProviderConfig sensitive takes it from ConfigMap cfg: keep it in a Secret"},
		{"undeclared", "MissingKey", "key user: ConsumerConfig " + ns + "/db-user takes it, but Interface db declares no such key"},
		{"other", "InterfaceMismatch", "ProviderConfig " + ns + "/other is for interface cache, but Service " + ns + "/other names it for db"},
	} {
		rel := waitCondition(t, c, ns, "deployment-c-"+want.consumer+"-db", v1alpha1.ConditionInterfaceMatched, metav1.ConditionFalse, want.reason, want.msg)
		ready := meta.FindStatusCondition(rel.Status.Conditions, v1alpha1.ConditionReady)
		if ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != want.reason {
			t.Errorf("%s: Ready %+v, want False, %s", want.consumer, ready, want.reason)
		}
		if rel.Status.Revision != 0 {
			t.Errorf("%s: revision %d of values that break the Interface", want.consumer, rel.Status.Revision)
		}
		for _, cond := range rel.Status.Conditions {
			if strings.Contains(cond.Message, "s3cret") {
				t.Errorf("%s: condition %s shows a sensitive value: %s", want.consumer, cond.Type, cond.Message)
			}
		}
	}
}

// TestPinLacksKey: a pin to a revision made before the provider supplied
// a key the consumer now takes is InterfaceMatched=False naming the
// revision and key, and the template stays at the revision that has it.
func TestPinLacksKey(t *testing.T) {
	e, ns := startEnvWithWebhook(t)
	startController(t, e)
	ctx := t.Context()
	c := e.Client
	pg := externalService(ns, "pg", "db1.example.com")
	pg.Annotations[relations.AnnotationConfig] = "db=pg"
	pc := &v1alpha1.ProviderConfig{ObjectMeta: metav1.ObjectMeta{Name: "pg", Namespace: ns}, Spec: v1alpha1.ProviderConfigSpec{
		Interface: "db", Values: []v1alpha1.ValueSource{{Key: "db", Field: "{.spec.externalName}"}}}}
	cc := &v1alpha1.ConsumerConfig{ObjectMeta: metav1.ObjectMeta{Name: "db-env", Namespace: ns}, Spec: v1alpha1.ConsumerConfigSpec{
		Interface: "db", Keys: []v1alpha1.KeyInjection{{Key: "db", Env: "DB"}}}}
	web := deployment(ns, "web", map[string]string{relations.AnnotationConsumes: "db", relations.AnnotationRelationship: "pg", relations.AnnotationConfig: "db=db-env"})
	createAll(t, c, pg, pc, cc, web)
	relKey := types.NamespacedName{Namespace: ns, Name: "deployment-web-db"}
	waitRevision(t, c, relKey, 1, "db1.example.com")
	update := func(o client.Object, edit func()) {
		t.Helper()
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := c.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
				return err
			}
			edit()
			return c.Update(ctx, o)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// r2 supplies host too, which the consumer then takes.
	update(pc, func() {
		pc.Spec.Values = append(pc.Spec.Values, v1alpha1.ValueSource{Key: "host", Field: "{.spec.externalName}"})
	})
	waitRevision(t, c, relKey, 2, "db1.example.com")
	update(cc, func() { cc.Spec.Keys = append(cc.Spec.Keys, v1alpha1.KeyInjection{Key: "host", Env: "DB_HOST"}) })
	eventually(t, "DB_HOST injected", func() (bool, string) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(web), web); err != nil {
			return false, err.Error()
		}
		return takesKey(web, "host"), "not yet"
	})

	update(web, func() { web.Annotations[relations.AnnotationPin] = "db=1" })
	rel := waitCondition(t, c, ns, relKey.Name, v1alpha1.ConditionInterfaceMatched, metav1.ConditionFalse, "MissingKey",
		"key host: r1 (pinned): ConsumerConfig "+ns+"/db-env takes it, but the provider supplies only db")
	if meta.IsStatusConditionTrue(rel.Status.Conditions, v1alpha1.ConditionReady) || rel.Status.Revision != 2 {
		t.Errorf("pinned to a revision without a key taken: revision %d, %s; want 2, not Ready", rel.Status.Revision, condString(rel))
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(web), web); err != nil {
		t.Fatal(err)
	}
	if got := web.Spec.Template.Annotations[relations.RevisionAnnotationPrefix+relKey.Name]; got != "2" {
		t.Errorf("the template runs revision %s, want 2 (r1 lacks host)", got)
	}
}
