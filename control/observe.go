package control

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/cloudtransit/transit/districts"
)

// world is what one observation found: the current state plus what the
// plan needs beyond resources.json.
type world struct {
	state districts.Resources
	// terminating counts machines still dying, per district.
	terminating map[string]int
	// orphanGroups carry the cluster's tags but are not the group transit
	// would make for a known district.
	orphanGroups []districts.SecurityGroup
	// platformUp is true when a master answered.
	platformUp bool
	notes      []string
}

// observe lists every district's tagged machines and groups in parallel,
// asks the platform which nodes are members, and merges that with the last
// saved state: the clouds and the platform win.
func observe(ctx context.Context, opts Options) (world, error) {
	cluster := opts.Cluster.ID
	known := map[string]bool{}
	for _, d := range opts.Districts {
		known[d.ID] = true
	}
	var unknown []string
	for _, n := range opts.State.Nodes {
		if !known[n.District] && !slices.Contains(unknown, n.District) {
			unknown = append(unknown, n.District)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return world{}, fmt.Errorf("resources.json has nodes in district(s) %v, which districts.json no longer defines: define them again so transit can reach and remove those nodes", unknown)
	}

	type listing struct {
		instances []Instance
		groups    []Group
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

	w := world{terminating: map[string]int{}}
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
			key := d.ID + "\x00" + inst.ProviderID
			seen[key] = true
			n, tracked := byProvider[key]
			if !tracked {
				n = nodeFromInstance(cluster, d.ID, inst)
				if inst.State != InstanceTerminating {
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
			if inst.State == InstanceTerminating {
				n.Phase = districts.PhaseTerminating
				w.terminating[d.ID]++
			}
			w.state.Nodes = append(w.state.Nodes, n)
		}
		for _, gr := range listings[i].groups {
			if gr.Tags[districts.TagCluster] != cluster {
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
			if _, dup := findGroup(w.state, d.ID); dup || gr.Name != GroupName(cluster, d.ID) {
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

	if err := observePlatform(ctx, opts.Platform, &w); err != nil {
		return world{}, err
	}
	w.state.Type, w.state.Version, w.state.Cluster = "resources", districts.ResourcesVersion, cluster
	w.state.Serial, w.state.UpdatedAt = opts.State.Serial, opts.State.UpdatedAt
	sortState(&w.state)
	return w, nil
}

// observePlatform sets every live node's phase from what the platform says.
func observePlatform(ctx context.Context, p Platform, w *world) error {
	var live []districts.Node
	for _, n := range w.state.Nodes {
		if n.Phase != districts.PhaseTerminating {
			live = append(live, n)
		}
	}
	members := map[string]Member{}
	if len(live) > 0 {
		if p == nil {
			return errors.New("no platform driver to ask which nodes are members")
		}
		list, err := p.Members(ctx, live)
		switch {
		case errors.Is(err, ErrNoPlatform):
		case err != nil:
			return fmt.Errorf("ask the platform for its nodes: %w", err)
		default:
			w.platformUp = true
			for _, m := range list {
				members[m.NodeID] = m
			}
		}
	}
	for i := range w.state.Nodes {
		n := &w.state.Nodes[i]
		if n.Phase == districts.PhaseTerminating {
			continue
		}
		m, ok := members[n.ID]
		switch {
		case !ok && (n.Phase == districts.PhaseLeft || n.Phase == districts.PhaseDrained):
			n.Phase = districts.PhaseLeft
		case !ok:
			n.Phase = districts.PhaseLaunched
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
		}
	}
	return nil
}

func nodeFromInstance(cluster, district string, inst Instance) districts.Node {
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
// that call no cloud.
func stateWorld(r districts.Resources) world {
	w := world{state: r, terminating: map[string]int{}}
	w.state.Nodes = slices.Clone(r.Nodes)
	w.state.SecurityGroups = slices.Clone(r.SecurityGroups)
	for _, n := range r.Nodes {
		switch n.Phase {
		case districts.PhaseTerminating:
			w.terminating[n.District]++
		case districts.PhaseJoined, districts.PhaseNotReady, districts.PhaseDraining, districts.PhaseDrained:
			if n.Role == districts.RoleMaster {
				w.platformUp = true
			}
		}
	}
	sortState(&w.state)
	return w
}

// guarded serializes access to the state while actions run in parallel, and
// saves after every change.
type guarded struct {
	mu    sync.Mutex
	state districts.Resources
	save  func(districts.Resources) error
}

// update applies f to the state and saves it.
func (g *guarded) update(f func(r *districts.Resources)) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	f(&g.state)
	sortState(&g.state)
	if g.save == nil {
		return nil
	}
	if err := g.save(g.state); err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	return nil
}

// read returns a copy of the state for f to look at.
func (g *guarded) read() districts.Resources {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.state
	r.Nodes = slices.Clone(r.Nodes)
	r.SecurityGroups = slices.Clone(r.SecurityGroups)
	return r
}
