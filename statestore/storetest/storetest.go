// Package storetest is the conformance suite every statestore.Store
// passes: what a user relies on of a state store, harshly — conditional
// writes under races, no lost update, names, listing, the lock between
// racing runs, force-unlock.
//
// A store says which lock behaviours it has with Options; the suite tests
// each store for what it promises and skips nothing.
package storetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/cloudtransit/transit/statestore"
)

// Options say which lock behaviours a store has. The zero value is a store
// whose lock can be forced (a lease, as S3's).
type Options struct {
	// KernelLock: the store's lock is one the kernel holds for a live
	// process and frees when it dies (the file store's flock). Nothing
	// can force it, so ForceUnlock of a held lock is refused with a
	// *statestore.LockedError naming the holder, whatever the ID, and the
	// lock is never lost while its holder lives. Without it, ForceUnlock
	// frees the lock whose ID it names, refuses another ID naming the
	// holder, and the holder whose lock was forced is told on Lost.
	KernelLock bool
}

// Short waits keep the suite at a few seconds, also against a store over
// the network; long ones only bound a wait that should end much sooner.
const (
	shortTimeout = 300 * time.Millisecond
	longTimeout  = 20 * time.Second
	// forcedLease is the lease of a lock that the suite force-unlocks,
	// so that its holder learns of it within a third of it.
	forcedLease = 1500 * time.Millisecond
)

// Run runs the suite as parallel subtests; open returns a fresh, empty
// store for each (it is called from parallel subtests). Like any test
// with parallel subtests, Run returns before they end: clean up with
// t.Cleanup, not defer.
func Run(t *testing.T, open func(t *testing.T) statestore.Store, o Options) {
	for _, tt := range []struct {
		name string
		test func(t *testing.T, s statestore.Store)
	}{
		{"GetMissing", getMissing},
		{"Create", create},
		{"Replace", replace},
		{"Delete", deleteObject},
		{"Data", roundTrip},
		{"Names", names},
		{"Nesting", nesting},
		{"List", list},
		{"RacingCreates", racingCreates},
		{"RacingDeletes", racingDeletes},
		{"DeleteRacingWrite", deleteRacingWrite},
		{"NoLostUpdate", noLostUpdate},
		{"LineRacingWhole", lineRacingWhole},
		{"Lock", lock},
		{"LockWaits", lockWaits},
		{"LockTimeout", lockTimeout},
		{"LockContext", lockContext},
		{"Release", release},
		{"ForceUnlock", func(t *testing.T, s statestore.Store) { forceUnlock(t, s, o) }},
		{"RacingLocks", racingLocks},
		{"SkewedClocks", skewedClocks},
		{"PausedHolder", func(t *testing.T, s statestore.Store) { pausedHolder(t, s, o) }},
		{"ValidUntilReleased", validUntilReleased},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.test(t, open(t))
		})
	}
}

func mustPut(t *testing.T, s statestore.Store, name string, data []byte, ifVersion string) string {
	t.Helper()
	v, err := s.Put(t.Context(), name, data, ifVersion)
	if err != nil {
		t.Fatalf("Put %s: %v", name, err)
	}
	if v == "" {
		t.Fatalf("Put %s returned no version", name)
	}
	return v
}

func mustGet(t *testing.T, s statestore.Store, name string) statestore.Object {
	t.Helper()
	obj, err := s.Get(t.Context(), name)
	if err != nil {
		t.Fatalf("Get %s: %v", name, err)
	}
	return obj
}

// wantObject checks that name holds data at version, read whole and
// stat'ed.
func wantObject(t *testing.T, s statestore.Store, name, data, version string) {
	t.Helper()
	got := mustGet(t, s, name)
	if string(got.Data) != data || got.Version != version {
		t.Fatalf("%s holds %q at version %q, want %q at %q", name, got.Data, got.Version, data, version)
	}
	e, err := s.Stat(t.Context(), name)
	if err != nil {
		t.Fatalf("Stat %s: %v", name, err)
	}
	if e.Name != name || e.Version != version || e.Size != int64(len(data)) || e.Modified.IsZero() {
		t.Fatalf("Stat %s: %+v, want version %q, size %d and a time", name, e, version, len(data))
	}
}

func wantNotFound(t *testing.T, err error, what string) {
	t.Helper()
	if !errors.Is(err, statestore.ErrNotFound) {
		t.Fatalf("%s: %v, want an error matching ErrNotFound", what, err)
	}
}

func wantMissing(t *testing.T, s statestore.Store, name string) {
	t.Helper()
	_, err := s.Get(t.Context(), name)
	wantNotFound(t, err, "Get "+name)
	_, err = s.Stat(t.Context(), name)
	wantNotFound(t, err, "Stat "+name)
}

// wantConflict checks that err is a *ConflictError for name refusing a
// write that named want.
func wantConflict(t *testing.T, s statestore.Store, err error, name, want, what string) {
	t.Helper()
	var c *statestore.ConflictError
	if !errors.As(err, &c) || !errors.Is(err, statestore.ErrConflict) {
		t.Fatalf("%s: %v, want a *ConflictError", what, err)
	}
	if c.Store != s.Location() || c.Name != name || c.Want != want {
		t.Fatalf("%s: conflict %+v, want store %q, name %q, version wanted %q", what, c, s.Location(), name, want)
	}
	if errors.Is(err, statestore.ErrNotFound) {
		t.Fatalf("%s: %v matches ErrNotFound too", what, err)
	}
}

func getMissing(t *testing.T, s statestore.Store) {
	wantMissing(t, s, "resources.json")
	wantMissing(t, s, "resources.json.history/000000000001")
}

func create(t *testing.T, s statestore.Store) {
	ctx := t.Context()
	v1 := mustPut(t, s, "resources.json", []byte("one"), statestore.NoVersion)
	wantObject(t, s, "resources.json", "one", v1)

	_, err := s.Put(ctx, "resources.json", []byte("two"), statestore.NoVersion)
	wantConflict(t, s, err, "resources.json", statestore.NoVersion, "a second create")
	wantObject(t, s, "resources.json", "one", v1)

	// A write naming a version of an object that does not exist creates
	// nothing: the object it read is gone.
	_, err = s.Put(ctx, "other.json", []byte("x"), v1)
	wantConflict(t, s, err, "other.json", v1, "a write naming a version of a missing object")
	wantMissing(t, s, "other.json")
}

func replace(t *testing.T, s statestore.Store) {
	ctx := t.Context()
	v1 := mustPut(t, s, "resources.json", []byte("one"), statestore.NoVersion)
	v2 := mustPut(t, s, "resources.json", []byte("two"), v1)
	if v2 == v1 {
		t.Fatalf("replacing %q with other content kept version %q", "one", v1)
	}
	wantObject(t, s, "resources.json", "two", v2)

	_, err := s.Put(ctx, "resources.json", []byte("stale"), v1)
	wantConflict(t, s, err, "resources.json", v1, "a write naming a stale version")
	wantObject(t, s, "resources.json", "two", v2)

	_, err = s.Put(ctx, "resources.json", []byte("new"), statestore.NoVersion)
	wantConflict(t, s, err, "resources.json", statestore.NoVersion, "a create of an existing object")
	wantObject(t, s, "resources.json", "two", v2)

	// The same bytes again, at the current version: accepted, and the
	// version returned is the one stored.
	v3 := mustPut(t, s, "resources.json", []byte("two"), v2)
	wantObject(t, s, "resources.json", "two", v3)
	v4 := mustPut(t, s, "resources.json", []byte("three"), v3)
	if v4 == v3 {
		t.Fatalf("replacing %q with other content kept version %q", "two", v3)
	}
	wantObject(t, s, "resources.json", "three", v4)
}

func deleteObject(t *testing.T, s statestore.Store) {
	ctx := t.Context()
	v1 := mustPut(t, s, "resources.json", []byte("one"), statestore.NoVersion)
	v2 := mustPut(t, s, "resources.json", []byte("two"), v1)

	wantConflict(t, s, s.Delete(ctx, "resources.json", v1), "resources.json", v1, "a delete naming a stale version")
	wantObject(t, s, "resources.json", "two", v2)
	wantConflict(t, s, s.Delete(ctx, "resources.json", statestore.NoVersion), "resources.json", statestore.NoVersion, "a delete naming no version")
	wantObject(t, s, "resources.json", "two", v2)

	if err := s.Delete(ctx, "resources.json", v2); err != nil {
		t.Fatalf("Delete at the current version: %v", err)
	}
	wantMissing(t, s, "resources.json")
	wantNotFound(t, s.Delete(ctx, "resources.json", v2), "a second delete")
	wantNotFound(t, s.Delete(ctx, "never-written", v2), "a delete of an object never written")
	if entries, err := s.List(ctx, ""); err != nil || len(entries) != 0 {
		t.Fatalf("List after the delete: %v, %v; want nothing", entries, err)
	}

	// Gone, it can be created again.
	v3 := mustPut(t, s, "resources.json", []byte("again"), statestore.NoVersion)
	wantObject(t, s, "resources.json", "again", v3)
}

// Empty, binary and large content round-trips, and List and Get agree on
// its size and version.
func roundTrip(t *testing.T, s statestore.Store) {
	every := make([]byte, 0, 512)
	for i := range 256 {
		every = append(every, byte(i), byte(255-i))
	}
	large := make([]byte, 1<<20+3)
	if _, err := rand.Read(large); err != nil {
		t.Fatal(err)
	}
	blobs := map[string][]byte{
		"blob/empty":  {},
		"blob/nul":    {0},
		"blob/every":  every,
		"blob/crlf":   []byte("a\r\nb\n\x00\xff"),
		"blob/large":  large,
		"blob/utf8":   []byte("résumé ☃\n"),
		"blob/nobyte": nil,
	}
	versions := map[string]string{}
	for name, data := range blobs {
		versions[name] = mustPut(t, s, name, data, statestore.NoVersion)
		got := mustGet(t, s, name)
		if !bytes.Equal(got.Data, data) || got.Version != versions[name] {
			t.Errorf("%s: %d bytes back at version %q, want %d at %q", name, len(got.Data), got.Version, len(data), versions[name])
		}
	}
	entries, err := s.List(t.Context(), "blob/")
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(blobs) {
		t.Fatalf("List: %d entries, want %d", len(entries), len(blobs))
	}
	for _, e := range entries {
		if e.Size != int64(len(blobs[e.Name])) || e.Version != versions[e.Name] {
			t.Errorf("%s listed with size %d at version %q, want %d at %q", e.Name, e.Size, e.Version, len(blobs[e.Name]), versions[e.Name])
		}
	}
	// Replacing content with nothing and back.
	v := mustPut(t, s, "blob/every", nil, versions["blob/every"])
	if got := mustGet(t, s, "blob/every"); len(got.Data) != 0 || got.Version != v {
		t.Errorf("emptied: %d bytes at %q, want none at %q", len(got.Data), got.Version, v)
	}
	mustPut(t, s, "blob/every", every, v)
}

// badNames are refused by every method.
var badNames = []string{
	"", "/", "/abs", "a//b", "a/", "./a", "a/./b", ".", "..", "../up", "a/../b", "a/..",
	`back\slash`, "ctl\x01", "nul\x00", "del\x7f", "tab\tname", "new\nline",
}

func names(t *testing.T, s statestore.Store) {
	ctx := t.Context()
	for _, bad := range badNames {
		refused := func(what string, err error) {
			t.Helper()
			if err == nil || errors.Is(err, statestore.ErrNotFound) || errors.Is(err, statestore.ErrConflict) {
				t.Errorf("%s %q: %v, want the name refused", what, bad, err)
			}
		}
		_, err := s.Put(ctx, bad, []byte("x"), statestore.NoVersion)
		refused("Put", err)
		_, err = s.Put(ctx, bad, []byte("x"), "some-version")
		refused("Put at a version", err)
		_, err = s.Get(ctx, bad)
		refused("Get", err)
		_, err = s.Stat(ctx, bad)
		refused("Stat", err)
		refused("Delete", s.Delete(ctx, bad, "some-version"))
		refused("Delete of no version", s.Delete(ctx, bad, statestore.NoVersion))
	}
	if entries, err := s.List(ctx, ""); err != nil || len(entries) != 0 {
		t.Fatalf("after refused names the store lists %v (%v), want nothing", entries, err)
	}
	// Names that are odd but valid are stored as they are.
	good := []string{"with space", "ünïcode/名前", ".hidden", "dir/.hidden", "a.b/c-d_e~f", "x=1,y+2@z", strings.Repeat("long", 40)}
	for _, name := range good {
		v := mustPut(t, s, name, []byte(name), statestore.NoVersion)
		wantObject(t, s, name, name, v)
	}
	entries, err := s.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(good)
	slices.Sort(want)
	if diff := cmp.Diff(want, entryNames(entries)); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
}

func entryNames(entries []statestore.Entry) []string {
	out := []string{}
	for _, e := range entries {
		out = append(out, e.Name)
	}
	return out
}

// A name is not a directory of the names below it.
func nesting(t *testing.T, s statestore.Store) {
	ctx := t.Context()
	vc := mustPut(t, s, "a/b/c", []byte("c"), statestore.NoVersion)
	vd := mustPut(t, s, "a/b/d", []byte("d"), statestore.NoVersion)
	for _, name := range []string{"a", "a/b", "a/b/c/x", "a/bb"} {
		wantMissing(t, s, name)
		wantNotFound(t, s.Delete(ctx, name, vc), "Delete "+name)
	}
	if err := s.Delete(ctx, "a/b/c", vc); err != nil {
		t.Fatal(err)
	}
	wantObject(t, s, "a/b/d", "d", vd)
	entries, err := s.List(ctx, "a/")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"a/b/d"}, entryNames(entries)); diff != "" {
		t.Errorf("List a/ (-want +got):\n%s", diff)
	}
	if err := s.Delete(ctx, "a/b/d", vd); err != nil {
		t.Fatal(err)
	}
	if entries, err := s.List(ctx, ""); err != nil || len(entries) != 0 {
		t.Fatalf("List after deleting all: %v, %v", entries, err)
	}
	v := mustPut(t, s, "a/b/c", []byte("c again"), statestore.NoVersion)
	wantObject(t, s, "a/b/c", "c again", v)
}

func list(t *testing.T, s statestore.Store) {
	ctx := t.Context()
	if entries, err := s.List(ctx, ""); err != nil || len(entries) != 0 {
		t.Fatalf("List of an empty store: %v, %v", entries, err)
	}
	written := []string{
		"resources.json",
		"resources.json.history/000000000002",
		"resources.json.history/000000000010",
		"transit-c1.key.age",
		"transit-c1.known_hosts",
		"zz/deep/name",
	}
	start := time.Now()
	versions := map[string]string{}
	// Written out of order: List sorts.
	for _, i := range []int{3, 5, 1, 0, 4, 2} {
		name := written[i]
		versions[name] = mustPut(t, s, name, []byte(name+" content"), statestore.NoVersion)
	}
	// A replaced object is listed at its new version.
	versions["transit-c1.known_hosts"] = mustPut(t, s, "transit-c1.known_hosts", []byte("replaced"), versions["transit-c1.known_hosts"])

	for _, tt := range []struct {
		prefix string
		want   []string
	}{
		{"", written},
		{"resources.json", written[:3]},
		{"resources.json.history/", written[1:3]},
		{"resources.json.history/00000000001", written[2:3]},
		{"transit-c1.", written[3:5]},
		{"zz/", written[5:]},
		{"zz/deep/name", written[5:]},
		{"z", written[5:]},
		{"nothing", nil},
		{"zz/deep/name/", nil},
		{"resources.json/", nil},
	} {
		entries, err := s.List(ctx, tt.prefix)
		if err != nil {
			t.Fatalf("List %q: %v", tt.prefix, err)
		}
		if diff := cmp.Diff(tt.want, entryNames(entries), cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("List %q (-want +got):\n%s", tt.prefix, diff)
		}
		for _, e := range entries {
			obj := mustGet(t, s, e.Name)
			if e.Version != versions[e.Name] || e.Version != obj.Version || e.Size != int64(len(obj.Data)) {
				t.Errorf("%s listed at version %q size %d; written at %q, read at %q size %d", e.Name, e.Version, e.Size, versions[e.Name], obj.Version, len(obj.Data))
			}
			stat, err := s.Stat(ctx, e.Name)
			if err != nil {
				t.Fatalf("Stat %s: %v", e.Name, err)
			}
			// Times may differ below the second (S3 lists milliseconds,
			// HEAD answers seconds).
			if d := stat.Modified.Sub(e.Modified).Abs(); stat.Name != e.Name || stat.Version != e.Version || stat.Size != e.Size || d > time.Second {
				t.Errorf("%s: Stat %+v, List %+v", e.Name, stat, e)
			}
			// Stores keep time at coarse grain (S3: seconds).
			if e.Modified.Before(start.Add(-time.Minute)) || e.Modified.After(time.Now().Add(time.Minute)) {
				t.Errorf("%s listed as modified at %v, written at %v", e.Name, e.Modified, start)
			}
		}
	}
	// A prefix that leaves the store matches no name in it.
	for _, prefix := range []string{"../", "/", "./", "zz/../"} {
		entries, err := s.List(ctx, prefix)
		if err == nil && len(entries) != 0 {
			t.Errorf("List %q: %v, want nothing", prefix, entryNames(entries))
		}
	}
}

// Of runs creating one object at once, exactly one wins and its content
// is stored.
func racingCreates(t *testing.T, s statestore.Store) {
	const n = 16
	var (
		won    atomic.Int32
		winner atomic.Value
		wg     sync.WaitGroup
	)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			data := "writer " + strconv.Itoa(i)
			_, err := s.Put(t.Context(), "resources.json", []byte(data), statestore.NoVersion)
			var c *statestore.ConflictError
			switch {
			case err == nil:
				won.Add(1)
				winner.Store(data)
			case !errors.As(err, &c):
				t.Errorf("a losing create: %v, want a *ConflictError", err)
			}
		})
	}
	close(start)
	wg.Wait()
	if won.Load() != 1 {
		t.Fatalf("%d of %d racing creates won, want 1", won.Load(), n)
	}
	if got := mustGet(t, s, "resources.json"); string(got.Data) != winner.Load() {
		t.Fatalf("stored %q, the winner wrote %q", got.Data, winner.Load())
	}
}

// Of runs deleting one object at the version they read, exactly one
// deletes it.
func racingDeletes(t *testing.T, s statestore.Store) {
	const n = 12
	v := mustPut(t, s, "resources.json", []byte("x"), statestore.NoVersion)
	var won atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range n {
		wg.Go(func() {
			<-start
			err := s.Delete(t.Context(), "resources.json", v)
			switch {
			case err == nil:
				won.Add(1)
			case !errors.Is(err, statestore.ErrNotFound) && !errors.Is(err, statestore.ErrConflict):
				t.Errorf("a losing delete: %v, want ErrNotFound or ErrConflict", err)
			}
		})
	}
	close(start)
	wg.Wait()
	if won.Load() != 1 {
		t.Fatalf("%d of %d racing deletes of one version succeeded, want 1: a conditional delete is not one step", won.Load(), n)
	}
	wantMissing(t, s, "resources.json")
}

// A delete and a write naming the same version, at once: one of them
// wins, and the winner's effect stays. A delete that removed the write's
// new content would lose an update (a late lock release would remove the
// next run's lock).
func deleteRacingWrite(t *testing.T, s statestore.Store) {
	const rounds = 20
	for round := range rounds {
		v := mustPut(t, s, "resources.json", []byte("old"), statestore.NoVersion)
		var putErr, deleteErr error
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Go(func() {
			<-start
			_, putErr = s.Put(t.Context(), "resources.json", []byte("new"), v)
		})
		wg.Go(func() {
			<-start
			deleteErr = s.Delete(t.Context(), "resources.json", v)
		})
		close(start)
		wg.Wait()
		obj, getErr := s.Get(t.Context(), "resources.json")
		switch {
		case putErr == nil && deleteErr == nil:
			t.Fatalf("round %d: both the write and the delete of version %s succeeded (the store holds %q, %v)", round, v, obj.Data, getErr)
		case putErr == nil:
			wantConflict(t, s, deleteErr, "resources.json", v, "the losing delete")
			if getErr != nil || string(obj.Data) != "new" {
				t.Fatalf("round %d: the write won, the store holds %q (%v)", round, obj.Data, getErr)
			}
			if err := s.Delete(t.Context(), "resources.json", obj.Version); err != nil {
				t.Fatal(err)
			}
		case deleteErr == nil:
			wantConflict(t, s, putErr, "resources.json", v, "the losing write")
			wantNotFound(t, getErr, "the delete won")
		default:
			t.Fatalf("round %d: neither won: write %v, delete %v", round, putErr, deleteErr)
		}
	}
}

// Writers that read, change and write back, retrying on conflicts, lose
// no update.
func noLostUpdate(t *testing.T, s statestore.Store) {
	mustPut(t, s, "counter", []byte("0"), statestore.NoVersion)
	const writers, each = 6, 8
	var (
		wg        sync.WaitGroup
		conflicts atomic.Int32
	)
	for range writers {
		wg.Go(func() {
			ctx := t.Context()
			for done := 0; done < each; {
				obj, err := s.Get(ctx, "counter")
				if err != nil {
					t.Error(err)
					return
				}
				n, err := strconv.Atoi(string(obj.Data))
				if err != nil {
					t.Errorf("counter holds %q: %v", obj.Data, err)
					return
				}
				_, err = s.Put(ctx, "counter", []byte(strconv.Itoa(n+1)), obj.Version)
				switch {
				case err == nil:
					done++
				case errors.Is(err, statestore.ErrConflict):
					conflicts.Add(1)
				default:
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if got := mustGet(t, s, "counter"); string(got.Data) != strconv.Itoa(writers*each) {
		t.Fatalf("counter %s after %d increments: updates were lost", got.Data, writers*each)
	}
	t.Logf("%d increments, %d conflicts retried", writers*each, conflicts.Load())
}

func takeLock(t *testing.T, s statestore.Store, o statestore.LockOptions) statestore.Lock {
	t.Helper()
	l, err := s.Lock(t.Context(), o)
	if err != nil {
		t.Fatalf("Lock for %q: %v", o.Command, err)
	}
	t.Cleanup(func() {
		if err := l.Release(context.Background()); err != nil {
			t.Logf("release at the end: %v", err)
		}
	})
	return l
}

func wantLocked(t *testing.T, err error, what string) *statestore.LockedError {
	t.Helper()
	var locked *statestore.LockedError
	if !errors.As(err, &locked) || !errors.Is(err, statestore.ErrLocked) {
		t.Fatalf("%s: %v, want a *LockedError", what, err)
	}
	return locked
}

// wantHolder checks that a held lock's error names the holder as the
// holder's own lock does.
func wantHolder(t *testing.T, s statestore.Store, locked *statestore.LockedError, holder statestore.Lock, what string) {
	t.Helper()
	if locked.Store != s.Location() {
		t.Errorf("%s: names store %q, want %q", what, locked.Store, s.Location())
	}
	// A lease's expiry moves as it is renewed.
	if diff := cmp.Diff(holder.Info(), locked.Holder, cmpopts.IgnoreFields(statestore.LockInfo{}, "Expires")); diff != "" {
		t.Errorf("%s: holder (-lock's own info +the error's):\n%s", what, diff)
	}
	msg := locked.Error()
	for _, want := range []string{s.Location(), "pid " + strconv.Itoa(holder.Info().PID), holder.Info().Host, strconv.Quote(holder.Info().Command), holder.Info().ID} {
		if !strings.Contains(msg, want) {
			t.Errorf("%s: %q does not name %q", what, msg, want)
		}
	}
}

// lostNow says whether l's Lost is closed.
func lostNow(l statestore.Lock) bool {
	select {
	case <-l.Lost():
		return true
	default:
		return false
	}
}

// A held lock is refused to a second run at once, naming the holder.
func lock(t *testing.T, s statestore.Store) {
	before := time.Now()
	first := takeLock(t, s, statestore.LockOptions{Command: "transit apply"})
	after := time.Now()
	info := first.Info()
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	if info.PID != os.Getpid() || info.Host != host || info.Command != "transit apply" {
		t.Errorf("lock info %+v, want pid %d on %s for %q", info, os.Getpid(), host, "transit apply")
	}
	if info.Started.Before(before.Add(-time.Second)) || info.Started.After(after.Add(time.Second)) {
		t.Errorf("lock started at %v, taken between %v and %v", info.Started, before, after)
	}
	if lostNow(first) {
		t.Fatal("a lock just taken is lost")
	}

	for _, command := range []string{"transit destroy", "transit apply"} {
		start := time.Now()
		second, err := s.Lock(t.Context(), statestore.LockOptions{Command: command, Waiting: func(*statestore.LockedError) {
			t.Error("Waiting called with Timeout 0")
		}})
		if err == nil {
			_ = second.Release(t.Context())
			t.Fatal("a second run took a held lock")
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("a second lock with Timeout 0 took %v to fail", took)
		}
		locked := wantLocked(t, err, "a second lock")
		wantHolder(t, s, locked, first, "a second lock")
		if locked.Waited != 0 || locked.Err != nil {
			t.Errorf("a second lock with Timeout 0 waited %v (%v)", locked.Waited, locked.Err)
		}
	}
	// Refusals leave the lock to its holder.
	if lostNow(first) || first.Info().ID != info.ID {
		t.Fatalf("after refusals the lock is lost or changed: %+v", first.Info())
	}
	if err := first.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	takeLock(t, s, statestore.LockOptions{Command: "transit plan"})
}

// A run that waits for the lock gets it once the holder releases it.
func lockWaits(t *testing.T, s statestore.Store) {
	first := takeLock(t, s, statestore.LockOptions{Command: "transit apply"})
	var (
		waited   atomic.Int32
		released = make(chan error, 1)
	)
	second, err := s.Lock(t.Context(), statestore.LockOptions{
		Command: "transit destroy",
		Timeout: longTimeout,
		Waiting: func(e *statestore.LockedError) {
			if waited.Add(1) == 1 {
				wantHolder(t, s, e, first, "Waiting")
				go func() { released <- first.Release(t.Context()) }()
			}
		},
	})
	if err != nil {
		t.Fatalf("a run waiting for the lock: %v", err)
	}
	defer func() {
		if err := second.Release(t.Context()); err != nil {
			t.Error(err)
		}
	}()
	if err := <-released; err != nil {
		t.Fatalf("release: %v", err)
	}
	if n := waited.Load(); n != 1 {
		t.Errorf("Waiting called %d times, want once", n)
	}
	if got := second.Info(); got.Command != "transit destroy" || got.PID != os.Getpid() || (got.ID != "" && got.ID == first.Info().ID) {
		t.Errorf("the waiter's lock %+v, the first's %+v", got, first.Info())
	}
	// Now the waiter holds it.
	_, err = s.Lock(t.Context(), statestore.LockOptions{})
	wantHolder(t, s, wantLocked(t, err, "a third run"), second, "a third run")
}

// A run that waits for a lock held longer than its timeout gives up,
// saying how long it waited.
func lockTimeout(t *testing.T, s statestore.Store) {
	first := takeLock(t, s, statestore.LockOptions{Command: "transit apply"})
	start := time.Now()
	l, err := s.Lock(t.Context(), statestore.LockOptions{Timeout: shortTimeout})
	if err == nil {
		_ = l.Release(t.Context())
		t.Fatal("took a held lock")
	}
	took := time.Since(start)
	locked := wantLocked(t, err, "a lock with a timeout")
	wantHolder(t, s, locked, first, "a lock with a timeout")
	if locked.Waited < shortTimeout || locked.Waited > took || locked.Err != nil {
		t.Errorf("waited %v (%v) in %v, want at least the timeout %v", locked.Waited, locked.Err, took, shortTimeout)
	}
	if took > longTimeout/2 {
		t.Errorf("a timeout of %v took %v", shortTimeout, took)
	}
}

// A run that waits for the lock stops when its context ends.
func lockContext(t *testing.T, s statestore.Store) {
	first := takeLock(t, s, statestore.LockOptions{Command: "transit apply"})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	start := time.Now()
	l, err := s.Lock(ctx, statestore.LockOptions{Timeout: -1, Waiting: func(*statestore.LockedError) { cancel() }})
	if err == nil {
		_ = l.Release(t.Context())
		t.Fatal("took a held lock")
	}
	locked := wantLocked(t, err, "a canceled wait")
	if !errors.Is(err, context.Canceled) || !errors.Is(locked.Err, context.Canceled) {
		t.Errorf("a canceled wait: %v, want it to match context.Canceled", err)
	}
	wantHolder(t, s, locked, first, "a canceled wait")
	if took := time.Since(start); took > longTimeout/2 {
		t.Errorf("a canceled wait took %v", took)
	}
	stillHeld(t, s, first, "after a canceled wait")
}

func release(t *testing.T, s statestore.Store) {
	for range 3 {
		l, err := s.Lock(t.Context(), statestore.LockOptions{Command: "transit apply"})
		if err != nil {
			t.Fatalf("Lock after a release: %v", err)
		}
		if err := l.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := l.Release(t.Context()); err != nil {
			t.Fatalf("a second Release: %v", err)
		}
	}
	// A second Release of an old lock leaves a new holder's alone.
	old, err := s.Lock(t.Context(), statestore.LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	held := takeLock(t, s, statestore.LockOptions{Command: "transit apply"})
	if err := old.Release(t.Context()); err != nil {
		t.Fatalf("a late second Release: %v", err)
	}
	_, err = s.Lock(t.Context(), statestore.LockOptions{})
	wantHolder(t, s, wantLocked(t, err, "after a late second release"), held, "after a late second release")
}

func forceUnlock(t *testing.T, s statestore.Store, o Options) {
	ctx := t.Context()
	wantNotFound(t, s.ForceUnlock(ctx, "0123456789abcdef"), "ForceUnlock of a store never locked")
	if o.KernelLock {
		forceKernelLock(t, s)
	} else {
		forceLease(t, s)
	}
	wantNotFound(t, s.ForceUnlock(ctx, "0123456789abcdef"), "ForceUnlock of a released lock")
}

// stillHeld checks that holder still holds its lock.
func stillHeld(t *testing.T, s statestore.Store, holder statestore.Lock, what string) {
	t.Helper()
	l, err := s.Lock(t.Context(), statestore.LockOptions{})
	if err == nil {
		_ = l.Release(t.Context())
		t.Fatalf("%s: the lock was free", what)
	}
	wantHolder(t, s, wantLocked(t, err, what), holder, what)
	if lostNow(holder) {
		t.Fatalf("%s: the holder's lock is lost", what)
	}
}

// A lock the kernel holds for a live process cannot be forced: the refusal
// names the holder, and the lock stays.
func forceKernelLock(t *testing.T, s statestore.Store) {
	held := takeLock(t, s, statestore.LockOptions{Command: "transit apply"})
	for _, id := range []string{held.Info().ID, "not-the-id"} {
		err := s.ForceUnlock(t.Context(), id)
		if err == nil || errors.Is(err, statestore.ErrNotFound) {
			t.Fatalf("ForceUnlock %q of a lock held by a live process: %v, want a refusal", id, err)
		}
		wantHolder(t, s, wantLocked(t, err, "ForceUnlock "+id), held, "ForceUnlock "+id)
		stillHeld(t, s, held, "after a refused force-unlock")
	}
	if err := held.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// A lease is forced by its ID only; its holder learns of it on Lost, and
// its late Release leaves the next holder's lock alone.
func forceLease(t *testing.T, s statestore.Store) {
	ctx := t.Context()
	held := takeLock(t, s, statestore.LockOptions{Command: "transit apply", Lease: forcedLease})
	id := held.Info().ID
	if id == "" {
		t.Fatal("a lock that can be forced has no ID to force it by")
	}
	err := s.ForceUnlock(ctx, "not-the-id")
	if err == nil || errors.Is(err, statestore.ErrNotFound) {
		t.Fatalf("ForceUnlock with a wrong ID: %v, want a refusal", err)
	}
	for _, want := range []string{id, "pid " + strconv.Itoa(os.Getpid())} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("ForceUnlock with a wrong ID: %q does not name the holder's %q", err, want)
		}
	}
	stillHeld(t, s, held, "after a force-unlock with a wrong ID")

	if err := s.ForceUnlock(ctx, id); err != nil {
		t.Fatalf("ForceUnlock %s: %v", id, err)
	}
	select {
	case <-held.Lost():
	case <-time.After(longTimeout):
		t.Fatalf("the holder of a forced lock was not told within %v", longTimeout)
	}
	next := takeLock(t, s, statestore.LockOptions{Command: "transit destroy"})
	if next.Info().ID == id {
		t.Fatalf("the next lock has the forced one's ID %s", id)
	}
	// The forced holder releases late (it may say it lost the lock).
	if err := held.Release(ctx); err != nil {
		t.Logf("the forced holder's late release: %v", err)
	}
	stillHeld(t, s, next, "after the forced holder's late release")
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Of runs starting at once, exactly one gets the lock, and it is free again
// once released.
func racingLocks(t *testing.T, s statestore.Store) {
	const n, rounds = 8, 3
	for round := range rounds {
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			held []statestore.Lock
		)
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				l, err := s.Lock(t.Context(), statestore.LockOptions{Command: fmt.Sprintf("run %d.%d", round, i)})
				var locked *statestore.LockedError
				switch {
				case err == nil:
					mu.Lock()
					held = append(held, l)
					mu.Unlock()
				case !errors.As(err, &locked):
					t.Errorf("a losing run: %v, want a *LockedError", err)
				}
			})
		}
		close(start)
		wg.Wait()
		for _, l := range held {
			if err := l.Release(t.Context()); err != nil {
				t.Error(err)
			}
		}
		if len(held) != 1 {
			t.Fatalf("round %d: %d of %d racing runs got the lock, want 1", round, len(held), n)
		}
	}
}

// skewLease is the lease of the skewed-clock test: long enough that a
// store over the network on a loaded machine renews in time (each
// renewal may take a quarter of it), short enough for a suite.
const skewLease = 4 * time.Second

// No two machines' clocks are compared: a holder whose clock runs two
// leases behind (its lock says it expired long ago) keeps a lock it
// renews, against contenders whose clocks run behind, true or ahead.
func skewedClocks(t *testing.T, s statestore.Store) {
	behind := func() time.Time { return time.Now().Add(-2 * skewLease) }
	holder := takeLock(t, s, statestore.LockOptions{Command: "transit apply", Lease: skewLease, Now: behind})
	var wg sync.WaitGroup
	for _, skew := range []time.Duration{-4 * skewLease, 0, 2 * skewLease} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			now := func() time.Time { return time.Now().Add(skew) }
			l, err := s.Lock(t.Context(), statestore.LockOptions{Command: "transit apply", Lease: skewLease, Timeout: 3 * skewLease, Now: now})
			if err == nil {
				_ = l.Release(context.Background())
				t.Errorf("a contender whose clock is %s off took over a lock its holder renews", skew)
				return
			}
			_ = wantLocked(t, err, fmt.Sprintf("a contender whose clock is %s off", skew))
		}()
	}
	wg.Wait()
	if err := holder.Valid(); err != nil || lostNow(holder) {
		t.Errorf("the holder, renewing on time: Valid %v, lost %v", err, lostNow(holder))
	}
}

// A held lock is Valid until Release; then it says it is lost.
func validUntilReleased(t *testing.T, s statestore.Store) {
	l := takeLock(t, s, statestore.LockOptions{Command: "transit apply"})
	if err := l.Valid(); err != nil {
		t.Fatalf("a lock just taken: %v", err)
	}
	if err := l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := l.Valid(); !errors.Is(err, statestore.ErrLockLost) {
		t.Errorf("a released lock: Valid %v, want ErrLockLost", err)
	}
}

// pausable is a holder's view of a store whose writes hang while paused,
// as a process stopped (SIGSTOP, a paused VM) sends nothing.
type pausable struct {
	statestore.Store
	mu     sync.Mutex
	paused bool
}

func (p *pausable) Put(ctx context.Context, name string, data []byte, ifVersion string) (string, error) {
	for {
		p.mu.Lock()
		paused := p.paused
		p.mu.Unlock()
		if !paused {
			return p.Store.Put(ctx, name, data, ifVersion)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (p *pausable) pause(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.paused = on
}

// A lease holder paused past its lease knows it lost the lock (Valid
// fails) before another run takes the lock over, by its own monotonic
// clock: its wall clock may be frozen (a fake one here) or anything. A
// kernel lock is never lost while its holder lives, paused or not.
func pausedHolder(t *testing.T, s statestore.Store, o Options) {
	if o.KernelLock {
		l := takeLock(t, s, statestore.LockOptions{Command: "transit apply"})
		if err := l.Valid(); err != nil {
			t.Errorf("a kernel lock: Valid %v", err)
		}
		return
	}
	for _, clock := range []string{"real", "fake"} {
		t.Run(clock, func(t *testing.T) {
			prefix := "paused-" + clock + "-"
			view := &pausable{Store: prefixed{s, prefix}}
			lo := statestore.LockOptions{Command: "transit apply", Lease: skewLease}
			if clock == "fake" {
				frozen := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
				lo.Now = func() time.Time { return frozen }
			}
			holder, err := statestore.AcquireLease(t.Context(), view, "lock", lo)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { view.pause(false); _ = holder.Release(context.Background()) })
			view.pause(true)
			took := make(chan time.Time, 1)
			go func() {
				defer close(took)
				l, err := statestore.AcquireLease(context.Background(), prefixed{s, prefix}, "lock", statestore.LockOptions{Lease: skewLease, Timeout: 3 * skewLease})
				if err == nil {
					took <- time.Now()
					_ = l.Release(context.Background())
				}
			}()
			var stopped time.Time
			for deadline := time.Now().Add(3 * skewLease); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				if err := holder.Valid(); errors.Is(err, statestore.ErrLockLost) {
					stopped = time.Now()
					break
				}
			}
			at, ok := <-took
			switch {
			case stopped.IsZero():
				t.Fatal("the paused holder never learnt it lost the lock")
			case !ok:
				t.Fatal("no other run took the paused holder's lock over")
			case !stopped.Before(at):
				t.Fatalf("the holder stopped at %s, after another run took its lock over at %s", stopped.Format(time.StampMilli), at.Format(time.StampMilli))
			}
		})
	}
}

// prefixed is s with every name under prefix: two subtests' locks apart.
type prefixed struct {
	statestore.Store
	prefix string
}

func (p prefixed) Get(ctx context.Context, name string) (statestore.Object, error) {
	return p.Store.Get(ctx, p.prefix+name)
}

func (p prefixed) Put(ctx context.Context, name string, data []byte, ifVersion string) (string, error) {
	return p.Store.Put(ctx, p.prefix+name, data, ifVersion)
}

func (p prefixed) Delete(ctx context.Context, name, ifVersion string) error {
	return p.Store.Delete(ctx, p.prefix+name, ifVersion)
}
