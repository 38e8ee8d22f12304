package memstore_test

import (
	"testing"

	"github.com/cloudtransit/transit/statestore"
	"github.com/cloudtransit/transit/statestore/memstore"
	"github.com/cloudtransit/transit/statestore/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(*testing.T) statestore.Store { return memstore.New() }, storetest.Options{})
}
