package transit_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cloudtransit/transit"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/statestore"
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
