package aws

import (
	"fmt"
	"slices"
	"testing"

	sdk "github.com/aws/aws-sdk-go-v2/aws"
	sdkec2 "github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/google/go-cmp/cmp"

	"github.com/cloudtransit/transit/cloudsim/ec2"
	"github.com/cloudtransit/transit/districts"
)

// describedRules reads a group's ingress as "proto port cidr [description]".
func describedRules(t *testing.T, w *world, id string) []string {
	t.Helper()
	out, err := w.sdk().DescribeSecurityGroups(t.Context(), &sdkec2.DescribeSecurityGroupsInput{GroupIds: []string{id}})
	if err != nil {
		t.Fatal(err)
	}
	var rules []string
	for _, r := range ingress(out.SecurityGroups[0]) {
		rules = append(rules, fmt.Sprintf("%s %02d %s [%s]", r.proto, r.from, r.cidr, r.desc))
	}
	slices.Sort(rules)
	return rules
}

func operatorRule(t *testing.T, w *world, id, proto string, port int32, cidr, desc string) {
	t.Helper()
	p := types.IpPermission{IpProtocol: sdk.String(proto), IpRanges: []types.IpRange{{CidrIp: sdk.String(cidr)}}}
	if desc != "" {
		p.IpRanges[0].Description = sdk.String(desc)
	}
	if proto != "-1" {
		p.FromPort, p.ToPort = sdk.Int32(port), sdk.Int32(port)
	}
	if _, err := w.sdk().AuthorizeSecurityGroupIngress(t.Context(), &sdkec2.AuthorizeSecurityGroupIngressInput{
		GroupId: sdk.String(id), IpPermissions: []types.IpPermission{p}}); err != nil {
		t.Fatal(err)
	}
}

// TestOperatorRulesSurvive: rules an operator adds to the cluster's group
// — HTTPS from anywhere, all traffic from an office address — stay
// through every change of the nodes, are no sources of the group, and
// keep the group when the cluster goes: transit's rules and tags leave
// it. One identical to a rule transit needs becomes transit's.
func TestOperatorRulesSurvive(t *testing.T) {
	t.Parallel()
	w := newWorld(t, ec2.Options{})
	drv := w.driver(w.district(func(d *districts.District) { d.SSHCIDRs = []string{"203.0.113.0/24"} }), credential(), fast())
	ctx := t.Context()
	g, err := drv.EnsureGroup(ctx, groupSpec("ops", "aws-test", "192.0.2.10", "192.0.2.11"))
	if err != nil {
		t.Fatal(err)
	}
	operatorRule(t, w, g.ProviderID, "tcp", 443, "0.0.0.0/0", "")
	operatorRule(t, w, g.ProviderID, "-1", 0, "198.51.100.7/32", "office")
	operatorRule(t, w, g.ProviderID, "-1", 0, "192.0.2.20/32", "") // a node's-to-be, the operator's first

	if g, err = drv.EnsureGroup(ctx, groupSpec("ops", "aws-test", "192.0.2.11", "192.0.2.12", "192.0.2.20")); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"-1 00 192.0.2.11/32 [transit: cluster node]",
		"-1 00 192.0.2.12/32 [transit: cluster node]",
		"-1 00 192.0.2.20/32 [transit: cluster node]",
		"-1 00 198.51.100.7/32 [office]",
		"tcp 22 203.0.113.0/24 [transit: ssh_cidrs]",
		"tcp 443 0.0.0.0/0 []",
	}
	if diff := cmp.Diff(want, describedRules(t, w, g.ProviderID)); diff != "" {
		t.Errorf("rules after the nodes changed (-want +got):\n%s", diff)
	}
	_, groups, err := drv.List(ctx, "ops")
	if err != nil || len(groups) != 1 {
		t.Fatalf("List: %v %v", groups, err)
	}
	if diff := cmp.Diff([]string{"192.0.2.11", "192.0.2.12", "192.0.2.20"}, groups[0].Sources); diff != "" {
		t.Errorf("listed sources (-want +got): an operator's rule is no node:\n%s", diff)
	}

	if err := drv.DeleteGroup(ctx, g); err != nil {
		t.Fatal(err)
	}
	want = []string{"-1 00 198.51.100.7/32 [office]", "tcp 443 0.0.0.0/0 []"}
	if diff := cmp.Diff(want, describedRules(t, w, g.ProviderID)); diff != "" {
		t.Errorf("the kept group's rules (-want +got):\n%s", diff)
	}
	if _, groups, _ := drv.List(ctx, "ops"); len(groups) != 0 {
		t.Errorf("the kept group is still listed as the cluster's: %+v", groups)
	}
}

// TestUnmarkedGroupIsMarked: a group transit made before it marked its
// rules holds only transit's rules; the first reconcile marks the wanted
// ones in place (no revoke, no gap), revokes the stale ones and tags the
// group; from then on an unmarked rule is an operator's and stays.
func TestUnmarkedGroupIsMarked(t *testing.T) {
	t.Parallel()
	w := newWorld(t, ec2.Options{})
	drv := w.driver(w.district(func(d *districts.District) { d.SSHCIDRs = []string{"203.0.113.0/24"} }), credential(), fast())
	ctx := t.Context()
	spec := groupSpec("old", "aws-test")
	created, err := w.sdk().CreateSecurityGroup(ctx, &sdkec2.CreateSecurityGroupInput{GroupName: sdk.String(spec.Name),
		Description: sdk.String("an older transit's"), TagSpecifications: []types.TagSpecification{tagSpec(types.ResourceTypeSecurityGroup, spec.Tags)}})
	if err != nil {
		t.Fatal(err)
	}
	id := sdk.ToString(created.GroupId)
	for _, r := range []struct {
		proto string
		port  int32
		cidr  string
	}{{"-1", 0, "192.0.2.10/32"}, {"-1", 0, "192.0.2.11/32"}, {"tcp", 22, "203.0.113.0/24"}} {
		operatorRule(t, w, id, r.proto, r.port, r.cidr, "")
	}
	before := len(w.forms("RevokeSecurityGroupIngress"))
	spec.Sources = []string{"192.0.2.11", "192.0.2.12"}
	if _, err := drv.EnsureGroup(ctx, spec); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"-1 00 192.0.2.11/32 [transit: cluster node]",
		"-1 00 192.0.2.12/32 [transit: cluster node]",
		"tcp 22 203.0.113.0/24 [transit: ssh_cidrs]",
	}
	if diff := cmp.Diff(want, describedRules(t, w, id)); diff != "" {
		t.Errorf("rules after the first reconcile (-want +got):\n%s", diff)
	}
	revokes := w.forms("RevokeSecurityGroupIngress")[before:]
	if len(revokes) != 1 || !slices.Equal(cidrsOf(revokes[0]), []string{"192.0.2.10/32"}) {
		t.Errorf("revoked %v, want only the stale 192.0.2.10/32 (kept rules are marked in place)", revokes)
	}
	operatorRule(t, w, id, "tcp", 443, "0.0.0.0/0", "")
	if _, err := drv.EnsureGroup(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if got := describedRules(t, w, id); !slices.Contains(got, "tcp 443 0.0.0.0/0 []") {
		t.Errorf("an operator's rule added after the marking was revoked: %v", got)
	}
}

// TestAPICIDRs: api_cidrs open the Kubernetes API port to those blocks,
// marked as transit's; a block no longer listed is revoked.
func TestAPICIDRs(t *testing.T) {
	t.Parallel()
	w := newWorld(t, ec2.Options{})
	ctx := t.Context()
	for i, cidrs := range [][]string{{"198.51.100.0/24", "203.0.113.9/32"}, {"203.0.113.9/32"}} {
		drv := w.driver(w.district(func(d *districts.District) {
			d.SSHCIDRs = []string{"203.0.113.0/24"}
			d.APICIDRs = cidrs
		}), credential(), fast())
		g, err := drv.EnsureGroup(ctx, groupSpec("api", "aws-test", "192.0.2.10"))
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"-1 00 192.0.2.10/32 [transit: cluster node]", "tcp 22 203.0.113.0/24 [transit: ssh_cidrs]"}
		for _, c := range cidrs {
			want = append(want, "tcp 6443 "+c+" [transit: api_cidrs]")
		}
		slices.Sort(want)
		if diff := cmp.Diff(want, describedRules(t, w, g.ProviderID)); diff != "" {
			t.Errorf("apply %d: rules (-want +got):\n%s", i+1, diff)
		}
		if l := drv.GroupLimit(1, false); l.Need != 2+len(cidrs) {
			t.Errorf("GroupLimit(1).Need = %d, want a node's rule, SSH's and %d API blocks", l.Need, len(cidrs))
		}
	}
}
