package aws

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/aws/aws-sdk-go-v2/aws"
	sdkec2 "github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/google/go-cmp/cmp"

	"github.com/cloudtransit/transit/cloudsim/ec2"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

func TestListPages(t *testing.T) {
	t.Parallel()
	w := newWorld(t, ec2.Options{})
	drv, g, key := ready(t, w, "pages")
	want := []string{g.ProviderID}
	for i := range 3 {
		out, err := w.sdk().CreateSecurityGroup(t.Context(), &sdkec2.CreateSecurityGroupInput{
			GroupName: sdk.String(fmt.Sprintf("extra-%d", i)), Description: sdk.String("extra"),
			TagSpecifications: []types.TagSpecification{tagSpec(types.ResourceTypeSecurityGroup, map[string]string{districts.TagCluster: "pages"})}})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, sdk.ToString(out.GroupId))
	}
	launched := launchAll(t, drv, "pages", "", g.ProviderID, key, 5)
	w.srv.SetPageSize(2)
	w.actions()
	insts, groups, err := drv.List(t.Context(), "pages")
	if err != nil {
		t.Fatal(err)
	}
	var gotInsts, wantInsts, gotGroups []string
	for _, in := range insts {
		gotInsts = append(gotInsts, in.ProviderID)
	}
	for _, in := range launched {
		wantInsts = append(wantInsts, in.ProviderID)
	}
	for _, gr := range groups {
		gotGroups = append(gotGroups, gr.ProviderID)
	}
	slices.Sort(gotInsts)
	slices.Sort(wantInsts)
	slices.Sort(gotGroups)
	slices.Sort(want)
	if diff := cmp.Diff(wantInsts, gotInsts); diff != "" {
		t.Errorf("instances on 2-item pages (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, gotGroups); diff != "" {
		t.Errorf("groups on 2-item pages (-want +got):\n%s", diff)
	}
	acts := w.actions()
	if n := count(acts, "DescribeInstances"); n != 3 {
		t.Errorf("%d DescribeInstances pages, want 3", n)
	}
	if n := count(acts, "DescribeSecurityGroups"); n != 2 {
		t.Errorf("%d DescribeSecurityGroups pages, want 2", n)
	}
}

func count(xs []string, x string) int {
	n := 0
	for _, v := range xs {
		if v == x {
			n++
		}
	}
	return n
}

func TestPlantedMachines(t *testing.T) {
	t.Parallel()
	w := newWorld(t, ec2.Options{})
	drv := w.driver(w.district(), credential(), fast())
	ctx := t.Context()
	plant := func(tags map[string]string) string {
		t.Helper()
		id, err := w.srv.Plant(ctx, region, tags)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	untagged := plant(map[string]string{"Name": "someone's"})
	other := plant(map[string]string{districts.TagCluster: "other", districts.TagDistrict: "aws-test"})
	plant(map[string]string{districts.TagCluster: "planted", districts.TagDistrict: "another-district"})
	crashed := plant(map[string]string{districts.TagCluster: "planted", "aws:autoscaling:groupName": "asg"})

	insts, _, err := drv.List(ctx, "planted")
	if err != nil {
		t.Fatal(err)
	}
	if len(insts) != 1 || insts[0].ProviderID != crashed {
		t.Fatalf("List shows %+v, want only %s", insts, crashed)
	}
	if diff := cmp.Diff(map[string]string{districts.TagCluster: "planted"}, insts[0].Tags); diff != "" {
		t.Errorf("tags of the half-tagged machine (-want +got):\n%s", diff)
	}
	if err := drv.Terminate(ctx, insts[0]); err != nil {
		t.Fatalf("Terminate the half-tagged machine: %v", err)
	}
	// What transit did not create, it does not terminate.
	err = drv.Terminate(ctx, provider.Instance{ProviderID: untagged, Tags: map[string]string{districts.TagCluster: "planted"}})
	if err == nil || !strings.Contains(err.Error(), "never terminates") {
		t.Errorf("Terminate of a foreign machine: %v", err)
	}
	err = drv.Terminate(ctx, provider.Instance{ProviderID: untagged})
	if err == nil {
		t.Error("Terminate of a machine without transit's tag succeeded")
	}
	err = drv.Terminate(ctx, provider.Instance{ProviderID: other, Tags: map[string]string{districts.TagCluster: "planted"}})
	if err == nil {
		t.Error("Terminate of another cluster's machine succeeded")
	}
	out, err := w.sdk().DescribeInstances(ctx, &sdkec2.DescribeInstancesInput{InstanceIds: []string{untagged}})
	if err != nil || out.Reservations[0].Instances[0].State.Name != types.InstanceStateNameRunning {
		t.Errorf("the foreign machine: %v %+v", err, out)
	}
	// A caller that does not say the cluster may terminate a machine
	// with transit's cluster tag.
	bare := plant(map[string]string{districts.TagCluster: "planted"})
	if err := drv.Terminate(ctx, provider.Instance{ProviderID: bare}); err != nil {
		t.Errorf("Terminate without tags of a tagged machine: %v", err)
	}
	// Missing and malformed ids are gone already.
	for _, id := range []string{"i-0123456789abcdef0", "not-an-id"} {
		if err := drv.Terminate(ctx, provider.Instance{ProviderID: id, Tags: map[string]string{districts.TagCluster: "planted"}}); err != nil {
			t.Errorf("Terminate(%s): %v", id, err)
		}
	}
}

func TestInstanceStates(t *testing.T) {
	t.Parallel()
	for st, want := range map[types.InstanceStateName]provider.InstanceState{
		types.InstanceStateNamePending:      provider.InstancePending,
		types.InstanceStateNameRunning:      provider.InstanceRunning,
		types.InstanceStateNameShuttingDown: provider.InstanceTerminating,
		types.InstanceStateNameTerminated:   provider.InstanceTerminating,
		types.InstanceStateNameStopping:     provider.InstanceStopped,
		types.InstanceStateNameStopped:      provider.InstanceStopped,
		"hibernating":                       provider.InstancePending, // a state EC2 may add
	} {
		got := toInstance(types.Instance{InstanceId: sdk.String("i-1"), State: &types.InstanceState{Name: st},
			Tags:       []types.Tag{{Key: sdk.String("k"), Value: sdk.String("v")}, {Key: sdk.String("aws:ec2:fleet-id"), Value: sdk.String("x")}},
			LaunchTime: sdk.Time(time.Unix(1e9, 0))})
		if got.State != want || !cmp.Equal(got.Tags, map[string]string{"k": "v"}) || got.CreatedAt.IsZero() {
			t.Errorf("%s: %+v, want state %s", st, got, want)
		}
	}
}
