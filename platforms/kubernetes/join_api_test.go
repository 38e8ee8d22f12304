package kubernetes

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientset "k8s.io/client-go/kubernetes"

	"github.com/cloudtransit/transit/clock/clocktest"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/platforms/ssh"
)

// joinRunner is a node whose kubeadm join fails as listed, one failure
// per attempt, and then succeeds: its kubelet registers the Node, Ready,
// as a real join does before kubeadm returns.
type joinRunner struct {
	noTransfers
	c        clientset.Interface
	mu       sync.Mutex
	failures []string // kubeadm's stderr, one per failing attempt
	joins    int
}

func (r *joinRunner) Run(ctx context.Context, n districts.Node, name, _ string, _ []byte) (string, error) {
	if name != "kubeadm join" {
		return "", nil // the probe, the endpoint's pin
	}
	r.mu.Lock()
	r.joins++
	attempt := r.joins
	r.mu.Unlock()
	if attempt <= len(r.failures) {
		return "", &ssh.RunError{Target: ssh.NodeTarget(n), Name: name, ExitStatus: 1, Stderr: r.failures[attempt-1]}
	}
	kn, err := r.c.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.ID, Labels: map[string]string{labelNetworkPending: ""}}}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	kn.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	_, err = r.c.CoreV1().Nodes().UpdateStatus(ctx, kn, metav1.UpdateOptions{})
	return "", err
}

// A kubeadm join that failed because the API server answered too late is
// joined again (CI run 39 lost a whole conformance run to one such
// preflight); one kubeadm refused for what the node is, or one still
// failing after joinAttempts, is the caller's error at once.
func TestJoinAgainWhenTheAPIServerIsSlow(t *testing.T) {
	c, _, a := addonsAPIServer(t)
	const slow = `[preflight] Reading configuration from the "kubeadm-config" ConfigMap in namespace "kube-system"...
error execution phase preflight: unable to fetch the kubeadm-config ConfigMap: failed to get config map: Get "https://api.k.transit.internal:6443/api/v1/namespaces/kube-system/configmaps/kubeadm-config?timeout=10s": context deadline exceeded`
	const refused = `error execution phase preflight: [preflight] Some fatal errors occurred:
	[ERROR Port-10250]: Port 10250 is in use`
	for i, tc := range []struct {
		name     string
		failures []string
		joins    int
		err      string // "": joined
	}{
		{name: "slow once", failures: []string{slow}, joins: 2},
		{name: "slow twice", failures: []string{slow, slow}, joins: 3},
		{name: "slow every time", failures: []string{slow, slow, slow}, joins: 3, err: "context deadline exceeded"},
		{name: "refused", failures: []string{refused}, joins: 1, err: "Port 10250 is in use"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := districts.Node{ID: "k-worker-" + string(rune('a'+i)), Role: districts.RoleWorker, PrivateIP: "10.0.0.3"}
			r := &joinRunner{c: c, failures: tc.failures}
			clk := clocktest.NewFake(time.Now())
			d := newDriver(districts.Cluster{ID: "k", Kubernetes: &districts.Kubernetes{}}, Options{Clock: clk}, r)
			d.api = a
			err := d.Join(t.Context(), n)
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("Join: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("Join: %v, want an error saying %q", err, tc.err)
			}
			if r.joins != tc.joins {
				t.Errorf("kubeadm join ran %d times, want %d", r.joins, tc.joins)
			}
			if tc.err != "" {
				return
			}
			kn, err := c.CoreV1().Nodes().Get(t.Context(), n.ID, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if _, pending := kn.Labels[labelNetworkPending]; pending {
				t.Errorf("the joined node's pod network was not released: labels %v", kn.Labels)
			}
			// No bootstrap token outlives its attempt.
			ss, err := c.CoreV1().Secrets(metav1.NamespaceSystem).List(t.Context(), metav1.ListOptions{FieldSelector: "type=" + string(corev1.SecretTypeBootstrapToken)})
			if err != nil {
				t.Fatal(err)
			}
			if len(ss.Items) != 0 {
				t.Errorf("%d bootstrap tokens left after the join", len(ss.Items))
			}
		})
	}
}
