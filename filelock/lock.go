// Package filelock is an exclusive lock between processes on one host, on a
// lock file that records its holder (pid, host, command, start time).
//
// Acquire guards a file, such as resources.json, with the sibling lock file
// "<path>.lock": a second run fails at once with a *LockedError naming the
// holder, or waits up to a timeout. FlockContext locks a file itself, for
// short critical sections, waiting until its context ends. Both take an
// flock(2): the kernel drops it when its holder dies, so a lock left behind
// by a killed process is simply taken over (and reported in
// Lock.Previous). Lock descriptors are close-on-exec.
package filelock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cloudtransit/transit/clock"
)

// ErrLocked is matched (errors.Is) by every *LockedError: another process
// holds a lock taken with Acquire or FlockContext.
var ErrLocked = errors.New("locked by another process")

// Options configure Acquire.
type Options struct {
	// Timeout is how long to wait for a held lock: 0 fails at once, a
	// negative value waits until ctx ends.
	Timeout time.Duration
	// Command is recorded as the holder's command, e.g. "transit apply".
	Command string
	// Waiting, when set, is called once, when the lock is found held and
	// Acquire starts waiting for it, so the caller can say whom it waits
	// for. It is not called when Timeout is 0.
	Waiting func(*LockedError)
	// Clock tells time and waits between attempts; nil is the wall clock.
	Clock clock.Clock
}

// Holder is what the lock file records about the run holding the lock.
type Holder struct {
	PID     int       `json:"pid"`
	Host    string    `json:"host"`
	Command string    `json:"command,omitempty"`
	Started time.Time `json:"started"`
}

// String describes the holder, e.g.
// `pid 4242 on host ci-7 ("transit apply", started 2026-11-22T10:00:00Z)`.
func (h Holder) String() string {
	return fmt.Sprintf("pid %d on host %s (%s)", h.PID, h.Host, h.details(time.Time{}))
}

// details is the parenthesized part of String; with now set it adds the
// holder's age.
func (h Holder) details(now time.Time) string {
	s := ""
	if h.Command != "" {
		s = fmt.Sprintf("%q, ", h.Command)
	}
	s += "started " + h.Started.UTC().Format(time.RFC3339)
	if !now.IsZero() && !h.Started.IsZero() {
		s += ", " + age(now.Sub(h.Started)) + " ago"
	}
	return s
}

// age formats d coarsely: 12s, 3m, 2h5m, 3d.
func age(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	default:
		return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
	}
}

// LockedError says a lock is held by another process: a file's lock
// (Acquire) or a lock file (FlockContext). It matches ErrLocked, and also
// ctx's error when waiting was cut short by ctx.
type LockedError struct {
	// Path is what the lock guards: the file given to Acquire, the lock
	// file itself for FlockContext.
	Path string
	// File is the lock file: "<Path>.lock" for Acquire, Path for
	// FlockContext.
	File string
	// Holder is what the lock file records; nil when it records nothing
	// readable (the holder is between taking the lock and recording itself,
	// or the file was written by something else).
	Holder *Holder
	// HolderGone: Holder ran on this host and its process has exited, yet
	// the lock is still held, most likely by a process it started that
	// inherited the lock descriptor.
	HolderGone bool
	// At is when the lock was last found held; Holder's age is taken at At.
	At time.Time
	// Waited is how long Acquire or FlockContext waited; 0 when it did
	// not wait.
	Waited time.Duration
	// Err is why waiting stopped before its timeout (ctx's error); nil
	// otherwise.
	Err error
}

func (e *LockedError) Error() string {
	msg := e.Path + " is locked by "
	if e.Holder != nil {
		msg += fmt.Sprintf("pid %d on host %s (%s)", e.Holder.PID, e.Holder.Host, e.Holder.details(e.At))
	} else {
		msg += "another process (" + e.File + " names no holder)"
	}
	if e.HolderGone {
		msg += fmt.Sprintf("; pid %d has exited but the lock is still held, most likely by a process it started; find it with `fuser -v %s`", e.Holder.PID, e.File)
	}
	switch {
	case e.Err != nil:
		msg += fmt.Sprintf("; stopped waiting after %s: %v", e.Waited.Round(time.Millisecond), e.Err)
	case e.Waited > 0:
		msg += fmt.Sprintf("; still locked after waiting %s; wait for it or pass a longer --lock-timeout", e.Waited.Round(time.Millisecond))
	default:
		msg += "; wait for it or pass --lock-timeout"
	}
	return msg
}

// Is makes errors.Is(err, ErrLocked) true.
func (e *LockedError) Is(target error) bool { return target == ErrLocked }

// Unwrap returns the ctx error that stopped the wait, if any.
func (e *LockedError) Unwrap() error { return e.Err }

// Lock is a held lock on a file. Release it when done; if the process dies
// instead, the kernel releases it and the next Acquire reports this run as
// its Previous.
type Lock struct {
	// Path is the lock file, "<path>.lock".
	Path string
	// Holder is what the lock file records about this process.
	Holder Holder
	// Previous is the holder a former run left in the lock file: that run
	// ended (crashed, was killed) without releasing the lock. nil when the
	// lock file was clean.
	Previous *Holder

	mu sync.Mutex
	f  *os.File
}

// lockPath is the lock file guarding path.
func lockPath(path string) string { return path + ".lock" }

// Acquire locks path against other processes by taking an exclusive flock
// on the sibling file "<path>.lock" (created with mode 0600, in path's
// directory, which must exist) and recording this process in it as the
// holder. When another process holds it, Acquire fails at once with a
// *LockedError (Timeout 0) or retries with a short backoff until the
// timeout passes or ctx ends.
//
// flock is released by the kernel when its holder dies, so a lock left by a
// killed run is taken over; the holder it recorded is returned as
// Lock.Previous.
//
// The lock descriptor is close-on-exec, so commands the holder starts do
// not inherit the lock.
func Acquire(ctx context.Context, path string, opts Options) (*Lock, error) {
	clk := opts.Clock
	if clk == nil {
		clk = clock.Real{}
	}
	file := lockPath(path)
	f, err := lockFile(ctx, path, file, waitOptions{
		timeout:      opts.Timeout,
		firstBackoff: firstBackoff,
		maxBackoff:   maxBackoff,
		waiting:      opts.Waiting,
		clock:        clk,
	})
	if err != nil {
		return nil, err
	}

	l := &Lock{Path: file, f: f}
	// Metadata left in the file belongs to a run that died holding the
	// lock: Release truncates it.
	if prev, err := readHolder(f); err == nil && prev != nil {
		l.Previous = prev
	}
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	l.Holder = Holder{PID: os.Getpid(), Host: host, Command: opts.Command, Started: clk.Now().UTC()}
	if err := writeHolder(f, l.Holder); err != nil {
		return nil, errors.Join(fmt.Errorf("lock %s: record holder in %s: %w", path, file, err), l.Release())
	}
	return l, nil
}

// Backoff between attempts to take a lock held by Acquire.
const (
	firstBackoff = 20 * time.Millisecond
	maxBackoff   = 500 * time.Millisecond
)

// waitOptions say how lockFile waits for a held lock.
type waitOptions struct {
	// timeout is how long to wait: 0 fails at once, a negative value
	// waits until ctx ends.
	timeout time.Duration
	// The backoff between attempts doubles from firstBackoff up to
	// maxBackoff.
	firstBackoff, maxBackoff time.Duration
	// waiting, when set, is called once, when the lock is found held and
	// the wait starts; never when timeout is 0.
	waiting func(*LockedError)
	clock   clock.Clock
}

// lockFile opens file, creating it (mode 0600) but not its directory, and
// takes an exclusive flock on it, waiting as w says. path is what the lock
// guards, named in errors. While the lock is held by another process, the
// error is a *LockedError. On error, nothing is left open.
func lockFile(ctx context.Context, path, file string, w waitOptions) (*os.File, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	// os.OpenFile always opens with O_CLOEXEC.
	f, err := os.OpenFile(file, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := waitFlock(ctx, f, path, w); err != nil {
		return nil, errors.Join(err, closeErr(f))
	}
	return f, nil
}

// waitFlock takes the flock on f, the lock guarding path, waiting as w
// says.
func waitFlock(ctx context.Context, f *os.File, path string, w waitOptions) error {
	start := w.clock.Now()
	backoff := w.firstBackoff
	notified := false
	for {
		err := flock(f, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return fmt.Errorf("lock %s: flock %s: %w", path, f.Name(), err)
		}
		now := w.clock.Now()
		if w.timeout == 0 {
			return heldError(f, path, now, 0, nil)
		}
		waited := now.Sub(start)
		wait := backoff
		if w.timeout > 0 {
			left := w.timeout - waited
			if left <= 0 {
				return heldError(f, path, now, waited, nil)
			}
			wait = min(wait, left)
		}
		if !notified && w.waiting != nil {
			notified = true
			w.waiting(heldError(f, path, now, waited, nil))
		}
		if err := w.clock.Sleep(ctx, wait); err != nil {
			now := w.clock.Now()
			return heldError(f, path, now, now.Sub(start), err)
		}
		backoff = min(2*backoff, w.maxBackoff)
	}
}

// flock calls flock(2) on f, retrying when interrupted by a signal.
func flock(f *os.File, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// heldError describes the held lock on f, guarding path, as found at now
// after waiting waited; stopped is why the wait stopped early, if it did.
func heldError(f *os.File, path string, now time.Time, waited time.Duration, stopped error) *LockedError {
	e := &LockedError{Path: path, File: f.Name(), At: now, Waited: waited, Err: stopped}
	h, err := readHolder(f)
	if err != nil || h == nil {
		return e
	}
	e.Holder = h
	if host, err := os.Hostname(); err == nil && host == h.Host && !processAlive(h.PID) {
		e.HolderGone = true
	}
	return e
}

// processAlive reports whether pid runs on this host (as far as this
// process can tell: a process of another user counts as alive).
func processAlive(pid int) bool {
	if pid <= 0 {
		return true // not a pid we can judge; never signal groups
	}
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

// maxHolderSize bounds what readHolder reads from a lock file.
const maxHolderSize = 64 << 10

// readHolder reads the holder recorded in f; nil when the file is empty.
func readHolder(f *os.File) (*Holder, error) {
	data, err := io.ReadAll(io.NewSectionReader(f, 0, maxHolderSize))
	if err != nil {
		return nil, err
	}
	if len(data) == 0 {
		return nil, nil
	}
	var h Holder
	if err := json.Unmarshal(data, &h); err != nil {
		return nil, err
	}
	return &h, nil
}

// writeHolder records h in f, replacing what was there, durably.
func writeHolder(f *os.File, h Holder) error {
	if err := recordHolder(f, h); err != nil {
		return err
	}
	return f.Sync()
}

// jsonLine is h as one line of JSON.
func jsonLine(h Holder) ([]byte, error) {
	data, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}

// Release clears the holder from the lock file and unlocks it. It is safe
// to call more than once, and on a nil Lock.
func (l *Lock) Release() error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	f := l.f
	l.f = nil
	var errs []error
	if err := f.Truncate(0); err != nil {
		errs = append(errs, fmt.Errorf("clear holder: %w", err))
	}
	if err := flock(f, unix.LOCK_UN); err != nil {
		errs = append(errs, fmt.Errorf("unlock: %w", err))
	}
	if err := f.Close(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("release lock %s: %w", l.Path, err)
	}
	return nil
}

// closeErr closes f and wraps a failure.
func closeErr(f *os.File) error {
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", f.Name(), err)
	}
	return nil
}
