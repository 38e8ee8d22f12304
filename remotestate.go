package transit

import (
	"os"
	"path/filepath"

	"github.com/cloudtransit/transit/districts"
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
