package transit

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"

	"github.com/cloudtransit/transit/autoscale"
	"github.com/cloudtransit/transit/control"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// ErrNoAutoscale says cluster.json has no autoscaled deployment, or the
// platform cannot report what its workloads ask for.
var ErrNoAutoscale = errors.New("nothing to autoscale")

// AutoscaleOptions say how Autoscale applies a decision.
type AutoscaleOptions struct {
	// Apply runs the loop when a quantity changes (Confirm and Confirmed
	// are not used: the autoscaler does not ask).
	Apply ApplyOptions
}

// AutoscaleReport is one decision of the autoscaler.
type AutoscaleReport struct {
	Decisions []autoscale.Decision
	// Problems are those found first in this run (each is said once);
	// Pending and Nodes what the platform reported.
	Problems []string
	Pending  int
	Nodes    int
}

// AutoscaleDecision is what DecideAutoscale decided, for Autoscale to
// record and apply.
type AutoscaleDecision struct {
	Report AutoscaleReport
	// next is the state's autoscale record once the decision is kept;
	// serial the state's serial it was made from.
	next   *districts.AutoscaleState
	serial int64
}

// ErrStaleDecision says the state changed between an autoscale decision
// and its apply (another run applied in between): decide again.
var ErrStaleDecision = errors.New("the state changed since the autoscale decision")

// DecideAutoscale reads what the platform's workloads ask for and decides
// the autoscaled deployments' quantities (autoscale.Decide). It takes no
// lock and writes nothing (Observe access): reading a platform takes
// seconds to minutes, and the lock is another run's meanwhile.
func (s *Session) DecideAutoscale(ctx context.Context) (AutoscaleDecision, error) {
	if err := s.use(Observe, "autoscale"); err != nil {
		return AutoscaleDecision{}, err
	}
	cl := s.cfg.Cluster
	if !cl.Autoscaled() {
		return AutoscaleDecision{}, fmt.Errorf("%w: no deployment of cluster %s has autoscale bounds", ErrNoAutoscale, cl.ID)
	}
	p, err := s.platformDriver(ctx)
	if err != nil {
		return AutoscaleDecision{}, err
	}
	demander, ok := p.(provider.Demander)
	if !ok {
		return AutoscaleDecision{}, fmt.Errorf("%w: platform %s cannot report what its workloads ask for", ErrNoAutoscale, cl.Platform)
	}
	opts := s.loopOptions()
	opts.Platform, opts.SaveChanged = p, nil
	obs, err := control.Refresh(ctx, opts)
	if err != nil {
		return AutoscaleDecision{}, atStage(ErrRefresh, err)
	}
	if obs.PlatformError != "" {
		return AutoscaleDecision{}, fmt.Errorf("%w: %s", provider.ErrPlatformUnreachable, obs.PlatformError)
	}
	var live []districts.Node
	for _, n := range obs.State.Nodes {
		if n.Phase != districts.PhaseTerminating && n.Phase != districts.PhaseLeft {
			live = append(live, n)
		}
	}
	demand, err := demander.Demand(ctx, live)
	if err != nil {
		return AutoscaleDecision{}, atStage(ErrRefresh, err)
	}
	now := s.opts.Clock.Now()
	kept := s.state.Autoscale
	if kept == nil {
		kept = &districts.AutoscaleState{}
	}
	in := decisionInput(cl, s.cfg.PriceTable(), live, demand, *kept)
	in.Now = now
	out := autoscale.Decide(in)
	next := &districts.AutoscaleState{Deployments: maps.Clone(kept.Deployments), UnderusedSince: out.UnderusedSince, Reported: out.Reported}
	if next.Deployments == nil {
		next.Deployments = map[string]districts.Autoscaled{}
	}
	for _, d := range out.Decisions {
		a := next.Deployments[d.Key.String()]
		if d.To > d.From {
			a.GrewAt = now
		}
		a.Quantity, a.Reason, a.At, a.Remove = d.To, d.Reason, now, d.Remove
		next.Deployments[d.Key.String()] = a
	}
	return AutoscaleDecision{
		Report: AutoscaleReport{Decisions: out.Decisions, Problems: out.NewProblems, Pending: len(demand.Pending), Nodes: len(demand.Nodes)},
		next:   next,
		serial: s.state.Serial,
	}, nil
}

// Autoscale records d in the state (never in cluster.json) and, when a
// quantity changed, applies it through the loop like any apply: drains
// honour disruption budgets, the budget refuses growth past it (and then
// the decision is not kept). It needs Change access, and a state no run
// changed since d was decided: else ErrStaleDecision, nothing written.
func (s *Session) Autoscale(ctx context.Context, d AutoscaleDecision, o AutoscaleOptions) (Result, error) {
	if err := s.use(Change, "autoscale"); err != nil {
		return Result{}, err
	}
	if d.next == nil {
		return Result{}, errors.New("autoscale: no decision: call DecideAutoscale first")
	}
	if s.state.Serial != d.serial {
		return Result{}, fmt.Errorf("%w (serial %d, now %d)", ErrStaleDecision, d.serial, s.state.Serial)
	}
	prev := s.state.Autoscale
	s.state.Autoscale = d.next
	if len(d.Report.Decisions) == 0 {
		// Only what it remembers changed: one save, no loop.
		return Result{Converged: true}, s.saveAutoscale(prev)
	}
	res, err := s.Apply(ctx, o.Apply)
	if errors.Is(err, control.ErrOverBudget) {
		// The budget refused the growth before anything was saved: the
		// decision is not kept, what it remembers is.
		kept := &districts.AutoscaleState{UnderusedSince: d.next.UnderusedSince, Reported: d.next.Reported}
		if prev != nil {
			kept.Deployments = prev.Deployments
		}
		s.state.Autoscale = kept
		if serr := s.saveAutoscale(prev); serr != nil {
			err = errors.Join(err, serr)
		}
	}
	return res, err
}

// saveAutoscale writes the state with its autoscale record: on failure
// the session's state goes back to prev.
func (s *Session) saveAutoscale(prev *districts.AutoscaleState) error {
	if err := s.save(s.state, control.Changed{}); err != nil {
		s.state.Autoscale = prev
		return err
	}
	if err := s.journal.Close(); err != nil {
		return err
	}
	return s.reload()
}

// decisionInput is what the decider needs: each autoscaled deployment
// with the room a new node offers, its labels and price, and which live
// nodes are its.
func decisionInput(cl districts.Cluster, prices districts.PriceTable, live []districts.Node, demand provider.Demand, kept districts.AutoscaleState) autoscale.Input {
	flavors := map[string]districts.Flavor{}
	for _, f := range cl.Flavors {
		flavors[f.Flavor] = f
	}
	nodeKey := map[string]districts.DeploymentKey{}
	var masters []string
	for _, n := range live {
		nodeKey[n.ID] = n.Key()
		if n.Role == districts.RoleMaster {
			masters = append(masters, n.ID)
		}
	}
	// What goes with every node (DaemonSets): the most any node carries.
	var overheadCPU, overheadMem, overheadPods int64
	loads := map[districts.DeploymentKey][]provider.NodeLoad{}
	for _, n := range demand.Nodes {
		overheadCPU, overheadMem = max(overheadCPU, n.OverheadMilliCPU), max(overheadMem, n.OverheadMemoryBytes)
		overheadPods = max(overheadPods, n.OverheadPods)
		loads[nodeKey[n.Node]] = append(loads[nodeKey[n.Node]], n)
	}
	in := autoscale.Input{Demand: demand, NodeGroup: map[string]districts.DeploymentKey{}, NoTargets: map[string]bool{},
		UnderusedSince: kept.UnderusedSince, Reported: kept.Reported, Settings: cl.Autoscaler.Resolved()}
	if cl.Platform == "kubernetes" {
		for _, id := range masters {
			in.NoTargets[id] = true // tainted: workloads do not go there
		}
	}
	res := districts.Resources{Autoscale: &kept}
	for _, d := range cl.Deployments {
		a := d.Autoscale
		if a == nil {
			continue
		}
		k := d.Key()
		g := autoscale.Group{Key: k, Min: a.Min, Max: a.Max, Current: d.QuantityIn(res), Spread: a.Spread,
			GrewAt: kept.Deployments[k.String()].GrewAt}
		g.Price, g.Priced = prices.Hourly(k.District, k.Flavor)
		if ls := loads[k]; len(ls) > 0 {
			// A node of the deployment shows what a new one offers.
			n := ls[0]
			g.MilliCPU, g.MemoryBytes = n.MilliCPU-n.OverheadMilliCPU, n.MemoryBytes-n.OverheadMemoryBytes
			if n.Pods > 0 {
				g.Pods = n.Pods - n.OverheadPods
			}
			g.Labels = maps.Clone(n.Labels)
			delete(g.Labels, "kubernetes.io/hostname")
		} else {
			// Else the flavor, less what the node's own services keep
			// (about 5 %) and what goes with every node.
			f := flavors[d.Flavor]
			g.MilliCPU = int64(f.Cores)*950 - overheadCPU
			g.MemoryBytes = int64(f.MemoryGB*0.95*(1<<30)) - overheadMem
			g.Labels = maps.Clone(d.Tags)
			if g.Labels == nil {
				g.Labels = map[string]string{}
			}
			if cl.Platform == "kubernetes" {
				g.Labels["kubernetes.io/os"] = "linux"
				g.Labels["kubernetes.io/arch"] = runtime.GOARCH
				g.Pods = kubeletMaxPods - overheadPods
			}
		}
		in.Groups = append(in.Groups, g)
	}
	for id, k := range nodeKey {
		if slices.ContainsFunc(in.Groups, func(g autoscale.Group) bool { return g.Key == k }) {
			in.NodeGroup[id] = k
		}
	}
	return in
}

// kubeletMaxPods is how many pods a kubelet runs at most unless told
// otherwise (its maxPods; transit's nodes keep it).
const kubeletMaxPods = 110

// autoscaleNotes say, for a plan, what the autoscaler decided for each
// autoscaled deployment.
func autoscaleNotes(cl districts.Cluster, res districts.Resources) []string {
	var notes []string
	for _, d := range cl.Deployments {
		a := d.Autoscale
		if a == nil {
			continue
		}
		note := fmt.Sprintf("%s: autoscaled to %d (min %d, max %d)", d.Key(), d.QuantityIn(res), a.Min, a.Max)
		if res.Autoscale != nil {
			if rec, ok := res.Autoscale.Deployments[d.Key().String()]; ok && rec.Reason != "" {
				note += " on " + rec.At.UTC().Format("2006-01-02 15:04") + ": " + rec.Reason
			}
		}
		notes = append(notes, note)
	}
	return notes
}
