package kubernetes_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cloudtransit/transit/bundle"
	"github.com/cloudtransit/transit/bundle/build"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/platforms/kubernetes"
	"github.com/cloudtransit/transit/platforms/platformtest"
	"github.com/cloudtransit/transit/provider"
	"github.com/cloudtransit/transit/shellquote"
)

// TestConformance runs the platform conformance suite against the
// Kubernetes driver on real local nodes installed from the offline bundle
// (root; skipped with -short).
func TestConformance(t *testing.T) {
	platformtest.Run(t, platformtest.Harness{
		Platform: "kubernetes",
		Setup: func(t *testing.T, d *districts.District, _ string) {
			d.KubernetesBundle = bundleDir(t)
		},
		New: func(env platformtest.Env) provider.Platform {
			install, bundles := map[string]string{}, map[string]string{}
			for _, d := range env.Districts {
				install[d.ID], bundles[d.ID] = d.Install(), d.KubernetesBundle
			}
			return kubernetes.New(env.Cluster, kubernetes.Options{SSH: env.SSH, StateDir: env.StateDir,
				Install: install, Bundles: bundles, PollInterval: 500 * time.Millisecond})
		},
		StopEngine: func(ctx context.Context, env platformtest.Env, n districts.Node) error {
			_, err := env.Run(ctx, n, "stop the kubelet and the API server", stopAPIServer, nil)
			return err
		},
		StartEngine: func(ctx context.Context, _ platformtest.Env, p provider.Platform, n districts.Node) error {
			return p.Install(ctx, n) // starts the kubelet, which starts the API server again
		},
		Block: func(ctx context.Context, env platformtest.Env, m, n districts.Node) (string, error) {
			name := "pt-block-" + strings.ReplaceAll(n.ID, ".", "-")
			_, err := env.Run(ctx, m, "run a pod on "+n.ID+" that no eviction may move", blockScript(name, n.ID), nil)
			return name, err
		},
		Unblock: func(ctx context.Context, env platformtest.Env, m districts.Node, name string) error {
			_, err := env.Run(ctx, m, "delete "+name, kubectl+"kubectl -n default delete --ignore-not-found deployment/"+name+" poddisruptionbudget/"+name+" >/dev/null\n", nil)
			return err
		},
		DrainTimeout: 20 * time.Second,
		Timeout:      5 * time.Minute,
	})
}

// bundleDir is the bundle the nodes install from: $TRANSIT_BUNDLE as it
// is, else the repository's build/bundle, brought up to date as `make
// bundle` does (seconds when it is; a cold build takes minutes, see the
// docs/kubernetes.md). The build holds the directory's lock, so the e2e tests may
// build it at the same time.
func bundleDir(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv("TRANSIT_BUNDLE"); dir != "" {
		if _, err := bundle.Read(dir); err != nil {
			t.Fatalf("TRANSIT_BUNDLE=%s: %v", dir, err)
		}
		return dir
	}
	_, file, _, _ := runtime.Caller(0)
	repo := filepath.Join(filepath.Dir(file), "..", "..")
	dir := filepath.Join(repo, "build", "bundle")
	began := time.Now()
	if _, err := build.Build(t.Context(), build.Options{Repo: repo, Out: dir, Log: os.Stderr}); err != nil {
		t.Fatalf("build the bundle (make bundle): %v", err)
	}
	t.Logf("bundle %s up to date in %s", dir, time.Since(began).Round(100*time.Millisecond))
	return dir
}

// kubectl sets up a master's shell for kubectl (the bundle's, with the
// admin kubeconfig).
const kubectl = "set -eu\nexport PATH=/opt/transit/bin:$PATH KUBECONFIG=/etc/kubernetes/admin.conf\n"

// stopAPIServer stops the node's kubelet, so nothing restarts the
// control plane, and kills its API server: the machine and sshd stay.
const stopAPIServer = `set -u
if [ -d /run/systemd/system ]; then
	systemctl stop kubelet
else
	pid=$(cat /run/transit/kubelet.pid 2>/dev/null || true)
	[ -z "$pid" ] || kill "$pid" 2>/dev/null || true
	pkill -x kubelet || true
fi
i=0
while pgrep -x kubelet >/dev/null; do
	i=$((i + 1)); if [ "$i" -ge 300 ]; then echo "the kubelet did not stop" >&2; exit 1; fi; sleep 0.1
done
pkill -KILL -x kube-apiserver || true
i=0
while pgrep -x kube-apiserver >/dev/null; do
	i=$((i + 1)); if [ "$i" -ge 300 ]; then echo "the API server did not stop" >&2; exit 1; fi; sleep 0.1
done
`

// blockScript runs, on a master, a Deployment whose one pod may run on
// node id only and a PodDisruptionBudget that allows no eviction of it.
// It returns once the pod runs and the budget counts it.
func blockScript(name, id string) string {
	manifest := fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: %[1]s, namespace: default}
spec:
  replicas: 1
  selector: {matchLabels: {app: %[1]s}}
  template:
    metadata: {labels: {app: %[1]s}}
    spec:
      terminationGracePeriodSeconds: 1
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
            - matchFields: [{key: metadata.name, operator: In, values: [%[2]q]}]
      containers:
      - name: sleep
        image: %[3]s
        imagePullPolicy: Never
        command: [sleep, "3600"]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: %[1]s, namespace: default}
spec:
  minAvailable: 1
  selector: {matchLabels: {app: %[1]s}}
`, name, id, bundle.BusyboxImage)
	return kubectl + `printf '%s' ` + shellquote.Quote(manifest) + ` | kubectl apply -f - >/dev/null
kubectl -n default rollout status deployment/` + name + ` --timeout=180s >/dev/null
kubectl -n default wait poddisruptionbudget/` + name + ` --for=jsonpath='{.status.currentHealthy}'=1 --timeout=60s >/dev/null
`
}
