// Package bundle describes transit's offline Kubernetes bundle: a directory
// of node binaries and container image archives, built by `make bundle`
// (package bundle/build), from which the Kubernetes platform driver installs
// nodes that cannot (or must not) reach a package repository or a registry.
//
// The directory holds manifest.json, which lists every file with its
// SHA-256 and, for images, the reference containerd must know it by and
// which nodes need it. The manifest is written last, so a bundle whose
// build was interrupted has the previous manifest or none.
package bundle

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// ManifestFile is the manifest's name inside a bundle directory.
const ManifestFile = "manifest.json"

// Which nodes need a file or an image.
const (
	ForAll     = "all"
	ForMasters = "masters"
)

// Manifest is a bundle's table of contents.
type Manifest struct {
	// Kubernetes is the release the binaries and images were built from
	// ("v1.32.4").
	Kubernetes string `json:"kubernetes_version"`
	// Files are what is copied onto a node, by role.
	Files []File `json:"files"`
	// Images are archives imported into the node's containerd.
	Images []Image `json:"images"`
}

// File is one file of the bundle.
type File struct {
	// Path is slash-separated and relative to the bundle directory
	// ("bin/kubelet").
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
	// Mode is the file's permission bits.
	Mode fs.FileMode `json:"mode"`
	// For is ForAll or ForMasters.
	For string `json:"for"`
	// Inputs is the digest of what the file was made from; a rebuild with
	// the same inputs keeps the file.
	Inputs string `json:"inputs,omitempty"`
}

// Image is an image archive (docker save format) of the bundle.
type Image struct {
	File
	// Ref is the name kubeadm and the manifests ask containerd for
	// ("registry.k8s.io/pause:3.10").
	Ref string `json:"ref"`
}

// ImageRef is the reference of the bundle's image of repository (such as
// RelationsRepository, whose tag is a content digest), or "" if the
// bundle has none.
func (m *Manifest) ImageRef(repository string) string {
	for _, im := range m.Images {
		if strings.HasPrefix(im.Ref, repository+":") {
			return im.Ref
		}
	}
	return ""
}

// Read loads and checks dir's manifest: every path stays inside the
// bundle, every checksum is well formed, every file exists with its
// recorded size. It does not hash the files (Verify does).
func Read(dir string) (*Manifest, error) {
	file := filepath.Join(dir, ManifestFile)
	data, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: no bundle here: build one with `make bundle` (BUNDLE_DIR=%s)", file, dir)
	}
	if err != nil {
		return nil, err
	}
	var m Manifest
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%s: %w: rebuild the bundle with `make bundle`", file, err)
	}
	if err := m.check(dir); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return &m, nil
}

func (m *Manifest) check(dir string) error {
	if m.Kubernetes == "" {
		return errors.New("kubernetes_version is missing")
	}
	seen := map[string]bool{}
	for _, f := range m.all() {
		if err := f.check(dir); err != nil {
			return err
		}
		if seen[f.Path] {
			return fmt.Errorf("%s is listed twice", f.Path)
		}
		seen[f.Path] = true
	}
	for _, im := range m.Images {
		if im.Ref == "" {
			return fmt.Errorf("image %s has no ref", im.Path)
		}
	}
	return nil
}

func (f File) check(dir string) error {
	if !ValidPath(f.Path) {
		return fmt.Errorf("path %q leaves the bundle or is not clean", f.Path)
	}
	if b, err := hex.DecodeString(f.SHA256); err != nil || len(b) != sha256.Size {
		return fmt.Errorf("%s: sha256 %q is not a SHA-256 in hex", f.Path, f.SHA256)
	}
	if f.For != ForAll && f.For != ForMasters {
		return fmt.Errorf("%s: for %q: want %q or %q", f.Path, f.For, ForAll, ForMasters)
	}
	if f.Mode&^fs.ModePerm != 0 {
		return fmt.Errorf("%s: mode %v is not permission bits", f.Path, f.Mode)
	}
	st, err := os.Stat(filepath.Join(dir, filepath.FromSlash(f.Path)))
	if err != nil {
		return fmt.Errorf("%w: rebuild the bundle with `make bundle`", err)
	}
	if !st.Mode().IsRegular() || st.Size() != f.Size {
		return fmt.Errorf("%s is %d bytes, the manifest says %d: rebuild the bundle with `make bundle`", f.Path, st.Size(), f.Size)
	}
	return nil
}

// ValidPath says whether p is a clean, relative, slash-separated path
// that stays inside its directory.
func ValidPath(p string) bool {
	return p != "" && p != "." && !strings.HasPrefix(p, "/") && path.Clean(p) == p &&
		p != ".." && !strings.HasPrefix(p, "../") && !strings.Contains(p, "\\")
}

// all returns every file and image archive.
func (m *Manifest) all() []File {
	all := slices.Clone(m.Files)
	for _, im := range m.Images {
		all = append(all, im.File)
	}
	return all
}

// For returns the files and images a node of the role needs: masters get
// everything, other nodes what is ForAll.
func (m *Manifest) For(master bool) ([]File, []Image) {
	keep := func(f File) bool { return master || f.For == ForAll }
	var files []File
	for _, f := range m.Files {
		if keep(f) {
			files = append(files, f)
		}
	}
	var images []Image
	for _, im := range m.Images {
		if keep(im.File) {
			images = append(images, im)
		}
	}
	return files, images
}

// Image returns the image whose ref is ref.
func (m *Manifest) Image(ref string) (Image, bool) {
	for _, im := range m.Images {
		if im.Ref == ref {
			return im, true
		}
	}
	return Image{}, false
}

// Verify hashes every file of the bundle and reports the first whose
// content differs from the manifest.
func (m *Manifest) Verify(dir string) error {
	for _, f := range m.all() {
		sum, _, err := HashFile(filepath.Join(dir, filepath.FromSlash(f.Path)))
		if err != nil {
			return err
		}
		if sum != f.SHA256 {
			return fmt.Errorf("%s: content changed since the bundle was built (sha256 %s, manifest %s): rebuild it with `make bundle`", f.Path, sum, f.SHA256)
		}
	}
	return nil
}

// HashFile returns the file's SHA-256 in hex and its size.
func HashFile(name string) (string, int64, error) {
	f, err := os.Open(name)
	if err != nil {
		return "", 0, err
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, fmt.Errorf("%s: %w", name, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}
