package ssh

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cloudtransit/transit/clock/clocktest"
	"github.com/cloudtransit/transit/shellquote"
)

func TestRunStdout(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	c := e.dial(t)
	out, err := c.Run(t.Context(), "greet", `printf '%s\n' "hello 'world'" "$(id -un)"`)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff("hello 'world'\nroot\n", out); diff != "" {
		t.Errorf("stdout (-want +got):\n%s", diff)
	}
	// Commands reading stdin get /dev/null, not the rest of the script.
	out, err = c.Run(t.Context(), "cat", "cat\necho after")
	if err != nil {
		t.Fatal(err)
	}
	if out != "after\n" {
		t.Errorf("stdout %q, want %q", out, "after\n")
	}
	// Several sessions on one connection, one after the other.
	for i := range 3 {
		out, err := c.Run(t.Context(), "count", "echo "+strconv.Itoa(i))
		if err != nil || out != strconv.Itoa(i)+"\n" {
			t.Errorf("run %d: %q, %v", i, out, err)
		}
	}
}

func TestRunOn(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	out, err := RunOn(t.Context(), e.cfg, e.target, "hostname", "echo ok")
	if err != nil || out != "ok\n" {
		t.Errorf("RunOn = %q, %v", out, err)
	}
}

func TestRunFailure(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	c := e.dial(t)
	out, err := c.Run(t.Context(), "fail on purpose", "echo out\necho err >&2\nexit 3\necho unreachable")
	var rerr *RunError
	if !errors.As(err, &rerr) {
		t.Fatalf("Run = %v, want *RunError", err)
	}
	want := &RunError{Target: e.target, Name: "fail on purpose", ExitStatus: 3, Stdout: "out\n", Stderr: "err\n"}
	if diff := cmp.Diff(want, rerr); diff != "" {
		t.Errorf("RunError (-want +got):\n%s", diff)
	}
	if out != "out\n" {
		t.Errorf("stdout %q, want the failed script's stdout", out)
	}
	if got, wantMsg := err.Error(), "node-1: fail on purpose failed (exit 3): err"; got != wantMsg {
		t.Errorf("message %q, want %q", got, wantMsg)
	}
	// A syntax error runs nothing: sh parses the whole script first.
	marker := filepath.Join(t.TempDir(), "ran")
	_, err = c.Run(t.Context(), "syntax", "touch "+shellquote.Quote(marker)+"\nif then fi")
	if !errors.As(err, &rerr) || rerr.ExitStatus == 0 {
		t.Errorf("syntax error: %v, want *RunError", err)
	}
	if _, serr := os.Stat(marker); serr == nil {
		t.Error("a script with a syntax error ran its first line")
	}
}

func TestRunCancelKillsRemoteCommand(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	c := e.dial(t)
	dir := t.TempDir()
	shPID, sleepPID := filepath.Join(dir, "sh.pid"), filepath.Join(dir, "sleep.pid")
	script := "echo started\necho $$ > " + shellquote.Quote(shPID) + "\nsleep 30 &\necho $! > " + shellquote.Quote(sleepPID) + ".tmp\nmv " +
		shellquote.Quote(sleepPID+".tmp") + " " + shellquote.Quote(sleepPID) + "\nwait\necho finished"

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := c.Run(ctx, "sleep", script)
		done <- result{out, err}
	}()
	pids := []int{readPID(t, sleepPID), readPID(t, shPID)}
	cancel()
	r := <-done

	if !errors.Is(r.err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", r.err)
	}
	var rerr *RunError
	if !errors.As(r.err, &rerr) {
		t.Fatalf("Run = %v, want a *RunError carrying the output", r.err)
	}
	if rerr.ExitStatus != -1 || rerr.Stdout != "started\n" || r.out != "started\n" {
		t.Errorf("RunError exit %d stdout %q, Run stdout %q; want -1 and the output so far", rerr.ExitStatus, rerr.Stdout, r.out)
	}
	for _, pid := range pids {
		waitGone(t, pid)
	}
	// The connection still works.
	if out, err := c.Run(t.Context(), "after", "echo ok"); err != nil || out != "ok\n" {
		t.Errorf("Run after cancel = %q, %v", out, err)
	}
}

// readPID waits for the script to write its pid file.
func readPID(t *testing.T, path string) int {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		data, err := os.ReadFile(path)
		if err == nil {
			pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			return pid
		}
		select {
		case <-t.Context().Done():
			t.Fatalf("script never wrote %s", path)
		case <-tick.C:
		}
	}
}

// waitGone waits until process pid has exited (a zombie counts: PID 1 may
// not reap it here), failing if it still runs after 10s; the killed
// command would otherwise have run for 30s.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	limit := time.NewTimer(10 * time.Second)
	defer limit.Stop()
	for {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return
		}
		// stat is "pid (comm) S ..."; comm may contain spaces.
		if i := bytes.LastIndexByte(stat, ')'); i >= 0 && len(stat) > i+2 && (stat[i+2] == 'Z' || stat[i+2] == 'X') {
			return
		}
		select {
		case <-limit.C:
			t.Fatalf("remote process %d still running after cancel: %s", pid, stat)
		case <-tick.C:
		}
	}
}

func TestUpload(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	c := e.dial(t)
	dir := filepath.Join(t.TempDir(), "it's a dir", "sub")
	path := filepath.Join(dir, "file.conf")
	content := make([]byte, 0, 300)
	for i := range 256 {
		content = append(content, byte(i))
	}
	content = append(content, "\n'quoted' $HOME `id`\n"...)

	if err := c.Upload(t.Context(), path, 0o640, content); err != nil {
		t.Fatal(err)
	}
	assertFile(t, path, content, 0o640)

	// Replacing the file.
	if err := c.Upload(t.Context(), path, 0o600, []byte("second")); err != nil {
		t.Fatal(err)
	}
	assertFile(t, path, []byte("second"), 0o600)

	// An empty file.
	if err := c.Upload(t.Context(), path, 0o644, nil); err != nil {
		t.Fatal(err)
	}
	assertFile(t, path, nil, 0o644)

	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("upload left temporary files: %v", entries)
	}

	// A failed upload is a *RunError with sh's complaint.
	err = c.Upload(t.Context(), filepath.Join(path, "under-a-file"), 0o644, []byte("x"))
	var rerr *RunError
	if !errors.As(err, &rerr) || rerr.Stderr == "" {
		t.Errorf("upload below a file = %v, want *RunError with stderr", err)
	}
}

func assertFile(t *testing.T, path string, content []byte, mode os.FileMode) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, content) {
		t.Errorf("%s: content %q, want %q", path, got, content)
	}
	assertMode(t, path, mode)
}

func TestDialWaitsForSSHD(t *testing.T) {
	t.Parallel()
	requireSSHD(t)
	state := t.TempDir()
	key, err := EnsureKey(state, "test")
	if err != nil {
		t.Fatal(err)
	}
	hk, err := OpenHostKeys(HostKeysPath(state, "test"))
	if err != nil {
		t.Fatal(err)
	}
	s := newSSHD(t, key.AuthorizedKey) // not started
	// sshd starts only once Dial has failed and backed off four times
	// (1.5s of its backoff, none of it real time).
	clk := clocktest.NewFake(time.Unix(1e9, 0))
	clk.OnSleep = func(context.Context, time.Duration) error {
		if len(clk.Sleeps()) == 4 {
			s.start() // returns once sshd listens
		}
		return nil
	}
	cfg := Config{Signer: key.Signer, HostKeys: hk, Clock: clk}
	c, err := Dial(t.Context(), cfg, Target{HostID: "i-late", Addr: s.addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	if n := len(clk.Sleeps()); n < 4 {
		t.Errorf("Dial slept %d times, want at least 4", n)
	}
	if out, err := c.Run(t.Context(), "echo", "echo up"); err != nil || out != "up\n" {
		t.Errorf("Run = %q, %v", out, err)
	}
}

func TestDialWrongKey(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	clk := clocktest.NewFake(time.Unix(1e9, 0))
	cfg := e.cfg
	cfg.Signer = newSigner(t)
	cfg.Clock = clk
	cfg.WaitTimeout = 30 * time.Second
	_, err := Dial(t.Context(), cfg, e.target)
	if !errors.Is(err, ErrAuth) {
		t.Fatalf("Dial = %v, want ErrAuth", err)
	}
	var aerr *AuthError
	if !errors.As(err, &aerr) {
		t.Fatalf("Dial = %v, want *AuthError", err)
	}
	if n := len(clk.Sleeps()); n != 0 {
		t.Errorf("Dial retried an auth failure %d times", n)
	}
	for _, want := range []string{"node-1 (" + e.sshd.addr + "): sshd refused transit's key for user root: ", e.key.Path + ".pub"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
}

func TestDialHostKeyChanged(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	c := e.dial(t)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	hostKeys := HostKeysPath(filepath.Dir(e.key.Path), "test")
	before, err := os.ReadFile(hostKeys)
	if err != nil {
		t.Fatal(err)
	}
	pinned, ok := e.cfg.HostKeys.Pinned(e.target.HostID)
	if !ok {
		t.Fatal("first Dial pinned no host key")
	}

	// The machine is rebuilt: same address, new host key.
	e.sshd.stop()
	e.sshd.writeHostKey()
	e.sshd.start()

	clk := clocktest.NewFake(time.Unix(1e9, 0))
	cfg := e.cfg
	cfg.Clock = clk
	_, err = Dial(t.Context(), cfg, e.target)
	var changed *HostKeyChangedError
	if !errors.As(err, &changed) {
		t.Fatalf("Dial = %v, want *HostKeyChangedError", err)
	}
	if n := len(clk.Sleeps()); n != 0 {
		t.Errorf("Dial retried a changed host key %d times", n)
	}
	if changed.HostID != e.target.HostID || changed.File != hostKeys || changed.Pinned == changed.Presented {
		t.Errorf("HostKeyChangedError %+v", changed)
	}
	after, err := os.ReadFile(hostKeys)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(before), string(after)); diff != "" {
		t.Errorf("pin file changed (-before +after):\n%s", diff)
	}
	if got, _ := e.cfg.HostKeys.Pinned(e.target.HostID); !sameKey(got, pinned) {
		t.Error("pin changed in memory")
	}
}

func TestDialHostKeyStoreFailureNotRetried(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	path := filepath.Join(t.TempDir(), "known_hosts")
	hk := openHostKeys(t, path)
	if err := os.Mkdir(path, 0o700); err != nil { // a directory where the file should be
		t.Fatal(err)
	}
	clk := clocktest.NewFake(time.Unix(1e9, 0))
	cfg := e.cfg
	cfg.HostKeys = hk
	cfg.Clock = clk
	_, err := Dial(t.Context(), cfg, e.target)
	if err == nil || !strings.Contains(err.Error(), "check host key") {
		t.Fatalf("Dial = %v, want a host key store error", err)
	}
	if n := len(clk.Sleeps()); n != 0 {
		t.Errorf("Dial retried a host key store failure %d times", n)
	}
}

// A cloud image starts sshd before cloud-init installs the key: a freshly
// launched machine refuses the key for a while, then accepts it.
func TestDialRetriesRefusedKeyAfterLaunch(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	keys := filepath.Join(e.sshd.dir, "authorized_keys")
	if err := os.Remove(keys); err != nil { // cloud-init has not run yet
		t.Fatal(err)
	}
	// The key arrives after Dial was refused four times.
	clk := clocktest.NewFake(time.Unix(1e9, 0))
	clk.OnSleep = func(context.Context, time.Duration) error {
		if len(clk.Sleeps()) == 4 {
			if err := os.WriteFile(keys, []byte(e.key.AuthorizedKey+"\n"), 0o600); err != nil {
				t.Error(err)
			}
		}
		return nil
	}
	cfg := e.cfg
	cfg.Clock = clk
	target := e.target
	target.LaunchedAt = clk.Now().Add(-10 * time.Second)
	c, err := Dial(t.Context(), cfg, target)
	if err != nil {
		t.Fatalf("Dial = %v, want a connection once the key is installed", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if n := len(clk.Sleeps()); n < 4 {
		t.Errorf("Dial slept %d times, want at least 4", n)
	}
	if out, err := c.Run(t.Context(), "echo", "echo in"); err != nil || out != "in\n" {
		t.Errorf("Run = %q, %v", out, err)
	}
}

// After the window, a refused key fails, saying for how long and what to
// do; a machine launched long ago fails at once.
func TestDialRefusedKeyWindowEnds(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	now := time.Unix(1e9, 0)
	cfg := e.cfg
	cfg.Signer = newSigner(t) // never accepted
	cfg.AuthWindow = 20 * time.Second
	cfg.WaitTimeout = time.Hour

	clk := clocktest.NewFake(now)
	cfg.Clock = clk
	target := e.target
	target.LaunchedAt = now.Add(-5 * time.Second)
	_, err := Dial(t.Context(), cfg, target)
	var aerr *AuthError
	if !errors.As(err, &aerr) || !errors.Is(err, ErrAuth) {
		t.Fatalf("Dial = %v, want *AuthError", err)
	}
	var slept time.Duration
	for _, d := range clk.Sleeps() {
		slept += d
	}
	if slept != 15*time.Second {
		t.Errorf("retried for %v, want the 15s left of the window", slept)
	}
	for _, want := range []string{"node-1 (" + e.sshd.addr + "): sshd refused transit's key for user root, still 20s after launch: ", "terminate the machine"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}

	clk = clocktest.NewFake(now)
	cfg.Clock = clk
	target.LaunchedAt = now.Add(-time.Minute)
	if _, err := Dial(t.Context(), cfg, target); !errors.Is(err, ErrAuth) {
		t.Errorf("Dial = %v, want ErrAuth", err)
	}
	if n := len(clk.Sleeps()); n != 0 {
		t.Errorf("Dial retried a machine launched before the window %d times", n)
	}

	// The window never stretches Dial beyond its wait timeout.
	clk = clocktest.NewFake(now)
	cfg.Clock = clk
	cfg.WaitTimeout = 3 * time.Second
	target.LaunchedAt = now
	if _, err := Dial(t.Context(), cfg, target); !errors.Is(err, ErrAuth) {
		t.Errorf("Dial = %v, want ErrAuth", err)
	}
	slept = 0
	for _, d := range clk.Sleeps() {
		slept += d
	}
	if slept != 3*time.Second {
		t.Errorf("retried for %v, want the 3s wait timeout", slept)
	}
}

// A large upload streams: the node has most of the file before content is
// read to its end, and the file arrives intact with its mode.
func TestUploadFromStreamsLargeContent(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	c := e.dial(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "big.bin")
	const size = 64 << 20
	probe := &uploadProbe{r: io.LimitReader(rand.NewChaCha8([32]byte{7}), size), dir: dir, at: size / 2}
	sum := sha256.New()
	if err := c.UploadFrom(t.Context(), path, 0o751, io.TeeReader(probe, sum), size); err != nil {
		t.Fatal(err)
	}
	// The remote may lag behind by the channel's window and pipes (a few
	// MiB), not by what was read.
	if probe.remote < size/4 {
		t.Errorf("the node had %d bytes when %d were read: content was not streamed", probe.remote, probe.at)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	got := sha256.New()
	n, err := io.Copy(got, f)
	if err != nil {
		t.Fatal(err)
	}
	if n != size || !bytes.Equal(got.Sum(nil), sum.Sum(nil)) {
		t.Errorf("the node has %d bytes with sha256 %x, want %d with %x", n, got.Sum(nil), size, sum.Sum(nil))
	}
	assertMode(t, path, 0o751)
}

// uploadProbe reads r and, once at bytes were read, records how large the
// upload's temporary file in dir was.
type uploadProbe struct {
	r      io.Reader
	dir    string
	at     int64
	read   int64
	remote int64
}

func (p *uploadProbe) Read(b []byte) (int, error) {
	if p.read < p.at && p.read+int64(len(b)) >= p.at {
		tmp, err := filepath.Glob(filepath.Join(p.dir, ".transit-upload.*"))
		if err == nil && len(tmp) == 1 {
			if fi, err := os.Stat(tmp[0]); err == nil {
				p.remote = fi.Size()
			}
		}
	}
	n, err := p.r.Read(b)
	p.read += int64(n)
	return n, err
}

// Content that ends early or fails to read leaves the file as it was and
// says why; content beyond size is not sent.
func TestUploadFromShortContent(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	c := e.dial(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "file.conf")
	if err := c.Upload(t.Context(), path, 0o640, []byte("old\n")); err != nil {
		t.Fatal(err)
	}
	errBroken := errors.New("disk on fire")
	tests := []struct {
		name    string
		content io.Reader
		want    error
	}{
		{"short", strings.NewReader("12345"), io.ErrUnexpectedEOF},
		{"empty", strings.NewReader(""), io.ErrUnexpectedEOF},
		{"read error", io.MultiReader(strings.NewReader("12345"), iotest.ErrReader(errBroken)), errBroken},
	}
	for _, tt := range tests {
		err := c.UploadFrom(t.Context(), path, 0o600, tt.content, 10)
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: UploadFrom = %v, want %v", tt.name, err, tt.want)
		}
		if errors.As(err, new(*RunError)) {
			t.Errorf("%s: UploadFrom = %v, a *RunError: the content failed, not the node", tt.name, err)
		}
		assertFile(t, path, []byte("old\n"), 0o640)
		if entries, err := os.ReadDir(dir); err != nil || len(entries) != 1 {
			t.Errorf("%s: the directory holds %v (%v), want only the old file", tt.name, entries, err)
		}
	}
	if err := c.UploadFrom(t.Context(), path, 0o600, strings.NewReader("0123456789 and more"), 10); err != nil {
		t.Fatal(err)
	}
	assertFile(t, path, []byte("0123456789"), 0o600)
	if err := c.UploadFrom(t.Context(), path, 0o600, strings.NewReader(""), -1); err == nil {
		t.Error("a negative size was accepted")
	}
}

// Cancelling an upload whose content stalls returns at once and leaves
// the file as it was.
func TestUploadFromCancel(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	c := e.dial(t)
	path := filepath.Join(t.TempDir(), "file.conf")
	if err := c.Upload(t.Context(), path, 0o644, []byte("old\n")); err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	t.Cleanup(func() { _ = pw.Close() })
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.UploadFrom(ctx, path, 0o600, pr, 1<<20) }()
	if _, err := pw.Write([]byte("partial")); err != nil { // read by the upload
		t.Fatal(err)
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("UploadFrom = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("UploadFrom still running 10s after its ctx was cancelled")
	}
	assertFile(t, path, []byte("old\n"), 0o644)
}
