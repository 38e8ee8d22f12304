package hostclean

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// cgroupParent is the cgroup the local driver puts every node's cgroup
// under, in every hierarchy: transit/<provider id>.
const cgroupParent = "transit"

// makeTestCgroup is the cgroup make test runs the packages other than the
// e2e in (the Makefile names it): what a killed make test left running
// there is transit's test processes.
const makeTestCgroup = "transit-make-test"

// cgroupWait bounds how long a cgroup's killed processes may take to go
// before it can be removed.
const cgroupWait = 15 * time.Second

// cgroupMounts lists the host's cgroup hierarchies' mount points.
func cgroupMounts() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("list cgroup hierarchies: %w", err)
	}
	defer f.Close()
	return parseCgroupMounts(f)
}

// parseCgroupMounts reads /proc/self/mountinfo: the mount point of each
// cgroup (v1) or cgroup2 hierarchy mounted whole, once per hierarchy.
func parseCgroupMounts(r io.Reader) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		sep := slices.Index(f, "-")
		if sep < 6 || len(f) < sep+2 {
			continue
		}
		if typ := f[sep+1]; typ != "cgroup" && typ != "cgroup2" {
			continue
		}
		// f[2] is the device (one per hierarchy), f[3] the mounted
		// cgroup ("/" for the whole hierarchy), f[4] the mount point.
		if f[3] != "/" || seen[f[2]] {
			continue
		}
		seen[f[2]] = true
		out = append(out, unescapeMount(f[4]))
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	return out, nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			var n byte
			ok := true
			for _, c := range s[i+1 : i+4] {
				if c < '0' || c > '7' {
					ok = false
					break
				}
				n = n*8 + byte(c-'0')
			}
			if ok {
				b.WriteByte(n)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// findCgroups lists the cgroups under transit/ in every hierarchy, one
// item per name ("transit/ln-…", holding its directory in each
// hierarchy), transit/ itself after them, and make test's cgroup.
func findCgroups(mounts []string) ([]Item, error) {
	byName := map[string][]string{}
	var parents, makeTest []string
	var errs []error
	for _, m := range mounts {
		if _, err := os.Stat(filepath.Join(m, makeTestCgroup)); err == nil {
			makeTest = append(makeTest, filepath.Join(m, makeTestCgroup))
		}
		parent := filepath.Join(m, cgroupParent)
		entries, err := os.ReadDir(parent)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("list cgroups: %w", err))
			continue
		}
		parents = append(parents, parent)
		for _, e := range entries {
			if e.IsDir() {
				byName[e.Name()] = append(byName[e.Name()], filepath.Join(parent, e.Name()))
			}
		}
	}
	var items []Item
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		paths := byName[name]
		items = append(items, Item{Kind: KindCgroup, Name: cgroupParent + "/" + name, Detail: hierarchies(len(paths)), paths: paths})
	}
	if len(parents) > 0 {
		items = append(items, Item{Kind: KindCgroup, Name: cgroupParent, Detail: hierarchies(len(parents)), paths: parents})
	}
	if len(makeTest) > 0 {
		items = append(items, Item{Kind: KindCgroup, Name: makeTestCgroup, Detail: hierarchies(len(makeTest)), paths: makeTest})
	}
	return items, errors.Join(errs...)
}

func hierarchies(n int) string {
	if n == 1 {
		return "in 1 hierarchy"
	}
	return fmt.Sprintf("in %d hierarchies", n)
}

// removeCgroup kills every process left in the cgroup's directories and
// the cgroups below them, and removes them, depth first, until they are
// gone or cgroupWait passed.
func removeCgroup(ctx context.Context, it Item) error {
	deadline := time.Now().Add(cgroupWait)
	for {
		var left []string
		for _, p := range it.paths {
			if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
				continue
			}
			for _, pid := range pidsIn(p) {
				// Whatever is in a node's cgroup is the node's; a process
				// that went meanwhile is fine.
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			rmdirTree(p)
			if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
				left = append(left, p)
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("remove cgroup %s: still busy after %s: %s", it.Name, cgroupWait, strings.Join(left, " "))
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return fmt.Errorf("remove cgroup %s: %w", it.Name, err)
		}
	}
}

// rmdirTree removes dir and the cgroups below it, deepest first. A busy
// one stays; the caller looks again.
func rmdirTree(dir string) {
	if entries, err := os.ReadDir(dir); err == nil {
		for _, e := range entries {
			if e.IsDir() {
				rmdirTree(filepath.Join(dir, e.Name()))
			}
		}
	}
	_ = syscall.Rmdir(dir)
}
