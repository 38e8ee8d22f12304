package topology

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/cloudtransit/transit/controllers/streams/api/v1alpha1"
)

func ep(topic string) v1alpha1.Endpoint { return v1alpha1.Endpoint{Topic: topic} }

func proc(from string, sinks ...string) v1alpha1.Processor {
	return v1alpha1.Processor{InputFrom: from, Image: "fn:1", SinkBindings: sinks}
}

// twoTeams is the research's use case: team a owns the source and the
// first processor, team b the second processor and the sink.
func twoTeams() Input {
	return Input{
		Namespace: "ns", Name: "pipe", Bootstrap: "kafka:9092",
		Spec: v1alpha1.TopologySpec{Parts: []v1alpha1.PartRef{{Name: "a", Revision: 1}, {Name: "b", Revision: 1}}},
		Parts: map[string]v1alpha1.PartSpec{
			"a": {Sources: map[string]v1alpha1.Endpoint{"orders": ep("orders")},
				Processors: map[string]v1alpha1.Processor{"clean": proc("orders")}},
			"b": {Processors: map[string]v1alpha1.Processor{"enrich": proc("clean", "out")},
				Sinks: map[string]v1alpha1.Sink{"out": {Endpoint: ep("enriched")}}},
		},
	}
}

func TestComposeTwoTeams(t *testing.T) {
	rev, probs := Compose(twoTeams())
	if probs != nil {
		t.Fatal(probs)
	}
	if len(rev.Processors) != 2 || rev.Processors[0].Name != "clean" || rev.Processors[1].Name != "enrich" {
		t.Fatalf("processors: %+v", rev.Processors)
	}
	clean, enrich := rev.Processors[0], rev.Processors[1]
	id := ID(rev.Hash, "")
	internal := "streams.ns.pipe." + id + ".clean"
	if !clean.ReadsSource || clean.Input != (v1alpha1.Endpoint{Bootstrap: "kafka:9092", Topic: "orders"}) {
		t.Errorf("clean's input: %+v", clean.Input)
	}
	if len(clean.Outputs) != 1 || clean.Outputs[0].Topic != internal {
		t.Errorf("clean's outputs: %+v, want %s", clean.Outputs, internal)
	}
	if enrich.ReadsSource || enrich.Input.Topic != internal || len(enrich.Outputs) != 1 || enrich.Outputs[0].Topic != "enriched" {
		t.Errorf("enrich: in %+v out %+v", enrich.Input, enrich.Outputs)
	}
	if len(rev.Topics) != 1 || rev.Topics[0].Name != internal || rev.Topics[0].Partitions != DefaultMaxScale {
		t.Errorf("topics: %+v", rev.Topics)
	}
	if clean.Group == enrich.Group || clean.Group != "streams.ns.pipe."+id+".clean" {
		t.Errorf("groups: %q %q", clean.Group, enrich.Group)
	}
	if clean.DeadLetter != (v1alpha1.Endpoint{Bootstrap: "kafka:9092", Topic: "streams.ns.pipe.deadletter"}) {
		t.Errorf("dead letter: %+v", clean.DeadLetter)
	}
	if Name(rev) != "pipe-"+id {
		t.Errorf("name %q", Name(rev))
	}
}

// A sink owner may bind itself to a processor instead of editing it.
func TestSinkInputFrom(t *testing.T) {
	in := twoTeams()
	in.Parts["b"] = v1alpha1.PartSpec{Processors: map[string]v1alpha1.Processor{"enrich": proc("clean")},
		Sinks: map[string]v1alpha1.Sink{"out": {Endpoint: ep("enriched"), InputFrom: "enrich"}}}
	rev, probs := Compose(in)
	if probs != nil {
		t.Fatal(probs)
	}
	if out := rev.Processors[1].Outputs; len(out) != 1 || out[0].Topic != "enriched" {
		t.Fatalf("enrich's outputs: %+v", out)
	}
}

// Every problem at once, each naming its part and node.
func TestComposeProblems(t *testing.T) {
	cases := []struct {
		name string
		edit func(in *Input)
		want []string
	}{
		{"a cycle across two parts", func(in *Input) {
			in.Parts["a"].Processors["clean"] = proc("enrich")
		}, []string{`part "a", processor "clean": processors "clean" → "enrich" → "clean" form a cycle (parts "a", "b")`,
			`part "a", source "orders": nothing reads it`}},
		{"a processor reading itself", func(in *Input) {
			in.Parts["b"].Processors["enrich"] = proc("enrich", "out")
		}, []string{`part "b", processor "enrich": processors "enrich" → "enrich" form a cycle (parts "b")`,
			`part "a", processor "clean": its output feeds nothing`}},
		{"one name in two parts", func(in *Input) {
			b := in.Parts["b"]
			b.Sources = map[string]v1alpha1.Endpoint{"clean": ep("x")}
			in.Parts["b"] = b
		}, []string{`part "b", source "clean": the name is also a processor of part "a"`}},
		{"inputFrom naming a sink", func(in *Input) {
			in.Parts["a"].Processors["extra"] = proc("out", "out")
		}, []string{`part "a", processor "extra": inputFrom "out" is a sink (part "b")`,
			`part "b", sink "out": written by processors "enrich" and "extra"`}},
		{"inputFrom naming nothing", func(in *Input) {
			in.Parts["b"].Processors["enrich"] = proc("cleaned", "out")
		}, []string{`part "b", processor "enrich": inputFrom "cleaned" names no source or processor`,
			`part "a", processor "clean": its output feeds nothing`}},
		{"an unused output", func(in *Input) {
			in.Parts["b"].Processors["enrich"] = proc("clean")
		}, []string{`part "b", processor "enrich": its output feeds nothing`, `part "b", sink "out": nothing writes to it`}},
		{"source to sink", func(in *Input) {
			in.Parts["b"].Sinks["raw"] = v1alpha1.Sink{Endpoint: ep("raw"), InputFrom: "orders"}
		}, []string{`part "b", sink "raw": inputFrom "orders" is a source (part "a"): a source never feeds a sink directly`}},
		{"sinkBindings naming a source", func(in *Input) {
			in.Parts["b"].Processors["enrich"] = proc("clean", "out", "orders")
		}, []string{`part "b", processor "enrich": sinkBindings "orders" is a source (part "a"), not a sink`}},
		{"a missing part revision", func(in *Input) {
			in.Spec.Parts[1].Revision = 7
			delete(in.Parts, "b")
		}, []string{`part "b": revision 7 does not exist (no TopologyPartRevision b-7)`,
			`part "a", processor "clean": its output feeds nothing`}},
		{"illegal topic names", func(in *Input) {
			in.Parts["a"].Sources["orders"] = ep("orders/eu")
			in.Parts["b"].Sinks["out"] = v1alpha1.Sink{Endpoint: ep("..")}
		}, []string{`part "a", source "orders": topic "orders/eu" is no legal Kafka topic name`,
			`part "b", sink "out": topic ".." is no legal Kafka topic name`}},
		{"no Kafka", func(in *Input) { in.Bootstrap = "" },
			[]string{`part "a", source "orders": no bootstrap`, `part "b", sink "out": no bootstrap`}},
		{"exactly-once across clusters", func(in *Input) {
			in.Spec.Delivery = v1alpha1.ExactlyOnce
			in.Parts["b"].Sinks["out"] = v1alpha1.Sink{Endpoint: v1alpha1.Endpoint{Bootstrap: "other:9092", Topic: "enriched"}}
		}, []string{`part "b", processor "enrich": delivery exactlyOnce: it reads Kafka kafka:9092 and writes Kafka other:9092`}},
		{"minScale above maxScale", func(in *Input) {
			p := proc("orders")
			p.MinScale = ptr(int32(5))
			in.Parts["a"].Processors["clean"] = p
		}, []string{`part "a", processor "clean": minScale 5 and maxScale 4`}},
		{"a Kafka Secret without a Kafka, and two Secrets for one Kafka", func(in *Input) {
			in.Parts["a"].Sources["orders"] = v1alpha1.Endpoint{Topic: "orders", KafkaSecret: "team-a"}
			in.Parts["b"].Sinks["out"] = v1alpha1.Sink{Endpoint: v1alpha1.Endpoint{Bootstrap: "other:9092", Topic: "enriched", KafkaSecret: "team-b"}}
			in.Parts["b"].Sinks["audit"] = v1alpha1.Sink{InputFrom: "enrich", Endpoint: v1alpha1.Endpoint{Bootstrap: "other:9092", Topic: "audit", KafkaSecret: "audit"}}
		}, []string{`part "a", source "orders": kafkaSecret "team-a" without bootstrap`,
			`part "b", sink "out": kafkaSecret "team-b", but sink "audit" of part "b" reaches Kafka other:9092 with "audit": one Secret per cluster`}},
		{"a long topology name", func(in *Input) { in.Name = strings.Repeat("t", MaxTopologyName+1) },
			[]string{"the topology's name is 126 characters long: at most 125"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := twoTeams()
			c.edit(&in)
			rev, probs := Compose(in)
			if rev != nil {
				t.Fatalf("composed an invalid topology: %+v", rev)
			}
			got := probs.Error()
			for _, w := range c.want {
				if !strings.Contains(got, w) {
					t.Errorf("problems %q\nlack %q", probs.Strings(), w)
				}
			}
			if len(probs) != len(c.want) {
				t.Errorf("%d problems, want %d: %q", len(probs), len(c.want), probs.Strings())
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// Scale is not content: a scale-only edit keeps the hash, so it applies to
// the running revision in place; anything else changes it.
func TestHash(t *testing.T) {
	base, _ := Compose(twoTeams())
	scaled := twoTeams()
	p := proc("orders")
	p.MaxScale = ptr(int32(9))
	scaled.Parts["a"].Processors["clean"] = p
	scaled.Spec.DefaultScale.MinScale = ptr(int32(0))
	got, _ := Compose(scaled)
	if got.Hash != base.Hash {
		t.Errorf("a scale-only edit changed the hash")
	}
	if got.Processors[0].MaxScale != 9 || got.Processors[1].MinScale != 0 {
		t.Errorf("scale not applied: %+v", got.Processors)
	}
	for name, edit := range map[string]func(in *Input){
		"image": func(in *Input) {
			in.Parts["a"].Processors["clean"] = v1alpha1.Processor{InputFrom: "orders", Image: "fn:2"}
		},
		"delivery":  func(in *Input) { in.Spec.Delivery = v1alpha1.ExactlyOnce },
		"sink":      func(in *Input) { in.Parts["b"].Sinks["out"] = v1alpha1.Sink{Endpoint: ep("other")} },
		"bootstrap": func(in *Input) { in.Bootstrap = "kafka2:9092" },
		"env": func(in *Input) {
			in.Parts["b"].Processors["enrich"] = v1alpha1.Processor{InputFrom: "clean", Image: "fn:1", SinkBindings: []string{"out"},
				Env: []corev1.EnvVar{{Name: "A", Value: "1"}}}
		},
	} {
		in := twoTeams()
		edit(&in)
		got, probs := Compose(in)
		if probs != nil {
			t.Fatalf("%s: %v", name, probs)
		}
		if got.Hash == base.Hash {
			t.Errorf("a %s edit kept the hash", name)
		}
	}
	// One broker list, one spelling.
	a, b := twoTeams(), twoTeams()
	a.Bootstrap, b.Bootstrap = "k1:9092,k2:9092", " k2:9092 , k1:9092"
	ra, _ := Compose(a)
	rb, _ := Compose(b)
	if ra.Hash != rb.Hash {
		t.Errorf("two spellings of one broker list hash apart")
	}
}

// Every reader of a revision has a group of its own, a source reader of
// the same name included: a standby revision's readers join their groups
// while the old ones still read (where each begins is the controller's
// start offsets), and the new revision writes new topics.
func TestGroupsPerRevision(t *testing.T) {
	first, _ := Compose(twoTeams())
	pred := &v1alpha1.TopologyRevision{Spec: *first}
	pred.Name = Name(first)

	in := twoTeams()
	in.Predecessor = pred
	in.Parts["a"].Processors["clean"] = v1alpha1.Processor{InputFrom: "orders", Image: "fn:2"}
	in.Parts["a"].Processors["audit"] = proc("orders", "log")
	a := in.Parts["a"]
	a.Sinks = map[string]v1alpha1.Sink{"log": {Endpoint: ep("audit")}}
	in.Parts["a"] = a
	next, probs := Compose(in)
	if probs != nil {
		t.Fatal(probs)
	}
	if next.Predecessor != pred.Name || Name(next) == pred.Name {
		t.Fatalf("predecessor %q, name %q", next.Predecessor, Name(next))
	}
	old := map[string]bool{}
	for _, p := range first.Processors {
		old[p.Group] = true
	}
	id := ID(next.Hash, next.Predecessor)
	for _, p := range next.Processors {
		if want := Group("ns", "pipe", id, p.Name); p.Group != want || old[p.Group] {
			t.Errorf("%s: group %q, want %q, a group of its own", p.Name, p.Group, want)
		}
		if !p.ReadsSource && slices.ContainsFunc(first.Processors, func(q v1alpha1.ComposedProcessor) bool { return q.Input == p.Input }) {
			t.Errorf("%s, an internal reader, reads its predecessor's topic %s", p.Name, p.Input.Topic)
		}
	}
	// Composing again (a controller restarted between writes) names the
	// same revision.
	again, _ := Compose(in)
	if Name(again) != Name(next) {
		t.Errorf("recomposition named %q, then %q", Name(next), Name(again))
	}
}

// A cluster an endpoint names a Secret for is reached with it: the
// revision says so, once per cluster, whichever endpoints are there
// (internal topics and dead letters follow their source's cluster); a
// changed Secret is a new revision.
func TestKafkaSecrets(t *testing.T) {
	in := twoTeams()
	in.Parts["a"].Sources["orders"] = v1alpha1.Endpoint{Bootstrap: "k2:9093,k1:9093", Topic: "orders", KafkaSecret: "team-a"}
	in.Parts["b"].Sinks["out"] = v1alpha1.Sink{Endpoint: v1alpha1.Endpoint{Bootstrap: "k1:9093,k2:9093", Topic: "enriched", KafkaSecret: "team-a"}}
	rev, probs := Compose(in)
	if probs != nil {
		t.Fatal(probs)
	}
	if want := []v1alpha1.ClusterSecret{{Bootstrap: "k1:9093,k2:9093", Secret: "team-a"}}; len(rev.KafkaSecrets) != 1 || rev.KafkaSecrets[0] != want[0] {
		t.Fatalf("KafkaSecrets %+v, want %+v", rev.KafkaSecrets, want)
	}
	for _, p := range rev.Processors {
		for _, e := range append([]v1alpha1.Endpoint{p.Input, p.DeadLetter}, p.Outputs...) {
			if rev.KafkaSecret(e.Bootstrap) != "team-a" {
				t.Errorf("processor %s: %s on %q has no Secret", p.Name, e.Topic, e.Bootstrap)
			}
		}
	}
	in.Parts["a"].Sources["orders"] = v1alpha1.Endpoint{Bootstrap: "k2:9093,k1:9093", Topic: "orders", KafkaSecret: "team-a-rotated"}
	in.Parts["b"].Sinks["out"] = v1alpha1.Sink{Endpoint: v1alpha1.Endpoint{Bootstrap: "k1:9093,k2:9093", Topic: "enriched", KafkaSecret: "team-a-rotated"}}
	again, probs := Compose(in)
	if probs != nil {
		t.Fatal(probs)
	}
	if again.Hash == rev.Hash {
		t.Error("another Secret composes the same revision")
	}
}
