package v1alpha1_test

import (
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cloudtransit/transit/controllers/relations/api/v1alpha1"
	"github.com/cloudtransit/transit/controllers/testenv"
)

// TestCRDValidation: the generated CRDs, served by the real API server,
// refuse what the controller could not act on, naming the field and the
// rule, and default what a user may leave out.
func TestCRDValidation(t *testing.T) {
	e := testenv.Start(t, testenv.Options{
		CRDDirs:     []string{filepath.Join("..", "..", "config", "crd")},
		AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme},
	})
	ctx := t.Context()
	meta := func(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: name, Namespace: "default"} }

	refused := []struct {
		name string
		obj  client.Object
		want string // in the API server's message
	}{
		{"a value with two sources", &v1alpha1.ProviderConfig{ObjectMeta: meta("two"), Spec: v1alpha1.ProviderConfigSpec{
			Interface: "db", Values: []v1alpha1.ValueSource{{Key: "host", Field: "{.spec.externalName}", BindingKey: "host"}}}},
			"spec.values[0]: Invalid value: \"object\": exactly one of field, secretKeyRef, configMapKeyRef, bindingKey and objectFieldRef"},
		{"a value without a source", &v1alpha1.ProviderConfig{ObjectMeta: meta("none"), Spec: v1alpha1.ProviderConfigSpec{
			Interface: "db", Values: []v1alpha1.ValueSource{{Key: "host"}}}},
			"exactly one of field, secretKeyRef, configMapKeyRef, bindingKey and objectFieldRef"},
		{"an interface name that is no DNS label", &v1alpha1.ProviderConfig{ObjectMeta: meta("bad-iface"), Spec: v1alpha1.ProviderConfigSpec{
			Interface: "DB_1", Values: []v1alpha1.ValueSource{{Key: "host", Field: "{.spec.externalName}"}}}},
			"spec.interface: Invalid value: \"DB_1\""},
		{"InPlace with an env key", &v1alpha1.ConsumerConfig{ObjectMeta: meta("inplace"), Spec: v1alpha1.ConsumerConfigSpec{
			Interface: "db", Update: v1alpha1.UpdateInPlace, Keys: []v1alpha1.KeyInjection{{Key: "host", Env: "DB_HOST"}}}},
			"update InPlace needs every key injected as a file"},
		{"a key both env and file", &v1alpha1.ConsumerConfig{ObjectMeta: meta("both"), Spec: v1alpha1.ConsumerConfigSpec{
			Interface: "db", Keys: []v1alpha1.KeyInjection{{Key: "host", Env: "DB_HOST", File: "/etc/db/host"}}}},
			"spec.keys[0]: Invalid value: \"object\": exactly one of env, file and binding"},
		{"a relative file", &v1alpha1.ConsumerConfig{ObjectMeta: meta("relative"), Spec: v1alpha1.ConsumerConfigSpec{
			Interface: "db", Keys: []v1alpha1.KeyInjection{{Key: "host", File: "etc/db/host"}}}},
			"spec.keys[0].file"},
		{"an env name with a dash", &v1alpha1.ConsumerConfig{ObjectMeta: meta("dash"), Spec: v1alpha1.ConsumerConfigSpec{
			Interface: "db", Keys: []v1alpha1.KeyInjection{{Key: "host", Env: "DB-HOST"}}}},
			"spec.keys[0].env"},
		{"an unknown lifecycle", &v1alpha1.ConsumerConfig{ObjectMeta: meta("lifecycle"), Spec: v1alpha1.ConsumerConfigSpec{
			Interface: "db", Lifecycle: "after", Keys: []v1alpha1.KeyInjection{{Key: "host", Env: "DB_HOST"}}}},
			"spec.lifecycle: Unsupported value: \"after\""},
		{"an interface key format nobody checks", &v1alpha1.Interface{ObjectMeta: metav1.ObjectMeta{Name: "db"}, Spec: v1alpha1.InterfaceSpec{
			Keys: []v1alpha1.InterfaceKey{{Name: "host", Format: "email"}}}},
			"spec.keys[0].format: Unsupported value: \"email\""},
		{"two keys of one name", &v1alpha1.Interface{ObjectMeta: metav1.ObjectMeta{Name: "dup"}, Spec: v1alpha1.InterfaceSpec{
			Keys: []v1alpha1.InterfaceKey{{Name: "host"}, {Name: "host"}}}},
			"spec.keys[1]: Duplicate value"},
	}
	for _, c := range refused {
		err := e.Client.Create(ctx, c.obj)
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: create gave %v, want Invalid naming %q", c.name, err, c.want)
		}
	}

	// What passes, with its defaults.
	cc := &v1alpha1.ConsumerConfig{ObjectMeta: meta("db-env"), Spec: v1alpha1.ConsumerConfigSpec{
		Interface: "db", Keys: []v1alpha1.KeyInjection{{Key: "host", Env: "DB_HOST"}, {Key: "password", File: "/etc/db/password"}}}}
	if err := e.Client.Create(ctx, cc); err != nil {
		t.Fatal(err)
	}
	if cc.Spec.Lifecycle != v1alpha1.LifecycleStart || cc.Spec.Update != v1alpha1.UpdateRollout {
		t.Errorf("defaults: lifecycle %q update %q, want start and Rollout", cc.Spec.Lifecycle, cc.Spec.Update)
	}
	files := &v1alpha1.ConsumerConfig{ObjectMeta: meta("db-files"), Spec: v1alpha1.ConsumerConfigSpec{
		Interface: "db", Update: v1alpha1.UpdateInPlace, Keys: []v1alpha1.KeyInjection{{Key: "host", File: "/etc/db/host"}}}}
	pc := &v1alpha1.ProviderConfig{ObjectMeta: meta("db"), Spec: v1alpha1.ProviderConfigSpec{Interface: "db", Values: []v1alpha1.ValueSource{
		{Key: "host", Field: "{.spec.externalName}"},
		{Key: "password", SecretKeyRef: &v1alpha1.KeyRef{Name: "db", Key: "password"}},
	}}}
	iface := &v1alpha1.Interface{ObjectMeta: metav1.ObjectMeta{Name: "db"}, Spec: v1alpha1.InterfaceSpec{Keys: []v1alpha1.InterfaceKey{
		{Name: "host", Required: true, Format: "host"}, {Name: "password", Sensitive: true}}}}
	for _, o := range []client.Object{files, pc, iface} {
		if err := e.Client.Create(ctx, o); err != nil {
			t.Errorf("create %s: %v", o.GetName(), err)
		}
	}

	// The Relationship's status is a subresource: a spec write keeps it,
	// a status write sets it.
	rel := &v1alpha1.Relationship{ObjectMeta: meta("web-db"), Spec: v1alpha1.RelationshipSpec{
		Consumer: v1alpha1.ObjectRef{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"},
		Provider: v1alpha1.ObjectRef{Name: "db"}, Interface: "db"}}
	if err := e.Client.Create(ctx, rel); err != nil {
		t.Fatal(err)
	}
	rel.Status.Revision = 3
	if err := e.Client.Update(ctx, rel); err != nil {
		t.Fatal(err)
	}
	if rel.Status.Revision != 0 {
		t.Errorf("a spec update wrote status.revision %d", rel.Status.Revision)
	}
	rel.Status.Revision = 3
	if err := e.Client.Status().Update(ctx, rel); err != nil || rel.Status.Revision != 3 {
		t.Errorf("status update: %v, revision %d", err, rel.Status.Revision)
	}
}
