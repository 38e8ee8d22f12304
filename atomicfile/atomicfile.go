// Package atomicfile writes files so that a crash or a power loss leaves
// either the old content or the new one, never a mix or nothing.
package atomicfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// Write replaces path with data: a temporary file in the same directory
// (TempPrefix, so listings that skip dot files skip it), written with mode
// perm and fsynced, renamed over path, then the directory fsynced so the
// rename survives a power loss. On error the temporary file is removed and
// path keeps its old content.
func Write(path string, data []byte, perm fs.FileMode) error {
	return install(path, data, perm, os.Rename)
}

// WriteNew writes data to path only if path does not exist, in the same
// way: a reader or a concurrent writer sees no file or the whole file,
// and the first writer wins. If path exists it returns an error that
// matches fs.ErrExist and leaves the file alone.
func WriteNew(path string, data []byte, perm fs.FileMode) error {
	return install(path, data, perm, func(tmp, path string) error {
		err := os.Link(tmp, path) // unlike rename, never replaces
		if rerr := os.Remove(tmp); err == nil {
			err = rerr
		}
		return err
	})
}

// install writes data to a temporary file and puts it at path with put
// (rename or link).
func install(path string, data []byte, perm fs.FileMode, put func(tmp, path string) error) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, TempPrefix(path)+"*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			if rerr := os.Remove(tmp); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
				err = errors.Join(err, rerr)
			}
		}
	}()
	if err := f.Chmod(perm); err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := put(tmp, path); err != nil {
		return err
	}
	return SyncDir(dir)
}

// TempPrefix is how Write names its temporary files for path; a crash
// between create and rename leaves one behind.
func TempPrefix(path string) string { return "." + filepath.Base(path) + ".tmp-" }

// SyncDir makes a rename, link or removal in dir durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
