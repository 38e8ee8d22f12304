package s3store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cloudtransit/transit/statestore"
	"github.com/cloudtransit/transit/statestore/s3store"
	"github.com/cloudtransit/transit/statestore/s3store/s3test"
	"github.com/cloudtransit/transit/statestore/storetest"
)

func TestConformance(t *testing.T) {
	srv := s3test.Start(t)
	bucket := srv.Bucket(t, "state")
	var n atomic.Int32
	storetest.Run(t, func(t *testing.T) statestore.Store {
		// A fresh prefix per test: an empty store.
		s, err := s3store.New(t.Context(), bucket, fmt.Sprintf("team/c%d", n.Add(1)), srv.Options())
		if err != nil {
			t.Fatal(err)
		}
		return s
	}, storetest.Options{})
}

// In a bucket with versioning, versitygw v1.8.0 refuses a conditional
// create after a delete (its delete marker keeps the deleted object's
// ETag: 412, though a HEAD says 404). The store says so, and the lock
// fails rather than trying forever. Everything but that works.
func TestVersionedBucket(t *testing.T) {
	srv := s3test.Start(t)
	bucket := srv.Bucket(t, "state")
	srv.Versioning(t, bucket, true)
	ctx := t.Context()
	s, err := s3store.New(ctx, bucket, "prod", srv.Options())
	if err != nil {
		t.Fatal(err)
	}
	v := mustPut(t, s, "resources.json", "one")
	if _, err := s.Put(ctx, "resources.json", []byte("two"), statestore.NoVersion); !errors.Is(err, statestore.ErrConflict) {
		t.Fatalf("a second create: %v, want a conflict", err)
	}
	v2, err := s.Put(ctx, "resources.json", []byte("two"), v)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "resources.json", []byte("three"), v); !errors.Is(err, statestore.ErrConflict) {
		t.Fatalf("a replace of an old version: %v, want a conflict", err)
	}
	if err := s.Delete(ctx, "resources.json", v2); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "resources.json"); !errors.Is(err, statestore.ErrNotFound) {
		t.Fatalf("Get after the delete: %v", err)
	}
	_, err = s.Put(ctx, "resources.json", []byte("again"), statestore.NoVersion)
	if err == nil {
		t.Fatal("versitygw created an object after a delete in a versioned bucket: it no longer has the bug; run the conformance suite on a versioned bucket")
	}
	if errors.Is(err, statestore.ErrConflict) || !strings.Contains(err.Error(), "bucket with versioning") {
		t.Fatalf("create after a delete: %v, want the versioning named", err)
	}
	l, err := s.Lock(ctx, statestore.LockOptions{Command: "transit apply"})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Lock(ctx, statestore.LockOptions{Command: "transit apply", Timeout: -1}); err == nil || !strings.Contains(err.Error(), "bucket with versioning") {
		t.Fatalf("Lock after a release: %v, want the versioning named", err)
	}
}

func TestBadBucketAndCredentials(t *testing.T) {
	srv := s3test.Start(t)
	srv.Bucket(t, "state")
	ctx := t.Context()

	missing, err := s3store.New(ctx, "no-such-bucket", "prod", srv.Options())
	if err != nil {
		t.Fatal(err)
	}
	_, err = missing.Get(ctx, "resources.json")
	if err == nil || !strings.Contains(err.Error(), "bucket no-such-bucket does not exist") || errors.Is(err, statestore.ErrNotFound) {
		t.Fatalf("missing bucket: %v, want an error naming it (not an empty state)", err)
	}
	for what, err := range map[string]error{
		"Put":    second(missing.Put(ctx, "resources.json", []byte("{}"), statestore.NoVersion)),
		"Stat":   second(missing.Stat(ctx, "resources.json")),
		"List":   second(missing.List(ctx, "")),
		"Delete": missing.Delete(ctx, "resources.json", `"0123"`),
		"Lock":   second(missing.Lock(ctx, statestore.LockOptions{Command: "transit apply"})),
	} {
		if err == nil || !strings.Contains(err.Error(), "bucket no-such-bucket does not exist") || errors.Is(err, statestore.ErrNotFound) {
			t.Errorf("%s in a missing bucket: %v, want an error naming it (not a missing object)", what, err)
		}
	}

	o := srv.Options()
	o.SecretAccessKey = "wrong"
	wrong, err := s3store.New(ctx, "state", "prod", o)
	if err != nil {
		t.Fatal(err)
	}
	_, err = wrong.Get(ctx, "resources.json")
	if err == nil || !strings.Contains(err.Error(), "refused the credentials") || errors.Is(err, statestore.ErrNotFound) {
		t.Fatalf("wrong secret: %v, want the credentials named as refused", err)
	}
}

// faulty answers the first n requests whose method is method with status
// (and S3's error code), then passes everything to the server.
type faulty struct {
	next   http.Handler
	method string
	status int
	code   string
	left   atomic.Int32
	seen   atomic.Int32
}

func (f *faulty) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == f.method {
		f.seen.Add(1)
		if f.left.Add(-1) >= 0 {
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(f.status)
			fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>injected</Message></Error>`, f.code)
			return
		}
	}
	f.next.ServeHTTP(w, r)
}

// 500s and throttling are retried up to the bound; beyond it the error
// says the service kept failing. A conditional write retried after a
// failure is still conditional.
func TestServiceFaultsRetried(t *testing.T) {
	srv := s3test.Start(t)
	srv.Bucket(t, "state")
	target, err := url.Parse(srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		status int
		code   string
	}{{500, "InternalError"}, {503, "SlowDown"}} {
		t.Run(c.code, func(t *testing.T) {
			f := &faulty{next: httputil.NewSingleHostReverseProxy(target), method: http.MethodPut, status: c.status, code: c.code}
			proxy := httptest.NewServer(f)
			defer proxy.Close()
			o := srv.Options()
			o.Endpoint, o.MaxAttempts = proxy.URL, 4
			s, err := s3store.New(t.Context(), "state", "faults-"+c.code, o)
			if err != nil {
				t.Fatal(err)
			}
			// The store's first write probes the service (conditions
			// enforced): before the faults are counted.
			if _, err := s.Put(t.Context(), "warm", []byte("up"), statestore.NoVersion); err != nil {
				t.Fatal(err)
			}
			f.seen.Store(0)
			f.left.Store(3) // within the 4 attempts
			v, err := s.Put(t.Context(), "resources.json", []byte("one"), statestore.NoVersion)
			if err != nil {
				t.Fatalf("put through 3 %ss: %v", c.code, err)
			}
			if f.seen.Load() != 4 {
				t.Errorf("%d attempts, want 4", f.seen.Load())
			}
			f.left.Store(10) // beyond the bound
			f.seen.Store(0)
			_, err = s.Put(t.Context(), "resources.json", []byte("two"), v)
			if err == nil || !strings.Contains(err.Error(), "kept failing") || errors.Is(err, statestore.ErrConflict) {
				t.Fatalf("put through 10 %ss: %v, want the service named as failing", c.code, err)
			}
			if f.seen.Load() != 4 {
				t.Errorf("%d attempts, want the bound of 4", f.seen.Load())
			}
			f.left.Store(0)
			if got, err := s.Get(t.Context(), "resources.json"); err != nil || string(got.Data) != "one" {
				t.Fatalf("after the failed write: %q, %v", got.Data, err)
			}
		})
	}
}

// Two runners creating the first state at the same instant: one wins.
func TestFirstStateRace(t *testing.T) {
	srv := s3test.Start(t)
	srv.Bucket(t, "state")
	var won atomic.Int32
	done := make(chan error, 2)
	for i := range 2 {
		go func() {
			s, err := s3store.New(context.Background(), "state", "race", srv.Options())
			if err == nil {
				_, err = s.Put(context.Background(), "resources.json", []byte(fmt.Sprint(i)), statestore.NoVersion)
			}
			if err == nil {
				won.Add(1)
			} else if !errors.Is(err, statestore.ErrConflict) {
				done <- err
				return
			}
			done <- nil
		}()
	}
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if won.Load() != 1 {
		t.Fatalf("%d runners created the state, want 1", won.Load())
	}
}

func TestFromURL(t *testing.T) {
	for _, c := range []struct{ url, want string }{
		{"s3://b/p?bogus=1", `setting "bogus" is unknown`},
		{"s3://key:secret@b/p", "must not hold credentials"},
		{"s3://b/p?path_style=maybe", "path_style"},
		{"s3:///p", "no bucket"},
		{"s3://b/../p", "relative path"},
	} {
		u, err := url.Parse(c.url)
		if err != nil {
			t.Fatal(err)
		}
		_, err = s3store.FromURL(t.Context(), u, s3store.Options{AccessKeyID: "a", SecretAccessKey: "b"})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.url, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") && c.url == "s3://key:secret@b/p" && strings.Contains(err.Error(), "key:secret") {
			t.Errorf("the error repeats the URL's credentials: %v", err)
		}
	}
	u, _ := url.Parse("s3://ci-state/teams/prod?endpoint=http://127.0.0.1:9&region=eu-central-1&path_style=true&credential_id=state")
	s, err := s3store.FromURL(t.Context(), u, s3store.Options{AccessKeyID: "a", SecretAccessKey: "b"})
	if err != nil || s.Location() != "s3://ci-state/teams/prod" {
		t.Fatalf("FromURL: %v, %v", s, err)
	}
}

func second[T any](_ T, err error) error { return err }

// A user the bucket's policy lets read but not write is told which
// permission it lacks on which bucket, for every call that needs it.
func TestAccessDenied(t *testing.T) {
	srv := s3test.Start(t)
	bucket := srv.Bucket(t, "state")
	ctx := t.Context()
	root, err := s3store.New(ctx, bucket, "prod", srv.Options())
	if err != nil {
		t.Fatal(err)
	}
	v := mustPut(t, root, "resources.json", "{}")

	srv.User(t, "reader", "reader-secret")
	reader, err := s3store.New(ctx, bucket, "prod", srv.UserOptions("reader", "reader-secret"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = reader.Get(ctx, "resources.json")
	wantDenied(t, err, "s3:GetObject", "Get without rights")

	srv.Allow(t, bucket, "reader", "s3:GetObject", "s3:ListBucket")
	if got, err := reader.Get(ctx, "resources.json"); err != nil || got.Version != v {
		t.Fatalf("Get allowed: %v, %v", got, err)
	}
	if entries, err := reader.List(ctx, ""); err != nil || len(entries) != 1 {
		t.Fatalf("List allowed: %v, %v", entries, err)
	}
	_, err = reader.Put(ctx, "resources.json", []byte("{1}"), v)
	wantDenied(t, err, "s3:PutObject", "Put")
	_, err = reader.Put(ctx, "other.json", []byte("{1}"), statestore.NoVersion)
	wantDenied(t, err, "s3:PutObject", "Put of a new object")
	wantDenied(t, reader.Delete(ctx, "resources.json", v), "s3:PutObject", "Delete")
	_, err = reader.Lock(ctx, statestore.LockOptions{Command: "transit apply"})
	wantDenied(t, err, "s3:PutObject", "Lock")
	if got, err := root.Get(ctx, "resources.json"); err != nil || got.Version != v {
		t.Fatalf("after the refused writes: %v, %v", got, err)
	}
}

func wantDenied(t *testing.T, err error, action, what string) {
	t.Helper()
	if err == nil || errors.Is(err, statestore.ErrNotFound) || errors.Is(err, statestore.ErrConflict) ||
		!strings.Contains(err.Error(), "access denied") || !strings.Contains(err.Error(), "lack "+action+" on bucket state") {
		t.Fatalf("%s: %v, want access denied naming %s and the bucket", what, err, action)
	}
}

func mustPut(t *testing.T, s statestore.Store, name, data string) string {
	t.Helper()
	v, err := s.Put(t.Context(), name, []byte(data), statestore.NoVersion)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// A delete is a tombstone written, then deleted. A deleter that never
// deletes its tombstone (it died, or the service failed it beyond the
// retries) leaves an object nobody sees, which the next create replaces;
// a delete that completes leaves nothing in the bucket.
func TestTombstone(t *testing.T) {
	srv := s3test.Start(t)
	bucket := srv.Bucket(t, "state")
	target, err := url.Parse(srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	f := &faulty{next: httputil.NewSingleHostReverseProxy(target), method: http.MethodDelete, status: 500, code: "InternalError"}
	proxy := httptest.NewServer(f)
	t.Cleanup(proxy.Close)
	o := srv.Options()
	o.Endpoint = proxy.URL
	ctx := t.Context()
	s, err := s3store.New(ctx, bucket, "prod", o)
	if err != nil {
		t.Fatal(err)
	}
	v := mustPut(t, s, "history/resources.json/00000001", "{}")
	mustPut(t, s, "resources.json", "{}")

	f.left.Store(100) // every DeleteObject fails
	err = s.Delete(ctx, "history/resources.json/00000001", v)
	if err == nil || !strings.Contains(err.Error(), "kept failing") || !strings.Contains(err.Error(), "tombstone") {
		t.Fatalf("Delete whose DeleteObject fails: %v, want the failure and the tombstone named", err)
	}
	if keys := srv.Objects(t, bucket, "prod/history/"); len(keys) != 1 {
		t.Fatalf("the bucket holds %v, want the tombstone", keys)
	}
	_, err = s.Get(ctx, "history/resources.json/00000001")
	if !errors.Is(err, statestore.ErrNotFound) {
		t.Fatalf("Get of a tombstone: %v, want ErrNotFound", err)
	}
	if _, err = s.Stat(ctx, "history/resources.json/00000001"); !errors.Is(err, statestore.ErrNotFound) {
		t.Fatalf("Stat of a tombstone: %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx, "history/resources.json/00000001", v); !errors.Is(err, statestore.ErrNotFound) {
		t.Fatalf("Delete of a tombstone: %v, want ErrNotFound", err)
	}
	entries, err := s.List(ctx, "")
	if err != nil || len(entries) != 1 || entries[0].Name != "resources.json" {
		t.Fatalf("List with a tombstone: %v, %v, want resources.json alone", entries, err)
	}

	f.left.Store(0)
	v2 := mustPut(t, s, "history/resources.json/00000001", "{2}")
	if got, err := s.Get(ctx, "history/resources.json/00000001"); err != nil || string(got.Data) != "{2}" || got.Version != v2 {
		t.Fatalf("created over a tombstone: %q %s, %v", got.Data, got.Version, err)
	}
	if err := s.Delete(ctx, "history/resources.json/00000001", v2); err != nil {
		t.Fatal(err)
	}
	if keys := srv.Objects(t, bucket, "prod/history/"); len(keys) != 0 {
		t.Fatalf("after a delete the bucket holds %v, want nothing", keys)
	}
}

// stderrOf returns what f wrote to the process's stderr.
func stderrOf(t *testing.T, f func()) string {
	t.Helper()
	tmp, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stderr
	os.Stderr = tmp
	defer func() { os.Stderr = saved }()
	f()
	data, err := os.ReadFile(tmp.Name())
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// Nothing the SDK logs reaches stderr: against a service that sends no
// checksum (a proxy strips them, as some S3-compatible services never send
// one), the SDK's "Response has no supported checksum" goes to the
// store's logger at debug level, and nowhere without one.
func TestSDKLogsQuiet(t *testing.T) {
	srv := s3test.Start(t)
	srv.Bucket(t, "state")
	proxyURL := srv.Proxy(t, s3test.StripChecksums)
	for _, c := range []struct {
		name  string
		level slog.Level
		debug bool // whether the SDK's line is in the log
	}{{"NoLogger", 0, false}, {"Info", slog.LevelInfo, false}, {"Debug", slog.LevelDebug, true}} {
		t.Run(c.name, func(t *testing.T) {
			var log bytes.Buffer
			o := srv.Options()
			o.Endpoint = proxyURL
			if c.name != "NoLogger" {
				o.Logger = slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: c.level}))
			}
			stderr := stderrOf(t, func() {
				s, err := s3store.New(t.Context(), "state", "quiet-"+c.name, o)
				if err != nil {
					t.Fatal(err)
				}
				v := mustPut(t, s, "resources.json", "one")
				for range 3 {
					if got, err := s.Get(t.Context(), "resources.json"); err != nil || got.Version != v {
						t.Fatalf("Get: %+v, %v", got, err)
					}
				}
			})
			if stderr != "" {
				t.Errorf("the SDK wrote to stderr:\n%s", stderr)
			}
			if got := strings.Contains(log.String(), "no supported checksum"); got != c.debug {
				t.Errorf("the SDK's line in the log: %v, want %v; the log:\n%s", got, c.debug, log.String())
			}
		})
	}
}

// A service that answers a conditional write that must fail as if it had
// succeeded (a gateway or proxy that drops If-None-Match and If-Match, an
// S3 layer that ignores them: here a proxy that turns each 412 into a
// 200) is refused before anything is written, naming what it did: on it
// two runs could hold the lock. Its probe leaves nothing behind.
func TestServiceIgnoringConditionsRefused(t *testing.T) {
	srv := s3test.Start(t)
	srv.Bucket(t, "state")
	proxyURL := srv.Proxy(t, func(r *http.Response) error {
		if r.Request.Method == http.MethodPut && r.StatusCode == http.StatusPreconditionFailed {
			r.StatusCode, r.Status = http.StatusOK, "200 OK"
			r.Body, r.ContentLength = io.NopCloser(strings.NewReader("")), 0
			r.Header.Del("Content-Length")
			r.Header.Set("ETag", `"`+strings.Repeat("e", 32)+`"`)
		}
		return nil
	})
	o := srv.Options()
	o.Endpoint = proxyURL
	s, err := s3store.New(t.Context(), "state", "ignored", o)
	if err != nil {
		t.Fatal(err)
	}
	for _, try := range []struct {
		what string
		do   func() error
	}{
		{"a state write", func() error {
			_, err := s.Put(t.Context(), "resources.json", []byte("{}"), statestore.NoVersion)
			return err
		}},
		{"the lock", func() error {
			l, err := s.Lock(t.Context(), statestore.LockOptions{Command: "transit apply"})
			if err == nil {
				_ = l.Release(t.Context())
			}
			return err
		}},
	} {
		err := try.do()
		if !errors.Is(err, s3store.ErrNoConditions) || !strings.Contains(err.Error(), "a create (If-None-Match: *) of an object that exists") {
			t.Errorf("%s on a service that ignores conditions: %v, want ErrNoConditions naming what it wrote", try.what, err)
		}
	}
	direct, err := s3store.New(t.Context(), "state", "ignored", srv.Options())
	if err != nil {
		t.Fatal(err)
	}
	if left, err := direct.List(t.Context(), ""); err != nil || len(left) > 0 {
		t.Errorf("the store holds %v (%v) after the refusals: want nothing", left, err)
	}
}
