package filelock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cloudtransit/transit/clock/clocktest"
)

// openFDs counts this process's descriptors open on path.
func openFDs(t *testing.T, path string) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && target == path {
			n++
		}
	}
	return n
}

// TestFlockContextStopsWhenContextEnds: Ctrl-C while another process holds
// the lock returns at once, names the holder, and leaks nothing.
func TestFlockContextStopsWhenContextEnds(t *testing.T) {
	// Not parallel: it counts goroutines.
	path := filepath.Join(t.TempDir(), "lock")
	h := startHelper(t, "flock", path)
	h.expect(t, "locked")
	goroutines := runtime.NumGoroutine()

	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	unlock, err := FlockContext(ctx, path, FlockOptions{})
	if err == nil {
		unlock()
		t.Fatal("took a lock another process holds")
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("returned %v after the context ended", took)
	}
	if !errors.Is(err, ErrLocked) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("got %v, want ErrLocked and context.DeadlineExceeded", err)
	}
	var lerr *LockedError
	if !errors.As(err, &lerr) {
		t.Fatalf("got %T, want *LockedError", err)
	}
	if lerr.Holder == nil || lerr.Holder.PID != h.cmd.Process.Pid || lerr.Holder.Command != "helper flock" {
		t.Errorf("holder %+v, want the helper (pid %d)", lerr.Holder, h.cmd.Process.Pid)
	}
	if lerr.Path != path || lerr.File != path || lerr.Err == nil {
		t.Errorf("got %+v, want path and file %s and why waiting stopped", lerr, path)
	}
	want := fmt.Sprintf(`%s is locked by pid %d on host %s ("helper flock", started `, path, h.cmd.Process.Pid, hostname(t))
	if msg := err.Error(); !strings.HasPrefix(msg, want) || !strings.Contains(msg, "stopped waiting after") {
		t.Errorf("message %q, want %q...", msg, want)
	}
	if n := openFDs(t, path); n != 0 {
		t.Errorf("%d descriptors left open on %s", n, path)
	}
	if n := runtime.NumGoroutine(); n > goroutines {
		t.Errorf("%d goroutines after the wait, %d before", n, goroutines)
	}

	// Once the holder dies, the lock is free.
	h.kill(t)
	unlock, err = FlockContext(t.Context(), path, FlockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	unlock()
}

func TestFlockContextWaitsForRelease(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "lock")
	first, err := FlockContext(t.Context(), path, FlockOptions{Command: "first"})
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil || !strings.Contains(string(data), `"command":"first"`) {
		t.Errorf("lock file %q (%v), want the holder recorded", data, err)
	}
	time.AfterFunc(50*time.Millisecond, first)
	second, err := FlockContext(t.Context(), path, FlockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	second()
	if data, err := os.ReadFile(path); err != nil || len(data) != 0 {
		t.Errorf("lock file %q (%v) after unlock, want empty", data, err)
	}
	if n := openFDs(t, path); n != 0 {
		t.Errorf("%d descriptors left open on %s", n, path)
	}
}

func TestFlockContextEndedContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	path := filepath.Join(t.TempDir(), "lock")
	if _, err := FlockContext(ctx, path, FlockOptions{}); !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want context.Canceled", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("an ended context created the lock file (%v)", err)
	}
}

// Both locks back off on the clock they are given, each at its own pace:
// FlockContext briefly and until ctx ends, Acquire longer and until its
// timeout.
func TestLockBackoff(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	for _, tt := range []struct {
		name string
		// lock takes the lock held in file.
		lock func(ctx context.Context, file string, clk *clocktest.Fake) error
		want []time.Duration
	}{
		{
			name: "FlockContext",
			lock: func(ctx context.Context, file string, clk *clocktest.Fake) error {
				unlock, err := FlockContext(ctx, file, FlockOptions{Clock: clk})
				if err == nil {
					unlock()
				}
				return err
			},
			want: []time.Duration{5 * ms, 10 * ms, 20 * ms, 40 * ms, 80 * ms, 160 * ms, 200 * ms, 200 * ms},
		},
		{
			name: "Acquire",
			lock: func(ctx context.Context, file string, clk *clocktest.Fake) error {
				statePath := strings.TrimSuffix(file, ".lock")
				l, err := Acquire(ctx, statePath, Options{Timeout: time.Hour, Clock: clk})
				return errors.Join(err, l.Release())
			},
			want: []time.Duration{20 * ms, 40 * ms, 80 * ms, 160 * ms, 320 * ms, 500 * ms, 500 * ms, 500 * ms},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			file := filepath.Join(t.TempDir(), "resources.json.lock")
			// Held by another open file description, as by another process.
			unlock, err := FlockContext(t.Context(), file, FlockOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer unlock()
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			clk := clocktest.NewFake(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
			clk.OnSleep = func(ctx context.Context, _ time.Duration) error {
				if len(clk.Sleeps()) == len(tt.want) {
					cancel()
					return ctx.Err()
				}
				return nil
			}
			err = tt.lock(ctx, file, clk)
			var lerr *LockedError
			if !errors.As(err, &lerr) || !errors.Is(err, context.Canceled) {
				t.Fatalf("got %v, want a *LockedError and context.Canceled", err)
			}
			if diff := cmp.Diff(tt.want, clk.Sleeps()); diff != "" {
				t.Errorf("backoff (-want +got):\n%s", diff)
			}
			var total time.Duration
			for _, d := range tt.want {
				total += d
			}
			if lerr.Waited != total || lerr.File != file {
				t.Errorf("waited %v for %s, want %v on the fake clock for %s", lerr.Waited, lerr.File, total, file)
			}
		})
	}
}
