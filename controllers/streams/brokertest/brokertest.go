// Package brokertest runs streams-broker as a separate process on loopback
// TCP for tests: built once per test binary (cmdtest: name streams-broker
// to cmdtest.Main in TestMain, so no test's deadline pays for the build), on a data dir, killable and restartable on the same
// address, so clients see a real broker crash.
package brokertest

import (
	"bufio"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cloudtransit/transit/cmdtest"
)

// Broker is a streams-broker process.
type Broker struct {
	t       testing.TB
	bin     string
	dataDir string
	addr    string
	extra   []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Start runs a broker on 127.0.0.1 with a fresh data dir; it is killed when
// the test ends. extra flags go to every start.
func Start(t testing.TB, extra ...string) *Broker {
	t.Helper()
	b := &Broker{t: t, bin: cmdtest.Build(t, "streams-broker"), dataDir: t.TempDir(), extra: extra}
	b.start("127.0.0.1:0")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the broker as the test failed:\n%s", Picture(b.addr))
		}
		b.Kill()
	})
	return b
}

// Addr is the broker's host:port (the same across restarts).
func (b *Broker) Addr() string { return b.addr }

// DataDir is the directory the broker keeps its state in.
func (b *Broker) DataDir() string { return b.dataDir }

func (b *Broker) start(listen string) {
	b.t.Helper()
	args := append([]string{"-listen", listen, "-data-dir", b.dataDir, "-log-level", "error"}, b.extra...)
	cmd := exec.Command(b.bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		b.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.t.Fatalf("start streams-broker: %v", err)
	}
	lines := make(chan string, 64)
	done := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default: // nobody reads any more: drop
			}
		}
		close(lines)
	}()
	go func() { _ = cmd.Wait(); close(done) }()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				b.t.Fatalf("streams-broker exited before serving")
			}
			if addr, found := strings.CutPrefix(line, "streams-broker: serving on "); found {
				b.addr, _, _ = strings.Cut(addr, ",")
				b.mu.Lock()
				b.cmd, b.done = cmd, done
				b.mu.Unlock()
				return
			}
			b.t.Logf("streams-broker: %s", line)
		case <-deadline:
			_ = cmd.Process.Kill()
			b.t.Fatalf("streams-broker did not serve within 30 s")
		}
	}
}

// MoveCoordinators moves the groups' and transactions' coordinators to
// other brokers of a several-broker process (-brokers), as a
// coordinator's crash does (SIGUSR1; see broker.MoveCoordinators).
func (b *Broker) MoveCoordinators() {
	b.mu.Lock()
	cmd := b.cmd
	b.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Signal(syscall.SIGUSR1)
	}
}

// Kill ends the broker with SIGKILL: nothing is flushed on the way out.
func (b *Broker) Kill() { b.stop(syscall.SIGKILL) }

// Stop ends the broker with SIGTERM, as a pod's termination would.
func (b *Broker) Stop() { b.stop(syscall.SIGTERM) }

func (b *Broker) stop(sig syscall.Signal) {
	b.mu.Lock()
	cmd, done := b.cmd, b.done
	b.cmd = nil
	b.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// Restart kills the broker and starts it again on its address and data dir.
func (b *Broker) Restart() {
	b.t.Helper()
	b.Kill()
	b.start(b.addr)
}
