package streams

import (
	"context"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/cloudtransit/transit/controllers/streams/api/v1alpha1"
	"github.com/cloudtransit/transit/controllers/streams/scale"
)

// sampleEvery is how often the autoscaler asks Kafka about a topology.
const sampleEvery = 2 * time.Second

// autoscalers keep one scaler per running revision.
type autoscalers struct {
	mu sync.Mutex
	m  map[types.NamespacedName]*autoscaler
}

type autoscaler struct {
	revision  string
	scaler    *scale.Scaler
	sampled   time.Time
	decisions map[string]scale.Decision
}

func (a *autoscalers) get(key types.NamespacedName, rev string, s v1alpha1.Scaling) *autoscaler {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil {
		a.m = map[types.NamespacedName]*autoscaler{}
	}
	as := a.m[key]
	if as == nil || as.revision != rev {
		as = &autoscaler{revision: rev, scaler: &scale.Scaler{}, decisions: map[string]scale.Decision{}}
		a.m[key] = as
	}
	if s.TargetDrain != nil {
		as.scaler.TargetDrain = s.TargetDrain.Duration
	}
	if s.ScaleDownDelay != nil {
		as.scaler.ScaleDownDelay = s.ScaleDownDelay.Duration
	}
	return as
}

func (a *autoscalers) forget(key types.NamespacedName) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.m, key)
}

// autoscale samples the active revision's processors (at most every
// sampleEvery) and decides their replicas. A Kafka error leaves the last
// decisions in place.
func (r *TopologyReconciler) autoscale(ctx context.Context, t *v1alpha1.Topology, obs *observed) {
	active := obs.revisions[t.Status.Active]
	if active == nil || t.Spec.Scaling.Disabled {
		return
	}
	as := r.scalers.get(types.NamespacedName{Namespace: t.Namespace, Name: t.Name}, active.Name, t.Spec.Scaling)
	now := r.Now()
	if now.Sub(as.sampled) < sampleEvery {
		return
	}
	procs := upstreamFirst(active.Spec.Processors)
	samples := map[string]scale.Sample{}
	var stages []scale.Processor
	for _, p := range procs {
		smp, err := r.sample(ctx, active, p, obs)
		if err != nil {
			return
		}
		smp.At = now
		samples[p.Name] = smp
		up := ""
		if !p.ReadsSource {
			up = p.InputFrom
		}
		stages = append(stages, scale.Processor{Name: p.Name, Upstream: up, Min: p.MinScale, Max: p.MaxScale})
	}
	as.sampled = now
	as.decisions = as.scaler.Step(stages, samples)
}

func (r *TopologyReconciler) sample(ctx context.Context, rev *v1alpha1.TopologyRevision, p v1alpha1.ComposedProcessor, obs *observed) (scale.Sample, error) {
	eos := rev.Spec.Delivery == v1alpha1.ExactlyOnce
	ends, err := r.Kafka.Ends(ctx, p.Input.Bootstrap, p.Input.Topic, eos)
	if err != nil {
		return scale.Sample{}, err
	}
	// A partition never committed has all from where its reader begins to
	// read (a source reader: the recorded start; else all it holds): a
	// stage at zero replicas is woken by it.
	from, err := r.Kafka.Positions(ctx, p.Input.Bootstrap, p.Group, p.Input.Topic, ends, rev.Status.StartOf(p.Group, p.Input.Topic))
	if err != nil {
		return scale.Sample{}, err
	}
	state, members, err := r.Kafka.GroupState(ctx, p.Input.Bootstrap, p.Group)
	if err != nil {
		return scale.Sample{}, err
	}
	smp := scale.Sample{OutputEnd: -1, Partitions: int32(len(ends)),
		Rebalancing: state == "PreparingRebalance" || state == "CompletingRebalance", Members: strings.Join(members, " ")}
	for part, end := range ends {
		smp.InputEnd += end
		smp.Committed += min(from[part], end)
	}
	for _, it := range rev.Spec.Topics {
		if len(p.Outputs) > 0 && p.Outputs[0].Topic == it.Name {
			outs, err := r.Kafka.Ends(ctx, it.Bootstrap, it.Name, eos)
			if err != nil {
				return scale.Sample{}, err
			}
			smp.OutputEnd = 0
			for _, e := range outs {
				smp.OutputEnd += e
			}
		}
	}
	if d := obs.deployment(rev.Name, p.Name); d != nil {
		smp.Replicas = d.Status.ReadyReplicas
		if d.Spec.Replicas != nil {
			smp.Desired = *d.Spec.Replicas
		}
	}
	return smp, nil
}

// upstreamFirst orders processors so each comes after the one it reads.
func upstreamFirst(procs []v1alpha1.ComposedProcessor) []v1alpha1.ComposedProcessor {
	byName := map[string]v1alpha1.ComposedProcessor{}
	for _, p := range procs {
		byName[p.Name] = p
	}
	var out []v1alpha1.ComposedProcessor
	placed := map[string]bool{}
	var place func(p v1alpha1.ComposedProcessor)
	place = func(p v1alpha1.ComposedProcessor) {
		if placed[p.Name] {
			return
		}
		placed[p.Name] = true
		if up, ok := byName[p.InputFrom]; ok && !p.ReadsSource {
			place(up)
		}
		out = append(out, p)
	}
	for _, p := range procs {
		place(p)
	}
	return out
}
