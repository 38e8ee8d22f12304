package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientset "k8s.io/client-go/kubernetes"

	"github.com/cloudtransit/transit/bundle"
	"github.com/cloudtransit/transit/districts"
)

// podCPU is what each pod of the autoscale step asks for: a local node
// has the host's 2 CPUs, a flavor "small" 1 core, so a new node takes
// one pod.
var podCPU = resource.MustParse("750m")

// testKubeAutoscale: the workers' deployments autoscaled, e2e-b's
// machines cheaper. A Deployment whose pods fill every worker's free CPU,
// and one pod more, leaves that pod Unschedulable; transit autoscale, run
// as cron would, adds one node, in e2e-b (the cheapest that fits), and
// the pod runs there. The Deployment deleted, the idle node goes again;
// cluster.json is never rewritten.
func testKubeAutoscale(t *testing.T, c *cluster) {
	ctx := context.Background()
	k := c.kube()
	cfg, ds := *c.cfg, slices.Clone(c.ds)
	cfg.Deployments = slices.Clone(c.cfg.Deployments)
	defer func() { // the next step's starting point: as before
		*c.cfg, c.ds = cfg, ds
		c.writeConfig()
	}()
	price := func(v float64) []districts.DistrictFlavor {
		return []districts.DistrictFlavor{{Flavor: "small", HourlyPrice: &v}}
	}
	c.ds = slices.Clone(ds)
	c.ds[0].Flavors, c.ds[1].Flavors = price(0.10), price(0.04)
	for i, d := range c.cfg.Deployments {
		if d.Role == districts.RoleWorker {
			c.cfg.Deployments[i].Autoscale = &districts.Autoscale{Min: d.Quantity, Max: d.Quantity + 1}
			c.cfg.Deployments[i].Quantity = 0
		}
	}
	c.cfg.Autoscaler = &districts.Autoscaler{ScaleDownAfter: districts.Duration(15 * time.Second), ScaleDownDelayAfterAdd: districts.Duration(15 * time.Second)}
	c.writeConfig()
	clusterJSON, err := os.ReadFile(filepath.Join(c.dir, "cluster.json"))
	if err != nil {
		t.Fatal(err)
	}
	before := c.status()
	wantB := countRole(before, "e2e-b", districts.RoleWorker)

	slots, room := freeSlots(ctx, t, k)
	replicas := int32(slots + 1)
	began := time.Now()
	createFiller(ctx, t, k, "e2e-as-fill", replicas)
	t.Logf("%d pods of %s CPU: %d fit on the workers as they are (%s), one waits", replicas, podCPU.String(), slots, room)

	var grown districts.Resources
	runs := 0
	eventually(t, 6*time.Minute, "every filler pod running after transit autoscale", func(ctx context.Context) error {
		runs++
		r := c.transit("autoscale", "--json")
		if r.code != 0 {
			t.Fatalf("autoscale: exit %d\n%s", r.code, r)
		}
		if err := available(ctx, k, "e2e-as-fill", replicas); err != nil {
			return fmt.Errorf("%w; last decision: %s", err, decisionLine(r.stdout))
		}
		grown = c.statusNow()
		return nil
	})
	t.Logf("all %d pods running %s after they arrived (%d runs of autoscale)", replicas, time.Since(began).Round(time.Second), runs)
	if got := countRole(grown, "e2e-b", districts.RoleWorker); got != wantB+1 {
		t.Errorf("%d workers in e2e-b, want %d: the new node belongs in the cheaper district", got, wantB+1)
	}
	if got, want := countRole(grown, "e2e-a", districts.RoleWorker), countRole(before, "e2e-a", districts.RoleWorker); got != want {
		t.Errorf("%d workers in the dearer e2e-a, want the %d it had", got, want)
	}
	eventually(t, time.Minute, "Nodes match the state", func(ctx context.Context) error { return checkNodes(ctx, k, grown) })
	if data, err := os.ReadFile(filepath.Join(c.dir, "cluster.json")); err != nil || !bytes.Equal(data, clusterJSON) {
		t.Errorf("cluster.json was rewritten (%v):\n%s", err, data)
	}

	removed := time.Now()
	if err := k.AppsV1().Deployments("default").Delete(ctx, "e2e-as-fill", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	runs = 0
	eventually(t, 4*time.Minute, "the idle node gone after transit autoscale", func(context.Context) error {
		runs++
		r := c.transit("autoscale", "--json")
		if r.code != 0 {
			t.Fatalf("autoscale after the pods went: exit %d\n%s", r.code, r)
		}
		if got := countRole(c.statusNow(), "e2e-b", districts.RoleWorker); got != wantB {
			return fmt.Errorf("%d workers in e2e-b, want %d; last decision: %s", got, wantB, decisionLine(r.stdout))
		}
		return nil
	})
	t.Logf("the idle node gone %s after the pods (%d runs of autoscale)", time.Since(removed).Round(time.Second), runs)
	res := c.status()
	if got, want := len(res.Nodes), len(before.Nodes); got != want {
		t.Errorf("%d nodes after scaling down, want the %d before", got, want)
	}
	eventually(t, time.Minute, "Nodes match the state", func(ctx context.Context) error { return checkNodes(ctx, k, res) })
}

// freeSlots counts the pods of podCPU the schedulable workers have room
// for now, by their allocatable CPU less what their pods ask for.
func freeSlots(ctx context.Context, t *testing.T, k clientset.Interface) (int, string) {
	t.Helper()
	nodes, err := k.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pods, err := k.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	asked := map[string]int64{}
	for _, p := range pods.Items {
		if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		for _, ctr := range p.Spec.Containers {
			asked[p.Spec.NodeName] += ctr.Resources.Requests.Cpu().MilliValue()
		}
	}
	slots := 0
	var room []string
	for _, n := range nodes.Items {
		if n.Spec.Unschedulable || slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Effect == corev1.TaintEffectNoSchedule }) {
			continue
		}
		free := n.Status.Allocatable.Cpu().MilliValue() - asked[n.Name]
		s := int(max(free, 0) / podCPU.MilliValue())
		slots += s
		room = append(room, fmt.Sprintf("%s %dm free", n.Name, free))
	}
	return slots, strings.Join(room, ", ")
}

// createFiller creates a Deployment of replicas pods asking podCPU each.
func createFiller(ctx context.Context, t *testing.T, k clientset.Interface, name string, replicas int32) {
	t.Helper()
	d := appDeployment(name, "default", replicas, corev1.PodSpec{
		TerminationGracePeriodSeconds: ptr(int64(1)),
		Containers: []corev1.Container{{
			Name: "sleep", Image: bundle.BusyboxImage, ImagePullPolicy: corev1.PullNever,
			Command:   []string{"sleep", "3600"},
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: podCPU}},
		}},
	})
	if _, err := k.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// decisionLine is the autoscale line of a run's --json output, for a
// failure message.
func decisionLine(stdout string) string {
	for line := range strings.SplitSeq(stdout, "\n") {
		var v struct {
			Type string `json:"type"`
		}
		if json.Unmarshal([]byte(line), &v) == nil && v.Type == "autoscale" {
			return line
		}
	}
	return "(no autoscale line)"
}
