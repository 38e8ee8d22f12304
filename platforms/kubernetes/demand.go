package kubernetes

import (
	"context"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"golang.org/x/sync/errgroup"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

var _ provider.Demander = (*driver)(nil)

// Demand reads what the cluster's pods ask for through a master among
// nodes, as Members reaches the API server: one List of the Nodes, one of
// the pods and one of the PodDisruptionBudgets, whatever the cluster's
// size (demandOf says what becomes of them). When no master's API server
// answers, or a List fails, the error is a *provider.UnreachableError
// naming the masters (it matches provider.ErrPlatformUnreachable). Unlike
// Members, Demand does not ask every node over SSH whether a cluster
// exists at all: the autoscaler asks often, and cannot scale a cluster it
// cannot read either way.
func (d *driver) Demand(ctx context.Context, nodes []districts.Node) (provider.Demand, error) {
	d.askMastersAmong(nodes)
	a, err := d.client(ctx)
	if err != nil {
		var masters []string
		for _, n := range nodes {
			if n.Role == districts.RoleMaster {
				masters = append(masters, n.ID)
			}
		}
		slices.Sort(masters)
		return provider.Demand{}, &provider.UnreachableError{Masters: masters, Err: fmt.Errorf("read the demand: %w", err)}
	}
	dm, err := listDemand(ctx, a.c, nodes)
	if err != nil {
		d.dropClient(a.master.ID)
		return provider.Demand{}, &provider.UnreachableError{Masters: []string{a.master.ID}, Err: err}
	}
	return dm, nil
}

// askMastersAmong makes the masters among nodes (with an address) the
// ones the driver asks: a master known from earlier that is no longer
// among them, or has no address, is forgotten, and so is a client through
// it.
func (d *driver) askMastersAmong(nodes []districts.Node) {
	askable := func(id string) bool {
		return slices.ContainsFunc(nodes, func(n districts.Node) bool { return n.ID == id && hasAddress(n) })
	}
	d.mu.Lock()
	d.masters = slices.DeleteFunc(d.masters, func(m districts.Node) bool { return !askable(m.ID) })
	if d.api != nil && !askable(d.api.master.ID) {
		d.api = nil
	}
	d.mu.Unlock()
	for _, n := range nodes {
		if n.Role == districts.RoleMaster && hasAddress(n) {
			d.addMaster(n)
		}
	}
}

// listAccept asks the API server for protobuf: at 10,000 pods a fraction
// of JSON's bytes through the SSH tunnel, and of its decoding time.
const listAccept = runtime.ContentTypeProtobuf + ", " + runtime.ContentTypeJSON

// listDemand lists the Nodes, pods and PodDisruptionBudgets of the whole
// cluster, once each and at once, and makes the demand of them
// (demandOf).
func listDemand(ctx context.Context, c clientset.Interface, nodes []districts.Node) (provider.Demand, error) {
	var (
		kns  corev1.NodeList
		pods corev1.PodList
		pdbs policyv1.PodDisruptionBudgetList
	)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return listAll(gctx, c.CoreV1().RESTClient(), "nodes", &kns) })
	g.Go(func() error { return listAll(gctx, c.CoreV1().RESTClient(), "pods", &pods) })
	g.Go(func() error { return listAll(gctx, c.PolicyV1().RESTClient(), "poddisruptionbudgets", &pdbs) })
	if err := g.Wait(); err != nil {
		return provider.Demand{}, err
	}
	return demandOf(nodes, kns.Items, pods.Items, pdbs.Items), nil
}

// listAll lists every object of resource, in every namespace, in one
// request: no pages, one consistent view (an API server since v1.31
// serves it from its watch cache, not etcd).
func listAll(ctx context.Context, rc rest.Interface, resource string, into runtime.Object) error {
	if err := rc.Get().Resource(resource).SetHeader("Accept", listAccept).Do(ctx).Into(into); err != nil {
		return fmt.Errorf("list %s: %w", resource, err)
	}
	return nil
}

// Why a running pod would not run elsewhere if its node went: Cluster
// Autoscaler's default rules (its drainability rules with
// skip-nodes-with-local-storage and skip-nodes-with-system-pods on), the
// first that applies.
const (
	unmovableBare         = "no controller: a bare pod"
	unmovableLocalStorage = "keeps data on the node (emptyDir/hostPath)"
	unmovableSystem       = "kube-system pod without a PodDisruptionBudget"
	unmovableBudgetFormat = "PodDisruptionBudget %s/%s allows no disruption now"
)

// demandOf is the demand the API server's lists say, for the transit
// nodes among nodes (a Node is transit's node of the same name):
//
//   - Pending are the pods the scheduler found no node for (condition
//     PodScheduled False, reason Unschedulable), in any namespace, that
//     are not being deleted, not finished, and not a DaemonSet's (its pod
//     for a node can run on that node only; a new node gets its own).
//   - Nodes are the transit nodes the API server lists, with their
//     allocatable cpu and memory, their labels, and Schedulable when Ready
//     and not cordoned. Its Workloads are the pods bound to it that have
//     not finished, except DaemonSet and mirror (static) pods, which go
//     with the node: what they ask is its Overhead instead. Pods bound to
//     a node transit does not know are left out.
//
// A workload's requests are the Kubernetes effective requests
// (podRequest); its Selector the node labels it requires (selectorOf).
// Tolerations are not read: transit's workers carry no taints, and its
// masters, which do, are never autoscaled. Neither are pod (anti-)affinity,
// topology spread constraints nor preferred node affinity: a pod they keep
// off every node looks as if it fitted a new one of its selector.
//
// The result shares no map with the lists. It takes time linear in the
// lists' sizes (budgets are matched within the pod's namespace only).
func demandOf(nodes []districts.Node, kns []corev1.Node, pods []corev1.Pod, pdbs []policyv1.PodDisruptionBudget) provider.Demand {
	known := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		known[n.ID] = true
	}
	var out provider.Demand
	at := make(map[string]int, len(kns)) // Node name -> index in out.Nodes
	for i := range kns {
		kn := &kns[i]
		if !known[kn.Name] {
			continue
		}
		at[kn.Name] = len(out.Nodes)
		out.Nodes = append(out.Nodes, provider.NodeLoad{
			Node:        kn.Name,
			MilliCPU:    quantity(kn.Status.Allocatable, corev1.ResourceCPU),
			MemoryBytes: quantity(kn.Status.Allocatable, corev1.ResourceMemory),
			Pods:        kn.Status.Allocatable.Pods().Value(),
			Labels:      maps.Clone(kn.Labels),
			Schedulable: nodeReady(kn) && !kn.Spec.Unschedulable,
		})
	}
	budgets := budgetsByNamespace(pdbs)
	for i := range pods {
		p := &pods[i]
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if p.Spec.NodeName == "" {
			if unschedulable(p) && p.DeletionTimestamp == nil && !daemonSetPod(p) {
				out.Pending = append(out.Pending, workloadOf(p))
			}
			continue
		}
		j, ok := at[p.Spec.NodeName]
		if !ok {
			continue
		}
		nl := &out.Nodes[j]
		if stays(p) {
			nl.OverheadMilliCPU += podRequest(&p.Spec, corev1.ResourceCPU)
			nl.OverheadMemoryBytes += podRequest(&p.Spec, corev1.ResourceMemory)
			nl.OverheadPods++
			continue
		}
		w := workloadOf(p)
		w.Unmovable = unmovable(p, budgets[p.Namespace])
		nl.Workloads = append(nl.Workloads, w)
	}
	return out
}

func workloadOf(p *corev1.Pod) provider.Workload {
	return provider.Workload{
		Name:        p.Namespace + "/" + p.Name,
		MilliCPU:    podRequest(&p.Spec, corev1.ResourceCPU),
		MemoryBytes: podRequest(&p.Spec, corev1.ResourceMemory),
		Selector:    selectorOf(&p.Spec),
	}
}

// unschedulable says the scheduler tried p and found no node for it.
func unschedulable(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			return c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable
		}
	}
	return false
}

func daemonSetPod(p *corev1.Pod) bool {
	c := metav1.GetControllerOf(p)
	return c != nil && c.Kind == "DaemonSet"
}

// quantity is rl's name in millicores for cpu, else in units (bytes for
// memory); 0 when absent.
func quantity(rl corev1.ResourceList, name corev1.ResourceName) int64 {
	q, ok := rl[name]
	if !ok {
		return 0
	}
	if name == corev1.ResourceCPU {
		return q.MilliValue()
	}
	return q.Value()
}

// podRequest is what the scheduler reserves for a pod of spec, of
// resource name (Kubernetes' effective request, as
// k8s.io/component-helpers/resource.PodRequests computes it): the
// pod-level request when the pod sets one; else the greater of the sum of
// its containers' and sidecars' (restartable init containers') requests
// and each other init container's request plus those of the sidecars
// started before it; plus the pod's overhead (its RuntimeClass's). An
// in-place resize under way is not read: the spec's requests count.
func podRequest(spec *corev1.PodSpec, name corev1.ResourceName) int64 {
	overhead := quantity(spec.Overhead, name)
	if spec.Resources != nil {
		if _, ok := spec.Resources.Requests[name]; ok {
			return quantity(spec.Resources.Requests, name) + overhead
		}
	}
	var sum int64
	for i := range spec.Containers {
		sum += quantity(spec.Containers[i].Resources.Requests, name)
	}
	var sidecars, initMax int64
	for i := range spec.InitContainers {
		c := &spec.InitContainers[i]
		r := quantity(c.Resources.Requests, name)
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			// A sidecar runs on beside every container started after it.
			sum += r
			sidecars += r
			r = sidecars
		} else {
			r += sidecars
		}
		initMax = max(initMax, r)
	}
	return max(sum, initMax) + overhead
}

// selectorOf is the node labels a pod of spec requires: its nodeSelector,
// and its required node affinity when that is one term whose expressions
// are each `In` of one value (each a label equal to that value). A
// required affinity a map of labels cannot say (several terms, which are
// ORed; NotIn, Exists, Gt, several values; matchFields; a value for a key
// that contradicts another) is left out: such a pod looks as if it fitted
// any node of its nodeSelector.
func selectorOf(spec *corev1.PodSpec) map[string]string {
	out := maps.Clone(spec.NodeSelector)
	a := spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return out
	}
	terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) != 1 || len(terms[0].MatchFields) > 0 || len(terms[0].MatchExpressions) == 0 {
		return out
	}
	exprs := terms[0].MatchExpressions
	for i, e := range exprs {
		if e.Operator != corev1.NodeSelectorOpIn || len(e.Values) != 1 {
			return out
		}
		if v, ok := spec.NodeSelector[e.Key]; ok && v != e.Values[0] {
			return out
		}
		for _, f := range exprs[:i] {
			if f.Key == e.Key && f.Values[0] != e.Values[0] {
				return out
			}
		}
	}
	if out == nil {
		out = make(map[string]string, len(exprs))
	}
	for _, e := range exprs {
		out[e.Key] = e.Values[0]
	}
	return out
}

// budget is a PodDisruptionBudget, its selector parsed once.
type budget struct {
	name     string
	selector labels.Selector
	allowed  int32
}

// budgetsByNamespace parses each budget's selector once and groups the
// budgets by namespace, the only pods they cover. A budget without a
// selector covers no pod, one with an empty selector every pod of its
// namespace (policy/v1).
func budgetsByNamespace(pdbs []policyv1.PodDisruptionBudget) map[string][]budget {
	out := make(map[string][]budget)
	for i := range pdbs {
		b := &pdbs[i]
		sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
		if err != nil {
			sel = labels.Nothing() // the API server validates selectors: not seen
		}
		out[b.Namespace] = append(out[b.Namespace], budget{name: b.Name, selector: sel, allowed: b.Status.DisruptionsAllowed})
	}
	return out
}

// unmovable says why p, running, would not run elsewhere if its node
// went, or "" when it would (ns are the budgets of its namespace). A pod
// being deleted is leaving anyway: it moves.
func unmovable(p *corev1.Pod, ns []budget) string {
	if p.DeletionTimestamp != nil {
		return ""
	}
	if metav1.GetControllerOf(p) == nil {
		return unmovableBare
	}
	for i := range p.Spec.Volumes {
		v := &p.Spec.Volumes[i]
		if v.HostPath != nil || (v.EmptyDir != nil && v.EmptyDir.Medium != corev1.StorageMediumMemory) {
			return unmovableLocalStorage
		}
	}
	covered := false
	set := labels.Set(p.Labels)
	for _, b := range ns {
		if !b.selector.Matches(set) {
			continue
		}
		if b.allowed <= 0 {
			return fmt.Sprintf(unmovableBudgetFormat, p.Namespace, b.name)
		}
		covered = true
	}
	if !covered && p.Namespace == metav1.NamespaceSystem {
		return unmovableSystem
	}
	return ""
}
