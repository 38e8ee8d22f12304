package transit

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/platforms/ssh"
	"github.com/cloudtransit/transit/statestore"
)

// writeLocal writes a remote state's object and journal (statestore.
// ReadState's) into dir as the local state file and its journal.
func writeLocal(dir string, base statestore.Object, journal []byte) error {
	path := filepath.Join(dir, RemoteStateObject)
	if base.Data != nil {
		if err := os.WriteFile(path, base.Data, 0o600); err != nil {
			return err
		}
	}
	if len(journal) > 0 {
		return os.WriteFile(districts.JournalPath(path), journal, 0o600)
	}
	return nil
}

// keyKept refuses a state that records machines when the cluster's SSH
// private key is missing beside it (a remote store's object, pulled into
// stateDir, or the file of a state directory): `state push` into a store
// that never had it, a deleted object, a lifecycle rule, a state file
// copied without its key. EnsureKey would make a new pair, which every
// one of those machines refuses.
func (s *Session) keyKept(stateDir string) error {
	machines := len(s.state.Nodes) + len(s.state.Launching)
	if machines == 0 {
		return nil
	}
	path := ssh.KeyPath(stateDir, s.cfg.Cluster.ID)
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		return nil // there, or EnsureKey says what is wrong with it
	}
	what, restore := path, "put the file back from a backup"
	if s.remote != nil {
		what = s.remote.store.Location() + "/" + filepath.Base(path) + ".age"
		restore = "restore an earlier version of that object (a bucket with versioning keeps them)"
	}
	restore += fmt.Sprintf(", or copy it from the store that still holds it (`transit --state THAT_STORE state migrate --to '%s' --force`, which replaces this state with that one's)", s.opts.Files.State)
	return configError(fmt.Errorf("the state records %d machines of cluster %s, but its SSH private key %s is missing: no new key pair is made, as every one of those machines would refuse it; %s, then run again",
		machines, s.cfg.Cluster.ID, what, restore))
}
