package filestore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cloudtransit/transit/atomicfile"
	"github.com/cloudtransit/transit/filelock"
	"github.com/cloudtransit/transit/statestore"
)

// Tests re-execute the test binary as a helper process: another transit
// using the store. The helper's role and arguments come from these
// environment variables.
const (
	helperEnv      = "TRANSIT_FILESTORE_TEST_HELPER" // hold | lock | put | count | crash
	helperStateEnv = "TRANSIT_FILESTORE_TEST_STATE"  // the state file's path
	helperArgEnv   = "TRANSIT_FILESTORE_TEST_ARG"    // an object name, a count
)

// helperLifetime bounds a helper that its test failed to kill.
const helperLifetime = 2 * time.Minute

func TestMain(m *testing.M) {
	if role := os.Getenv(helperEnv); role != "" {
		ctx, cancel := context.WithTimeout(context.Background(), helperLifetime)
		err := runHelper(ctx, role, os.Getenv(helperStateEnv), os.Getenv(helperArgEnv))
		cancel()
		if err != nil {
			fmt.Fprintf(os.Stderr, "helper %s: %v\n", role, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func runHelper(ctx context.Context, role, statePath, arg string) error {
	s, err := New(statePath)
	if err != nil {
		return err
	}
	switch role {
	case "hold":
		// An older transit: the state file's lock, taken directly.
		l, err := filelock.Acquire(ctx, statePath, filelock.Options{Command: "helper hold"})
		if err != nil {
			return err
		}
		fmt.Println("locked")
		<-ctx.Done()
		return l.Release()
	case "lock":
		l, err := s.Lock(ctx, statestore.LockOptions{Command: "helper lock"})
		if err != nil {
			return err
		}
		fmt.Println("locked")
		<-ctx.Done()
		return l.Release(context.WithoutCancel(ctx))
	case "put":
		// Reads arg, waits for "go" on stdin, writes it back changed.
		version := statestore.NoVersion
		obj, err := s.Get(ctx, arg)
		switch {
		case err == nil:
			version = obj.Version
		case !errors.Is(err, statestore.ErrNotFound):
			return err
		}
		fmt.Println("ready")
		if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
			return err
		}
		_, err = s.Put(ctx, arg, []byte("written by pid "+strconv.Itoa(os.Getpid())), version)
		switch {
		case err == nil:
			fmt.Println("won")
		case errors.Is(err, statestore.ErrConflict):
			fmt.Println("conflict")
		default:
			return err
		}
		return nil
	case "count":
		// Increments the counter object arg times, retrying conflicts.
		n, err := strconv.Atoi(arg)
		if err != nil {
			return err
		}
		conflicts, err := increment(ctx, s, "counter", n)
		if err != nil {
			return err
		}
		fmt.Println("done", conflicts)
		return nil
	case "crash":
		// Stops dead in the middle of writing arg: the write lock held,
		// half the new content in the temporary file.
		unlock, err := filelock.FlockContext(ctx, filepath.Join(s.dir, casFile), filelock.FlockOptions{Command: "helper crash"})
		if err != nil {
			return err
		}
		defer unlock()
		p := filepath.Join(s.dir, filepath.FromSlash(arg))
		if err := os.WriteFile(filepath.Join(filepath.Dir(p), atomicfile.TempPrefix(p)+"123456"), []byte(`{"serial": 2, "no`), 0o600); err != nil {
			return err
		}
		fmt.Println("writing")
		<-ctx.Done()
		return nil
	}
	return fmt.Errorf("unknown role %q", role)
}

// increment adds one to the number in name n times, retrying on conflicts;
// it returns how many conflicts it retried.
func increment(ctx context.Context, s statestore.Store, name string, n int) (conflicts int, err error) {
	for done := 0; done < n; {
		obj, err := s.Get(ctx, name)
		if err != nil {
			return conflicts, err
		}
		v, err := strconv.Atoi(string(obj.Data))
		if err != nil {
			return conflicts, fmt.Errorf("%s holds %q: %w", name, obj.Data, err)
		}
		_, err = s.Put(ctx, name, []byte(strconv.Itoa(v+1)), obj.Version)
		switch {
		case err == nil:
			done++
		case errors.Is(err, statestore.ErrConflict):
			conflicts++
		default:
			return conflicts, err
		}
	}
	return conflicts, nil
}

// helper is a running helper process.
type helper struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
}

func (h *helper) pid() int { return h.cmd.Process.Pid }

// startHelper starts the test binary as helper role on the store of
// statePath; the test's cleanup kills it.
func startHelper(t *testing.T, role, statePath, arg string) *helper {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+role, helperStateEnv+"="+statePath, helperArgEnv+"="+arg)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &helper{cmd: cmd, stdin: stdin, stdout: bufio.NewReader(out)}
	t.Cleanup(func() { h.kill(t) })
	return h
}

// expect waits for the helper to print a line starting with prefix and
// returns it.
func (h *helper) expect(t *testing.T, prefix string) string {
	t.Helper()
	line, err := h.stdout.ReadString('\n')
	if err != nil {
		t.Fatalf("helper pid %d: waiting for %q: %v", h.pid(), prefix, err)
	}
	if !strings.HasPrefix(line, prefix) {
		t.Fatalf("helper pid %d printed %q, want %q...", h.pid(), line, prefix)
	}
	return strings.TrimSpace(line)
}

// send writes a line to the helper's stdin.
func (h *helper) send(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(h.stdin, line+"\n"); err != nil {
		t.Fatalf("helper pid %d: %v", h.pid(), err)
	}
}

// wait waits for the helper to exit on its own.
func (h *helper) wait(t *testing.T) {
	t.Helper()
	if err := h.cmd.Wait(); err != nil {
		t.Fatalf("helper pid %d: %v", h.pid(), err)
	}
}

// kill kills the helper with SIGKILL and reaps it; killing twice, or one
// that exited, is fine.
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
		t.Logf("helper pid %d exited before it was killed", h.pid())
	}
}
