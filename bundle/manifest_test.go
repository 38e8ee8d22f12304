package bundle

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeBundle writes files and a manifest listing them.
func writeBundle(t *testing.T, m Manifest, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for p, content := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ManifestFile), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func fileOf(t *testing.T, path, content, role string) File {
	t.Helper()
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	sum, size, err := HashFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return File{Path: path, SHA256: sum, Size: size, Mode: 0o755, For: role}
}

func TestReadAndRoles(t *testing.T) {
	m := Manifest{
		Kubernetes: "v1.32.4",
		Files:      []File{fileOf(t, "bin/kubelet", "kubelet", ForAll), fileOf(t, "bin/etcdctl", "etcdctl", ForMasters)},
		Images: []Image{
			{File: fileOf(t, "images/pause.tar", "pause", ForAll), Ref: "registry.k8s.io/pause:3.10"},
			{File: fileOf(t, "images/etcd.tar", "etcd", ForMasters), Ref: "registry.k8s.io/etcd:3.5.16-0"},
		},
	}
	dir := writeBundle(t, m, map[string]string{"bin/kubelet": "kubelet", "bin/etcdctl": "etcdctl", "images/pause.tar": "pause", "images/etcd.tar": "etcd"})
	got, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := got.Verify(dir); err != nil {
		t.Fatal(err)
	}
	files, images := got.For(false)
	if len(files) != 1 || files[0].Path != "bin/kubelet" || len(images) != 1 || images[0].Ref != "registry.k8s.io/pause:3.10" {
		t.Errorf("a worker gets %v %v, want kubelet and pause only", files, images)
	}
	files, images = got.For(true)
	if len(files) != 2 || len(images) != 2 {
		t.Errorf("a master gets %v %v, want everything", files, images)
	}
	if im, ok := got.Image("registry.k8s.io/etcd:3.5.16-0"); !ok || im.Path != "images/etcd.tar" {
		t.Errorf("Image(etcd) = %v, %v", im, ok)
	}

	// Same size, other content: Read cannot tell, Verify must.
	if err := os.WriteFile(filepath.Join(dir, "bin/kubelet"), []byte("kubeXet"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := got.Verify(dir); err == nil || !strings.Contains(err.Error(), "bin/kubelet: content changed") {
		t.Errorf("Verify after a change = %v, want it to name bin/kubelet", err)
	}
}

func TestReadRefusesBadManifests(t *testing.T) {
	good := func() Manifest {
		return Manifest{Kubernetes: "v1.32.4", Files: []File{fileOf(t, "bin/kubelet", "kubelet", ForAll)}}
	}
	files := map[string]string{"bin/kubelet": "kubelet"}
	for _, tc := range []struct {
		name string
		edit func(*Manifest)
		raw  string
		want string
	}{
		{name: "escaping path", edit: func(m *Manifest) { m.Files[0].Path = "../etc/passwd" }, want: `path "../etc/passwd" leaves the bundle`},
		{name: "absolute path", edit: func(m *Manifest) { m.Files[0].Path = "/bin/kubelet" }, want: "leaves the bundle"},
		{name: "unclean path", edit: func(m *Manifest) { m.Files[0].Path = "bin/../bin/kubelet" }, want: "not clean"},
		{name: "bad checksum", edit: func(m *Manifest) { m.Files[0].SHA256 = "abc" }, want: "not a SHA-256"},
		{name: "bad role", edit: func(m *Manifest) { m.Files[0].For = "workers" }, want: `for "workers"`},
		{name: "mode with type bits", edit: func(m *Manifest) { m.Files[0].Mode |= 1 << 31 }, want: "not permission bits"},
		{name: "size differs", edit: func(m *Manifest) { m.Files[0].Size = 3 }, want: "bin/kubelet is 7 bytes, the manifest says 3"},
		{name: "missing file", edit: func(m *Manifest) { m.Files[0].Path = "bin/kubeadm" }, want: "bin/kubeadm: no such file"},
		{name: "listed twice", edit: func(m *Manifest) { m.Files = append(m.Files, m.Files[0]) }, want: "listed twice"},
		{name: "image without ref", edit: func(m *Manifest) { m.Images = []Image{{File: m.Files[0]}}; m.Files = nil }, want: "has no ref"},
		{name: "no version", edit: func(m *Manifest) { m.Kubernetes = "" }, want: "kubernetes_version is missing"},
		{name: "unknown key", raw: `{"kubernetes_version": "v1", "files": [], "images": [], "extra": 1}`, want: `unknown field "extra"`},
		{name: "not json", raw: `{`, want: "unexpected EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := good()
			if tc.edit != nil {
				tc.edit(&m)
			}
			dir := writeBundle(t, m, files)
			if tc.raw != "" {
				if err := os.WriteFile(filepath.Join(dir, ManifestFile), []byte(tc.raw), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			_, err := Read(dir)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), ManifestFile) {
				t.Errorf("Read = %v, want an error naming %s and saying %q", err, ManifestFile, tc.want)
			}
		})
	}
}

func TestReadWithoutBundle(t *testing.T) {
	dir := t.TempDir()
	_, err := Read(dir)
	if err == nil || !strings.Contains(err.Error(), "make bundle") || !strings.Contains(err.Error(), dir) {
		t.Errorf("Read of an empty directory = %v, want a hint to run make bundle naming %s", err, dir)
	}
}
