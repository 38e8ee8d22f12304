package build

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/cloudtransit/transit/bundle"
)

func smallTree(t *testing.T) *tree {
	t.Helper()
	tr := newTree("/")
	base(tr)
	tr.file("/usr/local/bin/hello", []byte("#!/bin/sh\necho hello\n"), 0o755)
	tr.symlink("/usr/local/bin/hi", "hello")
	return tr
}

func TestWriteImage(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "hello.tar")
	cfg := imageConfig{Entrypoint: []string{"/usr/local/bin/hello"}, Env: []string{pathEnv}}
	const ref = "registry.k8s.io/hello:v1"
	if err := writeImage(out, ref, smallTree(t), cfg); err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(out, nil)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != "amd64" {
		t.Errorf("platform %s/%s, want linux/amd64 (containerd skips an image of no platform)", cf.OS, cf.Architecture)
	}
	if !slices.Equal(cf.Config.Entrypoint, cfg.Entrypoint) || !slices.Equal(cf.Config.Env, cfg.Env) {
		t.Errorf("config %+v, want %+v", cf.Config, cfg)
	}
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(out) })
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 1 || !slices.Equal(m[0].RepoTags, []string{ref}) {
		t.Errorf("archive tags %v, want [%s]", m, ref)
	}
	// The layer is zstd: every node unpacks every image it runs, and
	// gzip's decompression was a sixth of a master's start.
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers %d, %v; want one", len(layers), err)
	}
	rc, err := layers[0].Compressed()
	if err != nil {
		t.Fatal(err)
	}
	magic := make([]byte, 4)
	_, err = io.ReadFull(rc, magic)
	_ = rc.Close()
	if err != nil || !bytes.Equal(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}) {
		t.Errorf("the layer starts % x (%v), not zstd's magic number", magic, err)
	}
	got := map[string]string{}
	r := tar.NewReader(mutate.Extract(img))
	for {
		h, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got[h.Name] = fmt.Sprintf("%c %o %s", h.Typeflag, h.Mode, h.Linkname)
	}
	for name, want := range map[string]string{
		"usr/local/bin/hello": "0 755 ",
		"usr/local/bin/hi":    "2 777 hello",
		"tmp":                 "5 1777 ",
		"etc/passwd":          "0 644 ",
	} {
		if got[name] != want {
			t.Errorf("%s: %q, want %q", name, got[name], want)
		}
	}

	// The same tree makes the same image, so a rebuild changes nothing a
	// node already has.
	again := filepath.Join(dir, "again.tar")
	if err := writeImage(again, ref, smallTree(t), cfg); err != nil {
		t.Fatal(err)
	}
	a, _, err := bundle.HashFile(out)
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := bundle.HashFile(again)
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Error("the same tree wrote two different archives")
	}
	if err := writeImage(filepath.Join(dir, "bad.tar"), "Not A Ref", smallTree(t), cfg); err == nil {
		t.Error("an invalid ref was accepted")
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*")); len(left) != 0 {
		t.Errorf("temporary files left behind: %v", left)
	}
}
