package relations_test

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cloudtransit/transit/controllers/relations"
	"github.com/cloudtransit/transit/controllers/relations/api/v1alpha1"
)

// TestPinAndHistory: the values Secrets of revisions beyond the history
// are deleted once nothing uses them; a pin rolls the consumer back to a kept revision and holds
// it while the provider changes (Pinned), the pinned revision kept beyond
// the history; unpinning resumes the latest; a pin to a revision no
// longer kept holds what runs (Pinned=False). Pruning reads a
// relationship's values Secrets from the controller's cache: a list of
// the namespace's Secrets, which the API server answers by scanning them
// all, once per consumer of a change, made a change at 1,000 consumers
// 50 % slower once the history was full.
func TestPinAndHistory(t *testing.T) {
	e, ns := startEnv(t)
	cfg := rest.CopyConfig(asAddon(t, e))
	var lists atomic.Int32
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(req *http.Request) (*http.Response, error) {
			if req.Method == http.MethodGet && req.URL.Path == "/api/v1/namespaces/"+ns+"/secrets" {
				lists.Add(1)
			}
			return rt.RoundTrip(req)
		})
	})
	startControllerAs(t, e, cfg, relations.Options{History: 2})
	ctx := t.Context()
	c := e.Client
	pg := externalService(ns, "pg", "db1.example.com")
	web := deployment(ns, "web", map[string]string{relations.AnnotationConsumes: "db", relations.AnnotationRelationship: "pg"})
	createAll(t, c, pg, web)
	relKey := types.NamespacedName{Namespace: ns, Name: "deployment-web-db"}
	setAnnotation := func(key, value string) {
		t.Helper()
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "web"}, web); err != nil {
				return err
			}
			if value == "" {
				delete(web.Annotations, key)
			} else {
				web.Annotations[key] = value
			}
			return c.Update(ctx, web)
		}); err != nil {
			t.Fatal(err)
		}
	}
	waitRevision(t, c, relKey, 1, "db1.example.com")
	// Each revision's template seen by the Deployment controller, so that
	// each has its ReplicaSet (a rollback target): a template replaced
	// before the controller syncs gets none, and its Secret rightly goes.
	waitObserved(t, c, ns, "web", waitTemplate(t, c, ns, "web", "deployment-web-db-r1", "1"))
	for i, host := range []string{"db2.example.com", "db3.example.com", "db4.example.com"} {
		setHost(t, c, ns, "pg", host)
		waitRevision(t, c, relKey, int64(i+2), host)
		r := strconv.Itoa(i + 2)
		waitObserved(t, c, ns, "web", waitTemplate(t, c, ns, "web", "deployment-web-db-r"+r, r))
	}
	kept := func(want ...string) {
		t.Helper()
		eventually(t, "only "+strings.Join(want, ", ")+" kept", func() (bool, string) {
			var secrets corev1.SecretList
			if err := c.List(ctx, &secrets, client.InNamespace(ns)); err != nil {
				return false, err.Error()
			}
			var names []string
			for _, s := range secrets.Items {
				names = append(names, strings.TrimPrefix(s.Name, "deployment-web-db-"))
			}
			return slices.Equal(names, want), strings.Join(names, ",")
		})
	}
	// r1 and r2, beyond the history, stay while the Deployment can roll
	// back to them (their ReplicaSets); they go at the next prune once
	// those are gone.
	kept("r1", "r2", "r3", "r4")
	dropUsers(t, c, ns, "web", "deployment-web-db-r1")
	dropUsers(t, c, ns, "web", "deployment-web-db-r2")

	// Pinned to r3: rolled back, held while the provider changes.
	setAnnotation(relations.AnnotationPin, "db=3")
	waitTemplate(t, c, ns, "web", "deployment-web-db-r3", "3")
	setHost(t, c, ns, "pg", "db5.example.com")
	rel := &v1alpha1.Relationship{}
	eventually(t, "r5 made while held at r3", func() (bool, string) {
		if err := c.Get(ctx, relKey, rel); err != nil {
			return false, err.Error()
		}
		return rel.Status.History[0].Revision == 5 && rel.Status.Revision == 3 &&
			meta.IsStatusConditionTrue(rel.Status.Conditions, v1alpha1.ConditionPinned), condString(rel)
	})
	waitTemplate(t, c, ns, "web", "deployment-web-db-r3", "3")
	kept("r3", "r4", "r5")

	// Unpinned: the latest runs.
	setAnnotation(relations.AnnotationPin, "")
	waitTemplate(t, c, ns, "web", "deployment-web-db-r5", "5")

	// A pin to a revision no longer kept holds what runs.
	setAnnotation(relations.AnnotationPin, "db=1")
	eventually(t, "Pinned=False NotKept", func() (bool, string) {
		if err := c.Get(ctx, relKey, rel); err != nil {
			return false, err.Error()
		}
		cond := meta.FindStatusCondition(rel.Status.Conditions, v1alpha1.ConditionPinned)
		return cond != nil && cond.Reason == "NotKept" && rel.Status.Revision == 5, condString(rel)
	})
	waitTemplate(t, c, ns, "web", "deployment-web-db-r5", "5")
	if n := lists.Load(); n > 0 {
		t.Errorf("the controller listed the namespace's Secrets %d times", n)
	}
}

// roundTripper is a function as an http.RoundTripper.
type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// TestCleanupBehindTheChange: a provider change reaches the consumer's
// template while the cleanup of the revision leaving the history cannot
// run (listing what uses it fails); that Secret goes once it can.
func TestCleanupBehindTheChange(t *testing.T) {
	e, ns := startPlainEnv(t)
	c := e.Client
	var failing atomic.Bool
	failing.Store(true)
	faulty := *e
	faulty.Config = rest.CopyConfig(e.Config)
	faulty.Config.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(req *http.Request) (*http.Response, error) {
			if failing.Load() && req.Method == http.MethodGet && req.URL.Path == "/api/v1/namespaces/"+ns+"/pods" {
				body := `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"InternalError","code":500,"message":"injected"}`
				return &http.Response{StatusCode: http.StatusInternalServerError, Header: http.Header{"Content-Type": {"application/json"}},
					Body: io.NopCloser(strings.NewReader(body)), Request: req}, nil
			}
			return rt.RoundTrip(req)
		})
	})
	startController(t, &faulty, relations.Options{History: 1})
	createAll(t, c, externalService(ns, "pg", "db1.example.com"),
		deployment(ns, "web", map[string]string{relations.AnnotationConsumes: "db", relations.AnnotationRelationship: "pg"}))
	waitTemplate(t, c, ns, "web", "deployment-web-db-r1", "1")
	setHost(t, c, ns, "pg", "db2.example.com")
	waitTemplate(t, c, ns, "web", "deployment-web-db-r2", "2")
	old := &corev1.Secret{}
	if err := c.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: "deployment-web-db-r1"}, old); err != nil {
		t.Fatalf("r1, beyond the history, went while what uses it could not be listed: %v", err)
	}
	failing.Store(false)
	eventually(t, "r1 deleted once the cleanup can run", func() (bool, string) {
		err := c.Get(t.Context(), client.ObjectKeyFromObject(old), old)
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}
