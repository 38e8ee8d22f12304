package kubernetes

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// res is a ResourceList of cpu and memory ("" leaves one out).
func res(cpu, mem string) corev1.ResourceList {
	rl := corev1.ResourceList{}
	if cpu != "" {
		rl[corev1.ResourceCPU] = resource.MustParse(cpu)
	}
	if mem != "" {
		rl[corev1.ResourceMemory] = resource.MustParse(mem)
	}
	return rl
}

func ctr(name, cpu, mem string) corev1.Container {
	return corev1.Container{Name: name, Image: "busybox", Resources: corev1.ResourceRequirements{Requests: res(cpu, mem)}}
}

// podOpt changes a test pod.
type podOpt func(*corev1.Pod)

// testPod is a pod of a ReplicaSet asking 100m and 64Mi, neither bound
// nor tried by the scheduler.
func testPod(ns, name string, opts ...podOpt) corev1.Pod {
	p := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": name}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{ctr("main", "100m", "64Mi")}},
	}
	ownedBy("ReplicaSet")(&p)
	for _, o := range opts {
		o(&p)
	}
	return p
}

func ownedBy(kind string) podOpt {
	return func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: p.Name + "-owner", UID: "u-" + "owner", Controller: ptr.To(true)}}
	}
}

func bare(p *corev1.Pod) { p.OwnerReferences = nil }

func on(node string) podOpt { return func(p *corev1.Pod) { p.Spec.NodeName = node } }

// unsched sets what the scheduler writes on a pod it found no node for.
func unsched(p *corev1.Pod) {
	p.Status.Phase = corev1.PodPending
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}
}

func phase(ph corev1.PodPhase) podOpt { return func(p *corev1.Pod) { p.Status.Phase = ph } }

func deleting(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{} }

func containers(cs ...corev1.Container) podOpt {
	return func(p *corev1.Pod) { p.Spec.Containers = cs }
}

func initContainers(cs ...corev1.Container) podOpt {
	return func(p *corev1.Pod) { p.Spec.InitContainers = cs }
}

func sidecar(c corev1.Container) corev1.Container {
	c.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
	return c
}

func nodeSelector(kv ...string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.NodeSelector = map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			p.Spec.NodeSelector[kv[i]] = kv[i+1]
		}
	}
}

func expr(key string, op corev1.NodeSelectorOperator, values ...string) corev1.NodeSelectorRequirement {
	return corev1.NodeSelectorRequirement{Key: key, Operator: op, Values: values}
}

func required(terms ...corev1.NodeSelectorTerm) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms},
		}}
	}
}

func term(exprs ...corev1.NodeSelectorRequirement) corev1.NodeSelectorTerm {
	return corev1.NodeSelectorTerm{MatchExpressions: exprs}
}

func volume(v corev1.VolumeSource) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "v", VolumeSource: v})
	}
}

func testNode(name string, ready, cordoned bool, cpu, mem string, lbls map[string]string) corev1.Node {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls},
		Spec:       corev1.NodeSpec{Unschedulable: cordoned},
		Status: corev1.NodeStatus{
			Allocatable: withPods(res(cpu, mem), "110"),
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st}},
		},
	}
}

// withPods is rl with its pods.
func withPods(rl corev1.ResourceList, pods string) corev1.ResourceList {
	rl[corev1.ResourcePods] = resource.MustParse(pods)
	return rl
}

func pdb(ns, name string, sel *metav1.LabelSelector, allowed int32) policyv1.PodDisruptionBudget {
	return policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       policyv1.PodDisruptionBudgetSpec{Selector: sel, MinAvailable: ptr.To(intstr.FromInt32(1))},
		Status:     policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: allowed},
	}
}

func app(name string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}
}

const mi = 1 << 20

// demandNodes are the transit nodes of the conversion tests: a master and
// two workers.
var demandNodes = []districts.Node{
	{ID: "k-master-1", Role: districts.RoleMaster, PrivateIP: "10.0.0.2"},
	{ID: "k-worker-1", Role: districts.RoleWorker, PrivateIP: "10.0.0.3"},
	{ID: "k-worker-2", Role: districts.RoleWorker, PrivateIP: "10.0.0.4"},
}

// demandKubeNodes are their Nodes, the second worker cordoned, and a Node
// transit did not make.
func demandKubeNodes() []corev1.Node {
	return []corev1.Node{
		testNode("k-master-1", true, false, "2", "4Gi", map[string]string{labelControlPlane: ""}),
		testNode("k-worker-1", true, false, "4", "8Gi", map[string]string{"tier": "web"}),
		testNode("k-worker-2", true, true, "4", "8Gi", nil),
		testNode("byhand", true, false, "8", "16Gi", nil),
	}
}

// demandBase is what demandKubeNodes say without a pod.
func demandBase() provider.Demand {
	return provider.Demand{Nodes: []provider.NodeLoad{
		{Node: "k-master-1", MilliCPU: 2000, MemoryBytes: 4096 * mi, Pods: 110, Labels: map[string]string{labelControlPlane: ""}, Schedulable: true},
		{Node: "k-worker-1", MilliCPU: 4000, MemoryBytes: 8192 * mi, Pods: 110, Labels: map[string]string{"tier": "web"}, Schedulable: true},
		{Node: "k-worker-2", MilliCPU: 4000, MemoryBytes: 8192 * mi, Pods: 110},
	}}
}

// pending is a pending workload in namespace default (memory in MiB).
func pending(name string, cpu, mem int64, sel map[string]string) provider.Workload {
	return provider.Workload{Name: "default/" + name, MilliCPU: cpu, MemoryBytes: mem * mi, Selector: sel}
}

func TestDemandOf(t *testing.T) {
	t.Parallel()
	w1 := func(d *provider.Demand) *provider.NodeLoad { return &d.Nodes[1] }
	running := func(ns, name, unmovable string) provider.Workload {
		return provider.Workload{Name: ns + "/" + name, MilliCPU: 100, MemoryBytes: 64 * mi, Unmovable: unmovable}
	}
	for _, tc := range []struct {
		name string
		pods []corev1.Pod
		pdbs []policyv1.PodDisruptionBudget
		want func(*provider.Demand)
	}{
		{name: "no pods"},

		// Requests.
		{
			name: "the containers' requests are summed",
			pods: []corev1.Pod{testPod("default", "p", unsched, containers(ctr("a", "250m", "100Mi"), ctr("b", "0.5", "28Mi"), ctr("c", "", "")))},
			want: func(d *provider.Demand) { d.Pending = []provider.Workload{pending("p", 750, 128, nil)} },
		},
		{
			name: "an init container asking more than the containers sets the request",
			pods: []corev1.Pod{testPod("default", "p", unsched,
				containers(ctr("a", "100m", "64Mi"), ctr("b", "100m", "64Mi")),
				initContainers(ctr("i1", "1", "16Mi"), ctr("i2", "50m", "512Mi")))},
			want: func(d *provider.Demand) { d.Pending = []provider.Workload{pending("p", 1000, 512, nil)} },
		},
		{
			name: "init containers asking less than the containers do not count",
			pods: []corev1.Pod{testPod("default", "p", unsched, initContainers(ctr("i", "50m", "32Mi")))},
			want: func(d *provider.Demand) { d.Pending = []provider.Workload{pending("p", 100, 64, nil)} },
		},
		{
			// Sidecar s runs beside the containers (100m+200m) and beside
			// init container i2, started after it (200m+300m).
			name: "a sidecar adds to the containers and to the init containers after it",
			pods: []corev1.Pod{testPod("default", "p", unsched,
				initContainers(ctr("i1", "400m", "0"), sidecar(ctr("s", "200m", "10Mi")), ctr("i2", "300m", "0")))},
			want: func(d *provider.Demand) { d.Pending = []provider.Workload{pending("p", 500, 74, nil)} },
		},
		{
			name: "the pod overhead is added",
			pods: []corev1.Pod{testPod("default", "p", unsched,
				initContainers(ctr("i", "1", "1Gi")),
				func(p *corev1.Pod) { p.Spec.Overhead = res("250m", "120Mi") })},
			want: func(d *provider.Demand) { d.Pending = []provider.Workload{pending("p", 1250, 1144, nil)} },
		},
		{
			name: "a pod-level request replaces its containers', the overhead still added",
			pods: []corev1.Pod{testPod("default", "p", unsched, func(p *corev1.Pod) {
				p.Spec.Resources = &corev1.ResourceRequirements{Requests: res("2", "")}
				p.Spec.Overhead = res("10m", "1Mi")
			})},
			want: func(d *provider.Demand) { d.Pending = []provider.Workload{pending("p", 2010, 65, nil)} },
		},

		// Which pods are pending.
		{
			name: "only unschedulable pods not being deleted, finished nor a DaemonSet's are pending",
			pods: []corev1.Pod{
				testPod("default", "new"), // the scheduler has not tried it
				testPod("default", "gated", func(p *corev1.Pod) {
					p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonSchedulingGated}}
				}),
				testPod("default", "deleting", unsched, deleting),
				testPod("default", "failed", unsched, phase(corev1.PodFailed)),
				testPod("default", "ds", unsched, ownedBy("DaemonSet")),
				testPod("default", "bare", unsched, bare),
				testPod("team-a", "job", unsched, ownedBy("Job")),
			},
			want: func(d *provider.Demand) {
				d.Pending = []provider.Workload{pending("bare", 100, 64, nil), {Name: "team-a/job", MilliCPU: 100, MemoryBytes: 64 * mi}}
			},
		},

		// Selectors.
		{
			name: "selectors: nodeSelector, and required affinity of one term of In with one value",
			pods: []corev1.Pod{
				testPod("default", "selector", unsched, nodeSelector("tier", "web")),
				testPod("default", "affinity", unsched, required(term(expr("zone", corev1.NodeSelectorOpIn, "a"), expr("disk", corev1.NodeSelectorOpIn, "ssd")))),
				testPod("default", "both", unsched, nodeSelector("tier", "web"), required(term(expr("zone", corev1.NodeSelectorOpIn, "a")))),
				testPod("default", "same-twice", unsched, nodeSelector("zone", "a"), required(term(expr("zone", corev1.NodeSelectorOpIn, "a"), expr("zone", corev1.NodeSelectorOpIn, "a")))),
			},
			want: func(d *provider.Demand) {
				d.Pending = []provider.Workload{
					pending("selector", 100, 64, map[string]string{"tier": "web"}),
					pending("affinity", 100, 64, map[string]string{"zone": "a", "disk": "ssd"}),
					pending("both", 100, 64, map[string]string{"tier": "web", "zone": "a"}),
					pending("same-twice", 100, 64, map[string]string{"zone": "a"}),
				}
			},
		},
		{
			name: "an affinity a map of labels cannot say is left out, the nodeSelector kept",
			pods: []corev1.Pod{
				testPod("default", "two-values", unsched, nodeSelector("tier", "web"), required(term(expr("zone", corev1.NodeSelectorOpIn, "a", "b")))),
				testPod("default", "two-terms", unsched, required(term(expr("zone", corev1.NodeSelectorOpIn, "a")), term(expr("zone", corev1.NodeSelectorOpIn, "b")))),
				testPod("default", "not-in", unsched, required(term(expr("zone", corev1.NodeSelectorOpIn, "a"), expr("disk", corev1.NodeSelectorOpNotIn, "hdd")))),
				testPod("default", "exists", unsched, required(term(expr("gpu", corev1.NodeSelectorOpExists)))),
				testPod("default", "fields", unsched, required(corev1.NodeSelectorTerm{
					MatchExpressions: []corev1.NodeSelectorRequirement{expr("zone", corev1.NodeSelectorOpIn, "a")},
					MatchFields:      []corev1.NodeSelectorRequirement{expr("metadata.name", corev1.NodeSelectorOpIn, "k-worker-1")},
				})),
				testPod("default", "contradicts-selector", unsched, nodeSelector("zone", "a"), required(term(expr("zone", corev1.NodeSelectorOpIn, "b")))),
				testPod("default", "contradicts-itself", unsched, required(term(expr("zone", corev1.NodeSelectorOpIn, "a"), expr("zone", corev1.NodeSelectorOpIn, "b")))),
				testPod("default", "empty-term", unsched, nodeSelector("tier", "web"), required(term())),
				testPod("default", "preferred-only", unsched, func(p *corev1.Pod) {
					p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{
						{Weight: 1, Preference: term(expr("zone", corev1.NodeSelectorOpIn, "a"))},
					}}}
				}),
			},
			want: func(d *provider.Demand) {
				web := map[string]string{"tier": "web"}
				d.Pending = []provider.Workload{
					pending("two-values", 100, 64, web),
					pending("two-terms", 100, 64, nil),
					pending("not-in", 100, 64, nil),
					pending("exists", 100, 64, nil),
					pending("fields", 100, 64, nil),
					pending("contradicts-selector", 100, 64, map[string]string{"zone": "a"}),
					pending("contradicts-itself", 100, 64, nil),
					pending("empty-term", 100, 64, web),
					pending("preferred-only", 100, 64, nil),
				}
			},
		},

		// What runs on the nodes.
		{
			name: "DaemonSet and mirror pods are the node's overhead; finished pods and pods of other nodes are left out",
			pods: []corev1.Pod{
				testPod("kube-system", "flannel", on("k-worker-1"), ownedBy("DaemonSet"), containers(ctr("f", "100m", "50Mi")), initContainers(ctr("i", "200m", "10Mi"))),
				testPod("kube-system", "kube-proxy", on("k-worker-1"), ownedBy("DaemonSet"), containers(ctr("p", "", "20Mi"))),
				testPod("kube-system", "etcd-k-master-1", on("k-master-1"), ownedBy("Node"), containers(ctr("etcd", "100m", "100Mi")), func(p *corev1.Pod) {
					p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "x"}
				}),
				testPod("kube-system", "flannel-done", on("k-worker-2"), ownedBy("DaemonSet"), phase(corev1.PodSucceeded)),
				testPod("default", "web", on("k-worker-1"), phase(corev1.PodRunning), nodeSelector("tier", "web")),
				testPod("default", "job-done", on("k-worker-1"), ownedBy("Job"), phase(corev1.PodSucceeded)),
				testPod("default", "crashed", on("k-worker-2"), bare, phase(corev1.PodFailed)),
				testPod("default", "on-byhand", on("byhand"), bare),
				testPod("default", "on-gone", on("k-worker-9"), bare),
			},
			want: func(d *provider.Demand) {
				d.Nodes[0].OverheadMilliCPU, d.Nodes[0].OverheadMemoryBytes, d.Nodes[0].OverheadPods = 100, 100*mi, 1
				w := w1(d)
				w.OverheadMilliCPU, w.OverheadMemoryBytes, w.OverheadPods = 200, 70*mi, 2
				w.Workloads = []provider.Workload{{Name: "default/web", MilliCPU: 100, MemoryBytes: 64 * mi, Selector: map[string]string{"tier": "web"}}}
			},
		},
		{
			name: "why a running pod would not move",
			pods: []corev1.Pod{
				testPod("default", "bare", on("k-worker-1"), bare),
				testPod("default", "bare-leaving", on("k-worker-1"), bare, deleting),
				testPod("default", "hostpath", on("k-worker-1"), volume(corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/data"}})),
				testPod("default", "emptydir", on("k-worker-1"), volume(corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}})),
				testPod("default", "emptydir-memory", on("k-worker-1"), volume(corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}})),
				testPod("default", "configmap", on("k-worker-1"), volume(corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}})),
				testPod("kube-system", "coredns", on("k-worker-1")),
				testPod("kube-system", "metrics", on("k-worker-1")),
				testPod("default", "db", on("k-worker-1")),
				testPod("default", "cache", on("k-worker-1")),
				testPod("default", "api", on("k-worker-1")),
				testPod("team-a", "db", on("k-worker-1")),
			},
			pdbs: []policyv1.PodDisruptionBudget{
				pdb("kube-system", "metrics", app("metrics"), 1),
				pdb("default", "db", app("db"), 0),
				pdb("default", "cache", app("cache"), 1),
				pdb("default", "none", nil, 0), // a nil selector covers no pod
				pdb("team-b", "all", &metav1.LabelSelector{}, 0),
			},
			want: func(d *provider.Demand) {
				w1(d).Workloads = []provider.Workload{
					running("default", "bare", unmovableBare),
					running("default", "bare-leaving", ""),
					running("default", "hostpath", unmovableLocalStorage),
					running("default", "emptydir", unmovableLocalStorage),
					running("default", "emptydir-memory", ""),
					running("default", "configmap", ""),
					running("kube-system", "coredns", unmovableSystem),
					running("kube-system", "metrics", ""),
					running("default", "db", "PodDisruptionBudget default/db allows no disruption now"),
					running("default", "cache", ""),
					running("default", "api", ""),
					running("team-a", "db", ""), // default/db is of another namespace
				}
			},
		},
		{
			name: "an empty selector covers every pod of its namespace; the first budget that allows nothing is named",
			pods: []corev1.Pod{
				testPod("team-b", "x", on("k-worker-2")),
				testPod("kube-system", "y", on("k-worker-2")),
			},
			pdbs: []policyv1.PodDisruptionBudget{
				pdb("team-b", "a-some", app("x"), 2),
				pdb("team-b", "b-all", &metav1.LabelSelector{}, 0),
				pdb("team-b", "c-all", &metav1.LabelSelector{}, 0),
				pdb("kube-system", "all", &metav1.LabelSelector{}, 0),
			},
			want: func(d *provider.Demand) {
				d.Nodes[2].Workloads = []provider.Workload{
					running("team-b", "x", "PodDisruptionBudget team-b/b-all allows no disruption now"),
					running("kube-system", "y", "PodDisruptionBudget kube-system/all allows no disruption now"),
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			want := demandBase()
			if tc.want != nil {
				tc.want(&want)
			}
			got := demandOf(demandNodes, demandKubeNodes(), tc.pods, tc.pdbs)
			if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("demand (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDemandOfNodes: each transit node the API server lists, with its
// allocatable resources and labels, schedulable only when Ready and not
// cordoned; Nodes transit did not make and transit nodes without a Node
// are left out; the result shares no map with the lists.
func TestDemandOfNodes(t *testing.T) {
	t.Parallel()
	kns := []corev1.Node{
		testNode("k-worker-1", true, false, "3500m", "7Gi", map[string]string{"tier": "web"}),
		testNode("k-worker-2", false, false, "4", "8Gi", nil),
		testNode("k-worker-3", true, false, "", "", nil), // no status yet
		testNode("other", true, false, "4", "8Gi", nil),
	}
	kns[2].Status.Conditions, kns[2].Status.Allocatable = nil, nil
	nodes := []districts.Node{{ID: "k-worker-1"}, {ID: "k-worker-2"}, {ID: "k-worker-3"}, {ID: "k-worker-4"}}
	pods := []corev1.Pod{testPod("default", "p", on("k-worker-1"), nodeSelector("tier", "web"))}
	got := demandOf(nodes, kns, pods, nil)
	want := provider.Demand{Nodes: []provider.NodeLoad{
		{Node: "k-worker-1", MilliCPU: 3500, MemoryBytes: 7168 * mi, Pods: 110, Labels: map[string]string{"tier": "web"}, Schedulable: true,
			Workloads: []provider.Workload{{Name: "default/p", MilliCPU: 100, MemoryBytes: 64 * mi, Selector: map[string]string{"tier": "web"}}}},
		{Node: "k-worker-2", MilliCPU: 4000, MemoryBytes: 8192 * mi, Pods: 110},
		{Node: "k-worker-3"},
	}}
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("demand (-want +got):\n%s", diff)
	}
	got.Nodes[0].Labels["tier"] = "changed"
	got.Nodes[0].Workloads[0].Selector["tier"] = "changed"
	if kns[0].Labels["tier"] != "web" || pods[0].Spec.NodeSelector["tier"] != "web" {
		t.Error("the demand shares its maps with the lists")
	}
}

// TestDemandUnreachable: when no master's API server answers, or its
// Lists fail, Demand is an error matching provider.ErrPlatformUnreachable
// naming the masters, and the client that failed is forgotten.
func TestDemandUnreachable(t *testing.T) {
	t.Parallel()
	m1 := districts.Node{ID: "k-master-1", Role: districts.RoleMaster, PrivateIP: "10.0.0.2"}
	m2 := districts.Node{ID: "k-master-2", Role: districts.RoleMaster}
	w1 := districts.Node{ID: "k-worker-1", Role: districts.RoleWorker, PrivateIP: "10.0.0.3"}

	t.Run("no API server answers", func(t *testing.T) {
		t.Parallel()
		d := newDriver(districts.Cluster{ID: "k"}, Options{}, &noAPIRunner{})
		_, err := d.Demand(t.Context(), []districts.Node{w1, m2, m1})
		ue, ok := errors.AsType[*provider.UnreachableError](err)
		if !errors.Is(err, provider.ErrPlatformUnreachable) || !ok {
			t.Fatalf("Demand = %v, want an *UnreachableError", err)
		}
		if !slices.Equal(ue.Masters, []string{"k-master-1", "k-master-2"}) {
			t.Errorf("masters %q, want both", ue.Masters)
		}
	})

	t.Run("the lists fail", func(t *testing.T) {
		t.Parallel()
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		cfg := &rest.Config{Host: "http://" + addr}
		c, err := clientset.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		d := newDriver(districts.Cluster{ID: "k"}, Options{}, &noAPIRunner{})
		d.api = &api{c: c, cfg: cfg, master: m1}
		_, err = d.Demand(t.Context(), []districts.Node{m1, w1})
		ue, ok := errors.AsType[*provider.UnreachableError](err)
		if !errors.Is(err, provider.ErrPlatformUnreachable) || !ok || !slices.Equal(ue.Masters, []string{"k-master-1"}) {
			t.Fatalf("Demand = %v, want an *UnreachableError naming k-master-1", err)
		}
		if d.api != nil {
			t.Error("the client whose Lists failed is kept")
		}
	})
}

// BenchmarkDemandOf converts the lists of a cluster of 1,000 nodes and
// 10,000 pods (7,000 running, 2,000 pending, a DaemonSet pod per node;
// 200 budgets in 50 namespaces) into its demand.
func BenchmarkDemandOf(b *testing.B) {
	nodes, kns, pods, pdbs := largeCluster(1000, 7000, 2000, 50, 200)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		d := demandOf(nodes, kns, pods, pdbs)
		if len(d.Pending) != 2000 || len(d.Nodes) != 1000 {
			b.Fatalf("%d pending, %d nodes", len(d.Pending), len(d.Nodes))
		}
	}
}

// largeCluster makes the lists of a cluster of n transit nodes, running
// pods spread over them, pending pods, one DaemonSet pod per node, and
// budgets over namespaces.
func largeCluster(n, running, pendingPods, namespaces, budgets int) ([]districts.Node, []corev1.Node, []corev1.Pod, []policyv1.PodDisruptionBudget) {
	var nodes []districts.Node
	var kns []corev1.Node
	for i := range n {
		name := fmt.Sprintf("k-worker-%d", i)
		nodes = append(nodes, districts.Node{ID: name, Role: districts.RoleWorker})
		kns = append(kns, testNode(name, true, false, "4", "16Gi", map[string]string{
			"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
			"tier": []string{"web", "db", "batch"}[i%3], "transit.io/cluster": "k", "transit.io/district": fmt.Sprintf("d%d", i%4),
		}))
	}
	var pods []corev1.Pod
	appName := func(i int) string { return fmt.Sprintf("app-%d", i%(budgets*2)) }
	ns := func(i int) string { return fmt.Sprintf("ns-%d", i%namespaces) }
	for i := range running {
		p := testPod(ns(i%(budgets*2)), fmt.Sprintf("run-%d", i), on(fmt.Sprintf("k-worker-%d", i%n)), phase(corev1.PodRunning),
			containers(ctr("main", "250m", "256Mi"), ctr("proxy", "50m", "32Mi")), initContainers(ctr("init", "100m", "16Mi")),
			nodeSelector("tier", "web"))
		p.Labels = map[string]string{"app": appName(i), "pod-template-hash": "abc"}
		if i%10 == 0 {
			volume(corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}})(&p)
		}
		pods = append(pods, p)
	}
	for i := range n {
		pods = append(pods, testPod("kube-system", fmt.Sprintf("flannel-%d", i), on(fmt.Sprintf("k-worker-%d", i)), ownedBy("DaemonSet"), phase(corev1.PodRunning)))
	}
	for i := range pendingPods {
		p := testPod(ns(i), fmt.Sprintf("pending-%d", i), unsched, containers(ctr("main", "1", "1Gi")),
			required(term(expr("transit.io/district", corev1.NodeSelectorOpIn, "d1"), expr("tier", corev1.NodeSelectorOpIn, "batch"))))
		pods = append(pods, p)
	}
	var pdbs []policyv1.PodDisruptionBudget
	for i := range budgets {
		pdbs = append(pdbs, pdb(ns(i), appName(i), app(appName(i)), int32(i%2)))
	}
	return nodes, kns, pods, pdbs
}
