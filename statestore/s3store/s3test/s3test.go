// Package s3test starts a real S3-compatible server for tests: versitygw
// (`make s3-server`) on a free loopback port, over a temporary directory,
// killed when the test ends.
package s3test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

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
}

// Binary finds the server: TRANSIT_S3_SERVER, or bin/versitygw-* of the
// module. A missing one fails the test, naming how to build it.
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("TRANSIT_S3_SERVER"); p != "" {
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

// Start starts a server; the test's cleanup stops it.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := Binary(t)
	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	cmd := exec.Command(bin, "--access", AccessKey, "--secret", SecretKey, "--port", addr, "--quiet", "posix", dir)
	logFile, err := os.Create(filepath.Join(t.TempDir(), "versitygw.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = logFile.Close()
	})
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			_ = c.Close()
			break
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logFile.Name())
			t.Fatalf("%s did not listen on %s within 15 s:\n%s", bin, addr, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return &Server{Endpoint: "http://" + addr, Dir: dir}
}

// Options are the store options that reach the server as its root user.
func (s *Server) Options() s3store.Options {
	return s3store.Options{Endpoint: s.Endpoint, PathStyle: true, AccessKeyID: AccessKey, SecretAccessKey: SecretKey, MaxAttempts: 2, MaxBackoff: 50 * time.Millisecond}
}

// Bucket creates a bucket and returns its name.
func (s *Server) Bucket(t testing.TB, name string) string {
	t.Helper()
	c := s.Client(t)
	if _, err := c.CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		t.Fatalf("create bucket %s: %v", name, err)
	}
	return name
}

// Client is an S3 client of the server's root user.
func (s *Server) Client(t testing.TB) *s3.Client {
	t.Helper()
	o := s.Options()
	return s3.New(s3.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(o.Endpoint),
		UsePathStyle: true,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: AccessKey, SecretAccessKey: SecretKey}, nil
		}),
	})
}

// URL is the state URL of a prefix of a bucket on the server.
func (s *Server) URL(bucket, prefix string) string {
	return fmt.Sprintf("s3://%s/%s?endpoint=%s&path_style=true", bucket, prefix, s.Endpoint)
}
