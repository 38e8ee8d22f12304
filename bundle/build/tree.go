package build

import (
	"archive/tar"
	"debug/elf"
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

// A tree is the file system of an image layer, assembled from files of
// the build host: each entry is a directory, a host file, a symlink or
// inline content, at an absolute path inside the image.
type tree struct {
	entries map[string]entry
	// host is where host paths are read from ("/" except in tests).
	host string
}

type entry struct {
	kind    byte // tar.TypeDir, tar.TypeReg, tar.TypeSymlink
	mode    int64
	src     string // host file for a regular file without data
	data    []byte // inline content
	linkTo  string
	srcSize int64
}

func newTree(host string) *tree {
	return &tree{entries: map[string]entry{}, host: host}
}

// libDirs are where the dynamic loader of a Debian amd64 host finds
// libraries; DT_NEEDED names are looked up there in order.
var libDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"}

// dir adds a directory and its parents.
func (t *tree) dir(p string, mode int64) {
	for _, d := range parents(p) {
		if _, ok := t.entries[d]; !ok {
			t.entries[d] = entry{kind: tar.TypeDir, mode: 0o755}
		}
	}
	t.entries[p] = entry{kind: tar.TypeDir, mode: mode}
}

// parents returns p's ancestors below "/", outermost first.
func parents(p string) []string {
	var out []string
	for d := path.Dir(p); d != "/" && d != "."; d = path.Dir(d) {
		out = append(out, d)
	}
	slices.Reverse(out)
	return out
}

// file adds inline content.
func (t *tree) file(p string, data []byte, mode int64) {
	t.parentDirs(p)
	t.entries[p] = entry{kind: tar.TypeReg, mode: mode, data: data}
}

// symlink adds p pointing at target.
func (t *tree) symlink(p, target string) {
	t.parentDirs(p)
	t.entries[p] = entry{kind: tar.TypeSymlink, mode: 0o777, linkTo: target}
}

func (t *tree) parentDirs(p string) {
	for _, d := range parents(p) {
		if _, ok := t.entries[d]; !ok {
			t.entries[d] = entry{kind: tar.TypeDir, mode: 0o755}
		}
	}
}

// copyAs adds the host file src at p in the image, following symlinks on
// the host; its mode is kept.
func (t *tree) copyAs(src, p string) error {
	resolved, err := filepath.EvalSymlinks(filepath.Join(t.host, src))
	if err != nil {
		return err
	}
	st, err := os.Stat(resolved)
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", src)
	}
	t.parentDirs(p)
	t.entries[p] = entry{kind: tar.TypeReg, mode: int64(st.Mode().Perm()), src: resolved, srcSize: st.Size()}
	return nil
}

// host adds the host path p at the same place in the image, with every
// symlink met on the way to the file (so /lib64/ld-linux-x86-64.so.2 in
// the image resolves as it does on the host); with elfDeps it adds the
// shared libraries and loader p needs, recursively.
func (t *tree) hostPath(p string, elfDeps bool) error {
	resolved, err := t.addLinks(p)
	if err != nil {
		return err
	}
	if err := t.copyAs(resolved, resolved); err != nil {
		return err
	}
	if !elfDeps {
		return nil
	}
	return t.elfDeps(resolved)
}

// addLinks walks p component by component on the host, adding each
// symlink it meets, and returns the resolved path.
func (t *tree) addLinks(p string) (string, error) {
	if !path.IsAbs(p) {
		return "", fmt.Errorf("%s: want an absolute path", p)
	}
	cur := "/"
	rest := strings.Split(strings.TrimPrefix(path.Clean(p), "/"), "/")
	for hops := 0; len(rest) > 0; {
		next := path.Join(cur, rest[0])
		rest = rest[1:]
		st, err := os.Lstat(filepath.Join(t.host, next))
		if err != nil {
			return "", err
		}
		if st.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		if hops++; hops > 40 {
			return "", fmt.Errorf("%s: too many symlinks", p)
		}
		target, err := os.Readlink(filepath.Join(t.host, next))
		if err != nil {
			return "", err
		}
		t.symlink(next, target)
		if !path.IsAbs(target) {
			target = path.Join(cur, target)
		}
		rest = append(strings.Split(strings.TrimPrefix(path.Clean(target), "/"), "/"), rest...)
		cur = "/"
	}
	return cur, nil
}

// elfDeps adds the interpreter and the DT_NEEDED libraries of the ELF file
// at the host path p (already resolved), recursively. A static binary has
// none.
func (t *tree) elfDeps(p string) error {
	seen := map[string]bool{}
	var walk func(string) error
	walk = func(p string) error {
		if seen[p] {
			return nil
		}
		seen[p] = true
		f, err := elf.Open(filepath.Join(t.host, p))
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		defer func() { _ = f.Close() }()
		var deps []string
		for _, prog := range f.Progs {
			if prog.Type != elf.PT_INTERP {
				continue
			}
			b, err := io.ReadAll(prog.Open())
			if err != nil {
				return fmt.Errorf("%s: interpreter: %w", p, err)
			}
			deps = append(deps, strings.TrimRight(string(b), "\x00"))
		}
		libs, err := f.ImportedLibraries()
		if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
			return fmt.Errorf("%s: %w", p, err)
		}
		for _, lib := range libs {
			found, err := t.findLib(lib)
			if err != nil {
				return fmt.Errorf("%s needs %w", p, err)
			}
			deps = append(deps, found)
		}
		for _, d := range deps {
			resolved, err := t.addLinks(d)
			if err != nil {
				return err
			}
			if err := t.copyAs(resolved, resolved); err != nil {
				return err
			}
			if err := walk(resolved); err != nil {
				return err
			}
		}
		return nil
	}
	return walk(p)
}

func (t *tree) findLib(name string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, d := range libDirs {
		p := path.Join(d, name)
		if _, err := os.Stat(filepath.Join(t.host, p)); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s, which is in none of %s", name, strings.Join(libDirs, ", "))
}

// writeTar writes the tree as an uncompressed tar, sorted by path, with
// fixed owners and times so the same tree gives the same bytes.
func (t *tree) writeTar(w io.Writer) error {
	tw := tar.NewWriter(w)
	paths := make([]string, 0, len(t.entries))
	for p := range t.entries {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, p := range paths {
		e := t.entries[p]
		hdr := &tar.Header{Typeflag: e.kind, Name: strings.TrimPrefix(p, "/"), Mode: e.mode, Format: tar.FormatPAX}
		switch e.kind {
		case tar.TypeDir:
			hdr.Name += "/"
		case tar.TypeSymlink:
			hdr.Linkname = e.linkTo
		case tar.TypeReg:
			hdr.Size = int64(len(e.data))
			if e.data == nil {
				hdr.Size = e.srcSize
			}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if e.kind != tar.TypeReg {
			continue
		}
		if e.data != nil {
			if _, err := tw.Write(e.data); err != nil {
				return err
			}
			continue
		}
		if err := copyFile(tw, e.src, e.srcSize); err != nil {
			return err
		}
	}
	return tw.Close()
}

// copyFile copies exactly size bytes of src, so a file that changed since
// it was added fails the build instead of writing a corrupt layer.
func copyFile(w io.Writer, src string, size int64) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	n, err := io.Copy(w, io.LimitReader(f, size))
	if err == nil && n != size {
		err = fmt.Errorf("%s changed size while the image was written", src)
	}
	return err
}
