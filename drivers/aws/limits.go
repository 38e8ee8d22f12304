package aws

import "github.com/cloudtransit/transit/provider"

// defaultRulesPerGroup is EC2's default quota of inbound rules per
// security group; each source block and each SSH block is one.
const defaultRulesPerGroup = 60

// GroupLimit: a group takes a rule per node address and one per
// ssh_cidrs and api_cidrs block.
func (drv *driver) GroupLimit(sources int, mesh bool) provider.GroupLimit {
	return provider.GroupLimit{Need: sources + len(drv.sshCIDRs) + len(drv.apiCIDRs), Max: defaultRulesPerGroup,
		Quota: "EC2's inbound rules per security group",
		Raise: "raise it in Service Quotas (Amazon EC2, \"Inbound or outbound rules per security group\")"}
}

var _ provider.GroupLimiter = (*driver)(nil)
