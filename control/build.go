package control

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// The planner is pure: buildPlan turns one observation into the actions
// of the next round, so plans are tested and benchmarked without clouds.
// It runs in small steps, each tested on its own: classify the nodes per
// deployment line and role, then plan the rollout of each role (adds
// bounded by max_surge, removals bounded by max_unavailable and by the
// members the platform reports ready), joins, label and cordon changes,
// forgetting members whose machines are gone, and security groups.

// planInput is everything buildPlan looks at.
type planInput struct {
	cluster   districts.Cluster
	districts []districts.District
	world     world
	// avoid holds nodes whose drain was refused earlier in this run; they
	// are the last candidates for removal.
	avoid map[string]bool
	// fresh holds nodes this run joined: the loop waits for them to
	// become ready. A node already not ready when the run began is
	// reported, not waited on.
	fresh map[string]bool
	// rotate holds nodes whose mesh keys rotate whatever their age.
	rotate map[string]bool
	// destroy tears everything down without the platform.
	destroy bool
	// rebuild allows initialising a platform over a lost one.
	rebuild bool
	ids     *nodeNumbers
	// limits are the drivers that cap groups (limits.go).
	limits map[string]provider.GroupLimiter
}

// Join failures: after maxJoinFailures in a row, a deployment's launches
// back off, from joinBackoff doubling up to maxJoinBackoff.
const (
	maxJoinFailures = 3
	joinBackoff     = 5 * time.Minute
	maxJoinBackoff  = time.Hour
)

// retryAt is when a deployment with f may launch again: never later than
// maxJoinBackoff from now, whatever clock wrote f.LastAt.
func retryAt(f districts.Failure, now time.Time) time.Time {
	if f.Count < maxJoinFailures {
		return time.Time{}
	}
	d := joinBackoff
	for i := maxJoinFailures; i < f.Count && d < maxJoinBackoff; i++ {
		d *= 2
	}
	return notAfter(f.LastAt, now).Add(min(d, maxJoinBackoff))
}

// buildPlan diffs the observed world against the intended cluster and
// returns the actions of the next round.
func buildPlan(in planInput) Plan {
	p := Plan{Cluster: in.cluster.ID, Notes: slices.Clone(in.world.notes), Warnings: slices.Clone(in.world.warnings)}
	if in.destroy {
		planDestroy(in, &p)
		return finishPlan(p)
	}
	if wantsNothing(in.cluster) && len(in.world.live()) > 0 {
		p.Blocked = append(p.Blocked, ErrWouldDestroy.Error())
		return finishPlan(p)
	}
	c := classify(in)
	var launches, removals []Action
	nodeWork := true
	meshNet, meshErr := meshSettings(in.cluster, in.districts, in.world.state)
	switch w := in.world; {
	case w.platform == platformUnreachable:
		p.Blocked = append(p.Blocked, fmt.Sprintf("no node is changed while the platform does not answer: %v", w.platformErr))
		nodeWork = false
	case meshErr != nil:
		p.Blocked = append(p.Blocked, meshErr.Error())
		nodeWork = false
	case w.platform == platformNone && !w.state.PlatformFormedAt.IsZero() && !in.rebuild:
		p.Blocked = append(p.Blocked, fmt.Sprintf("%v: a master joined on %s (resources.json), but no node is a member of a platform now; transit initialises a new one over the nodes only with --rebuild-platform",
			ErrPlatformLost, w.state.PlatformFormedAt.UTC().Format(time.RFC3339)))
		nodeWork = false
	}
	if nodeWork {
		for _, role := range slices.Sorted(maps.Keys(c.roles)) {
			l, r := planRole(in, c, c.roles[role], &p)
			launches = append(launches, l...)
			removals = append(removals, r...)
		}
		p.Actions = append(p.Actions, launches...)
		p.Actions = append(p.Actions, planInstalls(launches)...)
		joins := planJoins(in, c, launches, &p)
		p.Actions = append(p.Actions, joins...)
		removals = append(removals, planHeld(in, c, joins, &p)...)
		p.Actions = append(p.Actions, planChanges(in, c, &p)...)
		p.Actions = append(p.Actions, planForget(in, &p)...)
		if in.world.platform == platformNone && !in.world.state.PlatformFormedAt.IsZero() {
			// Rebuilding a lost platform: its old members cannot be
			// asked to leave yet; nothing goes before the new one
			// answers, except machines that are no members and never
			// will be (a failed install, join or launch, a copy), which
			// would otherwise hold back new masters.
			removals = slices.DeleteFunc(removals, func(a Action) bool {
				n, ok := in.world.node(a.Node)
				return !ok || n.Phase.Member() || !n.JoinFailed && n.Phase != districts.PhaseFailed && n.CopyOf == ""
			})
		}
		// Workers leave before masters; masters leave last, one at a time.
		slices.SortStableFunc(removals, mastersLast)
		p.Actions = append(p.Actions, removals...)
		p.Actions = append(p.Actions, planMesh(in, meshNet, removals)...)
		p.Actions = append(p.Actions, planRotations(in, meshNet, removals, &p)...)
	}
	meshPort := 0
	if meshErr == nil && meshNet.Mesh == districts.MeshWireGuard {
		meshPort = meshNet.MeshPort
	}
	p.Actions = append(p.Actions, planGroups(in, launches, removals, meshPort, &p)...)
	if !checkGroupLimits(in, launches, meshPort != 0, &p) {
		p.Actions = nil // refused as a whole: nothing half-done
	}
	return finishPlan(p)
}

// finishPlan orders the actions by stage, keeping each stage's order.
func finishPlan(p Plan) Plan {
	slices.SortStableFunc(p.Actions, func(a, b Action) int { return cmp.Compare(a.Kind.Stage(), b.Kind.Stage()) })
	return p
}

func wantsNothing(c districts.Cluster) bool {
	for _, d := range c.Deployments {
		if d.Quantity > 0 {
			return false
		}
	}
	return true
}

// mastersLast orders actions on workers before those on masters, which
// leave last, one at a time.
func mastersLast(a, b Action) int {
	return cmp.Compare(b2i(a.Role == districts.RoleMaster), b2i(b.Role == districts.RoleMaster))
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// classified is the live nodes sorted into deployment lines and roles.
type classified struct {
	desired map[districts.DeploymentKey]districts.Deployment
	byKey   map[districts.DeploymentKey][]*districts.Node
	roles   map[string]*roleWork
	// keep are the nodes that stay: members to label, non-members to join.
	keep []*districts.Node
}

// roleWork is one role's part of the change.
type roleWork struct {
	role    string
	want    int
	present int // live machines that count toward the role's size
	ready   int // members the platform reports ready and schedulable
	adds    []districts.DeploymentKey
	excess  []*districts.Node // more than their line wants, cheapest first
	// replace are removed whatever the counts: failed joins the platform
	// confirms are no members, members unhealthy for longer than
	// strategy.replace_unhealthy_after.
	replace []*districts.Node
	// floor is how many members must stay ready while ready ones leave
	// (each drain's KeepReady); held are the ready excess members the
	// round's start cannot spare.
	floor int
	held  []*districts.Node
}

// removalRank orders removal candidates: the cheapest and least useful
// first. Nodes an interrupted run left cordoned come before any healthy
// one is cordoned, so they never add to max_unavailable.
var removalRank = map[districts.Phase]int{
	districts.PhaseFailed:   0,
	districts.PhaseLaunched: 0,
	districts.PhaseLeft:     1,
	districts.PhaseDrained:  2,
	districts.PhaseDraining: 3,
	districts.PhaseNotReady: 4,
	districts.PhaseStopped:  4,
	districts.PhaseCordoned: 5,
	districts.PhaseJoined:   6,
}

// classify sorts the live nodes into deployment lines and roles, and
// picks per line the nodes to keep and the excess.
func classify(in planInput) classified {
	c := classified{
		desired: map[districts.DeploymentKey]districts.Deployment{},
		byKey:   map[districts.DeploymentKey][]*districts.Node{},
		roles:   map[string]*roleWork{},
	}
	for _, d := range in.cluster.Deployments {
		c.desired[d.Key()] = d
	}
	for _, n := range in.world.live() {
		c.byKey[n.Key()] = append(c.byKey[n.Key()], n)
	}
	keys := slices.Collect(maps.Keys(c.desired))
	for k := range c.byKey {
		if _, ok := c.desired[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b districts.DeploymentKey) int {
		return cmp.Or(cmp.Compare(a.Role, b.Role), cmp.Compare(a.District, b.District), cmp.Compare(a.Flavor, b.Flavor))
	})
	unhealthyAfter := in.cluster.Strategy.Resolved().ReplaceUnhealthyAfter
	chosen := autoscalerChose(in.world.state)
	order := func(a, b *districts.Node) int { return removeOrder(a, b, in.avoid, chosen) }
	for _, k := range keys {
		rw := c.roles[k.Role]
		if rw == nil {
			rw = &roleWork{role: k.Role}
			c.roles[k.Role] = rw
		}
		want := c.desired[k].Quantity
		rw.want += want
		var usable []*districts.Node
		for _, n := range c.byKey[k] {
			switch {
			case n.CopyOf != "" || n.Phase == districts.PhaseFailed:
				rw.replace = append(rw.replace, n)
			case n.JoinFailed && !n.Phase.Member():
				rw.replace = append(rw.replace, n)
			case unhealthyAfter > 0 && (n.Phase == districts.PhaseNotReady || n.Phase == districts.PhaseStopped) && !in.fresh[n.ID] &&
				!n.NotReadySince.IsZero() && in.world.now.Sub(n.NotReadySince) >= unhealthyAfter:
				rw.replace = append(rw.replace, n)
			default:
				usable = append(usable, n)
			}
		}
		slices.SortFunc(usable, order)
		rw.present += len(usable)
		for _, n := range usable {
			if n.Phase == districts.PhaseJoined {
				rw.ready++
			}
		}
		if n := len(usable) - want; n > 0 {
			rw.excess = append(rw.excess, usable[:n]...)
			c.keep = append(c.keep, usable[n:]...)
		} else {
			c.keep = append(c.keep, usable...)
			for range -n {
				rw.adds = append(rw.adds, k)
			}
		}
	}
	for _, rw := range c.roles {
		slices.SortStableFunc(rw.excess, order)
	}
	return c
}

// removeOrder orders removal candidates: cheapest phase first, nodes whose
// drain was refused last, those transit autoscale chose before others,
// then newest first.
func removeOrder(a, b *districts.Node, avoid, chosen map[string]bool) int {
	return cmp.Or(
		cmp.Compare(b2i(avoid[a.ID]), b2i(avoid[b.ID])),
		cmp.Compare(removalRank[a.Phase], removalRank[b.Phase]),
		cmp.Compare(b2i(!chosen[a.ID]), b2i(!chosen[b.ID])),
		b.CreatedAt.Compare(a.CreatedAt),
		-districts.CompareNodeIDs(a.ID, b.ID),
	)
}

// autoscalerChose are the nodes transit autoscale chose to remove: its
// scale-down found them underused with workloads that fit elsewhere.
func autoscalerChose(s districts.Resources) map[string]bool {
	chosen := map[string]bool{}
	if s.Autoscale != nil {
		for _, a := range s.Autoscale.Deployments {
			for _, id := range a.Remove {
				chosen[id] = true
			}
		}
	}
	return chosen
}

// planRole plans one role's launches and removals.
//
// A pure scale-up launches everything at once. While nodes of the role
// are also removed or replaced, it never runs more than max_surge
// machines above its intended size. Removing a member that is ready needs
// the role to keep its intended size in ready members (with max_surge 0:
// the intended size less max_unavailable): new nodes count once the
// platform reports them ready, never because transit joined them. The
// ready members the round's start cannot spare are held for planHeld.
func planRole(in planInput, c classified, rw *roleWork, p *Plan) (launches, removals []Action) {
	strat := in.cluster.Strategy.Resolved()
	removing := len(rw.excess)+len(rw.replace) > 0
	nAdd := len(rw.adds)
	if removing {
		nAdd = min(nAdd, max(rw.want+strat.MaxSurge-rw.present-len(rw.replace), 0))
	}
	blocked := map[districts.DeploymentKey]bool{}
	for _, k := range rw.adds[:nAdd] {
		f := in.world.state.Failures[k.String()]
		if at := retryAt(f, in.world.now); in.world.now.Before(at) {
			if !blocked[k] {
				p.Blocked = append(p.Blocked, fmt.Sprintf("%s: %d launched nodes in a row failed to install or join (last: %s); no relaunch before %s",
					k, f.Count, f.LastError, at.UTC().Format(time.RFC3339)))
			}
			blocked[k] = true
			continue
		}
		if in.world.blocked[k.District] != "" {
			continue
		}
		id := in.ids.id(k.Role)
		launches = append(launches, Action{
			Kind: KindLaunch, District: k.District, Node: id, Role: k.Role, Flavor: k.Flavor,
			Reason: fmt.Sprintf("%s wants %d, has %d", k, c.desired[k].Quantity, len(c.byKey[k])),
		})
	}

	rw.floor = rw.want
	if strat.MaxSurge == 0 {
		rw.floor = max(rw.want-strat.MaxUnavailable, 0)
	}
	if rw.role == districts.RoleMaster {
		rw.floor = max(rw.floor, 1)
	}
	// Every drain keeps the floor: a member not ready now may be ready
	// when its drain comes (see readyGate).
	for _, n := range rw.replace {
		reason := "its install or join failed and the platform does not list it: replaced"
		switch {
		case n.CopyOf != "":
			reason = fmt.Sprintf("a copy of node %s (the platform, or resources.json, has another machine as %s): removed", n.CopyOf, n.CopyOf)
		case n.Phase == districts.PhaseFailed:
			reason = n.Message + ": replaced"
		case n.Phase == districts.PhaseStopped:
			reason = fmt.Sprintf("its machine is %s and the member not ready since %s, longer than strategy.replace_unhealthy_after: replaced", n.Machine, n.NotReadySince.UTC().Format(time.RFC3339))
		case n.Phase.Member():
			reason = fmt.Sprintf("not ready since %s, longer than strategy.replace_unhealthy_after: replaced", n.NotReadySince.UTC().Format(time.RFC3339))
		}
		removals = append(removals, removalChain(n, reason, rw.floor)...)
	}
	budget := rw.ready - rw.floor
	for _, n := range rw.excess {
		if n.Phase == districts.PhaseJoined {
			// Removing a ready member costs availability.
			if budget <= 0 {
				rw.held = append(rw.held, n)
				continue
			}
			budget--
		}
		removals = append(removals, removalChain(n, removalReason(n, c), rw.floor)...)
	}
	return launches, removals
}

// planHeld removes ready members the round's start could not spare in
// the same round when as many members of their role join in it: each
// drain waits until the platform reports enough ready members without it
// (KeepReady), so a node leaves as soon as a replacement serves instead
// of a round later. The others stay for now, and the plan says why.
func planHeld(in planInput, c classified, joins []Action, p *Plan) []Action {
	var out []Action
	for _, role := range slices.Sorted(maps.Keys(c.roles)) {
		rw := c.roles[role]
		if len(rw.held) == 0 {
			continue
		}
		n := 0
		if in.world.platform == platformUp {
			for _, a := range joins {
				if a.Kind == KindJoin && a.Role == role {
					n++
				}
			}
			n = min(n, len(rw.held))
		}
		for _, h := range rw.held[:n] {
			out = append(out, removalChain(h, removalReason(h, c), rw.floor)...)
		}
		if n == len(rw.held) {
			continue
		}
		var ids []string
		for _, h := range rw.held[n:] {
			ids = append(ids, h.ID)
		}
		p.Blocked = append(p.Blocked, fmt.Sprintf("%s stays for now: the %ss have %d ready member(s); removing a ready one needs at least %d%s",
			strings.Join(ids, ", "), rw.role, rw.ready, rw.floor+1, unavailableHint(in.world, rw.role)))
	}
	return out
}

// unavailableHint names the members of role that are not ready or
// cordoned, which is why a role lacks ready members.
func unavailableHint(w world, role string) string {
	var ids []string
	for _, n := range w.live() {
		if n.Role == role && n.Phase.Member() && n.Phase != districts.PhaseJoined {
			ids = append(ids, fmt.Sprintf("%s (%s)", n.ID, n.Phase))
		}
	}
	if len(ids) == 0 {
		return " (new nodes count once the platform reports them ready)"
	}
	return "; not ready or cordoned: " + strings.Join(ids, ", ")
}

// removalChain is how a node leaves: a member is drained, removed from
// the platform and terminated; a machine the platform does not have is
// just terminated. keep is the drain's KeepReady.
func removalChain(n *districts.Node, reason string, keep int) []Action {
	base := Action{District: n.District, Node: n.ID, Role: n.Role, Flavor: n.Flavor, Reason: reason}
	var out []Action
	if n.Phase.Member() {
		if n.Phase != districts.PhaseDrained {
			a := base
			a.Kind, a.KeepReady = KindDrain, keep
			out = append(out, a)
		}
		a := base
		a.Kind = KindRemove
		out = append(out, a)
	}
	a := base
	a.Kind = KindTerminate
	return append(out, a)
}

func removalReason(n *districts.Node, c classified) string {
	k := n.Key()
	if d, ok := c.desired[k]; ok {
		return fmt.Sprintf("%s wants %d, has %d", k, d.Quantity, len(c.byKey[k]))
	}
	return fmt.Sprintf("%s is not in cluster.json", k)
}

// planInstalls installs the platform's software on each new machine as
// soon as it runs, while the groups are changed and the first master
// initialises: joins then only join.
func planInstalls(launches []Action) []Action {
	out := make([]Action, 0, len(launches))
	for _, a := range launches {
		out = append(out, Action{Kind: KindInstall, District: a.District, Node: a.Node, Role: a.Role, Flavor: a.Flavor, Reason: "new machine"})
	}
	return out
}

// planJoins joins the kept nodes the platform does not have, and the
// nodes launched this round. When no platform exists yet (and none ever
// formed, or a rebuild was asked for), the first master initialises it and
// the others wait for it.
func planJoins(in planInput, c classified, launches []Action, p *Plan) []Action {
	var joins []Action
	for _, n := range c.keep {
		m, member := in.world.members[n.ID]
		switch {
		case !member && !n.Phase.Member() && in.world.starting[n.ID]:
			p.Waiting = append(p.Waiting, fmt.Sprintf("machine %s of node %s is still starting (the cloud reports it pending or without an address)", n.ProviderID, n.ID))
		case !member && !n.Phase.Member():
			joins = append(joins, Action{Kind: KindJoin, District: n.District, Node: n.ID, Role: n.Role, Flavor: n.Flavor,
				Reason: fmt.Sprintf("node is %s, not a member of the platform", n.Phase)})
		case member && m.Role != "" && m.Role != n.Role:
			joins = append(joins, Action{Kind: KindJoin, District: n.District, Node: n.ID, Role: n.Role, Flavor: n.Flavor,
				Reason: fmt.Sprintf("the platform has it as a %s; cluster.json makes it a %s", m.Role, n.Role)})
		}
	}
	for _, a := range launches {
		joins = append(joins, Action{Kind: KindJoin, District: a.District, Node: a.Node, Role: a.Role, Flavor: a.Flavor, Reason: "new node"})
	}
	if in.world.platform != platformNone || len(joins) == 0 {
		return joins
	}
	i := slices.IndexFunc(joins, func(a Action) bool { return a.Role == districts.RoleMaster })
	if i < 0 {
		p.Blocked = append(p.Blocked, "no platform exists and no master is there to initialise it: the other nodes cannot join yet")
		return nil
	}
	first := joins[i]
	first.Kind, first.Reason = KindInit, "first master: no platform exists yet"
	if in.rebuild && !in.world.state.PlatformFormedAt.IsZero() {
		first.Reason = "--rebuild-platform: the platform that formed before is lost"
	}
	joins = slices.Delete(joins, i, i+1)
	for j := range joins {
		joins[j].After = []string{first.Node}
	}
	return append([]Action{first}, joins...)
}

// planChanges labels kept members whose labels differ from their tags and
// uncordons the ones transit's own interrupted drain left cordoned. A
// cordon someone else set is left alone; members not ready are waited on
// when this run joined them, reported otherwise.
func planChanges(in planInput, c classified, p *Plan) []Action {
	var out []Action
	for _, n := range c.keep {
		if !n.Phase.Member() {
			continue
		}
		switch n.Phase {
		case districts.PhaseStopped:
			p.Warnings = append(p.Warnings, fmt.Sprintf("node %s: the cloud reports its machine %s; not waited on%s",
				n.ID, n.Machine, unhealthyHint(in.cluster)))
		case districts.PhaseNotReady:
			if in.fresh[n.ID] {
				p.Waiting = append(p.Waiting, fmt.Sprintf("node %s to become ready (it joined in this run)", n.ID))
			} else {
				since := ""
				if !n.NotReadySince.IsZero() {
					since = " since " + n.NotReadySince.UTC().Format(time.RFC3339)
				}
				p.Warnings = append(p.Warnings, fmt.Sprintf("node %s: the platform reports it not ready%s; not waited on%s",
					n.ID, since, unhealthyHint(in.cluster)))
			}
		case districts.PhaseCordoned:
			p.Warnings = append(p.Warnings, fmt.Sprintf("node %s is cordoned, and not by transit: left alone", n.ID))
		case districts.PhaseDraining, districts.PhaseDrained:
			out = append(out, Action{Kind: KindUncordon, District: n.District, Node: n.ID, Role: n.Role, Flavor: n.Flavor,
				Reason: "transit's own interrupted drain left the wanted node cordoned"})
		}
		if want := c.desired[n.Key()].Tags; !maps.Equal(n.Tags, want) {
			out = append(out, Action{Kind: KindLabel, District: n.District, Node: n.ID, Role: n.Role, Flavor: n.Flavor,
				Reason: "labels differ from the deployment's tags: " + tagDiff(n.Tags, want)})
		}
	}
	return out
}

func unhealthyHint(c districts.Cluster) string {
	if d := c.Strategy.Resolved().ReplaceUnhealthyAfter; d > 0 {
		return fmt.Sprintf(" (replaced once unhealthy for %s)", d)
	}
	return " (set strategy.replace_unhealthy_after to replace such nodes)"
}

// planForget removes from the platform the members whose machines are
// gone (deleted behind transit's back), before they distort quorum. A
// member the platform still calls ready, or one transit did not name, is
// not transit's to remove.
func planForget(in planInput, p *Plan) []Action {
	var out []Action
	for _, m := range in.world.strays {
		if m.Ready {
			p.Warnings = append(p.Warnings, fmt.Sprintf("the platform lists %s as a ready member, but no machine of this cluster is %s: left alone", m.NodeID, m.NodeID))
			continue
		}
		if !transitName(in.cluster.ID, m.NodeID) {
			// Someone joined it by hand; it may only be rebooting.
			p.Warnings = append(p.Warnings, fmt.Sprintf("the platform lists %s as a member that is down; transit did not make it: left alone", m.NodeID))
			continue
		}
		out = append(out, Action{Kind: KindForget, Node: m.NodeID, Role: m.Role,
			Reason: "the platform lists it as a member that is down, and its machine is gone"})
	}
	slices.SortStableFunc(out, mastersLast)
	return out
}

// transitName says id is a node name transit gives in cluster.
func transitName(cluster, id string) bool {
	_, master := nodeNumber(cluster, districts.RoleMaster, id)
	_, worker := nodeNumber(cluster, districts.RoleWorker, id)
	return master || worker
}

// planGroups keeps every district with nodes, or about to get some, behind
// a group that lets in every node of the cluster: created before
// launches, widened before joins, narrowed after removals, deleted once
// the district's machines are gone. On the node mesh (meshPort not 0) the
// group lets in the mesh's port from anywhere and no node address: it
// stays as it is while nodes come and go.
func planGroups(in planInput, launches, removals []Action, meshPort int, p *Plan) []Action {
	c := in.cluster
	live := in.world.live()
	sources := addressesOf(live)
	needGroup, launching := map[string]bool{}, map[string]bool{}
	for _, n := range live {
		needGroup[n.District] = true
	}
	for _, a := range launches {
		needGroup[a.District], launching[a.District] = true, true
	}
	groups := map[string]districts.SecurityGroup{}
	for _, g := range in.world.state.SecurityGroups {
		groups[g.District] = g
	}
	terminated := map[string]bool{}
	for _, a := range removals {
		if a.Kind == KindTerminate {
			terminated[a.Node] = true
		}
	}
	// Unless the platform answered (or none ever formed), nothing
	// confirms that a machine the listings lack is gone (resources.json
	// lost and a listing that answers an empty page look alike): groups
	// only widen.
	narrow := in.world.platform == platformUp || in.world.platform == platformNone && in.world.state.PlatformFormedAt.IsZero()
	mesh := meshPort != 0
	if mesh {
		// No node needs another's address let in: one that a group still
		// has (made before the cluster was on the mesh) goes, whatever
		// the platform says.
		sources = nil
	}
	var out []Action
	for _, d := range in.districts {
		g, has := groups[d.ID]
		name := provider.GroupName(c.ID, d.ID)
		if why := in.world.blocked[d.ID]; why != "" {
			if needGroup[d.ID] || wants(c, d.ID) {
				p.Blocked = append(p.Blocked, why)
			}
			continue
		}
		switch {
		case needGroup[d.ID] && !has:
			out = append(out, Action{Kind: KindCreateGroup, District: d.ID, Group: name,
				Reason: "the district has or gets nodes and has no security group"})
		case needGroup[d.ID] && mesh && (g.MeshPort != meshPort || len(g.Sources) > 0):
			out = append(out, Action{Kind: KindUpdateGroup, District: d.ID, Group: name,
				Reason: fmt.Sprintf("let in the mesh's UDP port %d from anywhere and no node address (has port %d and %d addresses)", meshPort, g.MeshPort, len(g.Sources))})
		case needGroup[d.ID] && !slices.Equal(g.Sources, sources) && narrow:
			out = append(out, Action{Kind: KindUpdateGroup, District: d.ID, Group: name,
				Reason: fmt.Sprintf("allow exactly the cluster's %d node addresses (has %d)", len(sources), len(g.Sources))})
		case needGroup[d.ID] && !subset(sources, g.Sources):
			out = append(out, Action{Kind: KindUpdateGroup, District: d.ID, Group: name, Widen: true,
				Reason: fmt.Sprintf("allow the cluster's %d node addresses, keeping the %d it has: the platform does not confirm the machines the listings lack are gone", len(sources), len(g.Sources))})
		case !narrow:
		case !needGroup[d.ID] && has && in.world.terminating[d.ID] > 0 && !in.world.eagerGroups[d.ID]:
			p.Waiting = append(p.Waiting, fmt.Sprintf("%d terminating machine(s) in %s to be gone before deleting group %s", in.world.terminating[d.ID], d.ID, name))
		case !needGroup[d.ID] && has:
			out = append(out, Action{Kind: KindDeleteGroup, District: d.ID, Group: name, Reason: "no nodes left in the district"})
		case has && needGroup[d.ID] && !launching[d.ID] && !wants(c, d.ID) && len(terminated) > 0 &&
			!remainsAfter(d.ID, live, terminated) && in.world.eagerGroups[d.ID]:
			// The round removes the district's last nodes, and its cloud
			// deletes a group its machines still use: it goes once they
			// left, without waiting for their terminations.
			out = append(out, Action{Kind: KindDeleteGroup, District: d.ID, Group: name, Reason: "no nodes left in the district once its removals are done"})
		}
		if mesh {
			continue // nodes come and go without the group changing
		}
		if len(launches) > 0 && needGroup[d.ID] {
			out = append(out, Action{Kind: KindAllow, District: d.ID, Group: name, Widen: !narrow,
				Reason: fmt.Sprintf("allow %d new node(s) before they join", len(launches))})
		}
		if len(terminated) > 0 && (launching[d.ID] || needGroup[d.ID] && remainsAfter(d.ID, live, terminated)) {
			out = append(out, Action{Kind: KindRevoke, District: d.ID, Group: name,
				Reason: fmt.Sprintf("revoke the addresses of %d removed node(s)", len(terminated))})
		}
	}
	for _, g := range in.world.orphanGroups {
		out = append(out, Action{Kind: KindDeleteGroup, District: g.District, Group: g.ID, Reason: "orphaned group with the cluster's tags"})
	}
	return out
}

// subset says every address of a is in b.
func subset(a, b []string) bool {
	in := make(map[string]bool, len(b)) // a group of 10,000 addresses: no scan per address
	for _, x := range b {
		in[x] = true
	}
	for _, x := range a {
		if !in[x] {
			return false
		}
	}
	return true
}

func wants(c districts.Cluster, district string) bool {
	for _, d := range c.Deployments {
		if d.District == district && d.Quantity > 0 {
			return true
		}
	}
	return false
}

// planDestroy terminates every machine (the platform goes with them, so
// nothing is drained) and deletes each group once its district's machines
// are gone, or, where the cloud allows it, right after their terminations
// are asked for (the delete stage comes after the remove stage).
func planDestroy(in planInput, p *Plan) {
	live := in.world.live()
	emptied := map[string]int{}
	for _, n := range live {
		p.Actions = append(p.Actions, Action{Kind: KindTerminate, District: n.District, Node: n.ID, Role: n.Role, Flavor: n.Flavor,
			Reason: "destroy: the whole cluster goes"})
		emptied[n.District]++
	}
	waited := map[string]bool{}
	for _, g := range in.world.state.SecurityGroups {
		switch n := emptied[g.District] + in.world.terminating[g.District]; {
		case n > 0 && !in.world.eagerGroups[g.District]:
			p.Waiting = append(p.Waiting, fmt.Sprintf("%d machine(s) in %s to be gone before deleting group %s", n, g.District, g.ID))
			waited[g.District] = true
		default:
			p.Actions = append(p.Actions, Action{Kind: KindDeleteGroup, District: g.District, Group: g.ID, Reason: "destroy: no nodes left in the district"})
		}
	}
	// Destroy is done when the clouds hold nothing: machines still
	// terminating are waited for also where their group may go first.
	for _, d := range slices.Sorted(maps.Keys(in.world.terminating)) {
		if n := in.world.terminating[d]; n > 0 && !waited[d] {
			p.Waiting = append(p.Waiting, fmt.Sprintf("%d terminating machine(s) in %s to be gone", n, d))
		}
	}
	for _, g := range in.world.orphanGroups {
		p.Actions = append(p.Actions, Action{Kind: KindDeleteGroup, District: g.District, Group: g.ID, Reason: "orphaned group with the cluster's tags"})
	}
}

func remainsAfter(district string, live []*districts.Node, removed map[string]bool) bool {
	for _, n := range live {
		if n.District == district && !removed[n.ID] {
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
