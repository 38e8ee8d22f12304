package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cloudtransit/transit/districts"
)

// BenchmarkMeshPods measures pod-to-pod traffic between two local
// districts, on one Kubernetes cluster without the mesh and then on one
// with it (flannel's VXLAN over the nodes' own addresses, and VXLAN inside
// userspace WireGuard): throughput of a 256 MiB HTTP transfer and the time
// of one small request, from a pod in e2e-a to a pod in e2e-b. One
// iteration builds the cluster (about 3 minutes each).
func BenchmarkMeshPods(b *testing.B) {
	for _, mesh := range []string{districts.MeshNone, districts.MeshWireGuard} {
		b.Run("mesh="+mesh, func(b *testing.B) {
			var mibs, ms float64
			for b.Loop() {
				m, r := meshPods(b, mesh)
				mibs, ms = mibs+m, ms+r
			}
			b.ReportMetric(mibs/float64(b.N), "MiB/s")
			b.ReportMetric(ms/float64(b.N), "ms/req")
		})
	}
}

var busyboxReal = regexp.MustCompile(`real\s+(\d+)m\s*([\d.]+)s`)

// meshPods builds the two-node cluster with network.mesh mesh and
// measures from e2e-a to e2e-b; the cluster is destroyed at the end (the
// host stays held until the benchmark ends: one cluster per b).
func meshPods(b *testing.B, mesh string) (mibs, msPerRequest float64) {
	cfg, ds := kubernetesCluster(b)
	cfg.ID = "bench-mesh"
	cfg.NetworkSettings = &districts.Network{Mesh: mesh}
	cfg.Deployments = []districts.Deployment{
		{District: "e2e-a", Flavor: "small", Role: districts.RoleMaster, Quantity: 1, Tags: map[string]string{"site": "a"}},
		{District: "e2e-b", Flavor: "small", Role: districts.RoleWorker, Quantity: 1, Tags: map[string]string{"site": "b"}},
	}
	c := newCluster(b, kubeRoot, cfg, ds)
	defer func() {
		if r := c.transit("destroy", "--auto-approve"); r.code != 0 {
			b.Fatalf("destroy: exit %d\n%s", r.code, r.stderr)
		}
	}()
	c.apply()
	k := c.kube()
	ctx := context.Background()
	c.deployWeb(ctx, k, "web", 1, map[string]string{"site": "b"})
	eventually(b, 3*time.Minute, "web available", func(ctx context.Context) error { return available(ctx, k, "web", 1) })
	pods, err := k.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil || len(pods.Items) == 0 {
		b.Fatalf("web pods: %v", err)
	}
	if out, err := c.exec(ctx, pods.Items[0], "dd", "if=/dev/zero", "of=/www/big", "bs=1M", "count=256"); err != nil {
		b.Fatalf("make the file: %v %s", err, out)
	}
	base := "http://" + pods.Items[0].Status.PodIP + ":8080/"
	// Three transfers, then 100 small requests, each timed by busybox.
	out := c.probe(ctx, k, map[string]string{"site": "a"}, fmt.Sprintf(
		"for i in 1 2 3; do time wget -q -O /dev/null %sbig; done 2>&1; time sh -c 'for i in $(seq 500); do wget -q -O /dev/null %s; done' 2>&1", base, base))
	var times []float64
	for _, m := range busyboxReal.FindAllStringSubmatch(out, -1) {
		mins, _ := strconv.ParseFloat(m[1], 64)
		sec, _ := strconv.ParseFloat(m[2], 64)
		times = append(times, mins*60+sec)
	}
	if len(times) != 4 {
		b.Fatalf("mesh %s: the probe printed %q", mesh, out)
	}
	best := min(times[0], times[1], times[2])
	b.Logf("mesh %s: 256 MiB in %.2fs (best of %v); 500 requests in %.2fs", mesh, best, times[:3], times[3])
	return 256 / best, times[3] * 1000 / 500
}
