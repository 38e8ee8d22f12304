package control

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// Observation runs in named steps, each a small function with its own
// tests: list every district (in parallel), find the cluster's lineage,
// merge the listings with the last saved state (phases follow what the
// clouds say now), check the listing against what must be there, ask the
// platform, identify which machine is which node by the platform's own
// identity of its members, and take each node's phase from both answers.
// The clouds and the platform win over resources.json; nothing is
// written.

// platformView is what the platform said when asked.
type platformView int

const (
	platformNotAsked    platformView = iota // no refresh, destroy, or no live node to ask
	platformUp                              // a master answered
	platformNone                            // every node answered: none is a member
	platformUnreachable                     // no master answered
)

// startTimeout bounds the wait for a machine the cloud does not run yet
// (pending, or without an address), counted from when transit first saw
// it so, across runs: then its launch counts as failed.
const startTimeout = 15 * time.Minute

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
	// waited for, not joined, until startTimeout.
	starting map[string]bool
	// reappeared holds the machines (by provider id) transit terminated
	// that the cloud lists alive again; adopted those resources.json did
	// not have.
	reappeared, adopted map[string]bool
	// stateLost says resources.json was missing and the lineage came
	// from the clouds.
	stateLost bool
	// missing are machines the listings lack although they must be
	// there; the world is not acted on while it has any.
	missing []missingMachine
	notes   []string
	// warnings report what the loop does not fix and does not wait for.
	warnings []string
	now      time.Time
}

// missingMachine is a machine a listing lacks, as resources.json has it,
// and why it must be there.
type missingMachine struct {
	node      districts.Node
	launched  bool // this run launched it
	ready     bool // the platform reports it a ready member
	launching bool // a killed run asked for it and never heard back
	// unsure: resources.json has it, its district's listing lacks it, and
	// why the cloud's direct answer did not confirm it gone
	unsure string
}

func (m missingMachine) String() string {
	switch {
	case m.launching:
		return fmt.Sprintf("%s in %s: a run killed before the cloud answered launched it", m.node.ID, m.node.District)
	case m.launched:
		return fmt.Sprintf("%s (%s) in %s: this run launched it", m.node.ID, m.node.ProviderID, m.node.District)
	case m.ready:
		return fmt.Sprintf("%s: the platform reports it a ready member, but no listing shows its machine", m.node.ID)
	case m.node.District == "":
		return fmt.Sprintf("%s: the platform reports it a member, no listing shows its machine, and resources.json, which could say it is gone, is missing", m.node.ID)
	}
	return fmt.Sprintf("%s (%s) in %s: the district's listing lacks it; %s", m.node.ID, m.node.ProviderID, m.node.District, m.unsure)
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

// listing is one district's answer.
type listing struct {
	instances []provider.Instance
	groups    []provider.Group
}

// observation is what one observation is given: the run's options and
// the machines the run itself launched (provider id → district), which
// a listing must show.
type observation struct {
	opts     Options
	launched map[string]string
}

// observe lists, merges, asks the platform and identifies; see above.
func observe(ctx context.Context, ob observation) (world, error) {
	opts := ob.opts
	if err := districts.CheckStateDistricts(opts.State, opts.Districts, "resources.json"); err != nil {
		return world{}, err
	}
	listings, err := listAll(ctx, opts)
	if err != nil {
		return world{}, err
	}
	lineage, err := lineageOf(opts.Cluster.ID, opts.State, listings)
	if err != nil {
		return world{}, err
	}
	gone, unsure := describeUnlisted(ctx, opts, listings, ob.launched)
	w := merge(opts, lineage, listings)
	w.stateLost = opts.State.Lineage == "" && lineage != ""
	w.missing = missingFrom(opts.State, ob.launched, listings, opts.Districts, gone, unsure)
	var launching []missingMachine
	w.state.Launching, launching, w.notes = pendingLaunches(opts.State.Launching, w.state.Nodes, w.now, w.notes)
	w.missing = append(w.missing, launching...)
	if !opts.Destroy {
		if err := observePlatform(ctx, opts.Platform, &w); err != nil {
			return world{}, err
		}
	}
	if opts.ForgetMissing {
		w.missing = nil
	}
	recordDistricts(&w, opts.Districts)
	sortState(&w.state)
	return w, nil
}

// listAll lists every district's tagged machines and groups in parallel.
func listAll(ctx context.Context, opts Options) ([]listing, error) {
	listings := make([]listing, len(opts.Districts))
	g, gctx := errgroup.WithContext(ctx)
	for i, d := range opts.Districts {
		infra, ok := opts.Infra[d.ID]
		if !ok {
			return nil, fmt.Errorf("district %q: no infrastructure driver", d.ID)
		}
		g.Go(func() error {
			inst, groups, err := infra.List(gctx, opts.Cluster.ID)
			if err != nil {
				return fmt.Errorf("district %q: list machines and groups: %w", d.ID, err)
			}
			listings[i] = listing{inst, groups}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return listings, nil
}

// lineageOf says which lineage is this cluster: the state says; without a
// state (first apply, or resources.json lost) the clouds must show one.
func lineageOf(cluster string, st districts.Resources, listings []listing) (string, error) {
	if st.Lineage != "" || len(st.Nodes)+len(st.SecurityGroups) > 0 {
		return st.Lineage, nil
	}
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
	if len(seen) <= 1 {
		for l := range seen {
			return l, nil
		}
		return "", nil
	}
	var parts []string
	for _, l := range slices.Sorted(maps.Keys(seen)) {
		name := l
		if name == "" {
			name = "(untagged)"
		}
		parts = append(parts, fmt.Sprintf("%s (%d resources)", name, seen[l]))
	}
	return "", fmt.Errorf("%w: the clouds hold resources of cluster %q from %d lineages: %s; without resources.json transit cannot tell which cluster is this one: restore resources.json (it records the lineage), or rename one cluster",
		ErrForeign, cluster, len(seen), strings.Join(parts, ", "))
}

// merge turns the listings into the current state: every machine of the
// lineage becomes a node (tracked ones keep what resources.json knows of
// them, others are adopted), its addresses and zone from the cloud and
// its phase from the cloud's present answer; the platform's answer
// refines the phases later. Times read from the state are clamped to now
// (a clock that ran ahead never defers anything for long). Machines that
// claim one node id are told apart later by the platform (identify); here
// the one resources.json has, else the oldest, holds the id.
func merge(opts Options, lineage string, listings []listing) world {
	cluster, now := opts.Cluster.ID, opts.Clock.Now()
	w := world{terminating: map[string]int{}, eagerGroups: map[string]bool{}, blocked: map[string]string{},
		starting: map[string]bool{}, reappeared: map[string]bool{}, adopted: map[string]bool{}, now: now}
	for id, infra := range opts.Infra {
		if e, ok := infra.(provider.InUseGroupDeleter); ok && e.DeletesGroupsInUse() {
			w.eagerGroups[id] = true
		}
	}
	st := opts.State
	w.state = districts.Resources{
		Type: "resources", Version: districts.ResourcesVersion, Cluster: cluster, Lineage: lineage,
		Serial: st.Serial, UpdatedAt: st.UpdatedAt, PlatformFormedAt: notAfter(st.PlatformFormedAt, now),
		NodeNumbers: maps.Clone(st.NodeNumbers), Failures: clampFailures(st.Failures, now),
		Districts: maps.Clone(st.Districts), MeshPeers: st.MeshPeers, Mesh: st.Mesh,
		Autoscale: st.Autoscale,
	}
	ours := func(tags map[string]string) bool {
		return tags[districts.TagCluster] == cluster && tags[districts.TagLineage] == lineage
	}
	byProvider := map[string]districts.Node{}
	for _, n := range st.Nodes {
		byProvider[n.District+"\x00"+n.ProviderID] = n
	}
	seen := map[string]bool{}
	idKeys := make([]string, len(opts.Districts)) // each district's identityKey, once
	for i, d := range opts.Districts {
		idKeys[i] = identityKey(d)
	}
	owner := machineOwners(opts.Districts, idKeys, listings, st, ours, &w)
	var claims []claim
	for i, d := range opts.Districts {
		for _, inst := range listings[i].instances {
			// Re-check the tags: a driver bug must never make transit
			// touch a machine it did not create.
			if inst.Tags[districts.TagCluster] != cluster || inst.ProviderID == "" {
				continue
			}
			if o, ok := owner[idKeys[i]+"\x00"+inst.ProviderID]; ok && o != d.ID {
				continue // a sibling district's machine (machineOwners)
			}
			if !ours(inst.Tags) {
				w.warnings = append(w.warnings, fmt.Sprintf("machine %s (%s) in district %s belongs to another cluster named %q (lineage %q, this one is %q): never adopted, never touched",
					inst.Tags[districts.TagNode], inst.ProviderID, d.ID, cluster, inst.Tags[districts.TagLineage], lineage))
				continue
			}
			key := d.ID + "\x00" + inst.ProviderID
			if seen[key] {
				continue // a listing that repeats a machine (pages that overlap)
			}
			seen[key] = true
			saved, tracked := byProvider[key]
			n := saved
			if !tracked {
				n = nodeFromInstance(cluster, d.ID, inst)
				w.adopted[inst.ProviderID] = true
				if inst.State != provider.InstanceTerminating {
					w.notes = append(w.notes, fmt.Sprintf("adopted node %s (%s) in district %s: it carries transit's tags but was missing from resources.json", n.ID, inst.ProviderID, d.ID))
				}
			}
			n.PublicIP, n.PrivateIP = inst.PublicIP, inst.PrivateIP
			if inst.Zone != "" {
				n.Zone = inst.Zone
			}
			n.NotReadySince = notAfter(n.NotReadySince, now)
			n.Machine = machineState(inst)
			switch {
			case inst.State == provider.InstanceTerminating:
				n.Phase, n.StartingSince = districts.PhaseTerminating, time.Time{}
				w.terminating[d.ID]++
			case tracked && saved.Phase == districts.PhaseTerminating:
				// transit asked for its termination, yet the cloud lists
				// it alive: the platform says what it is (observePlatform).
				n.Phase, n.Message = districts.PhaseLaunched, fmt.Sprintf("transit terminated it, but the cloud lists it %s", inst.State)
				w.reappeared[inst.ProviderID] = true
			}
			if n.Phase != districts.PhaseTerminating && (inst.State == provider.InstancePending || inst.State == provider.InstanceRunning && len(n.Addresses()) == 0) {
				n.StartingSince = notAfter(n.StartingSince, now)
				if n.StartingSince.IsZero() {
					n.StartingSince = now
				}
			} else {
				n.StartingSince = time.Time{}
			}
			claims = append(claims, claim{node: n, saved: tracked && saved.CopyOf == ""})
		}
		mergeGroups(&w, st.SecurityGroups, d.ID, listings[i].groups, cluster, ours)
	}
	w.state.Nodes = holdClaims(claims)
	w.state.MeshRetired = retireMesh(st, w.state.Nodes)
	if len(st.Nodes) > 0 && len(liveNodes(st)) == 0 && len(liveNodes(w.state)) == 0 {
		// transit terminated every node it had, and the clouds agree: a
		// new platform may form on the next nodes. (A state that had no
		// node proves nothing: resources.json may have been lost.)
		w.state.PlatformFormedAt, w.state.Mesh, w.state.MeshPeers = time.Time{}, "", ""
	}
	if st.Lineage == "" && lineage != "" && len(claims) == 0 && w.state.PlatformFormedAt.IsZero() {
		// resources.json is lost and the clouds show this lineage's
		// groups but no machine: whether a platform formed is unknown,
		// so one is assumed (an empty page must not start a second).
		w.state.PlatformFormedAt = now
		w.warnings = append(w.warnings, fmt.Sprintf("resources.json is missing and the clouds hold groups of cluster %s (lineage %s) but no machine: a platform may have formed, so transit starts a new one only with --rebuild-platform", cluster, lineage))
	}
	for _, n := range w.state.Nodes {
		if !n.StartingSince.IsZero() {
			w.starting[n.ID] = true
		}
		if n.CopyOf != "" && !slices.ContainsFunc(st.Nodes, func(s districts.Node) bool { return s.ProviderID == n.ProviderID && s.CopyOf != "" }) {
			w.notes = append(w.notes, fmt.Sprintf("machine %s in district %s carries the tags of node %s, which another machine is: tracked as %s and removed (never drained)", n.ProviderID, n.District, n.CopyOf, n.ID))
		}
	}
	for _, n := range st.Nodes {
		if !seen[n.District+"\x00"+n.ProviderID] && n.Phase != districts.PhaseTerminating {
			w.notes = append(w.notes, fmt.Sprintf("forgot node %s (%s): district %s no longer has it", n.ID, n.ProviderID, n.District))
		}
	}
	return w
}

// machineOwners decides which district a machine is the node of when
// districts of one cloud identity (one account, region and network: say
// one district per zone) all list it, as they do a machine whose
// transit-district tag someone removed: it is one machine, never a node
// of one district and a copy of itself in the other (which would be
// terminated). It is the node of the district resources.json has it in,
// else of the district its tag names, else of the one whose zones hold
// it, else of the first of them in districts.json. The result is keyed by
// identity (idKeys[i] is ds[i]'s) and provider id.
func machineOwners(ds []districts.District, idKeys []string, listings []listing, st districts.Resources, ours func(map[string]string) bool, w *world) map[string]string {
	listers := map[string][]string{}
	tagged, zoned := map[string]string{}, map[string][]string{}
	for i, d := range ds {
		for _, inst := range listings[i].instances {
			if inst.ProviderID == "" || !ours(inst.Tags) {
				continue
			}
			k := idKeys[i] + "\x00" + inst.ProviderID
			if !slices.Contains(listers[k], d.ID) {
				listers[k] = append(listers[k], d.ID)
				if slices.Contains(d.Zones(), inst.Zone) {
					zoned[k] = append(zoned[k], d.ID)
				}
			}
			tagged[k] = inst.Tags[districts.TagDistrict]
		}
	}
	keyOf := map[string]string{}
	for i, d := range ds {
		keyOf[d.ID] = idKeys[i]
	}
	saved := map[string]string{}
	for _, n := range st.Nodes {
		if k, ok := keyOf[n.District]; ok {
			saved[k+"\x00"+n.ProviderID] = n.District
		}
	}
	owner := map[string]string{}
	for k, ids := range listers {
		if len(ids) < 2 {
			continue
		}
		o := ids[0]
		switch {
		case slices.Contains(ids, saved[k]):
			o = saved[k]
		case slices.Contains(ids, tagged[k]):
			o = tagged[k]
		case len(zoned[k]) == 1:
			o = zoned[k][0] // the one district whose zones hold it
		}
		owner[k] = o
		if tagged[k] != o {
			_, pid, _ := strings.Cut(k, "\x00")
			w.warnings = append(w.warnings, fmt.Sprintf("machine %s is listed by districts %s, which are one cloud identity, and its %s tag is %q: it is a node of %s only (restore the tag to %s)",
				pid, strings.Join(ids, " and "), districts.TagDistrict, tagged[k], o, o))
		}
	}
	return owner
}

// identityKey is a district's cloud identity as a map key: districts with
// one key see the same machines.
func identityKey(d districts.District) string {
	id := d.Identity()
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(id)) {
		fmt.Fprintf(&b, "%s=%s;", k, id[k])
	}
	return b.String()
}

// retireMesh carries resources.json's retired mesh addresses over and
// retires those of the nodes that left (st has them, nodes do not): the
// nodes that remain may hold the leaver among their peers until they take
// new ones. Nodes that left stop holding anything.
func retireMesh(st districts.Resources, nodes []districts.Node) map[string][]string {
	present := map[string]bool{}
	var holders []string
	for _, n := range nodes {
		present[n.ID] = true
		if n.MeshKey != "" && n.CopyOf == "" {
			holders = append(holders, n.ID)
		}
	}
	out := map[string][]string{}
	for addr, ids := range st.MeshRetired {
		if left := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return !present[id] }); len(left) > 0 {
			out[addr] = left
		}
	}
	for _, n := range st.Nodes {
		if n.MeshIP != "" && n.CopyOf == "" && !present[n.ID] && len(holders) > 0 {
			out[n.MeshIP] = slices.Sorted(slices.Values(holders))
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// mergeGroups takes a district's listed groups: the cluster's group, the
// orphans (the cluster's tags on another name, or a second one), and
// another lineage's, which are never touched.
func mergeGroups(w *world, saved []districts.SecurityGroup, district string, groups []provider.Group, cluster string, ours func(map[string]string) bool) {
	for _, gr := range groups {
		if gr.Tags[districts.TagCluster] != cluster {
			continue
		}
		if !ours(gr.Tags) {
			msg := fmt.Sprintf("security group %s (%s) in district %s belongs to another cluster named %q (lineage %q): never touched", gr.Name, gr.ProviderID, district, cluster, gr.Tags[districts.TagLineage])
			w.warnings = append(w.warnings, msg)
			if gr.Name == provider.GroupName(cluster, district) {
				w.blocked[district] = msg + "; it holds the group name this cluster needs there: rename one of the two clusters"
			}
			continue
		}
		sg := districts.SecurityGroup{
			Type: "security_group", ID: gr.Name, Cluster: cluster, District: district,
			ProviderID: gr.ProviderID, Sources: slices.Sorted(slices.Values(gr.Sources)), MeshPort: gr.MeshPort,
		}
		for _, old := range saved {
			if old.District == district && old.ProviderID == gr.ProviderID {
				sg.CreatedAt, sg.UpdatedAt = old.CreatedAt, old.UpdatedAt
			}
		}
		if _, dup := findGroup(w.state, district); dup || gr.Name != provider.GroupName(cluster, district) {
			w.orphanGroups = append(w.orphanGroups, sg)
			continue
		}
		w.state.SecurityGroups = append(w.state.SecurityGroups, sg)
	}
}

// machineState is the cloud's answer as the node records it: stopped and
// failed machines are told apart from running ones on every observation.
func machineState(inst provider.Instance) string {
	switch inst.State {
	case provider.InstanceStopped, provider.InstanceFailed:
		return string(inst.State)
	}
	return ""
}

// claim is a machine and the node id it claims; saved says
// resources.json has this very machine as that node.
type claim struct {
	node  districts.Node
	saved bool
}

// holdClaims gives each claimed node id to one machine, never by listing
// order: the one resources.json has as that node, else the oldest, else
// the smallest provider id. The others are copies, tracked under their
// provider id. identify corrects the choice by the platform's answer.
func holdClaims(claims []claim) []districts.Node {
	byID := map[string][]int{}
	for i, c := range claims {
		id := c.node.ID
		if c.node.CopyOf != "" {
			id = c.node.CopyOf
		}
		byID[id] = append(byID[id], i)
	}
	out := make([]districts.Node, 0, len(claims))
	for _, id := range slices.Sorted(maps.Keys(byID)) {
		idx := byID[id]
		slices.SortFunc(idx, func(a, b int) int {
			ca, cb := claims[a], claims[b]
			if ca.saved != cb.saved {
				return b2i(cb.saved) - b2i(ca.saved)
			}
			if c := ca.node.CreatedAt.Compare(cb.node.CreatedAt); c != 0 {
				return c
			}
			return strings.Compare(ca.node.ProviderID, cb.node.ProviderID)
		})
		for k, i := range idx {
			n := claims[i].node
			if k == 0 {
				n.ID, n.CopyOf = id, ""
			} else {
				n.ID, n.CopyOf = n.ProviderID, id
			}
			out = append(out, n)
		}
	}
	return out
}

// describeUnlisted asks the clouds directly about each machine
// resources.json has that its district's listing lacks (a lost or lagging
// page, a zone the listing could not reach). One the cloud says does not
// exist is gone (keyed district and provider id), unless its district's
// listing lacks every machine it had; for any other, unsure says why its
// absence is not believed. A machine the cloud shows is not added to the
// listing: that listing lost it, and may have lost machines resources.json
// does not have. Machines this run launched are not asked about: a
// cloud's answer by id may lag its launch, and their absence is never
// believed (missingFrom).
func describeUnlisted(ctx context.Context, opts Options, listings []listing, launched map[string]string) (gone map[string]bool, unsure map[string]string) {
	listed := map[string]bool{}
	for i, d := range opts.Districts {
		for _, in := range listings[i].instances {
			listed[d.ID+"\x00"+in.ProviderID] = true
		}
	}
	// A district whose listing lacks every machine it had may be asking
	// another account (a changed credential): there, "not found" by id
	// is what it would answer too.
	dropped := map[string]bool{}
	for _, n := range opts.State.Nodes {
		if n.Phase != districts.PhaseTerminating && n.ProviderID != "" {
			if _, seen := dropped[n.District]; !seen {
				dropped[n.District] = true
			}
			if listed[n.District+"\x00"+n.ProviderID] {
				dropped[n.District] = false
			}
		}
	}
	known := map[string]bool{}
	for _, d := range opts.Districts {
		known[d.ID] = true
	}
	gone, unsure = map[string]bool{}, map[string]string{}
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, n := range opts.State.Nodes {
		key := n.District + "\x00" + n.ProviderID
		if !known[n.District] || n.Phase == districts.PhaseTerminating || n.ProviderID == "" || listed[key] || launched[n.ProviderID] != "" {
			continue
		}
		infra := opts.Infra[n.District]
		g.Go(func() error {
			inst, err := infra.Describe(gctx, provider.Instance{ProviderID: n.ProviderID, Zone: n.Zone})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil && inst.ProviderID == n.ProviderID:
				// A listing that lost this machine may have lost others
				// that resources.json lacks (a killed run's launch, an
				// adopted machine): the run would launch beside them.
				unsure[key] = fmt.Sprintf("asked directly, the cloud shows it %s: a listing that lost it may have lost others, so it is not acted on", inst.State)
			case errors.Is(err, provider.ErrCloudNotFound) && dropped[n.District]:
				unsure[key] = "the listing lacks every machine the district had, and asked directly the cloud does not know this one either: " +
					"a changed credential (another account) looks like this"
			case errors.Is(err, provider.ErrCloudNotFound):
				gone[key] = true
			case err != nil:
				unsure[key] = "asked directly, the cloud did not answer: " + err.Error()
			default:
				unsure[key] = fmt.Sprintf("asked directly, the cloud answered machine %q", inst.ProviderID)
			}
			return nil
		})
	}
	_ = g.Wait() // every answer is recorded; none fails the observation
	return gone, unsure
}

// missingFrom lists the machines the listings lack although they must be
// there: every machine resources.json has that its district's listing
// lacks, unless the cloud, asked directly, said it does not exist (gone).
// A listing may lose a page or skip a zone, and a platform that calls a
// member not ready says nothing about its machine: only the cloud's
// direct answer, or the operator (--forget-missing), confirms that a
// machine is gone. unsure says why each was not confirmed.
func missingFrom(st districts.Resources, launched map[string]string, listings []listing, ds []districts.District, gone map[string]bool, unsure map[string]string) []missingMachine {
	listed := map[string]bool{}
	for i, d := range ds {
		for _, in := range listings[i].instances {
			if in.Tags[districts.TagCluster] == st.Cluster && in.Tags[districts.TagLineage] == st.Lineage {
				listed[d.ID+"\x00"+in.ProviderID] = true
			}
		}
	}
	had := map[string][]districts.Node{}
	for _, n := range st.Nodes {
		if n.Phase != districts.PhaseTerminating && n.ProviderID != "" {
			had[n.District] = append(had[n.District], n)
		}
	}
	var out []missingMachine
	for _, d := range ds {
		for _, n := range had[d.ID] {
			key := d.ID + "\x00" + n.ProviderID
			switch {
			case listed[key]:
			case launched[n.ProviderID] == d.ID:
				out = append(out, missingMachine{node: n, launched: true})
			case !gone[key]:
				why := unsure[key]
				if why == "" {
					// Listed, so not asked about (describeUnlisted):
					// the listing shows it without this lineage's tags.
					why = "its listing shows it without this cluster's tags"
				}
				out = append(out, missingMachine{node: n, unsure: why})
			}
		}
	}
	return out
}

// pendingLaunches resolves the launches a killed run asked for and never
// heard back about: one whose machine a listing shows (by its node id) is
// done; one no listing showed for listingWait and three observations
// never reached the cloud and is forgotten; any other is missing, so no
// second machine is launched for it while the listings may lag.
func pendingLaunches(ls []districts.Launching, nodes []districts.Node, now time.Time, notes []string) (keep []districts.Launching, missing []missingMachine, _ []string) {
	listed := map[string]bool{}
	for _, n := range nodes {
		listed[n.District+"\x00"+n.ID] = true
		if n.CopyOf != "" {
			listed[n.District+"\x00"+n.CopyOf] = true
		}
	}
	for _, l := range ls {
		if listed[l.District+"\x00"+l.Node] {
			continue
		}
		l.Unseen++
		l.At = notAfter(l.At, now)
		if l.Unseen >= 3 && now.Sub(l.At) >= listingWait {
			notes = append(notes, fmt.Sprintf("forgot the launch of node %s in %s a killed run asked for at %s: no listing shows its machine", l.Node, l.District, l.At.UTC().Format(time.RFC3339)))
			continue
		}
		keep = append(keep, l)
		missing = append(missing, missingMachine{node: districts.Node{ID: l.Node, District: l.District}, launching: true})
	}
	return keep, missing, notes
}

// recordDistricts keeps the identity of every district that holds nodes
// or a group, so a districts.json that points it elsewhere is refused.
func recordDistricts(w *world, ds []districts.District) {
	used := map[string]bool{}
	for _, n := range w.state.Nodes {
		used[n.District] = true
	}
	for _, g := range w.state.SecurityGroups {
		used[g.District] = true
	}
	for _, m := range w.missing {
		used[m.node.District] = true
	}
	rec := map[string]map[string]string{}
	for _, d := range ds {
		if used[d.ID] {
			rec[d.ID] = d.Identity()
		}
	}
	w.state.Districts = rec
	if len(rec) == 0 {
		w.state.Districts = nil
	}
}

// observePlatform asks the platform which nodes are members, tells apart
// machines that claim one node by the platform's identity of its members
// (identify), and sets every live node's phase from both answers
// (phases). A platform that cannot be asked
// is no error: the phases stay as resources.json has them and the plan
// changes no node.
func observePlatform(ctx context.Context, p provider.Platform, w *world) error {
	ask, stopped := askable(w)
	if len(ask) == 0 && len(stopped) > 0 {
		w.platform, w.platformErr = platformUnreachable, &provider.UnreachableError{Masters: stopped, Err: errors.New("the cloud reports their machines stopped")}
		return nil
	}
	if len(ask) == 0 {
		w.platform = platformNone // nothing to be a member of anything
		phases(w)
		return nil
	}
	if p == nil {
		return errors.New("no platform driver to ask which nodes are members")
	}
	list, err := p.Members(ctx, ask)
	if len(stopped) > 0 && (errors.Is(err, provider.ErrNoPlatform) || lost(err)) {
		// Masters that were members do not run: the platform may
		// come back with them.
		err = &provider.UnreachableError{Masters: stopped, Err: errors.New("the cloud reports their machines stopped")}
	}
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, provider.ErrNoPlatform):
		w.platform = platformNone
	case lost(err):
		// Every node answered, and nodes belong to a platform no master
		// serves: it formed and is lost; only --rebuild-platform builds
		// a new one. (Silence would prove nothing: a node that did not
		// answer makes the platform unreachable, not lost.)
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
		if w.platform == platformUp && m.Role == districts.RoleMaster && w.state.PlatformFormedAt.IsZero() {
			w.state.PlatformFormedAt = w.now
		}
	}
	identify(w)
	phases(w)
	if w.platform == platformUp {
		w.missing = append(w.missing, unlisted(w)...)
	}
	return nil
}

// unlisted are the members transit named whose machine no listing shows
// although nothing says it is gone: a ready one (the platform says it
// serves, so the listings are incomplete), and, when resources.json was
// lost, any one (nothing then tells a machine deleted by hand from a
// listing that answered an empty page).
func unlisted(w *world) []missingMachine {
	var out []missingMachine
	for _, m := range w.strays {
		if (m.Ready || w.stateLost) && transitName(w.state.Cluster, m.NodeID) {
			out = append(out, missingMachine{node: districts.Node{ID: m.NodeID, Role: m.Role}, ready: m.Ready})
		}
	}
	return out
}

// askable are the nodes the platform is asked about: the machines that
// run. A machine that is stopped, failed or still starting cannot answer,
// and its silence would say nothing: the masters' member list says what
// it is. stopped names the masters among them that may serve a platform
// when they run again (members, or machines resources.json did not know:
// nobody can tell what they were). A copy of a master is asked too, under
// the id it claims: which of the two is the master is not known yet
// (identify decides by the answer), and the one that is must be asked.
func askable(w *world) (ask []districts.Node, stopped []string) {
	for _, n := range w.live() {
		switch {
		case n.CopyOf != "" && n.Role == districts.RoleMaster && n.Machine == "" && !w.starting[n.ID]:
			as := *n
			as.ID, as.CopyOf = n.CopyOf, ""
			ask = append(ask, as)
		case n.CopyOf != "":
		case n.Machine != "" || w.starting[n.ID]:
			if n.Role == districts.RoleMaster && n.Machine != string(provider.InstanceFailed) && (n.Phase.Member() || w.adopted[n.ProviderID]) {
				stopped = append(stopped, n.ID)
			}
		default:
			ask = append(ask, *n)
		}
	}
	return ask, stopped
}

// identify corrects holdClaims by the platform's own identity of its
// members: when the member a node id names is known by exactly one of the
// machines that claim that id (its provider id, or one of its addresses)
// and that machine is a copy, the two swap. A member is never held by a
// machine the platform does not know it by.
func identify(w *world) {
	byClaim := map[string][]int{}
	for i, n := range w.state.Nodes {
		if n.Phase == districts.PhaseTerminating {
			continue
		}
		id := n.ID
		if n.CopyOf != "" {
			id = n.CopyOf
		}
		byClaim[id] = append(byClaim[id], i)
	}
	for id, idx := range byClaim {
		m, ok := w.members[id]
		if len(idx) < 2 || !ok {
			continue
		}
		var match []int
		for _, i := range idx {
			if knownBy(m, w.state.Nodes[i]) {
				match = append(match, i)
			}
		}
		if len(match) != 1 || w.state.Nodes[match[0]].CopyOf == "" {
			continue
		}
		for _, i := range idx {
			n := &w.state.Nodes[i]
			switch {
			case i == match[0]:
				n.ID, n.CopyOf = id, ""
			case n.CopyOf == "":
				n.ID, n.CopyOf = n.ProviderID, id
				w.notes = append(w.notes, fmt.Sprintf("machine %s in district %s carries the tags of node %s, but the platform knows that member by another machine: tracked as %s and removed (never drained)", n.ProviderID, n.District, id, n.ID))
			}
		}
	}
}

// knownBy says the platform knows member m by n's machine: its provider
// id (a Kubernetes providerID ends in it) or one of its addresses, its
// mesh address among them (a copy of the machine has none recorded).
func knownBy(m provider.Member, n districts.Node) bool {
	if m.ProviderID != "" && (m.ProviderID == n.ProviderID || strings.HasSuffix(m.ProviderID, "/"+n.ProviderID)) {
		return true
	}
	for _, a := range m.Addresses {
		if a != "" && (slices.Contains(n.Addresses(), a) || a == n.MeshIP) {
			return true
		}
	}
	return false
}

// phases sets every live node's phase from the platform's answer and
// the cloud's: a member whose machine is stopped is stopped (not ready);
// a machine that is no member and will not become one (stopped or failed,
// not started in time, or alive although transit terminated it) failed;
// a master is ready only while it holds a vote.
func phases(w *world) {
	live := w.live()
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
		if n.CopyOf != "" {
			ok = false
		}
		ready := ok && readyAs(n.Role, m)
		was := n.Phase
		switch {
		case ok && n.Machine != "":
			n.Phase = districts.PhaseStopped
		case !ok && n.Machine != "":
			n.Phase, n.Message = districts.PhaseFailed, fmt.Sprintf("the cloud reports the machine %s and the platform does not list it", n.Machine)
		case !ok && (w.reappeared[n.ProviderID] || was == districts.PhaseFailed):
			n.Phase = districts.PhaseFailed
		case !ok && w.starting[n.ID] && w.now.Sub(n.StartingSince) >= startTimeout:
			n.Phase, n.Message = districts.PhaseFailed, fmt.Sprintf("the cloud has not run it since %s (%s)", n.StartingSince.UTC().Format(time.RFC3339), startTimeout)
			delete(w.starting, n.ID)
		case !ok && (n.Phase == districts.PhaseLeft || n.Phase == districts.PhaseDrained):
			n.Phase = districts.PhaseLeft
		case !ok:
			n.Phase = districts.PhaseLaunched
		case m.Draining && !n.CordonedByTransit:
			n.Phase = districts.PhaseCordoned
		case m.Draining && n.Phase == districts.PhaseDrained:
		case m.Draining:
			n.Phase = districts.PhaseDraining
		case !ready:
			n.Phase = districts.PhaseNotReady
		default:
			n.Phase = districts.PhaseJoined
		}
		if n.Phase == districts.PhaseFailed && was != districts.PhaseFailed && !w.reappeared[n.ProviderID] {
			countFailure(&w.state, *n, n.Message, w.now)
		}
		if ok {
			n.Tags = maps.Clone(m.Labels)
			n.JoinFailed = false
		} else {
			n.CordonedByTransit = false
		}
		if !m.Draining {
			n.CordonedByTransit = false
		}
		switch {
		case ok && !ready && n.NotReadySince.IsZero():
			n.NotReadySince = w.now
		case !ok || ready:
			n.NotReadySince = time.Time{}
		}
	}
}

// readyAs says member m serves as a ready node of role: a master must
// hold a vote (an etcd learner, a manager the others do not reach, does
// not count), a worker must be ready.
func readyAs(role string, m provider.Member) bool {
	return m.Ready && (role != districts.RoleMaster || m.Role == districts.RoleMaster && m.Voter)
}

// countFailure records a failed install, join or launch on the node's
// deployment line, whose launches back off after maxJoinFailures in a row.
func countFailure(s *districts.Resources, n districts.Node, cause string, now time.Time) {
	if s.Failures == nil {
		s.Failures = map[string]districts.Failure{}
	}
	f := s.Failures[n.Key().String()]
	f.Count++
	f.LastError, f.LastAt = cause, now
	s.Failures[n.Key().String()] = f
}

// lost says err reports a platform that no master serves although every
// node answered.
func lost(err error) bool {
	ue, ok := errors.AsType[*provider.UnreachableError](err)
	return ok && ue.Lost()
}

// notAfter clamps a time read from the state: one in the future (written
// by a clock that ran ahead) counts as now.
func notAfter(t, now time.Time) time.Time {
	if t.After(now) {
		return now
	}
	return t
}

func clampFailures(fs map[string]districts.Failure, now time.Time) map[string]districts.Failure {
	if fs == nil {
		return nil
	}
	out := make(map[string]districts.Failure, len(fs))
	for k, f := range fs {
		f.LastAt = notAfter(f.LastAt, now)
		out[k] = f
	}
	return out
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
	slices.SortFunc(r.Nodes, compareNodes)
	sortGroups(r.SecurityGroups)
}

// sortGroups orders groups by district, as the state file lists them.
func sortGroups(gs []districts.SecurityGroup) {
	slices.SortFunc(gs, func(a, b districts.SecurityGroup) int { return strings.Compare(a.District, b.District) })
}

// stateWorld is the world as resources.json alone describes it, for plans
// that call no cloud. The platform counts as up when the state records a
// joined master.
func stateWorld(r districts.Resources, now time.Time) world {
	w := world{state: r, terminating: map[string]int{}, blocked: map[string]string{}, now: now}
	w.state.Nodes = slices.Clone(r.Nodes)
	w.state.SecurityGroups = slices.Clone(r.SecurityGroups)
	w.state.PlatformFormedAt = notAfter(r.PlatformFormedAt, now)
	w.state.Failures = clampFailures(r.Failures, now)
	w.members = map[string]provider.Member{}
	w.platform = platformNone
	for i := range w.state.Nodes {
		n := &w.state.Nodes[i]
		n.NotReadySince = notAfter(n.NotReadySince, now)
		n.StartingSince = notAfter(n.StartingSince, now)
		switch {
		case n.Phase == districts.PhaseTerminating:
			w.terminating[n.District]++
		case n.Phase.Member():
			w.members[n.ID] = provider.Member{NodeID: n.ID, Role: n.Role, Voter: n.Role == districts.RoleMaster, Ready: n.Phase == districts.PhaseJoined,
				Draining: n.Phase != districts.PhaseJoined && n.Phase != districts.PhaseNotReady && n.Phase != districts.PhaseStopped, Labels: n.Tags}
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
		if n.CopyOf != "" {
			nn.seeID(n.Role, n.CopyOf)
		}
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
