package state

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cloudtransit/transit/clock"
)

// Flock takes an exclusive flock on path like FlockContext, but waits as
// long as it takes. Prefer FlockContext, which stops waiting when its
// context ends.
func Flock(path string) (unlock func(), err error) {
	// No caller's context to honour: this is the old, unbounded wait.
	return flockWait(context.Background(), path, FlockOptions{})
}

// FlockOptions configure FlockContext.
type FlockOptions struct {
	// Command is recorded as the holder's command, e.g. "transit apply",
	// so that a waiter can say whom it waits for.
	Command string
	// Clock tells time and waits between attempts; nil is the wall clock.
	Clock clock.Clock
}

// FlockError is a wait for a flock that ended with ctx before the lock was
// free. It matches ErrLocked and ctx's error.
type FlockError struct {
	// Path is the lock file.
	Path string
	// Holder is what the lock file records about the process holding
	// it; nil when it records nothing readable.
	Holder *Holder
	// HolderGone: Holder ran on this host and has exited, yet the lock is
	// still held, most likely by a process it started.
	HolderGone bool
	// At is when the lock was last found held.
	At     time.Time
	Waited time.Duration
	Err    error // ctx's error
}

func (e *FlockError) Error() string {
	msg := e.Path + " is locked by "
	if e.Holder != nil {
		msg += fmt.Sprintf("pid %d on host %s (%s)", e.Holder.PID, e.Holder.Host, e.Holder.details(e.At))
	} else {
		msg += "another process (the file names no holder)"
	}
	if e.HolderGone {
		msg += fmt.Sprintf("; pid %d has exited but the lock is still held, most likely by a process it started; find it with `fuser -v %s`", e.Holder.PID, e.Path)
	}
	return msg + fmt.Sprintf("; stopped waiting after %s: %v", e.Waited.Round(time.Millisecond), e.Err)
}

// Is makes errors.Is(err, ErrLocked) true.
func (e *FlockError) Is(target error) bool { return target == ErrLocked }

// Unwrap returns ctx's error.
func (e *FlockError) Unwrap() error { return e.Err }

// Backoff between attempts to take a held flock: short, because these
// locks guard short critical sections.
const (
	flockFirstBackoff = 5 * time.Millisecond
	flockMaxBackoff   = 200 * time.Millisecond
)

// FlockContext takes an exclusive flock on path, creating the file (mode
// 0600) but not its directory, for short critical sections between
// processes (the state itself uses Acquire). While another process holds
// it, FlockContext retries with a short backoff until ctx ends, then
// returns a *FlockError naming the holder; nothing is left behind (no
// goroutine, no descriptor). The holder is recorded in the file while the
// lock is held. unlock releases it, so does the holder's death; the
// descriptor is close-on-exec.
func FlockContext(ctx context.Context, path string, opts FlockOptions) (unlock func(), err error) {
	if ctx == nil {
		return nil, fmt.Errorf("lock %s: nil context", path)
	}
	return flockWait(ctx, path, opts)
}

func flockWait(ctx context.Context, path string, opts FlockOptions) (func(), error) {
	clk := opts.Clock
	if clk == nil {
		clk = clock.Real{}
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	// os.OpenFile always opens with O_CLOEXEC.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	start := clk.Now()
	backoff := flockFirstBackoff
	for {
		err := flock(f, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return nil, errors.Join(fmt.Errorf("lock %s: %w", path, err), closeErr(f))
		}
		if serr := clk.Sleep(ctx, backoff); serr != nil {
			now := clk.Now()
			held := heldError(f, path, now)
			ferr := &FlockError{Path: path, Holder: held.Holder, HolderGone: held.HolderGone, At: now, Waited: now.Sub(start), Err: serr}
			return nil, errors.Join(ferr, closeErr(f))
		}
		backoff = min(2*backoff, flockMaxBackoff)
	}
	// Best effort: the holder record only improves a waiter's message.
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	_ = recordHolder(f, Holder{PID: os.Getpid(), Host: host, Command: opts.Command, Started: clk.Now().UTC()})
	return func() {
		_ = f.Truncate(0)
		_ = f.Close()
	}, nil
}

// recordHolder writes h into the lock file f without syncing: it is
// advice for waiters, not state.
func recordHolder(f *os.File, h Holder) error {
	data, err := jsonLine(h)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		return err
	}
	return f.Truncate(int64(len(data)))
}
