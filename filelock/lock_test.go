package filelock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"golang.org/x/sys/unix"

	"github.com/cloudtransit/transit/clock/clocktest"
)

func hostname(t *testing.T) string {
	t.Helper()
	h, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func mustRelease(t *testing.T, l *Lock) {
	t.Helper()
	if err := l.Release(); err != nil {
		t.Error(err)
	}
}

func acquire(t *testing.T, path string, opts Options) *Lock {
	t.Helper()
	l, err := Acquire(t.Context(), path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mustRelease(t, l) })
	return l
}

// lockedError asserts err is a *LockedError matching ErrLocked.
func lockedError(t *testing.T, err error) *LockedError {
	t.Helper()
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("got %v, want ErrLocked", err)
	}
	var lerr *LockedError
	if !errors.As(err, &lerr) {
		t.Fatalf("got %T, want *LockedError", err)
	}
	return lerr
}

func TestAcquireRecordsHolderAndReleaseClears(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "resources.json")
	l, err := Acquire(t.Context(), path, Options{Command: "transit apply"})
	if err != nil {
		t.Fatal(err)
	}
	if l.Previous != nil {
		t.Errorf("fresh lock file reports a previous holder: %+v", l.Previous)
	}
	want := Holder{PID: os.Getpid(), Host: hostname(t), Command: "transit apply"}
	if diff := cmp.Diff(want, l.Holder, cmpopts.IgnoreFields(Holder{}, "Started")); diff != "" {
		t.Errorf("holder (-want +got):\n%s", diff)
	}

	data, err := os.ReadFile(path + ".lock")
	if err != nil {
		t.Fatal(err)
	}
	var recorded Holder
	if err := json.Unmarshal(data, &recorded); err != nil {
		t.Fatalf("lock file %q: %v", data, err)
	}
	if diff := cmp.Diff(l.Holder, recorded); diff != "" {
		t.Errorf("lock file records (-want +got):\n%s", diff)
	}
	fi, err := os.Stat(path + ".lock")
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Errorf("lock file mode %v, want 0600", perm)
	}

	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(); err != nil {
		t.Errorf("second release: %v", err)
	}
	if fi, err := os.Stat(path + ".lock"); err != nil {
		t.Error(err)
	} else if fi.Size() != 0 {
		t.Errorf("lock file has %d bytes after release, want none", fi.Size())
	}

	// A cleanly released lock leaves nothing to report.
	l2 := acquire(t, path, Options{})
	if l2.Previous != nil {
		t.Errorf("previous holder after a clean release: %+v", l2.Previous)
	}
}

func TestLockDescriptorIsCloseOnExec(t *testing.T) {
	t.Parallel()
	l := acquire(t, filepath.Join(t.TempDir(), "resources.json"), Options{})
	flags, err := unix.FcntlInt(l.f.Fd(), unix.F_GETFD, 0)
	if err != nil {
		t.Fatal(err)
	}
	if flags&unix.FD_CLOEXEC == 0 {
		t.Error("lock descriptor is inherited by child processes")
	}
}

// flock locks belong to the open file description, so a second Acquire in
// the same process conflicts like another process would.
func TestAcquireHeldFailsAtOnce(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "resources.json")
	first := acquire(t, path, Options{Command: "transit apply"})

	waited := false
	_, err := Acquire(t.Context(), path, Options{Waiting: func(*LockedError) { waited = true }})
	lerr := lockedError(t, err)
	if waited || lerr.Waited != 0 {
		t.Errorf("waited (callback %v, %v) with Timeout 0", waited, lerr.Waited)
	}
	if diff := cmp.Diff(&first.Holder, lerr.Holder); diff != "" {
		t.Errorf("holder (-want +got):\n%s", diff)
	}
	if lerr.HolderGone || lerr.Path != path || lerr.File != path+".lock" {
		t.Errorf("got %+v", lerr)
	}
	wantMsg := fmt.Sprintf(`%s is locked by pid %d on host %s ("transit apply", started `, path, os.Getpid(), hostname(t))
	if msg := err.Error(); !strings.HasPrefix(msg, wantMsg) || !strings.HasSuffix(msg, "; wait for it or pass --lock-timeout") {
		t.Errorf("message %q, want %q...", msg, wantMsg)
	}
}

func TestAcquireWaitsForRelease(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "resources.json")
	first := acquire(t, path, Options{Command: "first"})
	var calls int
	second := acquire(t, path, Options{
		Timeout: time.Minute,
		Command: "second",
		Waiting: func(e *LockedError) {
			calls++
			if e.Holder == nil || e.Holder.Command != "first" {
				t.Errorf("waiting for %+v, want the first holder", e.Holder)
			}
			mustRelease(t, first) // let the waiter in
		},
	})
	if calls != 1 {
		t.Errorf("Waiting called %d times, want 1", calls)
	}
	if second.Previous != nil {
		t.Errorf("previous holder after a clean release: %+v", second.Previous)
	}
}

func TestAcquireTimesOut(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "resources.json")
	acquire(t, path, Options{})
	const timeout = 100 * time.Millisecond
	_, err := Acquire(t.Context(), path, Options{Timeout: timeout})
	lerr := lockedError(t, err)
	if lerr.Waited < timeout || lerr.Err != nil {
		t.Errorf("waited %v (err %v), want at least %v", lerr.Waited, lerr.Err, timeout)
	}
	if !strings.Contains(err.Error(), "still locked after waiting") {
		t.Errorf("message %q", err)
	}
}

func TestAcquireUsesClock(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "resources.json")
	acquire(t, path, Options{})
	clk := clocktest.NewFake(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
	_, err := Acquire(t.Context(), path, Options{Timeout: time.Hour, Clock: clk})
	lerr := lockedError(t, err)
	if lerr.Waited != time.Hour {
		t.Errorf("waited %v, want 1h", lerr.Waited)
	}
	// Backoff doubles up to its cap: far fewer attempts than 1h/20ms.
	if maxSleeps, n := int(time.Hour/maxBackoff)+10, len(clk.Sleeps()); n > maxSleeps {
		t.Errorf("%d sleeps, want at most %d", n, maxSleeps)
	}
}

func TestAcquireStopsWhenContextEnds(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "resources.json")
	acquire(t, path, Options{})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	_, err := Acquire(ctx, path, Options{Timeout: -1, Waiting: func(*LockedError) { cancel() }})
	if lerr := lockedError(t, err); lerr.Err == nil {
		t.Error("LockedError.Err is nil, want why waiting stopped")
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want context.Canceled", err)
	}
	if !strings.Contains(err.Error(), "context canceled") {
		t.Errorf("message %q does not say why waiting stopped", err)
	}

	// An ended context fails before touching the lock.
	if _, err := Acquire(ctx, filepath.Join(t.TempDir(), "other.json"), Options{}); !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want context.Canceled", err)
	}
}

// TestAcquireTakesOverFromKilledHolder: a holder killed with SIGKILL loses
// its flock, and the next run takes the lock and reports it.
func TestAcquireTakesOverFromKilledHolder(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "resources.json")
	h := startHelper(t, "hold", path)
	h.expect(t, "locked")
	pid := h.cmd.Process.Pid

	_, err := Acquire(t.Context(), path, Options{})
	lerr := lockedError(t, err)
	if lerr.Holder == nil || lerr.Holder.PID != pid || lerr.Holder.Command != "helper hold" || lerr.HolderGone {
		t.Fatalf("got %+v holder %+v, want live pid %d", lerr, lerr.Holder, pid)
	}

	h.kill(t)
	l := acquire(t, path, Options{})
	if l.Previous == nil || l.Previous.PID != pid || l.Previous.Host != hostname(t) {
		t.Fatalf("previous holder %+v, want pid %d on this host", l.Previous, pid)
	}
	if l.Holder.PID != os.Getpid() {
		t.Errorf("holder pid %d, want %d", l.Holder.PID, os.Getpid())
	}
}

// TestAcquireReportsGoneHolder: the flock is held but the recorded process
// has exited, as when a child inherited the lock descriptor.
func TestAcquireReportsGoneHolder(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "resources.json")
	h := startHelper(t, "hold", path)
	h.expect(t, "locked")

	dead := startHelper(t, "exit", path)
	if err := dead.cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	deadPID := dead.cmd.Process.Pid
	gone := Holder{PID: deadPID, Host: hostname(t), Command: "transit apply", Started: time.Now().Add(-time.Hour)}
	data, err := json.Marshal(gone)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path+".lock", data, 0o600); err != nil { // flock is advisory
		t.Fatal(err)
	}

	_, err = Acquire(t.Context(), path, Options{})
	lerr := lockedError(t, err)
	if !lerr.HolderGone {
		t.Errorf("holder pid %d reported alive", deadPID)
	}
	if want := "pid " + strconv.Itoa(deadPID) + " has exited but the lock is still held"; !strings.Contains(err.Error(), want) {
		t.Errorf("message %q, want it to contain %q", err, want)
	}
}

func TestAcquireIgnoresUnreadableMetadata(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "resources.json")
	if err := os.WriteFile(path+".lock", []byte("not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	l := acquire(t, path, Options{})
	if l.Previous != nil {
		t.Errorf("previous holder %+v from garbage", l.Previous)
	}
}

func TestLockedErrorMessage(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 22, 10, 3, 20, 0, time.UTC)
	holder := &Holder{PID: 4242, Host: "ci-7", Command: "transit apply", Started: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)}
	// Acquire guards a file with "<file>.lock"; FlockContext locks the
	// file it guards (Path and File are the same).
	const state, lock = "resources.json", "resources.json.lock"
	tests := []struct {
		name string
		err  *LockedError
		want string
	}{
		{
			name: "held",
			err:  &LockedError{Path: state, File: lock, Holder: holder, At: at},
			want: `resources.json is locked by pid 4242 on host ci-7 ("transit apply", started 2026-11-22T10:00:00Z, 3m ago); wait for it or pass --lock-timeout`,
		},
		{
			name: "timed out",
			err:  &LockedError{Path: state, File: lock, Holder: holder, At: at, Waited: 30 * time.Second},
			want: `resources.json is locked by pid 4242 on host ci-7 ("transit apply", started 2026-11-22T10:00:00Z, 3m ago); still locked after waiting 30s; wait for it or pass a longer --lock-timeout`,
		},
		{
			name: "canceled",
			err:  &LockedError{Path: state, File: lock, Holder: holder, At: at, Waited: 2 * time.Second, Err: context.Canceled},
			want: `resources.json is locked by pid 4242 on host ci-7 ("transit apply", started 2026-11-22T10:00:00Z, 3m ago); stopped waiting after 2s: context canceled`,
		},
		{
			name: "holder gone",
			err:  &LockedError{Path: state, File: lock, Holder: holder, HolderGone: true, At: at},
			want: "resources.json is locked by pid 4242 on host ci-7 (\"transit apply\", started 2026-11-22T10:00:00Z, 3m ago); pid 4242 has exited but the lock is still held, most likely by a process it started; find it with `fuser -v resources.json.lock`; wait for it or pass --lock-timeout",
		},
		{
			name: "no holder recorded",
			err:  &LockedError{Path: state, File: lock, At: at},
			want: `resources.json is locked by another process (resources.json.lock names no holder); wait for it or pass --lock-timeout`,
		},
		{
			name: "flock canceled",
			err:  &LockedError{Path: "/s/k.lock", File: "/s/k.lock", Holder: holder, At: at, Waited: 2 * time.Second, Err: context.Canceled},
			want: `/s/k.lock is locked by pid 4242 on host ci-7 ("transit apply", started 2026-11-22T10:00:00Z, 3m ago); stopped waiting after 2s: context canceled`,
		},
		{
			name: "flock holder gone",
			err:  &LockedError{Path: "/s/k.lock", File: "/s/k.lock", Holder: holder, HolderGone: true, At: at, Waited: time.Second, Err: context.DeadlineExceeded},
			want: "/s/k.lock is locked by pid 4242 on host ci-7 (\"transit apply\", started 2026-11-22T10:00:00Z, 3m ago); pid 4242 has exited but the lock is still held, most likely by a process it started; find it with `fuser -v /s/k.lock`; stopped waiting after 1s: context deadline exceeded",
		},
		{
			name: "flock no holder recorded",
			err:  &LockedError{Path: "/s/k.lock", File: "/s/k.lock", At: at, Waited: time.Second, Err: context.DeadlineExceeded},
			want: `/s/k.lock is locked by another process (/s/k.lock names no holder); stopped waiting after 1s: context deadline exceeded`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestAge(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		-time.Second:                "0s",
		12 * time.Second:            "12s",
		3*time.Minute + time.Second: "3m",
		2*time.Hour + 5*time.Minute: "2h5m",
		50 * time.Hour:              "2d",
	} {
		if got := age(d); got != want {
			t.Errorf("age(%v) = %q, want %q", d, got, want)
		}
	}
}
