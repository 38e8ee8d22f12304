// Package autoscale decides autoscaled deployments' quantities from what
// the platform's workloads ask for: new nodes for workloads the scheduler
// cannot place, in the cheapest deployment whose flavor and labels fit
// them; fewer nodes where a node stayed underused and what runs on it
// fits elsewhere. It only decides: transit applies the quantities through
// the control loop, which drains before it removes.
package autoscale

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// Group is one autoscaled deployment as the decider sees it.
type Group struct {
	Key      districts.DeploymentKey
	Min, Max int
	// Current is the quantity the state records (Min before any
	// decision).
	Current int
	Spread  bool
	// Labels are the labels a new node of the deployment carries: a
	// workload's selector must be among them.
	Labels map[string]string
	// MilliCPU, MemoryBytes and Pods are the room a new node offers
	// workloads (its allocatable less what goes with every node); Pods 0
	// is no limit on how many.
	MilliCPU    int64
	MemoryBytes int64
	Pods        int64
	// Price is what a node costs an hour; Priced false when unknown
	// (such deployments come after every priced one).
	Price  float64
	Priced bool
	// GrewAt is when the autoscaler last grew it.
	GrewAt time.Time
}

// Input is what one decision is made from.
type Input struct {
	Groups []Group
	Demand provider.Demand
	// NodeGroup maps the nodes of autoscaled deployments to theirs.
	NodeGroup map[string]districts.DeploymentKey
	// NoTargets are nodes no moved workload may go to (Kubernetes
	// control-plane nodes, whose taint workloads do not tolerate).
	NoTargets map[string]bool
	// UnderusedSince and Reported are what the last run kept.
	UnderusedSince map[string]time.Time
	Reported       []string
	Settings       districts.Autoscaler // resolved
	Now            time.Time
}

// Decision is a deployment's new quantity and why.
type Decision struct {
	Key      districts.DeploymentKey
	From, To int
	Reason   string
	// Remove are the nodes a scale-down chose.
	Remove []string
}

// Output is a decision and what the next run needs.
type Output struct {
	// Decisions change quantities; none when nothing changes.
	Decisions      []Decision
	UnderusedSince map[string]time.Time
	// Reported are the problems known now (kept for the next run);
	// NewProblems those this run found first (to be said once).
	Reported    []string
	NewProblems []string
}

// Decide makes one decision: scale up for pending workloads first; only
// when no pending workload waits for a node (one asked for now or
// earlier), and no deployment grew within ScaleDownDelayAfterAdd, scale
// down.
func Decide(in Input) Output {
	out := Output{UnderusedSince: map[string]time.Time{}}
	groups := make([]*group, len(in.Groups))
	byKey := map[districts.DeploymentKey]*group{}
	for i, g := range in.Groups {
		groups[i] = &group{Group: g, want: min(max(g.Current, g.Min), g.Max)}
		byKey[g.Key] = groups[i]
	}
	// Nodes asked for that are not in the platform yet, or not ready,
	// will take pending workloads: a run while they start must not ask
	// again.
	registered := map[districts.DeploymentKey]int{}
	for _, n := range in.Demand.Nodes {
		if n.Schedulable {
			registered[in.NodeGroup[n.Node]]++
		}
	}
	for _, g := range groups {
		for range max(g.want-registered[g.Key], 0) {
			g.upcoming = append(g.upcoming, g.room())
		}
	}
	problems := map[string]bool{}
	placedAny := scaleUp(in, groups, problems)
	underused(in, byKey, &out)
	lastGrowth := time.Time{}
	for _, g := range groups {
		if g.GrewAt.After(lastGrowth) {
			lastGrowth = g.GrewAt
		}
	}
	// Workloads no deployment fits do not hold scale-down back.
	if !placedAny && in.Now.Sub(lastGrowth) >= in.Settings.ScaleDownDelayAfterAdd.D() {
		scaleDown(in, byKey, out.UnderusedSince)
	}
	for _, g := range groups {
		if g.want != g.Current {
			out.Decisions = append(out.Decisions, Decision{Key: g.Key, From: g.Current, To: g.want, Reason: g.reason(), Remove: g.remove})
		}
	}
	out.Reported = slices.Sorted(maps.Keys(problems))
	for _, p := range out.Reported {
		if !slices.Contains(in.Reported, p) {
			out.NewProblems = append(out.NewProblems, p)
		}
	}
	return out
}

// group is a Group while a decision is made.
type group struct {
	Group
	want  int
	added []*room // new nodes, with what is left of them
	// upcoming are nodes asked for earlier that the platform does not
	// have yet, with what is left of them.
	upcoming []*room
	why      []string
	remove   []string
}

// room is what a node has left: CPU, memory, and how many more
// workloads it may run (a Kubernetes node's pods: 110 by default).
type room struct{ cpu, mem, pods int64 }

// noPodLimit stands for a node that limits no count of workloads.
const noPodLimit = math.MaxInt32

func (r *room) fits(w provider.Workload) bool {
	return w.MilliCPU <= r.cpu && w.MemoryBytes <= r.mem && r.pods >= 1
}
func (r *room) take(w provider.Workload) { r.cpu -= w.MilliCPU; r.mem -= w.MemoryBytes; r.pods-- }

// podSlots is how many workloads a node of allocatable pods may run,
// less those that go with it: noPodLimit when it sets no limit.
func podSlots(pods, overhead int64) int64 {
	if pods <= 0 {
		return noPodLimit
	}
	return pods - overhead
}

// room is what a new node of g offers.
func (g *Group) room() *room { return &room{g.MilliCPU, g.MemoryBytes, podSlots(g.Pods, 0)} }

// freeOn is what node n has left once its workloads run, less what
// goes with it.
func freeOn(n provider.NodeLoad) *room {
	r := &room{n.MilliCPU - n.OverheadMilliCPU, n.MemoryBytes - n.OverheadMemoryBytes, podSlots(n.Pods, n.OverheadPods)}
	for _, w := range n.Workloads {
		r.take(w)
	}
	return r
}

func (g *group) reason() string { return strings.Join(g.why, "; ") }

// labelsFit says a node with labels satisfies selector.
func labelsFit(labels, selector map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// scaleUp places the pending workloads, largest first, on new nodes:
// first on a node this decision already adds, else on a new node of the
// cheapest deployment that fits (or, among spreading ones, the one with
// the fewest nodes). It reports whether any workload got a node.
func scaleUp(in Input, groups []*group, problems map[string]bool) bool {
	pending := slices.Clone(in.Demand.Pending)
	slices.SortFunc(pending, func(a, b provider.Workload) int {
		return cmp.Or(cmp.Compare(size(b), size(a)), cmp.Compare(a.Name, b.Name))
	})
	placed := map[*group][]string{}
	existing := freeRoom(in)
	waiting := 0
	atMax := map[*group]int{}
	for _, w := range pending {
		var fitting []*group
		for _, g := range groups {
			if labelsFit(g.Labels, w.Selector) && g.room().fits(w) {
				fitting = append(fitting, g)
			}
		}
		if len(fitting) == 0 {
			problems[unfitProblem(w, groups)] = true
			continue
		}
		// Room on a node the platform has (a node that joined since
		// the scheduler last tried): the scheduler places it there.
		if existing.place(w) || onNodes(fitting, w, upcoming) != nil {
			waiting++
			continue
		}
		if g := onNodes(fitting, w, added); g != nil {
			placed[g] = append(placed[g], w.Name)
			continue
		}
		g := cheapest(fitting)
		if g == nil {
			for _, f := range fitting {
				atMax[f]++
			}
			continue
		}
		r := g.room()
		r.take(w)
		g.added = append(g.added, r)
		g.want++
		placed[g] = append(placed[g], w.Name)
	}
	for _, g := range groups {
		if names := placed[g]; len(g.added) > 0 {
			price := "unpriced"
			if g.Priced {
				price = fmt.Sprintf("%.4f/h each", g.Price)
			}
			g.why = append(g.why, fmt.Sprintf("%s unschedulable (%s): %d new node(s) at %s, the cheapest deployment that fits",
				plural(len(names), "workload"), names3(names), len(g.added), price))
			g.GrewAt = in.Now
		}
		if n := atMax[g]; n > 0 {
			problems[fmt.Sprintf("%s: workloads that fit it wait, but it is at its max %d", g.Key, g.Max)] = true
		}
	}
	return len(placed) > 0 || waiting > 0
}

// rooms is what is free on the platform's schedulable nodes.
type rooms struct {
	order []provider.NodeLoad
	free  map[string]*room
	// most bounds every node's free room (room only shrinks): a
	// workload larger needs no search.
	most room
}

func freeRoom(in Input) rooms {
	rs := rooms{free: map[string]*room{}}
	for _, n := range in.Demand.Nodes {
		if !n.Schedulable || in.NoTargets[n.Node] {
			continue
		}
		r := freeOn(n)
		rs.free[n.Node] = r
		rs.order = append(rs.order, n)
		rs.most = room{max(rs.most.cpu, r.cpu), max(rs.most.mem, r.mem), max(rs.most.pods, r.pods)}
	}
	return rs
}

// place takes room for w on the first node whose labels and room fit.
func (rs rooms) place(w provider.Workload) bool {
	if !rs.most.fits(w) {
		return false
	}
	for _, n := range rs.order {
		if r := rs.free[n.Node]; labelsFit(n.Labels, w.Selector) && r.fits(w) {
			r.take(w)
			return true
		}
	}
	return false
}

// onNodes is the group of the first of its nodes (nodes picks which:
// those asked for earlier, or this decision's) with room for w, which
// then takes it; nil when none has.
func onNodes(fitting []*group, w provider.Workload, nodes func(*group) []*room) *group {
	for _, g := range fitting {
		for _, r := range nodes(g) {
			if r.fits(w) {
				r.take(w)
				return g
			}
		}
	}
	return nil
}

func upcoming(g *group) []*room { return g.upcoming }
func added(g *group) []*room    { return g.added }

// cheapest is the deployment a new node goes to: the cheapest below its
// max; when that one spreads, the spreading one with the fewest nodes.
// Nil when every one is at its max.
func cheapest(fitting []*group) *group {
	var open []*group
	for _, g := range fitting {
		if g.want < g.Max {
			open = append(open, g)
		}
	}
	if len(open) == 0 {
		return nil
	}
	price := func(g *group) float64 {
		if !g.Priced {
			return math.Inf(1)
		}
		return g.Price
	}
	best := slices.MinFunc(open, func(a, b *group) int { return cmp.Compare(price(a), price(b)) })
	if !best.Spread {
		return best
	}
	return slices.MinFunc(open, func(a, b *group) int {
		return cmp.Or(cmp.Compare(b2i(!a.Spread), b2i(!b.Spread)), cmp.Compare(a.want, b.want), cmp.Compare(price(a), price(b)))
	})
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// unfitProblem says why no deployment could ever take w, once per kind
// of workload: the same words every run, so it is reported once.
func unfitProblem(w provider.Workload, groups []*group) string {
	name := w.Name
	if i := strings.LastIndexAny(name, "-."); i > 0 {
		name = name[:i] // pods of one controller say it once
	}
	var sel []string
	for _, k := range slices.Sorted(maps.Keys(w.Selector)) {
		sel = append(sel, k+"="+w.Selector[k])
	}
	largest := ""
	for _, g := range groups {
		if labelsFit(g.Labels, w.Selector) {
			largest = fmt.Sprintf("; the largest that matches its labels, %s, offers %dm CPU and %s", g.Key, g.MilliCPU, mib(g.MemoryBytes))
		}
	}
	return fmt.Sprintf("%s* asks for %dm CPU and %s on a node labelled [%s]: no autoscaled deployment fits it%s",
		name, w.MilliCPU, mib(w.MemoryBytes), strings.Join(sel, ","), largest)
}

// underused keeps when each node of an autoscaled deployment was first
// seen asking less than the threshold of its CPU and memory.
func underused(in Input, byKey map[districts.DeploymentKey]*group, out *Output) {
	for _, n := range in.Demand.Nodes {
		if _, ok := byKey[in.NodeGroup[n.Node]]; !ok || !n.Schedulable {
			continue
		}
		if u := utilization(n); u < in.Settings.UtilizationThreshold {
			since, ok := in.UnderusedSince[n.Node]
			if !ok {
				since = in.Now
			}
			out.UnderusedSince[n.Node] = since
		}
	}
}

// utilization is the larger share of a node's CPU and memory its
// workloads ask for.
func utilization(n provider.NodeLoad) float64 {
	var cpu, mem int64
	for _, w := range n.Workloads {
		cpu += w.MilliCPU
		mem += w.MemoryBytes
	}
	share := func(v, of int64) float64 {
		if of <= 0 {
			return 1
		}
		return float64(v) / float64(of)
	}
	return max(share(cpu, n.MilliCPU), share(mem, n.MemoryBytes))
}

// scaleDown removes nodes underused for ScaleDownAfter whose workloads
// all move and fit on the nodes that stay: every empty one, and at most
// one that still runs workloads (their drains go one at a time anyway).
func scaleDown(in Input, byKey map[districts.DeploymentKey]*group, since map[string]time.Time) {
	free := map[string]*room{}
	var order []provider.NodeLoad
	for _, n := range in.Demand.Nodes {
		if !n.Schedulable {
			continue
		}
		free[n.Node] = freeOn(n)
		order = append(order, n)
	}
	var candidates []provider.NodeLoad
	for _, n := range order {
		s, ok := since[n.Node]
		if ok && in.Now.Sub(s) >= in.Settings.ScaleDownAfter.D() {
			candidates = append(candidates, n)
		}
	}
	// Emptiest first, then the dearest: what goes saves the most.
	slices.SortFunc(candidates, func(a, b provider.NodeLoad) int {
		return cmp.Or(cmp.Compare(len(a.Workloads), len(b.Workloads)), cmp.Compare(byKey[in.NodeGroup[b.Node]].Price, byKey[in.NodeGroup[a.Node]].Price), cmp.Compare(a.Node, b.Node))
	})
	nonEmpty := false
	for _, n := range candidates {
		g := byKey[in.NodeGroup[n.Node]]
		if g.want <= g.Min || len(n.Workloads) > 0 && nonEmpty {
			continue
		}
		if why := unmovable(n); why != "" {
			continue
		}
		moves, ok := fitElsewhere(n, order, free, in.NoTargets)
		if !ok {
			continue
		}
		for _, m := range moves {
			free[m.to].take(m.w)
		}
		delete(free, n.Node)
		g.want--
		g.remove = append(g.remove, n.Node)
		nonEmpty = nonEmpty || len(n.Workloads) > 0
		cpu, mem := shares(n)
		g.why = append(g.why, fmt.Sprintf("node %s underused since %s (%.0f%% CPU, %.0f%% memory asked, under %.0f%%)%s",
			n.Node, since[n.Node].UTC().Format(time.RFC3339), cpu*100, mem*100, in.Settings.UtilizationThreshold*100, movesText(n)))
	}
}

func movesText(n provider.NodeLoad) string {
	if len(n.Workloads) == 0 {
		return ": it runs no workload"
	}
	return fmt.Sprintf(": its %s fit on the nodes that stay", plural(len(n.Workloads), "workload"))
}

func shares(n provider.NodeLoad) (cpu, mem float64) {
	var c, m int64
	for _, w := range n.Workloads {
		c += w.MilliCPU
		m += w.MemoryBytes
	}
	if n.MilliCPU > 0 {
		cpu = float64(c) / float64(n.MilliCPU)
	}
	if n.MemoryBytes > 0 {
		mem = float64(m) / float64(n.MemoryBytes)
	}
	return cpu, mem
}

func unmovable(n provider.NodeLoad) string {
	for _, w := range n.Workloads {
		if w.Unmovable != "" {
			return w.Unmovable
		}
	}
	return ""
}

type move struct {
	w  provider.Workload
	to string
}

// fitElsewhere places n's workloads, largest first, on the other nodes'
// free room without taking it: the moves, or false when one does not fit.
func fitElsewhere(n provider.NodeLoad, nodes []provider.NodeLoad, free map[string]*room, noTargets map[string]bool) ([]move, bool) {
	ws := slices.Clone(n.Workloads)
	slices.SortFunc(ws, func(a, b provider.Workload) int { return cmp.Compare(size(b), size(a)) })
	// What is left of each node's free room as the moves take it (a
	// copy: free itself is not taken).
	left := map[string]*room{}
	var moves []move
	for _, w := range ws {
		found := false
		for _, o := range nodes {
			r, ok := free[o.Node]
			if o.Node == n.Node || !ok || noTargets[o.Node] || !labelsFit(o.Labels, w.Selector) {
				continue
			}
			if left[o.Node] == nil {
				c := *r
				left[o.Node] = &c
			}
			if l := left[o.Node]; l.fits(w) {
				l.take(w)
				moves = append(moves, move{w, o.Node})
				found = true
				break
			}
		}
		if !found {
			return nil, false
		}
	}
	return moves, true
}

// size orders workloads: a millicore weighs like 4 MiB (a GiB per core,
// the shape of most flavors).
func size(w provider.Workload) int64 { return w.MilliCPU*4<<20 + w.MemoryBytes }

func mib(b int64) string { return fmt.Sprintf("%d MiB", b>>20) }

func names3(names []string) string {
	if len(names) <= 3 {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:3], ", ") + fmt.Sprintf(" and %d more", len(names)-3)
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
