package openstack

import (
	"testing"

	"github.com/cloudtransit/transit/drivers/drivertest"
	"github.com/cloudtransit/transit/provider"
)

// TestGroupLimitMatchesNeutron: the limit the planner checks is Neutron's
// default quota — in a fresh project a group of the most sources
// GroupLimit allows is made, one more address is refused.
func TestGroupLimitMatchesNeutron(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	drv := w.driver(w.district(), w.credential(), fast())
	n, fits, past := drivertest.LimitEdge(drv)
	if _, err := drv.EnsureGroup(t.Context(), groupSpec("fits", "os-test", fits...)); err != nil {
		t.Fatalf("%d sources, within GroupLimit: %v", n, err)
	}
	_, err := drv.EnsureGroup(t.Context(), groupSpec("fits", "os-test", past...))
	w.wantKind(err, provider.ErrQuota)
}
