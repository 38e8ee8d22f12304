package kubernetes

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// The kubelet starts only once kubeadm wrote its flags, their line
// complete, not as soon as its configuration is there: kubeadm writes the
// flags (the node's name among them) after it, and on a node without
// systemd cannot restart the kubelet. Started in between, a kubelet
// registered under the machine's hostname.
func TestKubeletWaitsForKubeadmsFlags(t *testing.T) {
	dir := t.TempDir()
	at := func(name string) string { return filepath.Join(dir, name) }
	fake := at("kubelet")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho \"$@\" > "+at("args.tmp")+" && mv "+at("args.tmp")+" "+at("args")+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	script := strings.ReplaceAll(kubeletScript, "/var/lib/kubelet", dir)
	script = strings.Replace(script, "exec kubelet", "exec "+fake, 1)
	// Each look that finds no flags yet leaves a mark.
	script = strings.Replace(script, "\tsleep 0.2\n", "\techo >> "+at("looks")+"; sleep 0.2\n", 1)
	if !strings.Contains(script, "exec "+fake) {
		t.Fatalf("the script no longer has the lines this test replaces:\n%s", kubeletScript)
	}
	looks := func() int {
		b, _ := os.ReadFile(at("looks"))
		return strings.Count(string(b), "\n")
	}
	started := func() bool { _, err := os.Stat(at("args")); return err == nil }
	// waitFor waits until the script looked at least n times or started
	// the kubelet, and says whether it started it.
	waitFor := func(n int) bool {
		t.Helper()
		for range 500 {
			if started() {
				return true
			}
			if looks() >= n {
				return false
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("the script neither looked %d times nor started the kubelet", n)
		return false
	}

	if err := os.WriteFile(at("config.yaml"), []byte("kind: KubeletConfiguration\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", script)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var waitErr error
	exited := make(chan struct{})
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })

	if waitFor(1) {
		t.Fatal("the kubelet started with its configuration but without kubeadm's flags")
	}
	// A line half written: the closing quote not there yet.
	if err := os.WriteFile(at("kubeadm-flags.env"), []byte(`KUBELET_KUBEADM_ARGS="--hostname-override=k-master-1`), 0o644); err != nil {
		t.Fatal(err)
	}
	if waitFor(looks() + 2) {
		t.Fatal("the kubelet started on half of kubeadm's flags")
	}
	if err := os.WriteFile(at("kubeadm-flags.env"), []byte(`KUBELET_KUBEADM_ARGS="--hostname-override=k-master-1 --node-ip=10.240.1.2"`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	<-exited
	if waitErr != nil {
		t.Fatalf("the script: %v", waitErr)
	}
	args, err := os.ReadFile(at("args"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(args), "--hostname-override=k-master-1 --node-ip=10.240.1.2") || !strings.Contains(string(args), "--config="+at("config.yaml")) {
		t.Errorf("the kubelet ran with %q, want kubeadm's flags and its configuration", args)
	}
}
