package ssh

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/google/go-cmp/cmp"
	gossh "golang.org/x/crypto/ssh"

	"github.com/cloudtransit/transit/clock/clocktest"
	"github.com/cloudtransit/transit/freeport"
)

func TestRunErrorMessage(t *testing.T) {
	t.Parallel()
	var many []string
	for i := 1; i <= 25; i++ {
		many = append(many, fmt.Sprintf("line %d", i))
	}
	tests := []struct {
		name string
		err  *RunError
		want string
	}{{
		name: "stderr line",
		err:  &RunError{Target: Target{HostID: "i-1", Name: "manager-1"}, Name: "install docker", ExitStatus: 100, Stdout: "Reading lists\n", Stderr: "E: Unable to locate package docker-ce\n"},
		want: "manager-1: install docker failed (exit 100): E: Unable to locate package docker-ce",
	}, {
		name: "host id without name",
		err:  &RunError{Target: Target{HostID: "i-1"}, Name: "join", ExitStatus: 1, Stderr: "no"},
		want: "i-1: join failed (exit 1): no",
	}, {
		name: "stdout when stderr empty",
		err:  &RunError{Target: Target{Name: "w"}, Name: "check", ExitStatus: 2, Stdout: "a\nb\n", Stderr: "\n"},
		want: "w: check failed (exit 2):\n    a\n    b",
	}, {
		name: "no output",
		err:  &RunError{Target: Target{Name: "w"}, Name: "check", ExitStatus: 2},
		want: "w: check failed (exit 2)",
	}, {
		name: "last 20 lines",
		err:  &RunError{Target: Target{Name: "w"}, Name: "x", ExitStatus: 1, Stderr: strings.Join(many, "\r\n") + "\n\n"},
		want: "w: x failed (exit 1) (last 20 of 25 lines):\n    " + strings.Join(many[5:], "\n    "),
	}, {
		name: "long line cut",
		err:  &RunError{Target: Target{Name: "w"}, Name: "x", ExitStatus: 1, Stderr: strings.Repeat("é", 400)},
		want: "w: x failed (exit 1): " + strings.Repeat("é", 300) + "…",
	}, {
		name: "cancelled",
		err:  &RunError{Target: Target{Name: "w"}, Name: "sleep", ExitStatus: -1, Stdout: "started\n", Err: context.Canceled},
		want: "w: sleep failed: context canceled: started",
	}}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, tt.err.Error()); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.name, diff)
		}
	}
	if err := error(tests[len(tests)-1].err); !errors.Is(err, context.Canceled) {
		t.Error("RunError does not unwrap to its Err")
	}
}

func TestAuthErrorMessage(t *testing.T) {
	t.Parallel()
	e := &AuthError{
		Target: Target{HostID: "i-1", Name: "w1"}, Addr: "10.0.0.1:22", User: "root",
		Key: "SHA256:abc", KeyFile: "/s/transit-c.key.pub", Err: errors.New("ssh: handshake failed: ssh: unable to authenticate"),
	}
	const todo = ": check that its image installs the launch key for root (cloud-init's log on the machine says why not), " +
		"or terminate the machine so that transit launches another"
	want := "w1 (10.0.0.1:22): sshd refused transit's key for user root: ssh: handshake failed: ssh: unable to authenticate; " +
		"the machine does not have the cluster key SHA256:abc (/s/transit-c.key.pub) in root's authorized_keys" + todo
	if diff := cmp.Diff(want, e.Error()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	e.SinceLaunch = 5*time.Minute + 300*time.Millisecond
	want = "w1 (10.0.0.1:22): sshd refused transit's key for user root, still 5m0s after launch: ssh: handshake failed: ssh: unable to authenticate; " +
		"the machine does not have the cluster key SHA256:abc (/s/transit-c.key.pub) in root's authorized_keys" + todo
	if diff := cmp.Diff(want, e.Error()); diff != "" {
		t.Errorf("after the window (-want +got):\n%s", diff)
	}
	if !errors.Is(fmt.Errorf("wrapped: %w", e), ErrAuth) {
		t.Error("AuthError does not match ErrAuth")
	}
}

func TestHostPort(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"10.0.0.1", "10.0.0.1:22"},
		{"10.0.0.1:2222", "10.0.0.1:2222"},
		{"node.example", "node.example:22"},
		{"::1", "[::1]:22"},
		{"2001:db8::7", "[2001:db8::7]:22"},
		{"[2001:db8::7]", "[2001:db8::7]:22"},
		{"[2001:db8::7]:2222", "[2001:db8::7]:2222"},
		{"", "error"},
		{"host:", "error"},
		{":22", "error"},
		{"[]", "error"},
		{"[::1", "error"},
	}
	for _, tt := range tests {
		got, err := hostPort(tt.in)
		if err != nil {
			got = "error"
		}
		if got != tt.want {
			t.Errorf("hostPort(%q) = %q (%v), want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestUploadCommand(t *testing.T) {
	t.Parallel()
	got := uploadCommand("/etc/it's/x.conf", 0o640, 1234)
	want := `sh -c 'set -e; if [ -d "$1" ]; then echo "$1 is a directory" >&2; exit 1; fi; ` +
		`d=$(dirname -- "$1"); mkdir -p -- "$d"; t=$(mktemp "$d/.transit-upload.XXXXXX"); ` +
		`trap '\''rm -f -- "$t"'\'' EXIT; cat >"$t"; n=$(wc -c <"$t"); ` +
		`if [ $n -ne "$3" ]; then echo "received $n of $3 bytes" >&2; exit 1; fi; ` +
		`chmod "$2" "$t"; mv -f -- "$t" "$1"; trap - EXIT' sh '/etc/it'\''s/x.conf' 0640 1234`
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestWrapScript(t *testing.T) {
	t.Parallel()
	want := `{
exec 3<&0 </dev/null
(while read -r _; do :; done <&3; kill -KILL 0) >/dev/null 2>&1 &
transit_watcher=$!
exec 3<&-
(
echo hi
) </dev/null
transit_status=$?
kill "$transit_watcher" 2>/dev/null
exit "$transit_status"
}
`
	if diff := cmp.Diff(want, wrapScript("echo hi")); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestHostKeyAlgorithms(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		pinned string
		first  []string
	}{
		{gossh.KeyAlgoED25519, []string{gossh.KeyAlgoED25519}},
		{gossh.KeyAlgoECDSA256, []string{gossh.KeyAlgoECDSA256}},
		{gossh.KeyAlgoRSA, []string{gossh.KeyAlgoRSASHA512, gossh.KeyAlgoRSASHA256}},
	} {
		got := hostKeyAlgorithms(tt.pinned)
		if diff := cmp.Diff(tt.first, got[:len(tt.first)]); diff != "" {
			t.Errorf("%s first (-want +got):\n%s", tt.pinned, diff)
		}
		if len(got) != len(gossh.SupportedAlgorithms().HostKeys) {
			t.Errorf("%s: %d algorithms, want every supported one once: %v", tt.pinned, len(got), got)
		}
	}
}

func newSigner(t *testing.T) gossh.Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := gossh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestDialClosedPortGivesUp(t *testing.T) {
	t.Parallel()
	clk := clocktest.NewFake(time.Unix(1e9, 0))
	cfg := Config{
		Signer:      newSigner(t),
		HostKeys:    openHostKeys(t, filepath.Join(t.TempDir(), "known_hosts")),
		Clock:       clk,
		WaitTimeout: time.Second,
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freeport.Port(t))
	_, err := Dial(t.Context(), cfg, Target{HostID: "i-1", Name: "w1", Addr: addr})
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("Dial = %v, want ErrUnreachable", err)
	}
	if want := "w1 (" + addr + "): not reachable over SSH after 1s: "; !strings.HasPrefix(err.Error(), want) ||
		!strings.Contains(err.Error(), "connection refused") {
		t.Errorf("error %q, want %q followed by the last error (connection refused)", err, want)
	}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 300 * time.Millisecond}
	if diff := cmp.Diff(want, clk.Sleeps()); diff != "" {
		t.Errorf("backoff (-want +got):\n%s", diff)
	}
}

func TestDialBackoffCapped(t *testing.T) {
	t.Parallel()
	clk := clocktest.NewFake(time.Unix(1e9, 0))
	cfg := Config{
		Signer:      newSigner(t),
		HostKeys:    openHostKeys(t, filepath.Join(t.TempDir(), "known_hosts")),
		Clock:       clk,
		WaitTimeout: 7 * time.Second,
	}
	_, err := Dial(t.Context(), cfg, Target{HostID: "i-1", Addr: fmt.Sprintf("127.0.0.1:%d", freeport.Port(t))})
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("Dial = %v, want ErrUnreachable", err)
	}
	ms := time.Millisecond
	want := []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, 1600 * ms, 2000 * ms, 1900 * ms}
	if diff := cmp.Diff(want, clk.Sleeps()); diff != "" {
		t.Errorf("backoff (-want +got):\n%s", diff)
	}
}

func TestDialCancelled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	cfg := Config{Signer: newSigner(t), HostKeys: openHostKeys(t, filepath.Join(t.TempDir(), "known_hosts"))}
	_, err := Dial(ctx, cfg, Target{HostID: "i-1", Addr: fmt.Sprintf("127.0.0.1:%d", freeport.Port(t))})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Dial = %v, want context.Canceled", err)
	}
}

func TestDialInvalidConfig(t *testing.T) {
	t.Parallel()
	hk := openHostKeys(t, filepath.Join(t.TempDir(), "known_hosts"))
	s := newSigner(t)
	for name, tc := range map[string]struct {
		cfg Config
		t   Target
	}{
		"no signer":    {Config{HostKeys: hk}, Target{HostID: "i", Addr: "h"}},
		"no host keys": {Config{Signer: s}, Target{HostID: "i", Addr: "h"}},
		"no host id":   {Config{Signer: s, HostKeys: hk}, Target{Addr: "h"}},
		"bad address":  {Config{Signer: s, HostKeys: hk}, Target{HostID: "i", Addr: "h:"}},
	} {
		if _, err := Dial(t.Context(), tc.cfg, tc.t); err == nil || errors.Is(err, ErrUnreachable) {
			t.Errorf("%s: Dial = %v, want an immediate error", name, err)
		}
	}
}

// A server that proves its host key and then drops the connection during
// authentication (sshd restarting as cloud-init reconfigures it) is not
// answering yet: it is retried, never reported as a refused key.
func TestDialDropDuringAuthIsRetried(t *testing.T) {
	t.Parallel()
	hostSigner := newSigner(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			cfg := &gossh.ServerConfig{PublicKeyCallback: func(gossh.ConnMetadata, gossh.PublicKey) (*gossh.Permissions, error) {
				_ = nc.Close()
				return nil, errors.New("dropped")
			}}
			cfg.AddHostKey(hostSigner)
			go func() { _, _, _, _ = gossh.NewServerConn(nc, cfg) }()
		}
	}()
	clk := clocktest.NewFake(time.Unix(1e9, 0))
	cfg := Config{
		Signer:      newSigner(t),
		HostKeys:    openHostKeys(t, filepath.Join(t.TempDir(), "known_hosts")),
		Clock:       clk,
		WaitTimeout: time.Second,
	}
	_, err = Dial(t.Context(), cfg, Target{HostID: "i-1", Addr: l.Addr().String(), LaunchedAt: time.Unix(1e9, 0)})
	if !errors.Is(err, ErrUnreachable) || errors.Is(err, ErrAuth) {
		t.Fatalf("Dial = %v, want ErrUnreachable", err)
	}
	if len(clk.Sleeps()) == 0 {
		t.Error("Dial did not retry")
	}
}

func TestSizedReader(t *testing.T) {
	t.Parallel()
	errRead := errors.New("read failed")
	tests := []struct {
		name    string
		content io.Reader
		size    int64
		want    string
		wantErr error
	}{
		{"exact", strings.NewReader("abcdef"), 6, "abcdef", nil},
		{"longer: cut at size", strings.NewReader("abcdefgh"), 6, "abcdef", nil},
		{"one byte at a time", iotest.OneByteReader(strings.NewReader("abcdef")), 6, "abcdef", nil},
		{"empty", strings.NewReader("x"), 0, "", nil},
		{"short", strings.NewReader("abc"), 6, "abc", io.ErrUnexpectedEOF},
		{"data with EOF, short", iotest.DataErrReader(strings.NewReader("abc")), 6, "abc", io.ErrUnexpectedEOF},
		{"read error", io.MultiReader(strings.NewReader("ab"), iotest.ErrReader(errRead)), 6, "ab", errRead},
	}
	for _, tt := range tests {
		got, err := io.ReadAll(&sizedReader{r: tt.content, size: tt.size})
		if string(got) != tt.want || !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
			t.Errorf("%s: read %q, %v; want %q, %v", tt.name, got, err, tt.want, tt.wantErr)
		}
	}
	// Nothing beyond size is read from the content.
	r := strings.NewReader("abcdefgh")
	if _, err := io.ReadAll(&sizedReader{r: r, size: 6}); err != nil {
		t.Fatal(err)
	}
	if r.Len() != 2 {
		t.Errorf("%d bytes left unread, want 2", r.Len())
	}
}

func TestCheckForward(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		network, addr string
		ok            bool
	}{
		{"tcp", "127.0.0.1:6443", true},
		{"tcp4", "10.0.0.2:2379", true},
		{"tcp6", "[::1]:6443", true},
		{"tcp", "master-1:6443", true},
		{"udp", "127.0.0.1:53", false},
		{"unix", "/run/x.sock", false},
		{"tcp", "127.0.0.1", false},
		{"tcp", ":6443", false},
		{"tcp", "127.0.0.1:0", false},
		{"tcp", "127.0.0.1:65536", false},
		{"tcp", "127.0.0.1:https", false},
	} {
		if err := checkForward(tt.network, tt.addr); (err == nil) != tt.ok {
			t.Errorf("checkForward(%q, %q) = %v, want ok %v", tt.network, tt.addr, err, tt.ok)
		}
	}
}
