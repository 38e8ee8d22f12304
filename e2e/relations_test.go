package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	clientset "k8s.io/client-go/kubernetes"

	"github.com/cloudtransit/transit/bundle"
	"github.com/cloudtransit/transit/controllers/relations/annotations"
	"github.com/cloudtransit/transit/districts"
)

var (
	relationshipsGVR   = schema.GroupVersionResource{Group: "relations.transit.io", Version: "v1alpha1", Resource: "relationships"}
	consumerConfigsGVR = schema.GroupVersionResource{Group: "relations.transit.io", Version: "v1alpha1", Resource: "consumerconfigs"}
)

// testKubeRelations installs the relations addon on the cluster spanning
// both districts and uses it as a team would: a consumer created before
// its provider waits, then starts with the value; a change of the
// provider reaches every pod (read inside it); a cross-namespace consumer
// is refused until the provider allows its namespace; a consumer reads the
// value from its Service Binding directory; a pin rolls back; a
// recreated provider with the same value rolls nothing; with the
// controller down, annotated creates are refused clearly, and the next
// apply heals it; removing the addon leaves the CRDs and users' objects.
func testKubeRelations(t *testing.T, c *cluster) {
	c.installAddon("relations")
	ctx := context.Background()
	k := c.kube()
	dyn := c.dynamic()

	// A malformed annotation is refused at admission, naming it.
	eventually(t, time.Minute, "a consumer without relationship refused", func(ctx context.Context) error {
		bad := consumer("bad", "default", 1, map[string]string{annotations.AnnotationConsumes: "db"})
		_, err := k.AppsV1().Deployments("default").Create(ctx, bad, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		switch {
		case err == nil:
			return fmt.Errorf("a consumer without relationship was admitted")
		case !strings.Contains(err.Error(), "relations.transit.io/relationship: missing"):
			return fmt.Errorf("refused without naming the relationship annotation: %w", err)
		}
		return nil
	})

	// Consumer first: its pods wait in the wait container.
	app := consumer("app", "default", 3, map[string]string{annotations.AnnotationConsumes: "db", annotations.AnnotationRelationship: "pg"})
	if _, err := k.AppsV1().Deployments("default").Create(ctx, app, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "app's pods held in the wait container", func(ctx context.Context) error {
		return heldInWait(ctx, k, "app", 3)
	})
	pg := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "pg", Namespace: "default", Annotations: map[string]string{annotations.AnnotationProvides: "db"}},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "db1.example.com"},
	}
	if _, err := k.CoreV1().Services("default").Create(ctx, pg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	eventually(t, 3*time.Minute, "every app pod runs with DB=db1", func(ctx context.Context) error { return podsSee(ctx, k, "default", "app", 3, "db1.example.com") })
	t.Logf("provider created → 3 consumers running with it: %s", time.Since(start).Round(time.Second))

	// update: InPlace: a consumer reading its file in a loop sees the
	// change in the same pod, without a rollout.
	liveCC := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "relations.transit.io/v1alpha1", "kind": "ConsumerConfig",
		"metadata": map[string]any{"name": "db-live", "namespace": "default"},
		"spec": map[string]any{"interface": "db", "update": "InPlace", "lifecycle": "none",
			"keys": []any{map[string]any{"key": "db", "file": "/etc/db/host"}}},
	}}
	if _, err := dyn.Resource(consumerConfigsGVR).Namespace("default").Create(ctx, liveCC, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	live := consumer("live", "default", 1, map[string]string{annotations.AnnotationConsumes: "db", annotations.AnnotationRelationship: "pg",
		annotations.AnnotationConfig: "db=db-live"})
	live.Spec.Template.Spec.Containers[0].Command = []string{"sh", "-c", `while true; do echo "DB=$(cat /etc/db/host 2>/dev/null)"; sleep 2; done`}
	if _, err := k.AppsV1().Deployments("default").Create(ctx, live, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var livePod string
	eventually(t, 3*time.Minute, "the InPlace consumer reads db1", func(ctx context.Context) error {
		var err error
		livePod, err = lastLine(ctx, k, "live", "DB=db1.example.com")
		return err
	})

	// A change reaches every pod, in both districts.
	setExternalName(t, k, "default", "pg", "db2.example.com")
	start = time.Now()
	eventually(t, 3*time.Minute, "every app pod runs with DB=db2", func(ctx context.Context) error { return podsSee(ctx, k, "default", "app", 3, "db2.example.com") })
	t.Logf("provider changed → 3 consumers running with it: %s (sites %v)", time.Since(start).Round(time.Second), c.sitesOf(ctx, k, "default", "app"))
	changed := start

	// Cross-namespace: refused until the provider allows the namespace.
	if _, err := k.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	other := consumer("other", "team", 1, map[string]string{annotations.AnnotationConsumes: "db", annotations.AnnotationRelationship: "default/pg"})
	if _, err := k.AppsV1().Deployments("team").Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "the cross-namespace Relationship not permitted", func(ctx context.Context) error {
		return relationshipCondition(ctx, dyn, "team", "deployment-other-db", "Permitted", "False")
	})
	if err := podsSee(ctx, k, "team", "other", 1, "db2.example.com"); err == nil {
		t.Error("a consumer in a namespace the provider does not allow got its values")
	}
	annotate(t, k, "default", "pg", annotations.AnnotationAllowNamespaces, "team")
	eventually(t, 3*time.Minute, "the allowed consumer runs with DB=db2", func(ctx context.Context) error { return podsSee(ctx, k, "team", "other", 1, "db2.example.com") })

	// Service Binding projection: the value as a file under
	// $SERVICE_BINDING_ROOT/db/, read inside the pod.
	cc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "relations.transit.io/v1alpha1", "kind": "ConsumerConfig",
		"metadata": map[string]any{"name": "db-binding", "namespace": "default"},
		"spec":     map[string]any{"interface": "db", "keys": []any{map[string]any{"key": "db", "binding": "host"}}},
	}}
	if _, err := dyn.Resource(consumerConfigsGVR).Namespace("default").Create(ctx, cc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bound := consumer("bound", "default", 1, map[string]string{annotations.AnnotationConsumes: "db", annotations.AnnotationRelationship: "pg",
		annotations.AnnotationConfig: "db=db-binding"})
	bound.Spec.Template.Spec.Containers[0].Command = []string{"sh", "-c", `echo "DB=$(cat $SERVICE_BINDING_ROOT/db/host)"; exec sleep 3600`}
	if _, err := k.AppsV1().Deployments("default").Create(ctx, bound, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 3*time.Minute, "the bound consumer reads DB=db2 from its binding directory", func(ctx context.Context) error {
		return podsSee(ctx, k, "default", "bound", 1, "db2.example.com")
	})

	// lifecycle: available: a consumer of a Service first starts once the
	// Service has a ready endpoint, not as soon as it exists.
	availCC := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "relations.transit.io/v1alpha1", "kind": "ConsumerConfig",
		"metadata": map[string]any{"name": "db-available", "namespace": "default"},
		"spec": map[string]any{"interface": "db", "lifecycle": "available",
			"keys": []any{map[string]any{"key": "db", "env": "DB"}}},
	}}
	if _, err := dyn.Resource(consumerConfigsGVR).Namespace("default").Create(ctx, availCC, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.deployWeb(ctx, k, "cache", 0, nil) // the Service, no pod behind it yet
	annotate(t, k, "default", "cache", annotations.AnnotationProvides, "db")
	avail := consumer("avail", "default", 1, map[string]string{annotations.AnnotationConsumes: "db", annotations.AnnotationRelationship: "cache",
		annotations.AnnotationConfig: "db=db-available"})
	if _, err := k.AppsV1().Deployments("default").Create(ctx, avail, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "the consumer of an unavailable provider held, and told why", func(ctx context.Context) error {
		if err := relationshipCondition(ctx, dyn, "default", "deployment-avail-db", "ProviderAvailable", "False"); err != nil {
			return err
		}
		return heldInWait(ctx, k, "avail", 1)
	})
	if _, err := k.AppsV1().Deployments("default").UpdateScale(ctx, "cache",
		&autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: "cache", Namespace: "default"}, Spec: autoscalingv1.ScaleSpec{Replicas: 1}},
		metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 3*time.Minute, "the consumer runs once its provider has a ready endpoint", func(ctx context.Context) error {
		return podsSee(ctx, k, "default", "avail", 1, "cache.default.svc.cluster.local")
	})
	for _, del := range []func() error{
		func() error { return k.AppsV1().Deployments("default").Delete(ctx, "avail", metav1.DeleteOptions{}) },
		func() error { return k.AppsV1().Deployments("default").Delete(ctx, "cache", metav1.DeleteOptions{}) },
		func() error { return k.CoreV1().Services("default").Delete(ctx, "cache", metav1.DeleteOptions{}) },
	} {
		if err := del(); err != nil {
			t.Error(err)
		}
	}

	// Pin: back to revision 1, held.
	d, err := k.AppsV1().Deployments("default").Get(ctx, "app", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d.Annotations[annotations.AnnotationPin] = "db=1"
	if _, err := k.AppsV1().Deployments("default").Update(ctx, d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 3*time.Minute, "pinned: every app pod runs with DB=db1", func(ctx context.Context) error { return podsSee(ctx, k, "default", "app", 3, "db1.example.com") })
	eventually(t, time.Minute, "Pinned=True", func(ctx context.Context) error {
		return relationshipCondition(ctx, dyn, "default", "deployment-app-db", "Pinned", "True")
	})
	d, err = k.AppsV1().Deployments("default").Get(ctx, "app", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	delete(d.Annotations, annotations.AnnotationPin)
	if _, err := k.AppsV1().Deployments("default").Update(ctx, d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 3*time.Minute, "unpinned: every app pod runs with DB=db2", func(ctx context.Context) error { return podsSee(ctx, k, "default", "app", 3, "db2.example.com") })

	// The provider deleted and recreated with the same value: no rollout.
	d, err = k.AppsV1().Deployments("default").Get(ctx, "app", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	generation := d.Generation
	if err := k.CoreV1().Services("default").Delete(ctx, "pg", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "ProviderFound=False", func(ctx context.Context) error {
		return relationshipCondition(ctx, dyn, "default", "deployment-app-db", "ProviderFound", "False")
	})
	pg.ResourceVersion = ""
	pg.Spec.ExternalName = "db2.example.com"
	pg.Annotations[annotations.AnnotationAllowNamespaces] = "team"
	if _, err := k.CoreV1().Services("default").Create(ctx, pg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "ProviderFound=True", func(ctx context.Context) error {
		return relationshipCondition(ctx, dyn, "default", "deployment-app-db", "Ready", "True")
	})
	if d, err := k.AppsV1().Deployments("default").Get(ctx, "app", metav1.GetOptions{}); err != nil || d.Generation != generation {
		t.Errorf("the provider recreated with the same value rolled the consumer: generation %d → %d (%v)", generation, d.Generation, err)
	}

	// The kubelet refreshes a Secret volume within its sync period (1 min)
	// and cache TTL: the steps above ran meanwhile.
	eventually(t, 3*time.Minute, "the InPlace consumer's same pod reads db2", func(ctx context.Context) error {
		pod, err := lastLine(ctx, k, "live", "DB=db2.example.com")
		if err == nil && pod != livePod {
			t.Fatalf("the InPlace consumer was rolled: pod %s, then %s", livePod, pod)
		}
		return err
	})
	t.Logf("provider changed → the InPlace consumer's running pod reads it: %s", time.Since(changed).Round(time.Second))
	if err := k.AppsV1().Deployments("default").Delete(ctx, "live", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	// The controller down: an annotated create is refused, naming the
	// webhook; the next apply brings it back and waits until it serves.
	if _, err := k.AppsV1().Deployments("transit-relations").UpdateScale(ctx, "transit-relations",
		&autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: "transit-relations", Namespace: "transit-relations"}, Spec: autoscalingv1.ScaleSpec{Replicas: 0}},
		metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	late := consumer("late", "default", 1, map[string]string{annotations.AnnotationConsumes: "db", annotations.AnnotationRelationship: "pg"})
	eventually(t, 2*time.Minute, "an annotated create refused while the webhook is down", func(ctx context.Context) error {
		_, err := k.AppsV1().Deployments("default").Create(ctx, late, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil {
			return fmt.Errorf("created while the webhook is down")
		}
		if !strings.Contains(err.Error(), "workloads.relations.transit.io") {
			return fmt.Errorf("refused without naming the webhook: %w", err)
		}
		return nil
	})
	if _, err := k.AppsV1().Deployments("default").Create(ctx, consumer("plain", "default", 1, nil), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Errorf("a workload without annotations was refused while the webhook is down: %v", err)
	}
	// A consumer deleted with foreground cascade goes all the same: the
	// garbage collector's removal of its finalizer never reaches the
	// webhook that cannot answer.
	foreground := metav1.DeletePropagationForeground
	if err := k.AppsV1().Deployments("default").Delete(ctx, "bound", metav1.DeleteOptions{PropagationPolicy: &foreground}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "the consumer deleted in the foreground gone while the webhook is down", func(ctx context.Context) error {
		d, err := k.AppsV1().Deployments("default").Get(ctx, "bound", metav1.GetOptions{})
		switch {
		case err == nil:
			return fmt.Errorf("deployment default/bound is still there, finalizers %v", d.Finalizers)
		case apierrors.IsNotFound(err):
			return nil
		}
		return err
	})
	c.apply()
	if _, err := k.AppsV1().Deployments("default").Create(ctx, late, metav1.CreateOptions{}); err != nil {
		t.Fatalf("after apply healed the controller: %v", err)
	}
	eventually(t, 3*time.Minute, "the late consumer runs with DB=db2", func(ctx context.Context) error { return podsSee(ctx, k, "default", "late", 1, "db2.example.com") })

	// The addon removed: its webhook and controller go; CRDs, Relationships
	// and users' workloads stay; annotated creates are admitted again.
	c.cfg.Addons = nil
	c.writeConfig()
	c.apply()
	if _, err := k.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "transit-relations", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the webhook configuration outlived the addon: %v", err)
	}
	if _, err := k.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, "transit-relations-annotations", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the admission policy outlived the addon: %v", err)
	}
	if _, err := dyn.Resource(relationshipsGVR).Namespace("default").Get(ctx, "deployment-app-db", metav1.GetOptions{}); err != nil {
		t.Errorf("a Relationship did not survive the addon's removal: %v", err)
	}
	if err := available(ctx, k, "app", 3); err != nil {
		t.Errorf("the consumer suffered from the addon's removal: %v", err)
	}
	after := consumer("after", "default", 1, map[string]string{annotations.AnnotationConsumes: "db", annotations.AnnotationRelationship: "pg"})
	if _, err := k.AppsV1().Deployments("default").Create(ctx, after, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Errorf("an annotated create after the addon's removal: %v", err)
	}
	eventually(t, 2*time.Minute, "the addon's namespace gone", func(ctx context.Context) error {
		_, err := k.CoreV1().Namespaces().Get(ctx, "transit-relations", metav1.GetOptions{})
		switch {
		case err == nil:
			return fmt.Errorf("namespace transit-relations is still there")
		case apierrors.IsNotFound(err):
			return nil
		}
		return err
	})

	// Leave the cluster as the next steps expect it.
	for _, o := range []struct{ ns, name string }{{"default", "app"}, {"default", "late"}, {"team", "other"}} {
		if err := k.AppsV1().Deployments(o.ns).Delete(ctx, o.name, metav1.DeleteOptions{}); err != nil {
			t.Error(err)
		}
	}
	if err := k.CoreV1().Services("default").Delete(ctx, "pg", metav1.DeleteOptions{}); err != nil {
		t.Error(err)
	}
	if err := k.CoreV1().Namespaces().Delete(ctx, "team", metav1.DeleteOptions{}); err != nil {
		t.Error(err)
	}
}

// installAddon makes name cluster.json's only addon and applies; status
// must report it serving.
func (c *cluster) installAddon(name string) {
	c.tb.Helper()
	c.installAddons(districts.Addon{Name: name})
}

// installAddons makes the cluster's addons these, applies and checks
// that status reports each serving.
func (c *cluster) installAddons(addons ...districts.Addon) {
	c.tb.Helper()
	c.cfg.Addons = addons
	c.writeConfig()
	start := time.Now()
	c.apply()
	r := c.transit("status")
	for _, a := range addons {
		c.tb.Logf("apply with the %s addon converged in %s", a.Name, time.Since(start).Round(time.Second))
		if !strings.Contains(r.stdout, "Addon "+a.Name+": serving.") {
			c.tb.Errorf("status does not report the %s addon serving:\n%s", a.Name, r.stdout)
		}
	}
}

// dynamic is a dynamic client of the cluster's API server.
func (c *cluster) dynamic() dynamic.Interface {
	c.tb.Helper()
	dyn, err := dynamic.NewForConfig(c.restConfig(20 * time.Second))
	if err != nil {
		c.tb.Fatal(err)
	}
	return dyn
}

// consumer is a busybox Deployment that prints DB once and sleeps, its
// pods spread over the sites.
func consumer(name, ns string, replicas int32, ann map[string]string) *appsv1.Deployment {
	d := appDeployment(name, ns, replicas, corev1.PodSpec{
		TerminationGracePeriodSeconds: ptr(int64(1)),
		TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "site",
			WhenUnsatisfiable: corev1.ScheduleAnyway, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}}},
		Containers: []corev1.Container{{
			Name: "app", Image: bundle.BusyboxImage, ImagePullPolicy: corev1.PullNever,
			Command: []string{"sh", "-c", `echo "DB=$DB"; exec sleep 3600`},
		}},
	})
	d.Annotations = ann
	return d
}

// lastLine says whether the one running pod of the Deployment last
// printed want (and restarted never), and names it.
func lastLine(ctx context.Context, k clientset.Interface, name, want string) (string, error) {
	pods, err := k.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil {
		return "", err
	}
	var running []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			running = append(running, p)
		}
	}
	if len(running) != 1 {
		return "", fmt.Errorf("%d running pods of %s, want 1", len(running), name)
	}
	p := running[0]
	for _, st := range p.Status.ContainerStatuses {
		if st.RestartCount > 0 {
			return "", fmt.Errorf("pod %s restarted %d times", p.Name, st.RestartCount)
		}
	}
	logs, err := k.CoreV1().Pods("default").GetLogs(p.Name, &corev1.PodLogOptions{Container: "app", TailLines: ptr(int64(1))}).DoRaw(ctx)
	if err != nil {
		return "", err
	}
	if got := strings.TrimSpace(string(logs)); got != want {
		return "", fmt.Errorf("pod %s last printed %q, want %q", p.Name, got, want)
	}
	return p.Name, nil
}

// podsSee says whether the Deployment has rolled out want pods and every
// running pod printed DB=value.
func podsSee(ctx context.Context, k clientset.Interface, ns, name string, want int32, value string) error {
	d, err := k.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	st := d.Status
	if st.ObservedGeneration < d.Generation || st.UpdatedReplicas != want || st.Replicas != want || st.AvailableReplicas != want {
		return fmt.Errorf("%s/%s: %d updated, %d total, %d available, want %d", ns, name, st.UpdatedReplicas, st.Replicas, st.AvailableReplicas, want)
	}
	pods, err := k.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil {
		return err
	}
	seen := 0
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		logs, err := k.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: "app"}).DoRaw(ctx)
		if err != nil {
			return err
		}
		if got := strings.TrimSpace(string(logs)); got != "DB="+value {
			return fmt.Errorf("pod %s printed %q, want DB=%s", p.Name, got, value)
		}
		seen++
	}
	if seen != int(want) {
		return fmt.Errorf("%d running pods of %s/%s, want %d", seen, ns, name, want)
	}
	return nil
}

// sitesOf lists the sites of the nodes a Deployment's pods run on.
func (c *cluster) sitesOf(ctx context.Context, k clientset.Interface, ns, app string) []string {
	pods, err := k.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		return nil
	}
	var sites []string
	for _, p := range pods.Items {
		if n, err := k.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{}); err == nil && !slices.Contains(sites, n.Labels["site"]) {
			sites = append(sites, n.Labels["site"])
		}
	}
	slices.Sort(sites)
	return sites
}

func setExternalName(t *testing.T, k clientset.Interface, ns, name, host string) {
	t.Helper()
	s, err := k.CoreV1().Services(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Spec.ExternalName = host
	if _, err := k.CoreV1().Services(ns).Update(context.Background(), s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func annotate(t *testing.T, k clientset.Interface, ns, name, key, value string) {
	t.Helper()
	s, err := k.CoreV1().Services(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Annotations[key] = value
	if _, err := k.CoreV1().Services(ns).Update(context.Background(), s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// relationshipCondition says whether a Relationship's condition has status.
func relationshipCondition(ctx context.Context, dyn dynamic.Interface, ns, name, typ, status string) error {
	u, err := dyn.Resource(relationshipsGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	var seen []string
	for _, c := range conds {
		m, _ := c.(map[string]any)
		seen = append(seen, fmt.Sprintf("%v=%v (%v)", m["type"], m["status"], m["message"]))
		if m["type"] == typ && m["status"] == status {
			return nil
		}
	}
	return fmt.Errorf("Relationship %s/%s: want %s=%s, have %s", ns, name, typ, status, strings.Join(seen, "; "))
}

// heldInWait says whether at least want pods of the Deployment app in
// default wait in the wait container, and none runs: a consumer held
// until its provider is there.
func heldInWait(ctx context.Context, k clientset.Interface, app string, want int) error {
	pods, err := k.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		return err
	}
	waiting := 0
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning {
			return fmt.Errorf("pod %s runs without its provider", p.Name)
		}
		for _, s := range p.Status.InitContainerStatuses {
			if s.Name == annotations.WaitContainer && s.State.Running != nil {
				waiting++
			}
		}
	}
	if waiting < want {
		return fmt.Errorf("%d of %d pods of %s in the wait container", waiting, want, app)
	}
	return nil
}
