package control

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/cloudtransit/transit/districts"
)

// planInput is everything buildPlan looks at; buildPlan is pure so plans
// can be tested and benchmarked without clouds.
type planInput struct {
	cluster   districts.Cluster
	districts []districts.District
	world     world
	// avoid holds nodes whose drain was refused earlier in this run; they
	// are the last candidates for removal.
	avoid map[string]bool
	newID func(districts.DeploymentKey) string
}

// removalRank orders removal candidates: the cheapest and least useful
// first. Nodes an interrupted run left cordoned come before any healthy
// one is cordoned, so they never add to max_unavailable.
var removalRank = map[districts.Phase]int{
	districts.PhaseLaunched: 0,
	districts.PhaseLeft:     1,
	districts.PhaseDrained:  2,
	districts.PhaseDraining: 3,
	districts.PhaseNotReady: 4,
	districts.PhaseJoined:   5,
}

func isMember(p districts.Phase) bool {
	switch p {
	case districts.PhaseJoined, districts.PhaseNotReady, districts.PhaseDraining, districts.PhaseDrained:
		return true
	}
	return false
}

// buildPlan diffs the observed world against the intended cluster and
// returns the actions of the next round, in execution order:
// groups, launches, allow new addresses, init, joins, labels, removals
// (drain, remove, terminate per node), revoke old addresses, delete groups.
func buildPlan(in planInput) Plan {
	c := in.cluster
	strat := c.Strategy.Resolved()
	p := Plan{Cluster: c.ID, Notes: slices.Clone(in.world.notes)}

	desired := map[districts.DeploymentKey]districts.Deployment{}
	total := 0
	for _, d := range c.Deployments {
		desired[d.Key()] = d
		total += d.Quantity
	}
	destroying := total == 0

	// Live nodes by deployment line; terminating machines no longer count.
	byKey := map[districts.DeploymentKey][]*districts.Node{}
	live := make([]*districts.Node, 0, len(in.world.state.Nodes))
	for i := range in.world.state.Nodes {
		n := &in.world.state.Nodes[i]
		if n.Phase == districts.PhaseTerminating {
			continue
		}
		byKey[n.Key()] = append(byKey[n.Key()], n)
		live = append(live, n)
	}
	keys := slices.Collect(maps.Keys(desired))
	for k := range byKey {
		if _, ok := desired[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b districts.DeploymentKey) int {
		return cmp.Or(cmp.Compare(a.Role, b.Role), cmp.Compare(a.District, b.District), cmp.Compare(a.Flavor, b.Flavor))
	})

	type roleWork struct {
		present, want int
		adds          []districts.DeploymentKey // one entry per node to add
		excess        []*districts.Node
	}
	roles := map[string]*roleWork{}
	keep := make([]*districts.Node, 0, len(live))
	for _, k := range keys {
		nodes := byKey[k]
		sort.Slice(nodes, func(i, j int) bool { return removeFirst(nodes[i], nodes[j], in.avoid) })
		want := desired[k].Quantity
		rw := roles[k.Role]
		if rw == nil {
			rw = &roleWork{}
			roles[k.Role] = rw
		}
		rw.present += len(nodes)
		rw.want += want
		n := len(nodes) - want
		if n > 0 {
			rw.excess = append(rw.excess, nodes[:n]...)
			keep = append(keep, nodes[n:]...)
		} else {
			keep = append(keep, nodes...)
			for range -n {
				rw.adds = append(rw.adds, k)
			}
		}
	}

	// Decide per role how much of the add and remove work this round does.
	// A pure scale-up adds everything at once. When nodes are also removed
	// (a migration), the role never runs more than MaxSurge machines above
	// its intended size (nor grows while above it), and removals wait for
	// the new nodes; the rest is left to later rounds.
	var launches []Action
	var removals []*districts.Node
	after := map[string][]string{} // role -> nodes a removal waits for
	roleNames := slices.Sorted(maps.Keys(roles))
	for _, role := range roleNames {
		rw := roles[role]
		_ = 0
		nAdd := len(rw.adds)
		if len(rw.excess) > 0 && !destroying {
			// Bound the peak by the intended size, not the current one:
			// nodes a crashed run launched already count as surge.
			nAdd = min(nAdd, max(rw.want+strat.MaxSurge-rw.present, 0))
		}
		for _, k := range rw.adds[:nAdd] {
			id := in.newID(k)
			launches = append(launches, Action{
				Kind: KindLaunch, District: k.District, Node: id, Role: k.Role, Flavor: k.Flavor,
				Reason: fmt.Sprintf("%s wants %d, has %d", k, desired[k].Quantity, len(byKey[k])),
			})
			after[role] = append(after[role], id)
		}
		unjoined := 0
		for _, n := range rw.excess {
			if !isMember(n.Phase) {
				unjoined++
			}
		}
		nRemove := len(rw.excess)
		if !destroying {
			nRemove = min(nRemove, max(rw.present+nAdd-rw.want, unjoined))
		}
		sort.SliceStable(rw.excess, func(i, j int) bool { return removeFirst(rw.excess[i], rw.excess[j], in.avoid) })
		removals = append(removals, rw.excess[:nRemove]...)
	}
	// Workers leave before masters; masters leave last, one at a time.
	sort.SliceStable(removals, func(i, j int) bool {
		return removals[i].Role != districts.RoleMaster && removals[j].Role == districts.RoleMaster
	})

	// Security groups: every district with nodes, or about to get some,
	// needs one that lets in every node of the cluster.
	sources := addressesOf(live)
	needGroup := map[string]bool{}
	for _, n := range live {
		needGroup[n.District] = true
	}
	for _, a := range launches {
		needGroup[a.District] = true
	}
	groups := map[string]districts.SecurityGroup{}
	for _, g := range in.world.state.SecurityGroups {
		groups[g.District] = g
	}
	var pre, allow, revoke, deletes []Action
	for _, d := range in.districts {
		g, has := groups[d.ID]
		name := GroupName(c.ID, d.ID)
		switch {
		case needGroup[d.ID] && !has:
			pre = append(pre, Action{Kind: KindCreateGroup, District: d.ID, Group: name,
				Reason: "the district has or gets nodes and has no security group"})
		case needGroup[d.ID] && !slices.Equal(g.Sources, sources):
			pre = append(pre, Action{Kind: KindUpdateGroup, District: d.ID, Group: name,
				Reason: fmt.Sprintf("allow exactly the cluster's %d node addresses (has %d)", len(sources), len(g.Sources))})
		case !needGroup[d.ID] && has && in.world.terminating[d.ID] > 0:
			p.Waiting = append(p.Waiting, fmt.Sprintf("%d terminating machine(s) in %s to be gone before deleting group %s", in.world.terminating[d.ID], d.ID, name))
			_ = 0
		case !needGroup[d.ID] && has:
			deletes = append(deletes, Action{Kind: KindDeleteGroup, District: d.ID, Group: name,
				Reason: "no nodes left in the district"})
		}
		if len(launches) > 0 && needGroup[d.ID] {
			allow = append(allow, Action{Kind: KindUpdateGroup, District: d.ID, Group: name,
				Reason: fmt.Sprintf("allow %d new node(s) before they join", len(launches))})
		}
	}
	for _, g := range in.world.orphanGroups {
		deletes = append(deletes, Action{Kind: KindDeleteGroup, District: g.District, Group: g.ID,
			Reason: "orphaned group with the cluster's tags"})
	}
	_ = 0

	// Joins: launched nodes this round plus kept nodes not yet members.
	var toJoin []Action
	for _, n := range keep {
		if !isMember(n.Phase) {
			after[n.Role] = append(after[n.Role], n.ID)
			toJoin = append(toJoin, Action{Kind: KindJoin, District: n.District, Node: n.ID, Role: n.Role, Flavor: n.Flavor,
				Reason: fmt.Sprintf("node is %s, not a member of the platform", n.Phase)})
		}
	}
	_ = 0
	for _, a := range launches {
		toJoin = append(toJoin, Action{Kind: KindJoin, District: a.District, Node: a.Node, Role: a.Role, Flavor: a.Flavor,
			Reason: "new node"})
	}
	var inits, joins []Action
	if !in.world.platformUp && !destroying {
		// The first master founds the platform; everyone else waits for it.
		for i, a := range toJoin {
			if a.Role == districts.RoleMaster {
				a.Kind, a.Reason = KindInit, "first master: no platform exists yet"
				inits = append(inits, a)
				toJoin = slices.Delete(toJoin, i, i+1)
				for j := range toJoin {
					toJoin[j].After = []string{a.Node}
				}
				break
			}
		}
	}
	joins = toJoin
	if destroying {
		joins = nil
	}

	// Labels and uncordons of kept members.
	var changes []Action
	for _, n := range keep {
		if !isMember(n.Phase) {
			continue
		}
		if n.Phase == districts.PhaseNotReady {
			p.Waiting = append(p.Waiting, fmt.Sprintf("node %s to become ready (the platform reports it unhealthy)", n.ID))
			_ = 0
		}
		if n.Phase == districts.PhaseDraining || n.Phase == districts.PhaseDrained {
			changes = append(changes, Action{Kind: KindUncordon, District: n.District, Node: n.ID, Role: n.Role, Flavor: n.Flavor,
				Reason: "an interrupted drain left the wanted node cordoned"})
		}
		if want := desired[n.Key()].Tags; !maps.Equal(n.Tags, want) {
			changes = append(changes, Action{Kind: KindLabel, District: n.District, Node: n.ID, Role: n.Role, Flavor: n.Flavor,
				Reason: "labels differ from the deployment's tags: " + tagDiff(n.Tags, want)})
		}
	}
	_ = 0

	// Removals: drain -> remove -> terminate, each waiting for the role's
	// new nodes. A whole-cluster destroy just terminates.
	var remove []Action
	for _, n := range removals {
		base := Action{District: n.District, Node: n.ID, Role: n.Role, Flavor: n.Flavor}
		reason := removalReason(n, desired, byKey, destroying)
		if !destroying && isMember(n.Phase) {
			if n.Phase != districts.PhaseDrained {
				a := base
				a.Kind, a.Reason, a.After = KindDrain, reason, after[n.Role]
				remove = append(remove, a)
			}
			a := base
			a.Kind, a.Reason, a.After = KindRemove, reason, after[n.Role]
			remove = append(remove, a)
		}
		a := base
		a.Kind, a.Reason = KindTerminate, reason
		if !destroying && isMember(n.Phase) {
			a.After = after[n.Role]
		}
		remove = append(remove, a)
	}
	if len(removals) > 0 {
		for _, d := range in.districts {
			if needGroup[d.ID] && remainsAfter(d.ID, live, removals) {
				revoke = append(revoke, Action{Kind: KindUpdateGroup, District: d.ID, Group: GroupName(c.ID, d.ID),
					Reason: fmt.Sprintf("revoke the addresses of %d removed node(s)", len(removals))})
			}
		}
	}

	for _, part := range [][]Action{pre, launches, allow, inits, joins, changes, remove, revoke, deletes} {
		p.Actions = append(p.Actions, part...)
	}
	return p
}

// removeFirst orders removal candidates: cheapest phase first, nodes whose
// drain was refused last, then newest first.
func removeFirst(a, b *districts.Node, avoid map[string]bool) bool {
	if avoid[a.ID] != avoid[b.ID] {
		return !avoid[a.ID]
	}
	if ra, rb := removalRank[a.Phase], removalRank[b.Phase]; ra != rb {
		return ra < rb
	}
	if !a.CreatedAt.Equal(b.CreatedAt) {
		return a.CreatedAt.After(b.CreatedAt)
	}
	return districts.CompareNodeIDs(a.ID, b.ID) > 0
}

func removalReason(n *districts.Node, desired map[districts.DeploymentKey]districts.Deployment, byKey map[districts.DeploymentKey][]*districts.Node, destroying bool) string {
	k := n.Key()
	d, ok := desired[k]
	switch {
	case destroying:
		return "destroy: cluster.json wants no nodes"
	case !ok:
		return fmt.Sprintf("%s is not in cluster.json", k)
	default:
		return fmt.Sprintf("%s wants %d, has %d", k, d.Quantity, len(byKey[k]))
	}
}

func remainsAfter(district string, live, removed []*districts.Node) bool {
	gone := map[string]bool{}
	for _, n := range removed {
		gone[n.ID] = true
	}
	for _, n := range live {
		if n.District == district && !gone[n.ID] {
			return true
		}
	}
	return false
}

// addressesOf returns the sorted, distinct addresses of nodes.
func addressesOf(nodes []*districts.Node) []string {
	set := map[string]bool{}
	for _, n := range nodes {
		for _, a := range n.Addresses() {
			set[a] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

func tagDiff(have, want map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if v, ok := have[k]; !ok || v != want[k] {
			parts = append(parts, fmt.Sprintf("%s=%s", k, want[k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(have)) {
		if _, ok := want[k]; !ok {
			parts = append(parts, "-"+k)
		}
	}
	return strings.Join(parts, ", ")
}
