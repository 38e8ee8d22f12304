package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/cloudtransit/transit/bundle"
	"github.com/cloudtransit/transit/districts"
)

// bundleDir is the bundle the Kubernetes tests install from:
// $TRANSIT_BUNDLE as it is (`make test` builds it once, before every
// package), else the one `make bundle` writes, built here if it is missing
// or stale (seconds when it is up to date; see docs/kubernetes.md for a
// cold build).
var bundleDir = sync.OnceValues(func() (string, error) {
	if dir := os.Getenv("TRANSIT_BUNDLE"); dir != "" {
		if _, err := bundle.Read(dir); err != nil {
			return "", fmt.Errorf("TRANSIT_BUNDLE=%s: %w", dir, err)
		}
		return dir, nil
	}
	_, file, _, _ := runtime.Caller(0)
	repo := filepath.Dir(filepath.Dir(file))
	dir := filepath.Join(repo, "build", "bundle")
	cmd := exec.Command("go", "run", "./cmd/transit-bundle", "-repo", repo, "-out", dir)
	cmd.Dir = repo
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("make bundle: %w", err)
	}
	return dir, nil
})

// kubernetesCluster is the shape of examples/kubernetes: a master and two
// workers in district A, one worker in district B, each tagged with its
// site. Its subnets are the Kubernetes group's own.
func kubernetesCluster(t testing.TB) (districts.Cluster, []districts.District) {
	return kubernetesShape(t, "e2e-k8s", "10.242")
}

// addonsCluster is kubernetesCluster for the addons group: its own cluster
// id and subnets, so the two groups' clusters run at once.
func addonsCluster(t testing.TB) (districts.Cluster, []districts.District) {
	return kubernetesShape(t, "e2e-addons", "10.243")
}

// kubernetesShape is kubernetesCluster with cluster id id, its districts'
// subnets in net (the first two octets).
func kubernetesShape(t testing.TB, id, net string) (districts.Cluster, []districts.District) {
	dir, err := bundleDir()
	if err != nil {
		t.Fatal(err)
	}
	site := func(s string) map[string]string { return map[string]string{"site": s} }
	c := districts.Cluster{
		Type: "cluster", ID: id, Platform: "kubernetes",
		Flavors: []districts.Flavor{{Flavor: "small", Cores: 1, MemoryGB: 1, DiskGB: 10}},
		Deployments: []districts.Deployment{
			{District: "e2e-a", Flavor: "small", Role: districts.RoleMaster, Quantity: 1, Tags: site("a")},
			{District: "e2e-a", Flavor: "small", Role: districts.RoleWorker, Quantity: 2, Tags: site("a")},
			{District: "e2e-b", Flavor: "small", Role: districts.RoleWorker, Quantity: 1, Tags: site("b")},
		},
		Strategy: districts.Strategy{MaxSurge: districts.Int(1), MaxUnavailable: districts.Int(1), DrainTimeout: districts.Duration(30 * time.Second)},
	}
	ds := []districts.District{
		{Type: "district", ID: "e2e-a", Provider: "local", LocalSubnet: net + ".1.0/24", KubernetesBundle: dir, Flavors: []districts.DistrictFlavor{{Flavor: "small"}}},
		{Type: "district", ID: "e2e-b", Provider: "local", LocalSubnet: net + ".2.0/24", KubernetesBundle: dir, Flavors: []districts.DistrictFlavor{{Flavor: "small"}}},
	}
	return c, ds
}

// testKubernetesLifecycle drives one real Kubernetes cluster (kubeadm,
// etcd, flannel, CoreDNS on local nodes) through what transit does to its
// nodes, judged by the API server.
func testKubernetesLifecycle(t *testing.T) {
	cfg, ds := kubernetesCluster(t)
	c := newCluster(t, kubeRoot, cfg, ds)
	c.runSteps(t, []lifecycleStep{
		{"1 master + 3 workers across two districts from nothing", testKubeLaunch},
		{"scale workers down: evictions honour a PodDisruptionBudget", testKubeDrainPDB},
		{"a budget that forbids eviction: the node is skipped, exit 3", testKubeRefusedDrain},
		{"masters 1 → 3 → 2: etcd quorum held, the API answers", testKubeMasters},
		{"migrate workers and masters to the other district in one edit while serving", testKubeMigrate},
		{"kill -9 transit during a join and during a drain, then converge", testKubeKill},
		{"destroy leaves nothing behind", testDestroy},
	})
}

// testKubernetesAddons installs transit's two addons on one real
// Kubernetes cluster of the same shape and uses them as teams would.
func testKubernetesAddons(t *testing.T) {
	cfg, ds := addonsCluster(t)
	c := newCluster(t, addonsRoot, cfg, ds)
	c.runSteps(t, []lifecycleStep{
		{"1 master + 3 workers across two districts from nothing", testKubeLaunch},
		{"relations addon: consumers wait, changes roll out, namespaces, pin, controller down, removal", testKubeRelations},
		{"streams addon: two teams' parts, 5 upgrades under load, GC past the history, workers replaced, removal", testKubeStreams},
		{"autoscale: pods that do not fit get a node in the cheaper district; gone again once idle", testKubeAutoscale},
		{"destroy leaves nothing behind", testDestroy},
	})
}

// kube is a client of the cluster's API server, from `transit
// kubeconfig`, as a user would make one.
func (c *cluster) kube() clientset.Interface {
	c.tb.Helper()
	k, err := c.tryKube()
	if err != nil {
		c.tb.Fatal(err)
	}
	return k
}

// tryKube is kube for a goroutine other than the test's (a sample of
// whileApplying): what went wrong is returned, never ends the test.
func (c *cluster) tryKube() (clientset.Interface, error) {
	cfg, err := c.tryRestConfig(20 * time.Second)
	if err != nil {
		return nil, err
	}
	return clientset.NewForConfig(cfg)
}

// restConfig is the client configuration `transit kubeconfig` prints, with
// a request timeout (0: none, for watches).
func (c *cluster) restConfig(timeout time.Duration) *rest.Config {
	c.tb.Helper()
	cfg, err := c.tryRestConfig(timeout)
	if err != nil {
		c.tb.Fatal(err)
	}
	return cfg
}

func (c *cluster) tryRestConfig(timeout time.Duration) (*rest.Config, error) {
	r, err := c.run("kubeconfig")
	if err != nil {
		return nil, err
	}
	if r.code != 0 {
		return nil, fmt.Errorf("transit kubeconfig: exit %d\n%s", r.code, r.stderr)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig([]byte(r.stdout))
	if err != nil {
		return nil, fmt.Errorf("transit kubeconfig printed no kubeconfig: %w", err)
	}
	cfg.Timeout = timeout
	return cfg, nil
}

// eventually retries check every half second until it passes or timeout
// ends, then fails the test with its last error.
func eventually(tb testing.TB, timeout time.Duration, what string, check func(ctx context.Context) error) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err := check(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s: still failing after %s: %v", what, timeout, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// checkNodes compares the API server's Nodes with the state: the same
// set, all Ready, labels equal to each node's tags plus its role.
func checkNodes(ctx context.Context, k clientset.Interface, res districts.Resources) error {
	list, err := k.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	want := map[string]districts.Node{}
	for _, n := range res.Nodes {
		if n.Phase != districts.PhaseTerminating {
			want[n.ID] = n
		}
	}
	var got []string
	for _, kn := range list.Items {
		got = append(got, kn.Name)
		n, ok := want[kn.Name]
		if !ok {
			return fmt.Errorf("the API server has Node %s, which is not in the state", kn.Name)
		}
		ready := false
		for _, cond := range kn.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				ready = cond.Status == corev1.ConditionTrue
			}
		}
		if !ready {
			return fmt.Errorf("node %s is not Ready", kn.Name)
		}
		for k, v := range n.Tags {
			if kn.Labels[k] != v {
				return fmt.Errorf("node %s: label %s=%q, want the tag's %q", kn.Name, k, kn.Labels[k], v)
			}
		}
		if _, ok := kn.Labels["node-role.kubernetes.io/"+n.Role]; !ok {
			return fmt.Errorf("node %s has no role label for %s", kn.Name, n.Role)
		}
	}
	if len(got) != len(want) {
		return fmt.Errorf("the API server has Nodes %v, the state %d nodes", got, len(want))
	}
	return nil
}

func testKubeLaunch(t *testing.T, c *cluster) {
	start := time.Now()
	c.apply()
	t.Logf("apply from nothing converged in %s", time.Since(start).Round(time.Second))
	res := c.status()
	k := c.kube()
	eventually(t, 2*time.Minute, "Nodes Ready with their labels", func(ctx context.Context) error { return checkNodes(ctx, k, res) })

	// A server pinned to site b, and probes from site a: pod to pod, the
	// ClusterIP Service, and its DNS name through CoreDNS.
	ctx := context.Background()
	c.deployWeb(ctx, k, "web", 2, map[string]string{"site": "b"})
	eventually(t, 2*time.Minute, "web available", func(ctx context.Context) error { return available(ctx, k, "web", 2) })
	pods, err := k.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("web pods: %v", err)
	}
	svc, err := k.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// CoreDNS is an addon apply installs but does not wait for; a name
	// is only asked once both replicas are Ready, and the probe retries
	// for a few seconds while kube-proxy programs the kube-dns Service on
	// the probing node (a CI run once asked before that and got "bad
	// address").
	eventually(t, 2*time.Minute, "CoreDNS available", func(ctx context.Context) error { return availableIn(ctx, k, "kube-system", "coredns", 2) })
	for _, target := range []string{
		"http://" + pods.Items[0].Status.PodIP + ":8080/",
		"http://" + svc.Spec.ClusterIP + "/",
		"http://web.default.svc.cluster.local/",
	} {
		script := "for i in $(seq 15); do wget -q -O - " + target + " && exit 0; sleep 1; done; exit 1"
		out := c.probe(ctx, k, map[string]string{"site": "a"}, script)
		if !strings.Contains(out, "hello from") {
			t.Errorf("from site a, %s answered %q", target, out)
		}
	}
}

// deployWeb runs an HTTP server Deployment of busybox (httpd answering
// its pod's name) on nodes matching selector, and a Service web:80 in
// front of it.
func (c *cluster) deployWeb(ctx context.Context, k clientset.Interface, name string, replicas int32, selector map[string]string) {
	c.tb.Helper()
	d := appDeployment(name, "default", replicas, corev1.PodSpec{
		NodeSelector:                  selector,
		TerminationGracePeriodSeconds: ptr(int64(2)),
		Containers: []corev1.Container{{
			Name: "httpd", Image: bundle.BusyboxImage, ImagePullPolicy: corev1.PullNever,
			Command: []string{"sh", "-c", `mkdir -p /www && echo "hello from $(hostname)" > /www/index.html && exec httpd -f -p 8080 -h /www`},
			Ports:   []corev1.ContainerPort{{ContainerPort: 8080}},
			ReadinessProbe: &corev1.Probe{
				ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(8080)}},
				PeriodSeconds: 1,
			},
		}},
	})
	if _, err := k.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		c.tb.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		// NodePort too, so the test reaches the pods from the host.
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": name},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
	if _, err := k.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		c.tb.Fatal(err)
	}
}

func ptr[T any](v T) *T { return &v }

// appDeployment is a Deployment in ns of replicas pods labelled app=name,
// each as spec says.
func appDeployment(name, ns string, replicas int32, spec corev1.PodSpec) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec},
		},
	}
}

// podsOf describes app's pods for a failure message: node, phase,
// readiness, terminating.
func podsOf(ctx context.Context, k clientset.Interface, app string) string {
	pods, err := k.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		return "not listed: " + err.Error()
	}
	var d []string
	for _, p := range pods.Items {
		ready := "not ready"
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				ready = "ready"
			}
		}
		if p.DeletionTimestamp != nil {
			ready += ", terminating"
		}
		d = append(d, fmt.Sprintf("%s on %s %s %s", p.Name, p.Spec.NodeName, p.Status.Phase, ready))
	}
	return strings.Join(d, "; ")
}

func available(ctx context.Context, k clientset.Interface, name string, want int32) error {
	return availableIn(ctx, k, "default", name, want)
}

// availableIn is available for a Deployment in namespace ns.
func availableIn(ctx context.Context, k clientset.Interface, ns, name string, want int32) error {
	d, err := k.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if d.Status.AvailableReplicas < want {
		return fmt.Errorf("deployment %s: %d of %d available", name, d.Status.AvailableReplicas, want)
	}
	return nil
}

// probe runs script in a one-off busybox pod on a node matching selector
// and returns its output; the pod must succeed.
func (c *cluster) probe(ctx context.Context, k clientset.Interface, selector map[string]string, script string) string {
	c.tb.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-", Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeSelector: selector, RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "probe", Image: bundle.BusyboxImage, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", script}}},
		},
	}
	p, err := k.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		c.tb.Fatal(err)
	}
	defer func() { _ = k.CoreV1().Pods("default").Delete(context.Background(), p.Name, metav1.DeleteOptions{}) }()
	var phase corev1.PodPhase
	eventually(c.tb, time.Minute, "probe pod "+p.Name+" done", func(ctx context.Context) error {
		got, err := k.CoreV1().Pods("default").Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		phase = got.Status.Phase
		if phase != corev1.PodSucceeded && phase != corev1.PodFailed {
			return fmt.Errorf("phase %s", phase)
		}
		return nil
	})
	logs, err := k.CoreV1().Pods("default").GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		c.tb.Fatalf("logs of %s: %v", p.Name, err)
	}
	if phase != corev1.PodSucceeded {
		c.tb.Errorf("probe %q on %v failed:\n%s", script, selector, logs)
	}
	return string(logs)
}

// guard puts a PodDisruptionBudget over app's pods.
func (c *cluster) guard(ctx context.Context, k clientset.Interface, app string, minAvailable int32) {
	c.tb.Helper()
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: "default"},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr(intstr.FromInt32(minAvailable)),
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
		},
	}
	if _, err := k.PolicyV1().PodDisruptionBudgets("default").Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		c.tb.Fatal(err)
	}
	// The budget counts once its controller has seen the pods.
	eventually(c.tb, time.Minute, "budget "+app+" observed", func(ctx context.Context) error {
		got, err := k.PolicyV1().PodDisruptionBudgets("default").Get(ctx, app, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got.Status.ObservedGeneration < got.Generation || got.Status.CurrentHealthy < minAvailable {
			return fmt.Errorf("budget %s: %d healthy, generation %d observed %d", app, got.Status.CurrentHealthy, got.Generation, got.Status.ObservedGeneration)
		}
		return nil
	})
}

// unguard removes app's Deployment, Service and budget.
func (c *cluster) unguard(ctx context.Context, k clientset.Interface, app string) {
	c.tb.Helper()
	_ = k.PolicyV1().PodDisruptionBudgets("default").Delete(ctx, app, metav1.DeleteOptions{})
	_ = k.CoreV1().Services("default").Delete(ctx, app, metav1.DeleteOptions{})
	_ = k.AppsV1().Deployments("default").Delete(ctx, app, metav1.DeleteOptions{})
}

func countRole(res districts.Resources, district, role string) int {
	n := 0
	for _, x := range res.Nodes {
		if x.District == district && x.Role == role && x.Phase != districts.PhaseTerminating {
			n++
		}
	}
	return n
}

func testKubeDrainPDB(t *testing.T, c *cluster) {
	ctx := context.Background()
	k := c.kube()
	c.deployWeb(ctx, k, "guarded", 4, nil)
	eventually(t, 2*time.Minute, "guarded available", func(ctx context.Context) error { return available(ctx, k, "guarded", 4) })
	c.guard(ctx, k, "guarded", 3)
	c.setQuantity("e2e-a", districts.RoleWorker, 1)
	samples, violations := c.whileApplying(func(ctx context.Context) error {
		pdb, err := k.PolicyV1().PodDisruptionBudgets("default").Get(ctx, "guarded", metav1.GetOptions{})
		if err != nil {
			return nil // the API may be busy; only a violation counts
		}
		if pdb.Status.CurrentHealthy < 3 {
			return fmt.Errorf("budget violated: %d healthy", pdb.Status.CurrentHealthy)
		}
		return nil
	})
	t.Logf("%d samples of the budget during the drain", samples)
	if len(violations) > 0 {
		t.Errorf("the budget was violated during the drain: %v", violations)
	}
	res := c.status()
	if got := countRole(res, "e2e-a", districts.RoleWorker); got != 1 {
		t.Errorf("%d workers in e2e-a, want 1", got)
	}
	eventually(t, time.Minute, "Nodes match the state", func(ctx context.Context) error { return checkNodes(ctx, k, res) })
	eventually(t, 2*time.Minute, "guarded available again", func(ctx context.Context) error { return available(ctx, k, "guarded", 4) })
	c.unguard(ctx, k, "guarded")
}

func testKubeRefusedDrain(t *testing.T, c *cluster) {
	ctx := context.Background()
	k := c.kube()
	c.deployWeb(ctx, k, "pinned", 1, map[string]string{"site": "b"})
	eventually(t, 2*time.Minute, "pinned available", func(ctx context.Context) error { return available(ctx, k, "pinned", 1) })
	c.guard(ctx, k, "pinned", 1)
	pods, err := k.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=pinned"})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pinned pods: %v %v", pods, err)
	}
	c.setQuantity("e2e-b", districts.RoleWorker, 0)
	// The drain is refused once its timeout passes: a short one here.
	drainTimeout := c.cfg.Strategy.DrainTimeout
	c.cfg.Strategy.DrainTimeout = districts.Duration(5 * time.Second)
	c.writeConfig()
	r := c.transit("apply", "--auto-approve")
	c.cfg.Strategy.DrainTimeout = drainTimeout
	c.writeConfig()
	if r.code != 3 {
		t.Fatalf("apply: exit %d, want 3 (not converged)\n%s", r.code, r)
	}
	if !strings.Contains(r.stderr, "drain of node") || !strings.Contains(r.stderr, "default/"+pods.Items[0].Name) {
		t.Errorf("the message does not name the refused drain and the blocking pod default/%s:\n%s", pods.Items[0].Name, r.stderr)
	}
	res := c.status()
	if got := countRole(res, "e2e-b", districts.RoleWorker); got != 1 {
		t.Errorf("%d workers in e2e-b after a refused drain, want the 1 kept", got)
	}
	eventually(t, time.Minute, "every node Ready and schedulable", func(ctx context.Context) error {
		list, err := k.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, n := range list.Items {
			if n.Spec.Unschedulable {
				return fmt.Errorf("node %s stayed cordoned", n.Name)
			}
		}
		return checkNodes(ctx, k, res)
	})
	// Without the budget the same change goes through.
	if err := k.PolicyV1().PodDisruptionBudgets("default").Delete(ctx, "pinned", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c.apply()
	if got := countRole(c.status(), "e2e-b", districts.RoleWorker); got != 0 {
		t.Errorf("%d workers in e2e-b without the budget, want 0", got)
	}
	c.unguard(ctx, k, "pinned")
}

// etcdMembers lists the names of etcd's members, as a master's etcdctl
// (the bundle's) reports them.
func (c *cluster) etcdMembers(ctx context.Context, master districts.Node) ([]string, error) {
	out, err := c.on(ctx, master, `/opt/transit/bin/etcdctl --endpoints https://127.0.0.1:2379 --cacert /etc/kubernetes/pki/etcd/ca.crt `+
		`--cert /etc/kubernetes/pki/apiserver-etcd-client.crt --key /etc/kubernetes/pki/apiserver-etcd-client.key member list -w simple`)
	if err != nil {
		return nil, err
	}
	var names []string
	for line := range strings.Lines(out) {
		if f := strings.Split(line, ", "); len(f) >= 3 {
			names = append(names, f[2])
		}
	}
	return names, nil
}

// checkEtcd compares etcd's members with the state's masters.
func (c *cluster) checkEtcd(ctx context.Context, res districts.Resources) error {
	var masters []string
	var master districts.Node
	for _, n := range res.Nodes {
		if n.Role == districts.RoleMaster && n.Phase != districts.PhaseTerminating {
			masters = append(masters, n.ID)
			master = n
		}
	}
	got, err := c.etcdMembers(ctx, master)
	if err != nil {
		return err
	}
	if !sameSet(got, masters) {
		return fmt.Errorf("etcd members %v, masters %v", got, masters)
	}
	return nil
}

func testKubeMasters(t *testing.T, c *cluster) {
	for _, want := range []int{3, 2} {
		c.setQuantity("e2e-a", districts.RoleMaster, want)
		k := c.kube()
		// A read as users make it (a quorum read through etcd), not
		// /readyz: its etcd check gives up after 2 s of a loaded machine
		// while every request is still served.
		samples, errs := c.whileApplying(func(ctx context.Context) error {
			_, err := k.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
			return err
		})
		t.Logf("masters → %d: %d samples of the API server", want, samples)
		if len(errs) > 0 {
			t.Errorf("masters → %d: the API did not answer throughout: %v", want, errs)
		}
		res := c.status()
		if got := countRole(res, "e2e-a", districts.RoleMaster); got != want {
			t.Fatalf("%d masters, want %d", got, want)
		}
		eventually(t, time.Minute, "etcd has a member per master", func(ctx context.Context) error { return c.checkEtcd(ctx, res) })
		eventually(t, time.Minute, "Nodes match the state", func(ctx context.Context) error { return checkNodes(ctx, c.kube(), res) })
	}
}

func testKubeMigrate(t *testing.T, c *cluster) {
	ctx := context.Background()
	k := c.kube()
	c.deployWeb(ctx, k, "served", 2, nil)
	eventually(t, 2*time.Minute, "served available", func(ctx context.Context) error { return available(ctx, k, "served", 2) })
	c.guard(ctx, k, "served", 1)
	svc, err := k.CoreV1().Services("default").Get(ctx, "served", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	port := svc.Spec.Ports[0].NodePort
	if port == 0 {
		t.Fatal("the Service has no node port")
	}
	// Serving: an HTTP request from the host to the Service's node port
	// on any node the state lists now gets a pod's answer.
	serving := func(ctx context.Context) error {
		res, err := c.saved()
		if err != nil {
			return nil // the state is being written: not the cluster's fault
		}
		hc := &http.Client{Timeout: 2 * time.Second}
		var errs []string
		for _, n := range res.Nodes {
			resp, err := hc.Get(fmt.Sprintf("http://%s:%d/", n.PublicIP, port))
			if err != nil {
				errs = append(errs, err.Error())
				continue
			}
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if strings.Contains(string(body), "hello from") {
				return nil
			}
		}
		// Whose doing: pods evicted or terminating (the migration's), or
		// running and not ready (their probes on a loaded machine).
		pods := "not listed"
		if k, err := c.tryKube(); err != nil {
			pods += ": " + err.Error()
		} else {
			pods = podsOf(ctx, k, "served")
		}
		return fmt.Errorf("no node answered on the node port: %v; pods: %s", errs, pods)
	}
	// Workers and masters in one edit, as a user moves a cluster: the
	// loop launches what the other district needs at once and removes
	// one node at a time.
	c.setQuantity("e2e-b", districts.RoleWorker, 2)
	c.setQuantity("e2e-a", districts.RoleWorker, 0)
	c.cfg.Deployments = append(c.cfg.Deployments, districts.Deployment{District: "e2e-b", Flavor: "small", Role: districts.RoleMaster, Quantity: 2, Tags: map[string]string{"site": "b"}})
	c.setQuantity("e2e-a", districts.RoleMaster, 0)
	samples, errs := c.whileApplying(serving)
	t.Logf("cluster migrated: %d samples", samples)
	if len(errs) > 0 {
		t.Errorf("while the workers and masters moved, the deployment did not serve: %v", errs)
	}
	res := c.status()
	for _, n := range res.Nodes {
		if n.District != "e2e-b" {
			t.Errorf("node %s is still in %s", n.ID, n.District)
		}
	}
	k = c.kube()
	eventually(t, 2*time.Minute, "Nodes match the state", func(ctx context.Context) error { return checkNodes(ctx, k, res) })
	eventually(t, time.Minute, "etcd has a member per master", func(ctx context.Context) error { return c.checkEtcd(ctx, res) })
	eventually(t, time.Minute, "served available", func(ctx context.Context) error { return available(ctx, k, "served", 2) })
	c.unguard(ctx, k, "served")
}

func testKubeKill(t *testing.T, c *cluster) {
	points := []struct {
		name        string
		workers     int
		kind, phase string
		delay       time.Duration
	}{
		{"during kubeadm join", 3, "join", "start", 4 * time.Second},
		{"during a drain", 2, "drain", "start", time.Second},
	}
	ctx := context.Background()
	for _, p := range points {
		if p.name == "during a drain" {
			// Pods whose eviction takes a moment, so the kill lands in it.
			k := c.kube()
			c.deployWeb(ctx, k, "slow", 3, nil)
			eventually(t, 2*time.Minute, "slow available", func(ctx context.Context) error { return available(ctx, k, "slow", 3) })
		}
		c.setQuantity("e2e-b", districts.RoleWorker, p.workers)
		killed := c.applyKilledAt(p.kind, p.phase, p.delay)
		if !killed {
			t.Errorf("%s: apply ended before the kill point", p.name)
		}
		c.apply()
		res := c.status()
		if got := countRole(res, "e2e-b", districts.RoleWorker); got != p.workers {
			t.Errorf("%s: %d workers, want %d", p.name, got, p.workers)
		}
		k := c.kube()
		eventually(t, time.Minute, p.name+": Nodes match the state", func(ctx context.Context) error { return checkNodes(ctx, k, res) })
		eventually(t, time.Minute, p.name+": no stale etcd member", func(ctx context.Context) error { return c.checkEtcd(ctx, res) })
		c.checkNoOrphans(res)
	}
	c.unguard(ctx, c.kube(), "slow")
}
