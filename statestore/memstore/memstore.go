// Package memstore is a statestore.Store in memory, for tests: of the
// lease lock, the mirror and the session's remote state. Its lock is the
// lease lock every store without a kernel-held lock uses. Faults can be
// switched on: failing writes, a lost response, another writer.
package memstore

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudtransit/transit/statestore"
)

// Store is a store in memory. The zero value is not usable: call New.
type Store struct {
	mu      sync.Mutex
	objects map[string]object
	next    int

	// FailPuts makes Put fail as a lost connection would, while set.
	FailPuts atomic.Bool
	// LostResponse makes the next Put write and then answer as the
	// retry of a write whose response was lost does: a conflict.
	LostResponse atomic.Bool
	// Puts counts the writes that took place.
	Puts atomic.Int32
	// Now is the store's own clock (default time.Now), which its
	// objects' times and answers carry: tests set it apart from the
	// holders' clocks.
	Now func() time.Time
}

func (m *Store) now() time.Time {
	if m.Now != nil {
		return m.Now()
	}
	return time.Now()
}

type object struct {
	data     []byte
	version  string
	modified time.Time
}

// New returns an empty store.
func New() *Store { return &Store{objects: map[string]object{}} }

// Location names the store in messages.
func (m *Store) Location() string { return "mem://test" }

// Get reads an object.
func (m *Store) Get(_ context.Context, name string) (statestore.Object, error) {
	if err := statestore.CheckName(name); err != nil {
		return statestore.Object{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.objects[name]
	if !ok {
		return statestore.Object{}, statestore.ErrNotFound
	}
	return statestore.Object{Data: slices.Clone(o.data), Version: o.version, Modified: o.modified, Served: m.now()}, nil
}

// Stat returns an object's entry.
func (m *Store) Stat(_ context.Context, name string) (statestore.Entry, error) {
	if err := statestore.CheckName(name); err != nil {
		return statestore.Entry{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.objects[name]
	if !ok {
		return statestore.Entry{}, statestore.ErrNotFound
	}
	return statestore.Entry{Name: name, Version: o.version, Size: int64(len(o.data)), Modified: o.modified}, nil
}

// Put writes an object if its version is still ifVersion.
func (m *Store) Put(_ context.Context, name string, data []byte, ifVersion string) (string, error) {
	if err := statestore.CheckName(name); err != nil {
		return "", err
	}
	if m.FailPuts.Load() {
		return "", errors.New("connection reset by peer")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if o := m.objects[name]; o.version != ifVersion {
		return "", &statestore.ConflictError{Store: m.Location(), Name: name, Want: ifVersion, Have: o.version}
	}
	m.next++
	v := strconv.Itoa(m.next)
	m.objects[name] = object{data: slices.Clone(data), version: v, modified: m.now()}
	m.Puts.Add(1)
	if m.LostResponse.CompareAndSwap(true, false) {
		return "", &statestore.ConflictError{Store: m.Location(), Name: name, Want: ifVersion, Have: v}
	}
	return v, nil
}

// Delete removes an object if its version is still ifVersion.
func (m *Store) Delete(_ context.Context, name, ifVersion string) error {
	if err := statestore.CheckName(name); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.objects[name]
	if !ok {
		return statestore.ErrNotFound
	}
	if o.version != ifVersion {
		return &statestore.ConflictError{Store: m.Location(), Name: name, Want: ifVersion, Have: o.version}
	}
	delete(m.objects, name)
	return nil
}

// List returns the objects under prefix, sorted by name.
func (m *Store) List(_ context.Context, prefix string) ([]statestore.Entry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []statestore.Entry
	for name, o := range m.objects {
		if strings.HasPrefix(name, prefix) {
			out = append(out, statestore.Entry{Name: name, Version: o.version, Size: int64(len(o.data)), Modified: o.modified})
		}
	}
	slices.SortFunc(out, func(a, b statestore.Entry) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// LockName is the lease lock's object.
const LockName = "lock"

// Lock takes the store's lease lock.
func (m *Store) Lock(ctx context.Context, o statestore.LockOptions) (statestore.Lock, error) {
	return statestore.AcquireLease(ctx, m, LockName, o)
}

// ForceUnlock frees the lease lock whose ID is id.
func (m *Store) ForceUnlock(ctx context.Context, id string) error {
	return statestore.ForceUnlockLease(ctx, m, LockName, id)
}
