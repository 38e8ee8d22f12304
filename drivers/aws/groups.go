package aws

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	sdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/drivers/cloudutil"
	"github.com/cloudtransit/transit/provider"
)

// EnsureGroup creates the cluster's security group in the district's VPC
// (named spec.Name, tagged spec.Tags) or finds it (adding the spec's tags
// it lacks; a group of that name without the cluster's tag is refused),
// and makes transit's ingress rules exactly: all traffic from each
// source, UDP spec.MeshPort from 0.0.0.0/0 (the node mesh, when not 0),
// SSH from ssh_cidrs, the API port from api_cidrs. Only the rules that
// differ are authorized or revoked, new ones first, so no allowed source
// is ever cut off on the way (a new mesh port is open before the old one
// closes). An operator's rules stay.
func (drv *driver) EnsureGroup(ctx context.Context, spec provider.GroupSpec) (provider.Group, error) {
	what := "ensure security group " + spec.Name
	vpc, err := drv.vpcID(ctx)
	if err != nil {
		return provider.Group{}, err
	}
	want, sources, err := drv.wantRules(spec.Sources, spec.MeshPort)
	if err != nil {
		return provider.Group{}, err
	}
	g, err := drv.findGroup(ctx, vpc, spec.Name)
	if err != nil {
		return provider.Group{}, drv.wrap(what, err)
	}
	if g == nil {
		created, err := drv.ec2.CreateSecurityGroup(ctx, &ec2.CreateSecurityGroupInput{
			GroupName:         sdk.String(spec.Name),
			Description:       sdk.String(fmt.Sprintf("transit cluster %s in district %s", spec.Cluster, spec.District)),
			VpcId:             sdk.String(vpc),
			TagSpecifications: []types.TagSpecification{tagSpec(types.ResourceTypeSecurityGroup, withRulesMarked(spec.Tags))},
		})
		switch {
		case code(err) == "InvalidGroup.Duplicate":
			// Another run created it meanwhile.
			if g, err = drv.findGroup(ctx, vpc, spec.Name); err == nil && g == nil {
				err = fmt.Errorf("created concurrently, yet not found")
			}
		case err == nil:
			g = &types.SecurityGroup{GroupId: created.GroupId, GroupName: sdk.String(spec.Name), VpcId: sdk.String(vpc), Tags: created.Tags}
		}
		if err != nil {
			return provider.Group{}, drv.wrap(what, err)
		}
	}
	tags := userTags(g.Tags)
	if c := tags[districts.TagCluster]; c != spec.Cluster {
		return provider.Group{}, fmt.Errorf("aws district %q: %s: group %s in VPC %s carries %s=%q, not cluster %q's tag: transit leaves it alone; rename the cluster or delete the group",
			drv.d.ID, what, sdk.ToString(g.GroupId), vpc, districts.TagCluster, c, spec.Cluster)
	}
	id := sdk.ToString(g.GroupId)
	if missing := missingTags(tags, spec.Tags); len(missing) > 0 {
		if _, err := drv.ec2.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{id}, Tags: tagSpec("", missing).Tags}); err != nil {
			return provider.Group{}, drv.wrap(what, err)
		}
		maps.Copy(tags, missing)
	}
	if err := drv.reconcile(ctx, g, want, what); err != nil {
		return provider.Group{}, err
	}
	return provider.Group{ProviderID: id, Name: spec.Name, Tags: tags, Sources: sources, MeshPort: spec.MeshPort}, nil
}

// wantRules are the ingress rules of a group with sources and the mesh's
// port (0: none), and the sources as Group.Sources reports them.
func (drv *driver) wantRules(sources []string, meshPort int) (map[rule]bool, []string, error) {
	want := map[rule]bool{}
	if meshPort != 0 {
		if meshPort < 1 || meshPort > 65535 {
			return nil, nil, fmt.Errorf("aws district %q: the mesh's port %d is not a UDP port (1-65535)", drv.d.ID, meshPort)
		}
		want[meshRule(int32(meshPort))] = true
	}
	var reported []string
	for _, s := range sources {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return nil, nil, fmt.Errorf("aws district %q: security group source %q is neither an address nor a CIDR block", drv.d.ID, s)
			}
			p = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		}
		r := rule{proto: "-1", cidr: p.Masked().String()}
		if !want[r] {
			want[r] = true
			reported = append(reported, source(r.cidr))
		}
	}
	for _, c := range drv.sshCIDRs {
		want[rule{proto: "tcp", from: 22, to: 22, cidr: c}] = true
	}
	for _, c := range drv.apiCIDRs {
		want[rule{proto: "tcp", from: cloudutil.APIPort, to: cloudutil.APIPort, cidr: c}] = true
	}
	slices.Sort(reported)
	return want, reported, nil
}

func missingTags(have, want map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range want {
		if have[k] != v {
			out[k] = v
		}
	}
	return out
}

// findGroup returns the group named name in vpc, or nil.
func (drv *driver) findGroup(ctx context.Context, vpc, name string) (*types.SecurityGroup, error) {
	out, err := drv.ec2.DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{
		Filters: []types.Filter{filter("group-name", name), filter("vpc-id", vpc)}})
	if err != nil {
		return nil, err
	}
	for i := range out.SecurityGroups {
		if sdk.ToString(out.SecurityGroups[i].GroupName) == name {
			return &out.SecurityGroups[i], nil
		}
	}
	return nil, nil
}

// reconcile authorizes the wanted rules the group lacks, then revokes
// the ones it has beyond them. When a rule changed meanwhile (another run,
// or EC2 not yet showing a new group), it reads the group again and
// retries.
func (drv *driver) reconcile(ctx context.Context, g *types.SecurityGroup, want map[rule]bool, what string) error {
	id := sdk.ToString(g.GroupId)
	const attempts = 3
	for i := 0; ; i++ {
		isMarked := marked(*g)
		// present: every rule, whoever made it (EC2 refuses a duplicate
		// whatever its description); ours: what transit may revoke;
		// unmarked: wanted rules without transit's mark — its own from
		// before the marks, or an operator's identical to one transit
		// needs, which becomes transit's (else the group's sources would
		// never match the nodes) — marked in place.
		present, ours, unmarked := map[rule]bool{}, map[rule]bool{}, map[rule]bool{}
		for _, r := range ingress(*g) {
			present[r.rule] = true
			if r.ours(isMarked) {
				ours[r.rule] = true
			}
			if r.desc != r.description() {
				unmarked[r.rule] = true
			}
		}
		var add, mark, drop []types.IpPermission
		for _, r := range sortedRules(want) {
			switch {
			case !present[r]:
				add = append(add, r.permission())
			case unmarked[r]:
				mark = append(mark, r.permission())
			}
		}
		for _, r := range sortedRules(ours) {
			if !want[r] {
				drop = append(drop, r.permission())
			}
		}
		var err error
		if len(add) > 0 {
			_, err = drv.ec2.AuthorizeSecurityGroupIngress(ctx, &ec2.AuthorizeSecurityGroupIngressInput{GroupId: sdk.String(id), IpPermissions: add})
		}
		if err == nil && len(mark) > 0 {
			_, err = drv.ec2.UpdateSecurityGroupRuleDescriptionsIngress(ctx, &ec2.UpdateSecurityGroupRuleDescriptionsIngressInput{GroupId: sdk.String(id), IpPermissions: mark})
		}
		if err == nil && len(drop) > 0 {
			_, err = drv.ec2.RevokeSecurityGroupIngress(ctx, &ec2.RevokeSecurityGroupIngressInput{GroupId: sdk.String(id), IpPermissions: drop})
		}
		if err == nil && !isMarked {
			// From now on an unmarked rule is an operator's.
			_, err = drv.ec2.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{id}, Tags: tagSpec("", map[string]string{tagRules: "described"}).Tags})
		}
		switch code(err) {
		case "":
			return drv.wrap(what, err)
		case "InvalidPermission.Duplicate", "InvalidPermission.NotFound", "InvalidGroup.NotFound":
			if i+1 < attempts {
				if werr := drv.wait(ctx, i); werr != nil {
					return drv.wrap(what, werr)
				}
				out, derr := drv.ec2.DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{GroupIds: []string{id}})
				if derr == nil && len(out.SecurityGroups) == 1 {
					g = &out.SecurityGroups[0]
					continue
				}
				if code(derr) != "InvalidGroup.NotFound" {
					return drv.wrap(what, derr)
				}
				continue
			}
		}
		return drv.wrap(what, err)
	}
}

func sortedRules(m map[rule]bool) []rule {
	out := slices.Collect(maps.Keys(m))
	slices.SortFunc(out, func(a, b rule) int {
		if a.proto != b.proto {
			if a.proto < b.proto {
				return -1
			}
			return 1
		}
		if a.from != b.from {
			return int(a.from - b.from)
		}
		if a.cidr < b.cidr {
			return -1
		}
		if a.cidr > b.cidr {
			return 1
		}
		return 0
	})
	return out
}

// DeleteGroup deletes the group. While instances that used it are still
// terminating EC2 refuses (DependencyViolation): it retries with backoff
// for up to GroupWait. A missing group is fine. A group holding an
// operator's rules is not deleted: transit's rules and tags leave it.
func (drv *driver) DeleteGroup(ctx context.Context, g provider.Group) error {
	what := "delete security group " + g.Name
	id := g.ProviderID
	if id == "" {
		vpc, err := drv.vpcID(ctx)
		if err != nil {
			return err
		}
		found, err := drv.findGroup(ctx, vpc, g.Name)
		if err != nil || found == nil {
			return drv.wrap(what, err)
		}
		id = sdk.ToString(found.GroupId)
	}
	if kept, err := drv.keepOperatorRules(ctx, id, what); kept || err != nil {
		return err
	}
	deadline := drv.opts.Clock.Now().Add(drv.opts.GroupWait)
	for i := 0; ; i++ {
		_, err := drv.ec2.DeleteSecurityGroup(ctx, &ec2.DeleteSecurityGroupInput{GroupId: sdk.String(id)})
		switch code(err) {
		case "InvalidGroup.NotFound":
			return nil
		case "DependencyViolation":
			if drv.opts.Clock.Now().After(deadline) {
				return drv.wrap(fmt.Sprintf("%s (%s): still in use after %s", what, id, drv.opts.GroupWait), err)
			}
			if werr := drv.wait(ctx, i); werr != nil {
				return drv.wrap(what, werr)
			}
			continue
		}
		return drv.wrap(what, err)
	}
}

// keepOperatorRules leaves a group holding rules transit did not make to
// its operator: transit revokes its own rules and removes its tags (the
// group is no longer the cluster's), and says it kept the group.
func (drv *driver) keepOperatorRules(ctx context.Context, id, what string) (bool, error) {
	out, err := drv.ec2.DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{GroupIds: []string{id}})
	switch {
	case code(err) == "InvalidGroup.NotFound":
		return true, nil
	case err != nil:
		return false, drv.wrap(what, err)
	case len(out.SecurityGroups) != 1:
		return false, nil
	}
	g := out.SecurityGroups[0]
	var ours []types.IpPermission
	foreign := false
	for _, r := range ingress(g) {
		if r.ours(marked(g)) {
			ours = append(ours, r.permission())
		} else {
			foreign = true
		}
	}
	if !foreign {
		return false, nil
	}
	if len(ours) > 0 {
		if _, err := drv.ec2.RevokeSecurityGroupIngress(ctx, &ec2.RevokeSecurityGroupIngressInput{GroupId: sdk.String(id), IpPermissions: ours}); err != nil {
			return false, drv.wrap(what, err)
		}
	}
	var tags []types.Tag
	for k := range userTags(g.Tags) {
		if strings.HasPrefix(k, "transit-") {
			tags = append(tags, types.Tag{Key: sdk.String(k)})
		}
	}
	if len(tags) > 0 {
		if _, err := drv.ec2.DeleteTags(ctx, &ec2.DeleteTagsInput{Resources: []string{id}, Tags: tags}); err != nil {
			return false, drv.wrap(what, err)
		}
	}
	return true, nil
}

// withRulesMarked are a new group's tags: its rules are marked from the
// start.
func withRulesMarked(tags map[string]string) map[string]string {
	out := maps.Clone(tags)
	if out == nil {
		out = map[string]string{}
	}
	out[tagRules] = "described"
	return out
}
