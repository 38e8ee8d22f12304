package aws

import (
	"testing"

	"github.com/cloudtransit/transit/cloudsim/ec2"
	"github.com/cloudtransit/transit/drivers/drivertest"
	"github.com/cloudtransit/transit/provider"
)

// TestGroupLimitMatchesEC2: the limit the planner checks is EC2's own —
// a group of exactly the most sources GroupLimit allows is made, one
// more address is refused by the API.
func TestGroupLimitMatchesEC2(t *testing.T) {
	t.Parallel()
	w := newWorld(t, ec2.Options{})
	drv := w.driver(w.district(), credential(), fast())
	n, fits, past := drivertest.LimitEdge(drv)
	if _, err := drv.EnsureGroup(t.Context(), groupSpec("fits", "aws-test", fits...)); err != nil {
		t.Fatalf("%d sources, within GroupLimit: %v", n, err)
	}
	_, err := drv.EnsureGroup(t.Context(), groupSpec("over", "aws-test", past...))
	wantKind(t, err, provider.ErrQuota)
	if n+len(drv.sshCIDRs) != defaultRulesPerGroup {
		t.Errorf("GroupLimit allows %d sources beside %d SSH blocks, want %d rules in all", n, len(drv.sshCIDRs), defaultRulesPerGroup)
	}
}
