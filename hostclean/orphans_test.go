package hostclean

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"testing"
	"time"
)

// TestKillOrphans: a process whose test run is gone (its mark names a pid
// that exited) is killed; one whose test run lives (this one) is spared,
// and so is an unmarked one.
func TestKillOrphans(t *testing.T) {
	gone := exec.Command("true")
	if err := gone.Start(); err != nil {
		t.Fatal(err)
	}
	deadMark := fmt.Sprintf("%d:%d", gone.Process.Pid, procStart(gone.Process.Pid)+1)
	_ = gone.Wait()
	start := func(mark string) *exec.Cmd {
		cmd := exec.Command("sleep", "60")
		cmd.Env = os.Environ()
		if mark != "" {
			cmd.Env = append(cmd.Env, OwnerVar+"="+mark)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	orphan := start(deadMark)
	ours := start(fmt.Sprintf("%d:%d", os.Getpid(), procStart(os.Getpid())))
	unmarked := start("")

	killed, err := KillOrphans(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	pids := make([]string, len(killed))
	for i, it := range killed {
		pids[i] = it.Name
	}
	if !slices.Contains(pids, strconv.Itoa(orphan.Process.Pid)) {
		t.Errorf("killed %v, not the orphan %d", pids, orphan.Process.Pid)
	}
	for _, spared := range []*exec.Cmd{ours, unmarked} {
		if slices.Contains(pids, strconv.Itoa(spared.Process.Pid)) {
			t.Errorf("killed %d, whose test run lives or which is no test's", spared.Process.Pid)
		}
	}
	done := make(chan error, 1)
	go func() { done <- orphan.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Error("the orphan exited by itself, not killed")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the orphan still runs")
	}
	if ours.ProcessState != nil || unmarked.ProcessState != nil {
		t.Error("a spared process exited")
	}
}

// TestReasonOfAReusedPIDIsNotLent: a process that goes while its reason
// is read, its pid taken by a new process, is not listed — the new one
// would have been killed for the old one's reason.
func TestReasonOfAReusedPIDIsNotLent(t *testing.T) {
	victim := exec.Command("sleep", "60")
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = victim.Process.Kill(); _ = victim.Wait() })
	pid := victim.Process.Pid
	reused := false // the old process went and a new one took its pid
	procStart = func(p int) uint64 {
		if p == pid && reused {
			return 1 // the new process's start time
		}
		return readProcStart(p)
	}
	t.Cleanup(func() { procStart = readProcStart })
	items, err := procsWhere(func(p int, _ string) string {
		if p != pid {
			return ""
		}
		reused = true
		return "the old process's reason"
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		if it.pid == pid {
			t.Errorf("listed pid %d (start %d) for the reason of the process that had it before", pid, it.start)
		}
	}
	if !reused {
		t.Fatal("the reason was never asked about the process")
	}
}
