package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/statestore"
	"github.com/cloudtransit/transit/statestore/s3store"
	"github.com/cloudtransit/transit/statestore/s3store/s3test"
	"github.com/cloudtransit/transit/statestore/seal"
)

// testCIRunners plays two CI runners of one team: fresh working
// directories with only the repository's files (cluster.json,
// districts.json) and what the CI's secrets give (credentials.json, the
// state key), against one S3-compatible store (a real versitygw) and one
// real local Swarm. Runner A creates the cluster; runner B, with nothing
// local, changes it over SSH with the key from the store; A and B apply at
// once and one is refused naming the other; a plan A saved is applied by
// B, and refused once the cluster changed under it.
func testCIRunners(t *testing.T) {
	srv := s3test.Start(t)
	srv.Bucket(t, "ci-state")
	_, key, err := seal.Generate()
	if err != nil {
		t.Fatal(err)
	}
	location := srv.URL("ci-state", "prod") + "&credential_id=state"

	cfg, ds := exampleCluster()
	cfg.ID = "ci"
	cfg.Deployments = cfg.Deployments[:2]  // a manager and two workers in e2e-a
	a := newCluster(t, swarmRoot, cfg, ds) // its cleanup destroys through the store
	a.env = append(a.env, "TRANSIT_STATE="+location, "TRANSIT_STATE_KEY="+key)
	a.writeStateCredential()

	b := a.runner(t)
	repoOnly := func(c *cluster) {
		t.Helper()
		entries, err := os.ReadDir(c.dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			switch e.Name() {
			case "cluster.json", "districts.json", "credentials.json", "plan.bin", "plan2.bin":
			default:
				t.Errorf("runner %s holds %s: the state and keys belong in the store", c.dir, e.Name())
			}
		}
	}

	t.Run("A creates the cluster", func(t *testing.T) {
		a.with(t).apply()
		repoOnly(a)
		objects := storeObjects(t, srv, "ci-state", "prod/")
		for _, want := range []string{"prod/resources.json", "prod/transit-ci.key.age", "prod/transit-ci.key.pub", "prod/transit-ci.known_hosts"} {
			if !objects[want] {
				t.Errorf("the store lacks %s: %v", want, objects)
			}
		}
		if lockHeld(t, srv, "ci-state", "prod") {
			t.Error("the lock outlived the run")
		}
	})

	t.Run("B, with nothing local, adds a worker over SSH", func(t *testing.T) {
		b.cfg.Deployments[1].Quantity = 3
		b.writeConfig()
		b.with(t).apply()
		repoOnly(b)
		// A sees them all as swarm members: transit asked the manager over
		// SSH with the key from the store.
		st := a.with(t).status()
		if joined := joinedNodes(st); len(st.Nodes) != 4 || joined != 4 {
			t.Fatalf("after B's apply A sees %d nodes, %d joined; want 4 joined", len(st.Nodes), joined)
		}
		repoOnly(a)
	})

	t.Run("A and B at once: one runs, the other is refused naming it", func(t *testing.T) {
		a.cfg.Deployments[1].Quantity = 4
		a.writeConfig()
		b.cfg.Deployments[1].Quantity = 4
		b.writeConfig()
		var wg sync.WaitGroup
		var first result
		wg.Go(func() { first = a.transit("apply", "--auto-approve", "--json") })
		waitForLock(t, srv, "ci-state", "prod")
		second := b.transit("apply", "--auto-approve", "--json")
		wg.Wait()
		if first.code != 0 {
			t.Fatalf("A's apply: exit %d\n%s", first.code, first.stderr)
		}
		if second.code != 1 || !strings.Contains(second.stderr, `"transit apply"`) || !strings.Contains(second.stderr, "is locked by pid") {
			t.Fatalf("B's apply beside A's: exit %d, want 1 naming A's run:\n%s", second.code, second.stderr)
		}
		if kind := resultKind(t, second.stdout); kind != "locked" {
			t.Errorf("B's error_kind %q, want locked", kind)
		}
	})

	t.Run("a plan A saved is applied by B, and refused once the cluster moved", func(t *testing.T) {
		for _, c := range []*cluster{a, b} {
			c.cfg.Deployments[1].Quantity = 3
			c.writeConfig()
		}
		if r := a.transit("plan", "--out", filepath.Join(a.dir, "plan.bin")); r.code != 0 {
			t.Fatalf("A's plan --out: exit %d\n%s", r.code, r.stderr)
		}
		if r := a.transit("plan", "-out", filepath.Join(a.dir, "plan2.bin")); r.code != 0 {
			t.Fatalf("A's plan -out: exit %d\n%s", r.code, r.stderr)
		}
		for _, p := range []string{"plan.bin", "plan2.bin"} {
			data, err := os.ReadFile(filepath.Join(a.dir, p))
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(data), key) || strings.Contains(string(data), s3test.SecretKey) {
				t.Fatalf("%s holds a secret", p)
			}
			if err := os.WriteFile(filepath.Join(b.dir, p), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if r := b.transit("apply", filepath.Join(b.dir, "plan.bin")); r.code != 0 { // no --auto-approve: it was reviewed
			t.Fatalf("B's apply of A's plan: exit %d\n%s", r.code, r.stderr)
		}
		if n := len(a.with(t).status().Nodes); n != 4 {
			t.Fatalf("%d nodes after the saved plan, want 4 (one of 4 workers removed)", n)
		}
		r := b.transit("apply", "--json", filepath.Join(b.dir, "plan2.bin"))
		if r.code != 1 || resultKind(t, r.stdout) != "stale_plan" || !strings.Contains(r.stderr, "changed since the plan: serial") {
			t.Fatalf("B's apply of a plan the cluster outran: exit %d\n%s", r.code, r.stderr)
		}
	})

	t.Run("A killed mid-apply: B is told the lock's ID, frees it and converges", func(t *testing.T) {
		for _, c := range []*cluster{a, b} {
			c.cfg.Deployments[1].Quantity = 4
			c.writeConfig()
		}
		killed := a.with(t).applyKilledAt("launch", "finish", 0)
		if !killed {
			t.Fatal("A's apply ended before it could be killed")
		}
		r := b.transit("apply", "--auto-approve")
		if r.code != 1 || !strings.Contains(r.stderr, "transit force-unlock ") {
			t.Fatalf("B's apply while the dead run's lease lasts: exit %d, want 1 naming the lock:\n%s", r.code, r.stderr)
		}
		id := r.stderr[strings.Index(r.stderr, "transit force-unlock ")+len("transit force-unlock "):]
		id = strings.Trim(strings.Fields(id)[0], "`")
		if u := b.transit("force-unlock", id); u.code != 0 {
			t.Fatalf("force-unlock %s: exit %d\n%s", id, u.code, u.stderr)
		}
		b.with(t).apply()
		if n := len(b.with(t).status().Nodes); n != 5 {
			t.Fatalf("%d nodes after the killed run and the next, want 5", n)
		}
		left, _ := filepath.Glob(filepath.Join(os.TempDir(), "transit-state-ci-*"))
		if len(left) > 0 {
			t.Errorf("the killed run's local copy (its opened key) outlived the next run: %v", left)
		}
	})

	t.Run("A stopped past its lease: B takes over and converges; A, resumed, writes nothing and ends lock_lost", func(t *testing.T) {
		testPausedRunner(t, srv, a, b)
	})
}

// testPausedRunner: with a 6 s lease, runner A's apply is stopped
// (SIGSTOP) as soon as it holds the lock and has planned; B, wanting
// another change, waits for the lock, takes it over once it is stale by
// the store's clock, and converges. A, resumed (SIGCONT), starts no
// action and writes nothing (an action it started before the stop, under
// its lock, ends without saving): it exits 1 with error_kind lock_lost,
// and the store is exactly as B left it. B's next run converges to B's
// cluster, adopting what that earlier action left.
func testPausedRunner(t *testing.T, srv *s3test.Server, a, b *cluster) {
	// Only the stopped run and the one taking over get the short lease:
	// later runs (B's next, the group's destroy through a) on a loaded
	// machine are one late renewal from lock_lost with it.
	envA, envB := a.env, b.env
	longLease := func() { a.env, b.env = envA, envB }
	defer longLease()
	for _, c := range []*cluster{a, b} {
		c.env = append(slices.Clip(c.env), "TRANSIT_STATE_LEASE=6s")
	}
	a.cfg.Deployments[1].Quantity = 5 // A would add a worker
	a.writeConfig()
	b.cfg.Deployments[1].Quantity = 3 // B removes one
	b.writeConfig()

	ctx, cancel := a.commandContext()
	defer cancel()
	cmd := a.command(ctx, "apply", "--auto-approve", "--json")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	if !sc.Scan() || !strings.Contains(sc.Text(), `"type":"plan"`) { // the plan: A holds the lock and acts next
		_ = cmd.Wait()
		t.Fatalf("A's apply ended before its plan:\n%s\n%s", sc.Text(), errb.String())
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	defer func() {
		if stopped {
			_ = cmd.Process.Signal(syscall.SIGCONT)
		}
	}()
	var out bytes.Buffer
	out.Write(sc.Bytes())
	out.WriteByte('\n')
	if !lockHeld(t, srv, "ci-state", "prod") {
		t.Fatal("A holds no lock while stopped")
	}
	r := b.transit("apply", "--auto-approve", "--lock-timeout", "1m")
	if r.code != 0 {
		t.Fatalf("B's apply while A is stopped: exit %d\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, "took over the state lock") {
		t.Errorf("B does not say it took the stopped run's lock over:\n%s", r.stderr)
	}
	st, err := s3store.New(context.Background(), "ci-state", "prod", srv.Options())
	if err != nil {
		t.Fatal(err)
	}
	before, err := st.Get(context.Background(), "resources.json")
	if err != nil {
		t.Fatal(err)
	}
	// On a loaded machine A may have started its first action between
	// the plan and the stop, under its lock: only an action started
	// after the resume is one too many.
	resumed := time.Now()
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped = false
	for sc.Scan() {
		out.Write(sc.Bytes())
		out.WriteByte('\n')
	}
	_ = cmd.Wait()
	code := cmd.ProcessState.ExitCode()
	if code != 1 || resultKind(t, out.String()) != "lock_lost" {
		t.Fatalf("A resumed after its lease: exit %d, want 1 with error_kind lock_lost\n%s\n%s", code, out.String(), errb.String())
	}
	if started := actionsStartedAfter(t, out.String(), resumed); len(started) > 0 {
		t.Errorf("A, resumed without its lock, started %v:\n%s", started, out.String())
	}
	after, err := st.Get(context.Background(), "resources.json")
	if err != nil {
		t.Fatal(err)
	}
	if after.Version != before.Version {
		t.Error("A, resumed without its lock, wrote the state")
	}
	if left := storeObjects(t, srv, "ci-state", "prod/resources.json.journal/"); len(left) > 0 {
		t.Errorf("A, resumed without its lock, left journal lines: %v", left)
	}
	// An action A started before the stop may finish after the resume
	// (a machine launched, never recorded): B's next run adopts what it
	// left and converges to B's 4.
	longLease()
	b.with(t).apply()
	res := b.with(t).status()
	if joined := joinedNodes(res); len(res.Nodes) != 4 || joined != 4 {
		t.Errorf("after B's next run %d nodes, %d joined; want B's 4 (a manager, 3 workers) joined", len(res.Nodes), joined)
	}
}

// joinedNodes counts res's nodes in phase joined.
func joinedNodes(res districts.Resources) int {
	joined := 0
	for _, n := range res.Nodes {
		if n.Phase == districts.PhaseJoined {
			joined++
		}
	}
	return joined
}

// writeStateCredential gives the runner the store's keys as CI would: a
// credentials.json from its secrets.
func (c *cluster) writeStateCredential() {
	c.tb.Helper()
	// A map: a districts.Credential writes its secrets redacted.
	creds := []map[string]string{{"type": "credential", "id": "state", "provider": districts.ProviderAWS,
		"aws_access_key_id": s3test.AccessKey, "aws_secret_access_key": s3test.SecretKey}}
	data, err := json.Marshal(creds)
	if err != nil {
		c.tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.dir, "credentials.json"), data, 0o600); err != nil {
		c.tb.Fatal(err)
	}
}

// runner is another CI runner of c's cluster: a fresh directory with the
// repository's files and the CI's secrets, nothing else.
func (c *cluster) runner(tb testing.TB) *cluster {
	tb.Helper()
	r := *c
	r.tb, r.dir = tb, tb.TempDir()
	cfg := *c.cfg // a runner's own checkout of cluster.json
	cfg.Deployments = append([]districts.Deployment(nil), c.cfg.Deployments...)
	r.cfg = &cfg
	r.writeConfig()
	data, err := os.ReadFile(filepath.Join(c.dir, "credentials.json"))
	if errors.Is(err, os.ErrNotExist) {
		return &r
	}
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.dir, "credentials.json"), data, 0o600); err != nil {
		tb.Fatal(err)
	}
	return &r
}

func storeObjects(t *testing.T, srv *s3test.Server, bucket, prefix string) map[string]bool {
	t.Helper()
	out, err := srv.Client(t).ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String(prefix)})
	if err != nil {
		t.Fatal(err)
	}
	objects := map[string]bool{}
	for _, o := range out.Contents {
		objects[aws.ToString(o.Key)] = true
	}
	return objects
}

// lockHeld says a run holds the store's lock (a released lock's object
// stays, as a tombstone the store reads as none).
func lockHeld(t *testing.T, srv *s3test.Server, bucket, prefix string) bool {
	t.Helper()
	s, err := s3store.New(context.Background(), bucket, prefix, srv.Options())
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Get(context.Background(), s3store.LockName)
	if err != nil && !errors.Is(err, statestore.ErrNotFound) {
		t.Fatal(err)
	}
	return err == nil
}

// waitForLock waits until a run holds the store's lock.
func waitForLock(t *testing.T, srv *s3test.Server, bucket, prefix string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !lockHeld(t, srv, bucket, prefix) {
		if time.Now().After(deadline) {
			t.Fatalf("no run took the lock of %s/%s within a minute", bucket, prefix)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// actionsStartedAfter lists the actions a --json output started after
// since, as "kind node".
func actionsStartedAfter(t *testing.T, stdout string, since time.Time) []string {
	t.Helper()
	var started []string
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		var ev struct {
			Type   string    `json:"type"`
			Time   time.Time `json:"time"`
			Phase  string    `json:"phase"`
			Action struct {
				Kind string `json:"kind"`
				Node string `json:"node"`
			} `json:"action"`
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("a line of --json: %v\n%s", err, stdout)
		}
		if ev.Type == "action" && ev.Phase == "start" && !ev.Time.Before(since) {
			started = append(started, ev.Action.Kind+" "+ev.Action.Node)
		}
	}
	return started
}

// resultKind is the error_kind of apply --json's result line.
func resultKind(t *testing.T, stdout string) string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	var last struct {
		ErrorKind string `json:"error_kind"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil {
		t.Fatalf("last line of --json: %v\n%s", err, stdout)
	}
	return last.ErrorKind
}

// BenchmarkStateStores measures what the S3 store adds to an apply: a
// 10-node Swarm (1 manager, 9 workers) on local nodes from nothing to
// converged, its state in a directory or in a bucket of a real versitygw
// on loopback (lock, reads, a write after every action, the history),
// alternating in one run, each first every other time; each iteration
// destroys it again. It reports the
// mean apply time of each store and the difference in percent.
func BenchmarkStateStores(b *testing.B) {
	srv := s3test.Start(b)
	srv.Bucket(b, "bench-state")
	_, key, err := seal.Generate()
	if err != nil {
		b.Fatal(err)
	}
	cfg, ds := exampleCluster()
	cfg.ID = "bench-state"
	cfg.Deployments = []districts.Deployment{
		{District: "e2e-a", Flavor: "small", Role: districts.RoleMaster, Quantity: 1},
		{District: "e2e-a", Flavor: "small", Role: districts.RoleWorker, Quantity: 9},
	}
	ds = ds[:1]
	file := newCluster(b, swarmRoot, cfg, ds)
	bucket := file.runner(b)
	bucket.env = append(bucket.env, "TRANSIT_STATE="+srv.URL("bench-state", "prod")+"&credential_id=state", "TRANSIT_STATE_KEY="+key)
	bucket.writeStateCredential()
	var onFile, onS3 time.Duration
	order := []*cluster{file, bucket}
	for b.Loop() {
		// Each store goes first every other time: a destroy's machines
		// finish dying while the next apply runs.
		order[0], order[1] = order[1], order[0]
		for _, c := range order {
			start := time.Now()
			c.apply()
			took := time.Since(start)
			if c == file {
				onFile += took
			} else {
				onS3 += took
			}
			if r := c.transit("destroy", "--auto-approve"); r.code != 0 {
				b.Fatalf("destroy: exit %d\n%s", r.code, r.stderr)
			}
		}
	}
	n := float64(b.N)
	b.ReportMetric(onFile.Seconds()/n, "file-s")
	b.ReportMetric(onS3.Seconds()/n, "s3-s")
	b.ReportMetric(100*(onS3.Seconds()-onFile.Seconds())/onFile.Seconds(), "s3-added-%")
}
