package filelock

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Tests re-execute the test binary as a helper process that holds a lock
// until it is killed. The helper's role comes from these environment
// variables.
const (
	helperEnv     = "TRANSIT_FILELOCK_TEST_HELPER" // hold | flock | exit
	helperPathEnv = "TRANSIT_FILELOCK_TEST_PATH"
)

// helperLifetime bounds a helper that its test failed to kill.
const helperLifetime = 2 * time.Minute

func TestMain(m *testing.M) {
	if role := os.Getenv(helperEnv); role != "" {
		os.Exit(runHelper(role, os.Getenv(helperPathEnv)))
	}
	os.Exit(m.Run())
}

func runHelper(role, path string) int {
	switch role {
	case "exit":
		return 0
	case "hold":
		ctx, cancel := context.WithTimeout(context.Background(), helperLifetime)
		defer cancel()
		l, err := Acquire(ctx, path, Options{Command: "helper hold"})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println("locked")
		<-ctx.Done()
		if err := l.Release(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	case "flock":
		ctx, cancel := context.WithTimeout(context.Background(), helperLifetime)
		defer cancel()
		unlock, err := FlockContext(ctx, path, FlockOptions{Command: "helper flock"})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println("locked")
		<-ctx.Done()
		unlock()
		return 0
	default:
		fmt.Fprintf(os.Stderr, "unknown helper %q\n", role)
		return 2
	}
}

// helper is a running helper process.
type helper struct {
	cmd    *exec.Cmd
	stdout *bufio.Reader
}

// startHelper starts the test binary as helper role on path; the test's
// cleanup kills it.
func startHelper(t *testing.T, role, path string) *helper {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+role, helperPathEnv+"="+path)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &helper{cmd: cmd, stdout: bufio.NewReader(out)}
	t.Cleanup(func() { h.kill(t) })
	return h
}

// expect waits for the helper to print a line starting with prefix.
func (h *helper) expect(t *testing.T, prefix string) string {
	t.Helper()
	line, err := h.stdout.ReadString('\n')
	if err != nil {
		t.Fatalf("helper pid %d: waiting for %q: %v", h.cmd.Process.Pid, prefix, err)
	}
	if !strings.HasPrefix(line, prefix) {
		t.Fatalf("helper pid %d printed %q, want %q...", h.cmd.Process.Pid, line, prefix)
	}
	return line
}

// kill kills the helper with SIGKILL and reaps it; killing twice is fine.
func (h *helper) kill(t *testing.T) {
	t.Helper()
	if h.cmd.ProcessState != nil {
		return
	}
	if err := h.cmd.Process.Kill(); err != nil {
		t.Errorf("kill helper: %v", err)
	}
	// Drain stdout so the helper never blocks on a full pipe while dying.
	if _, err := io.Copy(io.Discard, h.stdout); err != nil {
		t.Logf("drain helper output: %v", err)
	}
	// The helper dies of SIGKILL, so Wait reports an error by design.
	if err := h.cmd.Wait(); err == nil {
		t.Logf("helper pid %d exited before it was killed", h.cmd.Process.Pid)
	}
}
