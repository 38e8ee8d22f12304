// Package filestore is the state store in a directory on this machine:
// today's layout, where resources.json, the cluster's SSH key, the
// host-key pins and the admin kubeconfig lie side by side. An object is a
// file (nested names are subdirectories, mode 0700), written atomically
// (package atomicfile, mode 0600); its version is a hash of its content.
// A conditional write checks and writes under a short flock, so of two
// processes writing at once exactly one wins. The lock is the file lock
// transit has always taken ("<state file>.lock", package filelock): the
// kernel frees it when its holder dies, so there is nothing to force.
package filestore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cloudtransit/transit/atomicfile"
	"github.com/cloudtransit/transit/filelock"
	"github.com/cloudtransit/transit/statestore"
)

// casFile is the flock that makes a check and a write one step.
const casFile = ".transit-store.lock"

// Store is a directory holding a cluster's state.
type Store struct {
	dir   string
	state string // the state file, whose lock file is the store's lock
}

// New opens the store whose state file is statePath (resources.json):
// the store is its directory, which must exist.
func New(statePath string) (*Store, error) {
	abs, err := filepath.Abs(statePath)
	if err != nil {
		return nil, err
	}
	dir := filepath.Dir(abs)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("state directory %s: %w", dir, cmpErr(err, errors.New("not a directory")))
	}
	return &Store{dir: dir, state: abs}, nil
}

func cmpErr(err, otherwise error) error {
	if err != nil {
		return err
	}
	return otherwise
}

// StateName is the state file's object name (its base name).
func (s *Store) StateName() string { return filepath.Base(s.state) }

// Location is the directory.
func (s *Store) Location() string { return s.dir }

func (s *Store) path(name string) (string, error) {
	if err := statestore.CheckName(name); err != nil {
		return "", err
	}
	return filepath.Join(s.dir, filepath.FromSlash(name)), nil
}

// version names content.
func version(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:16])
}

// Get reads an object.
func (s *Store) Get(_ context.Context, name string) (statestore.Object, error) {
	p, err := s.path(name)
	if err != nil {
		return statestore.Object{}, err
	}
	data, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return statestore.Object{}, fmt.Errorf("%s: %w", p, statestore.ErrNotFound)
	}
	if err != nil {
		return statestore.Object{}, err
	}
	return statestore.Object{Data: data, Version: version(data)}, nil
}

// current is name's version now, NoVersion when it does not exist.
func current(p string) (string, error) {
	data, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return statestore.NoVersion, nil
	}
	if err != nil {
		return "", err
	}
	return version(data), nil
}

// exclusive runs f under the store's short flock.
func (s *Store) exclusive(ctx context.Context, f func() error) error {
	unlock, err := filelock.FlockContext(ctx, filepath.Join(s.dir, casFile), filelock.FlockOptions{})
	if err != nil {
		return err
	}
	defer unlock()
	return f()
}

// Put writes an object if its version is still ifVersion.
func (s *Store) Put(ctx context.Context, name string, data []byte, ifVersion string) (string, error) {
	p, err := s.path(name)
	if err != nil {
		return "", err
	}
	err = s.exclusive(ctx, func() error {
		have, err := current(p)
		if err != nil {
			return err
		}
		if have != ifVersion {
			return &statestore.ConflictError{Store: s.dir, Name: name, Want: ifVersion, Have: have}
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return err
		}
		return atomicfile.Write(p, data, 0o600)
	})
	if err != nil {
		return "", err
	}
	return version(data), nil
}

// Delete removes an object if its version is still ifVersion.
func (s *Store) Delete(ctx context.Context, name, ifVersion string) error {
	p, err := s.path(name)
	if err != nil {
		return err
	}
	return s.exclusive(ctx, func() error {
		have, err := current(p)
		if err != nil {
			return err
		}
		switch {
		case have == statestore.NoVersion:
			return fmt.Errorf("%s: %w", p, statestore.ErrNotFound)
		case have != ifVersion:
			return &statestore.ConflictError{Store: s.dir, Name: name, Want: ifVersion, Have: have}
		}
		if err := os.Remove(p); err != nil {
			return err
		}
		return atomicfile.SyncDir(filepath.Dir(p))
	})
}

// List returns the objects under prefix, sorted by name: the store's own
// files (lock files, temporary files of a write) are none.
func (s *Store) List(_ context.Context, prefix string) ([]statestore.Entry, error) {
	var out []statestore.Entry
	err := filepath.WalkDir(s.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !d.Type().IsRegular() {
			return nil
		}
		base := d.Name()
		if base == casFile || strings.HasSuffix(base, ".lock") || strings.HasPrefix(base, ".") && strings.Contains(base, ".tmp-") {
			return nil
		}
		rel, err := filepath.Rel(s.dir, p)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		if !strings.HasPrefix(name, prefix) || statestore.CheckName(name) != nil {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		out = append(out, statestore.Entry{Name: name, Version: version(data), Size: int64(len(data)), Modified: fi.ModTime()})
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b statestore.Entry) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Lock takes the state file's lock.
func (s *Store) Lock(ctx context.Context, o statestore.LockOptions) (statestore.Lock, error) {
	fo := filelock.Options{Timeout: o.Timeout, Command: o.Command}
	if o.Waiting != nil {
		fo.Waiting = func(e *filelock.LockedError) { o.Waiting(s.locked(e)) }
	}
	l, err := filelock.Acquire(ctx, s.state, fo)
	var held *filelock.LockedError
	if errors.As(err, &held) {
		return nil, s.locked(held)
	}
	if err != nil {
		return nil, err
	}
	if l.Previous != nil && o.TookOver != nil {
		o.TookOver(info(l.Previous))
	}
	host, _ := os.Hostname()
	return &lock{l: l, info: statestore.LockInfo{PID: os.Getpid(), Host: host, Command: o.Command, Started: time.Now().UTC()}}, nil
}

func info(h *filelock.Holder) statestore.LockInfo {
	return statestore.LockInfo{PID: h.PID, Host: h.Host, Command: h.Command, Started: h.Started}
}

func (s *Store) locked(e *filelock.LockedError) *statestore.LockedError {
	out := &statestore.LockedError{Store: s.dir, Waited: e.Waited, Err: e.Err}
	if e.Holder != nil {
		out.Holder = info(e.Holder)
	}
	return out
}

// ForceUnlock refuses: the kernel holds a file lock for exactly as long
// as its holder lives.
func (s *Store) ForceUnlock(ctx context.Context, _ string) error {
	l, err := filelock.Acquire(ctx, s.state, filelock.Options{Command: "transit force-unlock"})
	var held *filelock.LockedError
	if errors.As(err, &held) {
		return fmt.Errorf("%s is locked by a live process, %s: a file lock is freed by the kernel when its holder ends — stop that run instead (force-unlock is for remote stores, whose holder may die elsewhere)",
			s.state, s.locked(held).Holder)
	}
	if err != nil {
		return err
	}
	if err := l.Release(); err != nil {
		return err
	}
	return fmt.Errorf("%s is not locked: %w", s.state, statestore.ErrNotFound)
}

type lock struct {
	l    *filelock.Lock
	info statestore.LockInfo
	lost chan struct{} // never closed: the kernel keeps the lock while we live
}

func (l *lock) Info() statestore.LockInfo { return l.info }

func (l *lock) Lost() <-chan struct{} { return l.lost }

func (l *lock) Release(context.Context) error {
	if l.l == nil {
		return nil
	}
	err := l.l.Release()
	l.l = nil
	return err
}
