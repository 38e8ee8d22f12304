// Package build makes transit's offline Kubernetes bundle (package bundle)
// without a registry, a Docker daemon or the internet: the Kubernetes,
// etcd, CoreDNS and flannel binaries are built from the Go module proxy,
// the container runtime and CNI plugins are taken from the build host's
// Debian packages, and every image is written with go-containerregistry.
//
// A rebuild is cheap: go build skips what is up to date, and a file or
// image whose inputs (sources, contents, config) did not change is kept.
package build

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/cloudtransit/transit/atomicfile"
	"github.com/cloudtransit/transit/bundle"
)

// Options say where to build.
type Options struct {
	// Repo is transit's source tree (its go.mod); the source modules are
	// under Repo/bundle/sources.
	Repo string
	// Out is the bundle directory; built binaries are cached in Out/.work.
	Out string
	// Go is the go command; default "go".
	Go string
	// Log gets one line per step; default none.
	Log io.Writer
}

// Build brings the bundle at opts.Out up to date and returns its
// manifest.
func Build(ctx context.Context, opts Options) (*bundle.Manifest, error) {
	return build(ctx, opts, plan{goBuilds: goBuilds(), files: nodeFiles(), images: images()})
}

// plan is what a bundle is made of.
type plan struct {
	goBuilds []goBuild
	files    []nodeFile
	images   []imageSpec
}

func build(ctx context.Context, opts Options, p plan) (*bundle.Manifest, error) {
	if opts.Go == "" {
		opts.Go = "go"
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	// The builds run in other directories (a module's, a temporary one):
	// a relative path, transit-bundle's default among them, would point
	// elsewhere there.
	for _, p := range []*string{&opts.Out, &opts.Repo} {
		if *p == "" {
			continue
		}
		abs, err := filepath.Abs(*p)
		if err != nil {
			return nil, err
		}
		*p = abs
	}
	for _, d := range []string{"bin", "cni", "images", ".work"} {
		if err := os.MkdirAll(filepath.Join(opts.Out, d), 0o755); err != nil {
			return nil, err
		}
	}
	unlock, err := lockOut(ctx, opts.Out, opts.Log)
	if err != nil {
		return nil, err
	}
	defer unlock()
	b := &builder{opts: opts, work: filepath.Join(opts.Out, ".work"), sums: map[string]string{}}
	for _, g := range p.goBuilds {
		if err := b.goBuild(ctx, g); err != nil {
			return nil, err
		}
	}
	b.old = lastManifest(opts.Out)
	m := &bundle.Manifest{Kubernetes: Kubernetes}
	for _, f := range p.files {
		out, err := b.nodeFile(f)
		if err != nil {
			return nil, err
		}
		m.Files = append(m.Files, out)
	}
	for _, spec := range p.images {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		im, err := b.image(spec)
		if err != nil {
			return nil, err
		}
		m.Images = append(m.Images, im)
	}
	if err := b.prune(m); err != nil {
		return nil, err
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := atomicfile.Write(filepath.Join(opts.Out, bundle.ManifestFile), append(data, '\n'), 0o644); err != nil {
		return nil, err
	}
	return m, nil
}

// lockOut takes the bundle directory's lock (.work/lock, flock), waiting
// while another build holds it: two builds of one directory at once (the
// e2e tests and a platform's conformance test start theirs together)
// would write the same files. The kernel drops the lock of a build that
// died.
func lockOut(ctx context.Context, out string, log io.Writer) (func(), error) {
	path := filepath.Join(out, ".work", "lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock the bundle directory: %w", err)
	}
	logged := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			_ = f.Close()
			return nil, fmt.Errorf("lock the bundle directory %s: %w", path, err)
		}
		if !logged {
			_, _ = fmt.Fprintf(log, "waiting for another build of %s to finish\n", out)
			logged = true
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

type builder struct {
	opts Options
	work string
	old  *bundle.Manifest
	sums map[string]string // host file -> sha256, hashed once per build
}

func (b *builder) logf(format string, args ...any) {
	_, _ = fmt.Fprintf(b.opts.Log, format+"\n", args...)
}

// goBuild runs go build for one source module. The Go build cache makes
// a rebuild of unchanged sources a relink at most.
func (b *builder) goBuild(ctx context.Context, g goBuild) error {
	start := time.Now()
	out := filepath.Join(b.work, g.out) + string(filepath.Separator)
	args := []string{"build", "-trimpath", "-ldflags", strings.TrimSpace("-s -w " + g.ldflags), "-o", out}
	if g.tags != "" {
		args = append(args, "-tags", g.tags)
	}
	cmd := exec.CommandContext(ctx, b.opts.Go, append(args, g.pkgs...)...)
	cmd.Dir = filepath.Join(b.opts.Repo, filepath.FromSlash(g.module))
	cgo := "CGO_ENABLED=0"
	if g.cgo {
		cgo = "CGO_ENABLED=1"
	}
	// The source modules' go.sum files pin every dependency; -mod=mod
	// would let a build change them.
	cmd.Env = append(os.Environ(), cgo, "GOFLAGS=-mod=readonly -buildvcs=false")
	cmd.Stdout, cmd.Stderr = b.opts.Log, b.opts.Log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build in %s: %w", g.module, err)
	}
	b.logf("built %s (%s) in %s", g.out, strings.Join(g.pkgs, " "), time.Since(start).Round(time.Second))
	return nil
}

// source maps a nodeFile or image source to a host path.
func (b *builder) source(src string) string {
	if rest, ok := strings.CutPrefix(src, "work:"); ok {
		return filepath.Join(b.work, filepath.FromSlash(rest))
	}
	return src
}

func (b *builder) hash(p string) (string, error) {
	if s, ok := b.sums[p]; ok {
		return s, nil
	}
	s, _, err := bundle.HashFile(p)
	if err != nil {
		return "", err
	}
	b.sums[p] = s
	return s, nil
}

// reuse returns the old manifest's entry for path when it was made from
// the same inputs and the file is still there, unchanged.
func (b *builder) reuse(path, inputs string) (bundle.File, bool) {
	if b.old == nil {
		return bundle.File{}, false
	}
	for _, f := range append(slices.Clone(b.old.Files), imageFiles(b.old)...) {
		if f.Path != path || f.Inputs != inputs {
			continue
		}
		// Hashed, not just sized: a bundle is what nodes run.
		sum, size, err := bundle.HashFile(filepath.Join(b.opts.Out, filepath.FromSlash(path)))
		return f, err == nil && size == f.Size && sum == f.SHA256
	}
	return bundle.File{}, false
}

// lastManifest is the manifest of the last build, a hint of what may be
// kept: reuse checks each file it names. It is not checked as a whole
// (bundle.Read), so one damaged file costs one rebuild, not all.
func lastManifest(out string) *bundle.Manifest {
	data, err := os.ReadFile(filepath.Join(out, bundle.ManifestFile))
	if err != nil {
		return nil
	}
	var m bundle.Manifest
	if json.Unmarshal(data, &m) != nil {
		return nil
	}
	return &m
}

func imageFiles(m *bundle.Manifest) []bundle.File {
	var out []bundle.File
	for _, im := range m.Images {
		out = append(out, im.File)
	}
	return out
}

func (b *builder) nodeFile(f nodeFile) (bundle.File, error) {
	src := b.source(f.src)
	st, err := os.Stat(src)
	if err != nil {
		return bundle.File{}, hostFileError(src, f.deb, err)
	}
	sum, err := b.hash(src)
	if err != nil {
		return bundle.File{}, err
	}
	mode := st.Mode().Perm() | 0o755
	inputs := digest("file", f.path, sum, mode.String(), f.role)
	if old, ok := b.reuse(f.path, inputs); ok {
		return old, nil
	}
	dst := filepath.Join(b.opts.Out, filepath.FromSlash(f.path))
	if err := copyInto(src, dst, mode); err != nil {
		return bundle.File{}, err
	}
	b.logf("copied %s", f.path)
	return bundle.File{Path: f.path, SHA256: sum, Size: st.Size(), Mode: mode, For: f.role, Inputs: inputs}, nil
}

func (b *builder) image(spec imageSpec) (bundle.Image, error) {
	t := newTree("/")
	if err := spec.make(t, b.work); err != nil {
		return bundle.Image{}, fmt.Errorf("image %s: %w", spec.ref, err)
	}
	inputs, err := b.treeInputs(spec, t)
	if err != nil {
		return bundle.Image{}, err
	}
	if spec.contentTag {
		spec.ref += ":" + inputs[:16]
	}
	path := "images/" + spec.file
	if old, ok := b.reuse(path, inputs); ok {
		return bundle.Image{File: old, Ref: spec.ref}, nil
	}
	start := time.Now()
	out := filepath.Join(b.opts.Out, "images", spec.file)
	if err := writeImage(out, spec.ref, t, spec.cfg); err != nil {
		return bundle.Image{}, err
	}
	sum, size, err := bundle.HashFile(out)
	if err != nil {
		return bundle.Image{}, err
	}
	b.logf("wrote image %s (%d MB) in %s", spec.ref, size>>20, time.Since(start).Round(100*time.Millisecond))
	return bundle.Image{Ref: spec.ref, File: bundle.File{Path: path, SHA256: sum, Size: size, Mode: 0o644, For: spec.role, Inputs: inputs}}, nil
}

// treeInputs digests everything an image is made from: its layer's
// format, ref, config, role and every entry of its tree, host files by
// content.
func (b *builder) treeInputs(spec imageSpec, t *tree) (string, error) {
	cfg, err := json.Marshal(spec.cfg)
	if err != nil {
		return "", err
	}
	parts := []string{"image", layerFormat, spec.ref, string(cfg), spec.role}
	paths := make([]string, 0, len(t.entries))
	for p := range t.entries {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, p := range paths {
		e := t.entries[p]
		content := e.linkTo
		switch {
		case e.kind == tar.TypeReg && e.data != nil:
			content = digest(string(e.data))
		case e.src != "":
			if content, err = b.hash(e.src); err != nil {
				return "", err
			}
		}
		parts = append(parts, fmt.Sprintf("%s %c %o %s", p, e.kind, e.mode, content))
	}
	return digest(parts...), nil
}

// prune removes files of the bundle's directories that the manifest no
// longer lists (an image renamed, a plugin dropped).
func (b *builder) prune(m *bundle.Manifest) error {
	keep := map[string]bool{}
	for _, f := range append(slices.Clone(m.Files), imageFiles(m)...) {
		keep[f.Path] = true
	}
	for _, d := range []string{"bin", "cni", "images"} {
		entries, err := os.ReadDir(filepath.Join(b.opts.Out, d))
		if err != nil {
			return err
		}
		for _, e := range entries {
			if !keep[d+"/"+e.Name()] {
				if err := os.RemoveAll(filepath.Join(b.opts.Out, d, e.Name())); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func digest(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		_, _ = fmt.Fprintf(h, "%d:%s\n", len(p), p)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// copyInto copies src to dst through a temporary file and a rename.
func copyInto(src, dst string, mode fs.FileMode) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	tmp, err := os.CreateTemp(filepath.Dir(dst), atomicfile.TempPrefix(dst))
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err := io.Copy(tmp, in); err != nil {
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}

// globHost lists host files matching pattern.
func globHost(t *tree, pattern string) ([]string, error) {
	matches, err := filepath.Glob(filepath.Join(t.host, pattern))
	if err != nil {
		return nil, err
	}
	if len(matches) == 0 {
		return nil, fmt.Errorf("no file matches %s on this host", pattern)
	}
	out := make([]string, len(matches))
	for i, m := range matches {
		out[i] = "/" + strings.TrimPrefix(filepath.ToSlash(strings.TrimPrefix(m, t.host)), "/")
	}
	return out, nil
}

// hostFileError says which package provides a missing host file.
func hostFileError(path, pkg string, err error) error {
	if errors.Is(err, fs.ErrNotExist) && pkg != "" {
		return fmt.Errorf("%s is missing: install the Debian package(s) %s (`sudo make bundle-deps`)", path, pkg)
	}
	return err
}
