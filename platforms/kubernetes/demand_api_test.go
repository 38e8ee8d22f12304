package kubernetes

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// TestDemandOnAPIServer reads the demand of a cluster through the
// driver's Demand on a real API server (envtest on the bundle's; no
// scheduler, no kubelet: the test writes the Nodes' status and the pods'
// PodScheduled conditions as they would). Only the SSH tunnel to a master
// is left out: the driver's client is the test's. The pods are created as
// a user would, so the API server's defaults and admission (a
// RuntimeClass's overhead) are those Demand reads.
func TestDemandOnAPIServer(t *testing.T) {
	ctx := t.Context()
	c, _, a := addonsAPIServer(t)
	m1 := districts.Node{ID: "k-master-1", Role: districts.RoleMaster, PrivateIP: "10.0.0.2"}
	w1 := districts.Node{ID: "k-worker-1", Role: districts.RoleWorker, PrivateIP: "10.0.0.3"}
	w2 := districts.Node{ID: "k-worker-2", Role: districts.RoleWorker, PrivateIP: "10.0.0.4"}
	a.master = m1
	d := newDriver(districts.Cluster{ID: "k", Kubernetes: &districts.Kubernetes{}}, Options{}, &noAPIRunner{})
	d.api = a

	for _, kn := range demandKubeNodes() {
		created, err := c.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: kn.ObjectMeta, Spec: kn.Spec}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		created.Status = kn.Status
		created.Status.Capacity = kn.Status.Allocatable
		if _, err := c.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.NodeV1().RuntimeClasses().Create(ctx, &nodev1.RuntimeClass{
		ObjectMeta: metav1.ObjectMeta{Name: "kata"},
		Handler:    "kata",
		Overhead:   &nodev1.Overhead{PodFixed: res("250m", "120Mi")},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Pending: the scheduler found no node for these.
	createPod(t, c, testPod("default", "web-pending", unsched, nodeSelector("tier", "web"),
		required(term(expr("zone", corev1.NodeSelectorOpIn, "a"))),
		initContainers(ctr("migrate", "1", "16Mi")),
		func(p *corev1.Pod) { p.Spec.RuntimeClassName = ptr.To("kata") }))
	createPod(t, c, testPod("team-a", "batch", unsched, ownedBy("Job"), containers(ctr("main", "2", "1Gi"))))
	createPod(t, c, testPod("default", "ds-pending", unsched, ownedBy("DaemonSet")))
	createPod(t, c, testPod("default", "not-tried")) // no condition yet

	// Running on the nodes.
	createPod(t, c, testPod("default", "web", on("k-worker-1"), phase(corev1.PodRunning), nodeSelector("tier", "web")))
	createPod(t, c, testPod("default", "bare", on("k-worker-1"), phase(corev1.PodRunning), bare))
	createPod(t, c, testPod("default", "scratch", on("k-worker-1"), phase(corev1.PodRunning),
		volume(corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}})))
	createPod(t, c, testPod("default", "db", on("k-worker-2"), phase(corev1.PodRunning)))
	createPod(t, c, testPod("default", "cache", on("k-worker-2"), phase(corev1.PodRunning)))
	createPod(t, c, testPod("kube-system", "coredns", on("k-worker-2"), phase(corev1.PodRunning)))
	createPod(t, c, testPod("kube-system", "flannel-w1", on("k-worker-1"), phase(corev1.PodRunning), ownedBy("DaemonSet"),
		containers(ctr("flannel", "100m", "50Mi"))))
	createPod(t, c, testPod("kube-system", "kube-apiserver-k-master-1", on("k-master-1"), phase(corev1.PodRunning), ownedBy("Node"),
		containers(ctr("kube-apiserver", "250m", "")),
		func(p *corev1.Pod) { p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "hash"} }))
	createPod(t, c, testPod("default", "job-done", on("k-worker-1"), ownedBy("Job"), phase(corev1.PodSucceeded)))
	createPod(t, c, testPod("default", "on-byhand", on("byhand"), phase(corev1.PodRunning)))

	createPDB(t, c, pdb("default", "db", app("db"), 0))
	createPDB(t, c, pdb("default", "cache", app("cache"), 1))

	got, err := d.Demand(ctx, []districts.Node{m1, w1, w2})
	if err != nil {
		t.Fatal(err)
	}
	want := demandBase()
	want.Pending = []provider.Workload{
		// max(100m, 1) + 250m; max(64Mi, 16Mi) + 120Mi
		{Name: "default/web-pending", MilliCPU: 1250, MemoryBytes: 184 * mi, Selector: map[string]string{"tier": "web", "zone": "a"}},
		{Name: "team-a/batch", MilliCPU: 2000, MemoryBytes: 1024 * mi},
	}
	want.Nodes[0].OverheadMilliCPU, want.Nodes[0].OverheadPods = 250, 1
	want.Nodes[1].OverheadMilliCPU, want.Nodes[1].OverheadMemoryBytes, want.Nodes[1].OverheadPods = 100, 50*mi, 1
	want.Nodes[1].Workloads = []provider.Workload{
		{Name: "default/bare", MilliCPU: 100, MemoryBytes: 64 * mi, Unmovable: unmovableBare},
		{Name: "default/scratch", MilliCPU: 100, MemoryBytes: 64 * mi, Unmovable: unmovableLocalStorage},
		{Name: "default/web", MilliCPU: 100, MemoryBytes: 64 * mi, Selector: map[string]string{"tier": "web"}},
	}
	want.Nodes[2].Workloads = []provider.Workload{
		{Name: "default/cache", MilliCPU: 100, MemoryBytes: 64 * mi},
		{Name: "default/db", MilliCPU: 100, MemoryBytes: 64 * mi, Unmovable: "PodDisruptionBudget default/db allows no disruption now"},
		{Name: "kube-system/coredns", MilliCPU: 100, MemoryBytes: 64 * mi, Unmovable: unmovableSystem},
	}
	byName := cmpopts.SortSlices(func(a, b provider.Workload) bool { return a.Name < b.Name })
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty(), byName); diff != "" {
		t.Errorf("demand (-want +got):\n%s", diff)
	}

	// Once the budget allows a disruption, db may move.
	b, err := c.PolicyV1().PodDisruptionBudgets("default").Get(ctx, "db", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b.Status.DisruptionsAllowed = 1
	if _, err := c.PolicyV1().PodDisruptionBudgets("default").UpdateStatus(ctx, b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err = d.Demand(ctx, []districts.Node{m1, w1, w2})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range got.Nodes[2].Workloads {
		if w.Name == "default/db" && w.Unmovable != "" {
			t.Errorf("default/db with a budget allowing one disruption: %q", w.Unmovable)
		}
	}

	// A master transit no longer has is not asked through.
	_, err = d.Demand(ctx, []districts.Node{w1, w2})
	if !errors.Is(err, provider.ErrPlatformUnreachable) || !strings.Contains(err.Error(), "no master is known") {
		t.Errorf("Demand without the master the client goes through: %v", err)
	}
}

// createPod creates p as a user would, then writes the status the
// scheduler and the kubelet would (phase, conditions).
func createPod(t *testing.T, c kubernetes.Interface, p corev1.Pod) {
	t.Helper()
	created, err := c.CoreV1().Pods(p.Namespace).Create(t.Context(), &corev1.Pod{ObjectMeta: p.ObjectMeta, Spec: p.Spec}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s/%s: %v", p.Namespace, p.Name, err)
	}
	if p.Status.Phase == "" && len(p.Status.Conditions) == 0 {
		return
	}
	created.Status = p.Status
	if _, err := c.CoreV1().Pods(p.Namespace).UpdateStatus(t.Context(), created, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("pod %s/%s status: %v", p.Namespace, p.Name, err)
	}
}

// createPDB creates b and writes the status its controller would.
func createPDB(t *testing.T, c kubernetes.Interface, b policyv1.PodDisruptionBudget) {
	t.Helper()
	created, err := c.PolicyV1().PodDisruptionBudgets(b.Namespace).Create(t.Context(), &policyv1.PodDisruptionBudget{ObjectMeta: b.ObjectMeta, Spec: b.Spec}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Status = b.Status
	created.Status.ObservedGeneration = created.Generation
	if _, err := c.PolicyV1().PodDisruptionBudgets(b.Namespace).UpdateStatus(t.Context(), created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}
