package relations_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/cloudtransit/transit/cmdtest"
	"github.com/cloudtransit/transit/controllers/relations"
	"github.com/cloudtransit/transit/controllers/relations/api/v1alpha1"
	"github.com/cloudtransit/transit/controllers/testenv"
)

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, nil)))
	// cmdtest builds nothing: it kills what killed runs left. The servers
	// the tests shared stop after them.
	os.Exit(testenv.StopShared(cmdtest.Main(m)))
}

// webhookCalls counts the webhook's admissions by namespace and user.
var webhookCalls = struct {
	sync.Mutex
	n map[[2]string]int
}{n: map[[2]string]int{}}

// countedWebhook is the webhook, its admissions counted in webhookCalls.
type countedWebhook struct{ admission.Handler }

func (h countedWebhook) Handle(ctx context.Context, req admission.Request) admission.Response {
	webhookCalls.Lock()
	webhookCalls.n[[2]string{req.Namespace, req.UserInfo.Username}]++
	webhookCalls.Unlock()
	return h.Handler.Handle(ctx, req)
}

// admissions is how often the webhook admitted user's writes in ns.
func admissions(ns, user string) int {
	webhookCalls.Lock()
	defer webhookCalls.Unlock()
	return webhookCalls.n[[2]string{ns, user}]
}

// startController runs the relations controller (and its webhook, when e
// installed one) against e until the test ends; stop stops it earlier.
func startController(t testing.TB, e *testenv.Env, opts ...relations.Options) (stop func()) {
	t.Helper()
	if e.Webhook.Port != 0 {
		// With the webhook registered, as installed: which of the
		// controller's writes it admits depends on the controller's
		// identity.
		return startControllerAs(t, e, asAddon(t, e), opts...)
	}
	return startControllerAs(t, e, e.Config, opts...)
}

// startControllerAs is startController with the controller's requests
// made with cfg (another identity).
func startControllerAs(t testing.TB, e *testenv.Env, cfg *rest.Config, opts ...relations.Options) (stop func()) {
	t.Helper()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		WebhookServer:          webhook.NewServer(webhook.Options{Host: e.Webhook.Host, Port: e.Webhook.Port, CertDir: e.Webhook.CertDir}),
		Scheme:                 e.Scheme,
		Cache:                  relations.CacheOptions(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// Each test runs its own manager of the same controllers.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := &relations.Reconciler{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorderFor("transit-relations")}
	if len(opts) > 0 {
		r.Options = opts[0]
	}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	if e.Webhook.Port != 0 {
		mgr.GetWebhookServer().Register(relations.WebhookPath, &webhook.Admission{Handler: countedWebhook{&relations.Webhook{
			Reader: mgr.GetAPIReader(), Decoder: admission.NewDecoder(e.Scheme), Image: "transit.local/relations:test"}}})
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("manager: %v", err)
			}
			// The next test's manager serves the webhook on this port.
			if e.Webhook.Port != 0 && webhookServing(e) {
				t.Errorf("the webhook server still serves on port %d after its manager stopped", e.Webhook.Port)
			}
		})
	}
	t.Cleanup(stop)
	if e.Webhook.Port != 0 {
		// The API server calls the webhook as soon as the test writes a
		// workload: wait until it serves.
		serving := mgr.GetWebhookServer().StartedChecker()
		deadline := time.Now().Add(time.Minute)
		for err := serving(nil); err != nil; err = serving(nil) {
			select {
			case err := <-done:
				done <- err // for stop
				t.Fatalf("the manager ended before its webhook server served: %v", err)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("waited a minute for the webhook server: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return stop
}

// webhookServing says whether something accepts connections on e's
// webhook port.
func webhookServing(e *testenv.Env) bool {
	conn, err := net.DialTimeout("tcp", net.JoinHostPort(e.Webhook.Host, strconv.Itoa(e.Webhook.Port)), 5*time.Second)
	if err != nil {
		return false
	}
	_ = conn.Close()
	return true
}

// The tests share an API server per set of options (testenv.Shared),
// each test in namespaces of its own: startEnv and its kin return the
// shared server and a new namespace for the test. A test that changes
// what is cluster-wide (an Interface, ClusterRoles, admission policies)
// puts it back before it ends.

// startEnv is the API server with the CRDs and the controller manager.
func startEnv(t testing.TB) (*testenv.Env, string) {
	e := testenv.Shared(t, "controller-manager", testenv.Options{
		CRDDirs:           []string{filepath.Join("config", "crd")},
		AddToScheme:       []func(*runtime.Scheme) error{v1alpha1.AddToScheme},
		ControllerManager: true,
	})
	return e, e.Namespace(t)
}

// startEnvWithWebhook is startEnv with the webhook registered as the
// addon installs it (by Service; envtest points it at the server each
// test's manager runs in turn), and the CRDs of crdDirs too.
func startEnvWithWebhook(t testing.TB, crdDirs ...string) (*testenv.Env, string) {
	key := strings.Join(append([]string{"webhook"}, crdDirs...), "+")
	e := testenv.Shared(t, key, webhookOptions(true, crdDirs...))
	return e, e.Namespace(t)
}

// startEnvWithKinds is startEnv with the test's own kinds too
// (testdata/crd: Database, Queue).
func startEnvWithKinds(t testing.TB) (*testenv.Env, string) {
	e := testenv.Shared(t, "controller-manager+testdata", testenv.Options{
		CRDDirs:           []string{filepath.Join("config", "crd"), filepath.Join("testdata", "crd")},
		AddToScheme:       []func(*runtime.Scheme) error{v1alpha1.AddToScheme},
		ControllerManager: true,
	})
	return e, e.Namespace(t)
}

// webhookOptions are the test environment's with the webhook registered;
// without controllerManager no ReplicaSets are made (a benchmark's
// templates alone).
func webhookOptions(controllerManager bool, crdDirs ...string) testenv.Options {
	path := relations.WebhookPath
	svc := &admissionregistrationv1.ServiceReference{Namespace: "transit-relations", Name: "transit-relations-webhook", Path: &path}
	return testenv.Options{
		CRDDirs:           append([]string{filepath.Join("config", "crd")}, crdDirs...),
		AddToScheme:       []func(*runtime.Scheme) error{v1alpha1.AddToScheme},
		ControllerManager: controllerManager,
		MutatingWebhooks: []*admissionregistrationv1.MutatingWebhookConfiguration{
			relations.MutatingWebhookConfiguration("transit-relations", admissionregistrationv1.WebhookClientConfig{Service: svc}),
		},
	}
}

func deployment(ns, name string, annotations map[string]string, env ...corev1.EnvVar) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: annotations},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{
					{Name: "app", Image: "busybox", Env: env},
					{Name: "sidecar", Image: "busybox"},
				}},
			},
		},
	}
}

func externalService(ns, name, host string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: map[string]string{relations.AnnotationProvides: "db"}},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: host},
	}
}

// setHost points the ExternalName Service ns/name at host.
func setHost(t *testing.T, c client.Client, ns, name, host string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		svc := &corev1.Service{}
		if err := c.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: name}, svc); err != nil {
			return err
		}
		svc.Spec.ExternalName = host
		return c.Update(t.Context(), svc)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// createAll creates objs, failing the test on the first error.
func createAll(t *testing.T, c client.Client, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := c.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}
}

// deleteAndWait deletes o and waits until it is gone: what a test made
// outside its namespaces, on a shared server.
func deleteAndWait(t *testing.T, c client.Client, o client.Object) {
	t.Helper()
	ctx := context.Background() // t.Context is done in cleanups
	if err := c.Delete(ctx, o); client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
	eventually(t, fmt.Sprintf("%T %s deleted", o, o.GetName()), func() (bool, string) {
		err := c.Get(ctx, client.ObjectKeyFromObject(o), o)
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

// eventually polls cond until it holds or a minute passed (a controller retries a blocked step after 30 s).
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s; last: %s", what, state)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRelationshipLifecycle: a consumer created before its provider
// waits (ProviderFound=False, an event); the provider's appearance makes
// revision 1, its values in an immutable Secret the template refers to in
// every container; a change makes revision 2 and one template change;
// an unrelated edit of the provider writes nothing; removing the
// annotations removes everything the controller added.
func TestRelationshipLifecycle(t *testing.T) {
	e, ns := startEnv(t)
	startController(t, e)
	ctx := t.Context()
	c := e.Client

	web := deployment(ns, "web", map[string]string{relations.AnnotationConsumes: "db", relations.AnnotationRelationship: "pg"})
	if err := c.Create(ctx, web); err != nil {
		t.Fatal(err)
	}
	rel := &v1alpha1.Relationship{}
	relKey := types.NamespacedName{Namespace: ns, Name: "deployment-web-db"}
	eventually(t, "the pending Relationship", func() (bool, string) {
		if err := c.Get(ctx, relKey, rel); err != nil {
			return false, err.Error()
		}
		cond := meta.FindStatusCondition(rel.Status.Conditions, v1alpha1.ConditionProviderFound)
		return cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == "NotFound" &&
			meta.IsStatusConditionFalse(rel.Status.Conditions, v1alpha1.ConditionReady), condString(rel)
	})
	if !metav1.IsControlledBy(rel, web) {
		t.Errorf("the Relationship is not owned by its consumer: %v", rel.OwnerReferences)
	}
	eventually(t, "the RelationshipPending event", func() (bool, string) {
		return hasEvent(ctx, c, ns, "web", "RelationshipPending", "none of "+ns+"/pg provides db"), ""
	})

	pg := externalService(ns, "pg", "db1.example.com")
	if err := c.Create(ctx, pg); err != nil {
		t.Fatal(err)
	}
	waitRevision(t, c, relKey, 1, "db1.example.com")
	gen := waitTemplate(t, c, ns, "web", "deployment-web-db-r1", "1")

	// A change of the provider's value: revision 2, one rollout.
	pg.Spec.ExternalName = "db2.example.com"
	if err := c.Update(ctx, pg); err != nil {
		t.Fatal(err)
	}
	waitRevision(t, c, relKey, 2, "db2.example.com")
	gen2 := waitTemplate(t, c, ns, "web", "deployment-web-db-r2", "2")
	if gen2 != gen+1 {
		t.Errorf("the change took the Deployment from generation %d to %d, want one write", gen, gen2)
	}
	if err := c.Get(ctx, relKey, rel); err != nil {
		t.Fatal(err)
	}
	if len(rel.Status.History) != 2 || rel.Status.History[0].Revision != 2 || rel.Status.History[1].Secret != "deployment-web-db-r1" {
		t.Errorf("history: %+v", rel.Status.History)
	}
	eventually(t, "the ProviderChanged event", func() (bool, string) {
		return hasEvent(ctx, c, ns, "web", "ProviderChanged", "db: r1→r2"), ""
	})

	// An edit that does not change the values writes nothing.
	pg.Labels = map[string]string{"team": "data"}
	if err := c.Update(ctx, pg); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "web"}, web); err != nil {
		t.Fatal(err)
	}
	if web.Generation != gen2 {
		t.Errorf("an unrelated edit of the provider wrote the consumer: generation %d, want %d", web.Generation, gen2)
	}
	if err := c.Get(ctx, relKey, rel); err != nil || rel.Status.Revision != 2 {
		t.Errorf("an unrelated edit made revision %d (%v)", rel.Status.Revision, err)
	}

	// The annotations removed: one rollout takes everything out. (The
	// Deployment's status moves on meanwhile: a user retries on conflict.)
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "web"}, web); err != nil {
			return err
		}
		web.Annotations = nil
		return c.Update(ctx, web)
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the injection removed", func() (bool, string) {
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "web"}, web); err != nil {
			return false, err.Error()
		}
		tpl := web.Spec.Template
		for _, ctr := range tpl.Spec.Containers {
			if len(ctr.Env) > 0 {
				return false, "env left"
			}
		}
		return len(tpl.Annotations) == 0, "annotations left"
	})
	eventually(t, "the Relationship deleted", func() (bool, string) {
		err := c.Get(ctx, relKey, rel)
		return err != nil && strings.Contains(err.Error(), "not found"), "still there"
	})
}

// TestUserVariableConflicts: a variable the user set under the name the
// relationship injects is never overwritten: Injected=False, Conflict;
// not by the controller, nor by the webhook on the controller's own patch
// or on a user's edit.
func TestUserVariableConflicts(t *testing.T) {
	e, ns := startEnvWithWebhook(t)
	startController(t, e)
	ctx := t.Context()
	c := e.Client
	if err := c.Create(ctx, externalService(ns, "pg", "db1.example.com")); err != nil {
		t.Fatal(err)
	}
	mine := deployment(ns, "mine", map[string]string{relations.AnnotationConsumes: "db", relations.AnnotationRelationship: "pg"},
		corev1.EnvVar{Name: "DB", Value: "my-own-db"})
	if err := c.Create(ctx, mine); err != nil {
		t.Fatal(err)
	}
	relKey := types.NamespacedName{Namespace: ns, Name: "deployment-mine-db"}
	rel := &v1alpha1.Relationship{}
	eventually(t, "Injected=False Conflict", func() (bool, string) {
		if err := c.Get(ctx, relKey, rel); err != nil {
			return false, err.Error()
		}
		cond := meta.FindStatusCondition(rel.Status.Conditions, v1alpha1.ConditionInjected)
		return cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == "Conflict", condString(rel)
	})
	// The condition is written after the controller's patch, which went
	// through the webhook.
	untouched := func(when string) {
		t.Helper()
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "mine"}, mine); err != nil {
			t.Fatal(err)
		}
		cs := mine.Spec.Template.Spec.Containers
		if env := cs[0].Env; len(env) != 1 || env[0].Value != "my-own-db" || env[0].ValueFrom != nil {
			t.Errorf("%s: the user's variable was changed: %+v", when, env)
		}
		if len(cs[1].Env) != 0 {
			t.Errorf("%s: the relationship was injected into the other container: %+v", when, cs[1].Env)
		}
	}
	untouched("after the controller's patch")
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "mine"}, mine); err != nil {
			return err
		}
		mine.Labels = map[string]string{"edited": "yes"}
		return c.Update(ctx, mine)
	})
	if err != nil {
		t.Fatal(err)
	}
	untouched("after a user's edit")
}

func waitRevision(t *testing.T, c client.Client, key types.NamespacedName, revision int64, value string) {
	t.Helper()
	rel := &v1alpha1.Relationship{}
	eventually(t, "revision "+strconvI(revision), func() (bool, string) {
		if err := c.Get(context.Background(), key, rel); err != nil {
			return false, err.Error()
		}
		return rel.Status.Revision == revision && meta.IsStatusConditionTrue(rel.Status.Conditions, v1alpha1.ConditionReady), condString(rel)
	})
	s := &corev1.Secret{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: key.Namespace, Name: rel.Status.Secret}, s); err != nil {
		t.Fatal(err)
	}
	if string(s.Data["db"]) != value || s.Immutable == nil || !*s.Immutable || !metav1.IsControlledBy(s, rel) {
		t.Errorf("values Secret %s: data %q immutable %v owners %v, want db=%s, immutable, owned by the Relationship", s.Name, s.Data, s.Immutable, s.OwnerReferences, value)
	}
}

// waitTemplate waits until the Deployment ns/name's every container takes
// DB from secret and the template carries the revision; it returns the
// Deployment's generation.
func waitTemplate(t *testing.T, c client.Client, ns, name, secret, revision string) int64 {
	t.Helper()
	d := &appsv1.Deployment{}
	eventually(t, "the template at "+secret, func() (bool, string) {
		if err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, d); err != nil {
			return false, err.Error()
		}
		tpl := d.Spec.Template
		if tpl.Annotations[relations.RevisionAnnotationPrefix+"deployment-"+name+"-db"] != revision {
			return false, "annotations " + strings.Join(mapKeys(tpl.Annotations), ",")
		}
		for _, ctr := range tpl.Spec.Containers {
			if len(ctr.Env) != 1 || ctr.Env[0].Name != "DB" || ctr.Env[0].ValueFrom == nil || ctr.Env[0].ValueFrom.SecretKeyRef == nil ||
				ctr.Env[0].ValueFrom.SecretKeyRef.Name != secret || ctr.Env[0].ValueFrom.SecretKeyRef.Key != "db" {
				return false, ctr.Name + " env not injected"
			}
		}
		return true, ""
	})
	return d.Generation
}

// hasEvent says whether an event of namespace ns about object has reason
// and a message holding msg.
func hasEvent(ctx context.Context, c client.Client, ns, object, reason, msg string) bool {
	var events corev1.EventList
	if err := c.List(ctx, &events, client.InNamespace(ns)); err != nil {
		return false
	}
	for _, ev := range events.Items {
		if ev.InvolvedObject.Name == object && ev.Reason == reason && strings.Contains(ev.Message, msg) {
			return true
		}
	}
	return false
}

func condString(rel *v1alpha1.Relationship) string {
	var s []string
	for _, c := range rel.Status.Conditions {
		s = append(s, c.Type+"="+string(c.Status)+"("+c.Reason+": "+c.Message+")")
	}
	return "revision " + strconvI(rel.Status.Revision) + " " + strings.Join(s, " ")
}

func strconvI(n int64) string { return strconv.FormatInt(n, 10) }

func mapKeys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestCrashBetweenSecretAndStatus: a controller that died after writing a
// revision's values Secret and before recording it leaves the Secret; the
// next one reuses it (no duplicate revision), and refuses to reuse a
// Secret of that name holding other values.
func TestCrashBetweenSecretAndStatus(t *testing.T) {
	e, ns := startEnv(t)
	ctx := t.Context()
	c := e.Client
	pg := externalService(ns, "pg", "db1.example.com")
	web := deployment(ns, "web", map[string]string{relations.AnnotationConsumes: "db", relations.AnnotationRelationship: "pg"})
	createAll(t, c, pg, web)
	// What the crashed run left: its Relationship (no revision yet) and
	// revision 1's Secret.
	rel := &v1alpha1.Relationship{ObjectMeta: metav1.ObjectMeta{Name: "deployment-web-db", Namespace: ns},
		Spec: v1alpha1.RelationshipSpec{Consumer: v1alpha1.ObjectRef{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"},
			Provider: v1alpha1.ObjectRef{Name: "pg"}, Interface: "db"}}
	if err := controllerutil.SetControllerReference(web, rel, e.Scheme); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, rel); err != nil {
		t.Fatal(err)
	}
	left := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "deployment-web-db-r1", Namespace: ns,
		Annotations: map[string]string{relations.Prefix + "hash": relations.Values{"db": "db1.example.com"}.Hash()}},
		Data: map[string][]byte{"db": []byte("db1.example.com")}, Immutable: ptr.To(true)}
	if err := controllerutil.SetControllerReference(rel, left, e.Scheme); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, left); err != nil {
		t.Fatal(err)
	}
	startController(t, e)
	relKey := types.NamespacedName{Namespace: ns, Name: "deployment-web-db"}
	waitRevision(t, c, relKey, 1, "db1.example.com")
	waitTemplate(t, c, ns, "web", "deployment-web-db-r1", "1")

	// Revision 2's name taken by other values: the controller stops
	// there, saying so, and keeps revision 1.
	squatter := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "deployment-web-db-r2", Namespace: ns},
		Data: map[string][]byte{"db": []byte("evil.example.com")}}
	if err := c.Create(ctx, squatter); err != nil {
		t.Fatal(err)
	}
	pg.Spec.ExternalName = "db2.example.com"
	if err := c.Update(ctx, pg); err != nil {
		t.Fatal(err)
	}
	eventually(t, "ValuesResolved=False SecretConflict", func() (bool, string) {
		if err := c.Get(ctx, relKey, rel); err != nil {
			return false, err.Error()
		}
		cond := meta.FindStatusCondition(rel.Status.Conditions, v1alpha1.ConditionValuesResolved)
		return cond != nil && cond.Reason == "SecretConflict" && strings.Contains(cond.Message, "deployment-web-db-r2") && rel.Status.Revision == 1, condString(rel)
	})
	waitTemplate(t, c, ns, "web", "deployment-web-db-r1", "1")
	if err := c.Delete(ctx, squatter); err != nil {
		t.Fatal(err)
	}
	waitRevision(t, c, relKey, 2, "db2.example.com")
	waitTemplate(t, c, ns, "web", "deployment-web-db-r2", "2")
	var secrets corev1.SecretList
	if err := c.List(ctx, &secrets, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range secrets.Items {
		names = append(names, s.Name)
	}
	if strings.Join(names, ",") != "deployment-web-db-r1,deployment-web-db-r2" {
		t.Errorf("values Secrets %v, want r1 and r2 only", names)
	}
}

// TestCrashThenAnotherChange: a controller that died after writing
// revision 2's values Secret and before recording it, followed by another
// change of the provider: the next controller recognises its own
// unrecorded Secret and replaces it with the new values (not a
// SecretConflict for good).
func TestCrashThenAnotherChange(t *testing.T) {
	e, ns := startEnvWithWebhook(t)
	stop := startController(t, e)
	ctx := t.Context()
	c := e.Client
	createAll(t, c, externalService(ns, "pg", "db1.example.com"),
		deployment(ns, "web", map[string]string{relations.AnnotationConsumes: "db", relations.AnnotationRelationship: "pg"}))
	relKey := types.NamespacedName{Namespace: ns, Name: "deployment-web-db"}
	waitRevision(t, c, relKey, 1, "db1.example.com")
	stop()
	// What the crashed run left: revision 2's Secret, as it writes one.
	rel := &v1alpha1.Relationship{}
	if err := c.Get(ctx, relKey, rel); err != nil {
		t.Fatal(err)
	}
	vals := relations.Values{"db": "db2.example.com"}
	left := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "deployment-web-db-r2", Namespace: ns,
		Labels:      map[string]string{relations.Prefix + "relationship": rel.Name},
		Annotations: map[string]string{relations.Prefix + "hash": vals.Hash()}},
		Data: map[string][]byte{"db": []byte(vals["db"])}, Immutable: ptr.To(true)}
	if err := controllerutil.SetControllerReference(rel, left, e.Scheme); err != nil {
		t.Fatal(err)
	}
	createAll(t, c, left)
	setHost(t, c, ns, "pg", "db3.example.com")
	startController(t, e)
	waitRevision(t, c, relKey, 2, "db3.example.com")
	waitTemplate(t, c, ns, "web", "deployment-web-db-r2", "2")
}

// TestNamesNeverCollide: web consuming db-main and web-db consuming main
// (joined alike by "-") each get their own Relationship, Ready, and their
// own provider's values, never the other's.
func TestNamesNeverCollide(t *testing.T) {
	e, ns := startEnvWithWebhook(t)
	startController(t, e)
	ctx := t.Context()
	c := e.Client
	provider := func(name, iface, host string) *corev1.Service {
		svc := externalService(ns, name, host)
		svc.Annotations[relations.AnnotationProvides] = iface
		return svc
	}
	createAll(t, c, provider("pg", "db-main", "pg.example.com"), provider("mysql", "main", "mysql.example.com"),
		deployment(ns, "web", map[string]string{relations.AnnotationConsumes: "db-main", relations.AnnotationRelationship: "pg"}),
		deployment(ns, "web-db", map[string]string{relations.AnnotationConsumes: "main", relations.AnnotationRelationship: "mysql"}))
	for _, w := range []struct{ name, env, host string }{{"web", "DB_MAIN", "pg.example.com"}, {"web-db", "MAIN", "mysql.example.com"}} {
		d := &appsv1.Deployment{}
		eventually(t, w.name+" takes "+w.host, func() (bool, string) {
			if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: w.name}, d); err != nil {
				return false, err.Error()
			}
			for _, ctr := range d.Spec.Template.Spec.Containers {
				i := slices.IndexFunc(ctr.Env, func(e corev1.EnvVar) bool {
					return e.Name == w.env && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil
				})
				if i < 0 {
					return false, ctr.Name + " has no " + w.env
				}
				ref := ctr.Env[i].ValueFrom.SecretKeyRef
				s := &corev1.Secret{}
				if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: ref.Name}, s); err != nil {
					return false, err.Error()
				}
				if string(s.Data[ref.Key]) != w.host {
					return false, fmt.Sprintf("%s takes %s from %s: %q", ctr.Name, w.env, ref.Name, s.Data[ref.Key])
				}
			}
			return true, ""
		})
	}
	var rels v1alpha1.RelationshipList
	if err := c.List(ctx, &rels, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(rels.Items) != 2 || rels.Items[0].Name == rels.Items[1].Name {
		t.Fatalf("Relationships %+v, want two", rels.Items)
	}
	for _, rel := range rels.Items {
		if !meta.IsStatusConditionTrue(rel.Status.Conditions, v1alpha1.ConditionReady) {
			t.Errorf("%s: %s", rel.Name, condString(&rel))
		}
	}
}

// TestInjectionRestored: a reconcile that would apply the same patch
// writes nothing, but an injected variable someone removed comes back.
func TestInjectionRestored(t *testing.T) {
	e, ns := startEnv(t)
	startController(t, e)
	ctx := t.Context()
	c := e.Client
	createAll(t, c, externalService(ns, "pg", "db1.example.com"),
		deployment(ns, "web", map[string]string{relations.AnnotationConsumes: "db", relations.AnnotationRelationship: "pg"}))
	waitTemplate(t, c, ns, "web", "deployment-web-db-r1", "1")
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		web := &appsv1.Deployment{}
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "web"}, web); err != nil {
			return err
		}
		web.Spec.Template.Spec.Containers[0].Env = nil
		return c.Update(ctx, web)
	})
	if err != nil {
		t.Fatal(err)
	}
	waitTemplate(t, c, ns, "web", "deployment-web-db-r1", "1")
}

// TestRevertingWriter: a writer that keeps removing the injected variable
// makes the controller stop re-applying after a few rounds (Conflict,
// naming the cause), not loop against it.
func TestRevertingWriter(t *testing.T) {
	e, ns := startEnv(t)
	startController(t, e)
	ctx := t.Context()
	c := e.Client
	createAll(t, c, externalService(ns, "pg", "db1.example.com"),
		deployment(ns, "web", map[string]string{relations.AnnotationConsumes: "db", relations.AnnotationRelationship: "pg"}))
	waitTemplate(t, c, ns, "web", "deployment-web-db-r1", "1")
	key := types.NamespacedName{Namespace: ns, Name: "web"}
	revert := func() (restored bool) {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			web := &appsv1.Deployment{}
			if err := c.Get(ctx, key, web); err != nil {
				return err
			}
			restored = len(web.Spec.Template.Spec.Containers[0].Env) > 0
			if !restored {
				return nil
			}
			for i := range web.Spec.Template.Spec.Containers {
				web.Spec.Template.Spec.Containers[i].Env = nil
			}
			return c.Update(ctx, web)
		})
		if err != nil {
			t.Fatal(err)
		}
		return restored
	}
	restorations := 0
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if revert() {
			restorations++
		}
		time.Sleep(100 * time.Millisecond)
	}
	if restorations > 5 {
		t.Errorf("the controller re-applied its fields %d times in 20 s against a writer removing them", restorations)
	}
	rel := &v1alpha1.Relationship{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "deployment-web-db"}, rel); err != nil {
		t.Fatal(err)
	}
	if cond := meta.FindStatusCondition(rel.Status.Conditions, v1alpha1.ConditionInjected); cond == nil || cond.Reason != "Conflict" || !strings.Contains(cond.Message, "another writer removed the injected fields") {
		t.Errorf("Injected: %+v", cond)
	}
}
