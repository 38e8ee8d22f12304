// Package s3test starts a real S3-compatible server for tests: versitygw
// (`make s3-server`) on a free loopback port, over a temporary directory,
// with bucket versioning and users with bucket policies available, killed
// when the test ends.
package s3test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/cloudtransit/transit/awsbody"
	"github.com/cloudtransit/transit/statestore/s3store"
)

// Credentials of the server's root user.
const (
	AccessKey = "transit-test"
	SecretKey = "transit-test-secret"
)

// Server is a running server.
type Server struct {
	// Endpoint is its URL, e.g. http://127.0.0.1:40123.
	Endpoint string
	// Dir is where it keeps the buckets.
	Dir string
	bin string
}

// Binary finds the server: TRANSIT_S3_SERVER, or bin/versitygw-* of the
// module. A missing one fails the test, naming how to build it.
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("TRANSIT_S3_SERVER"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("s3test: TRANSIT_S3_SERVER: %v: run `make s3-server` (versitygw into bin/)", err)
		}
		return p
	}
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for ; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		if filepath.Dir(dir) == dir {
			t.Fatal("s3test: no go.mod above the working directory")
		}
	}
	found, _ := filepath.Glob(filepath.Join(dir, "bin", "versitygw-*"))
	if len(found) == 0 {
		t.Fatalf("s3test: no S3 server: run `make s3-server` (versitygw into bin/), or set TRANSIT_S3_SERVER")
	}
	return found[len(found)-1]
}

// Start starts a server; the test's cleanup stops it, also when the test
// fails.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := Binary(t)
	root := t.TempDir()
	s := &Server{Dir: filepath.Join(root, "buckets"), bin: bin}
	for _, d := range []string{s.Dir, filepath.Join(root, "versions"), filepath.Join(root, "iam")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The port is free when chosen but may be taken before the server
	// binds it: then the server exits, and another port is tried.
	var log []byte
	for range 3 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		_ = l.Close()
		logFile := filepath.Join(root, "versitygw.log")
		var ok bool
		if ok, log = s.start(t, addr, root, logFile); ok {
			s.Endpoint = "http://" + addr
			return s
		}
	}
	t.Fatalf("%s did not start:\n%s", bin, log)
	return nil
}

// start runs the server on addr and waits until it listens; false (with
// its log) when it exited first.
func (s *Server) start(t testing.TB, addr, root, logName string) (bool, []byte) {
	t.Helper()
	logFile, err := os.Create(logName)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(s.bin, "--access", AccessKey, "--secret", SecretKey, "--port", addr, "--quiet",
		"--iam-dir", filepath.Join(root, "iam"),
		"posix", "--versioning-dir", filepath.Join(root, "versions"), s.Dir)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Killed with the test process too, when a timeout's panic ends it
	// before the cleanups run.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	started := make(chan error, 1)
	exited := make(chan struct{})
	go func() {
		// The death signal follows the thread that forked, not the
		// process, and Go ends threads (one a goroutine left locked,
		// entering a network namespace, say): the server was killed in
		// the middle of an e2e test that way. This goroutine keeps its
		// thread until the server exits.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait()
		_ = logFile.Close()
		close(exited)
	}()
	if err := <-started; err != nil {
		_ = logFile.Close()
		t.Fatalf("start %s: %v", s.bin, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	deadline := time.Now().Add(15 * time.Second)
	for {
		select {
		case <-exited:
			log, _ := os.ReadFile(logName)
			return false, log
		default:
		}
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			_ = c.Close()
			return true, nil
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logName)
			t.Fatalf("%s did not listen on %s within 15 s:\n%s", s.bin, addr, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Options are the store options that reach the server as its root user,
// with few and short retries.
func (s *Server) Options() s3store.Options {
	return s.UserOptions(AccessKey, SecretKey)
}

// UserOptions are Options for a user of User.
func (s *Server) UserOptions(accessKey, secretKey string) s3store.Options {
	return s3store.Options{Endpoint: s.Endpoint, PathStyle: true, AccessKeyID: accessKey, SecretAccessKey: secretKey, MaxAttempts: 2, MaxBackoff: 50 * time.Millisecond}
}

// Bucket creates a bucket, owned by the root user, and returns its name.
func (s *Server) Bucket(t testing.TB, name string) string {
	t.Helper()
	if _, err := s.Client(t).CreateBucket(t.Context(), &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		t.Fatalf("create bucket %s: %v", name, err)
	}
	return name
}

// Versioning turns a bucket's versioning on, or suspends it.
func (s *Server) Versioning(t testing.TB, bucket string, on bool) {
	t.Helper()
	status := types.BucketVersioningStatusSuspended
	if on {
		status = types.BucketVersioningStatusEnabled
	}
	_, err := s.Client(t).PutBucketVersioning(t.Context(), &s3.PutBucketVersioningInput{
		Bucket:                  aws.String(bucket),
		VersioningConfiguration: &types.VersioningConfiguration{Status: status},
	})
	if err != nil {
		t.Fatalf("versioning of bucket %s %s: %v", bucket, status, err)
	}
}

// User creates a user (versitygw's role "user") that may do nothing on the
// root user's buckets until Allow lets it.
func (s *Server) User(t testing.TB, accessKey, secretKey string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), s.bin, "admin", "--access", AccessKey, "--secret", SecretKey, "--endpoint-url", s.Endpoint,
		"create-user", "--access", accessKey, "--secret", secretKey, "--role", "user")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("create user %s: %v\n%s", accessKey, err, out)
	}
}

// Allow sets bucket's policy to let the user whose access key is
// accessKey do actions ("s3:GetObject", "s3:ListBucket", …) on it and its
// objects. It replaces the bucket's policy.
func (s *Server) Allow(t testing.TB, bucket, accessKey string, actions ...string) {
	t.Helper()
	policy, err := json.Marshal(map[string]any{
		"Version": "2012-10-17",
		"Statement": []map[string]any{{
			"Effect":    "Allow",
			"Principal": map[string]any{"AWS": []string{accessKey}},
			"Action":    actions,
			"Resource":  []string{"arn:aws:s3:::" + bucket, "arn:aws:s3:::" + bucket + "/*"},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Client(t).PutBucketPolicy(t.Context(), &s3.PutBucketPolicyInput{Bucket: aws.String(bucket), Policy: aws.String(string(policy))})
	if err != nil {
		t.Fatalf("allow %s %s on bucket %s: %v", accessKey, strings.Join(actions, ", "), bucket, err)
	}
}

// Client is an S3 client of the server's root user.
func (s *Server) Client(t testing.TB) *s3.Client {
	t.Helper()
	return s3.New(s3.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(s.Endpoint),
		UsePathStyle: true,
		HTTPClient:   awsbody.Wrap(nil),
		Credentials: aws.CredentialsProviderFunc(func(ctx context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: AccessKey, SecretAccessKey: SecretKey}, nil
		}),
	})
}

// Objects lists a bucket's keys under prefix as the service has them,
// tombstones and all.
func (s *Server) Objects(t testing.TB, bucket, prefix string) []string {
	t.Helper()
	var keys []string
	p := s3.NewListObjectsV2Paginator(s.Client(t), &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String(prefix)})
	for p.HasMorePages() {
		page, err := p.NextPage(t.Context())
		if err != nil {
			t.Fatalf("list bucket %s: %v", bucket, err)
		}
		for _, o := range page.Contents {
			keys = append(keys, aws.ToString(o.Key))
		}
	}
	return keys
}

// Object reads an object as the service has it, with its metadata.
func (s *Server) Object(t testing.TB, bucket, key string) (data []byte, meta map[string]string) {
	t.Helper()
	out, err := s.Client(t).GetObject(t.Context(), &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("get %s/%s: %v", bucket, key, err)
	}
	defer func() { _ = out.Body.Close() }()
	var b bytes.Buffer
	if _, err := b.ReadFrom(out.Body); err != nil {
		t.Fatalf("read %s/%s: %v", bucket, key, err)
	}
	return b.Bytes(), out.Metadata
}

// URL is the state URL of a prefix of a bucket on the server.
func (s *Server) URL(bucket, prefix string) string {
	return fmt.Sprintf("s3://%s/%s?endpoint=%s&path_style=true", bucket, prefix, s.Endpoint)
}

// Proxy serves the server through a reverse proxy that passes each answer
// to change first (a service that strips headers, says other things), and
// returns the proxy's URL, closed when the test ends.
func (s *Server) Proxy(t testing.TB, change func(*http.Response) error) string {
	t.Helper()
	target, err := url.Parse(s.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ModifyResponse = change
	proxy := httptest.NewServer(rp)
	t.Cleanup(proxy.Close)
	return proxy.URL
}

// StripChecksums drops the x-amz-checksum-* headers of an answer, as
// S3-compatible services that compute none send it.
func StripChecksums(r *http.Response) error {
	for h := range r.Header {
		if strings.HasPrefix(strings.ToLower(h), "x-amz-checksum") {
			r.Header.Del(h)
		}
	}
	return nil
}
