package topology

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/cloudtransit/transit/controllers/streams/api/v1alpha1"
)

// randomDAG makes a valid topology of up to three parts: sources, a DAG of
// processors (each reads a source or an earlier processor), and a sink for
// every processor nobody reads.
func randomDAG(r *rand.Rand) Input {
	parts := []string{"p0", "p1", "p2"}[:1+r.IntN(3)]
	in := Input{Namespace: "ns", Name: "t", Bootstrap: "k:9092", Parts: map[string]v1alpha1.PartSpec{}}
	for _, p := range parts {
		in.Spec.Parts = append(in.Spec.Parts, v1alpha1.PartRef{Name: p, Revision: 1})
		in.Parts[p] = v1alpha1.PartSpec{Sources: map[string]v1alpha1.Endpoint{}, Sinks: map[string]v1alpha1.Sink{}, Processors: map[string]v1alpha1.Processor{}}
	}
	part := func() string { return parts[r.IntN(len(parts))] }
	var sources, procs []string
	for i := range 1 + r.IntN(3) {
		s := fmt.Sprintf("src%d", i)
		in.Parts[part()].Sources[s] = v1alpha1.Endpoint{Topic: s}
		sources = append(sources, s)
	}
	read := map[string]bool{}
	for i := range 1 + r.IntN(8) {
		name := fmt.Sprintf("proc%d", i)
		from := sources[r.IntN(len(sources))]
		if len(procs) > 0 && r.IntN(3) > 0 {
			from = procs[r.IntN(len(procs))]
		}
		read[from] = true
		p := v1alpha1.Processor{InputFrom: from, Image: "fn", MaxScale: ptr(int32(1 + r.IntN(6)))}
		in.Parts[part()].Processors[name] = p
		procs = append(procs, name)
	}
	for _, s := range sources { // every source read
		if !read[s] {
			in.Parts[part()].Processors["r"+s] = v1alpha1.Processor{InputFrom: s, Image: "fn"}
			procs = append(procs, "r"+s)
		}
	}
	for _, name := range procs {
		if read[name] && r.IntN(4) > 0 {
			continue
		}
		k := "sink-" + name
		if r.IntN(2) == 0 { // bound by the processor
			for _, ps := range in.Parts {
				if p, ok := ps.Processors[name]; ok {
					p.SinkBindings = []string{k}
					ps.Processors[name] = p
				}
			}
			in.Parts[part()].Sinks[k] = v1alpha1.Sink{Endpoint: v1alpha1.Endpoint{Topic: k}}
		} else { // or by the sink's owner
			in.Parts[part()].Sinks[k] = v1alpha1.Sink{Endpoint: v1alpha1.Endpoint{Topic: k}, InputFrom: name}
		}
	}
	return in
}

func TestPropertyValidDAGsCompose(t *testing.T) {
	for seed := range uint64(2000) {
		r := rand.New(rand.NewPCG(seed, 1))
		in := randomDAG(r)
		rev, probs := Compose(in)
		if probs != nil {
			t.Fatalf("seed %d: a valid DAG refused: %v", seed, probs)
		}
		again, _ := Compose(in)
		if !reflect.DeepEqual(rev, again) {
			t.Fatalf("seed %d: two compositions of one input differ", seed)
		}
		topics := map[string]v1alpha1.InternalTopic{}
		for _, tp := range rev.Topics {
			topics[tp.Name] = tp
		}
		groups := map[string]bool{}
		for _, p := range rev.Processors {
			if groups[p.Group] {
				t.Fatalf("seed %d: group %s twice", seed, p.Group)
			}
			groups[p.Group] = true
			if len(p.Outputs) == 0 {
				t.Fatalf("seed %d: %s writes nowhere", seed, p.Name)
			}
			if p.ReadsSource {
				continue
			}
			tp, ok := topics[p.Input.Topic]
			if !ok || writerOf(rev, tp.Name) != p.InputFrom {
				t.Fatalf("seed %d: %s reads %s, not a topic %s writes", seed, p.Name, p.Input.Topic, p.InputFrom)
			}
			if tp.Partitions < p.MaxScale {
				t.Fatalf("seed %d: %s may scale to %d on %d partitions", seed, p.Name, p.MaxScale, tp.Partitions)
			}
		}
	}
}

// Random wiring, valid or not: Compose never panics, and refuses exactly
// when a processor is on a cycle (besides any other problem it names).
func TestPropertyCyclesAreFound(t *testing.T) {
	for seed := range uint64(2000) {
		r := rand.New(rand.NewPCG(seed, 2))
		in := randomDAG(r)
		var all []string
		for _, ps := range in.Parts {
			for name := range ps.Processors {
				all = append(all, name)
			}
		}
		slices.Sort(all)
		for range 1 + r.IntN(3) { // rewire some processors anywhere
			name := all[r.IntN(len(all))]
			for _, ps := range in.Parts {
				if p, ok := ps.Processors[name]; ok {
					p.InputFrom = all[r.IntN(len(all))]
					ps.Processors[name] = p
				}
			}
		}
		inputs := map[string]string{}
		for _, ps := range in.Parts {
			for name, p := range ps.Processors {
				inputs[name] = p.InputFrom
			}
		}
		cyclic := false
		for _, start := range all {
			seen := map[string]bool{}
			for cur := start; inputs[cur] != "" && !cyclic; cur = inputs[cur] {
				if seen[cur] {
					cyclic = true
				}
				seen[cur] = true
			}
		}
		rev, probs := Compose(in)
		reported := strings.Contains(probs.Error(), "form a cycle")
		if cyclic != reported {
			t.Fatalf("seed %d: cyclic %v, cycle reported %v: %v", seed, cyclic, reported, probs)
		}
		if (rev == nil) == (probs == nil) {
			t.Fatalf("seed %d: a revision and problems, or neither", seed)
		}
	}
}

// The collector, against random states, never deletes a processor whose
// predecessor lives or whose input is unread, never a source reader, never
// a topic still written or read; and run to the end it removes everything,
// each processor after the one it reads.
func TestPropertyGarbageCollection(t *testing.T) {
	for seed := range uint64(2000) {
		r := rand.New(rand.NewPCG(seed, 3))
		rev, probs := Compose(randomDAG(r))
		if probs != nil {
			t.Fatal(probs)
		}
		procs := map[string]v1alpha1.ComposedProcessor{}
		for _, p := range rev.Processors {
			procs[p.Name] = p
		}
		alive := map[string]bool{}
		drained := map[string]bool{}
		for _, p := range rev.Processors {
			alive[p.Name] = r.IntN(4) > 0
			drained[p.Name] = r.IntN(2) == 0
		}
		run := Running{Alive: func(n string) bool { return alive[n] }, Drained: func(n string) bool { return drained[n] }}
		ps, ts := Deletable(rev, run)
		for _, n := range ps {
			p := procs[n]
			if p.ReadsSource || !drained[n] || alive[p.InputFrom] {
				t.Fatalf("seed %d: deletes %s (source reader %v, drained %v, predecessor alive %v)", seed, n, p.ReadsSource, drained[n], alive[p.InputFrom])
			}
		}
		for _, tn := range ts {
			for _, p := range rev.Processors {
				if alive[p.Name] && (p.Input.Topic == tn || slices.ContainsFunc(p.Outputs, func(o v1alpha1.Endpoint) bool { return o.Topic == tn })) {
					t.Fatalf("seed %d: deletes topic %s while %s uses it", seed, tn, p.Name)
				}
			}
		}

		// To the end: the switch removed the source readers; an input
		// drains some steps after its writer is gone.
		for _, p := range rev.Processors {
			alive[p.Name] = !p.ReadsSource
			drained[p.Name] = false
		}
		deletedAt := map[string]int{}
		topicsLeft := len(rev.Topics)
		for step := 1; step < 100; step++ {
			for _, p := range rev.Processors {
				if !alive[p.InputFrom] && r.IntN(2) == 0 {
					drained[p.Name] = true
				}
			}
			ps, ts := Deletable(rev, run)
			for _, n := range ps {
				alive[n] = false
				deletedAt[n] = step
			}
			topicsLeft = len(ts)
		}
		for _, p := range rev.Processors {
			if alive[p.Name] {
				t.Fatalf("seed %d: %s never collected", seed, p.Name)
			}
			if !p.ReadsSource && !procs[p.InputFrom].ReadsSource && deletedAt[p.Name] <= deletedAt[p.InputFrom] && procs[p.InputFrom].Name != "" {
				t.Fatalf("seed %d: %s deleted at step %d, its predecessor %s at %d", seed, p.Name, deletedAt[p.Name], p.InputFrom, deletedAt[p.InputFrom])
			}
		}
		if topicsLeft != len(rev.Topics) {
			t.Fatalf("seed %d: %d of %d topics deletable at the end", seed, topicsLeft, len(rev.Topics))
		}
	}
}
