package gce

import (
	"net/netip"

	"github.com/cloudtransit/transit/provider"
)

// maxSourceRanges is how many source ranges one VPC firewall rule may
// hold (a fixed limit); the group's nodes rule holds every node address.
const maxSourceRanges = 5000

// defaultFirewallsPerProject is the FIREWALLS quota of a project that
// never asked for more: every firewall rule of every network of the
// project counts, transit's groups, the default network's own rules and
// an operator's alike. Compute Engine's documentation leaves the number
// to the console's quotas page; 100 is what new projects have been seen
// to get (older or busier ones show 200 to 500), so it is the one the
// planner checks against.
const defaultFirewallsPerProject = 100

// GroupLimit is the fuller of the two limits a group meets:
//
//   - the source ranges of its fullest rule, against maxSourceRanges:
//     the nodes' rule holds every node address (sources), the SSH and
//     API rules their blocks;
//   - the firewall rules it takes, against the project's default
//     FIREWALLS quota: the nodes' and SSH's IPv4 rules (always there),
//     SSH's and the API's IPv6 rules while they have blocks, the API's
//     IPv4 rule likewise, and the mesh's (mesh). A node's IPv6 addresses
//     would take one more; GroupLimit is told their number, not their
//     family, so this is the least. The quota is the project's: other
//     districts' groups on the project, other clusters and other tools
//     share it.
//
// Off the mesh a group of any size is a few rules, and its size is the
// nodes' rule's ranges; on the mesh the control loop passes no node
// address, so no rule grows with the cluster and what is left to count
// is the rules.
func (drv *driver) GroupLimit(sources int, mesh bool) provider.GroupLimit {
	ranges := provider.GroupLimit{Need: sources, Max: maxSourceRanges,
		Quota: "Compute Engine's source ranges per firewall rule",
		Raise: "it is a fixed limit"}
	rules := provider.GroupLimit{Need: 2, Max: defaultFirewallsPerProject,
		Quota: "Compute Engine's firewall rules per project (FIREWALLS, shared by every rule of the project)",
		Raise: "raise it in the console's quotas page (Compute Engine API, \"Firewall rules\")"}
	ranges.Need = max(ranges.Need, len(drv.sshCIDRs), len(drv.apiCIDRs))
	_, ssh6 := families(drv.sshCIDRs)
	api4, api6 := families(drv.apiCIDRs)
	for _, has := range []bool{ssh6, api4, api6, mesh} {
		if has {
			rules.Need++
		}
	}
	if rules.Need*ranges.Max > ranges.Need*rules.Max {
		return rules
	}
	return ranges
}

// families says whether blocks hold IPv4 and IPv6 ones.
func families(blocks []string) (v4, v6 bool) {
	for _, b := range blocks {
		p, err := netip.ParsePrefix(b)
		if err != nil {
			continue
		}
		if p.Addr().Is4() {
			v4 = true
		} else {
			v6 = true
		}
	}
	return v4, v6
}

var _ provider.GroupLimiter = (*driver)(nil)
