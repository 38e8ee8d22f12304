package testenv

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cloudtransit/transit/hostclean"
)

// TestKilledRunLeavesNothing: a test binary killed with -9 while its API
// server and etcd run leaves them running (nothing can stop them then);
// the next test run's first Start kills them.
func TestKilledRunLeavesNothing(t *testing.T) {
	if os.Getenv("TESTENV_KILLED_HELPER") != "" {
		Start(t, Options{})
		fmt.Println("serving")
		time.Sleep(time.Minute) // killed meanwhile
		return
	}
	helper := exec.Command(os.Args[0], "-test.run=^TestKilledRunLeavesNothing$", "-test.v")
	// The killed run cannot remove its directories: they go in this
	// test's.
	helper.Env = append(os.Environ(), "TESTENV_KILLED_HELPER=1", "TMPDIR="+t.TempDir())
	// The helper takes the binaries this run found (its bundle brought up
	// to date here, as long as that takes): its 2 minutes are for
	// starting the servers, not for a bundle check that waited for the
	// bundle's lock under load (once 2 min 25 s).
	paths, skip, err := binaries(Options{})
	if err != nil || skip != "" {
		t.Fatalf("the bundle's binaries: %v %s", err, skip)
	}
	for b, p := range paths {
		helper.Env = append(helper.Env, b.env+"="+p)
	}
	out, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = helper.Process.Kill(); _ = helper.Wait() })
	served := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "serving" {
				served <- true
			}
		}
		served <- false
	}()
	select {
	case ok := <-served:
		if !ok {
			t.Fatal("the helper test run ended without serving")
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the helper test run did not serve within 2 minutes")
	}
	servers := markedBy(helper.Process.Pid)
	if len(servers) < 2 {
		t.Fatalf("the helper run started %d marked processes, want its etcd and API server", len(servers))
	}
	_ = helper.Process.Kill()
	_ = helper.Wait()
	time.Sleep(500 * time.Millisecond)
	for pid, cmd := range servers {
		if syscall.Kill(pid, 0) != nil {
			t.Fatalf("%s (%d) went with the killed run: nothing to purge, the test proves nothing", cmd, pid)
		}
	}

	killed, err := hostclean.KillOrphans(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("killed %d processes the killed run left", len(killed))
	deadline := time.Now().Add(10 * time.Second)
	for pid, cmd := range servers {
		for syscall.Kill(pid, 0) == nil && !zombie(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("%s (%d) still runs", cmd, pid)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// markedBy lists the processes whose hostclean mark names owner (pid →
// command).
func markedBy(owner int) map[int]string {
	out := map[int]string{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil {
			continue
		}
		if strings.Contains("\x00"+string(env), "\x00"+hostclean.OwnerVar+"="+strconv.Itoa(owner)+":") {
			cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
			out[pid] = strings.TrimSpace(string(cmd))
		}
	}
	return out
}

func zombie(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(stat), ')')
	return i >= 0 && i+2 < len(stat) && (stat[i+2] == 'Z' || stat[i+2] == 'X')
}
