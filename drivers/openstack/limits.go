package openstack

import "github.com/cloudtransit/transit/provider"

// defaultRulesPerProject is Neutron's default security_group_rule quota:
// per project, every group's rules together.
const defaultRulesPerProject = 100

// Rules a district's group takes beside its sources: the two egress rules
// Neutron gives every new group, and the project's default group's four
// (made by Neutron at the project's first use).
const (
	egressRules       = 2
	defaultGroupRules = 4
)

// GroupLimit: a rule per node address, one for the node mesh's port
// (mesh), one per ssh_cidrs and api_cidrs block, the group's egress rules
// and the default group's. Other groups of the project (another
// district's, another tool's) count too: this is the least the project
// needs. On the mesh the control loop passes no node address: the
// group's size is then the same whatever the cluster's.
func (drv *driver) GroupLimit(sources int, mesh bool) provider.GroupLimit {
	need := sources + len(drv.sshCIDRs) + len(drv.apiCIDRs) + egressRules + defaultGroupRules
	if mesh {
		need++
	}
	return provider.GroupLimit{Need: need, Max: defaultRulesPerProject,
		Quota: "Neutron's security group rules per project (security_group_rule)",
		Raise: "ask the cloud's operators to raise it (openstack quota set --secgroup-rules N <project>)"}
}

var _ provider.GroupLimiter = (*driver)(nil)
