package aws

import (
	"context"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/aws/aws-sdk-go-v2/aws"
	sdkec2 "github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/google/go-cmp/cmp"

	"github.com/cloudtransit/transit/cloudsim"
	"github.com/cloudtransit/transit/cloudsim/ec2"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// cidrsOf lists the CidrIp values of an Authorize or Revoke request.
func cidrsOf(f url.Values) []string {
	var out []string
	for k, v := range f {
		if strings.HasPrefix(k, "IpPermissions.") && strings.HasSuffix(k, ".CidrIp") {
			out = append(out, v[0])
		}
	}
	slices.Sort(out)
	return out
}

// rulesOf reads a group's ingress as "proto port cidr" lines.
func rulesOf(t *testing.T, w *world, id string) []string {
	t.Helper()
	var rules []string
	for _, r := range describedRules(t, w, id) {
		r, _, _ = strings.Cut(r, " [")
		rules = append(rules, r)
	}
	return rules
}

func TestEnsureGroupChangesOnlyTheDifference(t *testing.T) {
	t.Parallel()
	w := newWorld(t, ec2.Options{})
	drv := w.driver(w.district(func(d *districts.District) { d.SSHCIDRs = []string{"203.0.113.0/24"} }), credential(), fast())
	ctx := t.Context()

	g, err := drv.EnsureGroup(ctx, groupSpec("diff", "aws-test", "192.0.2.10", "192.0.2.11"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"192.0.2.10", "192.0.2.11"}, g.Sources); diff != "" {
		t.Errorf("sources (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"-1 00 192.0.2.10/32", "-1 00 192.0.2.11/32", "tcp 22 203.0.113.0/24"}, rulesOf(t, w, g.ProviderID)); diff != "" {
		t.Errorf("rules (-want +got):\n%s", diff)
	}
	if g.Tags[districts.TagCluster] != "diff" || g.Name != provider.GroupName("diff", "aws-test") {
		t.Errorf("group %+v", g)
	}
	w.actions()

	again, err := drv.EnsureGroup(ctx, groupSpec("diff", "aws-test", "192.0.2.11", "192.0.2.10"))
	if err != nil {
		t.Fatal(err)
	}
	if again.ProviderID != g.ProviderID {
		t.Errorf("a second group: %s, then %s", g.ProviderID, again.ProviderID)
	}
	for _, a := range w.actions() {
		if a != "DescribeSecurityGroups" {
			t.Errorf("an unchanged group asked %s", a)
		}
	}

	changed, err := drv.EnsureGroup(ctx, groupSpec("diff", "aws-test", "192.0.2.11", "192.0.2.12"))
	if err != nil {
		t.Fatal(err)
	}
	auth, revoke := w.forms("AuthorizeSecurityGroupIngress"), w.forms("RevokeSecurityGroupIngress")
	if len(auth) != 1 || len(revoke) != 1 {
		t.Fatalf("%d authorize and %d revoke requests, want one each", len(auth), len(revoke))
	}
	if diff := cmp.Diff([]string{"192.0.2.12/32"}, cidrsOf(auth[0])); diff != "" {
		t.Errorf("authorized (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"192.0.2.10/32"}, cidrsOf(revoke[0])); diff != "" {
		t.Errorf("revoked (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"192.0.2.11", "192.0.2.12"}, changed.Sources); diff != "" {
		t.Errorf("sources (-want +got):\n%s", diff)
	}

	// A rule someone added by hand goes; List reports the node sources
	// only.
	if _, err := w.sdk().AuthorizeSecurityGroupIngress(ctx, &sdkec2.AuthorizeSecurityGroupIngressInput{GroupId: sdk.String(g.ProviderID),
		IpPermissions: []types.IpPermission{rule{proto: "tcp", from: 80, to: 80, cidr: "0.0.0.0/0"}.permission()}}); err != nil {
		t.Fatal(err)
	}
	if _, err := drv.EnsureGroup(ctx, groupSpec("diff", "aws-test", "192.0.2.11", "192.0.2.12")); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"-1 00 192.0.2.11/32", "-1 00 192.0.2.12/32", "tcp 22 203.0.113.0/24"}, rulesOf(t, w, g.ProviderID)); diff != "" {
		t.Errorf("rules (-want +got):\n%s", diff)
	}
	_, groups, err := drv.List(ctx, "diff")
	if err != nil || len(groups) != 1 {
		t.Fatalf("List: %v %+v", err, groups)
	}
	if diff := cmp.Diff([]string{"192.0.2.11", "192.0.2.12"}, groups[0].Sources); diff != "" {
		t.Errorf("listed sources (-want +got):\n%s", diff)
	}

	// Tags the group lacks are added.
	spec := groupSpec("diff", "aws-test", "192.0.2.11", "192.0.2.12")
	spec.Tags[districts.TagLineage] = "lin-2"
	tagged, err := drv.EnsureGroup(ctx, spec)
	if err != nil || tagged.Tags[districts.TagLineage] != "lin-2" {
		t.Errorf("EnsureGroup with a new tag: %v %+v", err, tagged)
	}
}

func TestEnsureGroupRefusesForeignGroup(t *testing.T) {
	t.Parallel()
	w := newWorld(t, ec2.Options{})
	drv := w.driver(w.district(), credential(), fast())
	if _, err := w.sdk().CreateSecurityGroup(t.Context(), &sdkec2.CreateSecurityGroupInput{
		GroupName: sdk.String(provider.GroupName("squat", "aws-test")), Description: sdk.String("someone else's")}); err != nil {
		t.Fatal(err)
	}
	_, err := drv.EnsureGroup(t.Context(), groupSpec("squat", "aws-test", "192.0.2.1"))
	if err == nil || !strings.Contains(err.Error(), "not cluster \"squat\"'s tag") {
		t.Errorf("EnsureGroup over a foreign group: %v", err)
	}
}

func TestGroupQuota(t *testing.T) {
	t.Parallel()
	w := newWorld(t, ec2.Options{RulesPerGroup: 3})
	drv := w.driver(w.district(), credential(), fast())
	_, err := drv.EnsureGroup(t.Context(), groupSpec("rules", "aws-test", "192.0.2.1", "192.0.2.2", "192.0.2.3"))
	wantKind(t, err, provider.ErrQuota)
	if !strings.Contains(err.Error(), "RulesPerSecurityGroupLimitExceeded") {
		t.Errorf("quota error does not name the quota: %v", err)
	}
}

// TestDeleteGroupWaitsForTerminations: a group still used by a
// terminating instance is deleted once the termination ends, within
// GroupWait, and refused naming the dependency past it. The emulator's
// clock is held while the instance terminates, so no step depends on how
// fast a loaded machine runs it.
func TestDeleteGroupWaitsForTerminations(t *testing.T) {
	t.Parallel()
	w := newWorld(t, ec2.Options{})
	w.srv.SetLatency(cloudsim.Latency{Terminate: 500 * time.Millisecond})
	drv, g, key := ready(t, w, "dep")
	inst, err := drv.Launch(t.Context(), launchSpec("dep", "aws-test", "dep-n1", "", g.ProviderID, key))
	if err != nil {
		t.Fatal(err)
	}
	w.clock.Hold()
	// Terminate does not wait for the termination (which cannot end
	// while the clock is held).
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	err = drv.Terminate(ctx, inst)
	cancel()
	if err != nil {
		t.Fatalf("Terminate while the instance terminates: %v (does it wait for the termination?)", err)
	}
	insts, _, err := drv.List(t.Context(), "dep")
	if err != nil || len(insts) != 1 || insts[0].State != provider.InstanceTerminating {
		t.Fatalf("right after Terminate: %v %+v", err, insts)
	}

	// Too short a wait: the group is still in use.
	opts := fast()
	opts.GroupWait = 50 * time.Millisecond
	impatient := w.driver(w.district(), credential(), opts)
	err = impatient.DeleteGroup(t.Context(), g)
	noSecret(t, err)
	if err == nil || !strings.Contains(err.Error(), "DependencyViolation") {
		t.Errorf("DeleteGroup while an instance terminates: %v", err)
	}

	// The termination ends once a patient DeleteGroup was refused: when
	// it tries again (its first request is recorded before the emulator
	// answers it, so that one may still be on its way).
	w.actions()
	w.clock.ResumeWhen(t.Context(), time.Second, func() bool { return len(w.forms("DeleteSecurityGroup")) >= 2 })
	if err := drv.DeleteGroup(t.Context(), g); err != nil {
		t.Fatalf("DeleteGroup: %v", err)
	}
	if n := len(w.forms("DeleteSecurityGroup")); n < 2 {
		t.Errorf("DeleteGroup tried %d times, want retries while the instance terminated", n)
	}
	if err := drv.DeleteGroup(t.Context(), g); err != nil {
		t.Errorf("DeleteGroup of a deleted group: %v", err)
	}
	// By name when the id is unknown.
	g2, err := drv.EnsureGroup(t.Context(), groupSpec("dep", "aws-test"))
	if err != nil {
		t.Fatal(err)
	}
	if err := drv.DeleteGroup(t.Context(), provider.Group{Name: g2.Name}); err != nil {
		t.Fatal(err)
	}
	if _, groups, err := drv.List(t.Context(), "dep"); err != nil || len(groups) != 0 {
		t.Errorf("after DeleteGroup by name: %v %+v", err, groups)
	}
}
