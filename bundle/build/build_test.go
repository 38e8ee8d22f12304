package build

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cloudtransit/transit/bundle"
)

// smallPlan builds the pause binary and makes a bundle of it and one host
// file, in the shape of the real plan.
func smallPlan(hostFile string) plan {
	return plan{
		goBuilds: []goBuild{{module: ".", out: "pause", pkgs: []string{"github.com/cloudtransit/transit/bundle/pause"}}},
		files: []nodeFile{
			{path: "bin/pause", src: "work:pause/pause", role: bundle.ForAll},
			{path: "cni/tool", src: hostFile, deb: "tool-package", role: bundle.ForMasters},
		},
		images: []imageSpec{
			{file: "pause.tar", ref: "registry.k8s.io/pause:" + Pause, role: bundle.ForAll, cfg: imageConfig{Entrypoint: []string{"/pause"}},
				make: func(t *tree, work string) error { return t.copyAs(work+"/pause/pause", "/pause") }},
			{file: "tool.tar", ref: "transit.local/tool:1", role: bundle.ForMasters,
				make: func(t *tree, _ string) error { return t.copyAs(hostFile, "/tool") }},
		},
	}
}

func TestBuildKeepsWhatDidNotChange(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go build")
	}
	host := filepath.Join(t.TempDir(), "tool")
	if err := os.WriteFile(host, []byte("tool v1"), 0o755); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	var log strings.Builder
	run := func() *bundle.Manifest {
		t.Helper()
		log.Reset()
		m, err := build(context.Background(), Options{Repo: "../..", Out: out, Log: &log}, smallPlan(host))
		if err != nil {
			t.Fatalf("build: %v\n%s", err, log.String())
		}
		got, err := bundle.Read(out)
		if err != nil {
			t.Fatal(err)
		}
		if err := got.Verify(out); err != nil {
			t.Fatal(err)
		}
		return m
	}
	wrote := func(what ...string) {
		t.Helper()
		for _, w := range []string{"registry.k8s.io/pause", "transit.local/tool", "copied bin/pause", "copied cni/tool"} {
			want := false
			for _, x := range what {
				want = want || x == w
			}
			if got := strings.Contains(log.String(), "wrote image "+w+":") || strings.Contains(log.String(), w+"\n"); got != want {
				t.Errorf("wrote %s: %v, want %v\n%s", w, got, want, log.String())
			}
		}
	}

	first := run()
	wrote("registry.k8s.io/pause", "transit.local/tool", "copied bin/pause", "copied cni/tool")
	if first.Kubernetes != Kubernetes || len(first.Files) != 2 || len(first.Images) != 2 {
		t.Fatalf("manifest %+v", first)
	}
	if f := first.Files[1]; f.For != bundle.ForMasters || f.Mode != 0o755 {
		t.Errorf("cni/tool is %+v, want masters only, mode 0755", f)
	}

	run()
	wrote() // nothing changed: nothing written

	if err := os.WriteFile(host, []byte("tool v2"), 0o755); err != nil {
		t.Fatal(err)
	}
	run()
	wrote("transit.local/tool", "copied cni/tool")

	// A damaged image (an interrupted copy, a disk error) is rebuilt, and
	// only it.
	if err := os.WriteFile(filepath.Join(out, "images/pause.tar"), make([]byte, first.Images[0].Size), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "images/stale.tar"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	run()
	wrote("registry.k8s.io/pause")
	if _, err := os.Stat(filepath.Join(out, "images/stale.tar")); !os.IsNotExist(err) {
		t.Errorf("a file the manifest does not list was kept: %v", err)
	}

	if err := os.Remove(host); err != nil {
		t.Fatal(err)
	}
	_, err := build(context.Background(), Options{Repo: "../..", Out: out}, smallPlan(host))
	if err == nil || !strings.Contains(err.Error(), "tool-package") {
		t.Errorf("a missing host file gives %v, want the package to install", err)
	}
	if _, err := bundle.Read(out); err != nil {
		t.Errorf("a failed build damaged the last good bundle: %v", err)
	}
}

// transit-bundle's default -out is relative (build/bundle): the bundle
// lands there, whichever directory its builds run in.
func TestBuildIntoARelativeDirectory(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go build")
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	host := filepath.Join(t.TempDir(), "tool")
	if err := os.WriteFile(host, []byte("tool v1"), 0o755); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	t.Chdir(dir)
	var log strings.Builder
	if _, err := build(context.Background(), Options{Repo: repo, Out: "build/bundle", Log: &log}, smallPlan(host)); err != nil {
		t.Fatalf("build into build/bundle: %v\n%s", err, log.String())
	}
	m, err := bundle.Read(filepath.Join(dir, "build", "bundle"))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Verify(filepath.Join(dir, "build", "bundle")); err != nil {
		t.Error(err)
	}
}
