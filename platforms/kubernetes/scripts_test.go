package kubernetes

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cloudtransit/transit/districts"
)

// The endpoint lines are replaced, every other line of the hosts file
// kept, and a file already right is not rewritten.
func TestHostsScript(t *testing.T) {
	hosts := filepath.Join(t.TempDir(), "hosts")
	orig := "127.0.0.1\tlocalhost\n10.240.1.5\tdemo-worker-1\n"
	if err := os.WriteFile(hosts, []byte(orig), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(addrs ...string) string {
		t.Helper()
		out, err := exec.Command("sh", "-c", hostsScriptAt(hosts, "api.demo.transit.internal", addrs)).CombinedOutput()
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		data, err := os.ReadFile(hosts)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	got := run("10.240.1.2", "10.240.2.2")
	want := orig + "10.240.1.2 api.demo.transit.internal " + hostsMark + "\n10.240.2.2 api.demo.transit.internal " + hostsMark + "\n"
	if got != want {
		t.Errorf("hosts:\n%s\nwant:\n%s", got, want)
	}
	if got := run("10.240.2.2"); got != orig+"10.240.2.2 api.demo.transit.internal "+hostsMark+"\n" {
		t.Errorf("after the first master left:\n%s", got)
	}
	st, _ := os.Stat(hosts)
	before := st.ModTime()
	run("10.240.2.2")
	if st, _ := os.Stat(hosts); !st.ModTime().Equal(before) {
		t.Error("an unchanged hosts file was rewritten")
	}
	if got := run(); got != orig {
		t.Errorf("with no master the lines must go:\n%s", got)
	}
}

// Labels set by hand survive; labels transit set and no longer wants go.
func TestRelabel(t *testing.T) {
	kn := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1",
		Labels:      map[string]string{"kubernetes.io/hostname": "w1", "by-hand": "yes", "site": "a", "old": "x"},
		Annotations: map[string]string{annotationManaged: "node-role.kubernetes.io/worker,old,site"}}}
	n := districts.Node{ID: "w1", Role: "worker", PrivateIP: "10.0.0.5", PublicIP: "203.0.113.5"}
	if !relabel(kn, map[string]string{"site": "b", "node-role.kubernetes.io/worker": ""}, n) {
		t.Fatal("relabel reported no change")
	}
	want := map[string]string{"kubernetes.io/hostname": "w1", "by-hand": "yes", "site": "b", "node-role.kubernetes.io/worker": ""}
	if len(kn.Labels) != len(want) {
		t.Errorf("labels %v, want %v", kn.Labels, want)
	}
	for k, v := range want {
		if got, ok := kn.Labels[k]; !ok || got != v {
			t.Errorf("label %s=%q (%v), want %q", k, got, ok, v)
		}
	}
	if got := kn.Annotations[annotationManaged]; got != "node-role.kubernetes.io/worker,site" {
		t.Errorf("managed keys %q", got)
	}
	if got := kn.Annotations[annotationPublicIP]; got != "203.0.113.5" {
		t.Errorf("flannel's public address %q, want the node's public one", got)
	}
	if relabel(kn, map[string]string{"site": "b", "node-role.kubernetes.io/worker": ""}, n) {
		t.Error("a second relabel with the same labels reported a change")
	}
}

// A node is reset before an init or join when it holds anything kubeadm's
// preflight refuses to find (a join cut short, a control plane's files),
// never when it is fresh.
func TestHasLeftovers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files []string // made under the node's root; a trailing slash is a directory
		want  bool
	}{
		{"fresh", []string{"etc/kubernetes/manifests/", "var/lib/etcd/", "var/lib/kubelet/"}, false},
		{"joined", []string{"etc/kubernetes/kubelet.conf"}, true},
		{"join cut short before the TLS bootstrap", []string{"etc/kubernetes/bootstrap-kubelet.conf", "etc/kubernetes/pki/ca.crt"}, true},
		{"CA written only", []string{"etc/kubernetes/pki/ca.crt"}, true},
		{"kubelet configured", []string{"var/lib/kubelet/config.yaml"}, true},
		{"a control plane's manifest", []string{"etc/kubernetes/manifests/etcd.yaml"}, true},
		{"etcd's data", []string{"var/lib/etcd/member/"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for _, f := range tc.files {
				p := filepath.Join(root, f)
				if strings.HasSuffix(f, "/") {
					if err := os.MkdirAll(p, 0o755); err != nil {
						t.Fatal(err)
					}
					continue
				}
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			out, err := exec.Command("sh", "-c", "if "+hasLeftovers(root)+"; then echo yes; else echo no; fi").CombinedOutput()
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if got := strings.TrimSpace(string(out)) == "yes"; got != tc.want {
				t.Errorf("leftovers %t, want %t (%s)", got, tc.want, out)
			}
		})
	}
	if !strings.Contains(resetLeftovers, hasLeftovers("")) {
		t.Error("the reset before init and join does not test for the leftovers")
	}
}

// A node installed from the bundle forwards IPv4, which kubeadm's
// preflight checks; only a machine of its own keeps it in /etc.
func TestSetupForwards(t *testing.T) {
	s := setupScript(nil)
	for _, want := range []string{
		`[ "$(cat /proc/sys/net/ipv4/ip_forward)" = 1 ] || echo 1 > /proc/sys/net/ipv4/ip_forward`,
		`[ $systemd = no ] || printf 'net.ipv4.ip_forward = 1\n' > /etc/sysctl.d/90-transit-kubernetes.conf`,
	} {
		if !strings.Contains(s, want) {
			t.Errorf("the setup script lacks %q", want)
		}
	}
}

// The probe reads exactly the paths asked for: their digests (a missing
// one is left out), never the rest of the bundle's directories.
func TestProbeScript(t *testing.T) {
	dir := t.TempDir()
	have, other := filepath.Join(dir, "have file"), filepath.Join(dir, "other")
	for _, p := range []string{have, other} {
		if err := os.WriteFile(p, []byte(p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command("sh", "-c", probeScript([]string{have, filepath.Join(dir, "missing")})).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	sum := sha256.Sum256([]byte(have))
	got := parseSums(string(out))
	if len(got) != 1 || got[have] != hex.EncodeToString(sum[:]) || !strings.Contains(string(out), "systemd=") {
		t.Errorf("the probe printed %q", out)
	}
}

// The scripts that change a node are not run here (they would reset the
// machine the tests run on); the shell at least parses each.
func TestNodeScriptsParse(t *testing.T) {
	for name, script := range map[string]string{
		"join": joinScript(), "reset": resetScript(), "upload-certs": uploadCertsScript,
		"reset a half-joined master": resetHalfJoinedMasterScript,
	} {
		if out, err := exec.Command("sh", "-n", "-c", script).CombinedOutput(); err != nil {
			t.Errorf("%s: %v\n%s", name, err, out)
		}
	}
}
