package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// signalChild marks the run of this test binary that TestSecondSignalKills
// starts as its child.
const signalChild = "TRANSIT_CLI_TEST_SIGNAL_CHILD"

// The child: a command that ignores its cancelled context, as a stuck
// remote step would. Only a second signal can end it.
func runSignalChild() {
	ctx, stop := NotifyContext(context.Background(), os.Stderr, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	fmt.Println("ready")
	<-ctx.Done()
	fmt.Println("cancelled")
	time.Sleep(20 * time.Second)
	os.Exit(0)
}

// Not parallel: it starts a process and signals it.
func TestSecondSignalKills(t *testing.T) {
	if os.Getenv(signalChild) == "1" {
		runSignalChild()
		return
	}
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestSecondSignalKills$")
	cmd.Env = append(os.Environ(), signalChild+"=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out, errs := bufio.NewScanner(stdout), bufio.NewScanner(stderr)
	waitLine := func(sc *bufio.Scanner, prefix string) string {
		t.Helper()
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), prefix) {
				return sc.Text()
			}
		}
		t.Fatalf("the child ended before printing %q: %v", prefix, sc.Err())
		return ""
	}
	waitLine(out, "ready")
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	waitLine(out, "cancelled")
	// The note comes after the default handling is back.
	note := waitLine(errs, "transit: interrupt signal received")
	if !strings.Contains(note, "send it again to quit at once") {
		t.Errorf("note: %q", note)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	ee, ok := errors.AsType[*exec.ExitError](err)
	if !ok {
		t.Fatalf("the child was not killed by the second signal: %v", err)
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGINT {
		t.Errorf("the child ended with %v, want killed by SIGINT", err)
	}
}
