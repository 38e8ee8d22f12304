package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/cloudtransit/transit/bundle"
	"github.com/cloudtransit/transit/cloudsim/localnodes"
	"github.com/cloudtransit/transit/districts"
)

// acrossCluster is one Kubernetes cluster over the emulated clouds, whose
// networks are apart (two AWS regions on one private subnet): a master in
// each of AWS, GCE and OpenStack, workers in both AWS regions. Every
// district installs from the bundle (its machines are local nodes with no
// internet); the mesh is on by default (the nodes span clouds).
func acrossCluster(t testing.TB, env *clouds) (districts.Cluster, []districts.District) {
	dir, err := bundleDir()
	if err != nil {
		t.Fatal(err)
	}
	site := func(s string) map[string]string { return map[string]string{"site": s} }
	c := districts.Cluster{
		Type: "cluster", ID: "e2e-across", Platform: "kubernetes",
		Flavors: []districts.Flavor{{Flavor: "small", Cores: 1, MemoryGB: 1, DiskGB: 10}},
		Deployments: []districts.Deployment{
			{District: "aws-eu", Flavor: "small", Role: districts.RoleMaster, Quantity: 1, Tags: site("aws-eu")},
			{District: "gce-eu", Flavor: "small", Role: districts.RoleMaster, Quantity: 1, Tags: site("gce-eu")},
			{District: "os-eu", Flavor: "small", Role: districts.RoleMaster, Quantity: 1, Tags: site("os-eu")},
			{District: "aws-eu", Flavor: "small", Role: districts.RoleWorker, Quantity: 1, Tags: site("aws-eu")},
			{District: "aws-us", Flavor: "small", Role: districts.RoleWorker, Quantity: 1, Tags: site("aws-us")},
		},
		Strategy: districts.Strategy{MaxSurge: districts.Int(1), MaxUnavailable: districts.Int(1), DrainTimeout: districts.Duration(30 * time.Second)},
	}
	ds := env.districts()
	for i := range ds {
		ds[i].KubernetesInstall, ds[i].KubernetesBundle = districts.InstallBundle, dir
	}
	return c, ds
}

// testKubernetesAcrossClouds is one Kubernetes cluster across emulated
// AWS, GCE and OpenStack districts whose networks are apart: everything
// between nodes goes over the WireGuard mesh.
func testKubernetesAcrossClouds(t *testing.T, env *clouds) {
	cfg, ds := acrossCluster(t, env)
	c := newCluster(t, cloudsRoot, cfg, ds)
	env.writeCredentials(c)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the emulated clouds' backing, for the failure above:\n%s", backingReport())
		}
	})
	c.runSteps(t, []lifecycleStep{
		{"three masters in three clouds, workers in two AWS regions on one subnet, on the mesh", testAcrossLaunch},
		{"between clouds only WireGuard travels", testAcrossCapture},
		{"migrate a cloud's master to another cloud while a NodePort answers", testAcrossMigrate},
		{"kill -9 transit during a cross-cloud join, then converge", testAcrossKill},
		{"the groups let in the mesh alone; an operator's rule survives apply and destroy", testAcrossFirewall(env)},
	})
}

func testAcrossLaunch(t *testing.T, c *cluster) {
	start := time.Now()
	sentBefore := uplinkSent(t, "aws:eu-central-1")
	c.apply()
	t.Logf("apply from nothing converged in %s", time.Since(start).Round(time.Second))
	// aws-eu's master and worker: the bundle crosses into the region
	// once, the worker fetches its files from the master.
	sent, whole := uplinkSent(t, "aws:eu-central-1")-sentBefore, wholeBundle(t)
	t.Logf("sent into aws:eu-central-1 (a master and a worker): %d MB; the whole bundle %d MB", sent>>20, whole>>20)
	if sent > whole+whole/4 {
		t.Errorf("%d MB crossed into aws:eu-central-1 for its 2 nodes, want about one bundle (%d MB): its nodes did not share it", sent>>20, whole>>20)
	}
	res := c.status()
	mesh := netip.MustParsePrefix(districts.DefaultMeshCIDR)
	for _, n := range res.Nodes {
		if a, err := netip.ParseAddr(n.MeshIP); err != nil || !mesh.Contains(a) || n.MeshKey == "" {
			t.Errorf("node %s: mesh address %q key %q, want one of %s and a key", n.ID, n.MeshIP, n.MeshKey, mesh)
		}
	}
	k := c.kube()
	eventually(t, 2*time.Minute, "Nodes Ready at their mesh addresses", func(ctx context.Context) error {
		if err := checkNodes(ctx, k, res); err != nil {
			return err
		}
		return checkMeshAddresses(ctx, k, res)
	})
	eventually(t, time.Minute, "etcd has a member per master, at its mesh address", func(ctx context.Context) error {
		return c.checkEtcdOnMesh(ctx, res)
	})
	checkMasterSANs(t, res)

	ctx := context.Background()
	c.deployWeb(ctx, k, "web", 1, map[string]string{"site": "aws-us"})
	eventually(t, 2*time.Minute, "web available", func(ctx context.Context) error { return available(ctx, k, "web", 1) })
	eventually(t, 2*time.Minute, "CoreDNS available", func(ctx context.Context) error { return availableIn(ctx, k, "kube-system", "coredns", 2) })
	pods, err := k.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("web pods: %v", err)
	}
	svc, err := k.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// From a node of every other cloud: pod to pod, the ClusterIP, the
	// DNS name; the probe's logs come through the API server from a
	// kubelet in another cloud.
	for _, site := range []string{"aws-eu", "gce-eu", "os-eu"} {
		for _, target := range []string{
			"http://" + pods.Items[0].Status.PodIP + ":8080/",
			"http://" + svc.Spec.ClusterIP + "/",
			"http://web.default.svc.cluster.local/",
		} {
			script := "for i in $(seq 15); do wget -q -O - " + target + " && exit 0; sleep 1; done; exit 1"
			if out := c.probe(ctx, k, map[string]string{"site": site}, script); !strings.Contains(out, "hello from") {
				t.Errorf("from %s, %s answered %q", site, target, out)
			}
		}
	}
	// exec into the pod on the worker in the other AWS region.
	out, err := c.exec(ctx, pods.Items[0], "cat", "/www/index.html")
	if err != nil || !strings.Contains(out, "hello from "+pods.Items[0].Name) {
		t.Errorf("exec into %s on %s: %q, %v", pods.Items[0].Name, pods.Items[0].Spec.NodeName, out, err)
	}
}

// checkMeshAddresses: every Node's InternalIP is its mesh address, and
// no other address of the machine is announced.
func checkMeshAddresses(ctx context.Context, k clientset.Interface, res districts.Resources) error {
	list, err := k.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	byID := map[string]districts.Node{}
	for _, n := range res.Nodes {
		byID[n.ID] = n
	}
	for _, kn := range list.Items {
		var internal []string
		for _, a := range kn.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				internal = append(internal, a.Address)
			}
		}
		if n := byID[kn.Name]; !slices.Equal(internal, []string{n.MeshIP}) {
			return fmt.Errorf("node %s: InternalIP %v, want its mesh address %s", kn.Name, internal, n.MeshIP)
		}
	}
	return nil
}

// checkEtcdOnMesh: etcd's members are the masters, each peering at its
// mesh address.
func (c *cluster) checkEtcdOnMesh(ctx context.Context, res districts.Resources) error {
	var master districts.Node
	want := map[string]string{}
	for _, n := range res.Nodes {
		if n.Role == districts.RoleMaster && n.Phase != districts.PhaseTerminating {
			master = n
			want[n.ID] = "https://" + n.MeshIP + ":2380"
		}
	}
	out, err := c.on(ctx, master, `/opt/transit/bin/etcdctl --endpoints https://127.0.0.1:2379 --cacert /etc/kubernetes/pki/etcd/ca.crt `+
		`--cert /etc/kubernetes/pki/apiserver-etcd-client.crt --key /etc/kubernetes/pki/apiserver-etcd-client.key member list -w simple`)
	if err != nil {
		return err
	}
	got := map[string]string{}
	for line := range strings.Lines(out) {
		// id, status, name, peer URLs, client URLs, learner
		if f := strings.Split(strings.TrimSpace(line), ", "); len(f) >= 4 {
			got[f[2]] = f[3]
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		return fmt.Errorf("etcd members (name → peer URL) %v, want %v", got, want)
	}
	return nil
}

// exec runs a command in pod's first container through the API server
// (which reaches the pod's kubelet), as `kubectl exec` does.
func (c *cluster) exec(ctx context.Context, pod corev1.Pod, cmd ...string) (string, error) {
	cfg := c.restConfig(0)
	k, err := clientset.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	req := k.CoreV1().RESTClient().Post().Resource("pods").Namespace(pod.Namespace).Name(pod.Name).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: pod.Spec.Containers[0].Name, Command: cmd, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ex, err := remotecommand.NewSPDYExecutor(cfg, "POST", req.URL())
	if err != nil {
		return "", err
	}
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr}); err != nil {
		return stdout.String(), fmt.Errorf("%w: %s", err, stderr.String())
	}
	return stdout.String(), nil
}

// testAcrossCapture: while a pod in GCE fetches from a pod on the worker
// in AWS us-east-1 again and again, the region's uplink (everything
// between it and the other clouds) carries WireGuard and SSH (transit
// and the test reaching the nodes) only, ICMP aside: no plaintext HTTP,
// no VXLAN.
func testAcrossCapture(t *testing.T, c *cluster) {
	ctx := context.Background()
	k := c.kube()
	pods, err := k.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("web pods: %v", err)
	}
	stop := capture(t, localnodes.Uplink(cloudRoot, "aws:us-east-1"))
	target := "http://" + pods.Items[0].Status.PodIP + ":8080/"
	out := c.probe(ctx, k, map[string]string{"site": "gce-eu"}, "for i in $(seq 20); do wget -q -O - "+target+" || exit 1; done")
	waitQuiet()
	seen := stop()
	if strings.Count(out, "hello from") != 20 {
		t.Fatalf("the fetches answered %q", out)
	}
	t.Logf("across the uplink of aws:us-east-1 during 20 fetches: %v", seen.count)
	if n := seen.count[flow{"udp", districts.DefaultMeshPort}]; n < 20 {
		t.Errorf("%d WireGuard packets for 20 fetches across clouds: the traffic took another way", n)
	}
	for _, msg := range seen.outsideMesh(districts.DefaultMeshPort, c.status().Nodes) {
		t.Error(msg)
	}
}

// meshServing: the Service's node port answers on a node that stays (the
// worker in aws-us), at its mesh address: kube-proxy sends the request to
// a pod wherever it runs, across clouds.
func (c *cluster) meshServing(port int32) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		res, err := c.saved()
		if err != nil {
			return nil // the state is being written: not the cluster's fault
		}
		for _, n := range res.Nodes {
			if n.District == "aws-us" && n.Role == districts.RoleWorker && n.Phase == districts.PhaseJoined {
				out, err := c.on(ctx, n, fmt.Sprintf("curl -sS -m 3 http://%s:%d/", n.MeshIP, port))
				if err != nil {
					return fmt.Errorf("the node port on %s: %w", n.ID, err)
				}
				if !strings.Contains(out, "hello from") {
					return fmt.Errorf("the node port on %s answered %q", n.ID, out)
				}
				return nil
			}
		}
		return nil
	}
}

// testAcrossMigrate moves OpenStack's master to AWS us-east-1 (one at a
// time: max_surge 1), while a Deployment spread over the clouds answers.
func testAcrossMigrate(t *testing.T, c *cluster) {
	ctx := context.Background()
	k := c.kube()
	c.deployWeb(ctx, k, "served", 2, nil)
	eventually(t, 2*time.Minute, "served available", func(ctx context.Context) error { return available(ctx, k, "served", 2) })
	svc, err := k.CoreV1().Services("default").Get(ctx, "served", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	serving := c.meshServing(svc.Spec.Ports[0].NodePort)
	// kube-proxy programs a new Service's node port a moment after it
	// is made.
	eventually(t, time.Minute, "the node port answers before the move", serving)
	c.cfg.Deployments = append(c.cfg.Deployments, districts.Deployment{District: "aws-us", Flavor: "small", Role: districts.RoleMaster, Quantity: 1,
		Tags: map[string]string{"site": "aws-us"}})
	c.setQuantity("os-eu", districts.RoleMaster, 0)
	samples, errs := c.whileApplying(serving)
	t.Logf("master moved from OpenStack to AWS us-east-1: %d samples", samples)
	if len(errs) > 0 {
		t.Errorf("while the master moved, the node port did not answer: %v", errs)
	}
	res := c.status()
	if countRole(res, "os-eu", districts.RoleMaster) != 0 || countRole(res, "aws-us", districts.RoleMaster) != 1 {
		t.Fatalf("masters after the move: %v", res.Nodes)
	}
	k = c.kube()
	eventually(t, 2*time.Minute, "Nodes match the state, at their mesh addresses", func(ctx context.Context) error {
		if err := checkNodes(ctx, k, res); err != nil {
			return err
		}
		return checkMeshAddresses(ctx, k, res)
	})
	eventually(t, time.Minute, "etcd has a member per master, at its mesh address", func(ctx context.Context) error { return c.checkEtcdOnMesh(ctx, res) })
	checkMasterSANs(t, res)
}

// checkMasterSANs: every master's API server certificate names the
// master's public address, not only the first master's.
func checkMasterSANs(t *testing.T, res districts.Resources) {
	t.Helper()
	for _, n := range res.Nodes {
		if n.Role != districts.RoleMaster {
			continue
		}
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", net.JoinHostPort(n.PublicIP, "6443"), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // only the certificate's names are read
		if err != nil {
			t.Errorf("master %s's API server at %s: %v", n.ID, n.PublicIP, err)
			continue
		}
		cert := conn.ConnectionState().PeerCertificates[0]
		_ = conn.Close()
		if !slices.ContainsFunc(cert.IPAddresses, func(ip net.IP) bool { return ip.String() == n.PublicIP }) {
			t.Errorf("master %s's API server certificate names %v, not its public address %s", n.ID, cert.IPAddresses, n.PublicIP)
		}
	}
}

// testAcrossKill: transit is killed while a GCE worker joins; the next
// apply converges, the worker on the mesh like every other node.
func testAcrossKill(t *testing.T, c *cluster) {
	c.cfg.Deployments = append(c.cfg.Deployments, districts.Deployment{District: "gce-eu", Flavor: "small", Role: districts.RoleWorker, Quantity: 1,
		Tags: map[string]string{"site": "gce-eu"}})
	c.writeConfig()
	if !c.applyKilledAt("join", "start", 4*time.Second) {
		t.Error("apply ended before the kill point")
	}
	c.apply()
	res := c.status()
	k := c.kube()
	eventually(t, 2*time.Minute, "Nodes match the state, at their mesh addresses", func(ctx context.Context) error {
		if err := checkNodes(ctx, k, res); err != nil {
			return err
		}
		return checkMeshAddresses(ctx, k, res)
	})
	ctx := context.Background()
	pods, err := k.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("web pods: %v", err)
	}
	out := c.probe(ctx, k, map[string]string{"site": "gce-eu"}, "wget -q -O - http://"+pods.Items[0].Status.PodIP+":8080/")
	if !strings.Contains(out, "hello from") {
		t.Errorf("from GCE's pods after the kill: %q", out)
	}
}

// uplinkSent is how many bytes this host has sent into an emulated
// region: everything for its machines crosses its uplink.
func uplinkSent(t testing.TB, region string) int64 {
	t.Helper()
	data, err := os.ReadFile("/sys/class/net/" + localnodes.Uplink(cloudRoot, region) + "/statistics/tx_bytes")
	if err != nil {
		return 0 // the region's network is made with its first machine
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// wholeBundle is the size of every file of the bundle the nodes install.
func wholeBundle(t testing.TB) int64 {
	t.Helper()
	dir, err := bundleDir()
	if err != nil {
		t.Fatal(err)
	}
	m, err := bundle.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, f := range m.Files {
		n += f.Size
	}
	for _, im := range m.Images {
		n += im.Size
	}
	return n
}
