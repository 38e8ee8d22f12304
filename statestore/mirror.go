package statestore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/cloudtransit/transit/atomicfile"
	"github.com/cloudtransit/transit/statestore/seal"
)

// Mirror is a private local directory holding a copy of some of a store's
// objects, for the code that reads and writes files (the SSH key, the
// host-key pins, the admin kubeconfig, resources.json): Pull fills it, Push
// writes back what changed since, each write conditional on the version
// pulled or last pushed, so a write another run made meanwhile is never
// overwritten (a *ConflictError stops the run).
type Mirror struct {
	Store Store
	// Dir is the local directory (made 0700 by Pull).
	Dir string
	// Files are the objects mirrored.
	Files []MirrorFile
	// Key seals and opens the Sealed files; nil refuses them with an
	// error naming what to set.
	Key *seal.Key
	// KeyHint says where the key comes from, for errors
	// ("TRANSIT_STATE_KEY").
	KeyHint string

	known map[string]mirrored // by local file name
}

// MirrorFile is one mirrored object.
type MirrorFile struct {
	// File is the local file name in Dir; the object's name is File,
	// with ".age" appended when Sealed.
	File string
	// Sealed files are stored encrypted with Key.
	Sealed bool
}

// Object is the store's name of f.
func (f MirrorFile) Object() string {
	if f.Sealed {
		return f.File + ".age"
	}
	return f.File
}

// mirrored is what Pull or Push last saw of a file: the object's version
// and the local content's hash.
type mirrored struct {
	version string
	hash    [32]byte
	exists  bool
	// size and mtime are the local file's when hashed: an unchanged
	// file costs a stat, not a read (the pins grow with the cluster and
	// a run pushes after every save).
	size  int64
	mtime time.Time
}

// Pull copies every mirrored object that exists into Dir (mode 0600),
// opening the sealed ones, and removes the local copies of those that do
// not. A sealed object without a key, or with another key, is an error
// that names the object and what to set; nothing is then created in its
// place.
func (m *Mirror) Pull(ctx context.Context) error {
	if err := os.MkdirAll(m.Dir, 0o700); err != nil {
		return err
	}
	if err := os.Chmod(m.Dir, 0o700); err != nil {
		return err
	}
	m.known = map[string]mirrored{}
	for _, f := range m.Files {
		path := filepath.Join(m.Dir, f.File)
		data, version, err := m.Read(ctx, f)
		if errors.Is(err, ErrNotFound) {
			if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			m.known[f.File] = mirrored{}
			continue
		}
		if err != nil {
			return err
		}
		if err := atomicfile.Write(path, data, 0o600); err != nil {
			return err
		}
		m.known[f.File] = mirrored{version: version, hash: sha256.Sum256(data), exists: true}
	}
	return nil
}

// Read reads f's object, opened when sealed, and its version, in memory:
// a copy from one store to another (`state migrate`) puts no opened
// secret on disk. A missing object matches ErrNotFound; a sealed one
// without the key, or with another, is an error naming the object and
// what to set.
func (m *Mirror) Read(ctx context.Context, f MirrorFile) (data []byte, version string, err error) {
	obj, err := m.Store.Get(ctx, f.Object())
	if errors.Is(err, ErrNotFound) {
		return nil, "", err
	}
	if err != nil {
		return nil, "", fmt.Errorf("read %s/%s: %w", m.Store.Location(), f.Object(), err)
	}
	data = obj.Data
	if f.Sealed {
		if data, err = m.open(f, data); err != nil {
			return nil, "", err
		}
	}
	return data, obj.Version, nil
}

// Write stores data as f's object, sealed when Sealed, if the object's
// version is still ifVersion (NoVersion: it must not exist), and returns
// the new version; otherwise it writes nothing and returns a
// *ConflictError.
func (m *Mirror) Write(ctx context.Context, f MirrorFile, data []byte, ifVersion string) (string, error) {
	stored := data
	if f.Sealed {
		if m.Key == nil {
			return "", fmt.Errorf("%s/%s would be stored unsealed: set %s (make one with `transit state keygen`)", m.Store.Location(), f.Object(), m.keyHint())
		}
		var err error
		if stored, err = m.Key.Seal(data); err != nil {
			return "", err
		}
	}
	v, err := m.Store.Put(ctx, f.Object(), stored, ifVersion)
	if err != nil {
		return "", fmt.Errorf("write %s/%s: %w", m.Store.Location(), f.Object(), err)
	}
	return v, nil
}

func (m *Mirror) open(f MirrorFile, data []byte) ([]byte, error) {
	where := m.Store.Location() + "/" + f.Object()
	if m.Key == nil {
		return nil, fmt.Errorf("%s is sealed: set %s to the cluster's state key (the age identity it was sealed with)", where, m.keyHint())
	}
	plain, err := m.Key.Open(data)
	if errors.Is(err, seal.ErrWrongKey) {
		return nil, fmt.Errorf("%s was sealed with another key than %s holds (this key's public half is %s): set the key the state was sealed with", where, m.keyHint(), m.Key.Recipient())
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	return plain, nil
}

func (m *Mirror) keyHint() string {
	if m.KeyHint == "" {
		return "the state key"
	}
	return m.KeyHint
}

// Push writes every file whose content changed since Pull or the last
// Push back to the store, sealing the sealed ones, and deletes the objects
// of files removed since. Each write names the version last seen: an
// object another run wrote meanwhile is left alone and Push returns a
// *ConflictError. Unchanged files cost a local read, not a request.
func (m *Mirror) Push(ctx context.Context) error {
	if m.known == nil {
		return errors.New("push before pull")
	}
	for _, f := range m.Files {
		if err := m.push(ctx, f); err != nil {
			return err
		}
	}
	return nil
}

// PushFile pushes one mirrored file, by its local name.
func (m *Mirror) PushFile(ctx context.Context, file string) error {
	if m.known == nil {
		return errors.New("push before pull")
	}
	for _, f := range m.Files {
		if f.File == file {
			return m.push(ctx, f)
		}
	}
	return fmt.Errorf("%s is not mirrored", file)
}

func (m *Mirror) push(ctx context.Context, f MirrorFile) error {
	last := m.known[f.File]
	path := filepath.Join(m.Dir, f.File)
	// Stat before the read: a change after it shows at the next push.
	var size int64
	var mtime time.Time
	if fi, err := os.Stat(path); err == nil {
		if last.exists && fi.Size() == last.size && fi.ModTime().Equal(last.mtime) && !last.mtime.IsZero() {
			return nil
		}
		size, mtime = fi.Size(), fi.ModTime()
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		if !last.exists {
			return nil
		}
		if err := m.Store.Delete(ctx, f.Object(), last.version); err != nil && !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("delete %s/%s: %w", m.Store.Location(), f.Object(), err)
		}
		m.known[f.File] = mirrored{}
		return nil
	}
	if err != nil {
		return err
	}
	hash := sha256.Sum256(data)
	if last.exists && bytes.Equal(hash[:], last.hash[:]) {
		last.size, last.mtime = size, mtime
		m.known[f.File] = last
		return nil
	}
	want := NoVersion
	if last.exists {
		want = last.version
	}
	version, err := m.Write(ctx, f, data, want)
	if errors.Is(err, ErrConflict) {
		// A retried write whose first response was lost finds its own
		// write: the object holds what this run wrote.
		if v, ok := m.ownWrite(ctx, f, data); ok {
			version, err = v, nil
		}
	}
	if err != nil {
		return err
	}
	m.known[f.File] = mirrored{version: version, hash: hash, exists: true, size: size, mtime: mtime}
	return nil
}

// ownWrite says the stored object holds data (opened, when sealed) and
// returns its version.
func (m *Mirror) ownWrite(ctx context.Context, f MirrorFile, data []byte) (string, bool) {
	obj, err := m.Store.Get(ctx, f.Object())
	if err != nil {
		return "", false
	}
	stored := obj.Data
	if f.Sealed {
		if m.Key == nil {
			return "", false
		}
		if stored, err = m.Key.Open(stored); err != nil {
			return "", false
		}
	}
	return obj.Version, bytes.Equal(stored, data)
}

// Remove deletes the local directory and everything in it (the opened
// secrets among it).
func (m *Mirror) Remove() error { return os.RemoveAll(m.Dir) }
