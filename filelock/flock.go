package filelock

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/cloudtransit/transit/clock"
)

// FlockOptions configure FlockContext.
type FlockOptions struct {
	// Command is recorded as the holder's command, e.g. "transit apply",
	// so that a waiter can say whom it waits for.
	Command string
	// Clock tells time and waits between attempts; nil is the wall clock.
	Clock clock.Clock
}

// Backoff between attempts to take a held flock: short, because these
// locks guard short critical sections.
const (
	flockFirstBackoff = 5 * time.Millisecond
	flockMaxBackoff   = 200 * time.Millisecond
)

// FlockContext takes an exclusive flock on path, creating the file (mode
// 0600) but not its directory, for short critical sections between
// processes (a file guarded for a whole run uses Acquire). While another process holds
// it, FlockContext retries with a short backoff until ctx ends, then
// returns a *LockedError naming the holder, whose Path and File are both
// path; nothing is left behind (no goroutine, no descriptor). The holder
// is recorded in the file while the lock is held. unlock releases it, so
// does the holder's death; the descriptor is close-on-exec.
func FlockContext(ctx context.Context, path string, opts FlockOptions) (unlock func(), err error) {
	if ctx == nil {
		return nil, fmt.Errorf("lock %s: nil context", path)
	}
	clk := opts.Clock
	if clk == nil {
		clk = clock.Real{}
	}
	f, err := lockFile(ctx, path, path, waitOptions{
		timeout:      -1, // until ctx ends
		firstBackoff: flockFirstBackoff,
		maxBackoff:   flockMaxBackoff,
		clock:        clk,
	})
	if err != nil {
		return nil, err
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
