package gce

import "github.com/cloudtransit/transit/provider"

// maxSourceRanges is how many source ranges one VPC firewall rule may
// hold; the group's nodes rule holds every node address.
const maxSourceRanges = 5000

// GroupLimit: the nodes rule takes a source range per node address.
func (drv *driver) GroupLimit(sources int, mesh bool) provider.GroupLimit {
	return provider.GroupLimit{Need: sources, Max: maxSourceRanges,
		Quota: "Compute Engine's source ranges per firewall rule",
		Raise: "it is a fixed limit"}
}

var _ provider.GroupLimiter = (*driver)(nil)
