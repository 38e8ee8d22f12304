package relations_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cloudtransit/transit/controllers/relations"
	"github.com/cloudtransit/transit/controllers/relations/api/v1alpha1"
	"github.com/cloudtransit/transit/controllers/testenv"
)

// TestProviderKinds: a workload provides its Service's name; an exposed
// Secret provides through a ProviderConfig, and a change of it is a new
// revision; two objects of one name that both provide an interface are
// ambiguous, both named, and the template stays as it is.
func TestProviderKinds(t *testing.T) {
	e, ns := startEnv(t)
	startController(t, e)
	ctx := t.Context()
	c := e.Client

	api := deployment(ns, "api", map[string]string{relations.AnnotationProvides: "api"})
	creds := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: ns,
		Labels:      map[string]string{relations.LabelExpose: "true"},
		Annotations: map[string]string{relations.AnnotationProvides: "creds", relations.AnnotationConfig: "creds=creds"}},
		Data: map[string][]byte{"password": []byte("s3cret")}}
	pc := &v1alpha1.ProviderConfig{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: ns}, Spec: v1alpha1.ProviderConfigSpec{
		Interface: "creds", Values: []v1alpha1.ValueSource{{Key: "password", SecretKeyRef: &v1alpha1.KeyRef{Name: "creds", Key: "password"}}}}}
	cc := &v1alpha1.ConsumerConfig{ObjectMeta: metav1.ObjectMeta{Name: "creds-env", Namespace: ns}, Spec: v1alpha1.ConsumerConfigSpec{
		Interface: "creds", Keys: []v1alpha1.KeyInjection{{Key: "password", Env: "DB_PASSWORD"}}}}
	web := deployment(ns, "web", map[string]string{relations.AnnotationConsumes: "api,creds", relations.AnnotationRelationship: "api,creds",
		relations.AnnotationConfig: "creds=creds-env"})
	createAll(t, c, api, creds, pc, cc, web)
	env := func() map[string]string {
		d := deployment(ns, "web", nil)
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "web"}, d); err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, v := range d.Spec.Template.Spec.Containers[0].Env {
			if v.ValueFrom != nil && v.ValueFrom.SecretKeyRef != nil {
				s := &corev1.Secret{}
				if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: v.ValueFrom.SecretKeyRef.Name}, s); err == nil {
					out[v.Name] = string(s.Data[v.ValueFrom.SecretKeyRef.Key])
				}
			}
		}
		return out
	}
	eventually(t, "both relationships injected", func() (bool, string) {
		got := env()
		return got["API"] == "api."+ns+".svc.cluster.local" && got["DB_PASSWORD"] == "s3cret", strings.Join(mapKeys(got), ",")
	})
	creds.Data["password"] = []byte("rotated")
	if err := c.Update(ctx, creds); err != nil {
		t.Fatal(err)
	}
	waitRevisionOf(t, c, ns, "deployment-web-creds", 2)
	eventually(t, "the rotated password injected", func() (bool, string) { return env()["DB_PASSWORD"] == "rotated", env()["DB_PASSWORD"] })

	// Two providers of one name and interface.
	createAll(t, c,
		externalService(ns, "dup", "a.example.com"),
		deployment(ns, "dup", map[string]string{relations.AnnotationProvides: "db"}),
		deployment(ns, "amb", map[string]string{relations.AnnotationConsumes: "db", relations.AnnotationRelationship: "dup"}),
	)
	rel := &v1alpha1.Relationship{}
	eventually(t, "ProviderFound=False Ambiguous", func() (bool, string) {
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "deployment-amb-db"}, rel); err != nil {
			return false, err.Error()
		}
		cond := meta.FindStatusCondition(rel.Status.Conditions, v1alpha1.ConditionProviderFound)
		return cond != nil && cond.Reason == "Ambiguous" && strings.Contains(cond.Message, "Service "+ns+"/dup") &&
			strings.Contains(cond.Message, "Deployment "+ns+"/dup"), condString(rel)
	})
	// Named with its kind, one of them is the provider.
	createAll(t, c, deployment(ns, "picked", map[string]string{relations.AnnotationConsumes: "db", relations.AnnotationRelationship: "Deployment.apps/dup"}))
	eventually(t, "ProviderFound=True for Deployment.apps/dup", func() (bool, string) {
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "deployment-picked-db"}, rel); err != nil {
			return false, err.Error()
		}
		cond := meta.FindStatusCondition(rel.Status.Conditions, v1alpha1.ConditionProviderFound)
		return cond != nil && cond.Status == metav1.ConditionTrue && cond.Message == "Deployment "+ns+"/dup", condString(rel)
	})
}

// waitRevisionOf waits until the Relationship is at revision.
func waitRevisionOf(t *testing.T, c client.Client, ns, name string, revision int64) {
	t.Helper()
	rel := &v1alpha1.Relationship{}
	eventually(t, name+" at revision "+strconvI(revision), func() (bool, string) {
		if err := c.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: name}, rel); err != nil {
			return false, err.Error()
		}
		return rel.Status.Revision == revision, condString(rel)
	})
}

// TestProvisionedService: a provider of a kind of its own (a Database
// whose status names its binding Secret, as the Service Binding
// specification's provisioned services do) is named Kind.group/name. The
// controller runs with the addon's own RBAC: it reads the kind once a
// ClusterRole labelled servicebinding.io/controller grants it, and says
// which label to set for a kind nothing grants; changes of the provider
// (a new binding Secret) and of the binding's entries are new revisions.
// protect needs update, which only a relations.transit.io/controller role
// grants: without it, an event says so.
func TestProvisionedService(t *testing.T) {
	e, ns := startEnvWithKinds(t)
	ctx := t.Context()
	c := e.Client
	as := asAddon(t, e)
	reader := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "databases-binding", Labels: map[string]string{relations.LabelAggregateController: "true"}},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"example.com"}, Resources: []string{"databases"}, Verbs: []string{"get", "list", "watch"}}}}
	createAll(t, c, reader)
	// The ClusterRoles (and what the controller manager aggregated of
	// them into the addon's) go when the test ends: the server is shared.
	t.Cleanup(func() { deleteClusterRoles(t, c, "example.com", "databases", "databases-binding", "databases-protect") })
	startControllerAs(t, e, as)

	binding := func(name, user string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{relations.LabelExpose: "true"}},
			Data: map[string][]byte{"username": []byte(user), "password": []byte("pw")}}
	}
	pg := &unstructured.Unstructured{}
	pg.SetGroupVersionKind(schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Database"})
	pg.SetNamespace(ns)
	pg.SetName("pg")
	pg.SetAnnotations(map[string]string{relations.AnnotationProvides: "db", relations.AnnotationConfig: "db=pg-binding", relations.AnnotationProtect: "true"})
	pc := &v1alpha1.ProviderConfig{ObjectMeta: metav1.ObjectMeta{Name: "pg-binding", Namespace: ns}, Spec: v1alpha1.ProviderConfigSpec{
		Interface: "db", Values: []v1alpha1.ValueSource{{Key: "user", BindingKey: "username"}}}}
	cc := &v1alpha1.ConsumerConfig{ObjectMeta: metav1.ObjectMeta{Name: "db-env", Namespace: ns}, Spec: v1alpha1.ConsumerConfigSpec{
		Interface: "db", Keys: []v1alpha1.KeyInjection{{Key: "user", Env: "DB_USER"}}}}
	web := deployment(ns, "web", map[string]string{relations.AnnotationConsumes: "db", relations.AnnotationRelationship: "Database.example.com/pg",
		relations.AnnotationConfig: "db=db-env"})
	queued := deployment(ns, "queued", map[string]string{relations.AnnotationConsumes: "jobs", relations.AnnotationRelationship: "Queue.example.com/jobs"})
	nokind := deployment(ns, "nokind", map[string]string{relations.AnnotationConsumes: "db", relations.AnnotationRelationship: "Database/pg"})
	createAll(t, c, binding("pg-creds", "admin"), binding("pg-creds-2", "owner"), pc, cc, pg, web, queued, nokind)
	pg.Object["status"] = map[string]any{"binding": map[string]any{"name": "pg-creds"}}
	if err := c.Status().Update(ctx, pg); err != nil {
		t.Fatal(err)
	}

	waitRevisionOf(t, c, ns, "deployment-web-db", 1)
	user := func() string {
		d := deployment(ns, "web", nil)
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "web"}, d); err != nil {
			t.Fatal(err)
		}
		for _, v := range d.Spec.Template.Spec.Containers[0].Env {
			if v.Name == "DB_USER" && v.ValueFrom != nil && v.ValueFrom.SecretKeyRef != nil {
				s := &corev1.Secret{}
				if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: v.ValueFrom.SecretKeyRef.Name}, s); err == nil {
					return string(s.Data[v.ValueFrom.SecretKeyRef.Key])
				}
			}
		}
		return ""
	}
	eventually(t, "the binding's username injected", func() (bool, string) { return user() == "admin", user() })

	// The provider names another binding Secret: heard through the watch
	// of its kind, started at first use.
	if err := c.Get(ctx, client.ObjectKeyFromObject(pg), pg); err != nil {
		t.Fatal(err)
	}
	pg.Object["status"] = map[string]any{"binding": map[string]any{"name": "pg-creds-2"}}
	if err := c.Status().Update(ctx, pg); err != nil {
		t.Fatal(err)
	}
	waitRevisionOf(t, c, ns, "deployment-web-db", 2)
	eventually(t, "the new binding's username injected", func() (bool, string) { return user() == "owner", user() })

	notFound := func(rel, want string) {
		r := &v1alpha1.Relationship{}
		eventually(t, rel+" ProviderFound=False naming why", func() (bool, string) {
			if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: rel}, r); err != nil {
				return false, err.Error()
			}
			cond := meta.FindStatusCondition(r.Status.Conditions, v1alpha1.ConditionProviderFound)
			return cond != nil && cond.Status == metav1.ConditionFalse && strings.Contains(cond.Message, want), condString(r)
		})
	}
	notFound("deployment-queued-jobs", "the controller may not get queues.example.com: label a ClusterRole granting get, list and watch on queues.example.com servicebinding.io/controller=true")
	notFound("deployment-nokind-db", "the API server serves no kind Database (give its group: Kind.group)")

	// protect: reading is granted, updating is not.
	eventually(t, "the ProtectForbidden event", func() (bool, string) {
		return hasEvent(ctx, c, ns, "pg", "ProtectForbidden", "label a ClusterRole granting update on it relations.transit.io/controller=true"), ""
	})
	createAll(t, c, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "databases-protect", Labels: map[string]string{relations.LabelAggregateRelations: "true"}},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"example.com"}, Resources: []string{"databases"}, Verbs: []string{"update"}}}})
	eventually(t, "the protect finalizer, once update is granted and the provider changes", func() (bool, string) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(pg), pg); err != nil {
			return false, err.Error()
		}
		if slices.Contains(pg.GetFinalizers(), relations.ProtectFinalizer) {
			return true, ""
		}
		// The protect controller waits for a change, not a timer: touch it.
		pg.SetLabels(map[string]string{"touched": time.Now().Format("150405.000")})
		_ = c.Update(ctx, pg)
		time.Sleep(time.Second)
		return false, strings.Join(pg.GetFinalizers(), ",")
	})
}

// deleteClusterRoles deletes the ClusterRoles names and waits until no
// ClusterRole grants anything on group's resource any more: the
// controller manager has taken their rules out of the roles that
// aggregated them.
func deleteClusterRoles(t *testing.T, c client.Client, group, resource string, names ...string) {
	t.Helper()
	for _, name := range names {
		deleteAndWait(t, c, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}})
	}
	eventually(t, "no ClusterRole granting "+resource+"."+group, func() (bool, string) {
		var roles rbacv1.ClusterRoleList
		if err := c.List(context.Background(), &roles); err != nil {
			return false, err.Error()
		}
		for _, r := range roles.Items {
			for _, rule := range r.Rules {
				if slices.Contains(rule.APIGroups, group) && slices.Contains(rule.Resources, resource) {
					return false, "ClusterRole " + r.Name + " does"
				}
			}
		}
		return true, ""
	})
}

// asAddon installs the addon's RBAC and admission policy (addonRBAC) and
// returns a configuration with the controller's identity. The tests that
// share a server share them: the first installs them; a test that adds to
// them (a ClusterRole they aggregate) takes it out again before it ends.
func asAddon(t testing.TB, e *testenv.Env) *rest.Config {
	t.Helper()
	for _, o := range addonRBAC(t) {
		if err := e.Client.Create(t.Context(), o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	as := rest.CopyConfig(e.Config)
	as.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:transit-relations:transit-relations"}
	return as
}

// addonRBAC are the namespace, service account, roles and admission
// policy of the addon manifest transit installs: the identity the
// controller runs as and what it may do.
func addonRBAC(t testing.TB) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "platforms", "kubernetes", "addons", "relations.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// The template's values do not matter to these kinds.
	data = regexp.MustCompile(`\{\{[^}]*\}\}`).ReplaceAll(data, []byte("1"))
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		switch u.GetKind() {
		case "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
			"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
			out = append(out, u)
		}
	}
	return out
}
