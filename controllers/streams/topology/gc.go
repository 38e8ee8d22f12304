package topology

import (
	"slices"

	"github.com/cloudtransit/transit/controllers/streams/api/v1alpha1"
)

// Running says what still runs of a phasing-out revision, as observed.
type Running struct {
	// Alive: the processor's Deployment or any of its pods exists (a
	// terminating pod may still write).
	Alive func(processor string) bool
	// Drained: the processor's group has committed to the end of every
	// partition of its input (exactly-once: the last stable offset).
	Drained func(processor string) bool
}

// Deletable is what the garbage collector may delete now in a revision
// past its switch: processors on the frontier (alive, no processor it reads
// alive) that read their input to its end, and internal topics whose writer
// and readers are all gone. Source readers are not the collector's: the
// switch removes them.
func Deletable(rev *v1alpha1.TopologyRevisionSpec, r Running) (processors, topics []string) {
	byName := map[string]v1alpha1.ComposedProcessor{}
	for _, p := range rev.Processors {
		byName[p.Name] = p
	}
	for _, p := range rev.Processors {
		if p.ReadsSource || !r.Alive(p.Name) {
			continue
		}
		if _, isProc := byName[p.InputFrom]; isProc && r.Alive(p.InputFrom) {
			continue
		}
		if r.Drained(p.Name) {
			processors = append(processors, p.Name)
		}
	}
	for _, t := range rev.Topics {
		writer := writerOf(rev, t.Name)
		if writer != "" && r.Alive(writer) {
			continue
		}
		if slices.ContainsFunc(rev.Processors, func(p v1alpha1.ComposedProcessor) bool {
			return p.Input.Topic == t.Name && p.Input.Bootstrap == t.Bootstrap && r.Alive(p.Name)
		}) {
			continue
		}
		topics = append(topics, t.Name)
	}
	return processors, topics
}

// writerOf is the processor writing an internal topic.
func writerOf(rev *v1alpha1.TopologyRevisionSpec, topic string) string {
	for _, p := range rev.Processors {
		for _, o := range p.Outputs {
			if o.Topic == topic {
				return p.Name
			}
		}
	}
	return ""
}
