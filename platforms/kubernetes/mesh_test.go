package kubernetes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cloudtransit/transit/bundle"
	"github.com/cloudtransit/transit/clock/clocktest"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// onMeshNode is a worker on the mesh, in a cloud (private and public
// addresses apart).
var onMeshNode = districts.Node{ID: "w1", Role: districts.RoleWorker, District: "a",
	PrivateIP: "172.31.0.5", PublicIP: "203.0.113.5", MeshIP: "10.213.0.7", MeshKey: "k"}

// TestOnTheMesh: a node on the mesh is its mesh address to Kubernetes —
// the kubelet's node IP, the API server's and etcd's advertise address,
// what other nodes' /etc/hosts name for a master — and flannel sends pod
// traffic through the mesh's device, with no public-address annotation
// (every node reaches the mesh address).
func TestOnTheMesh(t *testing.T) {
	d := newDriver(districts.Cluster{ID: "k", Kubernetes: &districts.Kubernetes{}}, Options{}, nil)
	s := d.settings(onMeshNode, false)
	for name, cfg := range map[string]string{"init": s.initConfig(), "join": s.joinConfig(joinSecrets{}, true)} {
		for _, want := range []string{"- name: node-ip\n    value: \"10.213.0.7\"", "advertiseAddress: \"10.213.0.7\""} {
			if !strings.Contains(cfg, want) {
				t.Errorf("%s configuration lacks %q:\n%s", name, want, cfg)
			}
		}
		if strings.Contains(cfg, onMeshNode.PrivateIP) && !strings.Contains(cfg, "certSANs") {
			t.Errorf("%s configuration names the private address:\n%s", name, cfg)
		}
	}
	d.masters = []districts.Node{onMeshNode}
	if got := d.masterAddrs(districts.Node{ID: "w2", District: "b"}, ""); !slices.Equal(got, []string{"10.213.0.7"}) {
		t.Errorf("the endpoint resolves to %v, want the master's mesh address", got)
	}

	kn := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1", Labels: map[string]string{labelNetworkPending: "true"}}}
	if !releaseNetwork(kn, onMeshNode) || kn.Annotations[annotationPublicIP] != "" || kn.Labels[labelNetworkPending] != "" {
		t.Errorf("released on the mesh: annotations %v labels %v", kn.Annotations, kn.Labels)
	}

	args := func() []string { return flannelDaemonSet(t, d).Spec.Template.Spec.Containers[0].Args }
	if a := args(); !slices.Contains(a, "--iface="+meshInterface) {
		t.Errorf("flannel on the mesh runs with %v, want --iface=%s", a, meshInterface)
	}
	d.masters, d.nodes = []districts.Node{{ID: "m1", PrivateIP: "10.0.0.1"}}, nil
	if a := args(); slices.ContainsFunc(a, func(s string) bool { return strings.HasPrefix(s, "--iface") }) {
		t.Errorf("flannel off the mesh runs with %v", a)
	}
}

// TestFlannelResync: flannel checks its iptables rules every 30 s, on
// the mesh or not (every 5 s, its default, ran two dozen iptables
// processes a second on a host of local nodes).
func TestFlannelResync(t *testing.T) {
	d := newDriver(districts.Cluster{ID: "k", Kubernetes: &districts.Kubernetes{}}, Options{}, nil)
	for _, masters := range [][]districts.Node{{onMeshNode}, {{ID: "m1", PrivateIP: "10.0.0.1"}}} {
		d.masters = masters
		if a := flannelDaemonSet(t, d).Spec.Template.Spec.Containers[0].Args; !slices.Contains(a, "--iptables-resync=30") {
			t.Errorf("flannel runs with %v, want --iptables-resync=30", a)
		}
	}
}

// TestMeshBinary: starting the mesh sends transit-mesh from the
// district's bundle unless the node has it (a node installed from
// packages gets only that file), and says what to do without a bundle or
// with one that lacks it; asking a node only sends nothing.
func TestMeshBinary(t *testing.T) {
	dir := testBundle(t, "registry.k8s.io/pause:3.10")
	content := []byte("transit-mesh binary")
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, meshBinary), content, 0o755); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(content)
	m, err := bundle.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	m.Files = append(m.Files, bundle.File{Path: meshBinary, SHA256: hex.EncodeToString(sum[:]), Size: int64(len(content)), Mode: 0o755, For: bundle.ForAll})
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, bundle.ManifestFile), data, 0o644); err != nil {
		t.Fatal(err)
	}
	r := &scriptRunner{}
	d := newDriver(districts.Cluster{ID: "k"}, Options{Bundles: map[string]string{"a": dir}}, r)
	ctx := context.Background()
	spec := provider.MeshSpec{Address: "10.213.0.7/16", Port: 51820}
	// The fake node answers nothing: the answer is an error, after the
	// binary went.
	if _, err := d.MeshUp(ctx, onMeshNode, spec); err == nil {
		t.Error("an empty answer was taken for a mesh")
	}
	if len(r.uploaded) != 1 || r.uploaded[binDir+"/transit-mesh"] == "" {
		t.Errorf("uploaded %v, want only %s/transit-mesh", r.uploaded, binDir)
	}
	before := len(r.scripts)
	_, _ = d.MeshUp(ctx, onMeshNode, spec)
	if len(r.uploaded) != 1 || slices.Contains(r.names()[before:], "upload") {
		t.Errorf("the binary went again: %v", r.uploaded)
	}

	asked := &scriptRunner{}
	d = newDriver(districts.Cluster{ID: "k"}, Options{}, asked)
	_, _ = d.MeshUp(ctx, onMeshNode, provider.MeshSpec{Port: 51820})
	if len(asked.uploaded) != 0 || slices.Contains(asked.names(), "probe the node") {
		t.Errorf("asking a node sent %v (%v)", asked.uploaded, asked.names())
	}
	if _, err := d.MeshUp(ctx, onMeshNode, spec); err == nil || !strings.Contains(err.Error(), "district a has no bundle directory") {
		t.Errorf("without a bundle: %v", err)
	}
	d = newDriver(districts.Cluster{ID: "k"}, Options{Bundles: map[string]string{"a": testBundle(t, "registry.k8s.io/pause:3.10")}}, &scriptRunner{})
	if _, err := d.MeshUp(ctx, onMeshNode, spec); err == nil || !strings.Contains(err.Error(), "has no bin/transit-mesh: rebuild it") {
		t.Errorf("a bundle without transit-mesh: %v", err)
	}
}

// TestMastersShareOneUpload: masters joining at once use one upload of
// the control-plane certificates (a second would replace them under a new
// key while the first join downloads them: across clouds, where joins
// are slow, kubeadm failed with "message authentication failed"); an
// upload older than certKeyLife is not used again.
func TestMastersShareOneUpload(t *testing.T) {
	r := &scriptRunner{}
	clk := clocktest.NewFake(time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC))
	d := newDriver(districts.Cluster{ID: "k", Kubernetes: &districts.Kubernetes{}}, Options{Clock: clk}, r)
	m := districts.Node{ID: "m1", PrivateIP: "10.0.0.1"}
	keys := make([]string, 3)
	var wg sync.WaitGroup
	for i := range keys {
		wg.Go(func() {
			k, err := d.certificateKey(context.Background(), m)
			if err != nil {
				t.Error(err)
			}
			keys[i] = k
		})
	}
	wg.Wait()
	uploads := func() int { return strings.Count(strings.Join(r.names(), "\n"), "kubeadm upload-certs") }
	if uploads() != 1 || keys[0] == "" || keys[0] != keys[1] || keys[1] != keys[2] {
		t.Errorf("three joins at once: %d uploads, keys %q", uploads(), keys)
	}
	clk.Advance(certKeyLife)
	if k, _ := d.certificateKey(context.Background(), m); k == keys[0] || uploads() != 2 {
		t.Errorf("an hour later: key %q (before %q), %d uploads", k, keys[0], uploads())
	}
}
