package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// A killed e2e run leaves the directory it built transit into; the next
// run removes it, never the directory of a run still going (another
// group's, started apart).
func TestDeadRunsBinDirsAreRemoved(t *testing.T) {
	done := exec.Command("true")
	if err := done.Run(); err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	dead := filepath.Join(tmp, binDirPrefix+strconv.Itoa(done.Process.Pid)+"-123")
	live := filepath.Join(tmp, binDirPrefix+strconv.Itoa(os.Getpid())+"-456")
	other := filepath.Join(tmp, "transit-e2e-binary")
	for _, d := range []string{dead, live, other} {
		if err := os.MkdirAll(filepath.Join(d, "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	removeDeadBinDirs(tmp)
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("the dead run's %s is still there (%v)", dead, err)
	}
	for _, d := range []string{live, other} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s was removed: %v", d, err)
		}
	}
}
