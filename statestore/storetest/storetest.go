// Package storetest is the conformance suite every statestore.Store
// passes: what a user relies on of a state store, harshly — conditional
// writes under races, no lost update, the lock between racing runs.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudtransit/transit/statestore"
)

// Options say which lock behaviours a store has.
type Options struct {
	// KernelLock: the store's lock is held by the kernel for a live
	// process (the file store): ForceUnlock refuses, and a second Lock
	// in the same process is refused like another run's.
	KernelLock bool
}

// Run runs the suite; open returns a fresh, empty store for each test.
func Run(t *testing.T, open func(t *testing.T) statestore.Store, o Options) {
	t.Run("GetMissing", func(t *testing.T) {
		s := open(t)
		if _, err := s.Get(t.Context(), "resources.json"); !errors.Is(err, statestore.ErrNotFound) {
			t.Fatalf("Get of a missing object: %v, want ErrNotFound", err)
		}
	})
	t.Run("CreateReplaceDelete", func(t *testing.T) { createReplaceDelete(t, open(t)) })
	t.Run("Names", func(t *testing.T) { names(t, open(t)) })
	t.Run("List", func(t *testing.T) { list(t, open(t)) })
	t.Run("RacingCreates", func(t *testing.T) { racingCreates(t, open(t)) })
	t.Run("NoLostUpdate", func(t *testing.T) { noLostUpdate(t, open(t)) })
	t.Run("Lock", func(t *testing.T) { lock(t, open(t), o) })
	t.Run("RacingLocks", func(t *testing.T) { racingLocks(t, open(t)) })
}

func mustPut(t *testing.T, s statestore.Store, name string, data []byte, ifVersion string) string {
	t.Helper()
	v, err := s.Put(t.Context(), name, data, ifVersion)
	if err != nil {
		t.Fatalf("Put %s: %v", name, err)
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

func wantConflict(t *testing.T, err error, what string) {
	t.Helper()
	var c *statestore.ConflictError
	if !errors.As(err, &c) || !errors.Is(err, statestore.ErrConflict) {
		t.Fatalf("%s: %v, want a *ConflictError", what, err)
	}
}

func createReplaceDelete(t *testing.T, s statestore.Store) {
	ctx := t.Context()
	v1 := mustPut(t, s, "resources.json", []byte("one"), statestore.NoVersion)
	_, err := s.Put(ctx, "resources.json", []byte("two"), statestore.NoVersion)
	wantConflict(t, err, "a second create")
	if got := mustGet(t, s, "resources.json"); string(got.Data) != "one" || got.Version != v1 {
		t.Fatalf("after a refused create: %q at %q, want %q at %q", got.Data, got.Version, "one", v1)
	}
	v2 := mustPut(t, s, "resources.json", []byte("two"), v1)
	if v2 == v1 || v2 == "" {
		t.Fatalf("replace returned version %q after %q", v2, v1)
	}
	_, err = s.Put(ctx, "resources.json", []byte("stale"), v1)
	wantConflict(t, err, "a write naming a stale version")
	if got := mustGet(t, s, "resources.json"); string(got.Data) != "two" || got.Version != v2 {
		t.Fatalf("after a refused write: %q at %q", got.Data, got.Version)
	}
	cur := mustGet(t, s, "resources.json")
	wantConflict(t, s.Delete(ctx, "resources.json", "not-a-version"), "a delete naming a wrong version")
	if err := s.Delete(ctx, "resources.json", cur.Version); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if err := s.Delete(ctx, "resources.json", cur.Version); !errors.Is(err, statestore.ErrNotFound) {
		t.Fatalf("delete of a missing object: %v, want ErrNotFound", err)
	}
	// Empty and binary content round-trip.
	for i, data := range [][]byte{{}, {0, 1, 2, 255, '\n', 0}, bytes.Repeat([]byte("x"), 1<<20)} {
		name := "blob/" + strconv.Itoa(i)
		mustPut(t, s, name, data, statestore.NoVersion)
		if got := mustGet(t, s, name); !bytes.Equal(got.Data, data) {
			t.Fatalf("%s: %d bytes back, want %d", name, len(got.Data), len(data))
		}
	}
}

func names(t *testing.T, s statestore.Store) {
	ctx := t.Context()
	for _, bad := range []string{"", "/abs", "a//b", "../up", "a/./b", "a/", "back\\slash", "ctl\x01"} {
		if _, err := s.Put(ctx, bad, []byte("x"), statestore.NoVersion); err == nil {
			t.Errorf("Put %q: accepted", bad)
		}
		if _, err := s.Get(ctx, bad); err == nil || errors.Is(err, statestore.ErrNotFound) {
			t.Errorf("Get %q: %v, want a refusal of the name", bad, err)
		}
		if err := s.Delete(ctx, bad, "v"); err == nil || errors.Is(err, statestore.ErrNotFound) {
			t.Errorf("Delete %q: %v, want a refusal of the name", bad, err)
		}
	}
}

func list(t *testing.T, s statestore.Store) {
	ctx := t.Context()
	want := map[string]string{}
	for _, name := range []string{"resources.json", "resources.json.history/000000000002", "resources.json.history/000000000010", "transit-c1.key.age", "zz/deep/name"} {
		want[name] = mustPut(t, s, name, []byte(name), statestore.NoVersion)
	}
	all, err := s.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range all {
		got = append(got, e.Name)
		if want[e.Name] != e.Version || e.Size != int64(len(e.Name)) {
			t.Errorf("%s listed at version %q size %d, written at %q size %d", e.Name, e.Version, e.Size, want[e.Name], len(e.Name))
		}
		if obj := mustGet(t, s, e.Name); obj.Version != e.Version {
			t.Errorf("%s: listed version %q, Get's %q", e.Name, e.Version, obj.Version)
		}
	}
	if fmt.Sprint(got) != "[resources.json resources.json.history/000000000002 resources.json.history/000000000010 transit-c1.key.age zz/deep/name]" {
		t.Fatalf("List: %v", got)
	}
	hist, err := s.List(ctx, "resources.json.history/")
	if err != nil || len(hist) != 2 {
		t.Fatalf("List by prefix: %v, %v", hist, err)
	}
}

// Of runs creating one object at once, exactly one wins.
func racingCreates(t *testing.T, s statestore.Store) {
	const n = 12
	var won atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			_, err := s.Put(context.Background(), "lock-ish", []byte(strconv.Itoa(i)), statestore.NoVersion)
			switch {
			case err == nil:
				won.Add(1)
			case !errors.Is(err, statestore.ErrConflict):
				t.Errorf("a losing create: %v", err)
			}
		})
	}
	close(start)
	wg.Wait()
	if won.Load() != 1 {
		t.Fatalf("%d of %d racing creates won, want 1", won.Load(), n)
	}
}

// Writers that read, change and write back, retrying on conflicts, lose
// no update.
func noLostUpdate(t *testing.T, s statestore.Store) {
	mustPut(t, s, "counter", []byte("0"), statestore.NoVersion)
	const writers, each = 4, 10
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			ctx := context.Background()
			for done := 0; done < each; {
				obj, err := s.Get(ctx, "counter")
				if err != nil {
					t.Error(err)
					return
				}
				n, _ := strconv.Atoi(string(obj.Data))
				_, err = s.Put(ctx, "counter", []byte(strconv.Itoa(n+1)), obj.Version)
				switch {
				case err == nil:
					done++
				case !errors.Is(err, statestore.ErrConflict):
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
}

func lock(t *testing.T, s statestore.Store, o Options) {
	ctx := t.Context()
	first, err := s.Lock(ctx, statestore.LockOptions{Command: "transit apply"})
	if err != nil {
		t.Fatal(err)
	}
	info := first.Info()
	host, _ := os.Hostname()
	if info.PID != os.Getpid() || info.Host != host || info.Command != "transit apply" || info.Started.IsZero() {
		t.Errorf("lock info %+v", info)
	}
	_, err = s.Lock(ctx, statestore.LockOptions{Command: "transit destroy"})
	var locked *statestore.LockedError
	if !errors.As(err, &locked) || !errors.Is(err, statestore.ErrLocked) {
		t.Fatalf("a second lock: %v, want a *LockedError", err)
	}
	for _, want := range []string{host, "pid " + strconv.Itoa(os.Getpid()), `"transit apply"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not name %q", err, want)
		}
	}
	// A waiting run gets the lock once the first releases it.
	got := make(chan error, 1)
	var waited atomic.Int32
	go func() {
		l, err := s.Lock(context.Background(), statestore.LockOptions{Timeout: 10 * time.Second, Waiting: func(*statestore.LockedError) { waited.Add(1) }})
		if err == nil {
			err = l.Release(context.Background())
		}
		got <- err
	}()
	time.Sleep(300 * time.Millisecond)
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatalf("a second release: %v", err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the waiting run: %v", err)
	}
	if waited.Load() != 1 {
		t.Errorf("Waiting called %d times, want 1", waited.Load())
	}

	held, err := s.Lock(ctx, statestore.LockOptions{Command: "transit apply"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Release(context.Background()) }()
	if o.KernelLock {
		err := s.ForceUnlock(ctx, held.Info().ID)
		if err == nil {
			t.Fatal("force-unlock of a kernel-held lock of a live process succeeded")
		}
		return
	}
	if err := s.ForceUnlock(ctx, "not-the-id"); err == nil || !strings.Contains(err.Error(), held.Info().ID) {
		t.Fatalf("force-unlock with a wrong ID: %v, want a refusal naming the holder", err)
	}
	if _, err := s.Lock(ctx, statestore.LockOptions{}); !errors.Is(err, statestore.ErrLocked) {
		t.Fatalf("the lock went after a refused force-unlock: %v", err)
	}
	if err := s.ForceUnlock(ctx, held.Info().ID); err != nil {
		t.Fatalf("force-unlock: %v", err)
	}
	again, err := s.Lock(ctx, statestore.LockOptions{})
	if err != nil {
		t.Fatalf("lock after force-unlock: %v", err)
	}
	if err := again.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.ForceUnlock(ctx, "any"); !errors.Is(err, statestore.ErrNotFound) {
		t.Fatalf("force-unlock without a lock: %v, want ErrNotFound", err)
	}
}

// Of runs starting at once, exactly one gets the lock.
func racingLocks(t *testing.T, s statestore.Store) {
	const n = 8
	var won atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	var mu sync.Mutex
	var held []statestore.Lock
	for range n {
		wg.Go(func() {
			<-start
			l, err := s.Lock(context.Background(), statestore.LockOptions{})
			switch {
			case err == nil:
				won.Add(1)
				mu.Lock()
				held = append(held, l)
				mu.Unlock()
			case !errors.Is(err, statestore.ErrLocked):
				t.Errorf("a losing run: %v", err)
			}
		})
	}
	close(start)
	wg.Wait()
	for _, l := range held {
		_ = l.Release(context.Background())
	}
	if won.Load() != 1 {
		t.Fatalf("%d of %d racing runs got the lock, want 1", won.Load(), n)
	}
}
