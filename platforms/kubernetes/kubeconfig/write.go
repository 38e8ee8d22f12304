package kubeconfig

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/cloudtransit/transit/atomicfile"
	"github.com/cloudtransit/transit/clock"
)

// MergePath is the kubeconfig file `--merge` writes, as getenv tells:
// the first file of $KUBECONFIG (a list like $PATH), else
// $HOME/.kube/config.
func MergePath(getenv func(string) string) (string, error) {
	for _, p := range filepath.SplitList(getenv("KUBECONFIG")) {
		if p != "" {
			return p, nil
		}
	}
	home := getenv("HOME")
	if home == "" {
		return "", errors.New("neither $KUBECONFIG nor $HOME is set: no kubeconfig file to merge into")
	}
	return filepath.Join(home, ".kube", "config"), nil
}

// LockWait bounds how long WriteMerged waits for another writer's lock.
const LockWait = 10 * time.Second

// Backoff between attempts to take a held lock.
const (
	lockFirstBackoff = 5 * time.Millisecond
	lockMaxBackoff   = 100 * time.Millisecond
)

// WriteMerged merges exported into the kubeconfig file at path (Merge),
// creating the file and its directory (mode 0700) when missing. The file
// is replaced atomically with mode 0600, whatever its mode was; a file
// that does not parse is left as it is and is an error. When path is a
// symbolic link, the file it points to is replaced and the link kept, and
// when root rewrites another user's file, that user keeps it.
//
// Concurrent writers are serialised with kubectl's own lock, path+".lock"
// created exclusively and removed after the write, so WriteMerged also
// excludes a kubectl or client-go writing the file at the same time. It
// waits up to LockWait for the lock, or until ctx ends.
func WriteMerged(ctx context.Context, path string, exported []byte) error {
	return writeMerged(ctx, path, exported, LockWait)
}

func writeMerged(ctx context.Context, path string, exported []byte, wait time.Duration) (err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	unlock, err := lock(ctx, path, wait)
	if err != nil {
		return err
	}
	defer func() {
		if uerr := unlock(); uerr != nil {
			err = errors.Join(err, fmt.Errorf("kubeconfig %s: release the lock: %w", path, uerr))
		}
	}()
	target, err := resolve(path)
	if err != nil {
		return fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	old, err := os.ReadFile(target)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	var oldInfo fs.FileInfo
	if err == nil {
		if oldInfo, err = os.Stat(target); err != nil {
			return fmt.Errorf("kubeconfig %s: %w", path, err)
		}
	}
	merged, err := Merge(old, exported)
	if err != nil {
		if _, ok := errors.AsType[*parseError](err); ok {
			return fmt.Errorf("kubeconfig %s: %w; it was left as it is", path, err)
		}
		return fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	if err := atomicfile.Write(target, merged, 0o600); err != nil {
		return fmt.Errorf("kubeconfig %s: write: %w", path, err)
	}
	if err := keepOwner(target, oldInfo); err != nil {
		return fmt.Errorf("kubeconfig %s: give the file back to its owner: %w", path, err)
	}
	return nil
}

// lock takes kubectl's lock on path: path+".lock", created exclusively
// (client-go's clientcmd.ModifyConfig does the same). While it exists,
// lock retries until wait has passed or ctx ends.
func lock(ctx context.Context, path string, wait time.Duration) (unlock func() error, err error) {
	name := path + ".lock"
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	backoff := lockFirstBackoff
	for {
		f, err := os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err == nil {
			if err := f.Close(); err != nil {
				return nil, errors.Join(fmt.Errorf("kubeconfig %s: lock: %w", path, err), os.Remove(name))
			}
			return func() error { return os.Remove(name) }, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("kubeconfig %s: lock: %w", path, err)
		}
		if err := (clock.Real{}).Sleep(wctx, backoff); err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("kubeconfig %s: waiting for the lock %s: %w", path, name, ctx.Err())
			}
			return nil, fmt.Errorf("kubeconfig %s is locked: %s exists after %s; kubectl or another transit is writing the file, or a writer that crashed left the lock: if none is running, delete %s",
				path, name, wait, name)
		}
		backoff = min(2*backoff, lockMaxBackoff)
	}
}

// resolve follows path when it is a symbolic link, so the link stays and
// the file it points to is replaced.
func resolve(path string) (string, error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return path, nil
	}
	if err != nil {
		return "", err
	}
	if fi.Mode()&fs.ModeSymlink == 0 {
		return path, nil
	}
	return filepath.EvalSymlinks(path)
}

// keepOwner gives a file root rewrote back to its former owner: the
// replacement is root's, and a user's kubeconfig that root may write
// (sudo with $HOME kept) must stay the user's.
func keepOwner(path string, old fs.FileInfo) error {
	if old == nil || os.Geteuid() != 0 {
		return nil
	}
	st, ok := old.Sys().(*syscall.Stat_t)
	if !ok || (int(st.Uid) == os.Geteuid() && int(st.Gid) == os.Getegid()) {
		return nil
	}
	return os.Chown(path, int(st.Uid), int(st.Gid))
}
