package filestore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/cloudtransit/transit/atomicfile"
	"github.com/cloudtransit/transit/filelock"
	"github.com/cloudtransit/transit/statestore"
	"github.com/cloudtransit/transit/statestore/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) statestore.Store { return newStore(t) }, storetest.Options{KernelLock: true})
}

// newStore is a store in a fresh directory, its state file resources.json.
func newStore(t *testing.T) *Store {
	t.Helper()
	s, err := New(filepath.Join(t.TempDir(), "resources.json"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func hostname(t *testing.T) string {
	t.Helper()
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	return host
}

func mustPut(t *testing.T, s *Store, name, data, ifVersion string) string {
	t.Helper()
	v, err := s.Put(t.Context(), name, []byte(data), ifVersion)
	if err != nil {
		t.Fatalf("Put %s: %v", name, err)
	}
	return v
}

// wantObject checks that name holds data at version.
func wantObject(t *testing.T, s *Store, name, data, version string) {
	t.Helper()
	obj, err := s.Get(t.Context(), name)
	if err != nil || string(obj.Data) != data || obj.Version != version {
		t.Fatalf("%s holds %q at %q (%v), want %q at %q", name, obj.Data, obj.Version, err, data, version)
	}
}

func listNames(t *testing.T, s *Store, prefix string) []string {
	t.Helper()
	entries, err := s.List(t.Context(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{}
	for _, e := range entries {
		names = append(names, e.Name)
	}
	return names
}

// The store is today's directory: objects are its files, with the modes
// transit has always used, and a file written before the store existed is
// an object.
func TestLayout(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := New(filepath.Join(dir, "resources.json"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Location() != dir || s.StateName() != "resources.json" {
		t.Errorf("Location %q, StateName %q; want %q and resources.json", s.Location(), s.StateName(), dir)
	}

	v := mustPut(t, s, "resources.json", `{"serial": 1}`, statestore.NoVersion)
	sum := sha256.Sum256([]byte(`{"serial": 1}`))
	if v != hex.EncodeToString(sum[:16]) || v != Version([]byte(`{"serial": 1}`)) {
		t.Errorf("version %q, want the content's sha256 (first 16 bytes)", v)
	}
	mustPut(t, s, "resources.json.history/000000000001", `{"serial": 1}`, statestore.NoVersion)
	for p, want := range map[string]fs.FileMode{
		"resources.json":                      0o600,
		"resources.json.history":              fs.ModeDir | 0o700,
		"resources.json.history/000000000001": 0o600,
	} {
		fi, err := os.Stat(filepath.Join(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("%s: mode %v, want %v", p, fi.Mode(), want)
		}
	}
	if data, err := os.ReadFile(filepath.Join(dir, "resources.json")); err != nil || string(data) != `{"serial": 1}` {
		t.Errorf("resources.json holds %q (%v)", data, err)
	}

	// Written as an older transit does, outside the store.
	old := filepath.Join(dir, "transit-c1.known_hosts")
	if err := os.WriteFile(old, []byte("host ssh-ed25519 AAAA\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wantObject(t, s, "transit-c1.known_hosts", "host ssh-ed25519 AAAA\n", Version([]byte("host ssh-ed25519 AAAA\n")))
	v = mustPut(t, s, "transit-c1.known_hosts", "replaced\n", Version([]byte("host ssh-ed25519 AAAA\n")))
	wantObject(t, s, "transit-c1.known_hosts", "replaced\n", v)
}

func TestNew(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tt := range []struct {
		path, want string
	}{
		{"", "no state file path"},
		{filepath.Join(dir, "missing", "resources.json"), "no such file or directory"},
		{dir, "a directory; want the state file's path"},
	} {
		if _, err := New(tt.path); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New(%q): %v, want %q", tt.path, err, tt.want)
		}
	}
	// A relative path is the working directory's, made absolute.
	s, err := New("resources.json")
	if err != nil {
		t.Fatal(err)
	}
	if wd, err := os.Getwd(); err != nil || s.Location() != wd {
		t.Errorf("Location %q, want the working directory %q (%v)", s.Location(), wd, err)
	}
}

// Lock files and temporary files in the directory are no objects: never
// listed, refused as names (writing one would break the lock it is).
func TestStoreFilesAreNotObjects(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	l, err := s.Lock(t.Context(), statestore.LockOptions{Command: "transit apply"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := l.Release(t.Context()); err != nil {
			t.Error(err)
		}
	}()
	v := mustPut(t, s, "resources.json", "{}", statestore.NoVersion)
	mustPut(t, s, "sub/object", "x", statestore.NoVersion)
	for _, f := range []string{"transit-c1.known_hosts.lock", "transit-c1.kubeconfig.lock", ".resources.json.tmp-123", "sub/.object.tmp-9"} {
		if err := os.WriteFile(filepath.Join(s.dir, f), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"resources.json.lock", casFile} {
		if _, err := os.Stat(filepath.Join(s.dir, f)); err != nil {
			t.Fatalf("the store's own file: %v", err)
		}
	}
	if diff := cmp.Diff([]string{"resources.json", "sub/object"}, listNames(t, s, "")); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}

	ctx := t.Context()
	for _, name := range []string{"resources.json.lock", casFile, "transit-c1.known_hosts.lock", ".resources.json.tmp-123", "sub/.object.tmp-9", "sub/x.lock"} {
		refused := func(what string, err error) {
			t.Helper()
			if err == nil || errors.Is(err, statestore.ErrNotFound) || !strings.Contains(err.Error(), "lock and temporary files") {
				t.Errorf("%s %q: %v, want the name refused", what, name, err)
			}
		}
		_, err := s.Put(ctx, name, []byte("x"), statestore.NoVersion)
		refused("Put", err)
		_, err = s.Get(ctx, name)
		refused("Get", err)
		_, err = s.Stat(ctx, name)
		refused("Stat", err)
		refused("Delete", s.Delete(ctx, name, v))
	}
	// The lock is whole.
	if _, err := s.Lock(ctx, statestore.LockOptions{}); !errors.Is(err, statestore.ErrLocked) {
		t.Fatalf("the lock after refused writes: %v", err)
	}
	// A directory named like a lock file holds objects as any other.
	mustPut(t, s, "x.lock/y", "y", statestore.NoVersion)
}

// A name cannot be an object and a directory of objects at once; trying
// fails plainly and changes nothing.
func TestObjectAndDirectory(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	v := mustPut(t, s, "a/b", "b", statestore.NoVersion)
	for _, tt := range []struct{ name, want string }{
		{"a", "is a directory of other objects"},
		{"a/b/c", "is an object: it cannot be a directory"},
	} {
		_, err := s.Put(ctx, tt.name, []byte("x"), statestore.NoVersion)
		if err == nil || errors.Is(err, statestore.ErrConflict) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Put %s: %v, want %q", tt.name, err, tt.want)
		}
	}
	wantObject(t, s, "a/b", "b", v)
	if diff := cmp.Diff([]string{"a/b"}, listNames(t, s, "")); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
}

// What is not a regular file is no object: a FIFO (which a read would
// block on) or a symbolic link is not listed, and a FIFO is not read.
func TestOnlyRegularFiles(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	mustPut(t, s, "resources.json.history/000000000001", "1", statestore.NoVersion)
	mustPut(t, s, "other/x", "x", statestore.NoVersion)
	if err := os.Mkdir(filepath.Join(s.dir, ".git"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(s.dir, ".git", "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("other/x", filepath.Join(s.dir, "link")); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"other/x", "resources.json.history/000000000001"}, listNames(t, s, "")); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"resources.json.history/000000000001"}, listNames(t, s, "resources.json")); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
	_, err := s.Get(t.Context(), ".git/fifo")
	if err == nil || errors.Is(err, statestore.ErrNotFound) || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("Get of a FIFO: %v, want a refusal", err)
	}
}

// The store's lock is the state file's lock as transit has always taken
// it: an older transit holding it excludes this store, and the other way
// round. The kernel frees it when its holder dies, and the next run is
// told it took over.
func TestLockIsTheStateFilesLock(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	h := startHelper(t, "hold", s.state, "")
	h.expect(t, "locked")

	_, err := s.Lock(ctx, statestore.LockOptions{Command: "transit apply"})
	var locked *statestore.LockedError
	if !errors.As(err, &locked) || !errors.Is(err, statestore.ErrLocked) {
		t.Fatalf("Lock while an older transit holds the lock: %v", err)
	}
	want := statestore.LockInfo{PID: h.pid(), Host: hostname(t), Command: "helper hold", Started: locked.Holder.Started}
	if diff := cmp.Diff(want, locked.Holder); diff != "" || locked.Holder.Started.IsZero() || locked.Store != s.dir {
		t.Errorf("holder (-want +got):\n%s (store %q)", diff, locked.Store)
	}
	if msg := err.Error(); !strings.Contains(msg, "pid "+strconv.Itoa(h.pid())) || strings.Contains(msg, "force-unlock") {
		t.Errorf("message %q, want the holder named and no force-unlock offered", msg)
	}

	h.kill(t)
	var previous []statestore.LockInfo
	l, err := s.Lock(ctx, statestore.LockOptions{Command: "transit apply", TookOver: func(p statestore.LockInfo) { previous = append(previous, p) }})
	if err != nil {
		t.Fatalf("Lock after the holder died: %v", err)
	}
	if len(previous) != 1 || previous[0].PID != h.pid() || previous[0].Command != "helper hold" {
		t.Errorf("TookOver called with %+v, want the killed helper (pid %d)", previous, h.pid())
	}
	info := l.Info()
	if info.ID != "" || info.PID != os.Getpid() || info.Command != "transit apply" {
		t.Errorf("lock info %+v", info)
	}

	// An older transit (here: the file lock taken directly, as by another
	// process) is refused, naming this run.
	_, err = filelock.Acquire(ctx, s.state, filelock.Options{Command: "older transit"})
	var ferr *filelock.LockedError
	if !errors.As(err, &ferr) || ferr.Holder == nil || ferr.Holder.PID != os.Getpid() || ferr.Holder.Command != "transit apply" || ferr.File != filepath.Join(s.dir, "resources.json.lock") {
		t.Fatalf("the state file's lock while the store holds it: %v", err)
	}
	select {
	case <-l.Lost():
		t.Fatal("a file lock was lost while its holder lives")
	default:
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	fl, err := filelock.Acquire(ctx, s.state, filelock.Options{})
	if err != nil {
		t.Fatalf("the state file's lock after Release: %v", err)
	}
	if err := fl.Release(); err != nil {
		t.Fatal(err)
	}
}

// Force-unlock refuses a lock that a live process holds, naming it and
// saying why; once the holder died there is nothing to force.
func TestForceUnlockRefuses(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	if err := s.ForceUnlock(ctx, "abc"); !errors.Is(err, statestore.ErrNotFound) {
		t.Fatalf("ForceUnlock of a store never locked: %v", err)
	}
	if _, err := os.Stat(s.state + ".lock"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ForceUnlock of a store never locked made its lock file (%v)", err)
	}

	h := startHelper(t, "lock", s.state, "")
	h.expect(t, "locked")
	err := s.ForceUnlock(ctx, strconv.Itoa(h.pid())+"@"+hostname(t))
	var locked *statestore.LockedError
	if !errors.As(err, &locked) || !errors.Is(err, statestore.ErrLocked) || locked.Holder.PID != h.pid() {
		t.Fatalf("ForceUnlock of a live holder's lock: %v, want a refusal naming pid %d", err, h.pid())
	}
	for _, want := range []string{"force-unlock refused", "pid " + strconv.Itoa(h.pid()), `"helper lock"`, "kernel frees", "stop that run"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
	if _, err := s.Lock(ctx, statestore.LockOptions{}); !errors.Is(err, statestore.ErrLocked) {
		t.Fatalf("the lock after a refused force-unlock: %v", err)
	}

	h.kill(t)
	err = s.ForceUnlock(ctx, "abc")
	if !errors.Is(err, statestore.ErrNotFound) || !strings.Contains(err.Error(), "pid "+strconv.Itoa(h.pid())) {
		t.Fatalf("ForceUnlock after the holder died: %v, want ErrNotFound naming the dead holder", err)
	}
	l, err := s.Lock(ctx, statestore.LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Processes writing one object at the version they all read: exactly one
// wins each round, and its content is what the store holds.
func TestRacingProcesses(t *testing.T) {
	t.Parallel()
	const procs, rounds = 4, 4
	s := newStore(t)
	for round := range rounds {
		// Round 0 races to create; the others to replace.
		hs := make([]*helper, procs)
		for i := range hs {
			hs[i] = startHelper(t, "put", s.state, "resources.json")
		}
		for _, h := range hs {
			h.expect(t, "ready")
		}
		for _, h := range hs {
			h.send(t, "go")
		}
		var winners []int
		for _, h := range hs {
			if h.expect(t, "") == "won" {
				winners = append(winners, h.pid())
			}
			h.wait(t)
		}
		if len(winners) != 1 {
			t.Fatalf("round %d: pids %v of %d racing processes won, want one", round, winners, procs)
		}
		obj, err := s.Get(t.Context(), "resources.json")
		if want := "written by pid " + strconv.Itoa(winners[0]); err != nil || string(obj.Data) != want {
			t.Fatalf("round %d: the store holds %q (%v), the winner wrote %q", round, obj.Data, err, want)
		}
	}
}

// Processes (and this one) incrementing one counter, retrying conflicts,
// lose no update.
func TestNoLostUpdateBetweenProcesses(t *testing.T) {
	t.Parallel()
	const procs, each = 3, 15
	s := newStore(t)
	mustPut(t, s, "counter", "0", statestore.NoVersion)
	hs := make([]*helper, procs)
	for i := range hs {
		hs[i] = startHelper(t, "count", s.state, strconv.Itoa(each))
	}
	mine, err := increment(t.Context(), s, "counter", each)
	if err != nil {
		t.Fatal(err)
	}
	conflicts := []string{strconv.Itoa(mine)}
	for _, h := range hs {
		conflicts = append(conflicts, strings.TrimPrefix(h.expect(t, "done"), "done "))
		h.wait(t)
	}
	wantObject(t, s, "counter", strconv.Itoa((procs+1)*each), Version([]byte(strconv.Itoa((procs+1)*each))))
	t.Logf("conflicts retried by each process: %v", conflicts)
}

// A write that crashed half-way left a temporary file: the object reads
// at its old version, is listed once, and the next write at that version
// succeeds.
func TestCrashMidWrite(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"resources.json", "resources.json.history/000000000001"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t)
			ctx := t.Context()
			v := mustPut(t, s, name, `{"serial": 1}`, statestore.NoVersion)

			// Killed while it held the write lock, half-way through
			// writing the temporary file.
			h := startHelper(t, "crash", s.state, name)
			h.expect(t, "writing")
			p := filepath.Join(s.dir, filepath.FromSlash(name))
			tmp := filepath.Join(filepath.Dir(p), atomicfile.TempPrefix(p)+"123456")
			if _, err := os.Stat(tmp); err != nil {
				t.Fatal(err)
			}
			// Meanwhile reads see the old object, and a write waits.
			wantObject(t, s, name, `{"serial": 1}`, v)
			short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			_, err := s.Put(short, name, []byte("while locked"), v)
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("a write while another process writes: %v, want it to wait until its context ends", err)
			}
			h.kill(t)

			wantObject(t, s, name, `{"serial": 1}`, v)
			entries, err := s.List(ctx, "")
			if err != nil || len(entries) != 1 || entries[0].Name != name || entries[0].Version != v {
				t.Fatalf("List after the crash: %+v (%v), want %s at %s alone", entries, err, name, v)
			}
			start := time.Now()
			v2 := mustPut(t, s, name, `{"serial": 2}`, v)
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("the write after the crash took %v", took)
			}
			wantObject(t, s, name, `{"serial": 2}`, v2)
			if _, err := os.Stat(tmp); err != nil {
				t.Errorf("the crashed write's temporary file: %v; it is not the store's to remove", err)
			}
		})
	}
}
