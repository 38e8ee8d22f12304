package transit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudtransit/transit"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/statestore"
	"github.com/cloudtransit/transit/statestore/memstore"
	"github.com/cloudtransit/transit/statestore/s3store/s3test"
	"github.com/cloudtransit/transit/statestore/seal"
)

// onS3 gives the world a credential for the S3 server and returns the
// state URL of a fresh prefix and a state key.
func onS3(t *testing.T, w *world, srv *s3test.Server, prefix string) (location, key string) {
	t.Helper()
	var creds []map[string]any
	data, err := os.ReadFile(w.path("credentials.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &creds); err != nil {
		t.Fatal(err)
	}
	creds = append(creds, map[string]any{"type": "credential", "id": "state", "provider": "aws",
		"aws_access_key_id": s3test.AccessKey, "aws_secret_access_key": s3test.SecretKey})
	data, _ = json.Marshal(creds)
	if err := os.WriteFile(w.path("credentials.json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	_, key, err = seal.Generate()
	if err != nil {
		t.Fatal(err)
	}
	return srv.URL("state", prefix) + "&credential_id=state", key
}

func (w *world) optionsAt(location, key string, a transit.Access, command string) transit.Options {
	o := w.options(a, command)
	o.Files.State, o.Stores, o.StateKey = location, transit.BuiltinStores(), key
	return o
}

func applyWith(t *testing.T, o transit.Options) {
	t.Helper()
	s := openSession(t, o)
	res, err := s.Apply(t.Context(), transit.ApplyOptions{})
	if err != nil || !res.Converged {
		t.Fatalf("apply: %+v, %v", res, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// A local cluster moves into a bucket and back; the run in between, from
// the bucket alone, changes the cluster with the cluster's own key.
func TestMigrateToS3AndBack(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	srv := s3test.Start(t)
	srv.Bucket(t, "state")
	w := newWorld(t)
	w.cloud.guard = ""
	applyWith(t, w.options(transit.Change, "transit apply"))
	local := w.state(t)
	url, key := onS3(t, w, srv, "prod")

	o := w.options(transit.ReadState, "transit state migrate")
	o.Stores, o.StateKey = transit.BuiltinStores(), key
	if err := transit.MigrateState(t.Context(), o, url, false); err != nil {
		t.Fatal(err)
	}
	if err := transit.MigrateState(t.Context(), o, url, false); err == nil || !strings.Contains(err.Error(), "holds a state already") {
		t.Fatalf("a second migrate: %v, want a refusal", err)
	}

	keys := w.cloud.authorizedKeys()
	w.setQuantity(t, "gce-europe", "worker", 5)
	applyWith(t, w.optionsAt(url, key, transit.Change, "transit apply"))
	if after := w.cloud.authorizedKeys(); len(after) != 1 || after[0] != keys[0] {
		t.Fatalf("launched with keys %v after the move, %v before", after, keys)
	}

	back := filepath.Join(t.TempDir(), "resources.json")
	o = w.optionsAt(url, key, transit.ReadState, "transit state migrate")
	if err := transit.MigrateState(t.Context(), o, back, false); err != nil {
		t.Fatal(err)
	}
	got, err := districts.LoadResources(back)
	if err != nil {
		t.Fatal(err)
	}
	if got.Serial <= local.Serial || len(got.Nodes) != len(local.Nodes)+2 || got.Lineage != local.Lineage {
		t.Fatalf("back home: serial %d (was %d), %d nodes (was %d)", got.Serial, local.Serial, len(got.Nodes), len(local.Nodes))
	}
	pub, err := os.ReadFile(filepath.Join(filepath.Dir(back), "transit-"+local.Cluster+".key.pub"))
	if err != nil || !strings.HasPrefix(string(pub), strings.TrimSpace(keys[0])[:20]) {
		t.Fatalf("the key pair did not come back: %v", err)
	}
}

func TestStatePushPullList(t *testing.T) {
	w := newWorld(t)
	w.cloud.guard = ""
	applyWith(t, w.options(transit.Change, "transit apply"))
	w.setQuantity(t, "gce-europe", "worker", 4)
	applyWith(t, w.options(transit.Change, "transit apply"))
	o := w.options(transit.ReadState, "transit state")
	ctx := t.Context()

	past, err := transit.StateHistory(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	cur := w.state(t)
	if len(past) != 3 || !past[0].Current || past[0].Serial != cur.Serial || past[1].Serial != cur.Serial || past[2].Serial >= past[1].Serial {
		t.Fatalf("history %+v, want the current state and the two runs' states", past)
	}
	old, err := transit.PullState(ctx, o, past[2].Serial)
	if err != nil {
		t.Fatal(err)
	}
	now, err := transit.PullState(ctx, o, 0)
	if err != nil {
		t.Fatal(err)
	}
	var oldState districts.Resources
	if err := json.Unmarshal(old, &oldState); err != nil || len(oldState.Nodes) != 16 {
		t.Fatalf("past state: %d nodes, %v", len(oldState.Nodes), err)
	}

	// An older state is refused, unless forced; then it gets the next serial.
	if _, err := transit.PushState(ctx, o, old, false); err == nil || !strings.Contains(err.Error(), "not newer") {
		t.Fatalf("push of an older state: %v", err)
	}
	serial, err := transit.PushState(ctx, o, old, true)
	if err != nil || serial != cur.Serial+1 {
		t.Fatalf("forced push: serial %d, %v; want %d", serial, err, cur.Serial+1)
	}
	if got := w.state(t); len(got.Nodes) != 16 || got.Serial != serial {
		t.Fatalf("after the push: %d nodes at serial %d", len(got.Nodes), got.Serial)
	}
	// Another lineage or cluster is refused.
	other := strings.Replace(string(now), cur.Lineage, "0000000000000000", 1)
	var bumped districts.Resources
	_ = json.Unmarshal([]byte(other), &bumped)
	bumped.Serial = serial + 10
	data, _ := json.Marshal(bumped)
	if _, err := transit.PushState(ctx, o, data, false); err == nil || !strings.Contains(err.Error(), "lineage") {
		t.Fatalf("push of another lineage: %v", err)
	}
	bumped.Lineage, bumped.Cluster = cur.Lineage, "someone-else"
	for i := range bumped.Nodes {
		bumped.Nodes[i].Cluster = "someone-else"
	}
	for i := range bumped.SecurityGroups {
		bumped.SecurityGroups[i].Cluster = "someone-else"
	}
	data, _ = json.Marshal(bumped)
	if _, err := transit.PushState(ctx, o, data, true); err == nil || !strings.Contains(err.Error(), "someone-else") {
		t.Fatalf("push of another cluster, forced: %v", err)
	}
	if _, err := transit.PushState(ctx, o, []byte("{not json"), true); err == nil {
		t.Fatal("push of a broken file succeeded")
	}
}

func TestForceUnlock(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	srv := s3test.Start(t)
	srv.Bucket(t, "state")
	w := newWorld(t)
	w.cloud.guard = ""
	url, key := onS3(t, w, srv, "locked")
	held, err := transit.Open(t.Context(), w.optionsAt(url, key, transit.Change, "transit apply --watch"))
	if err != nil {
		t.Fatal(err)
	}

	_, err = transit.Open(t.Context(), w.optionsAt(url, key, transit.Change, "transit apply"))
	var locked *statestore.LockedError
	if !errors.As(err, &locked) || locked.Holder.ID == "" {
		t.Fatalf("second run: %v, want a lock naming its ID", err)
	}
	o := w.optionsAt(url, key, transit.ReadState, "transit force-unlock")
	if err := transit.ForceUnlock(t.Context(), o, "0123456789abcdef"); err == nil || !strings.Contains(err.Error(), locked.Holder.ID) {
		t.Fatalf("force-unlock with another ID: %v", err)
	}
	if err := transit.ForceUnlock(t.Context(), o, locked.Holder.ID); err != nil {
		t.Fatal(err)
	}
	s := openSession(t, w.optionsAt(url, key, transit.Change, "transit apply"))
	_ = s
	// The run that lost its lock writes nothing more, and says so.
	if err := held.Close(); err == nil || !strings.Contains(err.Error(), "took it over") {
		t.Fatalf("closing the run whose lock was freed: %v, want it told the lock was lost", err)
	}

	// A path's lock is the kernel's: refused, naming the holder.
	local := w.open(t, transit.Change, "transit apply")
	_ = local
	err = transit.ForceUnlock(t.Context(), w.options(transit.ReadState, "transit force-unlock"), "x")
	if err == nil || !strings.Contains(err.Error(), "is locked by pid") {
		t.Fatalf("force-unlock of a file lock: %v", err)
	}
}

// readThenWrite is a store where another run writes the state right after
// a push read it: once the state object has been stat'ed twice (the
// fold's read and the push's own each confirm what they read with a
// Stat), intrude runs.
type readThenWrite struct {
	*memstore.Store
	stats   atomic.Int32
	intrude func()
}

func (r *readThenWrite) Stat(ctx context.Context, name string) (statestore.Entry, error) {
	e, err := r.Store.Stat(ctx, name)
	if name == transit.RemoteStateObject && r.stats.Add(1) == 2 {
		r.intrude()
	}
	return e, err
}

// A push is conditional on the state it checked lineage and serial
// against: a newer state another run writes after the push read it (a
// broken lock) stays, and the push fails, naming the conflict.
func TestStatePushRacingWrite(t *testing.T) {
	rs := newRunners(t, 1)
	a := rs[0]
	a.apply(t)
	ctx := t.Context()
	st := storedState(t, a.store)
	pushed := st
	pushed.Serial = st.Serial + 1
	data, err := json.Marshal(pushed)
	if err != nil {
		t.Fatal(err)
	}
	newer := st
	newer.Serial = st.Serial + 5
	newer.Nodes = st.Nodes[:len(st.Nodes)-1]
	intruder, err := json.Marshal(newer)
	if err != nil {
		t.Fatal(err)
	}
	store := &readThenWrite{Store: a.store, intrude: func() {
		obj, err := a.store.Get(ctx, transit.RemoteStateObject)
		if err == nil {
			_, err = a.store.Put(ctx, transit.RemoteStateObject, intruder, obj.Version)
		}
		if err != nil {
			t.Errorf("the other run's write: %v", err)
		}
	}}
	o := a.options(transit.ReadState, "transit state push")
	o.Stores = map[string]transit.StoreFunc{"mem": func(context.Context, *url.URL, transit.StoreEnv) (statestore.Store, error) { return store, nil }}
	serial, err := transit.PushState(ctx, o, data, false)
	if err == nil {
		t.Fatalf("the push wrote serial %d over the newer state another run wrote after the push read it", serial)
	}
	if !errors.Is(err, statestore.ErrConflict) || !strings.Contains(err.Error(), "nothing was pushed") {
		t.Errorf("push: %v, want a conflict saying nothing was pushed", err)
	}
	if got := storedState(t, a.store); got.Serial != newer.Serial || len(got.Nodes) != len(newer.Nodes) {
		t.Fatalf("the store holds serial %d with %d nodes, the other run wrote serial %d with %d", got.Serial, len(got.Nodes), newer.Serial, len(newer.Nodes))
	}
}

// secretsOnDisk lists the files under dir that hold an opened private key.
func secretsOnDisk(t *testing.T, dir string) []string {
	t.Helper()
	var found []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if data, err := os.ReadFile(path); err == nil && strings.Contains(string(data), "PRIVATE KEY") {
			found = append(found, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// watchedWrites calls onPut before every write: what is on disk while a
// migrate writes, which a kill at that moment would leave.
type watchedWrites struct {
	*memstore.Store
	onPut func()
}

func (w *watchedWrites) Put(ctx context.Context, name string, data []byte, ifVersion string) (string, error) {
	w.onPut()
	return w.Store.Put(ctx, name, data, ifVersion)
}

// A migrate puts no opened secret in $TMPDIR, where a killed one would
// leave it for ever; the copies an older transit's killed migrate left
// there are removed once no migrate can still be using them.
func TestMigrateLeavesNoSecret(t *testing.T) {
	rs := newRunners(t, 1) // $TMPDIR is the test's own
	a := rs[0]
	a.apply(t)
	ctx := t.Context()
	tmp := os.TempDir()
	old, recent := filepath.Join(tmp, "transit-migrate-1234"), filepath.Join(tmp, "transit-migrate-5678")
	for _, dir := range []string{old, recent} {
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "transit-c1.key"), []byte("-----BEGIN OPENSSH PRIVATE KEY-----\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	long := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(old, long, long); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var seen []string
	dst := &watchedWrites{Store: memstore.New()}
	dst.onPut = func() {
		mu.Lock()
		defer mu.Unlock()
		for _, f := range secretsOnDisk(t, tmp) {
			if !strings.HasPrefix(f, recent) && !slices.Contains(seen, f) {
				seen = append(seen, f)
			}
		}
	}
	o := a.options(transit.ReadState, "transit state migrate")
	o.Stores = map[string]transit.StoreFunc{"mem": func(_ context.Context, u *url.URL, _ transit.StoreEnv) (statestore.Store, error) {
		if u.Host == "other" {
			return dst, nil
		}
		return a.store, nil
	}}
	if err := transit.MigrateState(ctx, o, "mem://other/prod", false); err != nil {
		t.Fatal(err)
	}
	if len(seen) > 0 {
		t.Errorf("while the migrate wrote, opened private keys lay in $TMPDIR, where a kill leaves them: %v", seen)
	}
	st := storedState(t, a.store)
	sealed, err := dst.Get(ctx, "transit-"+st.Cluster+".key.age")
	if err != nil || strings.Contains(string(sealed.Data), "PRIVATE KEY") {
		t.Fatalf("the key at the destination: %q, %v; want it sealed", sealed.Data, err)
	}
	if got := storedState(t, dst.Store); got.Serial != st.Serial || len(got.Nodes) != len(st.Nodes) {
		t.Fatalf("the destination's state: serial %d, %d nodes; want %d, %d", got.Serial, len(got.Nodes), st.Serial, len(st.Nodes))
	}
	if _, err := os.Stat(old); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a killed migrate's copy two hours old stayed: %v", err)
	}
	if _, err := os.Stat(recent); err != nil {
		t.Errorf("a migrate's copy made just now, perhaps in use, went: %v", err)
	}
}

// The S3 client logs to the session's logger, at debug level: against a
// service that sends no checksum (a proxy strips them), the SDK's line is
// in a debug log and not in an info one.
func TestStateStoreLogsToTheSession(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	srv := s3test.Start(t)
	srv.Bucket(t, "state")
	proxyURL := srv.Proxy(t, s3test.StripChecksums)
	w := newWorld(t)
	w.cloud.guard = ""
	applyWith(t, w.options(transit.Change, "transit apply"))
	location, key := onS3(t, w, srv, "logged")
	location = strings.Replace(location, srv.Endpoint, proxyURL, 1)
	o := w.options(transit.ReadState, "transit state migrate")
	o.Stores, o.StateKey = transit.BuiltinStores(), key
	if err := transit.MigrateState(t.Context(), o, location, false); err != nil {
		t.Fatal(err)
	}
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		var log bytes.Buffer
		o := w.optionsAt(location, key, transit.ReadState, "transit state pull")
		o.Logger = slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: level}))
		if _, err := transit.PullState(t.Context(), o, 0); err != nil {
			t.Fatal(err)
		}
		if got, want := strings.Contains(log.String(), "no supported checksum"), level == slog.LevelDebug; got != want {
			t.Errorf("at level %v, the SDK's line in the session's log: %v, want %v; the log:\n%s", level, got, want, log.String())
		}
	}
}
