package streams

import (
	"testing"

	"github.com/cloudtransit/transit/controllers/streams/api/v1alpha1"
)

// Which old readers a new source reader takes over from: the one of its
// name (it continues that stream), else those that fed its sinks, else
// those of its part; another team's reader of the same source never, and
// a new branch has none.
func TestPredecessors(t *testing.T) {
	orders := v1alpha1.Endpoint{Bootstrap: "k:9092", Topic: "orders"}
	ep := func(topic string) v1alpha1.Endpoint { return v1alpha1.Endpoint{Bootstrap: "k:9092", Topic: topic} }
	reader := func(name, part string, outs ...v1alpha1.Endpoint) v1alpha1.ComposedProcessor {
		return v1alpha1.ComposedProcessor{Name: name, Part: part, InputFrom: "orders", ReadsSource: true, Input: orders, Outputs: outs, Group: "g-" + name}
	}
	// Team a: clean → (internal topic) → b's enrich → enriched. Team s:
	// slow → slowed.
	old := v1alpha1.TopologyRevisionSpec{
		Topics: []v1alpha1.InternalTopic{{Name: "t-clean", Bootstrap: "k:9092"}},
		Processors: []v1alpha1.ComposedProcessor{
			reader("clean", "a", ep("t-clean")),
			{Name: "enrich", Part: "b", InputFrom: "clean", Input: ep("t-clean"), Outputs: []v1alpha1.Endpoint{ep("enriched")}},
			reader("slow", "s", ep("slowed")),
		},
	}
	names := func(ps []v1alpha1.ComposedProcessor) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.Name)
		}
		return out
	}
	for _, tc := range []struct {
		what string
		p    v1alpha1.ComposedProcessor
		want []string
	}{
		{"renamed, same sink", reader("slower", "s", ep("slowed")), []string{"slow"}},
		{"same name, now feeding another's sink", reader("clean", "a", ep("slowed")), []string{"clean"}},
		{"renamed upstream of another team's sink", reader("scrub", "a", ep("t-clean")), []string{"clean"}},
		{"same part, its sink renamed", reader("slow2", "s", ep("slowed-v2")), []string{"slow"}},
		{"a new branch", reader("audit", "x", ep("audit")), nil},
		{"another source", v1alpha1.ComposedProcessor{Name: "other", Part: "s", ReadsSource: true, Input: ep("payments"), Outputs: []v1alpha1.Endpoint{ep("slowed")}}, nil},
	} {
		next := old.DeepCopy()
		next.Processors = append(next.Processors, tc.p)
		if tc.p.Outputs[0].Topic == "t-clean" {
			next.Processors[1].InputFrom = tc.p.Name
		}
		got := names(predecessors(next, &old, tc.p))
		if len(got) != len(tc.want) || len(got) > 0 && got[0] != tc.want[0] {
			t.Errorf("%s: predecessors %v, want %v", tc.what, got, tc.want)
		}
	}
}
