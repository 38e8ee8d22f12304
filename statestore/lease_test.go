package statestore_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudtransit/transit/statestore"
	"github.com/cloudtransit/transit/statestore/memstore"
)

func newMemStore() *memstore.Store { return memstore.New() }

// writeLock puts a lock object as a run that is gone would have left it.
func writeLock(t *testing.T, m *memstore.Store, info statestore.LockInfo) {
	t.Helper()
	data, err := json.Marshal(info)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Put(context.Background(), "lock", data, statestore.NoVersion); err != nil {
		t.Fatal(err)
	}
}

func lockOrFail(t *testing.T, s statestore.Store, o statestore.LockOptions) statestore.Lock {
	t.Helper()
	l, err := s.Lock(t.Context(), o)
	if err != nil {
		t.Fatalf("lock: %v", err)
	}
	t.Cleanup(func() { _ = l.Release(context.Background()) })
	return l
}

func TestLeaseExactlyOneOfRacingRuns(t *testing.T) {
	s := newMemStore()
	const runs = 16
	var won atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range runs {
		wg.Go(func() {
			<-start
			l, err := s.Lock(t.Context(), statestore.LockOptions{Command: "transit apply"})
			if err == nil {
				won.Add(1)
				t.Cleanup(func() { _ = l.Release(context.Background()) })
				return
			}
			if !errors.Is(err, statestore.ErrLocked) {
				t.Errorf("a losing run: %v, want ErrLocked", err)
			}
		})
	}
	close(start)
	wg.Wait()
	if won.Load() != 1 {
		t.Fatalf("%d runs got the lock, want exactly 1", won.Load())
	}
}

func TestLeaseHeldNamesHolder(t *testing.T) {
	s := newMemStore()
	first := lockOrFail(t, s, statestore.LockOptions{Command: "transit apply"})
	_, err := s.Lock(t.Context(), statestore.LockOptions{Command: "transit destroy"})
	var locked *statestore.LockedError
	if !errors.As(err, &locked) || !errors.Is(err, statestore.ErrLocked) {
		t.Fatalf("second lock: %v, want a *LockedError", err)
	}
	host, _ := os.Hostname()
	info := first.Info()
	for _, want := range []string{"mem://test", host, "pid " + strconv.Itoa(os.Getpid()), `"transit apply"`, info.ID, "transit force-unlock " + info.ID} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}

func TestLeaseWaitsForRelease(t *testing.T) {
	s := newMemStore()
	first := lockOrFail(t, s, statestore.LockOptions{Lease: time.Minute})
	var waited atomic.Int32
	got := make(chan error, 1)
	go func() {
		l, err := s.Lock(t.Context(), statestore.LockOptions{Timeout: 10 * time.Second, Lease: time.Minute,
			Waiting: func(*statestore.LockedError) { waited.Add(1) }})
		if err == nil {
			err = l.Release(context.Background())
		}
		got <- err
	}()
	time.Sleep(300 * time.Millisecond)
	if err := first.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := first.Release(t.Context()); err != nil {
		t.Fatalf("second release: %v", err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiting run: %v", err)
	}
	if waited.Load() != 1 {
		t.Fatalf("Waiting called %d times, want 1", waited.Load())
	}
}

func TestLeaseTimeoutEnds(t *testing.T) {
	s := newMemStore()
	lockOrFail(t, s, statestore.LockOptions{Lease: time.Minute})
	_, err := s.Lock(t.Context(), statestore.LockOptions{Timeout: 200 * time.Millisecond, Lease: time.Minute})
	var locked *statestore.LockedError
	if !errors.As(err, &locked) || locked.Waited < 200*time.Millisecond {
		t.Fatalf("lock: %v, want a *LockedError after waiting 200ms", err)
	}
}

// A live holder renews: a contender never finds its lock stale, however
// long it holds it.
func TestLeaseRenewedIsNotTakenOver(t *testing.T) {
	s := newMemStore()
	lease := time.Second
	holder := lockOrFail(t, s, statestore.LockOptions{Lease: lease})
	first, _ := s.Get(t.Context(), "lock")
	// The contender's clock runs two leases ahead: it must not matter.
	ahead := func() time.Time { return time.Now().Add(2 * lease) }
	_, err := s.Lock(t.Context(), statestore.LockOptions{Lease: lease, Timeout: 3 * lease, Now: ahead})
	if !errors.Is(err, statestore.ErrLocked) {
		t.Fatalf("contender: %v, want ErrLocked: a renewed lease must not be taken over", err)
	}
	now, _ := s.Get(t.Context(), "lock")
	if now.Version == first.Version {
		t.Fatal("the holder did not renew its lease")
	}
	select {
	case <-holder.Lost():
		t.Fatal("the holder lost a lock it renewed")
	default:
	}
}

// A run that died left a lock the store last wrote ten minutes ago, by
// the store's own clock: the next run takes it over at once and is told
// whose it was.
func TestLeaseExpiredTakenOver(t *testing.T) {
	s := newMemStore()
	dead := statestore.LockInfo{ID: "dead", Host: "ci-7", PID: 42, Command: "transit apply",
		Started: time.Now().Add(-time.Hour), Expires: time.Now().Add(-10 * time.Minute)}
	s.Now = func() time.Time { return time.Now().Add(-10 * time.Minute) }
	writeLock(t, s, dead)
	s.Now = nil
	var previous statestore.LockInfo
	start := time.Now()
	l := lockOrFail(t, s, statestore.LockOptions{Lease: time.Minute, TookOver: func(p statestore.LockInfo) { previous = p }})
	if time.Since(start) > 5*time.Second {
		t.Fatalf("took %s to take over an expired lease", time.Since(start))
	}
	if previous.ID != "dead" || l.Info().ID == "dead" {
		t.Fatalf("previous %+v, now %+v", previous, l.Info())
	}
}

// A holder whose clock runs ahead wrote an expiry far in the future and
// died: the lock is taken over once it stayed unchanged for a whole lease.
func TestLeaseWatchedUnchangedTakenOver(t *testing.T) {
	s := newMemStore()
	writeLock(t, s, statestore.LockInfo{ID: "ahead", Host: "laptop", PID: 7, Started: time.Now(), Expires: time.Now().Add(24 * time.Hour)})
	lease := 300 * time.Millisecond
	start := time.Now()
	if _, err := s.Lock(t.Context(), statestore.LockOptions{Lease: lease}); !errors.Is(err, statestore.ErrLocked) {
		t.Fatalf("without waiting: %v, want ErrLocked", err)
	}
	l := lockOrFail(t, s, statestore.LockOptions{Lease: lease, Timeout: 10 * lease})
	if took := time.Since(start); took < lease {
		t.Fatalf("took the lock over after %s, before a whole lease (%s) unchanged", took, lease)
	}
	if l.Info().ID == "ahead" {
		t.Fatal("still the old holder")
	}
}

// Force-unlock frees a lock only by its ID; the holder then learns it
// lost the lock.
func TestLeaseForceUnlock(t *testing.T) {
	s := newMemStore()
	if err := s.ForceUnlock(t.Context(), "nobody"); !errors.Is(err, statestore.ErrNotFound) {
		t.Fatalf("force-unlock without a lock: %v, want ErrNotFound", err)
	}
	lease := 150 * time.Millisecond
	holder := lockOrFail(t, s, statestore.LockOptions{Lease: lease, Command: "transit apply"})
	err := s.ForceUnlock(t.Context(), "wrong")
	if err == nil || !strings.Contains(err.Error(), holder.Info().ID) {
		t.Fatalf("force-unlock with a wrong ID: %v, want a refusal naming the holder", err)
	}
	if _, err := s.Get(t.Context(), "lock"); err != nil {
		t.Fatalf("the lock went after a refused force-unlock: %v", err)
	}
	if err := s.ForceUnlock(t.Context(), holder.Info().ID); err != nil {
		t.Fatalf("force-unlock: %v", err)
	}
	other := lockOrFail(t, s, statestore.LockOptions{Lease: time.Minute})
	select {
	case <-holder.Lost():
	case <-time.After(5 * lease):
		t.Fatal("the force-unlocked holder was not told it lost the lock")
	}
	if err := holder.Release(t.Context()); err == nil {
		t.Fatal("releasing a lock another run holds now: no error")
	}
	if got, _ := s.Get(t.Context(), "lock"); !strings.Contains(string(got.Data), other.Info().ID) {
		t.Fatalf("the old holder's release removed the new holder's lock: %s", got.Data)
	}
}

// A holder that cannot renew (the store is unreachable) until its lease ran
// out is told it lost the lock.
func TestLeaseLostWhenRenewalsFail(t *testing.T) {
	s := newMemStore()
	lease := 150 * time.Millisecond
	holder := lockOrFail(t, s, statestore.LockOptions{Lease: lease})
	s.FailPuts.Store(true)
	select {
	case <-holder.Lost():
	case <-time.After(10 * lease):
		t.Fatal("renewals failed past the lease, and Lost stayed open")
	}
	s.FailPuts.Store(false)
}

// ghostStore refuses every create as if the object existed, yet reads
// none: a service at odds with itself (versitygw in a versioned bucket).
type ghostStore struct{ *memstore.Store }

func (g ghostStore) Put(ctx context.Context, name string, data []byte, ifVersion string) (string, error) {
	if ifVersion == statestore.NoVersion {
		return "", &statestore.ConflictError{Store: g.Location(), Name: name}
	}
	return g.Store.Put(ctx, name, data, ifVersion)
}

// A lock that cannot be created although none exists ends in an error,
// bounded, not in a loop at full speed.
func TestLeaseGhostLockEnds(t *testing.T) {
	s := ghostStore{newMemStore()}
	start := time.Now()
	_, err := statestore.AcquireLease(t.Context(), s, "lock", statestore.LockOptions{Lease: 200 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "refuses to create it") {
		t.Fatalf("lock on a ghost store: %v", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("took %s", took)
	}
}

// A lock whose expiry its holder's clock put in the past, but which the
// store wrote a moment ago, is a live holder's whose clock runs behind:
// it is not taken over before it stayed unchanged for a lease and more.
func TestLeaseHolderClockBehindNotTakenOver(t *testing.T) {
	s := newMemStore()
	lease := time.Second
	writeLock(t, s, statestore.LockInfo{ID: "behind", Host: "ci-3", PID: 9, Started: time.Now().Add(-time.Hour), Expires: time.Now().Add(-time.Hour)})
	if _, err := s.Lock(t.Context(), statestore.LockOptions{Lease: lease}); !errors.Is(err, statestore.ErrLocked) {
		t.Fatalf("a lock the store wrote just now, its holder's clock an hour behind: %v, want ErrLocked", err)
	}
}

// lostOnce writes the next Put of the lock and then answers as a request
// that timed out: the write took place, its answer never came.
type lostOnce struct {
	*memstore.Store
	lose atomic.Bool
}

func (s *lostOnce) Put(ctx context.Context, name string, data []byte, ifVersion string) (string, error) {
	v, err := s.Store.Put(ctx, name, data, ifVersion)
	if err == nil && s.lose.CompareAndSwap(true, false) {
		return "", context.DeadlineExceeded
	}
	return v, err
}

// A renewal whose answer was lost — a conflict from the retry of a write
// that took place (S3 answers 412 to its own earlier write), or a timeout
// — wrote the holder's own lock: the holder recognises it by its ID,
// keeps the lock and releases it at the end. It once took its own write
// for another run's and stopped with lock_lost (seen in CI, a 6 s lease
// on a loaded machine).
func TestLeaseOwnRenewalWhoseAnswerWasLost(t *testing.T) {
	for _, answer := range []string{"conflict", "timeout"} {
		t.Run(answer, func(t *testing.T) {
			m := newMemStore()
			s := &lostOnce{Store: m}
			lease := 200 * time.Millisecond
			l, err := statestore.AcquireLease(t.Context(), s, "lock", statestore.LockOptions{Lease: lease})
			if err != nil {
				t.Fatal(err)
			}
			if answer == "conflict" {
				m.LostResponse.Store(true)
			} else {
				s.lose.Store(true)
			}
			time.Sleep(4 * lease)
			if err := l.Valid(); err != nil {
				t.Fatalf("after a renewal whose answer was lost: %v", err)
			}
			if m.LostResponse.Load() || s.lose.Load() {
				t.Fatal("no renewal met the lost answer")
			}
			if err := l.Release(t.Context()); err != nil {
				t.Fatalf("release: %v", err)
			}
			if _, err := m.Get(t.Context(), "lock"); !errors.Is(err, statestore.ErrNotFound) {
				t.Fatalf("the lock is still there after the release: %v", err)
			}
		})
	}
}

// A create whose answer was lost, then refused on its retry, wrote this
// run's lock: the run holds it at once, and takes nothing over.
func TestLeaseOwnCreateWhoseAnswerWasLost(t *testing.T) {
	m := newMemStore()
	m.LostResponse.Store(true)
	lease := time.Minute
	start := time.Now()
	tookOver := false
	l, err := statestore.AcquireLease(t.Context(), m, "lock", statestore.LockOptions{Lease: lease, Timeout: 0,
		TookOver: func(statestore.LockInfo) { tookOver = true }})
	if err != nil {
		t.Fatalf("lock after a create whose answer was lost: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second || tookOver {
		t.Fatalf("took %s, took over %t: the run waited for its own lock", took, tookOver)
	}
	if err := l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
}
