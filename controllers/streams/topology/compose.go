// Package topology composes a Topology's part revisions into one pipeline,
// validates the whole, hashes it, and decides what a draining revision may
// delete. It is pure: the controller feeds it what it read from the API
// server and Kafka.
package topology

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/cloudtransit/transit/controllers/streams/api/v1alpha1"
	"github.com/cloudtransit/transit/controllers/streams/kafka"
)

// Defaults when neither a processor nor the topology names a scale.
const (
	DefaultMinScale = 1
	DefaultMaxScale = 4
)

// MaxTopologyName keeps every Kafka name the controller makes within 249
// characters: "streams." + namespace (63) + "." + topology + "." + ID (10)
// + "." + processor (40).
const MaxTopologyName = 249 - len("streams.") - 63 - 1 - 1 - 10 - 1 - 40

// Input is what Compose composes.
type Input struct {
	// Namespace and Name are the Topology's: they prefix the Kafka names
	// (consumer groups, topics), which are global to a Kafka cluster.
	Namespace, Name string
	Spec            v1alpha1.TopologySpec
	// Parts are the pinned part revisions' specs by part name; a part
	// missing here is reported.
	Parts map[string]v1alpha1.PartSpec
	// Bootstrap is the Kafka of endpoints that name none.
	Bootstrap string
	// Predecessor is the active revision, if any: source readers carry its
	// consumer groups over.
	Predecessor *v1alpha1.TopologyRevision
}

// Problem is one reason a composition is invalid.
type Problem struct {
	Part, Kind, Node string // Kind: source, sink or processor; Node may be empty
	Message          string
}

func (p Problem) String() string {
	switch {
	case p.Part == "":
		return p.Message
	case p.Node == "":
		return fmt.Sprintf("part %q: %s", p.Part, p.Message)
	default:
		return fmt.Sprintf("part %q, %s %q: %s", p.Part, p.Kind, p.Node, p.Message)
	}
}

// Problems is a composition's problems, sorted.
type Problems []Problem

func (ps Problems) Error() string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, "; ")
}

// Strings lists the problems' messages.
func (ps Problems) Strings() []string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return s
}

type kind string

const (
	source    kind = "source"
	sink      kind = "sink"
	processor kind = "processor"
)

type node struct {
	kind kind
	part string
	name string
	ep   v1alpha1.Endpoint // sources, sinks
	sink v1alpha1.Sink
	proc v1alpha1.Processor
}

var (
	topicRE = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,249}$`)
	nameRE  = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
)

// Compose validates the composed topology and, when it is valid, returns
// the revision spec (without status) the controller would run. Every
// problem is reported at once.
func Compose(in Input) (*v1alpha1.TopologyRevisionSpec, Problems) {
	var probs Problems
	add := func(n *node, format string, args ...any) {
		p := Problem{Message: fmt.Sprintf(format, args...)}
		if n != nil {
			p.Part, p.Kind, p.Node = n.part, string(n.kind), n.name
		}
		probs = append(probs, p)
	}

	// Kafka names carry namespace, topology, ID and processor: at most 249.
	if len(in.Name) > MaxTopologyName {
		add(nil, "the topology's name is %d characters long: at most %d (it is part of Kafka topic names)", len(in.Name), MaxTopologyName)
	}
	nodes := map[string]*node{}
	var order []*node // deterministic: parts in spec order, names sorted
	for _, ref := range in.Spec.Parts {
		spec, ok := in.Parts[ref.Name]
		if !ok {
			probs = append(probs, Problem{Part: ref.Name, Message: fmt.Sprintf(
				"revision %d does not exist (no TopologyPartRevision %s-%d)", ref.Revision, ref.Name, ref.Revision)})
			continue
		}
		var mine []*node
		for name, ep := range spec.Sources {
			mine = append(mine, &node{kind: source, part: ref.Name, name: name, ep: ep})
		}
		for name, s := range spec.Sinks {
			mine = append(mine, &node{kind: sink, part: ref.Name, name: name, ep: s.Endpoint, sink: s})
		}
		for name, p := range spec.Processors {
			mine = append(mine, &node{kind: processor, part: ref.Name, name: name, proc: p})
		}
		sort.Slice(mine, func(i, j int) bool {
			return mine[i].name < mine[j].name || mine[i].name == mine[j].name && mine[i].kind < mine[j].kind
		})
		for _, n := range mine {
			if !nameRE.MatchString(n.name) || len(n.name) > 40 {
				add(n, "the name is no DNS label of at most 40 characters")
			}
			if other, dup := nodes[n.name]; dup {
				add(n, "the name is also a %s of part %q: names are unique across the topology's parts", other.kind, other.part)
				continue
			}
			nodes[n.name] = n
			order = append(order, n)
		}
	}

	bootstrap := func(ep v1alpha1.Endpoint) string {
		if ep.Bootstrap != "" {
			return kafka.ClusterKey(ep.Bootstrap)
		}
		return kafka.ClusterKey(in.Bootstrap)
	}

	// The Secret of each cluster an endpoint names one for.
	secretOf := map[string]string{}
	secretFrom := map[string]*node{}
	for _, n := range order {
		if n.kind == processor || n.ep.KafkaSecret == "" {
			continue
		}
		if n.ep.Bootstrap == "" {
			add(n, "kafkaSecret %q without bootstrap: the addon's Kafka is reached with the addon's kafka_secret (name its bootstrap too to reach it with another Secret)", n.ep.KafkaSecret)
			continue
		}
		c := bootstrap(n.ep)
		if was, ok := secretOf[c]; ok && was != n.ep.KafkaSecret {
			o := secretFrom[c]
			add(n, "kafkaSecret %q, but %s %q of part %q reaches Kafka %s with %q: one Secret per cluster in a topology", n.ep.KafkaSecret, o.kind, o.name, o.part, c, was)
			continue
		}
		secretOf[c], secretFrom[c] = n.ep.KafkaSecret, n
	}

	// Edges: who reads whom.
	reported := map[string]bool{}      // sinks whose inputFrom is wrong
	readers := map[string][]string{}   // node → processors reading it
	sinksOf := map[string][]string{}   // processor → sinks it writes
	writersOf := map[string][]string{} // sink → processors writing it
	bound := func(proc, s string) {
		if !slices.Contains(sinksOf[proc], s) {
			sinksOf[proc] = append(sinksOf[proc], s)
			writersOf[s] = append(writersOf[s], proc)
		}
	}
	for _, n := range order {
		switch n.kind {
		case source, sink:
			if !topicRE.MatchString(n.ep.Topic) || n.ep.Topic == "." || n.ep.Topic == ".." {
				add(n, "topic %q is no legal Kafka topic name (1-249 of a-z A-Z 0-9 . _ -, not . or ..)", n.ep.Topic)
			}
			if bootstrap(n.ep) == "" {
				add(n, "no bootstrap, and the streams addon was installed without a Kafka: set bootstrap")
			}
		}
		switch n.kind {
		case processor:
			from, ok := nodes[n.proc.InputFrom]
			switch {
			case n.proc.InputFrom == "":
				add(n, "inputFrom is empty: name a source or processor")
			case !ok:
				add(n, "inputFrom %q names no source or processor of the topology", n.proc.InputFrom)
			case from.kind == sink:
				add(n, "inputFrom %q is a sink (part %q): processors read sources or processors", from.name, from.part)
			default:
				readers[from.name] = append(readers[from.name], n.name)
			}
			for _, s := range n.proc.SinkBindings {
				to, ok := nodes[s]
				switch {
				case !ok:
					add(n, "sinkBindings %q names no sink of the topology", s)
				case to.kind != sink:
					add(n, "sinkBindings %q is a %s (part %q), not a sink", s, to.kind, to.part)
				default:
					bound(n.name, s)
				}
			}
			if n.proc.Image == "" {
				add(n, "image is empty")
			}
		case sink:
			if n.sink.InputFrom == "" {
				continue
			}
			reported[n.name] = true // nothing-writes-to-it would say it twice
			from, ok := nodes[n.sink.InputFrom]
			switch {
			case !ok:
				add(n, "inputFrom %q names no processor of the topology", n.sink.InputFrom)
			case from.kind == source:
				add(n, "inputFrom %q is a source (part %q): a source never feeds a sink directly; put a processor between", from.name, from.part)
			case from.kind == sink:
				add(n, "inputFrom %q is a sink (part %q): sinks take a processor's output", from.name, from.part)
			default:
				bound(from.name, n.name)
				delete(reported, n.name)
			}
		}
	}
	for _, n := range order {
		switch n.kind {
		case source:
			if len(readers[n.name]) == 0 {
				add(n, "nothing reads it: name it in a processor's inputFrom")
			}
		case processor:
			if len(readers[n.name]) == 0 && len(sinksOf[n.name]) == 0 {
				add(n, "its output feeds nothing: no processor reads it and no sink is bound to it")
			}
		case sink:
			switch w := writersOf[n.name]; len(w) {
			case 0:
				if reported[n.name] {
					break
				}
				add(n, "nothing writes to it: bind it in a processor's sinkBindings or name one in inputFrom")
			case 1:
			default:
				slices.Sort(w)
				add(n, "written by processors %s: a sink takes one processor's output", strings.Join(quoteAll(w), " and "))
			}
		}
	}
	for _, c := range cycles(order, nodes) {
		first := nodes[c[0]]
		parts := map[string]bool{}
		for _, name := range c {
			parts[nodes[name].part] = true
		}
		add(first, "processors %s form a cycle (parts %s)", strings.Join(append(quoteAll(c), fmt.Sprintf("%q", c[0])), " → "),
			strings.Join(quoteAll(sortedKeys(parts)), ", "))
	}

	// Scale.
	scaleOf := func(n *node) (int32, int32) {
		lo, hi := int32(DefaultMinScale), int32(DefaultMaxScale)
		if s := in.Spec.DefaultScale.MinScale; s != nil {
			lo = *s
		}
		if s := in.Spec.DefaultScale.MaxScale; s != nil {
			hi = *s
		}
		if n.proc.MinScale != nil {
			lo = *n.proc.MinScale
		}
		if n.proc.MaxScale != nil {
			hi = *n.proc.MaxScale
		}
		return lo, hi
	}
	for _, n := range order {
		if n.kind != processor {
			continue
		}
		if lo, hi := scaleOf(n); lo > hi || hi < 1 {
			add(n, "minScale %d and maxScale %d: want 0 ≤ minScale ≤ maxScale, maxScale ≥ 1", lo, hi)
		}
	}

	// Where each processor reads and writes.
	inputOf := func(n *node) v1alpha1.Endpoint {
		from := nodes[n.proc.InputFrom]
		if from.kind == source {
			return v1alpha1.Endpoint{Bootstrap: bootstrap(from.ep), Topic: from.ep.Topic}
		}
		return v1alpha1.Endpoint{} // filled in below, once hashes are known
	}
	if len(probs) > 0 {
		sortProblems(probs)
		return nil, probs
	}

	rev := &v1alpha1.TopologyRevisionSpec{
		Topology: in.Name,
		Parts:    slices.Clone(in.Spec.Parts),
		Delivery: cmp.Or(in.Spec.Delivery, v1alpha1.AtLeastOnce),
	}
	if in.Predecessor != nil {
		rev.Predecessor = in.Predecessor.Name
	}
	// Internal topics live on the cluster of the stream they carry on: a
	// processor's topic is where its input is (so a chain from one source
	// stays on one cluster, which exactly-once needs).
	clusterOf := map[string]string{}
	var clusterFor func(name string) string
	clusterFor = func(name string) string {
		if c, ok := clusterOf[name]; ok {
			return c
		}
		n := nodes[name]
		c := ""
		if n.kind == source {
			c = bootstrap(n.ep)
		} else {
			c = clusterFor(n.proc.InputFrom)
		}
		clusterOf[name] = c
		return c
	}
	for _, n := range order {
		if n.kind != processor {
			continue
		}
		lo, hi := scaleOf(n)
		p := v1alpha1.ComposedProcessor{
			Name: n.name, Part: n.part, InputFrom: n.proc.InputFrom,
			ReadsSource: nodes[n.proc.InputFrom].kind == source,
			Image:       n.proc.Image, Env: n.proc.Env, Resources: n.proc.Resources,
			MinScale: lo, MaxScale: hi,
		}
		if p.ReadsSource {
			p.Input = inputOf(n)
		}
		sinks := slices.Clone(sinksOf[n.name])
		slices.Sort(sinks)
		for _, s := range sinks {
			p.Outputs = append(p.Outputs, v1alpha1.Endpoint{Bootstrap: bootstrap(nodes[s].ep), Topic: nodes[s].ep.Topic})
		}
		p.DeadLetter = v1alpha1.Endpoint{Bootstrap: clusterFor(n.name), Topic: DeadLetterTopic(in.Namespace, in.Name)}
		rev.Processors = append(rev.Processors, p)
	}
	slices.SortFunc(rev.Processors, func(a, b v1alpha1.ComposedProcessor) int { return cmp.Compare(a.Name, b.Name) })

	for _, c := range slices.Sorted(maps.Keys(secretOf)) {
		rev.KafkaSecrets = append(rev.KafkaSecrets, v1alpha1.ClusterSecret{Bootstrap: c, Secret: secretOf[c]})
	}

	rev.Hash = contentHash(rev)
	id := ID(rev.Hash, rev.Predecessor)
	// Names that depend on the ID: internal topics and groups.
	idx := map[string]int{}
	for i, p := range rev.Processors {
		idx[p.Name] = i
	}
	for i := range rev.Processors {
		p := &rev.Processors[i]
		if rs := readers[p.Name]; len(rs) > 0 {
			var parts int32 = 1
			for _, r := range rs {
				parts = max(parts, rev.Processors[idx[r]].MaxScale)
			}
			t := v1alpha1.InternalTopic{Name: InternalTopic(in.Namespace, in.Name, id, p.Name), Bootstrap: clusterFor(p.Name), Partitions: parts}
			rev.Topics = append(rev.Topics, t)
			p.Outputs = append([]v1alpha1.Endpoint{{Bootstrap: t.Bootstrap, Topic: t.Name}}, p.Outputs...)
		}
	}
	slices.SortFunc(rev.Topics, func(a, b v1alpha1.InternalTopic) int { return cmp.Compare(a.Name, b.Name) })
	for i := range rev.Processors {
		p := &rev.Processors[i]
		if !p.ReadsSource {
			p.Input = v1alpha1.Endpoint{Bootstrap: clusterFor(p.InputFrom), Topic: InternalTopic(in.Namespace, in.Name, id, p.InputFrom)}
		}
		p.Group = Group(in.Namespace, in.Name, id, p.Name)
	}

	if rev.Delivery == v1alpha1.ExactlyOnce {
		for _, p := range rev.Processors {
			for _, o := range append([]v1alpha1.Endpoint{p.DeadLetter}, p.Outputs...) {
				if o.Bootstrap != p.Input.Bootstrap {
					n := nodes[p.Name]
					add(n, "delivery exactlyOnce: it reads Kafka %s and writes Kafka %s; one transaction spans one Kafka cluster (use atLeastOnce, or move the topics)",
						p.Input.Bootstrap, o.Bootstrap)
					break
				}
			}
		}
		if len(probs) > 0 {
			sortProblems(probs)
			return nil, probs
		}
	}
	return rev, nil
}

// contentHash identifies what a composition runs: its processors, their
// inputs and outputs, delivery; not its scale (scale changes apply in
// place) and not the names derived from the revision's ID. A topology
// whose content hash is the active revision's has nothing to upgrade.
func contentHash(rev *v1alpha1.TopologyRevisionSpec) string {
	procs := make([]v1alpha1.ComposedProcessor, len(rev.Processors))
	for i, p := range rev.Processors {
		p.MinScale, p.MaxScale = 0, 0
		procs[i] = p
	}
	return digest(struct {
		Topology     string
		Delivery     v1alpha1.Delivery
		Processors   []v1alpha1.ComposedProcessor
		KafkaSecrets []v1alpha1.ClusterSecret `json:",omitempty"` // a Secret changed is a new revision
	}{rev.Topology, rev.Delivery, procs, rev.KafkaSecrets})
}

// ID names a revision: its content and its predecessor, so a crash between
// the controller's writes makes the same name again (never a second
// revision), while a rollback to an earlier content is a new revision with
// its own topics.
func ID(contentHash, predecessor string) string {
	return digest([]string{contentHash, predecessor})
}

// Name is the TopologyRevision's name: `<topology>-<ID>`.
func Name(rev *v1alpha1.TopologyRevisionSpec) string {
	return rev.Topology + "-" + ID(rev.Hash, rev.Predecessor)
}

func digest(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // plain structs always marshal
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:10]
}

// internalPrefix begins every Kafka name the controller makes.
const internalPrefix = "streams."

// InternalTopic is the topic between a processor and its readers in one
// revision: per revision, so a new revision never reads what an old one
// wrote.
func InternalTopic(namespace, topology, id, processor string) string {
	return fmt.Sprintf("%s%s.%s.%s.%s", internalPrefix, namespace, topology, id, processor)
}

// Group is a new consumer group of a processor in one revision.
func Group(namespace, topology, id, processor string) string {
	return InternalTopic(namespace, topology, id, processor)
}

// DeadLetterTopic is the topology's dead-letter topic (one per Kafka
// cluster its processors read).
func DeadLetterTopic(namespace, topology string) string {
	return fmt.Sprintf("%s%s.%s.deadletter", internalPrefix, namespace, topology)
}

// cycles finds processor cycles. Each processor reads one input, so the
// processors and their inputs form a functional graph: its cycles are
// disjoint and a walk along inputFrom meets at most one. Each is reported
// in the direction data flows, starting at its smallest name.
func cycles(order []*node, nodes map[string]*node) [][]string {
	var out [][]string
	done := map[string]bool{}
	for _, start := range order {
		at := map[string]int{}
		var path []string
		for cur := start; cur != nil && cur.kind == processor && !done[cur.name]; cur = nodes[cur.proc.InputFrom] {
			if i, ok := at[cur.name]; ok {
				c := slices.Clone(path[i:])
				slices.Reverse(c)
				m := slices.Index(c, slices.Min(c))
				out = append(out, append(c[m:], c[:m]...))
				break
			}
			at[cur.name] = len(path)
			path = append(path, cur.name)
		}
		for _, n := range path {
			done[n] = true
		}
	}
	return out
}

func sortProblems(ps Problems) {
	slices.SortStableFunc(ps, func(a, b Problem) int {
		return cmp.Or(cmp.Compare(a.Part, b.Part), cmp.Compare(a.Node, b.Node), cmp.Compare(a.Message, b.Message))
	})
}

func quoteAll(s []string) []string {
	q := make([]string, len(s))
	for i, v := range s {
		q[i] = fmt.Sprintf("%q", v)
	}
	return q
}

func sortedKeys(m map[string]bool) []string {
	k := make([]string, 0, len(m))
	for s := range m {
		k = append(k, s)
	}
	slices.Sort(k)
	return k
}

// PartHash identifies a part's spec: a repeated write of one spec makes
// one TopologyPartRevision.
func PartHash(spec v1alpha1.PartSpec) string { return digest(spec) }
