package hostclean

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// findProcs lists the processes that are transit's: those a killed test
// run left (OwnerVar), those whose command line names a path under base,
// those in one of the network namespaces (inode → name), and those in a
// cgroup under transit/ or in make test's. This process and
// its ancestors are never listed.
func findProcs(base string, netns map[uint64]string) ([]Item, error) {
	return procsWhere(func(pid int, cmdline string) string { return procReason(pid, cmdline, base, netns) })
}

// procsWhere lists the processes reason gives a reason for, but this
// process and its ancestors.
func procsWhere(reason func(pid int, cmdline string) string) ([]Item, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	spare := ancestors()
	var items []Item
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 || spare[pid] {
			continue
		}
		// The start time is read before what the reason reads and checked
		// after: a process that went meanwhile and whose pid a new one
		// took (pid_max is often 32768) must not lend the new one its
		// reason, which killProcs would then act on.
		start := procStart(pid)
		if start == 0 {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(data) == 0 {
			continue // gone, a kernel thread or a zombie: nothing to kill
		}
		cmdline := strings.TrimSpace(strings.ReplaceAll(string(data), "\x00", " "))
		because := reason(pid, cmdline)
		if because == "" || procStart(pid) != start {
			continue
		}
		items = append(items, Item{Kind: KindProcess, Name: strconv.Itoa(pid), Detail: cmdline, Because: because,
			pid: pid, start: start})
	}
	return items, nil
}

// procReason says what makes process pid transit's, "" if nothing: the
// path under base its command line names, its network namespace, or its
// cgroup.
func procReason(pid int, cmdline, base string, netns map[uint64]string) string {
	if why := ownerGone(pid); why != "" {
		return why
	}
	if i := strings.Index(cmdline, base+"/"); i >= 0 {
		path := cmdline[i:]
		if j := strings.IndexAny(path, " \"'"); j >= 0 {
			path = path[:j]
		}
		return "names " + path
	}
	if fi, err := os.Stat(fmt.Sprintf("/proc/%d/ns/net", pid)); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			if name, ok := netns[st.Ino]; ok {
				return "in network namespace " + name
			}
		}
	}
	if cg := transitCgroupOf(pid); cg != "" {
		return "in cgroup " + cg
	}
	return ""
}

// transitCgroupOf is the cgroup under transit/ process pid is in (in any
// hierarchy), or make test's, "" if none.
func transitCgroupOf(pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return ""
	}
	for line := range strings.Lines(string(data)) {
		// "hierarchy-ID:controllers:path"
		f := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(f) == 3 && (f[2] == "/"+cgroupParent || strings.HasPrefix(f[2], "/"+cgroupParent+"/") || f[2] == "/"+makeTestCgroup) {
			return strings.TrimPrefix(f[2], "/")
		}
	}
	return ""
}

// ancestors are this process and its ancestors, which the cleaner never
// kills: a shell or make whose command line names a path under the base.
func ancestors() map[int]bool {
	out := map[int]bool{}
	for pid := os.Getpid(); pid > 0 && !out[pid]; pid = parentOf(pid) {
		out[pid] = true
	}
	return out
}

// parentOf is a process's parent's pid, 0 if unknown.
func parentOf(pid int) int {
	f := statFields(pid)
	if len(f) < 2 {
		return 0
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return 0
	}
	return ppid
}

// statFields are the fields of /proc/<pid>/stat after the command name,
// starting with the state.
func statFields(pid int) []string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(data[i+1:]))
}

// procStart is a process's start time (clock ticks since boot), which
// tells it from a later process that reused its pid; 0 if it is gone or
// a zombie (as drivers/local reads it).
var procStart = readProcStart

func readProcStart(pid int) uint64 {
	f := statFields(pid)
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return 0
	}
	n, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// killProcs sends SIGKILL to each process that is still the one found
// (same pid and start time) and waits until they are gone or ctx ends.
func killProcs(ctx context.Context, items []Item) []error {
	var errs []error
	var waiting []Item
	for _, it := range items {
		if procStart(it.pid) != it.start {
			continue
		}
		if err := syscall.Kill(it.pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("kill process %d (%s): %w", it.pid, it.Detail, err))
			continue
		}
		waiting = append(waiting, it)
	}
	deadline := time.Now().Add(processWait)
	for len(waiting) > 0 {
		left := waiting[:0]
		for _, it := range waiting {
			if procStart(it.pid) == it.start {
				left = append(left, it)
			}
		}
		waiting = left
		if len(waiting) == 0 || time.Now().After(deadline) {
			break
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return append(errs, err)
		}
	}
	for _, it := range waiting {
		errs = append(errs, fmt.Errorf("process %d (%s) still runs %s after SIGKILL", it.pid, it.Detail, processWait))
	}
	return errs
}

// processWait bounds how long a killed process may take to go (one in
// uninterruptible sleep waits for its I/O).
const processWait = 10 * time.Second

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// pidsIn are the processes in a cgroup and the cgroups below it. A
// cgroup that goes meanwhile holds none.
func pidsIn(dir string) []int {
	var pids []int
	if data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs")); err == nil {
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
				pids = append(pids, pid)
			}
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return pids
	}
	for _, e := range entries {
		if e.IsDir() {
			pids = append(pids, pidsIn(filepath.Join(dir, e.Name()))...)
		}
	}
	return pids
}

// OwnerVar marks every process a test binary starts, through the
// environment its children inherit: "<pid>:<start time>" of the test
// binary. A process whose mark names a process that is gone was left by a
// test run that was killed (its timeout, kill -9) before it could stop
// what it started: envtest's etcd and API server, brokers, sidecars.
const OwnerVar = "TRANSIT_TEST_OWNER"

// TestRun is for test binaries that start processes: once per process,
// it kills what killed test runs left (KillOrphans) and marks every
// process this one starts from then on, so that the next run finds what
// this one leaves if it is killed. It says what it killed.
func TestRun() (killed []Item, err error) {
	testRun.Do(func() {
		testRun.killed, testRun.err = KillOrphans(context.Background())
		testRun.err = errors.Join(testRun.err, os.Setenv(OwnerVar, Mark()))
	})
	return testRun.killed, testRun.err
}

// Mark is this process's mark, as OwnerVar carries it: "<pid>:<start
// time>", which no later process reusing the pid shares.
func Mark() string {
	pid := os.Getpid()
	return fmt.Sprintf("%d:%d", pid, procStart(pid))
}

// Gone says whether the process a mark names is gone: its pid is free or
// taken by a later process. A malformed mark is not gone (there is
// nothing to act on).
func Gone(mark string) bool {
	owner, start, _ := strings.Cut(mark, ":")
	pid, err1 := strconv.Atoi(owner)
	since, err2 := strconv.ParseUint(start, 10, 64)
	return err1 == nil && err2 == nil && pid > 0 && procStart(pid) != since
}

var testRun struct {
	sync.Once
	killed []Item
	err    error
}

// ownerGone says whose mark process pid carries when that owner is gone
// ("" when it carries none, or its owner lives).
func ownerGone(pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return ""
	}
	for kv := range strings.SplitSeq(string(data), "\x00") {
		mark, ok := strings.CutPrefix(kv, OwnerVar+"=")
		if !ok {
			continue
		}
		if !Gone(mark) {
			return "" // the test run lives, or the mark is not one
		}
		owner, _, _ := strings.Cut(mark, ":")
		return fmt.Sprintf("started by test run %s, which is gone", owner)
	}
	return ""
}

// KillOrphans kills the processes killed test runs left (see OwnerVar),
// and returns them; test binaries that run at once spare each other's,
// whose owners live.
func KillOrphans(ctx context.Context) ([]Item, error) {
	orphans, err := procsWhere(func(pid int, _ string) string { return ownerGone(pid) })
	if err != nil {
		return nil, err
	}
	return orphans, errors.Join(killProcs(ctx, orphans)...)
}
