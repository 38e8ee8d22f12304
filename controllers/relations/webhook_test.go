package relations_test

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cloudtransit/transit/controllers/relations"
)

// TestWebhook, with the real API server calling the webhook over TLS and
// the controller acting as the addon's service account: a consumer
// created before its provider is held by the wait container; malformed
// annotations are refused, naming the entry; once established, the
// controller's rollout brings the values and removes the wait (its patch
// admitted by the webhook); a client that rewrites the template without
// them rolls nothing (the webhook injects the persisted revision); the
// controller's later patches skip the webhook; with the webhook down,
// annotated workloads are refused and others are not.
func TestWebhook(t *testing.T) {
	e, ns := startEnvWithWebhook(t)
	stop := startController(t, e) // as the addon: the webhook is registered
	ctx := t.Context()
	c := e.Client

	bad := deployment(ns, "bad", map[string]string{relations.AnnotationConsumes: "DB", relations.AnnotationRelationship: "pg"})
	if err := c.Create(ctx, bad); err == nil || !strings.Contains(err.Error(), `annotation relations.transit.io/consumes: entry "DB": an interface name is a DNS label`) {
		t.Errorf("a malformed annotation: %v, want the webhook's refusal naming it", err)
	}

	web := deployment(ns, "web", map[string]string{relations.AnnotationConsumes: "db", relations.AnnotationRelationship: "pg"})
	if err := c.Create(ctx, web); err != nil {
		t.Fatal(err)
	}
	init := web.Spec.Template.Spec.InitContainers
	if len(init) != 1 || init[0].Name != relations.WaitContainer || init[0].Image != "transit.local/relations:test" ||
		!strings.Contains(envValue(init[0], relations.WaitWhatEnv), "interface db from "+ns+"/pg") || envValue(init[0], relations.WaitForEnv) != "DB" {
		t.Fatalf("a consumer created before its provider: init containers %+v, want the wait container", init)
	}

	if err := c.Create(ctx, externalService(ns, "pg", "db1.example.com")); err != nil {
		t.Fatal(err)
	}
	gen := waitTemplate(t, c, ns, "web", "deployment-web-db-r1", "1")
	eventually(t, "the wait container removed", func() (bool, string) {
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "web"}, web); err != nil {
			return false, err.Error()
		}
		return len(web.Spec.Template.Spec.InitContainers) == 0, "still there"
	})
	gen = max(gen, web.Generation)

	// A client that writes back its own template (without the values):
	// the webhook puts the persisted revision back, nothing rolls.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "web"}, web); err != nil {
			return err
		}
		web.Spec.Template.Spec.Containers[0].Env = nil
		web.Spec.Template.Spec.Containers[1].Env = nil
		web.Spec.Template.Annotations = nil
		return c.Update(ctx, web)
	})
	if err != nil {
		t.Fatal(err)
	}
	if web.Generation != gen || len(web.Spec.Template.Spec.Containers[0].Env) != 1 {
		t.Errorf("a rewritten template: generation %d (was %d), env %+v; want nothing changed", web.Generation, gen, web.Spec.Template.Spec.Containers[0].Env)
	}

	// Established, no wait: the controller's patch of the next revision
	// is not a round trip to the webhook.
	if admissions(ns, relations.ControllerUser) == 0 {
		t.Error("the controller's establishing patch was not admitted by the webhook (which removes the wait)")
	}
	before := admissions(ns, relations.ControllerUser)
	setHost(t, c, ns, "pg", "db2.example.com")
	waitTemplate(t, c, ns, "web", "deployment-web-db-r2", "2")
	if n := admissions(ns, relations.ControllerUser) - before; n != 0 {
		t.Errorf("the controller's patch of revision 2 went through the webhook %d time(s), want none", n)
	}

	// The webhook down: annotated workloads are refused, others pass.
	stop()
	again := deployment(ns, "again", map[string]string{relations.AnnotationConsumes: "db", relations.AnnotationRelationship: "pg"})
	if err := c.Create(ctx, again); err == nil || !strings.Contains(err.Error(), "workloads.relations.transit.io") {
		t.Errorf("with the webhook down an annotated Deployment: %v, want refused naming the webhook", err)
	}
	plain := deployment(ns, "plain", nil)
	if err := c.Create(ctx, plain); err != nil {
		t.Errorf("with the webhook down a Deployment without annotations: %v", err)
	}
}

// TestForegroundDeleteWebhookDown: with the webhook registered and its
// server down, a consumer deleted with foreground cascade goes: the
// garbage collector's removal of its finalizer never waits for the
// webhook.
func TestForegroundDeleteWebhookDown(t *testing.T) {
	e, ns := startEnvWithWebhook(t)
	stop := startController(t, e)
	ctx := t.Context()
	c := e.Client
	web := deployment(ns, "web", map[string]string{relations.AnnotationConsumes: "db", relations.AnnotationRelationship: "pg"})
	createAll(t, c, externalService(ns, "pg", "db1.example.com"), web)
	waitTemplate(t, c, ns, "web", "deployment-web-db-r1", "1")
	stop()
	if err := c.Delete(ctx, web, client.PropagationPolicy(metav1.DeletePropagationForeground)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the consumer deleted", func() (bool, string) {
		err := c.Get(ctx, client.ObjectKeyFromObject(web), web)
		return apierrors.IsNotFound(err), fmt.Sprintf("finalizers %v (%v)", web.Finalizers, err)
	})
}

func envValue(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// TestWebhookInPlace: a client rewriting an InPlace consumer's template
// without the injection gets the live Secret's volume back from the
// webhook: nothing rolls.
func TestWebhookInPlace(t *testing.T) {
	e, ns := startEnvWithWebhook(t)
	startController(t, e)
	ctx := t.Context()
	c := e.Client
	createInPlaceWeb(t, c, ns)
	web := deployment(ns, "web", nil)
	key := types.NamespacedName{Namespace: ns, Name: "web"}
	mountsLive := func() bool {
		v := web.Spec.Template.Spec.Volumes
		return len(v) == 1 && v[0].Secret != nil && v[0].Secret.SecretName == "deployment-web-db-live" &&
			web.Spec.Template.Annotations[relations.RevisionAnnotationPrefix+"deployment-web-db"] == "in-place" &&
			len(web.Spec.Template.Spec.InitContainers) == 0
	}
	eventually(t, "the live Secret mounted, no wait container", func() (bool, string) {
		if err := c.Get(ctx, key, web); err != nil {
			return false, err.Error()
		}
		return mountsLive(), fmt.Sprintf("%+v", web.Spec.Template.Spec)
	})
	gen := web.Generation
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, key, web); err != nil {
			return err
		}
		web.Spec.Template.Spec.Volumes = nil
		for i := range web.Spec.Template.Spec.Containers {
			web.Spec.Template.Spec.Containers[i].VolumeMounts = nil
		}
		web.Spec.Template.Annotations = nil
		return c.Update(ctx, web)
	})
	if err != nil {
		t.Fatal(err)
	}
	if web.Generation != gen || !mountsLive() {
		t.Errorf("a rewritten InPlace template: generation %d (was %d), spec %+v", web.Generation, gen, web.Spec.Template.Spec)
	}
}
