package scale

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// The scaling benchmark is a simulation (make bench prints its table): a
// chain of three stages, 100, 50 and 200 records/s per replica, 64
// partitions each, fed 10 records/s that step to 800. A new replica works
// startDelay after it was asked for; a stage whose ready replicas change
// stops for rebalancePause (its group rebalances) and its commits pause,
// so its lag grows for no reason of load. Two
// deciders: this package's (every 2 s), and a per-stage lag rule as KEDA's
// Kafka scaler drives the HPA: every 15 s, replicas = ceil(lag /
// lagThreshold), at most doubling (or +4) per step, fewer after a 300 s
// stabilization. Reported: seconds until every stage has the replicas
// its rate needs, the most replicas each ever had, and seconds until the
// last stage's backlog is gone.

const (
	rebalancePause = 3 * time.Second
	// startDelay is how long a new replica takes to work: a pod scheduled,
	// started and in its group.
	startDelay   = 10 * time.Second
	lagThreshold = 100
)

type decider interface {
	decide(s *sim, t int) // may change s.replicas
}

type ours struct {
	sc *Scaler
}

func (o ours) decide(s *sim, t int) {
	if t%2 != 0 {
		return
	}
	smp := s.samples()
	d := o.sc.Step(s.procs, smp)
	for i, p := range s.procs {
		s.set(i, d[p.Name].Replicas)
	}
}

type perStageLag struct {
	lowSince []int
}

func (k *perStageLag) decide(s *sim, t int) {
	if t%15 != 0 {
		return
	}
	for i := range s.procs {
		lag := s.input[i] - s.done[i]
		want := int32(math.Ceil(float64(lag) / lagThreshold))
		cur := s.replicas[i]
		want = min(want, max(2*cur, cur+4), 64)
		want = max(want, 1)
		switch {
		case want > cur:
			s.set(i, want)
			k.lowSince[i] = -1
		case want < cur:
			if k.lowSince[i] < 0 {
				k.lowSince[i] = t
			}
			if t-k.lowSince[i] >= 300 {
				s.set(i, want)
				k.lowSince[i] = -1
			}
		}
	}
}

// samples of the simulation, with rebalancing flags.
func (s *sim) samples() map[string]Sample {
	out := map[string]Sample{}
	for i, p := range s.procs {
		outEnd := int64(-1)
		if i+1 < len(s.procs) {
			outEnd = s.input[i+1]
		}
		out[p.Name] = Sample{At: s.now, InputEnd: s.input[i], Committed: s.done[i], OutputEnd: outEnd,
			Partitions: 64, Replicas: s.ready(i), Desired: s.replicas[i], Rebalancing: s.rebal[i]}
	}
	return out
}

// set changes a stage's replicas; the group rebalances when they have
// started or stopped (step).
func (s *sim) set(i int, n int32) {
	s.resize(i, n)
}

func runScaling(d decider) (reach int, most []int32, drained int) {
	s := newSim(100, 50, 200)
	s.startDelay = startDelay
	s.rebalUntil = make([]time.Time, 3)
	s.members = make([]int32, 3)
	target := []int32{8, 16, 4}
	most = make([]int32, 3)
	reach, drained = -1, -1
	// Warm up at 10 records/s, with one burst so capacities are known.
	for t := range 400 {
		rate := int64(10)
		if t >= 20 && t < 50 {
			rate = 400
		}
		s.step(rate)
		d.decide(s, t)
	}
	for t := range 600 {
		s.step(800)
		d.decide(s, t)
		ok := true
		for i := range 3 {
			most[i] = max(most[i], s.replicas[i])
			ok = ok && s.ready(i) >= target[i]
		}
		if ok && reach < 0 {
			reach = t + 1
		}
		if reach >= 0 && drained < 0 && s.input[2]-s.done[2] <= 800 && s.input[0]-s.done[0] <= 800 && s.input[1]-s.done[1] <= 800 {
			drained = t + 1
		}
	}
	return reach, most, drained
}

// step is tick with rebalances: a stage whose ready replicas changed
// rebalances, and does no work meanwhile.
func (s *sim) step(rate int64) {
	for i := range s.procs {
		if r := s.ready(i); r != s.members[i] {
			s.members[i] = r
			s.rebalUntil[i] = s.now.Add(rebalancePause)
		}
		s.rebal[i] = s.now.Before(s.rebalUntil[i])
	}
	s.tick(rate)
}

func BenchmarkScaling(b *testing.B) {
	rows := []struct {
		name string
		d    func() decider
	}{
		{"transit (topology-aware)", func() decider {
			return ours{sc: &Scaler{TargetDrain: 30 * time.Second, ScaleDownDelay: time.Minute}}
		}},
		{"per-stage lag (KEDA-like)", func() decider { return &perStageLag{lowSince: []int{-1, -1, -1}} }},
	}
	fmt.Println("| decider | all stages' replicas ready at target | most replicas (target 8, 16, 4) | backlogs ≤ 1 s of input |")
	fmt.Println("|---|---|---|---|")
	for _, r := range rows {
		b.Run(r.name, func(b *testing.B) {
			var reach, drained int
			var most []int32
			for range b.N {
				reach, most, drained = runScaling(r.d())
			}
			b.ReportMetric(float64(reach), "s-to-target")
			fmt.Printf("| %s | %d s | %d, %d, %d | %d s |\n", r.name, reach, most[0], most[1], most[2], drained)
		})
	}
}
