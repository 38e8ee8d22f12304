package relations_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cloudtransit/transit/controllers/relations"
	"github.com/cloudtransit/transit/controllers/relations/api/v1alpha1"
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

// dropUsers deletes the ReplicaSets and pods of namespace ns that
// take values from Secret name: an old revision's pods gone at the end
// of a rollout, its ReplicaSet gone from the Deployment's history. It
// first waits until the Deployment controller has seen the current
// template of Deployment deployment: deleted while that controller
// still holds an older template, the ReplicaSet it deletes is made again
// and stays as a rollback target (seen under make test's load).
func dropUsers(t *testing.T, c client.Client, ns, deployment, name string) {
	t.Helper()
	d := &appsv1.Deployment{}
	if err := c.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: deployment}, d); err != nil {
		t.Fatal(err)
	}
	waitObserved(t, c, ns, deployment, d.Generation)
	var sets appsv1.ReplicaSetList
	if err := c.List(t.Context(), &sets, client.InNamespace(ns)); err != nil {
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
	if err := c.List(t.Context(), &pods, client.InNamespace(ns)); err != nil {
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

// usersOf names the ReplicaSets and pods of namespace ns that take
// values from Secret name, for a failure message.
func usersOf(t *testing.T, c client.Client, ns, name string) string {
	var users []string
	var sets appsv1.ReplicaSetList
	if err := c.List(t.Context(), &sets, client.InNamespace(ns)); err != nil {
		return err.Error()
	}
	for _, rs := range sets.Items {
		if refersTo(rs.Spec.Template.Spec, name) {
			users = append(users, "ReplicaSet "+rs.Name)
		}
	}
	var pods corev1.PodList
	if err := c.List(t.Context(), &pods, client.InNamespace(ns)); err != nil {
		return err.Error()
	}
	for _, p := range pods.Items {
		if refersTo(p.Spec, name) {
			users = append(users, "pod "+p.Name)
		}
	}
	return "used by: " + strings.Join(users, ", ")
}

// waitObserved waits until the Deployment controller has seen
// generation gen of Deployment ns/name: the ReplicaSet it makes is the one
// of that template from then on.
func waitObserved(t *testing.T, c client.Client, ns, name string, gen int64) {
	t.Helper()
	eventually(t, "the Deployment controller at generation "+strconvI(gen), func() (bool, string) {
		d := &appsv1.Deployment{}
		if err := c.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: name}, d); err != nil {
			return false, err.Error()
		}
		return d.Status.ObservedGeneration >= gen, fmt.Sprintf("observed %d", d.Status.ObservedGeneration)
	})
}

// usedBy waits until a pod of namespace ns takes values from
// Secret name.
func usedBy(t *testing.T, c client.Client, ns, name string) {
	t.Helper()
	eventually(t, "a pod using "+name, func() (bool, string) {
		var pods corev1.PodList
		if err := c.List(t.Context(), &pods, client.InNamespace(ns)); err != nil {
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
	e, ns := startEnvWithWebhook(t)
	startController(t, e, relations.Options{History: 1, Recheck: time.Second})
	ctx := t.Context()
	c := e.Client
	createAll(t, c, externalService(ns, "pg", "db1.example.com"),
		deployment(ns, "web", map[string]string{relations.AnnotationConsumes: "db", relations.AnnotationRelationship: "pg"}))
	relKey := types.NamespacedName{Namespace: ns, Name: "deployment-web-db"}
	waitTemplate(t, c, ns, "web", "deployment-web-db-r1", "1")
	usedBy(t, c, ns, "deployment-web-db-r1")

	setHost(t, c, ns, "pg", "db2.example.com")
	waitRevision(t, c, relKey, 2, "db2.example.com") // r1 has left the history of 1
	waitTemplate(t, c, ns, "web", "deployment-web-db-r2", "2")
	r1 := &corev1.Secret{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "deployment-web-db-r1"}, r1); err != nil {
		t.Fatalf("r1's values Secret, which the old pod and ReplicaSet use: %v", err)
	}

	// Both gone, r1 goes at the next look: the next revision.
	dropUsers(t, c, ns, "web", "deployment-web-db-r1")
	setHost(t, c, ns, "pg", "db3.example.com")
	waitRevision(t, c, relKey, 3, "db3.example.com")
	eventually(t, "r1's Secret deleted once nothing uses it", func() (bool, string) {
		err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "deployment-web-db-r1"}, r1)
		return apierrors.IsNotFound(err), "finalizers " + strings.Join(r1.Finalizers, ",") + "; " + usersOf(t, c, ns, "deployment-web-db-r1")
	})
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "deployment-web-db-r2"}, &corev1.Secret{}); err != nil {
		t.Errorf("r2's values Secret, which its ReplicaSet uses: %v", err)
	}
}

// TestConsentConditions, with the webhook as installed: a provider of
// another namespace that does not consent reads exactly as one that does
// not exist (no kind, no existence, in conditions and spec); withdrawn
// consent says that the consumer's new pods now wait in the wait
// container, which the webhook puts back.
func TestConsentConditions(t *testing.T) {
	e, ns := startEnvWithWebhook(t)
	data := e.Namespace(t) // the providers'
	startController(t, e)
	ctx := t.Context()
	c := e.Client
	pg := externalService(data, "pg", "db1.example.com")
	pg.Annotations[relations.AnnotationAllowNamespaces] = ns
	hidden := externalService(data, "hidden", "db2.example.com")
	broken := externalService(data, "broken", "db3.example.com")
	broken.Annotations[relations.AnnotationProtect] = "maybe" // malformed: a note, not shown to another namespace
	createAll(t, c, pg, hidden, broken,
		deployment(ns, "poke", map[string]string{relations.AnnotationConsumes: "db", relations.AnnotationRelationship: data + "/broken"}),
		deployment(ns, "web", map[string]string{relations.AnnotationConsumes: "db", relations.AnnotationRelationship: data + "/pg"}),
		deployment(ns, "peek", map[string]string{relations.AnnotationConsumes: "db", relations.AnnotationRelationship: data + "/hidden"}),
		deployment(ns, "ghost", map[string]string{relations.AnnotationConsumes: "db", relations.AnnotationRelationship: data + "/hidden-not"}))
	waitRevision(t, c, types.NamespacedName{Namespace: ns, Name: "deployment-web-db"}, 1, "db1.example.com")

	shown := func(name, provider string) string {
		rel := waitCondition(t, c, ns, name, v1alpha1.ConditionProviderFound, metav1.ConditionFalse, "NotFound", "")
		return strings.ReplaceAll(condString(rel), provider, "X") + " spec " + rel.Spec.Provider.Kind + rel.Spec.Provider.APIVersion
	}
	peek, poke, ghost := shown("deployment-peek-db", data+"/hidden"), shown("deployment-poke-db", data+"/broken"), shown("deployment-ghost-db", data+"/hidden-not")
	if peek != ghost || poke != ghost {
		t.Errorf("a provider that does not consent is told apart from none:\n%s\n%s\n%s", peek, poke, ghost)
	}
	if strings.Contains(peek, "Service") {
		t.Errorf("the conditions name the kind of an object that gave no consent: %s", peek)
	}

	// Consent withdrawn.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(pg), pg); err != nil {
			return err
		}
		delete(pg.Annotations, relations.AnnotationAllowNamespaces)
		return c.Update(ctx, pg)
	})
	if err != nil {
		t.Fatal(err)
	}
	waitCondition(t, c, ns, "deployment-web-db", v1alpha1.ConditionReady, metav1.ConditionFalse, "NotFound",
		"meanwhile the consumer's new pods wait in transit-relations-wait (lifecycle start), running ones go on, until a provider is found that consents, the relationship is removed or its lifecycle is none")
	eventually(t, "the wait container back in web's template", func() (bool, string) {
		d := deployment(ns, "web", nil)
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "web"}, d); err != nil {
			return false, err.Error()
		}
		ic := d.Spec.Template.Spec.InitContainers
		return len(ic) == 1 && ic[0].Name == relations.WaitContainer, "no wait container"
	})
}

// TestControllerPolicy: the controller runs as the addon installs it
// (its RBAC, its admission policy, the webhook): a consumer of a protected
// provider is related and the provider protected; what RBAC cannot
// narrow, the policy refuses to the controller's identity: a Secret not
// its own, a workload neither consumer nor protected, a pod not waiting.
func TestControllerPolicy(t *testing.T) {
	e, ns := startEnvWithWebhook(t)
	ctx := t.Context()
	c := e.Client
	as := asAddon(t, e)
	asController, err := client.New(as, client.Options{Scheme: e.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	mine := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "mine", Namespace: ns}, Data: map[string][]byte{"k": []byte("v")}}
	plain := deployment(ns, "plain", nil)
	createAll(t, c, mine, plain)
	refused := func(what, want string, op func() error) {
		t.Helper()
		eventually(t, what+" refused by the policy", func() (bool, string) {
			err := op()
			return err != nil && strings.Contains(err.Error(), want), fmt.Sprint(err)
		})
	}
	refused("a Secret not its own, created", "the relations controller writes only its values Secrets", func() error {
		return asController.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "stolen", Namespace: ns}})
	})
	refused("a Secret not its own, deleted", "not Secret "+ns+"/mine", func() error { return asController.Delete(ctx, mine.DeepCopy()) })
	refused("a workload neither consumer nor protected, updated", "updates only consumers and protected providers, not deployments "+ns+"/plain", func() error {
		d := plain.DeepCopy()
		if err := asController.Get(ctx, client.ObjectKeyFromObject(d), d); err != nil {
			return err
		}
		d.Labels = map[string]string{"taken": "over"}
		return asController.Update(ctx, d)
	})
	// Anyone else's same writes pass: the policy judges the controller.
	// (The Deployment controller writes its status meanwhile: a conflict
	// is retried, a refusal is not.)
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		other := plain.DeepCopy()
		if err := c.Get(ctx, client.ObjectKeyFromObject(other), other); err != nil {
			return err
		}
		other.Labels = map[string]string{"taken": "over"}
		return c.Update(ctx, other)
	})
	if err != nil {
		t.Errorf("a workload updated by someone else: %v", err)
	}
	if err := c.Delete(ctx, mine.DeepCopy(), client.DryRunAll); err != nil {
		t.Errorf("a Secret deleted by someone else: %v", err)
	}
	if err := asController.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "values", Namespace: ns,
		Labels: map[string]string{"relations.transit.io/relationship": "x"}}}); err != nil {
		t.Errorf("a values Secret: %v", err)
	}

	startControllerAs(t, e, as)
	pg := externalService(ns, "pg", "db1.example.com")
	pg.Annotations[relations.AnnotationProtect] = "true"
	createAll(t, c, pg, deployment(ns, "web", map[string]string{relations.AnnotationConsumes: "db", relations.AnnotationRelationship: "pg"}))
	waitTemplate(t, c, ns, "web", "deployment-web-db-r1", "1")
	eventually(t, "the protect finalizer under the policy", func() (bool, string) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(pg), pg); err != nil {
			return false, err.Error()
		}
		return slices.Contains(pg.Finalizers, relations.ProtectFinalizer), strings.Join(pg.Finalizers, ",")
	})
}
