package aws

import "github.com/cloudtransit/transit/provider"

// defaultRulesPerGroup is EC2's default quota of inbound rules per
// security group; each source block, the mesh's port and each SSH and API
// block is one.
const defaultRulesPerGroup = 60

// GroupLimit: a group takes a rule per node address, one for the node
// mesh's port (mesh), and one per ssh_cidrs and api_cidrs block. On the
// mesh the control loop passes no node address: the group's size is then
// the same whatever the cluster's.
func (drv *driver) GroupLimit(sources int, mesh bool) provider.GroupLimit {
	need := sources + len(drv.sshCIDRs) + len(drv.apiCIDRs)
	if mesh {
		need++
	}
	return provider.GroupLimit{Need: need, Max: defaultRulesPerGroup,
		Quota: "EC2's inbound rules per security group",
		Raise: "raise it in Service Quotas (Amazon EC2, \"Inbound or outbound rules per security group\")"}
}

var _ provider.GroupLimiter = (*driver)(nil)
