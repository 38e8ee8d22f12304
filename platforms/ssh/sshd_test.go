package ssh

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/cloudtransit/transit/freeport"
)

const sshdPath = "/usr/sbin/sshd"

// requireSSHD skips integration tests under -short and for non-root users.
func requireSSHD(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test runs a real sshd; skipped with -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("integration test runs a real sshd on 127.0.0.1 and logs in as root; needs root")
	}
}

// testSSHD is a real sshd on 127.0.0.1 for one test, letting root in with
// one authorized key.
type testSSHD struct {
	t    *testing.T
	dir  string
	addr string
	cmd  *exec.Cmd
	log  *syncBuffer
	// exited receives cmd.Wait's result.
	exited chan error
}

// newSSHD writes an sshd configuration accepting authorizedKey for root,
// with a fresh host key, on a free port. It does not start sshd.
func newSSHD(t *testing.T, authorizedKey string) *testSSHD {
	t.Helper()
	requireSSHD(t)
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil { // privilege separation directory
		t.Fatal(err)
	}
	dir := t.TempDir()
	s := &testSSHD{t: t, dir: dir, addr: fmt.Sprintf("127.0.0.1:%d", freeport.Port(t))}
	s.writeHostKey()
	if err := os.WriteFile(filepath.Join(dir, "authorized_keys"), []byte(authorizedKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, port, err := net.SplitHostPort(s.addr)
	if err != nil {
		t.Fatal(err)
	}
	config := fmt.Sprintf(`Port %s
ListenAddress 127.0.0.1
HostKey %s
AuthorizedKeysFile %s
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PidFile %s
LogLevel VERBOSE
`, port, filepath.Join(dir, "host_key"), filepath.Join(dir, "authorized_keys"), filepath.Join(dir, "sshd.pid"))
	if err := os.WriteFile(filepath.Join(dir, "sshd_config"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.stop()
		if t.Failed() {
			t.Logf("sshd log:\n%s", s.log.String())
		}
	})
	s.log = &syncBuffer{}
	return s
}

// writeHostKey gives sshd a new host key; a running sshd keeps its old one
// until restarted.
func (s *testSSHD) writeHostKey() {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		s.t.Fatal(err)
	}
	block, err := gossh.MarshalPrivateKey(priv, "test host key")
	if err != nil {
		s.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.dir, "host_key"), pem.EncodeToMemory(block), 0o600); err != nil {
		s.t.Fatal(err)
	}
}

// start runs sshd in the foreground, in its own process group, and waits
// until it listens.
func (s *testSSHD) start() {
	s.t.Helper()
	if s.cmd != nil {
		s.t.Fatal("sshd already running")
	}
	// Not CommandContext: sshd runs until stop, called at the latest in
	// t.Cleanup.
	logStart := len(s.log.String())
	cmd := exec.Command(sshdPath, "-D", "-e", "-f", filepath.Join(s.dir, "sshd_config"))
	cmd.Stdout = s.log
	cmd.Stderr = s.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start sshd: %v", err)
	}
	s.cmd = cmd
	s.exited = make(chan error, 1)
	go func() { s.exited <- cmd.Wait() }()

	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !strings.Contains(s.log.String()[logStart:], "Server listening on") {
		select {
		case err := <-s.exited:
			s.cmd = nil
			s.t.Fatalf("sshd exited at startup (%v):\n%s", err, s.log.String())
		case <-s.t.Context().Done():
			s.t.Fatalf("sshd never listened:\n%s", s.log.String())
		case <-tick.C:
		}
	}
}

// stop kills sshd and its per-connection processes, and waits for it.
func (s *testSSHD) stop() {
	if s.cmd == nil {
		return
	}
	// The negative pid is sshd's process group, which start created.
	if err := syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		s.t.Errorf("kill sshd: %v", err)
	}
	if err := <-s.exited; !errors.As(err, new(*exec.ExitError)) {
		s.t.Errorf("sshd: %v, want killed", err)
	}
	s.cmd = nil
}

// testEnv is a cluster key, a host key store and a running sshd accepting
// the key.
type testEnv struct {
	sshd   *testSSHD
	key    *Key
	cfg    Config
	target Target
}

func newTestEnv(t *testing.T) *testEnv {
	t.Helper()
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
	s := newSSHD(t, key.AuthorizedKey)
	s.start()
	return &testEnv{
		sshd: s,
		key:  key,
		cfg:  Config{Signer: key.Signer, HostKeys: hk, KeyPath: key.Path, WaitTimeout: DefaultWaitTimeout},
		target: Target{
			HostID: "i-test", Name: "node-1", Addr: s.addr,
		},
	}
}

func (e *testEnv) dial(t *testing.T) *Client {
	t.Helper()
	c, err := Dial(t.Context(), e.cfg, e.target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			t.Errorf("close: %v", err)
		}
	})
	return c
}
