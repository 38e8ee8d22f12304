package kubernetes

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/yaml"

	"github.com/cloudtransit/transit/districts"
)

// TestJoiningMasterAddsItsSANs: before a master joins, its public,
// private and mesh addresses join the certificate names of the cluster's
// ClusterConfiguration (which kubeadm makes the joining master's
// certificate from), once, keeping the first master's and every other
// setting.
func TestJoiningMasterAddsItsSANs(t *testing.T) {
	const cluster = `apiServer:
  certSANs:
  - api.k.transit.internal
  - 192.0.2.1
  extraArgs:
  - name: advertise-address
    value: 10.99.0.1
kubernetesVersion: v1.32.4
networking:
  podSubnet: 10.244.0.0/16
`
	c := fake.NewClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: kubeadmConfigMap, Namespace: metav1.NamespaceSystem},
		Data: map[string]string{"ClusterConfiguration": cluster}})
	a := &api{c: c}
	n := districts.Node{ID: "k-master-2", PublicIP: "198.51.100.7", PrivateIP: "172.31.0.9", MeshIP: "10.99.0.2"}
	for range 2 {
		if err := addCertSANs(t.Context(), a, n); err != nil {
			t.Fatal(err)
		}
	}
	cm, err := c.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(t.Context(), kubeadmConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		APIServer struct {
			CertSANs  []string            `json:"certSANs"`
			ExtraArgs []map[string]string `json:"extraArgs"`
		} `json:"apiServer"`
		Networking map[string]string `json:"networking"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data["ClusterConfiguration"]), &cfg); err != nil {
		t.Fatal(err)
	}
	want := []string{"api.k.transit.internal", "192.0.2.1", "198.51.100.7", "172.31.0.9", "10.99.0.2"}
	if !slices.Equal(cfg.APIServer.CertSANs, want) {
		t.Errorf("certSANs %v, want %v", cfg.APIServer.CertSANs, want)
	}
	if cfg.Networking["podSubnet"] != "10.244.0.0/16" || len(cfg.APIServer.ExtraArgs) != 1 || !strings.Contains(cm.Data["ClusterConfiguration"], "kubernetesVersion: v1.32.4") {
		t.Errorf("other settings changed:\n%s", cm.Data["ClusterConfiguration"])
	}

	broken := fake.NewClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: kubeadmConfigMap, Namespace: metav1.NamespaceSystem},
		Data: map[string]string{"ClusterConfiguration": "apiServer: ["}})
	if err := addCertSANs(t.Context(), &api{c: broken}, n); err == nil || !strings.Contains(err.Error(), "does not parse") {
		t.Errorf("a ClusterConfiguration that does not parse: %v", err)
	}
}

// TestJoinWaitsForReady: a join ends once the API server reports the
// Node Ready (what the node cost includes its pod network coming up), and
// no later than readyWait when it is not.
func TestJoinWaitsForReady(t *testing.T) {
	c := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "k-worker-1"}})
	d := newDriver(districts.Cluster{ID: "k"}, Options{PollInterval: 20 * time.Millisecond}, nil)
	done := make(chan struct{})
	go func() {
		d.awaitReady(t.Context(), &api{c: c}, districts.Node{ID: "k-worker-1"})
		close(done)
	}()
	select {
	case <-done:
		t.Fatal("the join ended before its Node was Ready")
	case <-time.After(200 * time.Millisecond):
	}
	ready := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "k-worker-1"},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	if _, err := c.CoreV1().Nodes().UpdateStatus(t.Context(), ready, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the join still waits 10 s after its Node became Ready")
	}
}
