// Package scale decides processor replicas from Kafka's offsets: how fast
// records arrive, how fast one replica works them off, and how much is
// waiting. It is topology-aware: a stage expects what its upstream is
// about to send (the upstream's arrival times its output per input), so a
// surge at a source scales every stage at once instead of one after
// another as the lag reaches each. Samples taken while a group rebalances
// are set aside (its commits pause, so its lag grows for no reason); more
// replicas come at once, fewer only after the rate held low for a while;
// a processor allowed zero replicas goes to zero when nothing arrives and
// nothing waits, and back to one as soon as something does.
package scale

import (
	"math"
	"time"
)

// Processor is a stage of the topology.
type Processor struct {
	Name string
	// Upstream is the processor read, "" for a source reader.
	Upstream string
	Min, Max int32
}

// Sample is what Kafka and the API server said about a processor at At.
type Sample struct {
	At time.Time
	// InputEnd and Committed are sums over the input's partitions.
	InputEnd, Committed int64
	// OutputEnd sums the ends of the topic the processor writes for its
	// readers; -1 when it writes only sinks.
	OutputEnd int64
	// Partitions of the input: more replicas would idle.
	Partitions int32
	// Replicas ready now: they do the work the sample shows.
	Replicas int32
	// Desired is how many were asked for (the Deployment's spec): more
	// than Replicas while new ones start. 0 means Replicas.
	Desired int32
	// Rebalancing: the group is between generations.
	Rebalancing bool
	// Members identifies the group's members (their ids): when it
	// differs between two samples the group rebalanced between them,
	// however briefly.
	Members string
}

// Decision is a processor's replicas and why.
type Decision struct {
	Replicas int32
	Lag      int64
	// Arrival is the expected records per second, Capacity one replica's.
	Arrival, Capacity float64
}

// Scaler keeps each processor's rates between steps. Its state is
// rebuilt from a few samples after a restart.
type Scaler struct {
	// TargetDrain is how soon a backlog should be worked off (30s).
	TargetDrain time.Duration
	// ScaleDownDelay is how long fewer replicas must do before they are
	// taken away (60s).
	ScaleDownDelay time.Duration

	state map[string]*stage
}

type stage struct {
	last              Sample
	arrival, consumed ewma    // records/s into the input, and committed
	output            ewma    // records/s into the output topic
	capacity          ewma    // records/s one replica commits when it has a backlog
	recent            float64 // records/s into the input over the last interval
	arriving          bool    // records arrived in the last interval
	settled           bool    // the last interval had no rebalance
	lowSince          time.Time
	replicas          int32
}

type ewma struct {
	v   float64
	set bool
}

func (e *ewma) add(x float64) {
	const alpha = 0.5
	if !e.set {
		e.v, e.set = x, true
		return
	}
	e.v = alpha*x + (1-alpha)*e.v
}

func (s *Scaler) defaults() {
	if s.TargetDrain <= 0 {
		s.TargetDrain = 30 * time.Second
	}
	if s.ScaleDownDelay <= 0 {
		s.ScaleDownDelay = time.Minute
	}
	if s.state == nil {
		s.state = map[string]*stage{}
	}
}

// Step takes one sample per processor (listed upstream first) and returns
// their replicas.
func (s *Scaler) Step(procs []Processor, samples map[string]Sample) map[string]Decision {
	s.defaults()
	for _, p := range procs {
		s.observe(p.Name, samples[p.Name])
	}
	out := map[string]Decision{}
	expected := map[string]float64{} // arrival each stage should plan for
	for _, p := range procs {
		st := s.state[p.Name]
		smp := samples[p.Name]
		// A rise counts at once, a fall as it holds.
		arrival := math.Max(st.arrival.v, st.recent)
		if up, ok := s.state[p.Upstream]; ok && p.Upstream != "" {
			// What the upstream will write: its own expected arrival times
			// what it writes per record it reads.
			sel := 1.0
			if up.consumed.set && up.consumed.v > 0 && up.output.set {
				sel = up.output.v / up.consumed.v
			}
			arrival = math.Max(arrival, expected[p.Upstream]*sel)
		}
		expected[p.Name] = arrival
		lag := max(smp.InputEnd-smp.Committed, 0)
		d := Decision{Lag: lag, Arrival: arrival, Capacity: st.capacity.v}
		d.Replicas = s.decide(p, st, smp, arrival, lag)
		st.replicas = d.Replicas
		out[p.Name] = d
	}
	return out
}

func (s *Scaler) observe(name string, smp Sample) {
	st, ok := s.state[name]
	if !ok {
		s.state[name] = &stage{last: smp, replicas: smp.Replicas}
		return
	}
	dt := smp.At.Sub(st.last.At).Seconds()
	if dt <= 0 {
		return
	}
	prev := st.last
	st.last = smp
	st.settled = !smp.Rebalancing && !prev.Rebalancing && smp.Members == prev.Members
	if !st.settled {
		return // commits paused: nothing to learn
	}
	st.recent = rate(prev.InputEnd, smp.InputEnd, dt)
	st.arrival.add(st.recent)
	st.arriving = smp.InputEnd > prev.InputEnd
	consumed := rate(prev.Committed, smp.Committed, dt)
	st.consumed.add(consumed)
	if smp.OutputEnd >= 0 && prev.OutputEnd >= 0 {
		st.output.add(rate(prev.OutputEnd, smp.OutputEnd, dt))
	}
	// With a backlog all along, the replicas worked as fast as they can.
	backlog := prev.InputEnd-prev.Committed > 0 && smp.InputEnd-smp.Committed > 0
	if backlog && smp.Replicas > 0 && consumed > 0 {
		st.capacity.add(consumed / float64(smp.Replicas))
	}
}

func rate(a, b int64, dt float64) float64 { return math.Max(float64(b-a), 0) / dt }

func (s *Scaler) decide(p Processor, st *stage, smp Sample, arrival float64, lag int64) int32 {
	// Decisions start from what was asked for: replicas still starting
	// are not taken back because they are not ready yet.
	current := smp.Replicas
	if smp.Desired > 0 {
		current = smp.Desired
	}
	ceiling := p.Max
	if smp.Partitions > 0 {
		ceiling = min(ceiling, smp.Partitions)
	}
	floor := p.Min
	busy := lag > 0 || st.arriving || arrival >= 1 && p.Upstream != ""
	if busy {
		floor = max(floor, 1)
	}
	ceiling = max(ceiling, floor)
	if !st.settled && !(current == 0 && busy) {
		// A rebalance (often our own last change) distorts lag and rates:
		// decide on the next clean interval, which also shows what the
		// replicas do.
		return clamp(current, floor, ceiling)
	}
	var want int32
	switch {
	case !busy:
		want = p.Min
	case st.capacity.set && st.capacity.v > 0:
		need := (arrival + float64(lag)/s.TargetDrain.Seconds()) / st.capacity.v
		want = int32(math.Ceil(need - 1e-9))
	case lag > 0 && current > 0:
		want = current * 2 // behind, and no measure yet of what a replica does
	default:
		want = max(current, 1)
	}
	want = clamp(want, floor, ceiling)
	if want >= current {
		st.lowSince = time.Time{}
		return want
	}
	if st.lowSince.IsZero() {
		st.lowSince = smp.At
	}
	if smp.At.Sub(st.lowSince) < s.ScaleDownDelay {
		return current
	}
	st.lowSince = time.Time{}
	return want
}

func clamp(v, lo, hi int32) int32 { return min(max(v, lo), hi) }

// Forget drops a processor's state (it was removed).
func (s *Scaler) Forget(name string) { delete(s.state, name) }
