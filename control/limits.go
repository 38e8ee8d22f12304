package control

import (
	"fmt"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// groupLimits are the drivers that cap groups, by district.
func groupLimits(infra map[string]provider.Infrastructure) map[string]provider.GroupLimiter {
	out := map[string]provider.GroupLimiter{}
	for id, drv := range infra {
		if l, ok := drv.(provider.GroupLimiter); ok {
			out[id] = l
		}
	}
	return out
}

// checkGroupLimits refuses a plan that launches nodes while the cluster
// cluster.json asks for would outgrow a district's group quota: each
// group lets in every node's addresses (a local node has one, a cloud
// node a public and a private one) — or, on the node mesh, only the
// mesh's port, whatever the size. The whole plan is refused, naming the
// district, the quota and how to raise it; a plan that only removes nodes
// goes on, whatever the size.
func checkGroupLimits(in planInput, launches []Action, mesh bool, p *Plan) bool {
	if len(launches) == 0 || len(in.limits) == 0 {
		return true
	}
	providerOf := map[string]string{}
	for _, d := range in.districts {
		providerOf[d.ID] = d.Provider
	}
	nodes, addrs := 0, 0
	for _, dep := range in.cluster.Deployments {
		nodes += dep.Quantity
		if providerOf[dep.District] == districts.ProviderLocal {
			addrs += dep.Quantity
		} else {
			addrs += 2 * dep.Quantity
		}
	}
	addrs = max(addrs, len(addressesOf(in.world.live())))
	way := "or plan fewer nodes"
	if mesh {
		addrs = 0
		way = "transit's rules alone take this much"
	} else if in.world.state.Mesh == "" {
		// A platform formed off the mesh stays off it.
		way += `, or put the cluster on the node mesh (cluster.json "network": {"mesh": "wireguard"}): its groups let in one port, whatever the size`
	}
	ok := true
	for _, d := range in.districts {
		l, has := in.limits[d.ID]
		if !has || !wants(in.cluster, d.ID) {
			continue
		}
		if g := l.GroupLimit(addrs, mesh); g.Need > g.Max {
			p.Blocked = append(p.Blocked, fmt.Sprintf("district %s: its security group would take %d of %s for the cluster's %d nodes (%d addresses), more than the %d allowed by default: %s, %s",
				d.ID, g.Need, g.Quota, nodes, addrs, g.Max, g.Raise, way))
			ok = false
		}
	}
	return ok
}
