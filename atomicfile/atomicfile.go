// Package atomicfile replaces files so that a crash or a power loss leaves
// either the old content or the new one, never a mix or nothing.
package atomicfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// Write replaces path with data: a temporary file in the same directory
// (named "."+base+".tmp-*", so listings that skip dot files skip it),
// written and fsynced, renamed over path, then the directory fsynced so the
// rename survives a power loss. On error the temporary file is removed.
func Write(path string, data []byte, perm fs.FileMode) error {
	return write(path, data, perm, os.Rename)
}

// write is Write with the rename injectable, for tests that make it fail.
func write(path string, data []byte, perm fs.FileMode, rename func(oldpath, newpath string) error) (err error) {
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
	if err := rename(tmp, path); err != nil {
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
