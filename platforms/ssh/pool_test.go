package ssh

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	gossh "golang.org/x/crypto/ssh"

	"github.com/cloudtransit/transit/districts"
)

var (
	master1 = districts.Node{ID: "c-master-1", Role: districts.RoleMaster, ProviderID: "i-m1", PublicIP: "10.0.0.2"}
	worker1 = districts.Node{ID: "c-worker-1", Role: districts.RoleWorker, ProviderID: "i-w1", PublicIP: "10.0.0.3"}
)

func TestNodeTarget(t *testing.T) {
	t.Parallel()
	launched := time.Unix(1e9, 0)
	tests := []struct {
		name string
		node districts.Node
		want Target
	}{{
		name: "public address first",
		node: districts.Node{ID: "c-w-1", ProviderID: "i-1", PublicIP: "203.0.113.7", PrivateIP: "10.0.0.7", CreatedAt: launched},
		want: Target{HostID: "i-1", Name: "c-w-1", Addr: "203.0.113.7", LaunchedAt: launched},
	}, {
		name: "private address without a public one",
		node: districts.Node{ID: "c-w-2", ProviderID: "i-2", PrivateIP: "10.0.0.8"},
		want: Target{HostID: "i-2", Name: "c-w-2", Addr: "10.0.0.8"},
	}}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, NodeTarget(tt.node)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.name, diff)
		}
	}
}

// The stdin reaches the script through a real sh, inside a subshell whose
// stdin is /dev/null as Client.Run runs scripts, unexpanded.
func TestWithStdinRunsInSh(t *testing.T) {
	t.Parallel()
	data := `{"JoinToken":"SWMTKN-1-x","Addr":"$HOME ` + "`id`" + ` '\''"}`
	script, err := withStdin("set -eu\ncat\n", []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(strings.SplitN(script, "<<", 2)[0], "SWMTKN") {
		t.Fatalf("the data is in the script's commands:\n%s", script)
	}
	cmd := exec.CommandContext(t.Context(), "sh", "-s")
	cmd.Stdin = strings.NewReader("{\n(\n" + script + "\n) </dev/null\n}\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sh: %v: %s", err, out)
	}
	if got := string(out); got != data+"\n" {
		t.Errorf("the script read %q, want %q", got, data+"\n")
	}
	if s, err := withStdin("cat", nil); err != nil || s != "cat" {
		t.Errorf("without stdin the script changed: %q, %v", s, err)
	}
}

// Data holding the line that ends the here-document would run the rest as
// commands: it is refused, by Pool.Run too, before any dial.
func TestWithStdinRefusesItsEndMarker(t *testing.T) {
	t.Parallel()
	for _, data := range []string{
		"a\n" + stdinEnd + "\nrm -rf /\n",
		stdinEnd + "\nrm -rf /",
		"a\n" + stdinEnd,
	} {
		if _, err := withStdin("cat", []byte(data)); err == nil {
			t.Errorf("stdin %q that ends the here-document early was accepted", data)
		}
	}
	for _, data := range []string{"x" + stdinEnd + "\n", stdinEnd + "x\n", " " + stdinEnd} {
		if _, err := withStdin("cat", []byte(data)); err != nil {
			t.Errorf("stdin %q refused: %v", data, err)
		}
	}
	p, d := testPool(echoConn)
	_, err := p.Run(t.Context(), master1, "join", "cat", []byte("a\n"+stdinEnd+"\n"))
	if err == nil || !strings.Contains(err.Error(), stdinEnd) {
		t.Errorf("Run = %v, want the end marker refused", err)
	}
	if len(d.waits) != 0 {
		t.Errorf("dials %q for a refused stdin", d.waits)
	}
}

// fakeConn is one SSH connection; run, upload and forward answer each call.
type fakeConn struct {
	closed   atomic.Bool
	inFlight atomic.Int32 // sessions
	maxIn    atomic.Int32
	run      func(ctx context.Context, script string) (string, error)
	upload   func(ctx context.Context, content io.Reader, size int64) error
	forward  func(ctx context.Context, addr string) (net.Conn, error)
}

var _ nodeConn = (*fakeConn)(nil)

// session counts a session while it runs.
func (c *fakeConn) session() func() {
	n := c.inFlight.Add(1)
	for {
		m := c.maxIn.Load()
		if n <= m || c.maxIn.CompareAndSwap(m, n) {
			break
		}
	}
	return func() { c.inFlight.Add(-1) }
}

func (c *fakeConn) Run(ctx context.Context, _, script string) (string, error) {
	if c.closed.Load() {
		return "", &RunError{ExitStatus: -1, Err: errors.New("open ssh session: EOF")}
	}
	defer c.session()()
	return c.run(ctx, script)
}

func (c *fakeConn) UploadFrom(ctx context.Context, _ string, _ fs.FileMode, content io.Reader, size int64) error {
	if c.closed.Load() {
		return &RunError{ExitStatus: -1, Err: errors.New("open ssh session: EOF")}
	}
	defer c.session()()
	return c.upload(ctx, content, size)
}

func (c *fakeConn) DialContext(ctx context.Context, _, addr string) (net.Conn, error) {
	if c.closed.Load() {
		return nil, fmt.Errorf("forward to %s: %w", addr, io.EOF)
	}
	return c.forward(ctx, addr)
}

func (c *fakeConn) Close() error { c.closed.Store(true); return nil }

// fakeDialer records each dial's config and hands out connections.
type fakeDialer struct {
	mu    sync.Mutex
	waits []string // "<node>: <wait timeout>/<dial timeout>"
	conns []*fakeConn
	next  func(ctx context.Context, t Target) (*fakeConn, error)
}

func (f *fakeDialer) dial(ctx context.Context, cfg Config, t Target) (nodeConn, error) {
	f.mu.Lock()
	f.waits = append(f.waits, fmt.Sprintf("%s: %s/%s", t.Name, cfg.WaitTimeout, cfg.DialTimeout))
	f.mu.Unlock()
	c, err := f.next(ctx, t)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.conns = append(f.conns, c)
	f.mu.Unlock()
	return c, nil
}

func (f *fakeDialer) dials() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.waits)
}

// echoConn answers a script with itself, takes an upload whole and
// forwards to one end of a pipe.
func echoConn(context.Context, Target) (*fakeConn, error) {
	return &fakeConn{
		run: func(_ context.Context, script string) (string, error) { return script, nil },
		upload: func(_ context.Context, content io.Reader, size int64) error {
			_, err := io.CopyN(io.Discard, content, size)
			return err
		},
		forward: func(context.Context, string) (net.Conn, error) {
			local, remote := net.Pipe()
			_ = remote.Close()
			return local, nil
		},
	}, nil
}

func testPool(next func(context.Context, Target) (*fakeConn, error)) (*Pool, *fakeDialer) {
	d := &fakeDialer{next: next}
	p := NewPool(Config{WaitTimeout: 2 * time.Minute, DialTimeout: 10 * time.Second}, "the test driver")
	p.dial = d.dial
	return p, d
}

func TestPoolReusesOneConnectionPerNode(t *testing.T) {
	t.Parallel()
	p, d := testPool(echoConn)
	joined := master1
	joined.Phase = districts.PhaseJoined
	for i := range 20 { // a drain polling a manager
		if out, err := p.Run(t.Context(), joined, "poll", fmt.Sprint(i), nil); err != nil || out != fmt.Sprint(i) {
			t.Fatalf("Run %d: %q, %v", i, out, err)
		}
	}
	if err := p.Upload(t.Context(), joined, "/etc/x", 0o644, strings.NewReader("x"), 1); err != nil {
		t.Fatal(err)
	}
	c, err := p.DialContext(t.Context(), joined, "tcp", "127.0.0.1:6443")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Run(t.Context(), worker1, "install", "x", nil); err != nil {
		t.Fatal(err)
	}
	// A member answered before: a short wait. A freshly launched
	// machine: the long boot wait.
	want := []string{master1.ID + ": 10s/5s", worker1.ID + ": 2m0s/10s"}
	if diff := cmp.Diff(want, d.waits); diff != "" {
		t.Errorf("dials (-want +got):\n%s", diff)
	}
	// Another machine at the same address is another connection.
	replaced := joined
	replaced.ProviderID = "i-m1-new"
	if _, err := p.Run(t.Context(), replaced, "poll", "x", nil); err != nil {
		t.Fatal(err)
	}
	if n := d.dials(); n != 3 {
		t.Errorf("%d dials, want a third for the new machine", n)
	}

	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	for i, c := range d.conns {
		if !c.closed.Load() {
			t.Errorf("connection %d left open by Close", i)
		}
	}
	_, err = p.Run(t.Context(), joined, "poll", "x", nil)
	if want := master1.ID + ": the test driver is closed"; err == nil || err.Error() != want {
		t.Errorf("Run after Close = %v, want %q", err, want)
	}
	if err := p.Upload(t.Context(), joined, "/etc/x", 0o644, strings.NewReader("x"), 1); err == nil {
		t.Error("Upload after Close succeeded")
	}
	if _, err := p.DialContext(t.Context(), joined, "tcp", "127.0.0.1:6443"); err == nil {
		t.Error("DialContext after Close succeeded")
	}
	if n := d.dials(); n != 3 {
		t.Errorf("%d dials, want none after Close", n)
	}
}

// A pool closed while it dials waits for the dial and closes the new
// connection.
func TestPoolClosedWhileDialing(t *testing.T) {
	t.Parallel()
	dialing, closed := make(chan struct{}), make(chan struct{})
	p, d := testPool(func(ctx context.Context, t Target) (*fakeConn, error) {
		close(dialing)
		<-closed
		return echoConn(ctx, t)
	})
	done := make(chan error, 1)
	go func() {
		_, err := p.Run(t.Context(), master1, "ask", "x", nil)
		done <- err
	}()
	<-dialing
	closeErr := make(chan error, 1)
	go func() { closeErr <- p.Close() }() // waits for the dial
	waitFor(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.closed
	})
	close(closed)
	if err := <-closeErr; err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil || !strings.Contains(err.Error(), "the test driver is closed") {
		t.Errorf("Run = %v, want the pool closed", err)
	}
	if !d.conns[0].closed.Load() {
		t.Error("the connection dialed during Close was left open")
	}
}

// A connection that broke while idle is dropped and the script runs once
// on a new one, dialed with the short wait since the machine answered
// before; a script that failed by itself does not cost the connection.
func TestPoolRedialsABrokenConnection(t *testing.T) {
	t.Parallel()
	p, d := testPool(echoConn)
	fresh := worker1 // launched: long wait on the first dial only
	if _, err := p.Run(t.Context(), fresh, "install", "x", nil); err != nil {
		t.Fatal(err)
	}
	d.conns[0].run = func(context.Context, string) (string, error) {
		return "", &RunError{ExitStatus: 1, Stderr: "no such service"}
	}
	if _, err := p.Run(t.Context(), fresh, "check", "x", nil); err == nil {
		t.Fatal("a failing script succeeded")
	}
	d.conns[0].closed.Store(true) // the network dropped it
	out, err := p.Run(t.Context(), fresh, "join", "y", nil)
	if err != nil || out != "y" {
		t.Fatalf("Run on a broken connection: %q, %v", out, err)
	}
	want := []string{worker1.ID + ": 2m0s/10s", worker1.ID + ": 10s/5s"}
	if diff := cmp.Diff(want, d.waits); diff != "" {
		t.Errorf("dials (-want +got):\n%s", diff)
	}
	// Broken after the script printed something: it ran, so it is not
	// run again, but the connection is dropped.
	var runs atomic.Int32
	d.conns[1].run = func(context.Context, string) (string, error) {
		runs.Add(1)
		return "partial", &RunError{ExitStatus: -1, Stdout: "partial", Err: errors.New("connection lost")}
	}
	if _, err := p.Run(t.Context(), fresh, "join", "y", nil); err == nil {
		t.Fatal("a script whose connection broke under it succeeded")
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("a script that printed output ran %d times", n)
	}
	if _, err := p.Run(t.Context(), fresh, "join", "y", nil); err != nil {
		t.Fatalf("Run after a lost connection: %v", err)
	}
	if n := d.dials(); n != 3 {
		t.Errorf("%d dials, want a third after the lost connection only", n)
	}
}

// The re-dial happens once: a new connection that fails too is not
// dialed again.
func TestPoolRedialsOnce(t *testing.T) {
	t.Parallel()
	var broken atomic.Bool
	p, d := testPool(func(ctx context.Context, t Target) (*fakeConn, error) {
		c, err := echoConn(ctx, t)
		c.closed.Store(broken.Load())
		return c, err
	})
	if _, err := p.Run(t.Context(), master1, "ask", "x", nil); err != nil {
		t.Fatal(err)
	}
	d.conns[0].closed.Store(true)
	broken.Store(true) // every new connection is broken too
	_, err := p.Run(t.Context(), master1, "ask", "x", nil)
	var re *RunError
	if !errors.As(err, &re) || re.ExitStatus != -1 {
		t.Fatalf("Run = %v, want the lost session's *RunError", err)
	}
	if n := d.dials(); n != 2 {
		t.Errorf("%d dials, want the first and one re-dial", n)
	}
	// A fresh connection failing is not retried: it was not reused.
	if _, err := p.Run(t.Context(), master1, "ask", "x", nil); err == nil {
		t.Fatal("Run on a broken new connection succeeded")
	}
	if n := d.dials(); n != 3 {
		t.Errorf("%d dials, want one more", n)
	}
}

// An upload on a connection that broke while idle, before content was
// read, runs again on a new connection; once content was read it cannot.
func TestPoolUploadOnABrokenConnection(t *testing.T) {
	t.Parallel()
	p, d := testPool(echoConn)
	if err := p.Upload(t.Context(), master1, "/etc/x", 0o644, strings.NewReader("first"), 5); err != nil {
		t.Fatal(err)
	}
	d.conns[0].closed.Store(true)
	var got strings.Builder
	up := func(_ context.Context, content io.Reader, size int64) error {
		_, err := io.CopyN(&got, content, size)
		return err
	}
	d.next = func(ctx context.Context, t Target) (*fakeConn, error) {
		c, err := echoConn(ctx, t)
		c.upload = up
		return c, err
	}
	if err := p.Upload(t.Context(), master1, "/etc/x", 0o644, strings.NewReader("second"), 6); err != nil {
		t.Fatalf("Upload on a broken connection: %v", err)
	}
	if got.String() != "second" {
		t.Errorf("uploaded %q, want %q", got.String(), "second")
	}
	if n := d.dials(); n != 2 {
		t.Fatalf("%d dials, want a re-dial", n)
	}

	// The connection breaks after reading part of the content: no second
	// attempt, and the connection is dropped.
	var attempts atomic.Int32
	d.conns[1].upload = func(_ context.Context, content io.Reader, _ int64) error {
		attempts.Add(1)
		if _, err := io.ReadFull(content, make([]byte, 2)); err != nil {
			return err
		}
		return &RunError{ExitStatus: -1, Err: errors.New("connection lost")}
	}
	content := strings.NewReader("third")
	if err := p.Upload(t.Context(), master1, "/etc/x", 0o644, content, 5); err == nil {
		t.Fatal("an upload whose connection broke under it succeeded")
	}
	if n := attempts.Load(); n != 1 {
		t.Errorf("an upload that read its content ran %d times", n)
	}
	if content.Len() != 3 {
		t.Errorf("%d bytes of content left, want the 3 the failed attempt did not read", content.Len())
	}
	if n := d.dials(); n != 2 {
		t.Errorf("%d dials, want none more", n)
	}
	if err := p.Upload(t.Context(), master1, "/etc/x", 0o644, strings.NewReader("4th"), 3); err != nil {
		t.Fatalf("Upload after a lost connection: %v", err)
	}
	if n := d.dials(); n != 3 {
		t.Errorf("%d dials, want a third after the lost connection", n)
	}
}

// A failed upload's straggling read (the goroutine sending stdin) cannot
// take content from the next attempt.
func TestGatedReaderStops(t *testing.T) {
	t.Parallel()
	content := strings.NewReader("abc")
	g := &gatedReader{r: content}
	if g.stop() {
		t.Error("stop says a read began before any")
	}
	if n, err := g.Read(make([]byte, 3)); n != 0 || !errors.Is(err, errUploadEnded) {
		t.Errorf("Read after stop = %d, %v", n, err)
	}
	if content.Len() != 3 {
		t.Error("a stopped gatedReader read its content")
	}
	g = &gatedReader{r: content}
	if n, err := g.Read(make([]byte, 1)); n != 1 || err != nil {
		t.Fatalf("Read = %d, %v", n, err)
	}
	if !g.stop() {
		t.Error("stop says no read began")
	}
}

func TestPoolDialContext(t *testing.T) {
	t.Parallel()
	p, d := testPool(echoConn)
	if _, err := p.DialContext(t.Context(), master1, "udp", "127.0.0.1:53"); err == nil {
		t.Error("DialContext over udp succeeded")
	}
	if _, err := p.DialContext(t.Context(), master1, "tcp", "127.0.0.1"); err == nil {
		t.Error("DialContext without a port succeeded")
	}
	if n := d.dials(); n != 0 {
		t.Errorf("%d dials for addresses that cannot be forwarded", n)
	}

	// The node refusing the channel says nothing about the connection.
	var refusals atomic.Int32
	if _, err := p.Run(t.Context(), master1, "ask", "x", nil); err != nil {
		t.Fatal(err)
	}
	d.conns[0].forward = func(context.Context, string) (net.Conn, error) {
		refusals.Add(1)
		return nil, fmt.Errorf("forward: %w", &gossh.OpenChannelError{Reason: gossh.ConnectionFailed, Message: "Connection refused"})
	}
	_, err := p.DialContext(t.Context(), master1, "tcp", "127.0.0.1:2379")
	if !errors.As(err, new(*gossh.OpenChannelError)) {
		t.Errorf("DialContext = %v, want the *OpenChannelError", err)
	}
	if n := refusals.Load(); n != 1 || d.conns[0].closed.Load() || d.dials() != 1 {
		t.Errorf("a refused channel: %d tries, connection closed %v, %d dials; want 1, false, 1", n, d.conns[0].closed.Load(), d.dials())
	}

	// A connection gone while idle: re-dialed once.
	d.conns[0].closed.Store(true)
	c, err := p.DialContext(t.Context(), master1, "tcp", "127.0.0.1:2379")
	if err != nil {
		t.Fatalf("DialContext on a broken connection: %v", err)
	}
	_ = c.Close()
	if n := d.dials(); n != 2 {
		t.Errorf("%d dials, want a re-dial", n)
	}

	// Forwarding takes no session slot: it works while every slot is
	// busy.
	release := make(chan struct{})
	d.conns[1].run = func(context.Context, string) (string, error) {
		<-release
		return "", nil
	}
	var wg sync.WaitGroup
	for range sessionsPerConn {
		wg.Go(func() {
			if _, err := p.Run(t.Context(), master1, "hold", "x", nil); err != nil {
				t.Error(err)
			}
		})
	}
	waitFor(t, func() bool { return d.conns[1].inFlight.Load() == sessionsPerConn })
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if c, err := p.DialContext(ctx, master1, "tcp", "127.0.0.1:6443"); err != nil {
		t.Errorf("DialContext with every session slot busy: %v", err)
	} else {
		_ = c.Close()
	}
	close(release)
	wg.Wait()
}

// Many runs and uploads at once on one node (the loop labels every node
// through one manager) share a single dial and stay below sshd's
// MaxSessions.
func TestPoolBoundsSessionsPerConnection(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	dialed := make(chan struct{})
	hold := func(ctx context.Context) {
		select {
		case <-release:
		case <-ctx.Done():
		}
	}
	p, d := testPool(func(ctx context.Context, _ Target) (*fakeConn, error) {
		<-dialed // every caller is waiting by now
		return &fakeConn{
			run: func(ctx context.Context, _ string) (string, error) { hold(ctx); return "ok", nil },
			upload: func(ctx context.Context, _ io.Reader, _ int64) error {
				hold(ctx)
				return nil
			},
		}, nil
	})
	var wg sync.WaitGroup
	errs := make(chan error, 30)
	for i := range 30 {
		wg.Go(func() {
			var err error
			if i%3 == 0 {
				err = p.Upload(t.Context(), master1, "/etc/x", 0o644, strings.NewReader(""), 0)
			} else {
				_, err = p.Run(t.Context(), master1, "label", "x", nil)
			}
			if err != nil {
				errs <- err
			}
		})
	}
	close(dialed)
	waitFor(t, func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return len(d.conns) == 1 && d.conns[0].inFlight.Load() == sessionsPerConn
	})
	time.Sleep(50 * time.Millisecond) // give the waiting callers a chance to exceed the bound
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := d.dials(); n != 1 {
		t.Errorf("%d dials for one node, want 1", n)
	}
	if m := d.conns[0].maxIn.Load(); m != sessionsPerConn {
		t.Errorf("%d sessions at once on one connection, want %d", m, sessionsPerConn)
	}
}

// A caller waiting for a session slot gives up when its ctx ends.
func TestPoolSessionWaitEndsWithCtx(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	p, d := testPool(func(ctx context.Context, t Target) (*fakeConn, error) {
		c, err := echoConn(ctx, t)
		c.run = func(context.Context, string) (string, error) { <-release; return "", nil }
		return c, err
	})
	var wg sync.WaitGroup
	for range sessionsPerConn {
		wg.Go(func() {
			if _, err := p.Run(t.Context(), master1, "hold", "x", nil); err != nil {
				t.Error(err)
			}
		})
	}
	defer func() { close(release); wg.Wait() }()
	waitFor(t, func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return len(d.conns) == 1 && d.conns[0].inFlight.Load() == sessionsPerConn
	})
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	_, err := p.Run(ctx, master1, "label", "x", nil)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "wait for a free ssh session") {
		t.Errorf("Run = %v, want the wait for a session cut short", err)
	}
}

// A caller whose own dial was cancelled (Members cuts the losing masters
// short) does not hand its cancellation to another caller still waiting.
func TestPoolCancelledDialIsNotShared(t *testing.T) {
	t.Parallel()
	var dials atomic.Int32
	started := make(chan struct{})
	p, _ := testPool(func(ctx context.Context, t Target) (*fakeConn, error) {
		if dials.Add(1) == 1 {
			close(started)
			<-ctx.Done()
			return nil, fmt.Errorf("%s: connect over SSH: %w", t.Name, ctx.Err())
		}
		return echoConn(ctx, t)
	})
	ctx, cancel := context.WithCancel(t.Context())
	first := make(chan error, 1)
	go func() {
		_, err := p.Run(ctx, master1, "ask", "x", nil)
		first <- err
	}()
	<-started
	second := make(chan error, 1)
	go func() {
		_, err := p.Run(t.Context(), master1, "ask", "x", nil)
		second <- err
	}()
	time.Sleep(20 * time.Millisecond) // the second caller waits for the first dial
	cancel()
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled Run: %v", err)
	}
	if err := <-second; err != nil {
		t.Errorf("the second caller got the first one's cancellation: %v", err)
	}
}

// waitFor polls cond until it holds, failing the test after 10s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	limit := time.NewTimer(10 * time.Second)
	defer limit.Stop()
	for !cond() {
		select {
		case <-limit.C:
			t.Fatal("condition not met after 10s")
		case <-tick.C:
		}
	}
}

// Over a real sshd, one connection carries a node's scripts, uploads and
// forwarded connections, and closing the pool ends them.
func TestPoolOverSSH(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	p := NewPool(e.cfg, "the test driver")
	t.Cleanup(func() { _ = p.Close() })
	n := districts.Node{ID: "node-1", ProviderID: e.target.HostID, PublicIP: e.sshd.addr, Phase: districts.PhaseJoined}

	secret := "token 'x' $HOME\n"
	if out, err := p.Run(t.Context(), n, "read secret", "cat", []byte(secret)); err != nil || out != secret {
		t.Errorf("Run = %q, %v, want the stdin back", out, err)
	}
	path := filepath.Join(t.TempDir(), "etc", "x.conf")
	content := strings.Repeat("line\n", 200000)
	if err := p.Upload(t.Context(), n, path, 0o600, strings.NewReader(content), int64(len(content))); err != nil {
		t.Fatal(err)
	}
	assertFile(t, path, []byte(content), 0o600)

	l := listen(t)
	accepted := accept(t, l)
	conn, err := p.DialContext(t.Context(), n, "tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server := <-accepted
	if _, err := conn.Write([]byte("ping\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(server).ReadString('\n'); err != nil || line != "ping\n" {
		t.Errorf("the node's side read %q, %v", line, err)
	}
	if _, err := p.Run(t.Context(), n, "after", "true", nil); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(e.sshd.log.String(), "Accepted publickey"); got != 1 {
		t.Errorf("%d SSH logins, want 1 for everything", got)
	}

	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := conn.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Errorf("Read from a forwarded connection after Close = %v, want io.EOF", err)
	}
}
