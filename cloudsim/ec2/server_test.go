package ec2

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"
	gocmp "github.com/google/go-cmp/cmp"
	"golang.org/x/crypto/ssh"

	"github.com/cloudtransit/transit/awsbody"
	"github.com/cloudtransit/transit/cloudsim"
)

const testRegion = "eu-central-1"

type fixture struct {
	t   *testing.T
	sim *cloudsim.Sim
	srv *Server
	url string
}

func newFixture(t *testing.T, opts Options) *fixture {
	t.Helper()
	sim := cloudsim.New(cloudsim.Profile{Name: cloudsim.ProfileZero})
	srv := New(sim, opts)
	ts := httptest.NewServer(srv)
	t.Cleanup(func() {
		ts.Close()
		srv.Close()
	})
	return &fixture{t: t, sim: sim, srv: srv, url: ts.URL}
}

// client is the real SDK client against the emulator; attempts 1 shows
// every answer as it is, without the SDK's retries.
func (f *fixture) client(keyID, secret, token string, attempts int) *ec2.Client {
	return ec2.New(ec2.Options{
		Region:           testRegion,
		BaseEndpoint:     aws.String(f.url),
		Credentials:      credentials.NewStaticCredentialsProvider(keyID, secret, token),
		RetryMaxAttempts: attempts,
		HTTPClient:       awsbody.Wrap(nil),
	})
}

func (f *fixture) ec2() *ec2.Client {
	return f.client(DefaultAccessKeyID, DefaultSecretAccessKey, "", 1)
}

// apiErr returns the EC2 error code and HTTP status of err.
func apiErr(t *testing.T, err error) (string, int) {
	t.Helper()
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		t.Fatalf("error %v is no EC2 API error", err)
	}
	status := 0
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		status = re.HTTPStatusCode()
	}
	return ae.ErrorCode(), status
}

func wantCode(t *testing.T, err error, code string, status int) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %s (%d)", code, status)
	}
	gotCode, gotStatus := apiErr(t, err)
	if gotCode != code || (status != 0 && gotStatus != status) {
		t.Fatalf("error %s (%d), want %s (%d): %v", gotCode, gotStatus, code, status, err)
	}
}

func authorizedKey(t *testing.T) string {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pk, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pk))) + " test@host"
}

func tagSpec(typ types.ResourceType, kv ...string) types.TagSpecification {
	ts := types.TagSpecification{ResourceType: typ}
	for i := 0; i < len(kv); i += 2 {
		ts.Tags = append(ts.Tags, types.Tag{Key: aws.String(kv[i]), Value: aws.String(kv[i+1])})
	}
	return ts
}

func tagMap(tags []types.Tag) map[string]string {
	m := map[string]string{}
	for _, t := range tags {
		m[aws.ToString(t.Key)] = aws.ToString(t.Value)
	}
	return m
}

func flt(name string, values ...string) types.Filter {
	return types.Filter{Name: aws.String(name), Values: values}
}

func (f *fixture) run(in *ec2.RunInstancesInput) *types.Instance {
	f.t.Helper()
	if in.ImageId == nil {
		in.ImageId = aws.String(DefaultImages()[0].ID)
	}
	if in.InstanceType == "" {
		in.InstanceType = types.InstanceTypeT3Micro
	}
	if in.MinCount == nil {
		in.MinCount, in.MaxCount = aws.Int32(1), aws.Int32(1)
	}
	out, err := f.ec2().RunInstances(f.t.Context(), in)
	if err != nil {
		f.t.Fatalf("RunInstances: %v", err)
	}
	return &out.Instances[0]
}

func (f *fixture) describe(id string) *types.Instance {
	f.t.Helper()
	out, err := f.ec2().DescribeInstances(f.t.Context(), &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	if err != nil {
		f.t.Fatalf("DescribeInstances(%s): %v", id, err)
	}
	return &out.Reservations[0].Instances[0]
}

func TestNetworkDefaults(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	c, ctx := f.ec2(), t.Context()
	zones, err := c.DescribeAvailabilityZones(ctx, &ec2.DescribeAvailabilityZonesInput{Filters: []types.Filter{flt("state", "available")}})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, z := range zones.AvailabilityZones {
		names = append(names, aws.ToString(z.ZoneName))
		if aws.ToString(z.RegionName) != testRegion || !strings.HasPrefix(aws.ToString(z.ZoneId), "euc1-az") {
			t.Errorf("zone %+v", z)
		}
	}
	if diff := gocmp.Diff([]string{"eu-central-1a", "eu-central-1b", "eu-central-1c"}, names); diff != "" {
		t.Errorf("zones (-want +got):\n%s", diff)
	}
	vpcs, err := c.DescribeVpcs(ctx, &ec2.DescribeVpcsInput{Filters: []types.Filter{flt("is-default", "true")}})
	if err != nil {
		t.Fatal(err)
	}
	if len(vpcs.Vpcs) != 1 || !aws.ToBool(vpcs.Vpcs[0].IsDefault) || aws.ToString(vpcs.Vpcs[0].CidrBlock) != "172.31.0.0/16" {
		t.Fatalf("default VPC: %+v", vpcs.Vpcs)
	}
	vpcID := aws.ToString(vpcs.Vpcs[0].VpcId)
	subnets, err := c.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{Filters: []types.Filter{
		flt("vpc-id", vpcID), flt("default-for-az", "true"), flt("availability-zone", "eu-central-1b")}})
	if err != nil {
		t.Fatal(err)
	}
	if len(subnets.Subnets) != 1 || aws.ToString(subnets.Subnets[0].AvailabilityZone) != "eu-central-1b" || !aws.ToBool(subnets.Subnets[0].MapPublicIpOnLaunch) {
		t.Fatalf("default subnet of 1b: %+v", subnets.Subnets)
	}
	_, err = c.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{SubnetIds: []string{"subnet-00000000000000000"}})
	wantCode(t, err, "InvalidSubnetID.NotFound", 400)
	_, err = c.DescribeVpcs(ctx, &ec2.DescribeVpcsInput{Filters: []types.Filter{flt("no-such-filter", "x")}})
	wantCode(t, err, "InvalidParameterValue", 400)

	// Another region is another world.
	other := ec2.New(ec2.Options{Region: "us-east-1", BaseEndpoint: aws.String(f.url), RetryMaxAttempts: 1, HTTPClient: awsbody.Wrap(nil),
		Credentials: credentials.NewStaticCredentialsProvider(DefaultAccessKeyID, DefaultSecretAccessKey, "")})
	vpcs2, err := other.DescribeVpcs(ctx, &ec2.DescribeVpcsInput{})
	if err != nil {
		t.Fatal(err)
	}
	if len(vpcs2.Vpcs) != 1 || aws.ToString(vpcs2.Vpcs[0].VpcId) == vpcID {
		t.Errorf("us-east-1 VPCs %+v share eu-central-1's %s", vpcs2.Vpcs, vpcID)
	}
}

func TestImages(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	c, ctx := f.ec2(), t.Context()
	out, err := c.DescribeImages(ctx, &ec2.DescribeImagesInput{
		Owners:  []string{"136693071363"},
		Filters: []types.Filter{flt("name", "debian-12-amd64-*"), flt("state", "available")},
	})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, im := range out.Images {
		names = append(names, aws.ToString(im.Name))
		if _, err := time.Parse(time.RFC3339, aws.ToString(im.CreationDate)); err != nil {
			t.Errorf("creation date %q: %v", aws.ToString(im.CreationDate), err)
		}
	}
	slices.Sort(names)
	want := []string{"debian-12-amd64-20250428-2096", "debian-12-amd64-20250610-2140", "debian-12-amd64-20250814-2204"}
	if diff := gocmp.Diff(want, names); diff != "" {
		t.Errorf("images (-want +got):\n%s", diff)
	}
	self, err := c.DescribeImages(ctx, &ec2.DescribeImagesInput{Owners: []string{"self"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(self.Images) != 0 {
		t.Errorf("owner self: %d images, want none", len(self.Images))
	}
	_, err = c.DescribeImages(ctx, &ec2.DescribeImagesInput{ImageIds: []string{"ami-00000000000000000"}})
	wantCode(t, err, "InvalidAMIID.NotFound", 400)
	_, err = c.DescribeImages(ctx, &ec2.DescribeImagesInput{ImageIds: []string{"debian"}})
	wantCode(t, err, "InvalidAMIID.Malformed", 400)
}

func TestAuth(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{Credentials: map[string]Credential{
		"AKIDPLAIN":   {SecretAccessKey: "plain-secret"},
		"ASIATEMPKEY": {SecretAccessKey: "temp-secret", SessionToken: "the-session"},
	}})
	ctx := t.Context()
	call := func(c *ec2.Client) error {
		_, err := c.DescribeAvailabilityZones(ctx, &ec2.DescribeAvailabilityZonesInput{})
		return err
	}
	if err := call(f.client("AKIDPLAIN", "plain-secret", "", 1)); err != nil {
		t.Fatalf("known key: %v", err)
	}
	if err := call(f.client("ASIATEMPKEY", "temp-secret", "the-session", 1)); err != nil {
		t.Fatalf("temporary key with its session token: %v", err)
	}
	wantCode(t, call(f.client("AKIDUNKNOWN", "plain-secret", "", 1)), "AuthFailure", 401)
	wantCode(t, call(f.client("AKIDPLAIN", "wrong-secret", "", 1)), "AuthFailure", 401)
	wantCode(t, call(f.client("ASIATEMPKEY", "temp-secret", "", 1)), "AuthFailure", 401)
	wantCode(t, call(f.client("ASIATEMPKEY", "temp-secret", "other-session", 1)), "AuthFailure", 401)

	// Unsigned, or signed for another service.
	resp, err := http.Post(f.url, "application/x-www-form-urlencoded", strings.NewReader("Action=DescribeVpcs&Version=2016-11-15"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("unsigned request: status %d, want 401", resp.StatusCode)
	}
}

func TestKeyPairs(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	c, ctx := f.ec2(), t.Context()
	key := authorizedKey(t)
	imp, err := c.ImportKeyPair(ctx, &ec2.ImportKeyPairInput{KeyName: aws.String("transit-k"), PublicKeyMaterial: []byte(key),
		TagSpecifications: []types.TagSpecification{tagSpec(types.ResourceTypeKeyPair, "transit-cluster", "k")}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(aws.ToString(imp.KeyPairId), "key-") || aws.ToString(imp.KeyFingerprint) == "" {
		t.Errorf("import: %+v", imp)
	}
	_, err = c.ImportKeyPair(ctx, &ec2.ImportKeyPairInput{KeyName: aws.String("transit-k"), PublicKeyMaterial: []byte(key)})
	wantCode(t, err, "InvalidKeyPair.Duplicate", 400)
	_, err = c.ImportKeyPair(ctx, &ec2.ImportKeyPairInput{KeyName: aws.String("bad"), PublicKeyMaterial: []byte("ssh-ed25519 nonsense")})
	wantCode(t, err, "InvalidKey.Format", 400)

	desc, err := c.DescribeKeyPairs(ctx, &ec2.DescribeKeyPairsInput{KeyNames: []string{"transit-k"}, IncludePublicKey: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(key)
	if len(desc.KeyPairs) != 1 || !strings.HasPrefix(aws.ToString(desc.KeyPairs[0].PublicKey), fields[0]+" "+fields[1]) ||
		desc.KeyPairs[0].KeyType != types.KeyTypeEd25519 || tagMap(desc.KeyPairs[0].Tags)["transit-cluster"] != "k" {
		t.Errorf("describe: %+v", desc.KeyPairs)
	}
	byTag, err := c.DescribeKeyPairs(ctx, &ec2.DescribeKeyPairsInput{Filters: []types.Filter{flt("tag:transit-cluster", "k")}})
	if err != nil || len(byTag.KeyPairs) != 1 {
		t.Errorf("by tag: %v, %+v", err, byTag)
	}
	_, err = c.DescribeKeyPairs(ctx, &ec2.DescribeKeyPairsInput{KeyNames: []string{"missing"}})
	wantCode(t, err, "InvalidKeyPair.NotFound", 400)
	for range 2 {
		if _, err := c.DeleteKeyPair(ctx, &ec2.DeleteKeyPairInput{KeyName: aws.String("transit-k")}); err != nil {
			t.Fatalf("DeleteKeyPair: %v", err)
		}
	}
	if len(f.srv.Resources()) != 0 {
		t.Errorf("left: %+v", f.srv.Resources())
	}
}

func ipPerm(proto string, port int32, cidrs ...string) types.IpPermission {
	p := types.IpPermission{IpProtocol: aws.String(proto)}
	if proto != "-1" {
		p.FromPort, p.ToPort = aws.Int32(port), aws.Int32(port)
	}
	for _, c := range cidrs {
		p.IpRanges = append(p.IpRanges, types.IpRange{CidrIp: aws.String(c)})
	}
	return p
}

func TestSecurityGroups(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{RulesPerGroup: 4})
	c, ctx := f.ec2(), t.Context()
	var ids []string
	for _, name := range []string{"g1", "g2", "g3"} {
		out, err := c.CreateSecurityGroup(ctx, &ec2.CreateSecurityGroupInput{GroupName: aws.String(name), Description: aws.String("test " + name),
			TagSpecifications: []types.TagSpecification{tagSpec(types.ResourceTypeSecurityGroup, "transit-cluster", "c", "name", name)}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, aws.ToString(out.GroupId))
		if tagMap(out.Tags)["name"] != name {
			t.Errorf("create tags: %+v", out.Tags)
		}
	}
	_, err := c.CreateSecurityGroup(ctx, &ec2.CreateSecurityGroupInput{GroupName: aws.String("g1"), Description: aws.String("again")})
	wantCode(t, err, "InvalidGroup.Duplicate", 400)
	_, err = c.CreateSecurityGroup(ctx, &ec2.CreateSecurityGroupInput{GroupName: aws.String("sg-x"), Description: aws.String("d")})
	wantCode(t, err, "InvalidParameterValue", 400)

	// Paging by tag with two groups a page: every group, once.
	f.srv.SetPageSize(2)
	var got []string
	pages := 0
	pg := ec2.NewDescribeSecurityGroupsPaginator(c, &ec2.DescribeSecurityGroupsInput{
		Filters: []types.Filter{flt("tag:transit-cluster", "c")}, MaxResults: aws.Int32(1000)})
	for pg.HasMorePages() {
		out, err := pg.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, g := range out.SecurityGroups {
			got = append(got, aws.ToString(g.GroupId))
		}
	}
	f.srv.SetPageSize(0)
	if diff := gocmp.Diff(ids, got); diff != "" || pages != 2 {
		t.Errorf("paged groups in %d pages (-want +got):\n%s", pages, diff)
	}
	byName, err := c.DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{Filters: []types.Filter{flt("group-name", "g*"), flt("tag:name", "g2")}})
	if err != nil || len(byName.SecurityGroups) != 1 || aws.ToString(byName.SecurityGroups[0].GroupId) != ids[1] {
		t.Fatalf("by name and tag: %v %+v", err, byName)
	}
	_, err = c.DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{GroupIds: []string{"sg-00000000000000000"}})
	wantCode(t, err, "InvalidGroup.NotFound", 400)

	g := ids[0]
	if _, err := c.AuthorizeSecurityGroupIngress(ctx, &ec2.AuthorizeSecurityGroupIngressInput{GroupId: aws.String(g),
		IpPermissions: []types.IpPermission{ipPerm("-1", 0, "192.0.2.10/32", "192.0.2.11/32"), ipPerm("tcp", 22, "0.0.0.0/0")}}); err != nil {
		t.Fatal(err)
	}
	_, err = c.AuthorizeSecurityGroupIngress(ctx, &ec2.AuthorizeSecurityGroupIngressInput{GroupId: aws.String(g),
		IpPermissions: []types.IpPermission{ipPerm("-1", 0, "192.0.2.12/32", "192.0.2.10/32")}})
	wantCode(t, err, "InvalidPermission.Duplicate", 400)
	_, err = c.AuthorizeSecurityGroupIngress(ctx, &ec2.AuthorizeSecurityGroupIngressInput{GroupId: aws.String(g),
		IpPermissions: []types.IpPermission{ipPerm("-1", 0, "192.0.2.12/32", "192.0.2.13/32")}})
	wantCode(t, err, "RulesPerSecurityGroupLimitExceeded", 400)
	_, err = c.AuthorizeSecurityGroupIngress(ctx, &ec2.AuthorizeSecurityGroupIngressInput{GroupId: aws.String(g),
		IpPermissions: []types.IpPermission{ipPerm("-1", 0, "192.0.2.12")}})
	wantCode(t, err, "InvalidParameterValue", 400)
	_, err = c.RevokeSecurityGroupIngress(ctx, &ec2.RevokeSecurityGroupIngressInput{GroupId: aws.String(g),
		IpPermissions: []types.IpPermission{ipPerm("-1", 0, "192.0.2.11/32", "192.0.2.99/32")}})
	wantCode(t, err, "InvalidPermission.NotFound", 400)
	if _, err := c.RevokeSecurityGroupIngress(ctx, &ec2.RevokeSecurityGroupIngressInput{GroupId: aws.String(g),
		IpPermissions: []types.IpPermission{ipPerm("-1", 0, "192.0.2.11/32")}}); err != nil {
		t.Fatal(err)
	}
	desc, err := c.DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{GroupIds: []string{g}})
	if err != nil {
		t.Fatal(err)
	}
	sg := desc.SecurityGroups[0]
	type perm struct {
		Proto    string
		From, To int32
		Cidrs    []string
	}
	var perms []perm
	for _, p := range sg.IpPermissions {
		x := perm{Proto: aws.ToString(p.IpProtocol), From: aws.ToInt32(p.FromPort), To: aws.ToInt32(p.ToPort)}
		for _, r := range p.IpRanges {
			x.Cidrs = append(x.Cidrs, aws.ToString(r.CidrIp))
		}
		perms = append(perms, x)
	}
	want := []perm{{Proto: "-1", Cidrs: []string{"192.0.2.10/32"}}, {Proto: "tcp", From: 22, To: 22, Cidrs: []string{"0.0.0.0/0"}}}
	if diff := gocmp.Diff(want, perms); diff != "" {
		t.Errorf("rules (-want +got):\n%s", diff)
	}
	if len(sg.IpPermissionsEgress) != 1 || aws.ToString(sg.VpcId) == "" || aws.ToString(sg.GroupName) != "g1" {
		t.Errorf("group %+v", sg)
	}

	// A group in use cannot go; once its instance is terminated it can.
	in := f.run(&ec2.RunInstancesInput{SecurityGroupIds: []string{g}})
	_, err = c.DeleteSecurityGroup(ctx, &ec2.DeleteSecurityGroupInput{GroupId: aws.String(g)})
	wantCode(t, err, "DependencyViolation", 400)
	if _, err := c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{aws.ToString(in.InstanceId)}}); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if _, err := c.DeleteSecurityGroup(ctx, &ec2.DeleteSecurityGroupInput{GroupId: aws.String(id)}); err != nil {
			t.Fatalf("DeleteSecurityGroup(%s): %v", id, err)
		}
	}
	_, err = c.DeleteSecurityGroup(ctx, &ec2.DeleteSecurityGroupInput{GroupId: aws.String(g)})
	wantCode(t, err, "InvalidGroup.NotFound", 400)
	def, err := c.DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{Filters: []types.Filter{flt("group-name", "default")}})
	if err != nil || len(def.SecurityGroups) != 1 {
		t.Fatalf("default group: %v %+v", err, def)
	}
	_, err = c.DeleteSecurityGroup(ctx, &ec2.DeleteSecurityGroupInput{GroupId: def.SecurityGroups[0].GroupId})
	wantCode(t, err, "CannotDelete", 400)
	if left := f.srv.Resources(); len(left) != 0 {
		t.Errorf("left: %+v", left)
	}
}

// TestInstanceLifecycle: pending for the launch latency, running with
// addresses and a console, shutting-down for the termination latency,
// then terminated and visible so for TerminatedVisible. The emulator's
// clock is held, and advanced past each latency when its state must end,
// so no state depends on how fast a loaded machine runs the steps.
func TestInstanceLifecycle(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{TerminatedVisible: 400 * time.Millisecond})
	clock := cloudsim.Hold(f.sim)
	f.srv.SetLatency(cloudsim.Latency{Launch: 300 * time.Millisecond, Terminate: 300 * time.Millisecond})
	c, ctx := f.ec2(), t.Context()
	key := authorizedKey(t)
	if _, err := c.ImportKeyPair(ctx, &ec2.ImportKeyPairInput{KeyName: aws.String("k"), PublicKeyMaterial: []byte(key)}); err != nil {
		t.Fatal(err)
	}
	userData := base64.StdEncoding.EncodeToString([]byte("#cloud-config\ndisable_root: false\n"))
	in := f.run(&ec2.RunInstancesInput{KeyName: aws.String("k"), UserData: aws.String(userData),
		Placement:         &types.Placement{AvailabilityZone: aws.String("eu-central-1c")},
		TagSpecifications: []types.TagSpecification{tagSpec(types.ResourceTypeInstance, "transit-cluster", "c", "team", "x"), tagSpec(types.ResourceTypeVolume, "v", "1")}})
	id := aws.ToString(in.InstanceId)
	if in.State.Name != types.InstanceStateNamePending || aws.ToString(in.Placement.AvailabilityZone) != "eu-central-1c" {
		t.Errorf("launched %s in %s, want pending in eu-central-1c", in.State.Name, aws.ToString(in.Placement.AvailabilityZone))
	}
	if diff := gocmp.Diff(map[string]string{"transit-cluster": "c", "team": "x"}, tagMap(in.Tags)); diff != "" {
		t.Errorf("tags (-want +got):\n%s", diff)
	}
	out, err := c.GetConsoleOutput(ctx, &ec2.GetConsoleOutputInput{InstanceId: aws.String(id)})
	if err != nil || aws.ToString(out.Output) != "" {
		t.Errorf("console of a pending instance: %v %q", err, aws.ToString(out.Output))
	}

	if st := f.describe(id).State.Name; st != types.InstanceStateNamePending {
		t.Errorf("before the launch latency passed: %s, want pending", st)
	}

	clock.Advance(300 * time.Millisecond)
	run := f.describe(id)
	if run.State.Name != types.InstanceStateNameRunning {
		t.Fatalf("once the launch latency passed: %s, want running", run.State.Name)
	}
	if !strings.HasPrefix(aws.ToString(run.PrivateIpAddress), "172.31.32.") || !strings.HasPrefix(aws.ToString(run.PublicIpAddress), "198.1") ||
		run.LaunchTime == nil || aws.ToString(run.KeyName) != "k" {
		t.Errorf("running instance %+v", run)
	}
	// EC2 posts the console minutes after the boot: only Latest shows it.
	out, err = c.GetConsoleOutput(ctx, &ec2.GetConsoleOutputInput{InstanceId: aws.String(id)})
	if err != nil || out.Output != nil {
		t.Errorf("console of a new running instance without Latest: %v %q", err, aws.ToString(out.Output))
	}
	out, err = c.GetConsoleOutput(ctx, &ec2.GetConsoleOutputInput{InstanceId: aws.String(id), Latest: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	console, err := base64.StdEncoding.DecodeString(aws.ToString(out.Output))
	if err != nil {
		t.Fatal(err)
	}
	_, block, _ := strings.Cut(string(console), "-----BEGIN SSH HOST KEY KEYS-----\r\n")
	block, _, ok := strings.Cut(block, "-----END SSH HOST KEY KEYS-----")
	if !ok || !strings.HasPrefix(block, "ssh-ed25519 AAAA") {
		t.Errorf("console output without the host key block:\n%s", console)
	}

	term, err := c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}})
	if err != nil {
		t.Fatal(err)
	}
	if st := term.TerminatingInstances[0]; st.CurrentState.Name != types.InstanceStateNameShuttingDown || st.PreviousState.Name != types.InstanceStateNameRunning {
		t.Errorf("terminate: %s -> %s", st.PreviousState.Name, st.CurrentState.Name)
	}
	if st := f.describe(id).State.Name; st != types.InstanceStateNameShuttingDown {
		t.Errorf("before the termination latency passed: %s, want shutting-down", st)
	}
	clock.Advance(300 * time.Millisecond)
	ended := f.describe(id)
	if ended.State.Name != types.InstanceStateNameTerminated {
		t.Fatalf("once the termination latency passed: %s, want terminated", ended.State.Name)
	}
	if ended.PublicIpAddress != nil || ended.StateReason == nil {
		t.Errorf("terminated instance keeps its address or has no reason: %+v", ended)
	}
	// Terminating again is fine and says terminated.
	term, err = c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}})
	if err != nil || term.TerminatingInstances[0].CurrentState.Name != types.InstanceStateNameTerminated {
		t.Fatalf("terminate again: %v %+v", err, term)
	}
	if len(f.srv.Resources()) != 1 { // the key pair
		t.Errorf("resources: %+v", f.srv.Resources())
	}
	// Once TerminatedVisible passed, it is gone.
	clock.Advance(400 * time.Millisecond)
	_, err = c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	wantCode(t, err, "InvalidInstanceID.NotFound", 400)
	_, err = c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}})
	wantCode(t, err, "InvalidInstanceID.NotFound", 400)
	_, err = c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{"not-an-id"}})
	wantCode(t, err, "InvalidInstanceID.Malformed", 400)
}

func TestRunInstancesValidation(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	c, ctx := f.ec2(), t.Context()
	base := func() *ec2.RunInstancesInput {
		return &ec2.RunInstancesInput{ImageId: aws.String(DefaultImages()[0].ID), InstanceType: types.InstanceTypeT3Micro,
			MinCount: aws.Int32(1), MaxCount: aws.Int32(1)}
	}
	for _, tc := range []struct {
		name   string
		modify func(*ec2.RunInstancesInput)
		code   string
	}{
		{"unknown image", func(in *ec2.RunInstancesInput) { in.ImageId = aws.String("ami-00000000000000000") }, "InvalidAMIID.NotFound"},
		{"bad type", func(in *ec2.RunInstancesInput) { in.InstanceType = "huge" }, "InvalidParameterValue"},
		{"unknown key", func(in *ec2.RunInstancesInput) { in.KeyName = aws.String("nokey") }, "InvalidKeyPair.NotFound"},
		{"unknown group", func(in *ec2.RunInstancesInput) { in.SecurityGroupIds = []string{"sg-00000000000000000"} }, "InvalidGroup.NotFound"},
		{"unknown subnet", func(in *ec2.RunInstancesInput) { in.SubnetId = aws.String("subnet-00000000000000000") }, "InvalidSubnetID.NotFound"},
		{"unknown zone", func(in *ec2.RunInstancesInput) {
			in.Placement = &types.Placement{AvailabilityZone: aws.String("eu-central-1z")}
		}, "InvalidParameterValue"},
		{"aws tag", func(in *ec2.RunInstancesInput) {
			in.TagSpecifications = []types.TagSpecification{tagSpec(types.ResourceTypeInstance, "aws:x", "1")}
		}, "InvalidParameterValue"},
		{"interface and subnet", func(in *ec2.RunInstancesInput) {
			in.SubnetId = aws.String("subnet-00000000000000000")
			in.NetworkInterfaces = []types.InstanceNetworkInterfaceSpecification{{DeviceIndex: aws.Int32(0)}}
		}, "InvalidParameterCombination"},
	} {
		in := base()
		tc.modify(in)
		_, err := c.RunInstances(ctx, in)
		if err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		if code, _ := apiErr(t, err); code != tc.code {
			t.Errorf("%s: %s, want %s: %v", tc.name, code, tc.code, err)
		}
	}
	// A network interface with a public address in a chosen subnet.
	subnets, err := c.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{Filters: []types.Filter{flt("availability-zone", "eu-central-1b")}})
	if err != nil {
		t.Fatal(err)
	}
	in := base()
	in.NetworkInterfaces = []types.InstanceNetworkInterfaceSpecification{{DeviceIndex: aws.Int32(0),
		SubnetId: subnets.Subnets[0].SubnetId, AssociatePublicIpAddress: aws.Bool(false)}}
	got := f.run(in)
	if aws.ToString(got.Placement.AvailabilityZone) != "eu-central-1b" || got.PublicIpAddress != nil || got.PrivateIpAddress == nil {
		t.Errorf("instance through a network interface: %+v", got)
	}
}

func TestClientToken(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	c, ctx := f.ec2(), t.Context()
	in := func(zone string) *ec2.RunInstancesInput {
		return &ec2.RunInstancesInput{ImageId: aws.String(DefaultImages()[0].ID), InstanceType: types.InstanceTypeT3Micro,
			MinCount: aws.Int32(1), MaxCount: aws.Int32(1), ClientToken: aws.String("token-1"),
			Placement: &types.Placement{AvailabilityZone: aws.String(zone)}}
	}
	a, err := c.RunInstances(ctx, in("eu-central-1a"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.RunInstances(ctx, in("eu-central-1a"))
	if err != nil {
		t.Fatal(err)
	}
	if aws.ToString(a.Instances[0].InstanceId) != aws.ToString(b.Instances[0].InstanceId) || aws.ToString(a.ReservationId) != aws.ToString(b.ReservationId) {
		t.Errorf("same token, two instances: %s, %s", aws.ToString(a.Instances[0].InstanceId), aws.ToString(b.Instances[0].InstanceId))
	}
	_, err = c.RunInstances(ctx, in("eu-central-1b"))
	wantCode(t, err, "IdempotentParameterMismatch", 400)
	byToken, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []types.Filter{flt("client-token", "token-1")}})
	if err != nil || len(byToken.Reservations) != 1 {
		t.Fatalf("by client token: %v %+v", err, byToken)
	}

	// A lost answer: the SDK retries with its own token, and one
	// instance exists.
	f.sim.Faults.Add(cloudsim.Fault{Op: cloudsim.OpLaunch, Kind: cloudsim.FaultLost})
	retrying := f.client(DefaultAccessKeyID, DefaultSecretAccessKey, "", 3)
	out, err := retrying.RunInstances(ctx, &ec2.RunInstancesInput{ImageId: aws.String(DefaultImages()[0].ID), InstanceType: types.InstanceTypeT3Micro,
		MinCount: aws.Int32(1), MaxCount: aws.Int32(1), TagSpecifications: []types.TagSpecification{tagSpec(types.ResourceTypeInstance, "n", "lost")}})
	if err != nil {
		t.Fatalf("RunInstances after a lost answer: %v", err)
	}
	if f.sim.Faults.Hits(cloudsim.FaultLost) != 1 {
		t.Fatal("the lost fault did not hit")
	}
	all, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []types.Filter{flt("tag:n", "lost")}})
	if err != nil {
		t.Fatal(err)
	}
	if len(all.Reservations) != 1 || aws.ToString(all.Reservations[0].Instances[0].InstanceId) != aws.ToString(out.Instances[0].InstanceId) {
		t.Errorf("after a lost answer: %+v", all.Reservations)
	}
}

func TestDescribeInstancesPaging(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	c, ctx := f.ec2(), t.Context()
	var want []string
	for i := range 7 {
		cluster := "a"
		if i%3 == 2 {
			cluster = "b"
		}
		in := f.run(&ec2.RunInstancesInput{TagSpecifications: []types.TagSpecification{tagSpec(types.ResourceTypeInstance, "transit-cluster", cluster)}})
		if cluster == "a" {
			want = append(want, aws.ToString(in.InstanceId))
		}
	}
	_, err := c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: want[:1]})
	if err != nil {
		t.Fatal(err)
	}
	want = want[1:]
	f.srv.SetPageSize(2)
	var got []string
	pages := 0
	pg := ec2.NewDescribeInstancesPaginator(c, &ec2.DescribeInstancesInput{MaxResults: aws.Int32(1000), Filters: []types.Filter{
		flt("tag:transit-cluster", "a"), flt("instance-state-name", "pending", "running")}})
	for pg.HasMorePages() {
		out, err := pg.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, r := range out.Reservations {
			for _, in := range r.Instances {
				got = append(got, aws.ToString(in.InstanceId))
			}
		}
	}
	if diff := gocmp.Diff(want, got); diff != "" || pages != 2 {
		t.Errorf("%d pages (-want +got):\n%s", pages, diff)
	}
	_, err = c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{MaxResults: aws.Int32(2)})
	wantCode(t, err, "InvalidParameterValue", 400)
	_, err = c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{NextToken: aws.String("garbage")})
	wantCode(t, err, "InvalidPaginationToken", 400)
	_, err = c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: want[:1], MaxResults: aws.Int32(5)})
	wantCode(t, err, "InvalidParameterCombination", 400)
	_, err = c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []types.Filter{flt("instance-state", "running")}})
	wantCode(t, err, "InvalidParameterValue", 400)
}

func TestFaults(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	c, ctx := f.ec2(), t.Context()
	list := func() error {
		_, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{})
		return err
	}
	launch := func() error {
		_, err := c.RunInstances(ctx, &ec2.RunInstancesInput{ImageId: aws.String(DefaultImages()[0].ID),
			InstanceType: types.InstanceTypeT3Micro, MinCount: aws.Int32(1), MaxCount: aws.Int32(1)})
		return err
	}
	for _, tc := range []struct {
		fault  cloudsim.Fault
		call   func() error
		code   string
		status int
		msg    string
	}{
		{cloudsim.Fault{Op: cloudsim.OpList, Kind: cloudsim.FaultThrottle}, list, "RequestLimitExceeded", 503, "Request limit exceeded."},
		{cloudsim.Fault{Op: cloudsim.OpLaunch, Kind: cloudsim.FaultQuota}, launch, "InstanceLimitExceeded", 400, ""},
		{cloudsim.Fault{Op: cloudsim.OpLaunch, Kind: cloudsim.FaultQuota, Quota: "VcpuLimitExceeded"}, launch, "VcpuLimitExceeded", 400, "vCPU"},
		{cloudsim.Fault{Op: cloudsim.OpLaunch, Kind: cloudsim.FaultQuota, Quota: "standard-vcpus"}, launch, "InstanceLimitExceeded", 400, "standard-vcpus"},
		{cloudsim.Fault{Op: cloudsim.OpList, Kind: cloudsim.FaultServer}, list, "InternalError", 500, ""},
		{cloudsim.Fault{Op: cloudsim.OpList, Kind: cloudsim.FaultAuth}, list, "AuthFailure", 401, ""},
		{cloudsim.Fault{Op: cloudsim.OpAuth, Kind: cloudsim.FaultAuth}, launch, "AuthFailure", 401, ""},
		{cloudsim.Fault{Op: cloudsim.OpAny, Kind: cloudsim.FaultThrottle}, launch, "RequestLimitExceeded", 503, ""},
	} {
		f.sim.Faults.Add(tc.fault)
		err := tc.call()
		wantCode(t, err, tc.code, tc.status)
		if !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%+v: message %q lacks %q", tc.fault, err, tc.msg)
		}
		if err := tc.call(); err != nil {
			t.Errorf("%+v hit twice: %v", tc.fault, err)
		}
	}
	// A lost answer did the work.
	f.sim.Faults.Add(cloudsim.Fault{Op: cloudsim.OpLaunch, Kind: cloudsim.FaultLost})
	before := len(f.srv.Resources())
	wantCode(t, launch(), "InternalError", 500)
	if got := len(f.srv.Resources()); got != before+1 {
		t.Errorf("after a lost launch %d resources, want %d", got, before+1)
	}
	// A server fault did not.
	f.sim.Faults.Add(cloudsim.Fault{Op: cloudsim.OpLaunch, Kind: cloudsim.FaultServer})
	wantCode(t, launch(), "InternalError", 500)
	if got := len(f.srv.Resources()); got != before+1 {
		t.Errorf("after a failed launch %d resources, want %d", got, before+1)
	}
	f.sim.Faults.Add(cloudsim.Fault{Op: cloudsim.OpList, Kind: cloudsim.FaultSlow, Delay: 200 * time.Millisecond})
	start := time.Now()
	if err := list(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("slow fault answered after %s", d)
	}
	// Throttled until cleared: the SDK's retries give up with the code.
	f.sim.Faults.Add(cloudsim.Fault{Op: cloudsim.OpList, Kind: cloudsim.FaultThrottle, Times: -1})
	wantCode(t, list(), "RequestLimitExceeded", 503)
	wantCode(t, list(), "RequestLimitExceeded", 503)
	f.sim.Faults.Clear()
	if err := list(); err != nil {
		t.Fatal(err)
	}
	_, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{DryRun: aws.Bool(true)})
	wantCode(t, err, "DryRunOperation", 412)
}

func TestVcpuLimit(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{VCPULimit: 5})
	c, ctx := f.ec2(), t.Context()
	out, err := c.RunInstances(ctx, &ec2.RunInstancesInput{ImageId: aws.String(DefaultImages()[0].ID),
		InstanceType: types.InstanceTypeT3Micro, MinCount: aws.Int32(1), MaxCount: aws.Int32(5)})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Instances) != 2 {
		t.Errorf("MaxCount 5 of 2 vCPUs under a limit of 5: %d instances, want 2", len(out.Instances))
	}
	_, err = c.RunInstances(ctx, &ec2.RunInstancesInput{ImageId: aws.String(DefaultImages()[0].ID),
		InstanceType: types.InstanceTypeT3Micro, MinCount: aws.Int32(1), MaxCount: aws.Int32(1)})
	wantCode(t, err, "VcpuLimitExceeded", 400)
	if _, err := c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{aws.ToString(out.Instances[0].InstanceId)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RunInstances(ctx, &ec2.RunInstancesInput{ImageId: aws.String(DefaultImages()[0].ID),
		InstanceType: types.InstanceTypeT3Micro, MinCount: aws.Int32(1), MaxCount: aws.Int32(1)}); err != nil {
		t.Errorf("after a termination freed vCPUs: %v", err)
	}
}

func TestPlantAndTags(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	c, ctx := f.ec2(), t.Context()
	id, err := f.srv.Plant(ctx, testRegion, map[string]string{"transit-cluster": "c", "aws:autoscaling:groupName": "asg"})
	if err != nil {
		t.Fatal(err)
	}
	got := f.describe(id)
	if diff := gocmp.Diff(map[string]string{"transit-cluster": "c", "aws:autoscaling:groupName": "asg"}, tagMap(got.Tags)); diff != "" {
		t.Errorf("planted tags (-want +got):\n%s", diff)
	}
	if _, err := c.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{id}, Tags: []types.Tag{{Key: aws.String("k"), Value: aws.String("v")}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeleteTags(ctx, &ec2.DeleteTagsInput{Resources: []string{id}, Tags: []types.Tag{{Key: aws.String("transit-cluster")}}}); err != nil {
		t.Fatal(err)
	}
	if diff := gocmp.Diff(map[string]string{"k": "v", "aws:autoscaling:groupName": "asg"}, tagMap(f.describe(id).Tags)); diff != "" {
		t.Errorf("tags after CreateTags and DeleteTags (-want +got):\n%s", diff)
	}
	_, err = c.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{"i-00000000000000000"}, Tags: []types.Tag{{Key: aws.String("k"), Value: aws.String("v")}}})
	wantCode(t, err, "InvalidInstanceID.NotFound", 400)
	res := f.srv.Resources()
	if len(res) != 1 || res[0].Kind != "instance" || res[0].ID != id || res[0].Region != testRegion {
		t.Errorf("resources: %+v", res)
	}
}

// fakeBacker records what the emulator asks of a Backer; its Start
// blocks until released, so a test sees the instance pending meanwhile.
type fakeBacker struct {
	mu       sync.Mutex
	release  chan struct{}
	stopGate chan struct{} // if set, Stop waits for it
	fail     bool
	starts   []string // region name key
	stops    []string
	powers   []string            // "off region id release", "on region id"
	allowed  map[string][]string // region → its rules (Rule.String)
	nextAddr string              // PowerOn's address (default 10.241.1.8)
}

func (b *fakeBacker) PowerOff(_ context.Context, region, id string, release bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.powers = append(b.powers, fmt.Sprintf("off %s %s %v", region, id, release))
	return nil
}

func (b *fakeBacker) PowerOn(_ context.Context, region, id string) (cloudsim.Machine, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.powers = append(b.powers, "on "+region+" "+id)
	if b.fail {
		return cloudsim.Machine{}, errors.New("no room")
	}
	addr := cmp.Or(b.nextAddr, "10.241.1.8")
	return cloudsim.Machine{ID: id, Address: addr, PrivateAddress: "10.241.1.7"}, nil
}

func (b *fakeBacker) Start(ctx context.Context, region, name, key string) (cloudsim.Machine, error) {
	select {
	case <-b.release:
	case <-ctx.Done():
		return cloudsim.Machine{}, ctx.Err()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.starts = append(b.starts, region+" "+name+" "+key)
	if b.fail {
		return cloudsim.Machine{}, errors.New("no room")
	}
	return cloudsim.Machine{ID: "m-" + name, Address: "10.241.1.7", HostKeys: []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBackedHostKeyBackedHostKeyBackedHostKey"}}, nil
}

func (b *fakeBacker) Stop(ctx context.Context, region, id string) error {
	if b.stopGate != nil {
		select {
		case <-b.stopGate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stops = append(b.stops, region+" "+id)
	return nil
}

func (b *fakeBacker) Allow(_ context.Context, region string, rules []cloudsim.Rule) error {
	var got []string
	for _, r := range rules {
		got = append(got, r.String())
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.allowed == nil {
		b.allowed = map[string][]string{}
	}
	b.allowed[region] = got
	return nil
}

// allowedIn is what the last Allow of region passed, as Rule.String
// shows each rule.
func (b *fakeBacker) allowedIn(region string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.allowed[region]
}

func TestBacked(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	b := &fakeBacker{release: make(chan struct{})}
	f.sim.Backer = b
	c, ctx := f.ec2(), t.Context()
	key := authorizedKey(t)
	if _, err := c.ImportKeyPair(ctx, &ec2.ImportKeyPairInput{KeyName: aws.String("k"), PublicKeyMaterial: []byte(key)}); err != nil {
		t.Fatal(err)
	}
	var groups []string
	for i, srcs := range [][]string{{"192.0.2.1/32", "0.0.0.0/0"}, {"192.0.2.2/32", "192.0.2.1/32"}} {
		g, err := c.CreateSecurityGroup(ctx, &ec2.CreateSecurityGroupInput{GroupName: aws.String("g" + string(rune('0'+i))), Description: aws.String("d")})
		if err != nil {
			t.Fatal(err)
		}
		groups = append(groups, aws.ToString(g.GroupId))
		if _, err := c.AuthorizeSecurityGroupIngress(ctx, &ec2.AuthorizeSecurityGroupIngressInput{GroupId: g.GroupId,
			IpPermissions: []types.IpPermission{ipPerm("-1", 0, srcs...)}}); err != nil {
			t.Fatal(err)
		}
	}
	if diff := gocmp.Diff([]string{"all from 0.0.0.0/0", "all from 192.0.2.1/32", "all from 192.0.2.2/32"}, b.allowedIn("aws:"+testRegion)); diff != "" {
		t.Errorf("allowed rules (-want +got):\n%s", diff)
	}
	if _, err := c.DeleteSecurityGroup(ctx, &ec2.DeleteSecurityGroupInput{GroupId: aws.String(groups[1])}); err != nil {
		t.Fatal(err)
	}
	if diff := gocmp.Diff([]string{"all from 0.0.0.0/0", "all from 192.0.2.1/32"}, b.allowedIn("aws:"+testRegion)); diff != "" {
		t.Errorf("allowed rules after a delete (-want +got):\n%s", diff)
	}

	in := f.run(&ec2.RunInstancesInput{KeyName: aws.String("k")})
	id := aws.ToString(in.InstanceId)
	if st := f.describe(id).State.Name; st != types.InstanceStateNamePending {
		t.Errorf("before the machine is up: %s", st)
	}
	close(b.release)
	deadline := time.Now().Add(10 * time.Second)
	for f.describe(id).State.Name != types.InstanceStateNameRunning {
		if time.Now().After(deadline) {
			t.Fatal("backed instance never ran")
		}
		time.Sleep(10 * time.Millisecond)
	}
	got := f.describe(id)
	if aws.ToString(got.PublicIpAddress) != "10.241.1.7" || aws.ToString(got.PrivateIpAddress) != "10.241.1.7" {
		t.Errorf("addresses %s/%s, want the machine's", aws.ToString(got.PublicIpAddress), aws.ToString(got.PrivateIpAddress))
	}
	fields := strings.Fields(key)
	b.mu.Lock()
	if diff := gocmp.Diff([]string{"aws:" + testRegion + " " + id + " " + fields[0] + " " + fields[1]}, b.starts); diff != "" {
		t.Errorf("starts (-want +got):\n%s", diff)
	}
	b.mu.Unlock()
	out, err := c.GetConsoleOutput(ctx, &ec2.GetConsoleOutputInput{InstanceId: aws.String(id), Latest: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	console, _ := base64.StdEncoding.DecodeString(aws.ToString(out.Output))
	if !strings.Contains(string(console), "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBackedHostKey") {
		t.Errorf("console lacks the machine's host key:\n%s", console)
	}
	if _, err := c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}}); err != nil {
		t.Fatal(err)
	}
	f.srv.Close() // waits for the background Stop
	b.mu.Lock()
	if diff := gocmp.Diff([]string{"aws:" + testRegion + " m-" + id}, b.stops); diff != "" {
		t.Errorf("stops (-want +got):\n%s", diff)
	}
	b.mu.Unlock()
}

// A backed instance is terminated only once its machine is gone, however
// short the latency: a machine the API calls terminated must not answer.
// TestBackedRules: the backer is handed every IPv4 ingress rule of the
// region's groups, as the firewall enforces it: all traffic, tcp and udp
// with their ports (also named by number), icmp without; a rule two
// groups hold once; IPv6 rules left out (the backing is IPv4). A revoked
// rule goes.
func TestBackedRules(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	b := &fakeBacker{release: make(chan struct{})}
	f.sim.Backer = b
	c, ctx := f.ec2(), t.Context()
	portRange := types.IpPermission{IpProtocol: aws.String("tcp"), FromPort: aws.Int32(30000), ToPort: aws.Int32(32767),
		IpRanges: []types.IpRange{{CidrIp: aws.String("10.0.0.0/8")}}}
	v6 := types.IpPermission{IpProtocol: aws.String("tcp"), FromPort: aws.Int32(22), ToPort: aws.Int32(22),
		Ipv6Ranges: []types.Ipv6Range{{CidrIpv6: aws.String("::/0")}}}
	icmp := types.IpPermission{IpProtocol: aws.String("1"), FromPort: aws.Int32(-1), ToPort: aws.Int32(-1),
		IpRanges: []types.IpRange{{CidrIp: aws.String("198.51.100.0/24")}}}
	var groups []*string
	for i, perms := range [][]types.IpPermission{
		{ipPerm("-1", 0, "192.0.2.1/32"), ipPerm("tcp", 22, "0.0.0.0/0"), ipPerm("17", 51820, "0.0.0.0/0"), portRange, v6},
		{ipPerm("tcp", 22, "0.0.0.0/0"), icmp},
	} {
		g, err := c.CreateSecurityGroup(ctx, &ec2.CreateSecurityGroupInput{GroupName: aws.String(fmt.Sprint("rules", i)), Description: aws.String("d")})
		if err != nil {
			t.Fatal(err)
		}
		groups = append(groups, g.GroupId)
		if _, err := c.AuthorizeSecurityGroupIngress(ctx, &ec2.AuthorizeSecurityGroupIngressInput{GroupId: g.GroupId, IpPermissions: perms}); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"tcp 22 from 0.0.0.0/0", "udp 51820 from 0.0.0.0/0", "tcp 30000-32767 from 10.0.0.0/8",
		"all from 192.0.2.1/32", "icmp from 198.51.100.0/24"}
	if diff := gocmp.Diff(want, b.allowedIn("aws:"+testRegion)); diff != "" {
		t.Errorf("allowed rules (-want +got):\n%s", diff)
	}
	if _, err := c.RevokeSecurityGroupIngress(ctx, &ec2.RevokeSecurityGroupIngressInput{GroupId: groups[0],
		IpPermissions: []types.IpPermission{portRange}}); err != nil {
		t.Fatal(err)
	}
	want = slices.DeleteFunc(want, func(r string) bool { return strings.HasPrefix(r, "tcp 30000") })
	if diff := gocmp.Diff(want, b.allowedIn("aws:"+testRegion)); diff != "" {
		t.Errorf("allowed rules after a revoke (-want +got):\n%s", diff)
	}
}

func TestBackedTerminatedOnlyWhenTheMachineIsGone(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	b := &fakeBacker{release: make(chan struct{}), stopGate: make(chan struct{})}
	close(b.release)
	f.sim.Backer = b
	c, ctx := f.ec2(), t.Context()
	key := authorizedKey(t)
	if _, err := c.ImportKeyPair(ctx, &ec2.ImportKeyPairInput{KeyName: aws.String("k"), PublicKeyMaterial: []byte(key)}); err != nil {
		t.Fatal(err)
	}
	id := aws.ToString(f.run(&ec2.RunInstancesInput{KeyName: aws.String("k")}).InstanceId)
	deadline := time.Now().Add(10 * time.Second)
	for f.describe(id).State.Name != types.InstanceStateNameRunning {
		if time.Now().After(deadline) {
			t.Fatal("backed instance never ran")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if st := f.describe(id).State.Name; st != types.InstanceStateNameShuttingDown {
		t.Errorf("while the machine is still being stopped: %s, want shutting-down", st)
	}
	close(b.stopGate)
	deadline = time.Now().Add(10 * time.Second)
	for f.describe(id).State.Name != types.InstanceStateNameTerminated {
		if time.Now().After(deadline) {
			t.Fatal("never terminated after the machine stopped")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestBackedStartFails(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	b := &fakeBacker{release: make(chan struct{}), fail: true}
	close(b.release)
	f.sim.Backer = b
	id := aws.ToString(f.run(&ec2.RunInstancesInput{}).InstanceId)
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := f.describe(id)
		if got.State.Name == types.InstanceStateNameTerminated {
			if got.StateReason == nil || aws.ToString(got.StateReason.Code) != "Server.InternalError" {
				t.Errorf("state reason %+v", got.StateReason)
			}
			return
		}
		if got.State.Name != types.InstanceStateNamePending || time.Now().After(deadline) {
			t.Fatalf("instance whose machine failed is %s", got.State.Name)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestWildcard(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		p, s string
		want bool
	}{
		{"debian-12-amd64-*", "debian-12-amd64-20250428-2096", true},
		{"debian-12-amd64-*", "debian-12-arm64-20250428-2096", false},
		{"*", "", true},
		{"a?c", "abc", true},
		{"a?c", "ac", false},
		{`a\*c`, "a*c", true},
		{`a\*c`, "abc", false},
		{"*b*", "aaabccc", true},
		{"exact", "exact", true},
		{"exact", "exactly", false},
	} {
		if got := wildcard(tc.p, tc.s); got != tc.want {
			t.Errorf("wildcard(%q, %q) = %v, want %v", tc.p, tc.s, got, tc.want)
		}
	}
}

// TestVisibilityLag: a new instance is not found, by id or by filter,
// until VisibilityLag has passed. The emulator's clock is held, so the lag
// lasts however slowly the steps run, and advanced past it.
func TestVisibilityLag(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{VisibilityLag: 300 * time.Millisecond})
	clock := cloudsim.Hold(f.sim)
	c, ctx := f.ec2(), t.Context()
	id := aws.ToString(f.run(&ec2.RunInstancesInput{TagSpecifications: []types.TagSpecification{tagSpec(types.ResourceTypeInstance, "k", "v")}}).InstanceId)
	_, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	wantCode(t, err, "InvalidInstanceID.NotFound", 400)
	_, err = c.GetConsoleOutput(ctx, &ec2.GetConsoleOutputInput{InstanceId: aws.String(id)})
	wantCode(t, err, "InvalidInstanceID.NotFound", 400)
	out, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []types.Filter{flt("tag:k", "v")}})
	if err != nil || len(out.Reservations) != 0 {
		t.Errorf("a new instance is listed at once: %v %+v", err, out.Reservations)
	}
	clock.Advance(300 * time.Millisecond)
	if got := f.describe(id); aws.ToString(got.InstanceId) != id {
		t.Errorf("after the lag: %+v", got)
	}
}
