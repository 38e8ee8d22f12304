package kubernetes

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cloudtransit/transit/districts"
)

// flannelDaemonSet is flannel's DaemonSet as transit renders it.
func flannelDaemonSet(t *testing.T, d *driver) *appsv1.DaemonSet {
	t.Helper()
	objs, err := d.renderAddon(districts.Addon{Name: "flannel"})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.GetKind() == "DaemonSet" {
			var ds appsv1.DaemonSet
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &ds); err != nil {
				t.Fatal(err)
			}
			return &ds
		}
	}
	t.Fatal("flannel has no DaemonSet")
	return nil
}

// placeable says whether the DaemonSet controller would run ds's pod on
// kn, as far as its required node affinity says (flannel tolerates every
// NoSchedule taint).
func placeable(t *testing.T, ds *appsv1.DaemonSet, kn *corev1.Node) bool {
	t.Helper()
	aff := ds.Spec.Template.Spec.Affinity
	if aff == nil || aff.NodeAffinity == nil || aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return true
	}
	for _, term := range aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		sel := labels.NewSelector()
		for _, e := range term.MatchExpressions {
			op := map[corev1.NodeSelectorOperator]selection.Operator{corev1.NodeSelectorOpIn: selection.In, corev1.NodeSelectorOpNotIn: selection.NotIn,
				corev1.NodeSelectorOpExists: selection.Exists, corev1.NodeSelectorOpDoesNotExist: selection.DoesNotExist}[e.Operator]
			r, err := labels.NewRequirement(e.Key, op, e.Values)
			if err != nil {
				t.Fatalf("flannel's node affinity: %v", err)
			}
			sel = sel.Add(*r)
		}
		if sel.Matches(labels.Set(kn.Labels)) {
			return true
		}
	}
	return false
}

// podNetworkCluster is an API server with a kubelet and flannel's
// DaemonSet controller as far as the pod network cares: "kubeadm join"
// has the node's kubelet register its Node with the labels of its
// nodeRegistration (--node-labels), and the first time a Node written
// (created, updated) is one flannel's DaemonSet runs on, flanneld
// starts there, reading the Node's public-address annotation once.
type podNetworkCluster struct {
	noTransfers
	t  *testing.T
	c  *fake.Clientset
	ds *appsv1.DaemonSet

	mu      sync.Mutex
	started map[string]string // node -> annotationPublicIP when flanneld started
}

func newPodNetworkCluster(t *testing.T, ds *appsv1.DaemonSet) *podNetworkCluster {
	p := &podNetworkCluster{t: t, c: fake.NewClientset(), ds: ds, started: map[string]string{}}
	react := k8stesting.ObjectReaction(p.c.Tracker())
	p.c.PrependReactor("*", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if v := a.GetVerb(); v != "create" && v != "update" && v != "patch" {
			return false, nil, nil
		}
		handled, obj, err := react(a)
		if kn, ok := obj.(*corev1.Node); ok && err == nil {
			p.mu.Lock()
			start := false
			if _, done := p.started[kn.Name]; !done && placeable(t, p.ds, kn) {
				p.started[kn.Name] = kn.Annotations[annotationPublicIP]
				start = true
			}
			p.mu.Unlock()
			if start {
				// The pod network runs on the node: its kubelet says Ready.
				ready := kn.DeepCopy()
				ready.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
				if err := p.c.Tracker().Update(corev1.SchemeGroupVersion.WithResource("nodes"), ready, ""); err != nil {
					t.Error(err)
				}
			}
		}
		return handled, obj, err
	})
	return p
}

func (p *podNetworkCluster) Run(ctx context.Context, n districts.Node, name, _ string, stdin []byte) (string, error) {
	switch name {
	case "probe the node":
		return "systemd=no\n", nil
	case "kubeadm join", "kubeadm init":
		reg := docs(p.t, string(stdin))
		cfg := reg["JoinConfiguration"]
		if cfg == nil {
			cfg = reg["InitConfiguration"]
		}
		kn := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: get(cfg, "nodeRegistration", "name").(string),
			Labels: map[string]string{"kubernetes.io/os": "linux", "kubernetes.io/hostname": n.ID}}}
		args, _ := get(cfg, "nodeRegistration", "kubeletExtraArgs").([]any)
		for _, a := range args {
			if arg, _ := a.(map[string]any); arg["name"] == "node-labels" {
				for _, kv := range strings.Split(arg["value"].(string), ",") {
					k, v, _ := strings.Cut(kv, "=")
					kn.Labels[k] = v
				}
			}
		}
		_, err := p.c.CoreV1().Nodes().Create(ctx, kn, metav1.CreateOptions{})
		return "", err
	}
	return "", nil
}

// A node whose public address is not its own (a cloud VM behind NAT)
// has flanneld start with that address: the annotation is on its Node
// before flannel's DaemonSet may run there, never after. The node's
// kubelet registers it held back (labelNetworkPending); the join
// releases it in the write that sets the annotation.
func TestFlannelStartsWithThePublicAddress(t *testing.T) {
	m := districts.Node{ID: "k-master-1", District: "aws-eu", Role: districts.RoleMaster, PrivateIP: "172.31.0.2", PublicIP: "198.51.100.2"}
	d := newDriver(districts.Cluster{ID: "k"}, Options{Install: map[string]string{"aws-eu": districts.InstallPackages, "gce-eu": districts.InstallPackages}}, nil)
	p := newPodNetworkCluster(t, flannelDaemonSet(t, d))
	d.r = p
	d.api = &api{c: p.c, master: m, caHash: "sha256:00ff"}
	d.addMaster(m)
	started := func(id string) (string, bool) {
		p.mu.Lock()
		defer p.mu.Unlock()
		got, ok := p.started[id]
		return got, ok
	}

	n := districts.Node{ID: "k-worker-1", District: "gce-eu", Role: districts.RoleWorker, PrivateIP: "10.156.0.5", PublicIP: "203.0.113.5"}
	if err := d.Join(t.Context(), n); err != nil {
		t.Fatal(err)
	}
	got, ok := started(n.ID)
	if !ok {
		t.Fatal("flannel may never start on the joined node: transit did not release it")
	}
	if got != n.PublicIP {
		t.Errorf("flanneld started on %s with public-ip-overwrite %q, want %q: it would announce the node's private address until restarted", n.ID, got, n.PublicIP)
	}
	kn, err := p.c.CoreV1().Nodes().Get(t.Context(), n.ID, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, held := kn.Labels[labelNetworkPending]; held {
		t.Errorf("the joined node still holds %s", labelNetworkPending)
	}

	// A join cut short after the kubelet registered its Node: the next
	// Join finds the Node and releases it.
	w2 := districts.Node{ID: "k-worker-2", District: "gce-eu", Role: districts.RoleWorker, PrivateIP: "10.156.0.6", PublicIP: "203.0.113.6"}
	registered := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: w2.ID, Labels: map[string]string{"kubernetes.io/os": "linux", labelNetworkPending: "true"}}}
	if _, err := p.c.CoreV1().Nodes().Create(t.Context(), registered, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, ok := started(w2.ID); ok {
		t.Fatal("flannel may start on a node registered held back")
	}
	if err := d.Join(t.Context(), w2); err != nil {
		t.Fatal(err)
	}
	if got, ok := started(w2.ID); !ok || got != w2.PublicIP {
		t.Errorf("after a cut-short join flanneld started: %t, with %q; want with %q", ok, got, w2.PublicIP)
	}
}

// Every node registers held back from the pod network (init and joins);
// flannel's DaemonSet runs only on nodes released, and still tolerates
// every NoSchedule taint (an operator's own too).
func TestPodNetworkHeldBackAtRegistration(t *testing.T) {
	s := testSettings()
	sec := joinSecrets{token: "abcdef.0123456789abcdef", caHash: "sha256:00ff", certificateKey: "c0ffee"}
	want := map[string]any{"name": "node-labels", "value": labelNetworkPending + "=true"}
	for name, y := range map[string]string{"init": s.initConfig(), "worker join": s.joinConfig(sec, false), "master join": s.joinConfig(sec, true)} {
		d := docs(t, y)
		reg := d["InitConfiguration"]
		if reg == nil {
			reg = d["JoinConfiguration"]
		}
		args, _ := get(reg, "nodeRegistration", "kubeletExtraArgs").([]any)
		found := false
		for _, a := range args {
			found = found || cmp.Equal(a, any(want))
		}
		if !found {
			t.Errorf("%s: kubeletExtraArgs %v lack %v", name, args, want)
		}
	}

	ds := flannelDaemonSet(t, newDriver(districts.Cluster{ID: "k"}, Options{}, nil))
	held := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"kubernetes.io/os": "linux", labelNetworkPending: "true"}}}
	released := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"kubernetes.io/os": "linux"}}}
	if placeable(t, ds, held) {
		t.Error("flannel may run on a node transit has not released")
	}
	if !placeable(t, ds, released) {
		t.Error("flannel may not run on a released node")
	}
	wantTol := []corev1.Toleration{{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	if diff := cmp.Diff(wantTol, ds.Spec.Template.Spec.Tolerations); diff != "" {
		t.Errorf("flannel's tolerations (-want +got):\n%s", diff)
	}
}

// Releasing sets the annotation and drops the label in one change; a
// node whose public address is its own gets no annotation; a node held
// back reports the label among its transit labels, so the loop labels
// it, which releases it.
func TestReleaseNetwork(t *testing.T) {
	kn := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1", Labels: map[string]string{labelNetworkPending: "true", "site": "a"},
		Annotations: map[string]string{annotationManaged: "site"}}}
	if diff := cmp.Diff(map[string]string{"site": "a", labelNetworkPending: "true"}, tagLabels(kn)); diff != "" {
		t.Errorf("a held-back node's transit labels (-want +got):\n%s", diff)
	}
	local := districts.Node{ID: "w1", PrivateIP: "10.240.1.5", PublicIP: "10.240.1.5"}
	if !releaseNetwork(kn, local) || kn.Annotations[annotationPublicIP] != "" || kn.Labels[labelNetworkPending] != "" {
		t.Errorf("released local node: %v %v", kn.Labels, kn.Annotations)
	}
	if releaseNetwork(kn, local) {
		t.Error("releasing twice changed the node")
	}
	cloud := districts.Node{ID: "w1", PrivateIP: "10.0.0.5", PublicIP: "203.0.113.5"}
	kn.Labels[labelNetworkPending] = "true"
	if !relabel(kn, map[string]string{"site": "a"}, cloud) {
		t.Fatal("relabel of a held-back node reported no change")
	}
	if _, held := kn.Labels[labelNetworkPending]; held || kn.Annotations[annotationPublicIP] != "203.0.113.5" {
		t.Errorf("relabelled: %v %v", kn.Labels, kn.Annotations)
	}
}
