package state

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
	var ferr *FlockError
	if !errors.As(err, &ferr) {
		t.Fatalf("got %T, want *FlockError", err)
	}
	if ferr.Holder == nil || ferr.Holder.PID != h.cmd.Process.Pid || ferr.Holder.Command != "helper flock" {
		t.Errorf("holder %+v, want the helper (pid %d)", ferr.Holder, h.cmd.Process.Pid)
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

func TestFlockErrorMessage(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 22, 10, 3, 20, 0, time.UTC)
	holder := &Holder{PID: 4242, Host: "ci-7", Command: "transit apply", Started: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)}
	for _, tt := range []struct {
		err  *FlockError
		want string
	}{
		{
			&FlockError{Path: "/s/k.lock", Holder: holder, At: at, Waited: 2 * time.Second, Err: context.Canceled},
			`/s/k.lock is locked by pid 4242 on host ci-7 ("transit apply", started 2026-11-22T10:00:00Z, 3m ago); stopped waiting after 2s: context canceled`,
		},
		{
			&FlockError{Path: "/s/k.lock", At: at, Waited: time.Second, Err: context.DeadlineExceeded},
			`/s/k.lock is locked by another process (the file names no holder); stopped waiting after 1s: context deadline exceeded`,
		},
	} {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("got  %s\nwant %s", got, tt.want)
		}
	}
}
