// Package filestore is the state store in a directory on this machine:
// today's layout, where resources.json, the cluster's SSH key, the
// host-key pins and the admin kubeconfig lie side by side.
//
// An object is a file: nested names are subdirectories (created with mode
// 0700), and objects are written atomically (package atomicfile: a
// temporary file, fsync, rename, fsync of the directory; mode 0600), so a
// crash leaves the old content or the new, never a mix. An object's
// version is a hash of its content. A conditional write or delete checks
// the version and writes under a short flock on the directory's
// ".transit-store.lock", so of two processes writing at once exactly one
// wins.
//
// The store's lock is the file lock transit has always taken on the state
// file, "<state file>.lock" (package filelock), so that a transit using
// this store and an older one exclude each other. The kernel frees it when
// its holder dies: it is never lost while its holder lives, and there is
// nothing to force (ForceUnlock refuses, naming the holder).
//
// Names whose last element ends in ".lock" (the state lock, the write
// lock, the host-key pins' and kubectl's locks) or that look like
// atomicfile's temporary files (".<name>.tmp-…") are the store's or other
// writers' own files: they are refused as object names and never listed.
// A name cannot be both an object and a directory of other objects ("a"
// and "a/b"): writing the second fails.
package filestore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/cloudtransit/transit/atomicfile"
	"github.com/cloudtransit/transit/filelock"
	"github.com/cloudtransit/transit/statestore"
)

// casFile is the flock that makes a check and a write one step.
const casFile = ".transit-store.lock"

// Modes of what the store creates.
const (
	fileMode = 0o600
	dirMode  = 0o700
)

// Store is a directory holding a cluster's state. Its methods are safe for
// concurrent use, also by several processes.
type Store struct {
	dir   string // absolute
	state string // the state file, whose lock file is the store's lock
}

var _ statestore.Store = (*Store)(nil)

// New opens the store of the state file statePath (resources.json): the
// store is the file's directory, which must exist, and its lock is
// statePath's lock file, "<statePath>.lock".
func New(statePath string) (*Store, error) {
	if statePath == "" {
		return nil, errors.New("file state store: no state file path")
	}
	abs, err := filepath.Abs(statePath)
	if err != nil {
		return nil, fmt.Errorf("file state store %s: %w", statePath, err)
	}
	if fi, err := os.Stat(abs); err == nil && fi.IsDir() {
		return nil, fmt.Errorf("file state store %s: a directory; want the state file's path (%s)", abs, filepath.Join(abs, "resources.json"))
	}
	dir := filepath.Dir(abs)
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("file state store: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("file state store %s: not a directory", dir)
	}
	return &Store{dir: dir, state: abs}, nil
}

// StateName is the state file's object name (its base name).
func (s *Store) StateName() string { return filepath.Base(s.state) }

// Location is the directory.
func (s *Store) Location() string { return s.dir }

// Version is the version of an object holding data: a hash of it.
func Version(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:16])
}

// reserved says whether a file named base is a lock or temporary file,
// not an object.
func reserved(base string) bool {
	return strings.HasSuffix(base, ".lock") || strings.HasPrefix(base, ".") && strings.Contains(base, ".tmp-")
}

// path is the file of the object name.
func (s *Store) path(name string) (string, error) {
	if err := statestore.CheckName(name); err != nil {
		return "", err
	}
	if reserved(path.Base(name)) {
		return "", fmt.Errorf("object name %q: %s keeps its lock and temporary files under such names", name, s.dir)
	}
	return filepath.Join(s.dir, filepath.FromSlash(name)), nil
}

// read reads the object at p and its file's metadata; ok is false when
// there is none (a directory of other objects is none).
func read(p string) (data []byte, fi fs.FileInfo, ok bool, err error) {
	fi, err = os.Stat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, unix.ENOTDIR):
		return nil, nil, false, nil
	case err != nil:
		return nil, nil, false, err
	case fi.IsDir():
		return nil, nil, false, nil
	case !fi.Mode().IsRegular():
		return nil, nil, false, fmt.Errorf("%s: not a regular file", p)
	}
	data, err = os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, false, nil // removed meanwhile
	}
	if err != nil {
		return nil, nil, false, err
	}
	return data, fi, true, nil
}

// version is the version of the object at p, NoVersion when there is none.
func version(p string) (string, error) {
	data, _, ok, err := read(p)
	if err != nil || !ok {
		return statestore.NoVersion, err
	}
	return Version(data), nil
}

func (s *Store) notFound(p string) error {
	return fmt.Errorf("%s: %w", p, statestore.ErrNotFound)
}

// Get reads an object.
func (s *Store) Get(ctx context.Context, name string) (statestore.Object, error) {
	p, err := s.path(name)
	if err != nil {
		return statestore.Object{}, err
	}
	if err := ctx.Err(); err != nil {
		return statestore.Object{}, fmt.Errorf("read %s: %w", p, err)
	}
	data, _, ok, err := read(p)
	if err != nil {
		return statestore.Object{}, err
	}
	if !ok {
		return statestore.Object{}, s.notFound(p)
	}
	return statestore.Object{Data: data, Version: Version(data)}, nil
}

// Stat returns an object's entry. Its version is a hash of its content,
// so Stat reads it as Get does.
func (s *Store) Stat(ctx context.Context, name string) (statestore.Entry, error) {
	p, err := s.path(name)
	if err != nil {
		return statestore.Entry{}, err
	}
	if err := ctx.Err(); err != nil {
		return statestore.Entry{}, fmt.Errorf("read %s: %w", p, err)
	}
	data, fi, ok, err := read(p)
	if err != nil {
		return statestore.Entry{}, err
	}
	if !ok {
		return statestore.Entry{}, s.notFound(p)
	}
	return entry(name, data, fi), nil
}

func entry(name string, data []byte, fi fs.FileInfo) statestore.Entry {
	return statestore.Entry{Name: name, Version: Version(data), Size: int64(len(data)), Modified: fi.ModTime()}
}

// exclusive runs f under the store's write lock, a short flock that
// another process's Put or Delete takes too.
func (s *Store) exclusive(ctx context.Context, f func() error) error {
	unlock, err := filelock.FlockContext(ctx, filepath.Join(s.dir, casFile), filelock.FlockOptions{Command: "transit (state store write)"})
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
		have, err := version(p)
		if err != nil {
			return err
		}
		if have != ifVersion {
			return &statestore.ConflictError{Store: s.dir, Name: name, Want: ifVersion, Have: have}
		}
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			return fmt.Errorf("%s is a directory of other objects (%s/…): it cannot be an object too", p, name)
		}
		if err := s.mkdirs(filepath.Dir(p)); err != nil {
			return err
		}
		return atomicfile.Write(p, data, fileMode)
	})
	if err != nil {
		return "", wrap("write", p, err)
	}
	return Version(data), nil
}

// mkdirs makes dir, a directory of the store, and the missing directories
// above it, each made durable in its parent.
func (s *Store) mkdirs(dir string) error {
	if dir == s.dir {
		return nil
	}
	fi, err := os.Stat(dir)
	switch {
	case err == nil && fi.IsDir():
		return nil
	case err == nil:
		return fmt.Errorf("%s is an object: it cannot be a directory of other objects too", dir)
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	parent := filepath.Dir(dir)
	if err := s.mkdirs(parent); err != nil {
		return err
	}
	if err := os.Mkdir(dir, dirMode); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return atomicfile.SyncDir(parent)
}

// Delete removes an object if its version is still ifVersion.
func (s *Store) Delete(ctx context.Context, name, ifVersion string) error {
	p, err := s.path(name)
	if err != nil {
		return err
	}
	err = s.exclusive(ctx, func() error {
		have, err := version(p)
		switch {
		case err != nil:
			return err
		case have == statestore.NoVersion:
			return s.notFound(p)
		case have != ifVersion:
			return &statestore.ConflictError{Store: s.dir, Name: name, Want: ifVersion, Have: have}
		}
		if err := os.Remove(p); err != nil {
			return err
		}
		return atomicfile.SyncDir(filepath.Dir(p))
	})
	return wrap("delete", p, err)
}

// wrap says what failed on p, unless err says so itself: a conflict, or
// a missing object.
func wrap(op, p string, err error) error {
	var c *statestore.ConflictError
	if err == nil || errors.As(err, &c) || errors.Is(err, statestore.ErrNotFound) {
		return err
	}
	return fmt.Errorf("%s %s: %w", op, p, err)
}

// List returns the objects whose names start with prefix, sorted by name.
// It walks only the directories that can hold such names.
func (s *Store) List(ctx context.Context, prefix string) ([]statestore.Entry, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list %s: %w", s.dir, err)
	}
	root := s.dir
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		sub := prefix[:i]
		if statestore.CheckName(sub) != nil {
			return nil, nil // no name lies there
		}
		root = filepath.Join(s.dir, filepath.FromSlash(sub))
	}
	var out []statestore.Entry
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR) {
				return nil // no such directory, or removed meanwhile
			}
			return err
		}
		rel, err := filepath.Rel(s.dir, p)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		if d.IsDir() {
			if p != root && !strings.HasPrefix(name+"/", prefix) && !strings.HasPrefix(prefix, name+"/") {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || reserved(d.Name()) || !strings.HasPrefix(name, prefix) || statestore.CheckName(name) != nil {
			return nil
		}
		data, fi, ok, err := read(p)
		if ok {
			out = append(out, entry(name, data, fi))
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", s.dir, err)
	}
	slices.SortFunc(out, func(a, b statestore.Entry) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Lock takes the state file's lock, as transit always has. o.Lease does
// not apply (the kernel holds the lock while its holder lives), nor does
// o.Now: the lock file records the wall clock.
func (s *Store) Lock(ctx context.Context, o statestore.LockOptions) (statestore.Lock, error) {
	fo := filelock.Options{Timeout: o.Timeout, Command: o.Command}
	if o.Waiting != nil {
		fo.Waiting = func(e *filelock.LockedError) { o.Waiting(s.lockedError(e)) }
	}
	l, err := filelock.Acquire(ctx, s.state, fo)
	if err != nil {
		var held *filelock.LockedError
		if errors.As(err, &held) {
			return nil, s.lockedError(held)
		}
		return nil, err
	}
	if l.Previous != nil && o.TookOver != nil {
		o.TookOver(lockInfo(*l.Previous))
	}
	return &lock{l: l, info: lockInfo(l.Holder), lost: make(chan struct{})}, nil
}

// lockInfo is what the lock file records: a file lock has no ID (there is
// nothing to force-unlock).
func lockInfo(h filelock.Holder) statestore.LockInfo {
	return statestore.LockInfo{PID: h.PID, Host: h.Host, Command: h.Command, Started: h.Started}
}

func (s *Store) lockedError(e *filelock.LockedError) *statestore.LockedError {
	out := &statestore.LockedError{Store: s.dir, Waited: e.Waited, Err: e.Err}
	if e.Holder != nil {
		out.Holder = lockInfo(*e.Holder)
	}
	return out
}

// ForceUnlock refuses: the kernel frees a file lock as soon as its holder
// ends, so a held one is a live run's, whatever id says. The error matches
// ErrLocked and names the holder; with no lock held it matches
// ErrNotFound.
func (s *Store) ForceUnlock(ctx context.Context, _ string) error {
	if _, err := os.Stat(s.state + ".lock"); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("force-unlock %s: not locked: %w", s.dir, statestore.ErrNotFound)
	}
	l, err := filelock.Acquire(ctx, s.state, filelock.Options{Command: "transit force-unlock"})
	var held *filelock.LockedError
	if errors.As(err, &held) {
		todo := "stop that run"
		switch {
		case held.Holder == nil:
			todo = fmt.Sprintf("`fuser -v %s` finds the process holding it", held.File)
		case held.HolderGone:
			todo = fmt.Sprintf("pid %d has exited, but a process it started still holds the lock: `fuser -v %s` finds it", held.Holder.PID, held.File)
		}
		return fmt.Errorf("force-unlock refused: %w: it is a file lock (%s), which the kernel frees as soon as its holder ends, so there is nothing to force; %s", s.lockedError(held), held.File, todo)
	}
	if err != nil {
		return fmt.Errorf("force-unlock %s: %w", s.dir, err)
	}
	msg := "not locked"
	if l.Previous != nil {
		msg = fmt.Sprintf("not locked (%s ended without releasing it, and the kernel freed it then)", lockInfo(*l.Previous))
	}
	if err := l.Release(); err != nil {
		return fmt.Errorf("force-unlock %s: %w", s.dir, err)
	}
	return fmt.Errorf("force-unlock %s: %s: %w", s.dir, msg, statestore.ErrNotFound)
}

// lock is a held state file lock.
type lock struct {
	info statestore.LockInfo
	lost chan struct{} // never closed: the kernel keeps the lock while its holder lives

	mu sync.Mutex
	l  *filelock.Lock // nil once released
}

func (l *lock) Info() statestore.LockInfo { return l.info }

func (l *lock) Lost() <-chan struct{} { return l.lost }

// Valid is nil until Release: the kernel holds a file lock while its
// holder lives, paused or not.
func (l *lock) Valid() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.l == nil {
		return fmt.Errorf("%w: released", statestore.ErrLockLost)
	}
	return nil
}

func (l *lock) Release(context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.l == nil {
		return nil
	}
	err := l.l.Release()
	l.l = nil
	return err
}
