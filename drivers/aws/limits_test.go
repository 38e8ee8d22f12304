package aws

import (
	"fmt"
	"testing"

	"github.com/cloudtransit/transit/cloudsim/ec2"
	"github.com/cloudtransit/transit/provider"
)

// TestGroupLimitMatchesEC2: the limit the planner checks is EC2's own —
// a group of exactly the most sources GroupLimit allows is made, one
// more address is refused by the API.
func TestGroupLimitMatchesEC2(t *testing.T) {
	t.Parallel()
	w := newWorld(t, ec2.Options{})
	drv := w.driver(w.district(), credential(), fast())
	n := 0
	for drv.GroupLimit(n+1).Need <= drv.GroupLimit(n+1).Max {
		n++
	}
	sources := func(k int) []string {
		var s []string
		for i := range k {
			s = append(s, fmt.Sprintf("192.0.%d.%d", i/200, i%200+1))
		}
		return s
	}
	if _, err := drv.EnsureGroup(t.Context(), groupSpec("fits", "aws-test", sources(n)...)); err != nil {
		t.Fatalf("%d sources, within GroupLimit: %v", n, err)
	}
	_, err := drv.EnsureGroup(t.Context(), groupSpec("over", "aws-test", sources(n+1)...))
	wantKind(t, err, provider.ErrQuota)
	if n+len(drv.sshCIDRs) != defaultRulesPerGroup {
		t.Errorf("GroupLimit allows %d sources beside %d SSH blocks, want %d rules in all", n, len(drv.sshCIDRs), defaultRulesPerGroup)
	}
}
