package filestore_test

import (
	"path/filepath"
	"testing"

	"github.com/cloudtransit/transit/statestore"
	"github.com/cloudtransit/transit/statestore/filestore"
	"github.com/cloudtransit/transit/statestore/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) statestore.Store {
		s, err := filestore.New(filepath.Join(t.TempDir(), "resources.json"))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}, storetest.Options{KernelLock: true})
}
