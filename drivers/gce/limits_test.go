package gce

import (
	"testing"

	"github.com/cloudtransit/transit/drivers/drivertest"
)

// TestGroupLimitMatchesComputeEngine: the limit the planner checks is
// Compute Engine's own — a nodes rule of the most sources GroupLimit
// allows is made, one more is refused by the API.
func TestGroupLimitMatchesComputeEngine(t *testing.T) {
	w := newWorld(t)
	drv := w.driver(w.district(), w.credential(), fast())
	n, fits, past := drivertest.LimitEdge(drv)
	if n != maxSourceRanges {
		t.Fatalf("the edge at %d sources, want %d", n, maxSourceRanges)
	}
	if _, err := drv.EnsureGroup(t.Context(), groupSpec("fits", "gce-test", fits...)); err != nil {
		t.Fatalf("%d sources, within GroupLimit: %v", n, err)
	}
	if _, err := drv.EnsureGroup(t.Context(), groupSpec("over", "gce-test", past...)); err == nil {
		t.Fatalf("%d sources, past GroupLimit, were accepted", n+1)
	}
}
