package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cloudtransit/transit/awsbody"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// ec2Client reaches the emulated EC2 as an operator would, with the SDK.
func (env *clouds) ec2Client(region string) *ec2.Client {
	return ec2.New(ec2.Options{Region: region, BaseEndpoint: sdk.String(env.emu.AWSURL), HTTPClient: awsbody.Wrap(nil),
		Credentials: credentials.NewStaticCredentialsProvider(awsKeyID, awsSecret, "")})
}

// awsGroup is the district's security group as EC2 reports it.
func awsGroup(ctx context.Context, t *testing.T, c *ec2.Client, name string) types.SecurityGroup {
	t.Helper()
	out, err := c.DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{
		Filters: []types.Filter{{Name: sdk.String("group-name"), Values: []string{name}}}})
	if err != nil || len(out.SecurityGroups) != 1 {
		t.Fatalf("security group %s: %v (%d found)", name, err, len(out.SecurityGroups))
	}
	return out.SecurityGroups[0]
}

// ingressOf lists a group's ingress as "proto from-to cidr" lines.
func ingressOf(g types.SecurityGroup) []string {
	var out []string
	for _, p := range g.IpPermissions {
		for _, r := range p.IpRanges {
			out = append(out, fmt.Sprintf("%s %d-%d %s", sdk.ToString(p.IpProtocol), sdk.ToInt32(p.FromPort), sdk.ToInt32(p.ToPort), sdk.ToString(r.CidrIp)))
		}
	}
	slices.Sort(out)
	return out
}

// testAcrossFirewall: on the mesh a district's group lets in the mesh's
// port, SSH and the API, whatever the cluster's size, and no node
// address: a node of another cloud reaches a node's public address on a
// node port only once the operator opens it, and the operator's rule
// survives applies; destroy takes transit's rules and leaves the
// operator's group to the operator.
func testAcrossFirewall(env *clouds) func(t *testing.T, c *cluster) {
	return func(t *testing.T, c *cluster) {
		ctx := context.Background()
		ec := env.ec2Client("us-east-1")
		name := provider.GroupName(c.cfg.ID, "aws-us")
		for _, r := range ingressOf(awsGroup(ctx, t, ec, name)) {
			if strings.HasSuffix(r, "/32") {
				t.Errorf("group %s lets in a node's address on the mesh: %s", name, r)
			}
		}
		if got := ingressOf(awsGroup(ctx, t, ec, name)); !slices.Contains(got, "udp 51820-51820 0.0.0.0/0") {
			t.Errorf("group %s: %v, want the mesh's port from anywhere", name, got)
		}

		k := c.kube()
		svc, err := k.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		res := c.status()
		var worker, from districts.Node
		for _, n := range res.Nodes {
			switch {
			case n.District == "aws-us" && n.Role == districts.RoleWorker:
				worker = n
			case n.District == "gce-eu":
				from = n
			}
		}
		url := fmt.Sprintf("http://%s:%d/", worker.PublicIP, svc.Spec.Ports[0].NodePort)
		fetch := func(ctx context.Context) error {
			out, err := c.on(ctx, from, "curl -sS -m 3 "+url)
			if err != nil {
				return fmt.Errorf("from %s, %s: %w", from.ID, url, err)
			}
			if !strings.Contains(out, "hello from") {
				return fmt.Errorf("from %s, %s answered %q", from.ID, url, out)
			}
			return nil
		}
		if err := fetch(ctx); err == nil {
			t.Errorf("a node port of aws-us answers another cloud before the operator opened it: %s", url)
		}

		rule := types.IpPermission{IpProtocol: sdk.String("tcp"), FromPort: sdk.Int32(30000), ToPort: sdk.Int32(32767),
			IpRanges: []types.IpRange{{CidrIp: sdk.String("0.0.0.0/0"), Description: sdk.String("the operator's: node ports")}}}
		if _, err := ec.AuthorizeSecurityGroupIngress(ctx, &ec2.AuthorizeSecurityGroupIngressInput{
			GroupId: awsGroup(ctx, t, ec, name).GroupId, IpPermissions: []types.IpPermission{rule}}); err != nil {
			t.Fatal(err)
		}
		eventually(t, time.Minute, "the node port answers another cloud through the operator's rule", fetch)
		c.apply()
		if got := ingressOf(awsGroup(ctx, t, ec, name)); !slices.Contains(got, "tcp 30000-32767 0.0.0.0/0") {
			t.Errorf("after an apply the operator's rule is gone: %v", got)
		}

		if r := c.transit("destroy", "--auto-approve"); r.code != 0 {
			t.Fatalf("destroy: exit %d\n%s", r.code, r.stderr)
		}
		left := awsGroup(ctx, t, ec, name)
		if got := ingressOf(left); !slices.Equal(got, []string{"tcp 30000-32767 0.0.0.0/0"}) {
			t.Errorf("after destroy group %s has %v, want the operator's rule alone", name, got)
		}
		if _, err := ec.DeleteSecurityGroup(ctx, &ec2.DeleteSecurityGroupInput{GroupId: left.GroupId}); err != nil {
			t.Errorf("the operator deletes the group transit left: %v", err)
		}
	}
}
