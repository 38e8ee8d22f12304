package kubernetes

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientset "k8s.io/client-go/kubernetes"

	"github.com/cloudtransit/transit/clock/clocktest"
	"github.com/cloudtransit/transit/controllers/testenv"
	"github.com/cloudtransit/transit/districts"
)

// clusterDNS is the kube-dns Service as a master reaches it through its
// SSH tunnel: DNS over TCP, refused (a Service without ready endpoints)
// until it answers, then A records of the cluster's names.
type clusterDNS struct {
	t      *testing.T
	master string
	server string // the address dials must go to
	names  map[string]netip.Addr

	mu        sync.Mutex
	answering bool
	asked     int
}

func (c *clusterDNS) Run(context.Context, districts.Node, string, string, []byte) (string, error) {
	return "", errors.New("no scripts")
}

func (c *clusterDNS) Upload(context.Context, districts.Node, string, fs.FileMode, io.Reader, int64) error {
	return errors.New("no uploads")
}

func (c *clusterDNS) DialContext(_ context.Context, n districts.Node, network, addr string) (net.Conn, error) {
	if n.ID != c.master || network != "tcp" || addr != c.server {
		c.t.Errorf("dialled %s %s from %s, want tcp %s from %s", network, addr, n.ID, c.server, c.master)
		return nil, errors.New("unexpected dial")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.asked++
	if !c.answering {
		return nil, errors.New("ssh: rejected: connect failed (Connection refused)")
	}
	client, server := net.Pipe()
	go c.serve(server)
	return client, nil
}

func (c *clusterDNS) answer(on bool) {
	c.mu.Lock()
	c.answering = on
	c.mu.Unlock()
}

// serve answers DNS messages framed for TCP (a two-byte length first).
func (c *clusterDNS) serve(conn net.Conn) {
	defer func() { _ = conn.Close() }()
	for {
		var l [2]byte
		if _, err := io.ReadFull(conn, l[:]); err != nil {
			return
		}
		q := make([]byte, binary.BigEndian.Uint16(l[:]))
		if _, err := io.ReadFull(conn, q); err != nil {
			return
		}
		resp := c.reply(q)
		if _, err := conn.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(resp))), resp...)); err != nil {
			return
		}
	}
}

// reply answers query q's one question: an A record for a known name,
// nothing for another type of it, NXDOMAIN for an unknown name.
func (c *clusterDNS) reply(q []byte) []byte {
	i := 12
	var labels []string
	for i < len(q) && q[i] != 0 {
		n := int(q[i])
		labels = append(labels, string(q[i+1:i+1+n]))
		i += 1 + n
	}
	i++ // the root label
	qtype := binary.BigEndian.Uint16(q[i:])
	question := q[12 : i+4]
	addr, known := c.names[strings.ToLower(strings.Join(labels, "."))+"."]
	flags, answers := uint16(0x8180), uint16(0) // a response, recursion desired and available
	if !known {
		flags |= 3 // NXDOMAIN
	} else if qtype == 1 {
		answers = 1
	}
	out := append([]byte{q[0], q[1]}, binary.BigEndian.AppendUint16(nil, flags)...)
	out = binary.BigEndian.AppendUint16(out, 1)
	out = binary.BigEndian.AppendUint16(out, answers)
	out = append(out, 0, 0, 0, 0)
	out = append(out, question...)
	if answers == 1 {
		ip := addr.As4()
		out = append(out, 0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 30, 0, 4)
		out = append(out, ip[:]...)
	}
	return out
}

// addonsWorld is what runs the addons once applied, on an API server
// without kubelets: flannel's pods on each node become Ready and take
// the node's lease, CoreDNS's Deployment becomes available, and the
// cluster DNS starts answering, one step per wait of the addons step.
type addonsWorld struct {
	t     *testing.T
	c     clientset.Interface
	dns   *clusterDNS
	steps []func(ctx context.Context)

	mu   sync.Mutex
	done int
}

func (w *addonsWorld) onSleep(ctx context.Context, _ time.Duration) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done < len(w.steps) {
		w.steps[w.done](ctx)
		w.done++
	}
	return nil
}

func (w *addonsWorld) stepsDone() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.done
}

// flannelUp runs flannel's pod on node Ready and has it take the node's
// lease, announcing public (as flanneld does: the overwrite, when set);
// the DaemonSet's status then counts available pods of two nodes.
func flannelUp(t *testing.T, c clientset.Interface, node, public string, available int32) func(context.Context) {
	return func(ctx context.Context) {
		ds, err := c.AppsV1().DaemonSets(flannelNamespace).Get(ctx, "kube-flannel-ds", metav1.GetOptions{})
		if err != nil {
			t.Errorf("flannel's DaemonSet: %v", err)
			return
		}
		ds.Status = appsv1.DaemonSetStatus{ObservedGeneration: ds.Generation, DesiredNumberScheduled: 2, CurrentNumberScheduled: available,
			UpdatedNumberScheduled: available, NumberReady: available, NumberAvailable: available}
		if _, err := c.AppsV1().DaemonSets(flannelNamespace).UpdateStatus(ctx, ds, metav1.UpdateOptions{}); err != nil {
			t.Errorf("flannel's DaemonSet: %v", err)
		}
		no := false
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "kube-flannel-ds-" + node, Namespace: flannelNamespace, Labels: map[string]string{"app": "flannel"}},
			Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: "flannel", AutomountServiceAccountToken: &no,
				Containers: []corev1.Container{{Name: "kube-flannel", Image: "flannel"}}}}
		p, err = c.CoreV1().Pods(flannelNamespace).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Errorf("flannel's pod on %s: %v", node, err)
			return
		}
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		if _, err := c.CoreV1().Pods(flannelNamespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Errorf("flannel's pod on %s: %v", node, err)
		}
		kn, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Errorf("node %s: %v", node, err)
			return
		}
		kn.Annotations = map[string]string{annotationFlannelManaged: "true", annotationFlannelPublic: public}
		if _, err := c.CoreV1().Nodes().Update(ctx, kn, metav1.UpdateOptions{}); err != nil {
			t.Errorf("node %s: %v", node, err)
		}
	}
}

// ghostDown adds Node name, not ready, with a flannel pod of the
// DaemonSet's that never runs, counted as desired and updated but not
// available, as the DaemonSet controller counts it.
func ghostDown(t *testing.T, c clientset.Interface, name string) {
	t.Helper()
	ctx := t.Context()
	kn, err := c.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kn.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown}}
	if _, err := c.CoreV1().Nodes().UpdateStatus(ctx, kn, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ds, err := c.AppsV1().DaemonSets(flannelNamespace).Get(ctx, "kube-flannel-ds", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	no := false
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "kube-flannel-ds-" + name, Namespace: flannelNamespace,
		Labels:          ds.Spec.Selector.MatchLabels,
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(ds, appsv1.SchemeGroupVersion.WithKind("DaemonSet"))}},
		Spec: corev1.PodSpec{NodeName: name, ServiceAccountName: "flannel", AutomountServiceAccountToken: &no,
			Containers: []corev1.Container{{Name: "kube-flannel", Image: "flannel"}}}}
	if _, err := c.CoreV1().Pods(flannelNamespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	st := ds.Status
	st.DesiredNumberScheduled++
	st.CurrentNumberScheduled++
	st.UpdatedNumberScheduled++
	ds.Status = st
	if _, err := c.AppsV1().DaemonSets(flannelNamespace).UpdateStatus(ctx, ds, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func readyNode(t *testing.T, c clientset.Interface, name string) {
	t.Helper()
	kn, err := c.CoreV1().Nodes().Create(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kn.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	if _, err := c.CoreV1().Nodes().UpdateStatus(t.Context(), kn, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// The addons step ends only once the cluster is usable: flannel's pod
// Ready on every node with the node's lease taken, CoreDNS available and
// the cluster DNS answering the kubernetes Service's name with its
// address, each waited for on the driver's clock. Past the bound the
// error names the addon and what is not ready: the nodes without the pod
// network, the DNS that does not answer.
func TestEnsureAddonsWaitsUntilUsable(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	c, err := clientset.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	m := districts.Node{ID: "k-master-1", Role: districts.RoleMaster, PrivateIP: "10.240.1.2"}
	// envtest's service range: the cluster DNS is its 10th address.
	dns := &clusterDNS{t: t, master: m.ID, server: "10.0.0.10:53",
		names: map[string]netip.Addr{"kubernetes.default.svc.cluster.local.": netip.MustParseAddr("10.0.0.1")}}
	clk := clocktest.NewFake(time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC))
	d := newDriver(districts.Cluster{ID: "k", Kubernetes: &districts.Kubernetes{ServiceCIDR: "10.0.0.0/24"}}, Options{Clock: clk}, dns)
	d.api = &api{c: c, cfg: env.Config, master: m}
	readyNode(t, c, "k-master-1")
	readyNode(t, c, "k-worker-1")

	w := &addonsWorld{t: t, c: c, dns: dns, steps: []func(context.Context){
		flannelUp(t, c, "k-master-1", "10.240.1.2", 1),
		flannelUp(t, c, "k-worker-1", "10.240.1.3", 2),
		func(context.Context) { markAvailable(t, c, "kube-system", "coredns") },
		func(context.Context) { dns.answer(true) },
	}}
	clk.OnSleep = w.onSleep
	began := clk.Peek()
	changed, err := d.EnsureAddons(t.Context(), nil)
	if err != nil {
		t.Fatalf("EnsureAddons: %v", err)
	}
	if got := w.stepsDone(); got != len(w.steps) {
		t.Errorf("EnsureAddons returned after %d of %d steps to a usable cluster (changed %q)", got, len(w.steps), changed)
	}
	if waited := clk.Peek().Sub(began); waited >= addonReadyTimeout {
		t.Errorf("waited %s, the bound is %s", waited, addonReadyTimeout)
	}
	sts, err := d.AddonStatus(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range sts {
		if !st.Ready {
			t.Errorf("status after the addons step: %+v", st)
		}
	}

	// A member that is down (a kubelet that registered under its machine's
	// hostname, the machine gone since) keeps a flannel pod it never runs:
	// the DaemonSet counts it, the addons still serve the other nodes.
	ghostDown(t, c, "i-0d6238072a341a1e4")
	w.mu.Lock()
	w.steps, w.done = nil, 0
	w.mu.Unlock()
	began = clk.Peek()
	if _, err := d.EnsureAddons(t.Context(), nil); err != nil {
		t.Errorf("EnsureAddons with a member down: %v", err)
	}
	if waited := clk.Peek().Sub(began); waited >= addonReadyTimeout {
		t.Errorf("with a member down, waited %s", waited)
	}

	// A cluster that is not usable: past the bound, the error says why.
	for _, tc := range []struct {
		name  string
		spoil func(t *testing.T)
		want  []string
	}{
		{
			name:  "the DNS does not answer",
			spoil: func(*testing.T) { dns.answer(false) },
			want:  []string{"addon coredns does not serve after 4m0s", "the cluster DNS 10.0.0.10 does not answer kubernetes.default.svc.cluster.local.", "asked from master k-master-1", "kubectl -n kube-system get pods,events"},
		},
		{
			name: "a node without flannel",
			spoil: func(t *testing.T) {
				dns.answer(true)
				readyNode(t, c, "k-worker-2")
			},
			want: []string{"addon flannel does not serve after 4m0s", "the pod network is not up on 1 of 4 nodes: k-worker-2 (no Ready flannel pod)", "kubectl -n kube-flannel get pods,events"},
		},
		{
			name: "a node held back, another announcing its private address",
			spoil: func(t *testing.T) {
				if err := c.CoreV1().Pods(flannelNamespace).Delete(t.Context(), "kube-flannel-ds-k-worker-2", metav1.DeleteOptions{}); err != nil && !strings.Contains(err.Error(), "not found") {
					t.Fatal(err)
				}
				kn, err := c.CoreV1().Nodes().Get(t.Context(), "k-worker-2", metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				kn.Labels = map[string]string{labelNetworkPending: "true"}
				if _, err := c.CoreV1().Nodes().Update(t.Context(), kn, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
				kn, err = c.CoreV1().Nodes().Get(t.Context(), "k-worker-1", metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if kn.Annotations == nil {
					kn.Annotations = map[string]string{}
				}
				kn.Annotations[annotationPublicIP] = "203.0.113.3"
				if _, err := c.CoreV1().Nodes().Update(t.Context(), kn, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			},
			want: []string{"the pod network is not up on 2 of 4 nodes",
				"k-worker-1 (flanneld announces 10.240.1.3, not the node's public address 203.0.113.3",
				"k-worker-2 (not released by transit yet: label transit.io/pod-network-pending)"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.spoil(t)
			w.mu.Lock()
			w.steps, w.done = nil, 0
			w.mu.Unlock()
			began := clk.Peek()
			_, err := d.EnsureAddons(t.Context(), nil)
			if err == nil {
				t.Fatal("EnsureAddons reported a cluster that is not usable as ready")
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the error does not say %q:\n%v", want, err)
				}
			}
			if waited := clk.Peek().Sub(began); waited < addonReadyTimeout || waited > addonReadyTimeout+addonPollInterval {
				t.Errorf("gave up after %s, want %s", waited, addonReadyTimeout)
			}
		})
	}
	dns.mu.Lock()
	defer dns.mu.Unlock()
	if dns.asked == 0 {
		t.Error("the cluster DNS was never asked")
	}
}
