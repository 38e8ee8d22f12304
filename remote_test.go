package transit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudtransit/transit"
	"github.com/cloudtransit/transit/control"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/statestore"
	"github.com/cloudtransit/transit/statestore/memstore"
	"github.com/cloudtransit/transit/statestore/seal"
)

// runner is one CI runner of a team: a fresh working directory with only
// the repository's files, against one shared remote store and cloud.
type runner struct {
	*world
	store *memstore.Store
	key   string
}

// newRunners makes n runners sharing a store, a cloud and a platform.
func newRunners(t *testing.T, n int) []*runner {
	t.Helper()
	// Local copies of a remote state go to the temporary directory: this
	// test's own.
	t.Setenv("TMPDIR", t.TempDir())
	_, key, err := seal.Generate()
	if err != nil {
		t.Fatal(err)
	}
	store := memstore.New()
	first := newWorld(t)
	first.cloud.guard = "" // the lock is the store's, not a file's
	rs := []*runner{{world: first, store: store, key: key}}
	for range n - 1 {
		w := newWorld(t)
		w.cloud, w.platform, w.clock = first.cloud, first.platform, first.clock
		rs = append(rs, &runner{world: w, store: store, key: key})
	}
	return rs
}

func (r *runner) options(a transit.Access, command string) transit.Options {
	o := r.world.options(a, command)
	o.Files.State = "mem://bucket/prod"
	o.Stores = map[string]transit.StoreFunc{"mem": func(context.Context, *url.URL, transit.StoreEnv) (statestore.Store, error) {
		return r.store, nil
	}}
	o.StateKey = r.key
	return o
}

func (r *runner) open(t *testing.T, a transit.Access, command string) *transit.Session {
	t.Helper()
	return openSession(t, r.options(a, command))
}

func (r *runner) apply(t *testing.T) transit.Result {
	t.Helper()
	s := r.open(t, transit.Change, "transit apply")
	res, err := s.Apply(t.Context(), transit.ApplyOptions{})
	if err != nil || !res.Converged {
		t.Fatalf("apply: %+v, %v", res, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return res
}

func storedState(t *testing.T, s *memstore.Store) districts.Resources {
	t.Helper()
	obj, err := s.Get(t.Context(), "resources.json")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "resources.json")
	if err := os.WriteFile(path, obj.Data, 0o600); err != nil {
		t.Fatal(err)
	}
	res, err := districts.LoadResources(path)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// Runner A creates the cluster; runner B, with nothing local, changes it
// with the state, key and pins A left in the store, and nothing secret is
// stored or left behind in the clear.
func TestRemoteStateTwoRunners(t *testing.T) {
	rs := newRunners(t, 2)
	a, b := rs[0], rs[1]
	a.apply(t)
	ctx := t.Context()

	st := storedState(t, a.store)
	if len(st.Nodes) != 16 || st.Cluster == "" {
		t.Fatalf("stored state: %d nodes of %q, want 16", len(st.Nodes), st.Cluster)
	}
	entries, err := a.store.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name)
		obj, _ := a.store.Get(ctx, e.Name)
		if bytes.Contains(obj.Data, []byte("PRIVATE KEY")) {
			t.Errorf("%s holds a private key in the clear", e.Name)
		}
	}
	key := "transit-" + st.Cluster + ".key"
	for _, want := range []string{"resources.json", key + ".age", key + ".pub", "resources.json.history/" + strconv.FormatInt(st.Serial, 10)} {
		found := false
		for _, n := range names {
			found = found || n == want || strings.HasPrefix(want, "resources.json.history/") && strings.HasPrefix(n, "resources.json.history/") && strings.HasSuffix(n, strconv.FormatInt(st.Serial, 10))
		}
		if !found {
			t.Errorf("the store lacks %s; it holds %v", want, names)
		}
	}
	if _, err := a.store.Get(ctx, "lock"); !errors.Is(err, statestore.ErrNotFound) {
		t.Errorf("the lock outlived the run: %v", err)
	}
	if left, _ := filepath.Glob(filepath.Join(os.TempDir(), "transit-state-*")); len(left) > 0 {
		t.Errorf("local copies left behind: %v", left)
	}
	for _, f := range []string{"resources.json", key} {
		if _, err := os.Stat(a.path(f)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s written beside cluster.json: %v", f, err)
		}
	}

	// B scales out: its machines get the cluster's key, A's, not one of
	// its own.
	b.setQuantity(t, "gce-europe", "worker", 5)
	launchedWith := a.cloud.authorizedKeys()
	res := b.apply(t)
	if res.Rounds == 0 {
		t.Fatal("B's apply did nothing")
	}
	if after := b.cloud.authorizedKeys(); len(after) != 1 || len(launchedWith) != 1 || after[0] != launchedWith[0] {
		t.Fatalf("machines were launched with keys %v, then %v: B made a key of its own", launchedWith, after)
	}
	if got := storedState(t, b.store); got.Serial <= st.Serial {
		t.Fatalf("B's state serial %d, A's %d", got.Serial, st.Serial)
	}
}

// A remote state without its key, or with another, is refused before
// anything is made: no new key pair ever replaces the cluster's.
func TestRemoteStateKeyRefused(t *testing.T) {
	rs := newRunners(t, 1)
	a := rs[0]
	a.apply(t)
	st := storedState(t, a.store)
	sealedKey := "transit-" + st.Cluster + ".key.age"
	before, err := a.store.Get(t.Context(), sealedKey)
	if err != nil {
		t.Fatal(err)
	}
	_, other, _ := seal.Generate()
	for _, c := range []struct{ key, want string }{
		{"", "set TRANSIT_STATE_KEY"},
		{other, "sealed with another key"},
		{"not-a-key", "age identity"},
	} {
		o := a.options(transit.Change, "transit apply")
		o.StateKey = c.key
		s, err := transit.Open(t.Context(), o)
		if err == nil {
			_ = s.Close()
			t.Fatalf("key %q: opened", c.key)
		}
		if !strings.Contains(err.Error(), c.want) || (c.key != "" && strings.Contains(err.Error(), c.key)) {
			t.Errorf("key %q: %v, want an error saying %q and not repeating the key", c.key, err, c.want)
		}
	}
	after, _ := a.store.Get(t.Context(), sealedKey)
	if after.Version != before.Version {
		t.Fatal("the cluster's key was replaced")
	}
	if _, err := a.store.Get(t.Context(), "lock"); !errors.Is(err, statestore.ErrNotFound) {
		t.Errorf("a refused run left its lock: %v", err)
	}
	// Reading the state needs no key.
	o := a.options(transit.ReadState, "transit status")
	o.StateKey = ""
	s, err := transit.Open(t.Context(), o)
	if err != nil {
		t.Fatalf("read without a key: %v", err)
	}
	if len(s.State().Nodes) != 16 {
		t.Errorf("read %d nodes", len(s.State().Nodes))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// Two runners at once: the second is refused, naming the first.
func TestRemoteStateLocked(t *testing.T) {
	rs := newRunners(t, 2)
	a, b := rs[0], rs[1]
	a.open(t, transit.Change, "transit apply")
	_, err := transit.Open(t.Context(), b.options(transit.Change, "transit apply"))
	if !errors.Is(err, transit.ErrLocked) {
		t.Fatalf("second runner: %v, want ErrLocked", err)
	}
	host, _ := os.Hostname()
	for _, want := range []string{"mem://test", host, `"transit apply"`, "transit force-unlock "} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
}

// A write another run made while this one applied (a broken lock) is never
// overwritten: the run stops at its next save, naming the conflict.
func TestRemoteStateConflictStops(t *testing.T) {
	rs := newRunners(t, 1)
	a := rs[0]
	ctx := t.Context()
	s := a.open(t, transit.Change, "transit apply")
	var once sync.Once
	var intruder []byte
	_, err := s.Apply(ctx, transit.ApplyOptions{OnEvent: func(e transit.Event) {
		if e.Type != control.EventAction || e.Phase != control.PhaseFinish {
			return
		}
		once.Do(func() {
			obj, err := a.store.Get(ctx, "resources.json")
			if err != nil {
				t.Error(err)
				return
			}
			intruder = append(bytes.TrimSpace(obj.Data), '\n', '\n')
			if _, err := a.store.Put(ctx, "resources.json", intruder, obj.Version); err != nil {
				t.Error(err)
			}
		})
	}})
	if !errors.Is(err, statestore.ErrConflict) || !strings.Contains(err.Error(), "resources.json") {
		t.Fatalf("apply: %v, want a conflict on resources.json", err)
	}
	if errors.Is(err, control.ErrNotConverged) {
		t.Errorf("a conflict reads as not converged (exit 3), want an error (exit 1): %v", err)
	}
	if obj, _ := a.store.Get(ctx, "resources.json"); !bytes.Equal(obj.Data, intruder) {
		t.Fatal("the other run's write was overwritten")
	}
}

// deadPID is the pid of a process that ended.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

// A run killed with its local copy open leaves it behind; the next run
// removes it (it holds an opened key), and leaves a live run's alone.
func TestRemoteStateLeftoverCopies(t *testing.T) {
	rs := newRunners(t, 1)
	a := rs[0]
	tmp := os.TempDir()
	dead := filepath.Join(tmp, "transit-state-c1-dead")
	live := filepath.Join(tmp, "transit-state-c1-live")
	for dir, pid := range map[string]int{dead: deadPID(t), live: os.Getpid()} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "pid"), []byte(strconv.Itoa(pid)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	a.open(t, transit.ReadState, "transit status")
	if _, err := os.Stat(dead); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a dead run's copy stayed: %v", err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("a live run's copy went: %v", err)
	}
}

// baseFailing fails writes of the state object once fail is set: a run
// that dies before it writes the state whole again.
type baseFailing struct {
	*memstore.Store
	fail atomic.Bool
}

func (b *baseFailing) Put(ctx context.Context, name string, data []byte, ifVersion string) (string, error) {
	if b.fail.Load() && name == "resources.json" {
		return "", errors.New("connection reset by peer")
	}
	return b.Store.Put(ctx, name, data, ifVersion)
}

func (b *baseFailing) Lock(ctx context.Context, o statestore.LockOptions) (statestore.Lock, error) {
	return statestore.AcquireLease(ctx, b, memstore.LockName, o)
}

// A save costs a small object, not the whole state: the store holds the
// journal's lines while the run goes on; a run that dies before it wrote
// the state whole leaves them, readers apply them, and the next run folds
// them into the state object.
func TestRemoteStateJournal(t *testing.T) {
	rs := newRunners(t, 2)
	a, b := rs[0], rs[1]
	store := &baseFailing{Store: a.store}
	ctx := t.Context()
	o := a.options(transit.Change, "transit apply")
	o.Stores = map[string]transit.StoreFunc{"mem": func(context.Context, *url.URL, transit.StoreEnv) (statestore.Store, error) { return store, nil }}
	s, err := transit.Open(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	most := 0
	_, err = s.Apply(ctx, transit.ApplyOptions{OnEvent: func(e transit.Event) {
		if e.Type == control.EventAction && e.Phase == control.PhaseFinish {
			store.fail.Store(true) // the run dies before its state is whole again
			lines, _ := a.store.List(context.Background(), "resources.json.journal/")
			mu.Lock()
			most = max(most, len(lines))
			mu.Unlock()
		}
	}})
	if err == nil {
		t.Fatal("apply succeeded although the state object could not be written")
	}
	if most < 5 {
		t.Fatalf("at most %d journal lines in the store during the run: the saves did not go to the journal", most)
	}
	info := lockInfo(t, a.store)
	if err := a.store.ForceUnlock(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	read := openSession(t, b.options(transit.ReadState, "transit status"))
	got := read.State()
	if got.Serial < 2 || len(got.Nodes) == 0 {
		t.Fatalf("a reader sees serial %d with %d nodes: the lines were not applied", got.Serial, len(got.Nodes))
	}
	next := openSession(t, b.options(transit.Change, "transit apply"))
	if next.State().Serial != got.Serial {
		t.Fatalf("the next run starts from serial %d, the reader saw %d", next.State().Serial, got.Serial)
	}
	if left, _ := a.store.List(ctx, "resources.json.journal/"); len(left) > 0 {
		t.Fatalf("the next run left the dead run's lines: %v", left)
	}
	if st := storedState(t, a.store); st.Serial != got.Serial || len(st.Nodes) != len(got.Nodes) {
		t.Fatalf("the state object after the fold: serial %d, %d nodes; want %d, %d", st.Serial, len(st.Nodes), got.Serial, len(got.Nodes))
	}
}

func lockInfo(t *testing.T, s *memstore.Store) statestore.LockInfo {
	t.Helper()
	obj, err := s.Get(t.Context(), memstore.LockName)
	if err != nil {
		t.Fatal(err)
	}
	var info statestore.LockInfo
	if err := json.Unmarshal(obj.Data, &info); err != nil {
		t.Fatal(err)
	}
	return info
}

// A state that records machines whose store lost the cluster's SSH key (a
// deleted object, a lifecycle rule, a push into a new store, a state file
// copied without its key) is refused, naming the key and how to restore
// it: a new key pair would lock transit out of every machine.
func TestMissingKeyRefused(t *testing.T) {
	t.Run("Remote", func(t *testing.T) {
		rs := newRunners(t, 1)
		a := rs[0]
		a.apply(t)
		ctx := t.Context()
		st := storedState(t, a.store)
		sealed := "transit-" + st.Cluster + ".key.age"
		obj, err := a.store.Get(ctx, sealed)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.store.Delete(ctx, sealed, obj.Version); err != nil {
			t.Fatal(err)
		}
		for _, access := range []transit.Access{transit.Observe, transit.Change} {
			s, err := transit.Open(ctx, a.options(access, "transit apply"))
			if err == nil {
				_ = s.Close()
				t.Fatalf("access %v: opened a state of %d nodes without its key", access, len(st.Nodes))
			}
			for _, want := range []string{"mem://", sealed, "is missing", "state migrate", "earlier version"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("access %v: %q does not say %q", access, err, want)
				}
			}
			if !errors.Is(err, transit.ErrConfig) {
				t.Errorf("access %v: %v, want ErrConfig", access, err)
			}
		}
		if _, err := a.store.Get(ctx, sealed); !errors.Is(err, statestore.ErrNotFound) {
			t.Fatalf("a key was stored in the lost one's place: %v", err)
		}
		if _, err := a.store.Get(ctx, "lock"); !errors.Is(err, statestore.ErrNotFound) {
			t.Errorf("the refused run left its lock: %v", err)
		}
	})
	t.Run("Path", func(t *testing.T) {
		w := newWorld(t)
		applyWith(t, w.options(transit.Change, "transit apply"))
		st := w.state(t)
		key := w.path("transit-" + st.Cluster + ".key")
		if err := os.Remove(key); err != nil {
			t.Fatal(err)
		}
		_, err := transit.Open(t.Context(), w.options(transit.Change, "transit apply"))
		if err == nil {
			t.Fatal("opened a state of nodes without its key")
		}
		for _, want := range []string{key, "is missing", "state migrate", "backup"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%q does not say %q", err, want)
			}
		}
		if _, err := os.Stat(key); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("a key was made in the lost one's place: %v", err)
		}
	})
}

// lockPausing is a store whose lease writes hang while paused, as a
// process stopped (SIGSTOP, a paused VM) renews nothing; its lease is
// short, for a test.
type lockPausing struct {
	*memstore.Store
	paused atomic.Bool
}

func (p *lockPausing) Put(ctx context.Context, name string, data []byte, ifVersion string) (string, error) {
	for name == memstore.LockName && p.paused.Load() {
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return p.Store.Put(ctx, name, data, ifVersion)
}

func (p *lockPausing) Lock(ctx context.Context, o statestore.LockOptions) (statestore.Lock, error) {
	o.Lease = time.Second
	return statestore.AcquireLease(ctx, p, memstore.LockName, o)
}

// pausingRun is a runner's apply session on a lockPausing store.
func pausingRun(t *testing.T) (*runner, *lockPausing, *transit.Session) {
	a := newRunners(t, 1)[0]
	store := &lockPausing{Store: a.store}
	o := a.options(transit.Change, "transit apply")
	o.Stores = map[string]transit.StoreFunc{"mem": func(context.Context, *url.URL, transit.StoreEnv) (statestore.Store, error) { return store, nil }}
	return a, store, openSession(t, o)
}

// A run whose lease could not be renewed past its deadline (the process
// was paused) starts no further action and writes nothing more: the
// apply ends with ErrLockLost, not as an interruption.
func TestPausedHolderStops(t *testing.T) {
	a, store, s := pausingRun(t)
	var mu sync.Mutex
	paused, startedAfter := false, 0
	var writtenAt int32
	// Paused at the loop's plan, when no action is under way (one that
	// passed the fence before the deadline may rightly run on).
	_, err := s.Apply(t.Context(), transit.ApplyOptions{OnEvent: func(e transit.Event) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case paused && e.Type == control.EventAction && e.Phase == control.PhaseStart:
			startedAfter++
		case !paused && e.Type == control.EventPlan:
			paused = true
			store.paused.Store(true)
			time.Sleep(1200 * time.Millisecond) // past the holder's deadline (0.75 s)
			writtenAt = a.store.Puts.Load()
		}
	}})
	store.paused.Store(false)
	if !errors.Is(err, statestore.ErrLockLost) || errors.Is(err, context.Canceled) {
		t.Fatalf("apply paused past its lease: %v, want ErrLockLost", err)
	}
	if startedAfter > 0 {
		t.Errorf("%d actions started after the lease ran out", startedAfter)
	}
	if puts := a.store.Puts.Load(); puts > writtenAt {
		t.Errorf("%d writes to the store after the lease ran out", puts-writtenAt)
	}
}

// A run paused while it makes its plan, before the loop starts (the
// clouds' listings are slow), ends with ErrLockLost too: whatever step the
// lock's loss cancels, it is the loss that ends the run.
func TestPausedWhilePlanning(t *testing.T) {
	a, store, s := pausingRun(t)
	var once sync.Once
	a.cloud.onList = func(ctx context.Context) {
		once.Do(func() {
			store.paused.Store(true)
			select { // past the holder's deadline (0.75 s)
			case <-ctx.Done():
			case <-time.After(5 * time.Second):
			}
			store.paused.Store(false)
		})
	}
	planned := false
	_, err := s.Apply(t.Context(), transit.ApplyOptions{OnPlan: func(transit.Plan) error { planned = true; return nil }})
	if !errors.Is(err, statestore.ErrLockLost) || errors.Is(err, context.Canceled) {
		t.Fatalf("apply paused while planning: %v, want ErrLockLost", err)
	}
	if planned {
		t.Error("a plan was shown although the lock went while it was made")
	}
}

// A lock forced while its holder still runs (it was only cut off):
// force-unlock writes the state with the next serial, so the holder's
// next save is refused at the store and the run stops, whatever its
// renewal has noticed; the other run's state is never overwritten.
func TestForcedHolderRefusedAtTheStore(t *testing.T) {
	rs := newRunners(t, 1)
	a := rs[0]
	ctx := t.Context()
	s := a.open(t, transit.Change, "transit apply")
	var once sync.Once
	var fenced []byte
	_, err := s.Apply(ctx, transit.ApplyOptions{OnEvent: func(e transit.Event) {
		if e.Type != control.EventAction || e.Phase != control.PhaseFinish {
			return
		}
		once.Do(func() {
			info := lockInfo(t, a.store)
			if err := transit.ForceUnlock(ctx, a.options(transit.Change, "transit force-unlock"), info.ID); err != nil {
				t.Error(err)
			}
			obj, err := a.store.Get(ctx, "resources.json")
			if err != nil {
				t.Error(err)
				return
			}
			fenced = obj.Data
		})
	}})
	if !errors.Is(err, statestore.ErrConflict) {
		t.Fatalf("apply whose lock was forced: %v, want a conflict at its next write", err)
	}
	if obj, _ := a.store.Get(ctx, "resources.json"); !bytes.Equal(obj.Data, fenced) {
		t.Error("the forced holder wrote the state after the fence")
	}
}
