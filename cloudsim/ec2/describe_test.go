package ec2

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	gocmp "github.com/google/go-cmp/cmp"

	"github.com/cloudtransit/transit/cloudsim"
)

// tagRows are DescribeTags' answer as "resource-id type key=value", sorted
// (EC2 promises no order).
func tagRows(tags []types.TagDescription) []string {
	var out []string
	for _, t := range tags {
		out = append(out, aws.ToString(t.ResourceId)+" "+string(t.ResourceType)+" "+aws.ToString(t.Key)+"="+aws.ToString(t.Value))
	}
	slices.Sort(out)
	return out
}

func (f *fixture) describeTags(fs ...types.Filter) []string {
	f.t.Helper()
	out, err := f.ec2().DescribeTags(f.t.Context(), &ec2.DescribeTagsInput{Filters: fs})
	if err != nil {
		f.t.Fatalf("DescribeTags(%v): %v", fs, err)
	}
	if out.NextToken != nil {
		f.t.Errorf("DescribeTags without MaxResults paged: %q", aws.ToString(out.NextToken))
	}
	return tagRows(out.Tags)
}

func sorted(s ...string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// DescribeTags lists every tag of the caller's resources in the region,
// one entry per resource and key, filtered by key, value, resource-id,
// resource-type and tag:<key> (with wildcards), paged by MaxResults and
// NextToken.
func TestDescribeTags(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	c, ctx := f.ec2(), t.Context()
	i1 := aws.ToString(f.run(&ec2.RunInstancesInput{TagSpecifications: []types.TagSpecification{
		tagSpec(types.ResourceTypeInstance, "transit-cluster", "c", "Name", "node-1", "role", "worker")}}).InstanceId)
	i2 := aws.ToString(f.run(&ec2.RunInstancesInput{TagSpecifications: []types.TagSpecification{
		tagSpec(types.ResourceTypeInstance, "transit-cluster", "c", "Name", "node-2")}}).InstanceId)
	sg, err := c.CreateSecurityGroup(ctx, &ec2.CreateSecurityGroupInput{GroupName: aws.String("web"), Description: aws.String("web"),
		TagSpecifications: []types.TagSpecification{tagSpec(types.ResourceTypeSecurityGroup, "transit-cluster", "c", "role", "web")}})
	if err != nil {
		t.Fatal(err)
	}
	g := aws.ToString(sg.GroupId)
	// An untagged instance has no entries.
	f.run(&ec2.RunInstancesInput{})

	all := sorted(
		i1+" instance transit-cluster=c", i1+" instance Name=node-1", i1+" instance role=worker",
		i2+" instance transit-cluster=c", i2+" instance Name=node-2",
		g+" security-group transit-cluster=c", g+" security-group role=web")
	if diff := gocmp.Diff(all, f.describeTags()); diff != "" {
		t.Errorf("all tags (-want +got):\n%s", diff)
	}
	for _, tc := range []struct {
		name string
		fs   []types.Filter
		want []string
	}{
		{"resource-type", []types.Filter{flt("resource-type", "security-group")}, sorted(g+" security-group transit-cluster=c", g+" security-group role=web")},
		{"resource-id", []types.Filter{flt("resource-id", i2, g), flt("key", "role")}, sorted(g + " security-group role=web")},
		{"key wildcard", []types.Filter{flt("key", "transit-*")}, sorted(i1+" instance transit-cluster=c", i2+" instance transit-cluster=c", g+" security-group transit-cluster=c")},
		{"value ?", []types.Filter{flt("value", "node-?")}, sorted(i1+" instance Name=node-1", i2+" instance Name=node-2")},
		{"key and value", []types.Filter{flt("key", "role"), flt("value", "w*")}, sorted(i1+" instance role=worker", g+" security-group role=web")},
		{"tag:", []types.Filter{flt("tag:Name", "node-1")}, sorted(i1+" instance transit-cluster=c", i1+" instance Name=node-1", i1+" instance role=worker")},
		{"no match", []types.Filter{flt("resource-type", "instance"), flt("value", "web")}, nil},
	} {
		if diff := gocmp.Diff(tc.want, f.describeTags(tc.fs...)); diff != "" {
			t.Errorf("%s: (-want +got):\n%s", tc.name, diff)
		}
	}

	// Tags that change show at once; a tagged VPC is listed as a vpc.
	vpcs, err := c.DescribeVpcs(ctx, &ec2.DescribeVpcsInput{})
	if err != nil {
		t.Fatal(err)
	}
	vpc := aws.ToString(vpcs.Vpcs[0].VpcId)
	if _, err := c.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{vpc, i2}, Tags: []types.Tag{{Key: aws.String("env"), Value: aws.String("test")}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeleteTags(ctx, &ec2.DeleteTagsInput{Resources: []string{i1}, Tags: []types.Tag{{Key: aws.String("role")}}}); err != nil {
		t.Fatal(err)
	}
	if diff := gocmp.Diff(sorted(i2+" instance env=test", vpc+" vpc env=test"), f.describeTags(flt("key", "env"))); diff != "" {
		t.Errorf("after CreateTags (-want +got):\n%s", diff)
	}
	all = sorted(
		i1+" instance transit-cluster=c", i1+" instance Name=node-1",
		i2+" instance transit-cluster=c", i2+" instance Name=node-2", i2+" instance env=test",
		g+" security-group transit-cluster=c", g+" security-group role=web", vpc+" vpc env=test")

	// Pages of MaxResults, and of two (SetPageSize) that cut a resource's
	// tags in the middle: every tag once.
	for _, size := range []int{0, 2} {
		f.srv.SetPageSize(size)
		var got []types.TagDescription
		pages := 0
		pg := ec2.NewDescribeTagsPaginator(c, &ec2.DescribeTagsInput{MaxResults: aws.Int32(5)})
		for pg.HasMorePages() {
			out, err := pg.NextPage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			pages++
			if n := len(out.Tags); n > 5 || size > 0 && n > size {
				t.Errorf("page of %d tags", n)
			}
			got = append(got, out.Tags...)
		}
		wantPages := 2
		if size == 2 {
			wantPages = 4
		}
		if diff := gocmp.Diff(all, tagRows(got)); diff != "" || pages != wantPages {
			t.Errorf("page size %d: %d pages, want %d (-want +got):\n%s", size, pages, wantPages, diff)
		}
	}
	f.srv.SetPageSize(0)

	_, err = c.DescribeTags(ctx, &ec2.DescribeTagsInput{MaxResults: aws.Int32(4)})
	wantCode(t, err, "InvalidParameterValue", 400)
	_, err = c.DescribeTags(ctx, &ec2.DescribeTagsInput{MaxResults: aws.Int32(1001)})
	wantCode(t, err, "InvalidParameterValue", 400)
	_, err = c.DescribeTags(ctx, &ec2.DescribeTagsInput{NextToken: aws.String("garbage")})
	wantCode(t, err, "InvalidPaginationToken", 400)
	_, err = c.DescribeTags(ctx, &ec2.DescribeTagsInput{Filters: []types.Filter{flt("tag-value", "c")}})
	wantCode(t, err, "InvalidParameterValue", 400)
}

// statusRow is one DescribeInstanceStatus entry as "id zone state
// system/instance status (reachability detail)".
func statusRow(s types.InstanceStatus) string {
	detail := func(sum *types.InstanceStatusSummary) string {
		if sum == nil {
			return "<nil>"
		}
		out := string(sum.Status)
		for _, d := range sum.Details {
			out += " " + string(d.Name) + ":" + string(d.Status)
		}
		return out
	}
	return aws.ToString(s.InstanceId) + " " + aws.ToString(s.AvailabilityZone) + " " + string(s.InstanceState.Name) +
		" system=" + detail(s.SystemStatus) + " instance=" + detail(s.InstanceStatus)
}

func (f *fixture) instanceStatus(in *ec2.DescribeInstanceStatusInput) []string {
	f.t.Helper()
	out, err := f.ec2().DescribeInstanceStatus(f.t.Context(), in)
	if err != nil {
		f.t.Fatalf("DescribeInstanceStatus: %v", err)
	}
	var rows []string
	for _, s := range out.InstanceStatuses {
		rows = append(rows, statusRow(s))
		if want := map[types.InstanceStateName]int32{"pending": 0, "running": 16, "stopping": 64, "stopped": 80}[s.InstanceState.Name]; aws.ToInt32(s.InstanceState.Code) != want {
			f.t.Errorf("%s: state code %d", aws.ToString(s.InstanceId), aws.ToInt32(s.InstanceState.Code))
		}
	}
	return rows
}

// DescribeInstanceStatus: only running instances unless
// IncludeAllInstances; a running instance's checks are initializing for
// StatusCheckDelay after it starts running (again after a restart), then
// ok; others are not-applicable.
func TestDescribeInstanceStatus(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2025, 9, 1, 12, 0, 0, 0, time.UTC)
	clk := &simClock{t: t0}
	f := newFixture(t, Options{}) // the default delay: two minutes
	f.sim.Now = clk.Now
	f.srv.SetLatency(cloudsim.Latency{Launch: 10 * time.Second, Stop: 10 * time.Second, Start: 10 * time.Second, Terminate: 10 * time.Second})
	c, ctx := f.ec2(), t.Context()
	at := func(d time.Duration) { clk.Set(t0.Add(d)) }
	a := aws.ToString(f.run(&ec2.RunInstancesInput{}).InstanceId)
	b := aws.ToString(f.run(&ec2.RunInstancesInput{Placement: &types.Placement{AvailabilityZone: aws.String("eu-central-1b")}}).InstanceId)
	all := &ec2.DescribeInstanceStatusInput{IncludeAllInstances: aws.Bool(true)}
	const (
		na   = " system=not-applicable instance=not-applicable"
		init = " system=initializing reachability:initializing instance=initializing reachability:initializing"
		ok   = " system=ok reachability:passed instance=ok reachability:passed"
	)
	check := func(when string, in *ec2.DescribeInstanceStatusInput, want ...string) {
		t.Helper()
		if diff := gocmp.Diff(want, f.instanceStatus(in)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", when, diff)
		}
	}

	check("pending", &ec2.DescribeInstanceStatusInput{})
	check("pending, all", all, a+" eu-central-1a pending"+na, b+" eu-central-1b pending"+na)
	at(10 * time.Second)
	check("running", &ec2.DescribeInstanceStatusInput{}, a+" eu-central-1a running"+init, b+" eu-central-1b running"+init)
	if _, err := c.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{b}}); err != nil {
		t.Fatal(err)
	}
	at(10*time.Second + 2*time.Minute - time.Millisecond)
	check("just before the delay", all, a+" eu-central-1a running"+init, b+" eu-central-1b stopped"+na)
	at(10*time.Second + 2*time.Minute)
	check("after the delay", &ec2.DescribeInstanceStatusInput{}, a+" eu-central-1a running"+ok)
	check("after the delay, all", all, a+" eu-central-1a running"+ok, b+" eu-central-1b stopped"+na)

	// Started again, it is initializing again once it runs.
	at(5 * time.Minute)
	if _, err := c.StartInstances(ctx, &ec2.StartInstancesInput{InstanceIds: []string{b}}); err != nil {
		t.Fatal(err)
	}
	at(5*time.Minute + 10*time.Second)
	check("restarted", &ec2.DescribeInstanceStatusInput{}, a+" eu-central-1a running"+ok, b+" eu-central-1b running"+init)

	// Filters.
	check("instance-status.status", &ec2.DescribeInstanceStatusInput{Filters: []types.Filter{flt("instance-status.status", "ok")}}, a+" eu-central-1a running"+ok)
	check("system-status.status wildcard", &ec2.DescribeInstanceStatusInput{Filters: []types.Filter{flt("system-status.status", "init*")}}, b+" eu-central-1b running"+init)
	check("availability-zone", &ec2.DescribeInstanceStatusInput{Filters: []types.Filter{flt("availability-zone", "eu-central-1b")}}, b+" eu-central-1b running"+init)
	if _, err := c.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{a}}); err != nil {
		t.Fatal(err)
	}
	check("instance-state-name", &ec2.DescribeInstanceStatusInput{IncludeAllInstances: aws.Bool(true),
		Filters: []types.Filter{flt("instance-state-name", "stopping")}}, a+" eu-central-1a stopping"+na)
	check("not-applicable", &ec2.DescribeInstanceStatusInput{IncludeAllInstances: aws.Bool(true),
		Filters: []types.Filter{flt("instance-status.status", "not-applicable")}}, a+" eu-central-1a stopping"+na)

	// Instance ids: one not running is left out unless all are asked for.
	check("ids", &ec2.DescribeInstanceStatusInput{InstanceIds: []string{a, b}}, b+" eu-central-1b running"+init)
	check("ids, all", &ec2.DescribeInstanceStatusInput{InstanceIds: []string{a}, IncludeAllInstances: aws.Bool(true)}, a+" eu-central-1a stopping"+na)
	_, err := c.DescribeInstanceStatus(ctx, &ec2.DescribeInstanceStatusInput{InstanceIds: []string{b, "i-00000000000000000"}})
	wantCode(t, err, "InvalidInstanceID.NotFound", 400)
	_, err = c.DescribeInstanceStatus(ctx, &ec2.DescribeInstanceStatusInput{InstanceIds: []string{"i-x"}})
	wantCode(t, err, "InvalidInstanceID.Malformed", 400)
	_, err = c.DescribeInstanceStatus(ctx, &ec2.DescribeInstanceStatusInput{InstanceIds: []string{b}, MaxResults: aws.Int32(5)})
	wantCode(t, err, "InvalidParameterCombination", 400)
	_, err = c.DescribeInstanceStatus(ctx, &ec2.DescribeInstanceStatusInput{MaxResults: aws.Int32(4)})
	wantCode(t, err, "InvalidParameterValue", 400)
	_, err = c.DescribeInstanceStatus(ctx, &ec2.DescribeInstanceStatusInput{Filters: []types.Filter{flt("instance-status", "ok")}})
	wantCode(t, err, "InvalidParameterValue", 400)
	_, err = c.DescribeInstanceStatus(ctx, &ec2.DescribeInstanceStatusInput{NextToken: aws.String("garbage")})
	wantCode(t, err, "InvalidPaginationToken", 400)

	// Paging: seven instances, pages of five, then of two.
	var want []string
	for range 5 {
		f.run(&ec2.RunInstancesInput{})
	}
	for _, r := range f.instanceStatus(all) {
		want = append(want, strings.Fields(r)[0])
	}
	if len(want) != 7 {
		t.Fatalf("%d instances listed, want 7", len(want))
	}
	for _, size := range []int{0, 2} {
		f.srv.SetPageSize(size)
		var got []string
		pages := 0
		pg := ec2.NewDescribeInstanceStatusPaginator(c, &ec2.DescribeInstanceStatusInput{IncludeAllInstances: aws.Bool(true), MaxResults: aws.Int32(5)})
		for pg.HasMorePages() {
			out, err := pg.NextPage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			pages++
			for _, s := range out.InstanceStatuses {
				got = append(got, aws.ToString(s.InstanceId))
			}
		}
		wantPages := map[int]int{0: 2, 2: 4}[size]
		if diff := gocmp.Diff(want, got); diff != "" || pages != wantPages {
			t.Errorf("page size %d: %d pages, want %d (-want +got):\n%s", size, pages, wantPages, diff)
		}
	}
}

// The initializing time is cloud time: the sim's scale shortens it as it
// shortens every latency.
func TestInstanceStatusScaled(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2025, 9, 1, 12, 0, 0, 0, time.UTC)
	clk := &simClock{t: t0}
	f := newFixture(t, Options{StatusCheckDelay: time.Minute})
	f.sim.Profile.Scale = 0.5
	f.sim.Now = clk.Now
	f.srv.SetLatency(cloudsim.Latency{Launch: 10 * time.Second})
	id := aws.ToString(f.run(&ec2.RunInstancesInput{}).InstanceId)
	status := func() string {
		t.Helper()
		rows := f.instanceStatus(&ec2.DescribeInstanceStatusInput{IncludeAllInstances: aws.Bool(true)})
		if len(rows) != 1 || !strings.HasPrefix(rows[0], id+" ") {
			t.Fatalf("statuses %q", rows)
		}
		return strings.Fields(rows[0])[3]
	}
	for _, step := range []struct {
		after time.Duration
		want  string
	}{
		{4 * time.Second, "system=not-applicable"}, // pending: the launch takes 5 s
		{5 * time.Second, "system=initializing"},
		{34 * time.Second, "system=initializing"},
		{35 * time.Second, "system=ok"}, // 5 s + 30 s: one cloud minute at 0.5
	} {
		clk.Set(t0.Add(step.after))
		if got := status(); got != step.want {
			t.Errorf("after %v: %s, want %s", step.after, got, step.want)
		}
	}
}

// ruleRow is one security group rule as "group in|out proto from-to cidr
// description tags".
func ruleRow(r types.SecurityGroupRule) string {
	dir := "in"
	if aws.ToBool(r.IsEgress) {
		dir = "out"
	}
	var tags []string
	for _, t := range r.Tags {
		tags = append(tags, aws.ToString(t.Key)+"="+aws.ToString(t.Value))
	}
	slices.Sort(tags)
	return strings.Join([]string{aws.ToString(r.GroupId), dir, aws.ToString(r.IpProtocol),
		strings.Join([]string{itoa(aws.ToInt32(r.FromPort)), itoa(aws.ToInt32(r.ToPort))}, "-"),
		aws.ToString(r.CidrIpv4) + aws.ToString(r.CidrIpv6), "[" + aws.ToString(r.Description) + "]", "{" + strings.Join(tags, ",") + "}"}, " ")
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }

func (f *fixture) rules(in *ec2.DescribeSecurityGroupRulesInput) (rows []string, ids map[string]string) {
	f.t.Helper()
	out, err := f.ec2().DescribeSecurityGroupRules(f.t.Context(), in)
	if err != nil {
		f.t.Fatalf("DescribeSecurityGroupRules: %v", err)
	}
	ids = map[string]string{}
	for _, r := range out.SecurityGroupRules {
		row := ruleRow(r)
		rows = append(rows, row)
		ids[row] = aws.ToString(r.SecurityGroupRuleId)
		if aws.ToString(r.GroupOwnerId) != DefaultAccountID || !strings.HasPrefix(aws.ToString(r.SecurityGroupRuleId), "sgr-") ||
			aws.ToString(r.SecurityGroupRuleArn) != "arn:aws:ec2:"+testRegion+":"+DefaultAccountID+":security-group-rule/"+aws.ToString(r.SecurityGroupRuleId) {
			f.t.Errorf("rule %+v", r)
		}
	}
	slices.Sort(rows)
	return rows, ids
}

// DescribeSecurityGroupRules lists every rule of the caller's groups,
// the default egress rule included, each with the id it got when it was
// made; filters group-id, security-group-rule-id and tag:<key>, ids,
// paging.
func TestDescribeSecurityGroupRules(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	c, ctx := f.ec2(), t.Context()
	var groups []string
	for _, name := range []string{"g1", "g2"} {
		out, err := c.CreateSecurityGroup(ctx, &ec2.CreateSecurityGroupInput{GroupName: aws.String(name), Description: aws.String(name)})
		if err != nil {
			t.Fatal(err)
		}
		groups = append(groups, aws.ToString(out.GroupId))
	}
	g1, g2 := groups[0], groups[1]
	ssh := ipPerm("tcp", 22, "192.0.2.0/24")
	ssh.IpRanges[0].Description = aws.String("ssh")
	auth, err := c.AuthorizeSecurityGroupIngress(ctx, &ec2.AuthorizeSecurityGroupIngressInput{GroupId: aws.String(g1),
		IpPermissions:     []types.IpPermission{ssh, ipPerm("-1", 0, "198.51.100.7/32")},
		TagSpecifications: []types.TagSpecification{tagSpec(types.ResourceTypeSecurityGroupRule, "role", "admin")}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.AuthorizeSecurityGroupIngress(ctx, &ec2.AuthorizeSecurityGroupIngressInput{GroupId: aws.String(g2),
		IpPermissions: []types.IpPermission{ipPerm("tcp", 443, "0.0.0.0/0")}}); err != nil {
		t.Fatal(err)
	}
	_, err = c.AuthorizeSecurityGroupIngress(ctx, &ec2.AuthorizeSecurityGroupIngressInput{GroupId: aws.String(g2),
		IpPermissions:     []types.IpPermission{ipPerm("tcp", 80, "0.0.0.0/0")},
		TagSpecifications: []types.TagSpecification{tagSpec(types.ResourceTypeInstance, "role", "admin")}})
	wantCode(t, err, "InvalidParameterValue", 400)

	sshRow := g1 + " in tcp 22-22 192.0.2.0/24 [ssh] {role=admin}"
	allRow := g1 + " in -1 -1--1 198.51.100.7/32 [] {role=admin}"
	out1 := g1 + " out -1 -1--1 0.0.0.0/0 [] {}"
	rows, ids := f.rules(&ec2.DescribeSecurityGroupRulesInput{Filters: []types.Filter{flt("group-id", g1)}})
	if diff := gocmp.Diff(sorted(sshRow, allRow, out1), rows); diff != "" {
		t.Errorf("g1's rules (-want +got):\n%s", diff)
	}
	// The ids are those AuthorizeSecurityGroupIngress answered.
	var authIDs []string
	for _, r := range auth.SecurityGroupRules {
		authIDs = append(authIDs, aws.ToString(r.SecurityGroupRuleId))
	}
	if diff := gocmp.Diff(sorted(authIDs...), sorted(ids[sshRow], ids[allRow])); diff != "" {
		t.Errorf("rule ids (-authorize +describe):\n%s", diff)
	}

	// Every group's rules: the default group's egress rule too.
	rows, all := f.rules(&ec2.DescribeSecurityGroupRulesInput{})
	if len(rows) != 6 || !slices.Contains(rows, g2+" in tcp 443-443 0.0.0.0/0 [] {}") || !slices.Contains(rows, g2+" out -1 -1--1 0.0.0.0/0 [] {}") {
		t.Errorf("all rules: %q", rows)
	}

	// A rule keeps its id when its description changes.
	ssh.IpRanges[0].Description = aws.String("ssh from the office")
	if _, err := c.UpdateSecurityGroupRuleDescriptionsIngress(ctx, &ec2.UpdateSecurityGroupRuleDescriptionsIngressInput{GroupId: aws.String(g1),
		IpPermissions: []types.IpPermission{ssh}}); err != nil {
		t.Fatal(err)
	}
	rows, _ = f.rules(&ec2.DescribeSecurityGroupRulesInput{SecurityGroupRuleIds: []string{ids[sshRow]}})
	if diff := gocmp.Diff([]string{g1 + " in tcp 22-22 192.0.2.0/24 [ssh from the office] {role=admin}"}, rows); diff != "" {
		t.Errorf("by id after a new description (-want +got):\n%s", diff)
	}

	// Filters: tags (CreateTags tags a rule by its id), rule ids.
	if _, err := c.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{ids[out1]}, Tags: []types.Tag{{Key: aws.String("role"), Value: aws.String("egress")}}}); err != nil {
		t.Fatal(err)
	}
	rows, _ = f.rules(&ec2.DescribeSecurityGroupRulesInput{Filters: []types.Filter{flt("tag:role", "e*")}})
	if diff := gocmp.Diff([]string{g1 + " out -1 -1--1 0.0.0.0/0 [] {role=egress}"}, rows); diff != "" {
		t.Errorf("tag:role=e* (-want +got):\n%s", diff)
	}
	rows, _ = f.rules(&ec2.DescribeSecurityGroupRulesInput{Filters: []types.Filter{flt("tag:role", "admin"), flt("security-group-rule-id", ids[allRow])}})
	if diff := gocmp.Diff([]string{allRow}, rows); diff != "" {
		t.Errorf("tag and rule id (-want +got):\n%s", diff)
	}
	if got := f.describeTags(flt("resource-type", "security-group-rule")); !slices.Contains(got, ids[out1]+" security-group-rule role=egress") || len(got) != 3 {
		t.Errorf("DescribeTags of rules: %q", got)
	}

	// Pages of two: every rule once, in the same order each time.
	f.srv.SetPageSize(2)
	var paged []string
	pages := 0
	pg := ec2.NewDescribeSecurityGroupRulesPaginator(c, &ec2.DescribeSecurityGroupRulesInput{MaxResults: aws.Int32(5)})
	for pg.HasMorePages() {
		out, err := pg.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, r := range out.SecurityGroupRules {
			paged = append(paged, aws.ToString(r.SecurityGroupRuleId))
		}
	}
	f.srv.SetPageSize(0)
	if diff := gocmp.Diff(sorted(slices.Collect(maps.Values(all))...), sorted(paged...)); diff != "" || pages != 3 || len(paged) != 6 {
		t.Errorf("%d pages of %d rules (-want +got):\n%s", pages, len(paged), diff)
	}
	first, err := c.DescribeSecurityGroupRules(ctx, &ec2.DescribeSecurityGroupRulesInput{MaxResults: aws.Int32(5)})
	if err != nil || len(first.SecurityGroupRules) != 5 || first.NextToken == nil {
		t.Fatalf("MaxResults 5: %v %+v", err, first)
	}
	rest, err := c.DescribeSecurityGroupRules(ctx, &ec2.DescribeSecurityGroupRulesInput{MaxResults: aws.Int32(5), NextToken: first.NextToken})
	if err != nil || len(rest.SecurityGroupRules) != 1 || rest.NextToken != nil {
		t.Fatalf("second page: %v %+v", err, rest)
	}

	// A revoked rule is gone; its id unknown.
	if _, err := c.RevokeSecurityGroupIngress(ctx, &ec2.RevokeSecurityGroupIngressInput{GroupId: aws.String(g1),
		IpPermissions: []types.IpPermission{ipPerm("-1", 0, "198.51.100.7/32")}}); err != nil {
		t.Fatal(err)
	}
	_, err = c.DescribeSecurityGroupRules(ctx, &ec2.DescribeSecurityGroupRulesInput{SecurityGroupRuleIds: []string{ids[allRow]}})
	wantCode(t, err, "InvalidSecurityGroupRuleId.NotFound", 400)
	_, err = c.DescribeSecurityGroupRules(ctx, &ec2.DescribeSecurityGroupRulesInput{SecurityGroupRuleIds: []string{"sgr-1"}})
	wantCode(t, err, "InvalidSecurityGroupRuleId.Malformed", 400)
	_, err = c.DescribeSecurityGroupRules(ctx, &ec2.DescribeSecurityGroupRulesInput{MaxResults: aws.Int32(1001)})
	wantCode(t, err, "InvalidParameterValue", 400)
	_, err = c.DescribeSecurityGroupRules(ctx, &ec2.DescribeSecurityGroupRulesInput{Filters: []types.Filter{flt("ip-protocol", "tcp")}})
	wantCode(t, err, "InvalidParameterValue", 400)
	_, err = c.DescribeSecurityGroupRules(ctx, &ec2.DescribeSecurityGroupRulesInput{NextToken: aws.String("garbage")})
	wantCode(t, err, "InvalidPaginationToken", 400)
}
