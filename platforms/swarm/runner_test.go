package swarm

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/platforms/ssh"
)

// The stdin reaches the script through a real sh, inside a subshell whose
// stdin is /dev/null as ssh.Client.Run runs scripts, unexpanded.
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
	if _, err := withStdin("cat", []byte("a\n"+stdinEnd+"\nrm -rf /\n")); err == nil {
		t.Error("stdin that ends the here-document early was accepted")
	}
	if s, err := withStdin("cat", nil); err != nil || s != "cat" {
		t.Errorf("without stdin the script changed: %q, %v", s, err)
	}
}

// fakeSession is one SSH connection; run answers each script.
type fakeSession struct {
	closed   atomic.Bool
	inFlight atomic.Int32
	maxIn    atomic.Int32
	run      func(ctx context.Context, script string) (string, error)
}

func (s *fakeSession) Run(ctx context.Context, _, script string) (string, error) {
	if s.closed.Load() {
		return "", &ssh.RunError{ExitStatus: -1, Err: errors.New("open ssh session: EOF")}
	}
	n := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	for {
		m := s.maxIn.Load()
		if n <= m || s.maxIn.CompareAndSwap(m, n) {
			break
		}
	}
	return s.run(ctx, script)
}

func (s *fakeSession) Close() error { s.closed.Store(true); return nil }

// fakeDialer records each dial's config and hands out sessions.
type fakeDialer struct {
	mu       sync.Mutex
	waits    []string // "<node>: <wait timeout>/<dial timeout>"
	sessions []*fakeSession
	next     func(ctx context.Context, t ssh.Target) (*fakeSession, error)
}

func (f *fakeDialer) dial(ctx context.Context, cfg ssh.Config, t ssh.Target) (session, error) {
	f.mu.Lock()
	f.waits = append(f.waits, fmt.Sprintf("%s: %s/%s", t.Name, cfg.WaitTimeout, cfg.DialTimeout))
	f.mu.Unlock()
	s, err := f.next(ctx, t)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.sessions = append(f.sessions, s)
	f.mu.Unlock()
	return s, nil
}

func echoSession(context.Context, ssh.Target) (*fakeSession, error) {
	return &fakeSession{run: func(_ context.Context, script string) (string, error) { return script, nil }}, nil
}

func testRunner(next func(context.Context, ssh.Target) (*fakeSession, error)) (*sshRunner, *fakeDialer) {
	d := &fakeDialer{next: next}
	r := newSSHRunner(ssh.Config{WaitTimeout: 2 * time.Minute, DialTimeout: 10 * time.Second})
	r.dial = d.dial
	return r, d
}

func TestRunnerReusesOneConnectionPerNode(t *testing.T) {
	t.Parallel()
	r, d := testRunner(echoSession)
	joined := master1
	joined.Phase = districts.PhaseJoined
	for i := range 20 { // a drain polling a manager
		if out, err := r.Run(t.Context(), joined, "poll", fmt.Sprint(i), nil); err != nil || out != fmt.Sprint(i) {
			t.Fatalf("Run %d: %q, %v", i, out, err)
		}
	}
	if _, err := r.Run(t.Context(), worker1, "install", "x", nil); err != nil {
		t.Fatal(err)
	}
	// A member answered before: a short wait. A freshly launched
	// machine: the long boot wait.
	want := []string{master1.ID + ": 10s/5s", worker1.ID + ": 2m0s/10s"}
	if diff := cmp.Diff(want, d.waits); diff != "" {
		t.Errorf("dials (-want +got):\n%s", diff)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	for i, s := range d.sessions {
		if !s.closed.Load() {
			t.Errorf("connection %d left open by Close", i)
		}
	}
	if _, err := r.Run(t.Context(), joined, "poll", "x", nil); err == nil {
		t.Error("Run after Close succeeded")
	}
}

// A connection that broke while idle is dropped and the script runs once
// on a new one, dialed with the short wait since the machine answered
// before; a script that failed by itself does not cost the connection.
func TestRunnerRedialsABrokenConnection(t *testing.T) {
	t.Parallel()
	r, d := testRunner(echoSession)
	fresh := worker1 // launched: long wait on the first dial only
	if _, err := r.Run(t.Context(), fresh, "install", "x", nil); err != nil {
		t.Fatal(err)
	}
	d.sessions[0].run = func(context.Context, string) (string, error) {
		return "", &ssh.RunError{ExitStatus: 1, Stderr: "no such service"}
	}
	if _, err := r.Run(t.Context(), fresh, "check", "x", nil); err == nil {
		t.Fatal("a failing script succeeded")
	}
	d.sessions[0].closed.Store(true) // the network dropped it
	out, err := r.Run(t.Context(), fresh, "join", "y", nil)
	if err != nil || out != "y" {
		t.Fatalf("Run on a broken connection: %q, %v", out, err)
	}
	want := []string{worker1.ID + ": 2m0s/10s", worker1.ID + ": 10s/5s"}
	if diff := cmp.Diff(want, d.waits); diff != "" {
		t.Errorf("dials (-want +got):\n%s", diff)
	}
	// Broken after the script printed something: it ran, so it is not
	// run again, but the connection is dropped.
	d.sessions[1].run = func(context.Context, string) (string, error) {
		return "partial", &ssh.RunError{ExitStatus: -1, Stdout: "partial", Err: errors.New("connection lost")}
	}
	if _, err := r.Run(t.Context(), fresh, "join", "y", nil); err == nil {
		t.Fatal("a script whose connection broke under it succeeded")
	}
	if _, err := r.Run(t.Context(), fresh, "join", "y", nil); err != nil {
		t.Fatalf("Run after a lost connection: %v", err)
	}
	if len(d.waits) != 3 {
		t.Errorf("dials %q, want a third after the lost connection only", d.waits)
	}
}

// Many runs at once on one node (the loop labels every node through one
// manager) share a single dial and stay below sshd's MaxSessions.
func TestRunnerBoundsSessionsPerConnection(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	dialed := make(chan struct{})
	r, d := testRunner(func(ctx context.Context, _ ssh.Target) (*fakeSession, error) {
		<-dialed // every caller is waiting by now
		return &fakeSession{run: func(ctx context.Context, _ string) (string, error) {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return "ok", nil
		}}, nil
	})
	var wg sync.WaitGroup
	errs := make(chan error, 30)
	for range 30 {
		wg.Go(func() {
			if _, err := r.Run(t.Context(), master1, "label", "x", nil); err != nil {
				errs <- err
			}
		})
	}
	close(dialed)
	time.Sleep(50 * time.Millisecond) // let every run reach its session
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if len(d.waits) != 1 {
		t.Errorf("%d dials for one node, want 1", len(d.waits))
	}
	if m := d.sessions[0].maxIn.Load(); m > sessionsPerConn {
		t.Errorf("%d sessions at once on one connection, want at most %d", m, sessionsPerConn)
	}
}

// A caller whose own dial was cancelled (Members cuts the losing masters
// short) does not hand its cancellation to another caller still waiting.
func TestRunnerCancelledDialIsNotShared(t *testing.T) {
	t.Parallel()
	var dials atomic.Int32
	started := make(chan struct{})
	r, _ := testRunner(func(ctx context.Context, t ssh.Target) (*fakeSession, error) {
		if dials.Add(1) == 1 {
			close(started)
			<-ctx.Done()
			return nil, fmt.Errorf("%s: connect over SSH: %w", t.Name, ctx.Err())
		}
		return echoSession(ctx, t)
	})
	ctx, cancel := context.WithCancel(t.Context())
	first := make(chan error, 1)
	go func() {
		_, err := r.Run(ctx, master1, "ask", "x", nil)
		first <- err
	}()
	<-started
	second := make(chan error, 1)
	go func() {
		_, err := r.Run(t.Context(), master1, "ask", "x", nil)
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
