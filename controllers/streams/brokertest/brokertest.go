// Package brokertest runs streams-broker as a separate process on loopback
// TCP for tests: built once per test binary, on a data dir, killable and
// restartable on the same address, so clients see a real broker crash.
package brokertest

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

// Binary builds cmd/streams-broker once per test binary and returns its path.
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "streams-broker-")
		if err != nil {
			buildErr = err
			return
		}
		binary = filepath.Join(dir, "streams-broker")
		out, err := exec.Command("go", "build", "-o", binary, "github.com/cloudtransit/transit/cmd/streams-broker").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build streams-broker: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binary
}

// Main runs a package's tests and removes the broker binary they built:
// call it from TestMain.
func Main(m *testing.M) int {
	code := m.Run()
	if binary != "" {
		_ = os.RemoveAll(filepath.Dir(binary))
	}
	return code
}

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
	b := &Broker{t: t, bin: Binary(t), dataDir: t.TempDir(), extra: extra}
	b.start("127.0.0.1:0")
	t.Cleanup(func() { b.Kill() })
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
