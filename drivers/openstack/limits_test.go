package openstack

import (
	"fmt"
	"testing"

	"github.com/cloudtransit/transit/provider"
)

// TestGroupLimitMatchesNeutron: the limit the planner checks is Neutron's
// default quota — in a fresh project a group of the most sources
// GroupLimit allows is made, one more address is refused.
func TestGroupLimitMatchesNeutron(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	drv := w.driver(w.district(), w.credential(), fast())
	n := 0
	for drv.GroupLimit(n+1).Need <= drv.GroupLimit(n+1).Max {
		n++
	}
	sources := func(k int) []string {
		var s []string
		for i := range k {
			s = append(s, fmt.Sprintf("10.1.%d.%d", i/200, i%200+1))
		}
		return s
	}
	if _, err := drv.EnsureGroup(t.Context(), groupSpec("fits", "os-test", sources(n)...)); err != nil {
		t.Fatalf("%d sources, within GroupLimit: %v", n, err)
	}
	_, err := drv.EnsureGroup(t.Context(), groupSpec("fits", "os-test", sources(n+1)...))
	w.wantKind(err, provider.ErrQuota)
}
