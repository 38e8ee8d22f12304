// Package cmdtest builds transit's own commands (cmd/<name>) for tests
// that run them as processes: each at most once per test binary, into one
// temporary directory that Main removes.
package cmdtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/cloudtransit/transit/hostclean"
)

const module = "github.com/cloudtransit/transit/cmd/"

var (
	mu    sync.Mutex
	dir   string
	built = map[string]error{}
)

// Build returns the path of cmd/name, building it first if this test
// binary has not; a failed build fails every test that asks for it.
func Build(tb testing.TB, name string) string {
	tb.Helper()
	mu.Lock()
	defer mu.Unlock()
	if err := build(name); err != nil {
		tb.Fatal(err)
	}
	return filepath.Join(dir, name)
}

// build builds the named commands not built yet, in one go build (its
// packages compile in parallel); mu is held.
func build(names ...string) error {
	if dir == "" {
		d, err := os.MkdirTemp("", "transit-cmdtest-")
		if err != nil {
			return err
		}
		dir = d
	}
	var todo []string
	for _, n := range names {
		if _, done := built[n]; !done {
			todo = append(todo, n)
		}
	}
	if len(todo) > 0 {
		args := []string{"build", "-o", dir + string(filepath.Separator)}
		for _, n := range todo {
			args = append(args, module+n)
		}
		out, err := exec.Command("go", args...).CombinedOutput()
		for _, n := range todo {
			built[n] = nil
			if err != nil {
				built[n] = fmt.Errorf("go build cmd/%s: %w\n%s", n, err, out)
			}
		}
	}
	for _, n := range names {
		if err := built[n]; err != nil {
			return err
		}
	}
	return nil
}

// Main builds the commands named, runs a package's tests and removes what
// was built: call it from TestMain. Building before the first test starts
// keeps the build out of every test's deadline: under make test's load,
// linking one command took most of a two-minute test deadline, and the
// test failed having run nothing. A failed build fails only the tests that
// ask for that command.
//
// Main also kills what killed test runs left and marks what this one
// starts (hostclean.TestRun).
func Main(m *testing.M, names ...string) int {
	if killed, err := hostclean.TestRun(); err != nil {
		fmt.Fprintln(os.Stderr, "cmdtest: what killed test runs left:", err)
	} else if len(killed) > 0 {
		fmt.Fprintf(os.Stderr, "cmdtest: killed %d processes killed test runs left\n", len(killed))
	}
	mu.Lock()
	_ = build(names...) // the error is kept for Build to report
	mu.Unlock()
	code := m.Run()
	mu.Lock()
	defer mu.Unlock()
	if dir != "" {
		_ = os.RemoveAll(dir)
	}
	return code
}
