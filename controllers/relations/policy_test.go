package relations_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cloudtransit/transit/controllers/relations"
	"github.com/cloudtransit/transit/controllers/relations/api/v1alpha1"
	relationsconfig "github.com/cloudtransit/transit/controllers/relations/config"
	"github.com/cloudtransit/transit/controllers/testenv"
)

// installPolicy creates the annotations' ValidatingAdmissionPolicy and its
// binding, and waits until the API server enforces it (probed in
// namespace ns). The API server is shared: when the test ends, the policy
// goes, and the test waits until it is no longer enforced.
func installPolicy(t *testing.T, c client.Client, ns string) {
	t.Helper()
	testenv.CreateYAML(t, c, relationsconfig.Policy)
	bad := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns, Annotations: map[string]string{relations.AnnotationProvides: "Bad"}}}
	t.Cleanup(func() {
		testenv.DeleteYAML(t, c, relationsconfig.Policy)
		eventually(t, "the policy no longer enforced", func() (bool, string) {
			err := c.Create(context.Background(), bad.DeepCopy(), client.DryRunAll)
			return err == nil, fmt.Sprint(err)
		})
	})
	eventually(t, "the policy enforced", func() (bool, string) {
		err := c.Create(t.Context(), bad.DeepCopy(), client.DryRunAll)
		return err != nil, "a malformed annotation was admitted"
	})
}

// TestAnnotationPolicy: the admission policy refuses exactly what the
// controller's parser refuses, naming the annotation and the entry.
func TestAnnotationPolicy(t *testing.T) {
	e, ns := startPlainEnv(t)
	c := e.Client
	p, cons := relations.AnnotationProvides, relations.AnnotationConsumes
	rel, cfg, allow, protect, pin := relations.AnnotationRelationship, relations.AnnotationConfig, relations.AnnotationAllowNamespaces, relations.AnnotationProtect, relations.AnnotationPin
	// Written before the policy: a malformed annotation.
	stale := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "stale", Namespace: ns, Annotations: map[string]string{p: "Bad"}}}
	if err := c.Create(t.Context(), stale); err != nil {
		t.Fatal(err)
	}
	installPolicy(t, c, ns)
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		consumer bool
		ann      map[string]string
		entry    string // what the refusal names; "" when admitted
	}{
		{"provider", false, map[string]string{p: "db, cache"}, ""},
		{"provider with config", false, map[string]string{p: "db", cfg: "db = pg-config"}, ""},
		{"interface not a label", false, map[string]string{p: "db,Cache"}, `relations.transit.io/provides: entry "Cache"`},
		{"empty entry", false, map[string]string{p: "db,"}, `relations.transit.io/provides: entry ""`},
		{"interface twice", false, map[string]string{p: "db,db"}, `relations.transit.io/provides: entry "db"`},
		{"config of another interface", false, map[string]string{p: "db", cfg: "cache=pg"}, `relations.transit.io/config: entry "cache=pg"`},
		{"config without a name", false, map[string]string{p: "db", cfg: "db="}, `relations.transit.io/config: entry "db="`},
		{"config name not DNS", false, map[string]string{p: "db", cfg: "db=a..b"}, `relations.transit.io/config: entry "db=a..b"`},
		{"allow all", false, map[string]string{p: "db", allow: " * "}, ""},
		{"allow namespaces", false, map[string]string{p: "db", allow: "team-a,team-b"}, ""},
		{"allow with a star inside", false, map[string]string{p: "db", allow: "team-a,*"}, `relations.transit.io/allow-namespaces: entry "*"`},
		{"protect", false, map[string]string{p: "db", protect: "true"}, ""},
		{"protect not a boolean", false, map[string]string{p: "db", protect: "yes"}, `relations.transit.io/protect: "yes"`},
		{"consumer", true, map[string]string{cons: "db", rel: "pg,shared/cache"}, ""},
		{"consumer without relationship", true, map[string]string{cons: "db"}, "relations.transit.io/relationship: missing"},
		{"relationship by kind", true, map[string]string{cons: "db", rel: "Database.postgres.example.com/pg, shared/Service/cache, Deployment/api"}, ""},
		{"relationship with a lowercase kind", true, map[string]string{cons: "db", rel: "a/b/c"}, `relations.transit.io/relationship: entry "a/b/c"`},
		{"relationship with three slashes", true, map[string]string{cons: "db", rel: "a/B/c/d"}, `relations.transit.io/relationship: entry "a/B/c/d"`},
		{"relationship kind not alphanumeric", true, map[string]string{cons: "db", rel: "Data_base/pg"}, `relations.transit.io/relationship: entry "Data_base/pg"`},
		{"relationship group not DNS", true, map[string]string{cons: "db", rel: "Database.Example.com/pg"}, `relations.transit.io/relationship: entry "Database.Example.com/pg"`},
		{"relationship namespace not a label", true, map[string]string{cons: "db", rel: "shared.io/pg"}, `relations.transit.io/relationship: entry "shared.io/pg"`},
		{"relationship named twice", true, map[string]string{cons: "db", rel: "pg,pg"}, `relations.transit.io/relationship: entry "pg"`},
		{"pin", true, map[string]string{cons: "db", rel: "pg", pin: "db=3"}, ""},
		{"pin with a leading zero", true, map[string]string{cons: "db", rel: "pg", pin: "db=03"}, ""},
		{"pin zero", true, map[string]string{cons: "db", rel: "pg", pin: "db=0"}, `relations.transit.io/pin: entry "db=0"`},
		{"pin of another interface", true, map[string]string{cons: "db", rel: "pg", pin: "cache=1"}, `relations.transit.io/pin: entry "cache=1"`},
		{"pin not a number", true, map[string]string{cons: "db", rel: "pg", pin: "db=latest"}, `relations.transit.io/pin: entry "db=latest"`},
	} {
		var obj client.Object
		var parseErr error
		if tc.consumer {
			obj = deployment(ns, "probe", tc.ann)
			_, parseErr = relations.ParseConsumer(ns, tc.ann)
		} else {
			obj = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns, Annotations: tc.ann}}
			_, parseErr = relations.ParseProvider(tc.ann)
		}
		err := c.Create(ctx, obj, client.DryRunAll)
		switch {
		case (parseErr == nil) != (tc.entry == ""):
			t.Errorf("%s: the parser says %v; the table says refused=%v", tc.name, parseErr, tc.entry != "")
		case tc.entry == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.entry != "" && err == nil:
			t.Errorf("%s: admitted; the parser refuses it: %v", tc.name, parseErr)
		case tc.entry != "" && !strings.Contains(err.Error(), tc.entry):
			t.Errorf("%s: refused without naming %s: %v", tc.name, tc.entry, err)
		}
	}
	// Objects without the annotations are never evaluated.
	if err := c.Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: ns}, Spec: deployment(ns, "plain", nil).Spec}, client.DryRunAll); err != nil {
		t.Errorf("a workload without annotations: %v", err)
	}

	// An update that leaves the annotations users write as they were is
	// not evaluated (the controller's patches, its own annotations, a
	// scale): what an earlier write left is never refused for it.
	stale.Labels = map[string]string{"team": "data"}
	stale.Annotations[relations.Prefix+"applied"] = "h1"
	if err := c.Update(ctx, stale, client.DryRunAll); err != nil {
		t.Errorf("an update that leaves the annotations as they were: %v", err)
	}
	stale.Annotations[p] = "Bad,Worse"
	if err := c.Update(ctx, stale, client.DryRunAll); err == nil || !strings.Contains(err.Error(), `relations.transit.io/provides: entry "Bad"`) {
		t.Errorf("an update that changes a malformed annotation: %v, want refused", err)
	}
	// Changing (or removing) any one of them is evaluated.
	valid := map[string]string{p: "api", cons: "db", rel: "pg", cfg: "db=pg-config", allow: "team-a", protect: "true", pin: "db=1"}
	both := deployment(ns, "both", valid)
	if err := c.Create(ctx, both); err != nil {
		t.Fatal(err)
	}
	for key, bad := range map[string]string{p: "Bad", cons: "db,db", rel: "a/b/c", cfg: "db=", allow: "team-a,*", protect: "yes", pin: "db=0"} {
		for _, value := range []string{bad, ""} {
			if value == "" && key != rel {
				continue // removed: only the relationship of a consumer is required
			}
			changed := both.DeepCopy()
			if value == "" {
				delete(changed.Annotations, key)
			} else {
				changed.Annotations[key] = value
			}
			if err := c.Update(ctx, changed, client.DryRunAll); err == nil || !strings.Contains(err.Error(), key) {
				t.Errorf("%s changed to %q: %v, want refused naming it", key, value, err)
			}
		}
	}
}

// startPlainEnv is the API server with the CRDs, no controller manager
// (shared as startEnv's), and a new namespace.
func startPlainEnv(t testing.TB) (*testenv.Env, string) {
	e := testenv.Shared(t, "plain", testenv.Options{
		CRDDirs:     []string{filepath.Join("config", "crd")},
		AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme},
	})
	return e, e.Namespace(t)
}
