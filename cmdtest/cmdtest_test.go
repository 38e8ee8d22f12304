package cmdtest

import (
	"os"
	"path/filepath"
	"testing"
)

func TestMain(m *testing.M) { os.Exit(Main(m, "streams-echo")) }

// TestMainBuildsFirst: the commands Main is given exist before any test
// asks for them, so no test's deadline pays for their build.
func TestMainBuildsFirst(t *testing.T) {
	fi, err := os.Stat(filepath.Join(dir, "streams-echo"))
	if err != nil {
		t.Fatalf("streams-echo not built before the tests: %v", err)
	}
	if bin := Build(t, "streams-echo"); bin != filepath.Join(dir, "streams-echo") {
		t.Fatalf("Build = %s", bin)
	}
	after, err := os.Stat(filepath.Join(dir, "streams-echo"))
	if err != nil || !after.ModTime().Equal(fi.ModTime()) {
		t.Fatalf("Build built streams-echo again (%v)", err)
	}
}

// TestBuildFails: a command that does not build fails the test that asks
// for it with go build's message, every time it is asked for.
func TestBuildFails(t *testing.T) {
	mu.Lock()
	err := build("no-such-command")
	again := build("no-such-command")
	mu.Unlock()
	if err == nil || again == nil || err.Error() != again.Error() {
		t.Fatalf("build of a missing command: %v, then %v", err, again)
	}
}
