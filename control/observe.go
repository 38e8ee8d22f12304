package control

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// platformView is what the platform said when asked.
type platformView int

const (
	platformNotAsked    platformView = iota // no refresh, destroy, or no live node to ask
	platformUp                              // a master answered
	platformNone                            // every node answered: none is a member
	platformUnreachable                     // no master answered
)

// world is what one observation found: the current state plus what the
// plan needs beyond resources.json.
type world struct {
	state districts.Resources
	// terminating counts machines still dying, per district.
	terminating map[string]int
	// eagerGroups are the districts whose cloud deletes a group that
	// terminating machines are still in (InUseGroupDeleter).
	eagerGroups map[string]bool
	// orphanGroups carry the cluster's tags but are not the group transit
	// would make for a known district.
	orphanGroups []districts.SecurityGroup
	platform     platformView
	platformErr  error
	// members are the platform's members by node id: those of live
	// nodes, and strays, whose machine the clouds no longer have.
	members map[string]provider.Member
	strays  []provider.Member
	// blocked holds districts where another cluster of the same name
	// owns the group name transit would use.
	blocked map[string]string
	// starting holds the nodes whose machine the cloud reports pending
	// or without an address (adopted after a crash during its launch):
	// waited for, not joined.
	starting map[string]bool
	notes    []string
	warnings []string
	now      time.Time
}

// live returns the nodes that are not terminating.
func (w world) live() []*districts.Node { return liveNodes(w.state) }

// node is the live node id.
func (w world) node(id string) (*districts.Node, bool) {
	for _, n := range w.live() {
		if n.ID == id {
			return n, true
		}
	}
	return nil, false
}

// observe lists every district's tagged machines and groups in parallel,
// asks the platform which nodes are members, and merges that with the last
// saved state: the clouds and the platform win. It writes nothing.
func observe(ctx context.Context, opts Options) (world, error) {
	cluster := opts.Cluster.ID
	if err := districts.CheckStateDistricts(opts.State, opts.Districts, "resources.json"); err != nil {
		return world{}, err
	}
	type listing struct {
		instances []provider.Instance
		groups    []provider.Group
	}
	listings := make([]listing, len(opts.Districts))
	g, gctx := errgroup.WithContext(ctx)
	for i, d := range opts.Districts {
		infra, ok := opts.Infra[d.ID]
		if !ok {
			return world{}, fmt.Errorf("district %q: no infrastructure driver", d.ID)
		}
		g.Go(func() error {
			inst, groups, err := infra.List(gctx, cluster)
			if err != nil {
				return fmt.Errorf("district %q: list machines and groups: %w", d.ID, err)
			}
			listings[i] = listing{inst, groups}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return world{}, err
	}

	// Which lineage is this cluster? The state says; without a state
	// (first apply, or resources.json lost) the clouds must show one.
	lineage, legacy := opts.State.Lineage, opts.State.Lineage == "" && len(opts.State.Nodes)+len(opts.State.SecurityGroups) > 0
	if lineage == "" && !legacy {
		seen := map[string]int{}
		for _, l := range listings {
			for _, in := range l.instances {
				if in.Tags[districts.TagCluster] == cluster && in.ProviderID != "" {
					seen[in.Tags[districts.TagLineage]]++
				}
			}
			for _, gr := range l.groups {
				if gr.Tags[districts.TagCluster] == cluster {
					seen[gr.Tags[districts.TagLineage]]++
				}
			}
		}
		switch len(seen) {
		case 0:
		case 1:
			for l := range seen {
				lineage = l
			}
		default:
			var parts []string
			for _, l := range slices.Sorted(maps.Keys(seen)) {
				name := l
				if name == "" {
					name = "(untagged)"
				}
				parts = append(parts, fmt.Sprintf("%s (%d resources)", name, seen[l]))
			}
			return world{}, fmt.Errorf("%w: the clouds hold resources of cluster %q from %d lineages: %s; without resources.json transit cannot tell which cluster is this one: restore resources.json (it records the lineage), or rename one cluster",
				ErrForeign, cluster, len(seen), strings.Join(parts, ", "))
		}
	}

	w := world{terminating: map[string]int{}, eagerGroups: map[string]bool{}, blocked: map[string]string{}, starting: map[string]bool{}, now: opts.Clock.Now()}
	for id, infra := range opts.Infra {
		if e, ok := infra.(provider.InUseGroupDeleter); ok && e.DeletesGroupsInUse() {
			w.eagerGroups[id] = true
		}
	}
	w.state = districts.Resources{
		Type: "resources", Version: districts.ResourcesVersion, Cluster: cluster, Lineage: lineage,
		Serial: opts.State.Serial, UpdatedAt: opts.State.UpdatedAt, PlatformFormedAt: opts.State.PlatformFormedAt,
		NodeNumbers: maps.Clone(opts.State.NodeNumbers), Failures: maps.Clone(opts.State.Failures),
	}
	ours := func(tags map[string]string) bool {
		return tags[districts.TagCluster] == cluster && tags[districts.TagLineage] == lineage
	}
	byProvider := map[string]districts.Node{}
	for _, n := range opts.State.Nodes {
		byProvider[n.District+"\x00"+n.ProviderID] = n
	}
	seen := map[string]bool{}
	ids := map[string]bool{}
	for i, d := range opts.Districts {
		for _, inst := range listings[i].instances {
			// Re-check the tags: a driver bug must never make transit
			// touch a machine it did not create.
			if inst.Tags[districts.TagCluster] != cluster || inst.ProviderID == "" {
				continue
			}
			if !ours(inst.Tags) {
				w.warnings = append(w.warnings, fmt.Sprintf("machine %s (%s) in district %s belongs to another cluster named %q (lineage %q, this one is %q): never adopted, never touched",
					inst.Tags[districts.TagNode], inst.ProviderID, d.ID, cluster, inst.Tags[districts.TagLineage], lineage))
				continue
			}
			key := d.ID + "\x00" + inst.ProviderID
			seen[key] = true
			n, tracked := byProvider[key]
			if !tracked {
				n = nodeFromInstance(cluster, d.ID, inst)
				if inst.State != provider.InstanceTerminating {
					w.notes = append(w.notes, fmt.Sprintf("adopted node %s (%s) in district %s: it carries transit's tags but was missing from resources.json", n.ID, inst.ProviderID, d.ID))
				}
			}
			if ids[n.ID] {
				// Two machines claim one name (copied tags): keep both,
				// told apart by the cloud's id, so the surplus is removed.
				w.notes = append(w.notes, fmt.Sprintf("machine %s in district %s carries node id %s, which another machine has; tracking it as %s", inst.ProviderID, d.ID, n.ID, inst.ProviderID))
				n.ID = inst.ProviderID
			}
			ids[n.ID] = true
			n.PublicIP, n.PrivateIP = inst.PublicIP, inst.PrivateIP
			if inst.Zone != "" {
				n.Zone = inst.Zone
			}
			if inst.State == provider.InstanceTerminating {
				n.Phase = districts.PhaseTerminating
				w.terminating[d.ID]++
			} else if inst.State == provider.InstancePending || len(n.Addresses()) == 0 {
				w.starting[n.ID] = true
			}
			w.state.Nodes = append(w.state.Nodes, n)
		}
		for _, gr := range listings[i].groups {
			if gr.Tags[districts.TagCluster] != cluster {
				continue
			}
			if !ours(gr.Tags) {
				msg := fmt.Sprintf("security group %s (%s) in district %s belongs to another cluster named %q (lineage %q): never touched", gr.Name, gr.ProviderID, d.ID, cluster, gr.Tags[districts.TagLineage])
				w.warnings = append(w.warnings, msg)
				if gr.Name == provider.GroupName(cluster, d.ID) {
					w.blocked[d.ID] = msg + "; it holds the group name this cluster needs there: rename one of the two clusters"
				}
				continue
			}
			sg := districts.SecurityGroup{
				Type: "security_group", ID: gr.Name, Cluster: cluster, District: d.ID,
				ProviderID: gr.ProviderID, Sources: slices.Sorted(slices.Values(gr.Sources)),
			}
			for _, old := range opts.State.SecurityGroups {
				if old.District == d.ID && old.ProviderID == gr.ProviderID {
					sg.CreatedAt, sg.UpdatedAt = old.CreatedAt, old.UpdatedAt
				}
			}
			if _, dup := findGroup(w.state, d.ID); dup || gr.Name != provider.GroupName(cluster, d.ID) {
				w.orphanGroups = append(w.orphanGroups, sg)
				continue
			}
			w.state.SecurityGroups = append(w.state.SecurityGroups, sg)
		}
	}
	for _, n := range opts.State.Nodes {
		if !seen[n.District+"\x00"+n.ProviderID] && n.Phase != districts.PhaseTerminating {
			w.notes = append(w.notes, fmt.Sprintf("forgot node %s (%s): district %s no longer has it", n.ID, n.ProviderID, n.District))
		}
	}

	if !opts.Destroy {
		if err := observePlatform(ctx, opts.Platform, &w); err != nil {
			return world{}, err
		}
	}
	if len(w.live()) == 0 {
		// Nothing is left that could hold a platform.
		w.state.PlatformFormedAt = time.Time{}
	}
	sortState(&w.state)
	return w, nil
}

// observePlatform sets every live node's phase from what the platform
// says. A platform that cannot be asked is no error: the phases stay as
// resources.json has them and the plan changes no node.
func observePlatform(ctx context.Context, p provider.Platform, w *world) error {
	live := w.live()
	if len(live) == 0 {
		w.platform = platformNone // nothing to be a member of anything
		return nil
	}
	if p == nil {
		return errors.New("no platform driver to ask which nodes are members")
	}
	nodes := make([]districts.Node, len(live))
	for i, n := range live {
		nodes[i] = *n
	}
	list, err := p.Members(ctx, nodes)
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, provider.ErrNoPlatform):
		w.platform = platformNone
	case lost(err):
		// Every master answered, or none is left, and no master serves
		// the platform workers still belong to: it is lost; only
		// --rebuild-platform builds a new one.
		w.platform, w.platformErr = platformNone, err
		if w.state.PlatformFormedAt.IsZero() {
			w.state.PlatformFormedAt = w.now
		}
	case err != nil:
		// Whatever the reason, nobody can say who is a member: treat it
		// as unreachable, never as "no platform".
		w.platform, w.platformErr = platformUnreachable, err
		return nil
	default:
		w.platform = platformUp
	}
	w.members = map[string]provider.Member{}
	for _, m := range list {
		w.members[m.NodeID] = m
	}
	liveIDs := map[string]bool{}
	for _, n := range live {
		liveIDs[n.ID] = true
	}
	for _, id := range slices.Sorted(maps.Keys(w.members)) {
		if !liveIDs[id] {
			w.strays = append(w.strays, w.members[id])
		}
	}
	for _, n := range live {
		m, ok := w.members[n.ID]
		switch {
		case !ok && (n.Phase == districts.PhaseLeft || n.Phase == districts.PhaseDrained):
			n.Phase = districts.PhaseLeft
		case !ok:
			n.Phase = districts.PhaseLaunched
		case m.Draining && !n.CordonedByTransit:
			n.Phase = districts.PhaseCordoned
		case m.Draining && n.Phase == districts.PhaseDrained:
		case m.Draining:
			n.Phase = districts.PhaseDraining
		case !m.Ready:
			n.Phase = districts.PhaseNotReady
		default:
			n.Phase = districts.PhaseJoined
		}
		if ok {
			n.Tags = maps.Clone(m.Labels)
			n.JoinFailed = false
			if m.Role == districts.RoleMaster && m.Ready && w.state.PlatformFormedAt.IsZero() {
				w.state.PlatformFormedAt = w.now
			}
		} else {
			n.CordonedByTransit = false
		}
		if !m.Draining {
			n.CordonedByTransit = false
		}
		switch {
		case ok && !m.Ready && n.NotReadySince.IsZero():
			n.NotReadySince = w.now
		case !ok || m.Ready:
			n.NotReadySince = time.Time{}
		}
	}
	return nil
}

// lost says err reports a platform that no master serves although every
// master answered (or none is left).
func lost(err error) bool {
	ue, ok := errors.AsType[*provider.UnreachableError](err)
	return ok && ue.Lost()
}

func nodeFromInstance(cluster, district string, inst provider.Instance) districts.Node {
	id := inst.Tags[districts.TagNode]
	if id == "" {
		id = inst.ProviderID
	}
	return districts.Node{
		Type: "node", ID: id, Cluster: cluster, District: district,
		Role: inst.Tags[districts.TagRole], Flavor: inst.Tags[districts.TagFlavor],
		ProviderID: inst.ProviderID, Zone: inst.Zone, Phase: districts.PhaseLaunched,
		CreatedAt: inst.CreatedAt, UpdatedAt: inst.CreatedAt,
	}
}

func sortState(r *districts.Resources) {
	slices.SortFunc(r.Nodes, func(a, b districts.Node) int { return districts.CompareNodeIDs(a.ID, b.ID) })
	sort.Slice(r.SecurityGroups, func(i, j int) bool { return r.SecurityGroups[i].District < r.SecurityGroups[j].District })
}

// stateWorld is the world as resources.json alone describes it, for plans
// that call no cloud. The platform counts as up when the state records a
// joined master.
func stateWorld(r districts.Resources, now time.Time) world {
	w := world{state: r, terminating: map[string]int{}, blocked: map[string]string{}, now: now}
	w.state.Nodes = slices.Clone(r.Nodes)
	w.state.SecurityGroups = slices.Clone(r.SecurityGroups)
	w.members = map[string]provider.Member{}
	w.platform = platformNone
	for _, n := range r.Nodes {
		switch {
		case n.Phase == districts.PhaseTerminating:
			w.terminating[n.District]++
		case n.Phase.Member():
			w.members[n.ID] = provider.Member{NodeID: n.ID, Role: n.Role, Ready: n.Phase == districts.PhaseJoined,
				Draining: n.Phase != districts.PhaseJoined && n.Phase != districts.PhaseNotReady, Labels: n.Tags}
			if n.Role == districts.RoleMaster {
				w.platform = platformUp
			}
		}
	}
	sortState(&w.state)
	return w
}

// nodeNumbers hands out node ids <cluster>-<role>-<n>, counting on from the
// highest number the lineage ever used (resources.json's node_numbers, the
// machines, and the platform's members), so a name is never given twice.
type nodeNumbers struct {
	cluster string
	next    map[string]int
}

func newNodeNumbers(cluster string, w world) *nodeNumbers {
	nn := &nodeNumbers{cluster: cluster, next: map[string]int{}}
	for role, n := range w.state.NodeNumbers {
		nn.see(role, n)
	}
	for _, n := range w.state.Nodes {
		nn.seeID(n.Role, n.ID)
	}
	for _, m := range w.members {
		for _, role := range []string{districts.RoleMaster, districts.RoleWorker} {
			nn.seeID(role, m.NodeID)
		}
	}
	return nn
}

func (nn *nodeNumbers) see(role string, n int) {
	if n+1 > nn.next[role] {
		nn.next[role] = n + 1
	}
}

func (nn *nodeNumbers) seeID(role, id string) {
	if i, ok := nodeNumber(nn.cluster, role, id); ok {
		nn.see(role, i)
	}
}

// id returns the next node id of role.
func (nn *nodeNumbers) id(role string) string {
	n := max(nn.next[role], 1)
	nn.next[role] = n + 1
	return fmt.Sprintf("%s-%s-%d", nn.cluster, role, n)
}

// newLineage is 16 random lowercase letters and digits.
func newLineage() string { return strings.ToLower(rand.Text()[:16]) }

// nodeNumber is n of a node id <cluster>-<role>-<n>.
func nodeNumber(cluster, role, id string) (int, bool) {
	rest, ok := strings.CutPrefix(id, cluster+"-"+role+"-")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(rest)
	return i, err == nil && i >= 0
}
