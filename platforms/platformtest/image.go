package platformtest

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cloudtransit/transit/atomicfile"
)

// busybox is the host's static busybox (Debian's busybox-static).
const busybox = "/bin/busybox"

// WriteBusyboxImage writes to path an image archive in the layout `docker
// load` reads (docker save's: manifest.json naming a config and its
// layers), tagged ref, whose one layer is the host's static busybox with
// sh and sleep: a workload for nodes that have no registry to pull from.
// A harness puts it in the images directory Setup gets.
func WriteBusyboxImage(path, ref string) error {
	bin, err := os.ReadFile(busybox)
	if err != nil {
		return fmt.Errorf("the test image needs a static busybox at %s (apt-get install busybox-static): %w", busybox, err)
	}
	epoch := time.Unix(0, 0)
	var layer bytes.Buffer
	lw := tar.NewWriter(&layer)
	entries := []tar.Header{
		{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(bin))},
		{Name: "bin/sh", Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777},
		{Name: "bin/sleep", Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777},
		{Name: "tmp/", Typeflag: tar.TypeDir, Mode: 0o1777},
	}
	for _, h := range entries {
		h.ModTime = epoch
		if err := lw.WriteHeader(&h); err != nil {
			return err
		}
		if h.Name == "bin/busybox" {
			if _, err := lw.Write(bin); err != nil {
				return err
			}
		}
	}
	if err := lw.Close(); err != nil {
		return err
	}
	layerSum := sha256.Sum256(layer.Bytes())
	layerDigest := "sha256:" + hex.EncodeToString(layerSum[:])
	config, err := json.Marshal(map[string]any{
		"architecture": "amd64",
		"os":           "linux",
		"created":      epoch.UTC().Format(time.RFC3339),
		"config":       map[string]any{"Cmd": []string{"sleep", "3600"}, "Env": []string{"PATH=/bin"}},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{layerDigest}},
	})
	if err != nil {
		return err
	}
	configSum := sha256.Sum256(config)
	configName := "blobs/sha256/" + hex.EncodeToString(configSum[:])
	layerName := "blobs/sha256/" + hex.EncodeToString(layerSum[:])
	manifest, err := json.Marshal([]map[string]any{{"Config": configName, "RepoTags": []string{ref}, "Layers": []string{layerName}}})
	if err != nil {
		return err
	}
	var out bytes.Buffer
	w := tar.NewWriter(&out)
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := w.WriteHeader(&tar.Header{Name: dir, Typeflag: tar.TypeDir, Mode: 0o755, ModTime: epoch}); err != nil {
			return err
		}
	}
	for _, f := range []struct {
		name string
		data []byte
	}{{layerName, layer.Bytes()}, {configName, config}, {"manifest.json", manifest}} {
		if err := w.WriteHeader(&tar.Header{Name: f.name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(f.data)), ModTime: epoch}); err != nil {
			return err
		}
		if _, err := w.Write(f.data); err != nil {
			return err
		}
	}
	if err := w.Close(); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.Write(path, out.Bytes(), 0o644)
}
