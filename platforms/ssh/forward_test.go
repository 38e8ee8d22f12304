package ssh

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/cloudtransit/transit/freeport"
)

// listen starts a TCP listener on loopback for one test.
func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// accept returns the listener's next connection, closed with the test.
func accept(t *testing.T, l net.Listener) <-chan net.Conn {
	t.Helper()
	ch := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			t.Errorf("accept: %v", err)
			close(ch)
			return
		}
		t.Cleanup(func() { _ = c.Close() })
		ch <- c
	}()
	return ch
}

func TestDialContextForwards(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	c := e.dial(t)
	l := listen(t)
	accepted := accept(t, l)

	conn, err := c.DialContext(t.Context(), "tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if got := conn.RemoteAddr(); got.String() != l.Addr().String() || got.Network() != "tcp" {
		t.Errorf("RemoteAddr %s/%s, want tcp/%s", got.Network(), got, l.Addr())
	}
	server := <-accepted
	// Both ways, more than a channel window (2 MiB) each.
	big := make([]byte, 5<<20)
	for i := range big {
		big[i] = byte(i * 7)
	}
	echoed := make(chan error, 1)
	go func() {
		_, err := io.CopyN(server, server, int64(len(big)))
		echoed <- err
	}()
	wrote := make(chan error, 1)
	go func() {
		_, err := conn.Write(big)
		wrote <- err
	}()
	got := make([]byte, len(big))
	if _, err := io.ReadFull(conn, got); err != nil {
		t.Fatal(err)
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if err := <-echoed; err != nil {
		t.Fatal(err)
	}
	if string(got) != string(big) {
		t.Error("the bytes came back changed")
	}

	// Closing sends what was written, then EOF; the SSH connection lives
	// on.
	if _, err := conn.Write([]byte("bye")); err != nil {
		t.Fatal(err)
	}
	if err := conn.Close(); err != nil {
		t.Fatal(err)
	}
	if err := server.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if rest, err := io.ReadAll(server); err != nil || string(rest) != "bye" {
		t.Errorf("the node's side read %q, %v after Close, want %q and EOF", rest, err, "bye")
	}
	if out, err := c.Run(t.Context(), "after", "echo ok"); err != nil || out != "ok\n" {
		t.Errorf("Run after closing a forwarded connection = %q, %v", out, err)
	}

	// The node's side closing ends reads with EOF.
	accepted = accept(t, l)
	conn, err = c.DialContext(t.Context(), "tcp4", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	server = <-accepted
	if _, err := server.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if err := server.Close(); err != nil {
		t.Fatal(err)
	}
	if err := conn.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(conn); err != nil || string(got) != "hello" {
		t.Errorf("read %q, %v, want %q and EOF", got, err, "hello")
	}
}

// A forwarded connection has working deadlines, as net/http and gRPC
// expect of a net.Conn.
func TestDialContextDeadlines(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	c := e.dial(t)
	l := listen(t)
	accepted := accept(t, l)
	conn, err := c.DialContext(t.Context(), "tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	server := <-accepted

	if err := conn.SetReadDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	_, err = conn.Read(make([]byte, 1))
	var ne net.Error
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("Read past the deadline = %v, want a timeout", err)
	}
	// Still usable once the deadline is lifted.
	if err := conn.SetDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, err := server.Write([]byte("late\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(conn).ReadString('\n'); err != nil || line != "late\n" {
		t.Errorf("read %q, %v after lifting the deadline", line, err)
	}
	// A write nobody reads blocks until its deadline. The node's side does
	// not read: the SSH window, sshd's buffers and the socket fill up.
	if err := conn.SetWriteDeadline(time.Now().Add(500 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := conn.Write(make([]byte, 256<<20))
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("Write past the deadline = %v, want a timeout", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Write still blocked 10s after its deadline")
	}
}

// net/http speaks HTTP/2 over TLS through forwarded connections, as a
// client of a master's API server does.
func TestDialContextHTTP(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	c := e.dial(t)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = fmt.Fprintf(w, "%s %s", r.Proto, r.URL.Path)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)

	tr := srv.Client().Transport.(*http.Transport).Clone()
	var dials atomic.Int32
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return c.DialContext(ctx, network, addr)
	}
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	for i := range 3 {
		resp, err := client.Get(srv.URL + "/api/" + strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if want := "HTTP/2.0 /api/" + strconv.Itoa(i); err != nil || string(body) != want {
			t.Errorf("GET %d: %q, %v, want %q", i, body, err, want)
		}
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("%d forwarded connections, want 1 for HTTP/2", n)
	}
}

// A port nothing listens on is the node refusing the channel, not a broken
// connection.
func TestDialContextRefused(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	c := e.dial(t)
	addr := "127.0.0.1:" + strconv.Itoa(freeport.Port(t))
	_, err := c.DialContext(t.Context(), "tcp", addr)
	var oe *gossh.OpenChannelError
	if !errors.As(err, &oe) || oe.Reason != gossh.ConnectionFailed {
		t.Errorf("DialContext = %v, want an *OpenChannelError", err)
	}
	if _, err := c.DialContext(t.Context(), "udp", addr); err == nil {
		t.Error("DialContext over udp succeeded")
	}
	if out, err := c.Run(t.Context(), "after", "echo ok"); err != nil || out != "ok\n" {
		t.Errorf("Run after a refused forward = %q, %v", out, err)
	}
}

// A dial the node cannot complete (its connect hangs) returns as soon as
// ctx is cancelled.
func TestDialContextCancel(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	c := e.dial(t)
	addr := fullListener(t)

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := c.DialContext(ctx, "tcp", addr); !errors.Is(err, context.Canceled) {
		t.Errorf("DialContext with a cancelled ctx = %v", err)
	}

	ctx, cancel = context.WithCancel(t.Context())
	defer cancel()
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	conn, err := c.DialContext(ctx, "tcp", addr)
	if err == nil {
		_ = conn.Close()
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("DialContext = %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("DialContext returned %s after its ctx was cancelled", d-200*time.Millisecond)
	}
	if out, err := c.Run(t.Context(), "after", "echo ok"); err != nil || out != "ok\n" {
		t.Errorf("Run after a cancelled forward = %q, %v", out, err)
	}
}

// fullListener returns the address of a loopback socket whose accept
// queue is full: Linux drops further SYNs, so a connect there hangs.
func fullListener(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil { // room for one connection
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(sa.(*syscall.SockaddrInet4).Port)
	filler, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = filler.Close() })
	// The queue is full: another connect does not complete.
	if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
		_ = c.Close()
		t.Fatal("a second connect to a full accept queue completed")
	}
	return addr
}
