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
	"github.com/cloudtransit/transit/drivers/drivertest"
	"github.com/cloudtransit/transit/provider"
)

// permissions reads a group's ingress through the SDK as
// "proto from-to cidr [description]", one line per range.
func permissions(t *testing.T, w *world, id string) []string {
	t.Helper()
	out, err := w.sdk().DescribeSecurityGroups(t.Context(), &sdkec2.DescribeSecurityGroupsInput{GroupIds: []string{id}})
	if err != nil {
		t.Fatal(err)
	}
	var rules []string
	for _, p := range out.SecurityGroups[0].IpPermissions {
		ports := "all"
		if p.FromPort != nil {
			ports = fmt.Sprintf("%d-%d", sdk.ToInt32(p.FromPort), sdk.ToInt32(p.ToPort))
		}
		for _, r := range p.IpRanges {
			rules = append(rules, fmt.Sprintf("%s %s %s [%s]", sdk.ToString(p.IpProtocol), ports, sdk.ToString(r.CidrIp), sdk.ToString(r.Description)))
		}
		for _, r := range p.Ipv6Ranges {
			rules = append(rules, fmt.Sprintf("%s %s %s [%s]", sdk.ToString(p.IpProtocol), ports, sdk.ToString(r.CidrIpv6), sdk.ToString(r.Description)))
		}
	}
	slices.Sort(rules)
	return rules
}

// operatorRange adds an operator's rule of a port range.
func operatorRange(t *testing.T, w *world, id, proto string, from, to int32, cidr, desc string) {
	t.Helper()
	p := types.IpPermission{IpProtocol: sdk.String(proto), FromPort: sdk.Int32(from), ToPort: sdk.Int32(to),
		IpRanges: []types.IpRange{{CidrIp: sdk.String(cidr)}}}
	if desc != "" {
		p.IpRanges[0].Description = sdk.String(desc)
	}
	if _, err := w.sdk().AuthorizeSecurityGroupIngress(t.Context(), &sdkec2.AuthorizeSecurityGroupIngressInput{
		GroupId: sdk.String(id), IpPermissions: []types.IpPermission{p}}); err != nil {
		t.Fatal(err)
	}
}

// listed is the cluster's one group as List reports it.
func listed(t *testing.T, drv *driver, cluster string) provider.Group {
	t.Helper()
	_, groups, err := drv.List(t.Context(), cluster)
	if err != nil || len(groups) != 1 {
		t.Fatalf("List: %+v %v, want one group", groups, err)
	}
	return groups[0]
}

// TestMeshRule: on the node mesh the group lets in the mesh's UDP port
// from anywhere, marked as transit's, and no node address; List and
// EnsureGroup report the port. An operator's rule (the NodePorts from
// anywhere) stays through the mesh's rule coming, its port changing (the
// new port opens before the old one closes), the mesh going for node
// addresses, and the group's deletion, which leaves the group to it.
func TestMeshRule(t *testing.T) {
	t.Parallel()
	w := newWorld(t, ec2.Options{})
	drv := w.driver(w.district(func(d *districts.District) { d.SSHCIDRs = []string{"203.0.113.0/24"} }), credential(), fast())
	ctx := t.Context()
	spec := groupSpec("mesh", "aws-test")
	spec.MeshPort = drivertest.MeshPort
	g, err := drv.EnsureGroup(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if g.MeshPort != drivertest.MeshPort || len(g.Sources) != 0 {
		t.Errorf("EnsureGroup = %+v, want mesh port %d and no source", g, drivertest.MeshPort)
	}
	ssh := "tcp 22-22 203.0.113.0/24 [" + descSSH + "]"
	want := []string{ssh, "udp 51820-51820 0.0.0.0/0 [" + descMesh + "]"}
	if diff := cmp.Diff(want, permissions(t, w, g.ProviderID)); diff != "" {
		t.Errorf("rules on the mesh (-want +got):\n%s", diff)
	}
	if l := listed(t, drv, "mesh"); l.MeshPort != drivertest.MeshPort || len(l.Sources) != 0 {
		t.Errorf("listed %+v, want mesh port %d and no source", l, drivertest.MeshPort)
	}

	operatorRange(t, w, g.ProviderID, "tcp", 30000, 32767, "0.0.0.0/0", "")
	nodePorts := "tcp 30000-32767 0.0.0.0/0 []"
	if _, err := drv.EnsureGroup(ctx, spec); err != nil {
		t.Fatal(err)
	}
	want = []string{ssh, nodePorts, "udp 51820-51820 0.0.0.0/0 [" + descMesh + "]"}
	if diff := cmp.Diff(want, permissions(t, w, g.ProviderID)); diff != "" {
		t.Errorf("rules with the operator's (-want +got):\n%s", diff)
	}

	w.actions()
	spec.MeshPort = drivertest.OtherMeshPort
	if g, err = drv.EnsureGroup(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if g.MeshPort != drivertest.OtherMeshPort {
		t.Errorf("EnsureGroup reports mesh port %d, want %d", g.MeshPort, drivertest.OtherMeshPort)
	}
	want = []string{ssh, nodePorts, "udp 51821-51821 0.0.0.0/0 [" + descMesh + "]"}
	if diff := cmp.Diff(want, permissions(t, w, g.ProviderID)); diff != "" {
		t.Errorf("rules after the port changed (-want +got):\n%s", diff)
	}
	var changes []string
	for _, a := range w.actions() {
		if a != "DescribeSecurityGroups" {
			changes = append(changes, a)
		}
	}
	if diff := cmp.Diff([]string{"AuthorizeSecurityGroupIngress", "RevokeSecurityGroupIngress"}, changes); diff != "" {
		t.Errorf("the port change asked (-want +got): the new port first, then the old one revoked:\n%s", diff)
	}
	if l := listed(t, drv, "mesh"); l.MeshPort != drivertest.OtherMeshPort {
		t.Errorf("listed mesh port %d, want %d", l.MeshPort, drivertest.OtherMeshPort)
	}

	off := groupSpec("mesh", "aws-test", "192.0.2.10")
	if g, err = drv.EnsureGroup(ctx, off); err != nil {
		t.Fatal(err)
	}
	if g.MeshPort != 0 || !slices.Equal(g.Sources, []string{"192.0.2.10"}) {
		t.Errorf("EnsureGroup off the mesh = %+v, want no mesh port and the node", g)
	}
	want = []string{"-1 all 192.0.2.10/32 [" + descNode + "]", ssh, nodePorts}
	if diff := cmp.Diff(want, permissions(t, w, g.ProviderID)); diff != "" {
		t.Errorf("rules off the mesh (-want +got):\n%s", diff)
	}
	if l := listed(t, drv, "mesh"); l.MeshPort != 0 || !slices.Equal(l.Sources, []string{"192.0.2.10"}) {
		t.Errorf("listed %+v off the mesh, want no mesh port and the node", l)
	}

	if err := drv.DeleteGroup(ctx, g); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{nodePorts}, permissions(t, w, g.ProviderID)); diff != "" {
		t.Errorf("the kept group's rules (-want +got):\n%s", diff)
	}
	if _, groups, _ := drv.List(ctx, "mesh"); len(groups) != 0 {
		t.Errorf("the kept group is still listed as the cluster's: %+v", groups)
	}
}

// TestMeshRuleOfTheOperator: an operator's rule identical to the mesh's
// (EC2 refuses a second) becomes transit's, marked in place, never
// revoked and authorized again; one for another UDP port, or from
// somewhere else, is the operator's and neither counts as the mesh's nor
// goes. Both with the mesh's port and without.
func TestMeshRuleOfTheOperator(t *testing.T) {
	t.Parallel()
	w := newWorld(t, ec2.Options{})
	drv := w.driver(w.district(func(d *districts.District) { d.SSHCIDRs = []string{"203.0.113.0/24"} }), credential(), fast())
	ctx := t.Context()
	g, err := drv.EnsureGroup(ctx, groupSpec("opmesh", "aws-test", "192.0.2.10"))
	if err != nil {
		t.Fatal(err)
	}
	operatorRange(t, w, g.ProviderID, "udp", drivertest.MeshPort, drivertest.MeshPort, "0.0.0.0/0", "wireguard")
	operatorRange(t, w, g.ProviderID, "udp", 4789, 4789, "0.0.0.0/0", "vxlan")
	operatorRange(t, w, g.ProviderID, "udp", drivertest.MeshPort, drivertest.MeshPort, "198.51.100.0/24", "office")
	if l := listed(t, drv, "opmesh"); l.MeshPort != 0 {
		t.Errorf("listed mesh port %d: the operator's rules are not transit's", l.MeshPort)
	}

	w.actions()
	spec := groupSpec("opmesh", "aws-test")
	spec.MeshPort = drivertest.MeshPort
	if g, err = drv.EnsureGroup(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if n := len(w.forms("AuthorizeSecurityGroupIngress")); n != 0 {
		t.Errorf("%d authorize requests: the operator's identical rule is marked in place", n)
	}
	if n := len(w.forms("UpdateSecurityGroupRuleDescriptionsIngress")); n != 1 {
		t.Errorf("%d description updates, want the operator's mesh rule marked", n)
	}
	operators := []string{"udp 4789-4789 0.0.0.0/0 [vxlan]", "udp 51820-51820 198.51.100.0/24 [office]"}
	want := append([]string{"tcp 22-22 203.0.113.0/24 [" + descSSH + "]", "udp 51820-51820 0.0.0.0/0 [" + descMesh + "]"}, operators...)
	slices.Sort(want)
	if diff := cmp.Diff(want, permissions(t, w, g.ProviderID)); diff != "" {
		t.Errorf("rules on the mesh (-want +got):\n%s", diff)
	}
	if l := listed(t, drv, "opmesh"); l.MeshPort != drivertest.MeshPort || len(l.Sources) != 0 {
		t.Errorf("listed %+v, want mesh port %d and no source", l, drivertest.MeshPort)
	}

	if g, err = drv.EnsureGroup(ctx, groupSpec("opmesh", "aws-test")); err != nil {
		t.Fatal(err)
	}
	want = append([]string{"tcp 22-22 203.0.113.0/24 [" + descSSH + "]"}, operators...)
	if diff := cmp.Diff(want, permissions(t, w, g.ProviderID)); diff != "" {
		t.Errorf("rules off the mesh (-want +got): the rule became transit's, and went:\n%s", diff)
	}
	if g.MeshPort != 0 {
		t.Errorf("EnsureGroup off the mesh reports port %d", g.MeshPort)
	}
}
