package aws

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	sdk "github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// List returns the cluster's instances and security groups in the
// district: those tagged transit-cluster=cluster whose transit-district
// tag is this district or missing (a machine another tool made with only
// the cluster's tag). Terminated instances are left out.
func (drv *driver) List(ctx context.Context, cluster string) ([]provider.Instance, []provider.Group, error) {
	what := "list cluster " + cluster
	insts, err := drv.describeAll(ctx, []types.Filter{
		filter("tag:"+districts.TagCluster, cluster),
		filter("instance-state-name", "pending", "running", "shutting-down", "stopping", "stopped"),
	})
	if err != nil {
		return nil, nil, drv.wrap(what, err)
	}
	var out []provider.Instance
	for _, in := range insts {
		if !drv.mine(userTags(in.Tags), cluster) || stateOf(in) == types.InstanceStateNameTerminated {
			continue
		}
		out = append(out, toInstance(in))
	}
	var groups []provider.Group
	pg := ec2.NewDescribeSecurityGroupsPaginator(drv.ec2, &ec2.DescribeSecurityGroupsInput{
		Filters: []types.Filter{filter("tag:"+districts.TagCluster, cluster)}, MaxResults: sdk.Int32(1000)})
	for pg.HasMorePages() {
		page, err := pg.NextPage(ctx)
		if err != nil {
			return nil, nil, drv.wrap(what, err)
		}
		for _, g := range page.SecurityGroups {
			if tags := userTags(g.Tags); drv.mine(tags, cluster) {
				groups = append(groups, toGroup(g))
			}
		}
	}
	return out, groups, nil
}

// mine says whether tags put a resource in this district of cluster.
func (drv *driver) mine(tags map[string]string, cluster string) bool {
	dist, has := tags[districts.TagDistrict]
	return tags[districts.TagCluster] == cluster && (!has || dist == drv.d.ID)
}

// describeAll pages through DescribeInstances. A page token that comes
// back a second time is an error, never the listing's end: a listing cut
// short would say machines are gone.
func (drv *driver) describeAll(ctx context.Context, filters []types.Filter) ([]types.Instance, error) {
	var out []types.Instance
	pg := ec2.NewDescribeInstancesPaginator(drv.ec2, &ec2.DescribeInstancesInput{Filters: filters, MaxResults: sdk.Int32(1000)})
	tokens := map[string]bool{}
	for pg.HasMorePages() {
		page, err := pg.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, r := range page.Reservations {
			out = append(out, r.Instances...)
		}
		if t := sdk.ToString(page.NextToken); t != "" {
			if tokens[t] {
				return nil, fmt.Errorf("DescribeInstances answered page token %q twice: the listing is incomplete", t)
			}
			tokens[t] = true
		}
	}
	return out, nil
}

// Describe asks EC2 for one instance by id, whatever its tags; a missing,
// malformed or terminated id is provider.ErrCloudNotFound.
func (drv *driver) Describe(ctx context.Context, inst provider.Instance) (provider.Instance, error) {
	what := "describe instance " + inst.ProviderID
	in, found, err := drv.instance(ctx, inst.ProviderID)
	switch {
	case err != nil:
		return provider.Instance{}, drv.wrap(what, err)
	case !found:
		return provider.Instance{}, &cloudError{Kind: provider.ErrCloudNotFound, Msg: fmt.Sprintf("aws district %q: %s: no such instance", drv.d.ID, what)}
	}
	return toInstance(in), nil
}

// instance reads one instance by id: found is false when EC2 does not
// know the id (missing, malformed) or the instance is terminated; err is
// EC2's, for the caller to wrap.
func (drv *driver) instance(ctx context.Context, id string) (types.Instance, bool, error) {
	out, err := drv.ec2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	switch c := code(err); {
	case c == "InvalidInstanceID.NotFound" || c == "InvalidInstanceID.Malformed":
		return types.Instance{}, false, nil
	case err != nil:
		return types.Instance{}, false, err
	}
	for _, r := range out.Reservations {
		for _, in := range r.Instances {
			if sdk.ToString(in.InstanceId) == id && stateOf(in) != types.InstanceStateNameTerminated {
				return in, true, nil
			}
		}
	}
	return types.Instance{}, false, nil
}

// toInstance maps an EC2 instance: running is running; pending
// pending; stopping and stopped (the instance exists and may start
// again) stopped; shutting-down and terminated terminating; a state EC2
// may add is pending.
func toInstance(in types.Instance) provider.Instance {
	out := provider.Instance{
		ProviderID: sdk.ToString(in.InstanceId),
		Tags:       userTags(in.Tags),
		PublicIP:   sdk.ToString(in.PublicIpAddress),
		PrivateIP:  sdk.ToString(in.PrivateIpAddress),
		CreatedAt:  sdk.ToTime(in.LaunchTime),
		State:      state(stateOf(in)),
	}
	if in.Placement != nil {
		out.Zone = sdk.ToString(in.Placement.AvailabilityZone)
	}
	return out
}

// state maps an instance state name (toInstance).
func state(name types.InstanceStateName) provider.InstanceState {
	switch name {
	case types.InstanceStateNameRunning:
		return provider.InstanceRunning
	case types.InstanceStateNameStopping, types.InstanceStateNameStopped:
		return provider.InstanceStopped
	case types.InstanceStateNameShuttingDown, types.InstanceStateNameTerminated:
		return provider.InstanceTerminating
	}
	return provider.InstancePending
}

// toGroup maps a security group; its sources are the addresses of its
// all-traffic rules (the nodes), not the SSH rules' CIDR blocks nor an
// operator's rules; its mesh port is the port of transit's UDP rule from
// 0.0.0.0/0 (the lowest, should there be two).
func toGroup(g types.SecurityGroup) provider.Group {
	out := provider.Group{ProviderID: sdk.ToString(g.GroupId), Name: sdk.ToString(g.GroupName), Tags: userTags(g.Tags)}
	for _, r := range ingress(g) {
		if !r.ours(marked(g)) {
			continue
		}
		switch {
		case r.proto == "-1":
			out.Sources = append(out.Sources, source(r.cidr))
		case r.isMesh() && (out.MeshPort == 0 || int(r.from) < out.MeshPort):
			out.MeshPort = int(r.from)
		}
	}
	slices.Sort(out.Sources)
	return out
}

// source is a rule's CIDR block as GroupSpec.Sources has it: a single
// address plain, a wider block as a block.
func source(cidr string) string {
	p, err := netip.ParsePrefix(cidr)
	if err == nil && p.IsSingleIP() {
		return p.Addr().String()
	}
	return cidr
}

// Terminate asks EC2 to terminate the instance and returns at once; the
// instance shows as terminating until it is gone. A missing or terminated
// instance is fine; one without transit's cluster tag, or with another
// cluster's than inst.Tags names, is refused.
func (drv *driver) Terminate(ctx context.Context, inst provider.Instance) error {
	id := inst.ProviderID
	what := "terminate instance " + id
	in, found, err := drv.instance(ctx, id)
	switch {
	case err != nil:
		return drv.wrap(what, err)
	case !found:
		return nil
	}
	// The cluster tag must be there, and the caller's if it says one.
	want := inst.Tags[districts.TagCluster]
	if have := userTags(in.Tags)[districts.TagCluster]; have == "" || want != "" && have != want {
		return fmt.Errorf("aws district %q: %s: it carries %s=%q, not cluster %q's tag: transit never terminates what it did not create",
			drv.d.ID, what, districts.TagCluster, have, want)
	}
	_, err = drv.ec2.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}})
	if c := code(err); c == "InvalidInstanceID.NotFound" {
		return nil
	}
	return drv.wrap(what, err)
}

func isServerError(err error) bool {
	var re *awshttp.ResponseError
	return errors.As(err, &re) && re.HTTPStatusCode() >= 500
}

// rule is one ingress rule: protocol, ports, one CIDR block.
type rule struct {
	proto    string
	from, to int32
	cidr     string
}

// transit marks the rules it makes with a description, and changes only
// marked rules: one an operator adds to the group stays. A group made
// before rules were marked (without tagRules) holds only transit's rules
// (transit then revoked every other); its first reconcile marks them.
const (
	descNode = "transit: cluster node"
	descMesh = "transit: node mesh"
	descSSH  = "transit: ssh_cidrs"
	descAPI  = "transit: api_cidrs"
	tagRules = "transit-rules"
)

// anywhere is the mesh rule's source: WireGuard answers no packet a
// peer's key did not authenticate.
const anywhere = "0.0.0.0/0"

// meshRule lets in the node mesh's UDP port from anywhere.
func meshRule(port int32) rule { return rule{proto: "udp", from: port, to: port, cidr: anywhere} }

// isMesh says the rule is shaped as the mesh's: one UDP port from
// anywhere. (Whose it is, ours says.)
func (r rule) isMesh() bool { return r.proto == "udp" && r.from == r.to && r.cidr == anywhere }

func (r rule) description() string {
	switch {
	case r.proto == "-1":
		return descNode
	case r.proto == "udp":
		return descMesh
	case r.from == 22:
		return descSSH
	}
	return descAPI
}

// permission is the rule as EC2 takes it, with transit's mark.
func (r rule) permission() types.IpPermission {
	p := types.IpPermission{IpProtocol: sdk.String(r.proto)}
	if r.proto != "-1" {
		p.FromPort, p.ToPort = sdk.Int32(r.from), sdk.Int32(r.to)
	}
	if strings.Contains(r.cidr, ":") {
		p.Ipv6Ranges = []types.Ipv6Range{{CidrIpv6: sdk.String(r.cidr), Description: sdk.String(r.description())}}
	} else {
		p.IpRanges = []types.IpRange{{CidrIp: sdk.String(r.cidr), Description: sdk.String(r.description())}}
	}
	return p
}

// groupRule is an ingress rule as the group has it.
type groupRule struct {
	rule
	desc string
}

// marked says the group's rules carry transit's marks.
func marked(g types.SecurityGroup) bool { return userTags(g.Tags)[tagRules] == "described" }

// ours says a rule of the group is transit's: marked, or in a group from
// before the marks.
func (r groupRule) ours(marked bool) bool {
	return strings.HasPrefix(r.desc, "transit: ") || !marked && r.desc == ""
}

// ingress flattens a group's ingress permissions into rules.
func ingress(g types.SecurityGroup) []groupRule {
	var out []groupRule
	for _, p := range g.IpPermissions {
		r := rule{proto: sdk.ToString(p.IpProtocol)}
		if r.proto != "-1" {
			r.from, r.to = sdk.ToInt32(p.FromPort), sdk.ToInt32(p.ToPort)
		}
		for _, ip := range p.IpRanges {
			r.cidr = sdk.ToString(ip.CidrIp)
			out = append(out, groupRule{r, sdk.ToString(ip.Description)})
		}
		for _, ip := range p.Ipv6Ranges {
			r.cidr = sdk.ToString(ip.CidrIpv6)
			out = append(out, groupRule{r, sdk.ToString(ip.Description)})
		}
	}
	return out
}

// stateOf is the instance's state name ("" if EC2 gave none).
func stateOf(in types.Instance) types.InstanceStateName {
	if in.State == nil {
		return ""
	}
	return in.State.Name
}
