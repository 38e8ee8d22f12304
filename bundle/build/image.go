package build

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/compression"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/cloudtransit/transit/atomicfile"
)

// imageConfig is what an image says about how to run it.
type imageConfig struct {
	Entrypoint []string
	Cmd        []string
	Env        []string
	WorkingDir string
	// User runs the entrypoint as "uid:gid" (empty: root).
	User string
}

// layerFormat names how writeImage writes layers: a bundle of images
// written otherwise is written again.
const layerFormat = "zstd"

// writeImage writes an image of one layer (the tree) as a docker-save
// archive at out, tagged ref: the format `ctr images import` reads.
// go-containerregistry writes the config, manifest and layer digests. The
// layer is zstd: every node unpacks each image it runs, and gzip's
// decompression was a sixth of a master's start (25 s of CPU with gzip,
// 21 with zstd). Nothing in it depends on the time, so the same tree
// gives the same image id.
func writeImage(out, ref string, t *tree, cfg imageConfig) error {
	tag, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("image ref %q: %w", ref, err)
	}
	// The layer is staged uncompressed in a file beside out: the opener is
	// called more than once (digest, diff id, write).
	stage, err := os.CreateTemp(filepath.Dir(out), atomicfile.TempPrefix(out)+"layer-")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(stage.Name()) }()
	if err := t.writeTar(stage); err != nil {
		_ = stage.Close()
		return fmt.Errorf("%s: layer: %w", ref, err)
	}
	if err := stage.Close(); err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return os.Open(stage.Name()) },
		tarball.WithCompression(compression.ZStd), tarball.WithCompressionLevel(1), tarball.WithCompressedCaching)
	if err != nil {
		return fmt.Errorf("%s: layer: %w", ref, err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return fmt.Errorf("%s: %w", ref, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	// empty.Image names no platform; containerd's import and the CRI
	// match images to the node's by these two.
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config = v1.Config{Entrypoint: cfg.Entrypoint, Cmd: cfg.Cmd, Env: cfg.Env, WorkingDir: cfg.WorkingDir, User: cfg.User}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(out), atomicfile.TempPrefix(out))
	if err != nil {
		return err
	}
	_ = tmp.Close()
	defer func() { _ = os.Remove(tmp.Name()) }()
	if err := tarball.WriteToFile(tmp.Name(), tag, img); err != nil {
		return fmt.Errorf("%s: %w", ref, err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), out)
}
