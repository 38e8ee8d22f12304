// Package statestore is where a cluster's state lives so that every run
// finds it: a directory on this machine (the file store, today's layout) or
// a bucket of any S3-compatible store, so that CI runners and team members
// share one state, one lock and the cluster's keys.
//
// A Store holds named objects (resources.json, the cluster's SSH key pair,
// the host-key pins, the admin kubeconfig) and one lock. It is a small
// interface, like Terraform's state managers: read, write-if-unchanged,
// delete-if-unchanged, list, lock. Every write names the version it
// replaces, so even a broken lock never loses an update: the second writer
// gets a *ConflictError. History (the last N states) is built on the
// interface once, for every store (history.go).
//
// Both stores pass one conformance suite, package storetest.
package statestore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cloudtransit/transit/filelock"
)

// Store is one cluster's state store. Names are slash-separated relative
// paths ("resources.json", "history/resources.json/00000042"); see
// CheckName. Methods are safe for concurrent use.
type Store interface {
	// Location is the store's path or URL, for messages ("s3://ci/prod").
	Location() string
	// Get reads an object. A missing one is an error matching ErrNotFound.
	Get(ctx context.Context, name string) (Object, error)
	// Stat returns an object's entry (its version, size and time)
	// without its content, as cheaply as the store can.
	Stat(ctx context.Context, name string) (Entry, error)
	// Put writes data as name if the stored object's version is still
	// ifVersion, where NoVersion means that name must not exist yet, and
	// returns the new version. Otherwise it writes nothing and returns a
	// *ConflictError. A Put that fails otherwise leaves the old object or
	// the new one, never a mix.
	Put(ctx context.Context, name string, data []byte, ifVersion string) (version string, err error)
	// Delete removes name if its version is still ifVersion (a
	// *ConflictError otherwise). A missing object matches ErrNotFound.
	Delete(ctx context.Context, name, ifVersion string) error
	// List returns the objects whose names start with prefix, sorted by
	// name.
	List(ctx context.Context, prefix string) ([]Entry, error)
	// Lock takes the store's lock for the run o describes, waiting as o
	// says. The lock is held (and renewed, where it is a lease) until
	// Release. A held lock is an error matching ErrLocked that names its
	// holder (*LockedError).
	Lock(ctx context.Context, o LockOptions) (Lock, error)
	// ForceUnlock removes the lock whose ID is id, whoever holds it: for a
	// holder that died and whose lease has not expired yet. A lock with
	// another ID is left alone (an error naming the holder); no lock is an
	// error matching ErrNotFound.
	ForceUnlock(ctx context.Context, id string) error
}

// NoVersion is Put's ifVersion for an object that must not exist yet.
const NoVersion = ""

// Object is an object as read, with the version a later Put or Delete
// names to replace it. A version names content: two writes of the same
// bytes may share one (S3's ETag, the file store's hash), which loses
// nothing.
type Object struct {
	Data    []byte
	Version string
	// Modified is when the store last wrote the object and Served when it
	// answered, both by the store's own clock (zero where the store does
	// not say): their difference is the object's age with no two
	// machines' clocks compared.
	Modified, Served time.Time
}

// Age is how long ago the store wrote o, by the store's clock; ok is
// false when the store did not say.
func (o Object) Age() (age time.Duration, ok bool) {
	if o.Modified.IsZero() || o.Served.IsZero() {
		return 0, false
	}
	return o.Served.Sub(o.Modified), true
}

// Entry describes a stored object.
type Entry struct {
	Name     string
	Version  string
	Size     int64
	Modified time.Time
}

// LockOptions describe the run that takes the lock and how it waits.
type LockOptions struct {
	// Command is the holder's command, e.g. "transit apply".
	Command string
	// Timeout is how long to wait for a held lock: 0 fails at once, a
	// negative value waits until ctx ends.
	Timeout time.Duration
	// Lease is how long a lock of a store that cannot see its holder die
	// (S3) stays valid without renewal; the holder renews it every third
	// of it. 0 is DefaultLease.
	Lease time.Duration
	// Waiting, when set, is called once when the lock is found held and
	// Lock starts waiting for it.
	Waiting func(*LockedError)
	// TookOver, when set, is called with the holder of a lock that its
	// run left behind (it died, or its lease expired) and Lock took over.
	TookOver func(previous LockInfo)
	// Now tells time; nil is time.Now.
	Now func() time.Time
}

// DefaultLease is a lease lock's default validity without renewal.
const DefaultLease = 2 * time.Minute

// Lock is a held store lock.
type Lock interface {
	// Info is what the lock records about its holder.
	Info() LockInfo
	// Lost is closed when the lock can no longer be renewed and another
	// run may take it over: the holder should stop changing the cluster.
	Lost() <-chan struct{}
	// Valid says whether the holder may still act: an error matching
	// ErrLockLost once the lock is lost or its holder's own deadline
	// (the last renewal, by this process's monotonic clock, plus the
	// lease less a margin) has passed, even where Lost has not been
	// closed yet (a process that was paused). Ask it before every write
	// and every action.
	Valid() error
	// Release gives the lock up. It is safe to call more than once.
	Release(ctx context.Context) error
}

// LockInfo is what a lock records about the run holding it — who, where,
// what and since when — and, for a lease, until when it is valid.
type LockInfo struct {
	ID      string    `json:"id"`
	Who     string    `json:"who,omitempty"` // the user
	Host    string    `json:"host"`
	PID     int       `json:"pid"`
	Command string    `json:"command,omitempty"`
	Started time.Time `json:"started"`
	Expires time.Time `json:"expires,omitzero"`
}

// String describes the holder, in the words of the file lock's message:
// `pid 4242 on host ci-7 ("transit apply", started 2026-11-22T10:00:00Z)`,
// with the user and the lock's ID where known.
func (i LockInfo) String() string {
	who := ""
	if i.Who != "" {
		who = " by " + i.Who
	}
	s := fmt.Sprintf("pid %d on host %s%s (", i.PID, i.Host, who)
	if i.Command != "" {
		s += fmt.Sprintf("%q, ", i.Command)
	}
	s += "started " + i.Started.UTC().Format(time.RFC3339)
	if !i.Expires.IsZero() {
		s += ", lease until " + i.Expires.UTC().Format(time.RFC3339)
	}
	if i.ID != "" {
		s += ", lock ID " + i.ID
	}
	return s + ")"
}

var (
	// ErrNotFound says the object (or lock) does not exist.
	ErrNotFound = errors.New("not found in the state store")
	// ErrConflict says the object changed since the version a write names.
	ErrConflict = errors.New("state changed by another writer")
	// ErrLocked says another run holds the store's lock. It is the file
	// lock's own, so one check covers both.
	ErrLocked = filelock.ErrLocked
	// ErrLockLost says a run's lock is no longer its own (not renewed in
	// time, taken over or force-unlocked): it must not write or act.
	ErrLockLost = errors.New("state lock lost")
)

// ConflictError is a refused conditional write: name's version is no longer
// the one the writer read.
type ConflictError struct {
	Store, Name string
	// Want is the version the write named; Have is the stored one (empty
	// when the object is gone or the store did not say).
	Want, Have string
}

func (e *ConflictError) Error() string {
	switch {
	case e.Want == NoVersion:
		return fmt.Sprintf("%s/%s: another writer created it first", e.Store, e.Name)
	case e.Have == "":
		return fmt.Sprintf("%s/%s: changed or removed by another writer since version %s was read", e.Store, e.Name, e.Want)
	}
	return fmt.Sprintf("%s/%s: another writer replaced version %s with %s", e.Store, e.Name, e.Want, e.Have)
}

// Is makes errors.Is(err, ErrConflict) true.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// LockedError is a lock held by another run.
type LockedError struct {
	Store  string
	Holder LockInfo
	// Waited is how long Lock waited before giving up.
	Waited time.Duration
	// Err is why the wait ended early (the context), if it did.
	Err error
}

func (e *LockedError) Error() string {
	msg := fmt.Sprintf("state %s is locked by %s", e.Store, e.Holder)
	if e.Waited > 0 {
		msg += fmt.Sprintf("; waited %s", e.Waited.Round(time.Second))
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	if e.Holder.ID != "" {
		msg += fmt.Sprintf("; if that run is dead, `transit force-unlock %s` frees it", e.Holder.ID)
	}
	return msg
}

// Is makes errors.Is(err, ErrLocked) true.
func (e *LockedError) Is(target error) bool { return target == ErrLocked }

func (e *LockedError) Unwrap() error { return e.Err }

// CheckName refuses a name that is not a clean relative path: empty, with
// a leading or trailing slash, an empty, "." or ".." element, or a
// backslash or control character.
func CheckName(name string) error {
	if name == "" {
		return errors.New("empty object name")
	}
	for _, el := range strings.Split(name, "/") {
		if el == "" || el == "." || el == ".." {
			return fmt.Errorf("object name %q: want a relative path without empty, '.' or '..' elements", name)
		}
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f || r == '\\' {
			return fmt.Errorf("object name %q: control character or backslash", name)
		}
	}
	return nil
}
