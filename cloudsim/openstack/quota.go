package openstack

import (
	"fmt"
	"strings"
)

// Neutron's names of the resources it counts against a project's quotas.
const (
	resSecurityGroup     = "security_group"
	resSecurityGroupRule = "security_group_rule"
	resFloatingIP        = "floatingip"
)

// overQuota is Neutron's answer to a create the project's quota of
// resources does not allow: 409 OverQuota, "Quota exceeded for resources:
// ['security_group_rule']." (the names as Python prints a list).
func overQuota(resources ...string) *apiError {
	quoted := make([]string, len(resources))
	for i, r := range resources {
		quoted[i] = "'" + r + "'"
	}
	return &apiError{409, "OverQuota", fmt.Sprintf("Quota exceeded for resources: [%s].", strings.Join(quoted, ", "))}
}

// neutronResource is the resource a Neutron path's first segment is about.
func neutronResource(segment string) string {
	switch segment {
	case "security-groups":
		return resSecurityGroup
	case "security-group-rules":
		return resSecurityGroupRule
	case "floatingips":
		return resFloatingIP
	case "ports":
		return "port"
	case "networks":
		return "network"
	}
	return ""
}

// limit is the call's project's quota of resource; negative is none.
// Call with s.mu held.
func (c *call) limit(resource string) int {
	q, ok := c.s.quotas[c.project]
	if !ok {
		q = c.s.opts.ProjectQuotas
	}
	def := DefaultQuotas()
	pick := func(set, def int) int {
		if set == 0 {
			return def
		}
		return set
	}
	switch resource {
	case resSecurityGroup:
		return pick(q.SecurityGroups, def.SecurityGroups)
	case resSecurityGroupRule:
		return pick(q.SecurityGroupRules, def.SecurityGroupRules)
	case resFloatingIP:
		return pick(q.FloatingIPs, def.FloatingIPs)
	}
	return -1
}

// used is how many of resource the call's project holds in its region.
// Call with s.mu held.
func (c *call) used(resource string) int {
	s, n := c.s, 0
	switch resource {
	case resSecurityGroup:
		for _, g := range s.groups {
			if g.project == c.project && g.region == c.region {
				n++
			}
		}
	case resSecurityGroupRule:
		for _, r := range s.rules {
			if g := s.groups[r.group]; g != nil && g.project == c.project && g.region == c.region {
				n++
			}
		}
	case resFloatingIP:
		for _, f := range s.fips {
			if f.project == c.project && f.region == c.region {
				n++
			}
		}
	}
	return n
}

// reserve refuses (409 OverQuota) a create of more resources than the
// project's quota leaves, as Neutron's reservation does: all of a bulk
// request or none. Call with s.mu held.
func (c *call) reserve(resource string, more int) error {
	if l := c.limit(resource); l >= 0 && c.used(resource)+more > l {
		return overQuota(resource)
	}
	return nil
}
