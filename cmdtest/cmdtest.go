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
)

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
	if dir == "" {
		d, err := os.MkdirTemp("", "transit-cmdtest-")
		if err != nil {
			tb.Fatal(err)
		}
		dir = d
	}
	bin := filepath.Join(dir, name)
	err, done := built[name]
	if !done {
		if out, berr := exec.Command("go", "build", "-o", bin, "github.com/cloudtransit/transit/cmd/"+name).CombinedOutput(); berr != nil {
			err = fmt.Errorf("go build cmd/%s: %w\n%s", name, berr, out)
		}
		built[name] = err
	}
	if err != nil {
		tb.Fatal(err)
	}
	return bin
}

// Main runs a package's tests and removes the commands they built: call
// it from TestMain.
func Main(m *testing.M) int {
	code := m.Run()
	mu.Lock()
	defer mu.Unlock()
	if dir != "" {
		_ = os.RemoveAll(dir)
	}
	return code
}
