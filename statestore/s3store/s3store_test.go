package s3store_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
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
		s, err := s3store.New(context.Background(), bucket, fmt.Sprintf("team/c%d", n.Add(1)), srv.Options())
		if err != nil {
			t.Fatal(err)
		}
		return s
	}, storetest.Options{})
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
	if _, err := missing.Put(ctx, "resources.json", []byte("{}"), statestore.NoVersion); err == nil || !strings.Contains(err.Error(), "no-such-bucket") {
		t.Fatalf("write to a missing bucket: %v", err)
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
