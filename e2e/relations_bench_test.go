package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	clientset "k8s.io/client-go/kubernetes"

	"github.com/cloudtransit/transit/controllers/relations/annotations"
	"github.com/cloudtransit/transit/districts"
)

// Namespaces of the relations benchmark: consumers related to a provider,
// and the baseline's consumers of a ConfigMap.
const (
	benchRelNS  = "bench-relations"
	benchBaseNS = "bench-baseline"
	// benchValue is the pod template annotation the baseline's consumers
	// carry their value in (a re-applied manifest changes it).
	benchValue = "bench.transit.io/value"
)

// relationsRow is one consumer count's measurements, in seconds from the
// provider's change until every consumer runs a pod with the new value.
type relationsRow struct {
	Consumers int       `json:"consumers"`
	Relations []float64 `json:"relations_s"`
	Baseline  []float64 `json:"baseline_s"`
	// Waits counts pods of changes that ran the wait container (the goal:
	// none; the lifecycle dependency costs nothing on changes).
	Waits int `json:"wait_containers_on_changes"`
}

// BenchmarkRelations is the research's evaluation on a local transit
// cluster (1 master, 3 workers over two districts, the relations addon):
// for N = 5…55 consumers of one ExternalName provider, each of
// TRANSIT_RELATIONS_RUNS changes (20) of its address is timed until N pods
// with the new value are Ready, seen by a watch; interleaved with the same
// change made by hand: a ConfigMap updated and the N Deployments
// re-applied. TRANSIT_RELATIONS_N ("5,10,…") picks the counts. It prints a
// table and writes it as JSON to TRANSIT_RELATIONS_OUT (build/relations).
func BenchmarkRelations(b *testing.B) {
	runs := 20
	if v := os.Getenv("TRANSIT_RELATIONS_RUNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("TRANSIT_RELATIONS_RUNS=%q: want a positive number", v)
		}
		runs = n
	}
	counts := []int{5, 10, 15, 20, 25, 30, 35, 40, 45, 50, 55}
	if v := os.Getenv("TRANSIT_RELATIONS_N"); v != "" {
		counts = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				b.Fatalf("TRANSIT_RELATIONS_N=%q: want counts like 5,10,55", v)
			}
			counts = append(counts, n)
		}
	}
	outDir := os.Getenv("TRANSIT_RELATIONS_OUT")
	if outDir == "" {
		outDir = filepath.Join("..", "build", "relations")
	}
	cfg, ds := kubernetesCluster(b)
	cfg.Addons = []districts.Addon{{Name: "relations"}}
	c := newCluster(b, kubeRoot, cfg, ds)
	for b.Loop() {
		c.apply()
		k := c.kubeWatching()
		ctx := context.Background()
		for _, ns := range []string{benchRelNS, benchBaseNS} {
			if _, err := k.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				b.Fatal(err)
			}
		}
		value := 0
		host := func() string { return fmt.Sprintf("sse-%d.example.com", value) }
		provider := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "sse", Namespace: benchRelNS, Annotations: map[string]string{annotations.AnnotationProvides: "sse"}},
			Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: host()},
		}
		if _, err := k.CoreV1().Services(benchRelNS).Create(ctx, provider, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		if _, err := k.CoreV1().ConfigMaps(benchBaseNS).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "sse", Namespace: benchBaseNS},
			Data: map[string]string{"sse": host()}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		var rows []relationsRow
		have := 0
		for _, n := range counts {
			for i := have; i < n; i++ {
				name := fmt.Sprintf("c%02d", i)
				rel := benchConsumer(name, benchRelNS, map[string]string{annotations.AnnotationConsumes: "sse", annotations.AnnotationRelationship: "sse"}, nil)
				base := benchConsumer(name, benchBaseNS, nil, &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: "sse"}, Key: "sse"}})
				base.Spec.Template.Annotations = map[string]string{benchValue: host()}
				for _, d := range []*appsv1.Deployment{rel, base} {
					if _, err := k.AppsV1().Deployments(d.Namespace).Create(ctx, d, metav1.CreateOptions{}); err != nil {
						b.Fatal(err)
					}
				}
			}
			have = max(have, n)
			eventually(b, 10*time.Minute, fmt.Sprintf("%d consumers of each kind ready", n), func(ctx context.Context) error {
				for _, ns := range []string{benchRelNS, benchBaseNS} {
					if err := allReady(ctx, k, ns, n); err != nil {
						return err
					}
				}
				return nil
			})
			row := relationsRow{Consumers: n}
			for range runs {
				value++
				d, waits := timeChange(b, k, benchRelNS, n, func(p *corev1.Pod) bool {
					return runsHost(p, host())
				}, func(ctx context.Context) error {
					s, err := k.CoreV1().Services(benchRelNS).Get(ctx, "sse", metav1.GetOptions{})
					if err != nil {
						return err
					}
					s.Spec.ExternalName = host()
					_, err = k.CoreV1().Services(benchRelNS).Update(ctx, s, metav1.UpdateOptions{})
					return err
				})
				row.Relations, row.Waits = append(row.Relations, d.Seconds()), row.Waits+waits
				d, _ = timeChange(b, k, benchBaseNS, n, func(p *corev1.Pod) bool { return p.Annotations[benchValue] == host() }, func(ctx context.Context) error {
					return reapply(ctx, k, n, host())
				})
				row.Baseline = append(row.Baseline, d.Seconds())
			}
			rows = append(rows, row)
			fmt.Println(relationsLine(row))
		}
		if err := writeRelationsReport(outDir, rows); err != nil {
			b.Fatal(err)
		}
	}
}

// kubeWatching is kube without a request timeout: watches last.
func (c *cluster) kubeWatching() clientset.Interface {
	c.tb.Helper()
	cfg := c.restConfig(0)
	cfg.QPS, cfg.Burst = 100, 200 // a person re-applying 55 manifests is not throttled either
	k, err := clientset.NewForConfig(cfg)
	if err != nil {
		c.tb.Fatal(err)
	}
	return k
}

// benchConsumer is one consumer Deployment of one replica.
func benchConsumer(name, ns string, ann map[string]string, from *corev1.EnvVarSource) *appsv1.Deployment {
	d := consumer(name, ns, 1, ann)
	d.Spec.Template.Spec.TopologySpreadConstraints = nil
	ctr := &d.Spec.Template.Spec.Containers[0]
	ctr.Command = []string{"sh", "-c", `trap 'exit 0' TERM; echo "SSE=$SSE"; sleep 3600 & wait`}
	if from != nil {
		ctr.Env = []corev1.EnvVar{{Name: "SSE", ValueFrom: from}}
	}
	return d
}

// allReady says whether ns has n Deployments, each rolled out and ready.
func allReady(ctx context.Context, k clientset.Interface, ns string, n int) error {
	list, err := k.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	ready := 0
	for _, d := range list.Items {
		if d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas == 1 && d.Status.ReadyReplicas == 1 && d.Status.Replicas == 1 {
			ready++
		}
	}
	if ready < n {
		return fmt.Errorf("%s: %d of %d Deployments ready", ns, ready, n)
	}
	return nil
}

// runsHost says whether a related pod's variable SSE comes from a values
// Secret that holds host.
func runsHost(p *corev1.Pod, host string) bool {
	name := ""
	for _, e := range p.Spec.Containers[0].Env {
		if e.Name == "SSE" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			name = e.ValueFrom.SecretKeyRef.Name
		}
	}
	return name != "" && secretHosts[name] == host
}

// secretHosts maps a values Secret's name to the host it holds, filled by
// timeChange's watch of Secrets.
var secretHosts = map[string]string{}

// timeChange makes a change and returns how long until every one of the
// n consumers in ns has a Ready pod that isNew judges current, seen by a
// watch of pods, and how many such pods ran the wait container.
func timeChange(b *testing.B, k clientset.Interface, ns string, n int, isNew func(*corev1.Pod) bool, change func(context.Context) error) (time.Duration, int) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	pods, err := k.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	pw, err := k.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: pods.ResourceVersion})
	if err != nil {
		b.Fatal(err)
	}
	defer pw.Stop()
	secrets, err := k.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for _, s := range secrets.Items {
		secretHosts[s.Name] = string(s.Data["sse"])
	}
	sw, err := k.CoreV1().Secrets(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: secrets.ResourceVersion})
	if err != nil {
		b.Fatal(err)
	}
	defer sw.Stop()
	start := time.Now()
	if err := change(ctx); err != nil {
		b.Fatal(err)
	}
	done := map[string]bool{} // app label → a current pod is Ready
	waits := map[string]bool{}
	pending := map[string]*corev1.Pod{}
	judge := func(p *corev1.Pod) {
		if p.DeletionTimestamp != nil || !isNew(p) {
			return
		}
		for _, s := range p.Spec.InitContainers {
			if s.Name == annotations.WaitContainer {
				waits[p.Name] = true
			}
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
				done[p.Labels["app"]] = true
			}
		}
	}
	for len(done) < n {
		select {
		case ev, ok := <-pw.ResultChan():
			if !ok {
				b.Fatalf("%s: the pod watch ended with %d of %d consumers current", ns, len(done), n)
			}
			p, isPod := ev.Object.(*corev1.Pod)
			if !isPod || ev.Type == watch.Deleted {
				continue
			}
			pending[p.Name] = p
			judge(p)
		case ev, ok := <-sw.ResultChan():
			if !ok {
				b.Fatalf("%s: the Secret watch ended", ns)
			}
			if s, isSecret := ev.Object.(*corev1.Secret); isSecret && ev.Type != watch.Deleted {
				secretHosts[s.Name] = string(s.Data["sse"])
				// Pods seen before their Secret are judged again.
				for _, p := range pending {
					judge(p)
				}
			}
		case <-ctx.Done():
			b.Fatalf("%s: %d of %d consumers current after 10 minutes", ns, len(done), n)
		}
	}
	return time.Since(start), len(waits)
}

// reapply is the baseline's change by hand: the ConfigMap updated, then
// each of the n Deployments re-applied with the new value in its template.
func reapply(ctx context.Context, k clientset.Interface, n int, host string) error {
	cm, err := k.CoreV1().ConfigMaps(benchBaseNS).Get(ctx, "sse", metav1.GetOptions{})
	if err != nil {
		return err
	}
	cm.Data["sse"] = host
	if _, err := k.CoreV1().ConfigMaps(benchBaseNS).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		return err
	}
	for i := range n {
		name := fmt.Sprintf("c%02d", i)
		patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{%q:%q}}}}}`, benchValue, host)
		if _, err := k.AppsV1().Deployments(benchBaseNS).Patch(ctx, name, "application/strategic-merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
			return err
		}
	}
	return nil
}

func stats(v []float64) (mean, median, maximum float64) {
	if len(v) == 0 {
		return 0, 0, 0
	}
	s := slices.Sorted(slices.Values(v))
	for _, x := range s {
		mean += x
	}
	mean /= float64(len(s))
	median = s[len(s)/2]
	if len(s)%2 == 0 {
		median = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return mean, median, s[len(s)-1]
}

func relationsLine(r relationsRow) string {
	rm, rmed, rmax := stats(r.Relations)
	bm, bmed, bmax := stats(r.Baseline)
	return fmt.Sprintf("| %2d | %5.1f | %5.1f | %5.1f | %5.1f | %5.1f | %5.1f | %+6.3f | %d |",
		r.Consumers, rm, rmed, rmax, bm, bmed, bmax, (rm-bm)/float64(r.Consumers), r.Waits)
}

// writeRelationsReport prints the table and writes it as JSON.
func writeRelationsReport(dir string, rows []relationsRow) error {
	fmt.Println("| N | relations mean s | median | max | baseline mean s | median | max | overhead s/consumer | wait containers on changes |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		fmt.Println(relationsLine(r))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(rows, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "relations.json"), data, 0o644)
}
