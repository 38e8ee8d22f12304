package build

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// ctrNamespace is the containerd namespace the tests' containers run in,
// and so the cgroup their cgroups go under: the test's own, not the
// k8s.io of a Kubernetes node on the host.
const ctrNamespace = "transit-build-test"

// removeCgroups removes the cgroup name, and the cgroups in it, from
// every hierarchy under /sys/fs/cgroup, and returns those that remain.
func removeCgroups(name string) []string {
	var left []string
	for _, pattern := range []string{"/sys/fs/cgroup/" + name, "/sys/fs/cgroup/*/" + name} {
		dirs, _ := filepath.Glob(pattern)
		for _, d := range dirs {
			inner, _ := filepath.Glob(filepath.Join(d, "*", "cgroup.procs"))
			for _, p := range inner {
				_ = os.Remove(filepath.Dir(p))
			}
			if err := os.Remove(d); err != nil && !os.IsNotExist(err) {
				left = append(left, d)
			}
		}
	}
	return left
}

// containerd starts a containerd of its own in a temporary directory and
// returns a function running ctr against it.
func containerd(t *testing.T) func(args ...string) (string, error) {
	t.Helper()
	if testing.Short() || os.Getuid() != 0 {
		t.Skip("needs root and containerd; runs in make test")
	}
	if _, err := exec.LookPath("containerd"); err != nil {
		t.Skip("containerd is not installed (sudo make bundle-deps)")
	}
	dir, err := os.MkdirTemp("", "transit-containerd-")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "containerd.sock")
	config := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = %q
[ttrpc]
  address = %q
[plugins."io.containerd.internal.v1.opt"]
  path = %q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), sock, sock+".ttrpc", filepath.Join(dir, "opt"))
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	log, err := os.Create(filepath.Join(dir, "containerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, "containerd", "--config", filepath.Join(dir, "config.toml"))
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		_ = log.Close()
		// The snapshots are mounted while containers run; none is left
		// once containerd is gone, but unmount anything below dir first.
		_ = exec.Command("sh", "-c", "grep -o ' "+dir+"[^ ]*' /proc/self/mounts | sort -r | xargs -r -n1 umount -l").Run()
		_ = os.RemoveAll(dir)
		// ctr run puts a container in the cgroup /<namespace>/<id> of
		// every hierarchy; runc removes the container's, not the
		// namespace's.
		if left := removeCgroups(ctrNamespace); len(left) > 0 {
			t.Errorf("cgroups left behind: %s", strings.Join(left, ", "))
		}
	})
	ctr := func(args ...string) (string, error) {
		out, err := exec.Command("ctr", append([]string{"--address", sock, "--namespace", ctrNamespace}, args...)...).CombinedOutput()
		return string(out), err
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, err := ctr("version"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			data, _ := os.ReadFile(filepath.Join(dir, "containerd.log"))
			t.Fatalf("containerd did not start:\n%s", data)
		}
	}
	return ctr
}

// The archives go-containerregistry writes are what a node's containerd
// imports, unpacks and runs: an image of busybox and iptables, as
// kube-proxy's is made.
func TestImagesRunInContainerd(t *testing.T) {
	ctr := containerd(t)
	tr := newTree("/")
	base(tr)
	if err := busybox(tr); err != nil {
		t.Fatal(err)
	}
	if err := iptables(tr); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "tools.tar")
	const ref = "transit.local/tools:test"
	if err := writeImage(out, ref, tr, imageConfig{Cmd: []string{"sh"}, Env: []string{pathEnv}}); err != nil {
		t.Fatal(err)
	}
	if got, err := ctr("images", "import", out); err != nil {
		t.Fatalf("import: %v\n%s", err, got)
	}
	got, err := ctr("images", "check")
	if err != nil || !strings.Contains(got, ref) || !strings.Contains(got, "complete") {
		t.Fatalf("images check: %v\n%s", err, got)
	}
	got, err = ctr("run", "--rm", ref, "transit-test", "sh", "-c", "echo hello from $(id -u) && iptables --version")
	if err != nil || !strings.Contains(got, "hello from 0") || !strings.Contains(got, "iptables v") {
		t.Errorf("run: %v\n%s", err, got)
	}
}
