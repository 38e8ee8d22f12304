package gce

import (
	"fmt"
	"testing"
)

// TestGroupLimitMatchesComputeEngine: the limit the planner checks is
// Compute Engine's own — a nodes rule of the most sources GroupLimit
// allows is made, one more is refused by the API.
func TestGroupLimitMatchesComputeEngine(t *testing.T) {
	w := newWorld(t)
	drv := w.driver(w.district(), w.credential(), fast())
	n := drv.GroupLimit(0).Max
	if drv.GroupLimit(n).Need > n || drv.GroupLimit(n+1).Need <= n {
		t.Fatalf("GroupLimit(%d) = %+v: want the edge at %d sources", n, drv.GroupLimit(n), n)
	}
	sources := func(k int) []string {
		var s []string
		for i := range k {
			s = append(s, fmt.Sprintf("10.%d.%d.1", i/250, i%250))
		}
		return s
	}
	if _, err := drv.EnsureGroup(t.Context(), groupSpec("fits", "gce-test", sources(n)...)); err != nil {
		t.Fatalf("%d sources, within GroupLimit: %v", n, err)
	}
	if _, err := drv.EnsureGroup(t.Context(), groupSpec("over", "gce-test", sources(n+1)...)); err == nil {
		t.Fatalf("%d sources, past GroupLimit, were accepted", n+1)
	}
}
