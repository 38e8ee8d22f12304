package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/cloudtransit/transit/hostclean"
)

// A killed e2e run leaves the directory it built transit into; the next
// run removes it — also when a later process took its pid — never the
// directory of a run still going (another group's, started apart).
func TestDeadRunsBinDirsAreRemoved(t *testing.T) {
	tmp := t.TempDir()
	// This process's pid with another start time: the run that had the
	// pid before is gone, as pids come round every few minutes here.
	reused := filepath.Join(tmp, binDirPrefix+fmt.Sprintf("%d:1", os.Getpid())+"-123")
	free := filepath.Join(tmp, binDirPrefix+"999999:1-124") // above any pid_max here
	live := filepath.Join(tmp, binDirPrefix+hostclean.Mark()+"-456")
	other := filepath.Join(tmp, "transit-e2e-binary")
	for _, d := range []string{reused, free, live, other} {
		if err := os.MkdirAll(filepath.Join(d, "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	removeDeadBinDirs(tmp)
	for _, d := range []string{reused, free} {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("the dead run's %s is still there (%v)", d, err)
		}
	}
	for _, d := range []string{live, other} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s was removed: %v", d, err)
		}
	}
}
