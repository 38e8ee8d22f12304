package statestore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/user"
	"sync"
	"time"
)

// AcquireLease takes a lease lock on s, for a store that cannot see its
// holder die (S3): the object name, created only if absent (Put with
// NoVersion: of two runs starting at the same instant exactly one gets it),
// holding the holder's LockInfo. The holder renews the lease every quarter
// of o.Lease with a write conditional on its last version; a renewal
// refused because another run took the lock over closes Lost.
//
// No two machines' clocks are ever compared. The holder stops (Valid
// fails, Lost closes) once a lease less a quarter has passed since it
// sent its last successful renewal, by its own monotonic clock. Another
// run takes a held lock over only once it is stale by the store's clock
// (the lock object's age, the store's time of its answer less that of its
// last write, exceeds a lease and a quarter) or once it saw the lock
// unchanged for a lease and a quarter by its own monotonic clock: a
// holder that is only paused has stopped by then. LockInfo.Expires, for
// people, is the holder's wall clock. ForceUnlockLease frees it at once.
func AcquireLease(ctx context.Context, s Store, name string, o LockOptions) (Lock, error) {
	if o.Lease <= 0 {
		o.Lease = DefaultLease
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	id, err := newLockID()
	if err != nil {
		return nil, err
	}
	l := &leaseLock{s: s, name: name, lease: o.Lease, now: o.Now, done: make(chan struct{}), lost: make(chan struct{})}
	l.info = holderInfo(id, o.Command, o.Now())

	start := time.Now()
	poll := min(time.Second, o.Lease/10)
	stale := o.Lease + o.Lease/4
	var (
		seen      string    // the holder's version as first watched
		seenSince time.Time // when this run saw it first (monotonic)
		waiting   bool
		vanished  int // creates refused while no lock was there, in a row
	)
	for {
		l.info.Expires = o.Now().Add(o.Lease)
		data, err := json.Marshal(l.info)
		if err != nil {
			return nil, err
		}
		sent := time.Now()
		version, err := s.Put(ctx, name, data, NoVersion)
		if err == nil {
			l.start(version, sent)
			return l, nil
		}
		if !errors.Is(err, ErrConflict) {
			return nil, fmt.Errorf("take the state lock %s/%s: %w", s.Location(), name, err)
		}
		held, err := s.Get(ctx, name)
		if errors.Is(err, ErrNotFound) {
			// Released between the two calls — or a store that refuses
			// the create although it holds nothing: not at full speed,
			// and not forever.
			if vanished++; vanished > maxVanished {
				return nil, fmt.Errorf("take the state lock %s/%s: the store refuses to create it although it reports none (%d times): check the bucket (versioning on?)", s.Location(), name, vanished)
			}
			if vanished > 1 {
				select {
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-time.After(poll):
				}
			}
			continue
		}
		vanished = 0
		if err != nil {
			return nil, fmt.Errorf("read the state lock %s/%s: %w", s.Location(), name, err)
		}
		holder, _ := parseLockInfo(held.Data) // unreadable: stale only by age or watching
		if holder.ID == l.info.ID {
			// This run's own create, whose answer was lost and whose
			// retry the store refused.
			l.start(held.Version, sent)
			return l, nil
		}
		if held.Version != seen {
			seen, seenSince = held.Version, time.Now()
		}
		age, known := held.Age()
		if known && age > stale || time.Since(seenSince) >= stale {
			data, err := json.Marshal(l.info)
			if err != nil {
				return nil, err
			}
			sent := time.Now()
			version, err := s.Put(ctx, name, data, held.Version)
			if errors.Is(err, ErrConflict) {
				continue // renewed, released or taken by another run meanwhile
			}
			if err != nil {
				return nil, fmt.Errorf("take over the stale state lock %s/%s: %w", s.Location(), name, err)
			}
			l.tookOver = true
			if o.TookOver != nil {
				o.TookOver(holder)
			}
			l.start(version, sent)
			return l, nil
		}
		locked := &LockedError{Store: s.Location(), Holder: holder, Waited: time.Since(start)}
		if o.Timeout == 0 {
			locked.Waited = 0
			return nil, locked
		}
		if o.Timeout > 0 && time.Since(start) >= o.Timeout {
			return nil, locked
		}
		if !waiting && o.Waiting != nil {
			o.Waiting(locked)
		}
		waiting = true
		select {
		case <-ctx.Done():
			locked.Err = ctx.Err()
			return nil, locked
		case <-time.After(poll):
		}
	}
}

// ForceUnlockLease deletes the lease lock name of s if its ID is id: for a
// run that died while its lease has not expired yet. A lock with another ID
// is left alone, and the error names its holder.
func ForceUnlockLease(ctx context.Context, s Store, name, id string) error {
	held, err := s.Get(ctx, name)
	if err != nil {
		return fmt.Errorf("force-unlock %s: %w", s.Location(), err)
	}
	holder, err := parseLockInfo(held.Data)
	if err != nil {
		return fmt.Errorf("force-unlock %s: the lock object %s is unreadable (%w); delete it by hand if no run holds it", s.Location(), name, err)
	}
	if holder.ID != id {
		return fmt.Errorf("force-unlock %s: the lock's ID is %s, not %s: it is held by %s", s.Location(), holder.ID, id, holder)
	}
	if err := s.Delete(ctx, name, held.Version); err != nil {
		return fmt.Errorf("force-unlock %s: %w (the holder renewed or released it meanwhile; look again)", s.Location(), err)
	}
	return nil
}

// maxVanished bounds the creates a store refuses in a row while it reports
// no lock.
const maxVanished = 20

type leaseLock struct {
	s     Store
	name  string
	lease time.Duration
	now   func() time.Time // the wall clock LockInfo's times are in
	// tookOver says the lock was taken over from a holder that may
	// still live.
	tookOver bool

	mu       sync.Mutex
	info     LockInfo
	version  string
	released bool
	// validUntil is when this holder stops acting, by its monotonic
	// clock: the send time of its last successful write of the lock
	// plus a lease less a quarter; expire fires then.
	validUntil time.Time
	expire     *time.Timer
	done       chan struct{} // closed by Release: stop renewing
	stopped    sync.WaitGroup
	lost       chan struct{}
	lostOnce   sync.Once
}

func (l *leaseLock) Info() LockInfo {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.info
}

func (l *leaseLock) Lost() <-chan struct{} { return l.lost }

// Valid fails once the lock is lost, released, or its deadline passed.
func (l *leaseLock) Valid() error {
	select {
	case <-l.lost:
		return fmt.Errorf("%w: the lease on %s/%s was not renewed in time, or another run took it over", ErrLockLost, l.s.Location(), l.name)
	default:
	}
	l.mu.Lock()
	until, released := l.validUntil, l.released
	l.mu.Unlock()
	switch {
	case released:
		return fmt.Errorf("%w: released", ErrLockLost)
	case !time.Now().Before(until):
		l.markLost()
		return fmt.Errorf("%w: the lease on %s/%s was last renewed more than %s ago (this process was paused, or the store did not answer)", ErrLockLost, l.s.Location(), l.name, l.lease-l.lease/4)
	}
	return nil
}

// start holds the lock at version, written at sent, and renews it until
// Release.
func (l *leaseLock) start(version string, sent time.Time) {
	l.version = version
	l.validUntil = sent.Add(l.lease - l.lease/4)
	l.expire = time.AfterFunc(time.Until(l.validUntil), func() { _ = l.Valid() })
	l.stopped.Add(1)
	go l.renew()
}

// renew extends the lease every quarter of it until Release, and a
// sixteenth of it after a renewal that failed. A renewal refused as a
// conflict means the lock was taken over or force-unlocked; no
// successful renewal until the holder's deadline means another run may
// take it over soon: both close Lost.
func (l *leaseLock) renew() {
	defer l.stopped.Done()
	t := time.NewTimer(l.lease / 4)
	defer t.Stop()
	for {
		select {
		case <-l.done:
			return
		case <-l.lost:
			return
		case <-t.C:
		}
		t.Reset(l.lease / 16) // unless this renewal succeeds
		l.mu.Lock()
		info, version := l.info, l.version
		l.mu.Unlock()
		next := info
		next.Expires = l.now().Add(l.lease)
		data, err := json.Marshal(next)
		if err != nil {
			l.markLost()
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), l.lease/4)
		sent := time.Now()
		v, err := l.s.Put(ctx, l.name, data, version)
		cancel()
		switch {
		case err == nil:
			l.mu.Lock()
			l.info, l.version = next, v
			// A renewal that ended past the deadline counts for
			// nothing: the holder stopped acting, and Lost closes.
			late := !time.Now().Before(l.validUntil)
			if !late {
				l.validUntil = sent.Add(l.lease - l.lease/4)
				l.expire.Reset(time.Until(l.validUntil))
			}
			l.mu.Unlock()
			if late {
				l.markLost()
				return
			}
			t.Reset(l.lease / 4)
		case errors.Is(err, ErrConflict) && !l.adoptOwnWrite():
			l.markLost()
			return
		}
	}
}

// adoptOwnWrite tells whether the lock in the store, refusing a renewal,
// is still this holder's: a renewal whose answer was lost (a timeout, or
// the store refusing the retry of a write it made) wrote it. The holder
// then renews from that version; its deadline stays that of its last
// renewal it saw succeed, as the write's time is unknown.
func (l *leaseLock) adoptOwnWrite() bool {
	ctx, cancel := context.WithTimeout(context.Background(), l.lease/4)
	defer cancel()
	held, err := l.s.Get(ctx, l.name)
	if err != nil {
		return false
	}
	holder, err := parseLockInfo(held.Data)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil || holder.ID != l.info.ID {
		return false
	}
	l.version = held.Version
	return true
}

func (l *leaseLock) markLost() { l.lostOnce.Do(func() { close(l.lost) }) }

// Release stops renewing and deletes the lock if it is still this run's.
func (l *leaseLock) Release(ctx context.Context) error {
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return nil
	}
	l.released = true
	close(l.done)
	l.expire.Stop()
	l.mu.Unlock()
	l.stopped.Wait()
	l.mu.Lock()
	version := l.version
	l.mu.Unlock()
	err := l.s.Delete(ctx, l.name, version)
	switch {
	case err == nil, errors.Is(err, ErrNotFound):
		return nil
	case errors.Is(err, ErrConflict):
		return fmt.Errorf("release the state lock %s/%s: another run took it over before the release: %w", l.s.Location(), l.name, err)
	}
	return fmt.Errorf("release the state lock %s/%s: %w", l.s.Location(), l.name, err)
}

// holderInfo describes this process as a lock holder.
func holderInfo(id, command string, now time.Time) LockInfo {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	who := os.Getenv("USER")
	if u, err := user.Current(); err == nil {
		who = u.Username
	}
	return LockInfo{ID: id, Who: who, Host: host, PID: os.Getpid(), Command: command, Started: now.UTC()}
}

func parseLockInfo(data []byte) (LockInfo, error) {
	var info LockInfo
	if err := json.Unmarshal(data, &info); err != nil {
		return LockInfo{}, err
	}
	return info, nil
}

func newLockID() (string, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("make a lock ID: %w", err)
	}
	return hex.EncodeToString(b), nil
}
