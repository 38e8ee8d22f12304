package kubernetes

import (
	"os"
	"os/exec"
	"path/filepath"
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
