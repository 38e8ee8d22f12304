package streams_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cloudtransit/transit/controllers/streams/api/v1alpha1"
	"github.com/cloudtransit/transit/controllers/streams/brokertest"
)

// benchRuns is how many upgrades (or GC runs) a benchmark makes:
// TRANSIT_STREAMS_RUNS, default 20.
func benchRuns() int {
	if n, err := strconv.Atoi(os.Getenv("TRANSIT_STREAMS_RUNS")); err == nil && n > 0 {
		return n
	}
	return 20
}

// benchOut appends a line to TRANSIT_STREAMS_OUT/name, if set, and prints it.
func benchOut(b testing.TB, name, line string) {
	fmt.Println(line)
	dir := os.Getenv("TRANSIT_STREAMS_OUT")
	if dir == "" {
		return
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	fmt.Fprintln(f, line)
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

// onePipeline makes a part with one source, the given processors in
// series (each reading the one before) and a sink, and a Topology of it
// (runPipe), and returns its revision once Ready.
func onePipeline(b testing.TB, c client.Client, ns string, upgrade v1alpha1.Upgrade, images ...string) string {
	b.Helper()
	spec := v1alpha1.PartSpec{
		Sources:    map[string]v1alpha1.Endpoint{"in": {Topic: "orders"}},
		Sinks:      map[string]v1alpha1.Sink{"out": {Endpoint: v1alpha1.Endpoint{Topic: "enriched"}}},
		Processors: map[string]v1alpha1.Processor{},
	}
	from := "in"
	for i, img := range images {
		name := fmt.Sprintf("p%d", i)
		p := v1alpha1.Processor{InputFrom: from, Image: img}
		if i == len(images)-1 {
			p.SinkBindings = []string{"out"}
		}
		spec.Processors[name] = p
		from = name
	}
	if err := c.Create(context.Background(), &v1alpha1.TopologyPart{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: ns}, Spec: spec}); err != nil {
		b.Fatal(err)
	}
	return runPipe(b, c, ns, v1alpha1.TopologySpec{Upgrade: upgrade, Parts: []v1alpha1.PartRef{{Name: "a", Revision: 1}}})
}

// BenchmarkUpgrade: one processor between a source and a sink, a stream of
// increasing ids at 200/s, TRANSIT_STREAMS_RUNS upgrades (a new image each)
// in standby and in cold mode. Gaps are losses, repeats duplicates; the
// pause is the time between the last event the old revision wrote to the
// sink and the first the new one wrote; the update is from the new
// revision pinned until the new revision's first event.
func BenchmarkUpgrade(b *testing.B) {
	for _, mode := range []v1alpha1.Upgrade{v1alpha1.Standby, v1alpha1.Cold} {
		b.Run(string(mode), func(b *testing.B) {
			e, ns := startOwnEnv(b)
			br := brokertest.Start(b)
			startController(b, e, ns, br.Addr())
			startKubelet(b, e, ns)
			c := e.Client
			createTopics(b, kafkaAdmin(b, br.Addr()), 1, "orders", "enriched")
			active := onePipeline(b, c, ns, mode, "fn:v1")
			out := brokertest.StartSink(b, br.Addr(), "enriched")
			in := brokertest.StartFeed(b, br.Addr(), "orders", 200)
			time.Sleep(2 * time.Second)
			var pauses, updates []time.Duration
			for i := range benchRuns() {
				// The pause is from the old revision's last event: it
				// must have written one (its group formed: on Kafka,
				// after the initial rebalance delay).
				eventually(b, active+" writing the sink", func() (bool, string) {
					return slices.Contains(out.Revisions(), active), fmt.Sprint(out.Revisions())
				})
				image := fmt.Sprintf("fn:v%d", i+2)
				rev := editPart(b, c, ns, "a", func(s *v1alpha1.PartSpec) {
					p := s.Processors["p0"]
					p.Image = image
					s.Processors["p0"] = p
				})
				pinned := time.Now()
				pin(b, c, ns, "pipe", v1alpha1.PartRef{Name: "a", Revision: rev})
				next := waitSwitched(b, c, ns, active)
				var first, lastOld time.Time
				eventually(b, "the new revision's first event", func() (bool, string) {
					lastOld, first = out.Switch(active, next)
					return !first.IsZero(), ""
				})
				pauses = append(pauses, first.Sub(lastOld))
				updates = append(updates, first.Sub(pinned))
				active = next
				time.Sleep(time.Second)
			}
			n := in.Halt()
			missing, dups := out.Check(n, time.Minute)
			if u := out.Unreadable(); len(u) > 0 {
				b.Errorf("%d records at the sink hold no id (first: %v)", len(u), u[:min(5, len(u))])
			}
			line := fmt.Sprintf("| %s | %d | %d | %d | %.2f s | %.2f s | %.2f s | %.2f s |", mode, len(pauses), len(missing), dups,
				percentile(pauses, 0.5).Seconds(), slices.Max(pauses).Seconds(), percentile(updates, 0.5).Seconds(), slices.Max(updates).Seconds())
			benchOut(b, "upgrade.md", line)
			b.ReportMetric(percentile(pauses, 0.5).Seconds(), "pause-median-s")
			b.ReportMetric(float64(len(missing)), "lost")
			b.ReportMetric(float64(dups), "duplicates")
		})
	}
}

// BenchmarkGC: two processors in series, the second slow (20 ms an
// event), TRANSIT_STREAMS_RUNS upgrades of the first while ids stream in:
// the old second processor drains what the old first wrote while the new
// revision reads the source. Reported: losses, duplicates, and how long
// after the old revision's last event it was gone.
func BenchmarkGC(b *testing.B) {
	e, ns := startOwnEnv(b)
	br := brokertest.Start(b)
	startController(b, e, ns, br.Addr())
	startKubelet(b, e, ns)
	c := e.Client
	createTopics(b, kafkaAdmin(b, br.Addr()), 2, "orders", "enriched")
	active := onePipeline(b, c, ns, v1alpha1.Standby, "fn:v1", "fn:slow")
	out := brokertest.StartSink(b, br.Addr(), "enriched")
	in := brokertest.StartFeed(b, br.Addr(), "orders", 60)
	time.Sleep(2 * time.Second)
	var gone []time.Duration
	for i := range benchRuns() {
		rev := editPart(b, c, ns, "a", func(s *v1alpha1.PartSpec) {
			p := s.Processors["p0"]
			p.Image = fmt.Sprintf("fn:v%d", i+2)
			s.Processors["p0"] = p
		})
		pin(b, c, ns, "pipe", v1alpha1.PartRef{Name: "a", Revision: rev})
		next := waitSwitched(b, c, ns, active)
		finished := time.Now()
		lastOld, _ := out.Switch(active, next)
		gone = append(gone, finished.Sub(lastOld))
		active = next
	}
	n := in.Halt()
	missing, dups := out.Check(n, 2*time.Minute)
	if u := out.Unreadable(); len(u) > 0 {
		b.Errorf("%d records at the sink hold no id (first: %v)", len(u), u[:min(5, len(u))])
	}
	benchOut(b, "gc.md", fmt.Sprintf("| %d | %d | %d | %.2f s | %.2f s |", len(gone), len(missing), dups,
		percentile(gone, 0.5).Seconds(), slices.Max(gone).Seconds()))
	b.ReportMetric(float64(len(missing)), "lost")
	b.ReportMetric(float64(dups), "duplicates")
}

// BenchmarkUpgradeTeams: upgrades off the happy path, in each delivery
// mode. Two teams read one source: team a's three stages (clean → enrich
// → score, the last in part b) and team s's one slow stage (100 ms a
// record, at most 3 replicas: 30 records/s) that falls ever further
// behind a feed of 150 ids/s until its backlog passes 5,000. While the feed
// runs: team a's first stage gets a new image, team s renames its
// processor (a new consumer group whose predecessor is its own old one),
// team b's last stage gets a new image. Independent readers of both sinks
// count every id: lost and duplicated, team s's backlog when the feed
// stopped, and how long its sink then took to have everything.
func BenchmarkUpgradeTeams(b *testing.B) {
	for _, delivery := range []v1alpha1.Delivery{v1alpha1.AtLeastOnce, v1alpha1.ExactlyOnce} {
		b.Run(string(delivery), func(b *testing.B) {
			e, ns := startOwnEnv(b)
			br := brokertest.Start(b)
			startController(b, e, ns, br.Addr())
			startKubelet(b, e, ns)
			c := e.Client
			createTopics(b, kafkaAdmin(b, br.Addr()), 3, "orders", "enriched", "slowed")
			max3 := int32(3)
			parts := map[string]v1alpha1.PartSpec{
				"a": {Sources: map[string]v1alpha1.Endpoint{"orders": {Topic: "orders"}},
					Processors: map[string]v1alpha1.Processor{"clean": {InputFrom: "orders", Image: "fn:v1"}}},
				"b": {Processors: map[string]v1alpha1.Processor{
					"enrich": {InputFrom: "clean", Image: "fn:v1"},
					"score":  {InputFrom: "enrich", Image: "fn:v1", SinkBindings: []string{"out"}}},
					Sinks: map[string]v1alpha1.Sink{"out": {Endpoint: v1alpha1.Endpoint{Topic: "enriched"}}}},
				"s": {Sources: map[string]v1alpha1.Endpoint{"orders-s": {Topic: "orders"}},
					Processors: map[string]v1alpha1.Processor{"slow": {InputFrom: "orders-s", Image: "fn:slow-100ms", SinkBindings: []string{"slowed"}, MaxScale: &max3}},
					Sinks:      map[string]v1alpha1.Sink{"slowed": {Endpoint: v1alpha1.Endpoint{Topic: "slowed"}}}},
			}
			refs := map[string]int64{}
			for _, name := range []string{"a", "b", "s"} {
				if err := c.Create(context.Background(), &v1alpha1.TopologyPart{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: parts[name]}); err != nil {
					b.Fatal(err)
				}
				refs[name] = 1
			}
			pinned := func() []v1alpha1.PartRef {
				return []v1alpha1.PartRef{{Name: "a", Revision: refs["a"]}, {Name: "b", Revision: refs["b"]}, {Name: "s", Revision: refs["s"]}}
			}
			active := runPipe(b, c, ns, v1alpha1.TopologySpec{Delivery: delivery, Parts: pinned()})
			fast := brokertest.StartSink(b, br.Addr(), "enriched")
			slow := brokertest.StartSink(b, br.Addr(), "slowed")
			in := brokertest.StartFeed(b, br.Addr(), "orders", 150)
			upgrades := []struct {
				part string
				edit func(*v1alpha1.PartSpec)
			}{
				{"a", func(s *v1alpha1.PartSpec) {
					s.Processors["clean"] = v1alpha1.Processor{InputFrom: "orders", Image: "fn:v2"}
				}},
				{"s", func(s *v1alpha1.PartSpec) {
					s.Processors = map[string]v1alpha1.Processor{"slower": {InputFrom: "orders-s", Image: "fn:slow-100ms", SinkBindings: []string{"slowed"}, MaxScale: &max3}}
				}},
				{"b", func(s *v1alpha1.PartSpec) {
					s.Processors["score"] = v1alpha1.Processor{InputFrom: "enrich", Image: "fn:v2", SinkBindings: []string{"out"}}
				}},
			}
			for _, u := range upgrades {
				time.Sleep(4 * time.Second)
				refs[u.part] = editPart(b, c, ns, u.part, u.edit)
				pin(b, c, ns, "pipe", pinned()...)
				active = waitSwitched(b, c, ns, active)
			}
			// The slow team's backlog past 5,000 (it falls 120 ids/s
			// behind).
			for in.Sent() < 5000*150/120 {
				time.Sleep(time.Second)
			}
			n := in.Halt()
			halted := time.Now()
			behind, _ := slow.Check(n, 0) // the slow team's backlog now
			fastMissing, fastDups := fast.Check(n, 3*time.Minute)
			// 30 ids/s at most: twice that long, and two minutes.
			slowMissing, slowDups := slow.Check(n, 2*time.Duration(len(behind))*time.Second/30+2*time.Minute)
			drained := time.Since(halted)
			for _, s := range []*brokertest.Sink{fast, slow} {
				if u := s.Unreadable(); len(u) > 0 {
					b.Errorf("%d records at a sink hold no id (first: %v)", len(u), u[:min(5, len(u))])
				}
			}
			benchOut(b, "upgrade-teams.md", fmt.Sprintf("| %s | 3 | %d | %d | %d | %d | %d | %d | %.0f s |", delivery, n, len(behind),
				len(fastMissing), fastDups, len(slowMissing), slowDups, drained.Seconds()))
			b.ReportMetric(float64(len(fastMissing)+len(slowMissing)), "lost")
			b.ReportMetric(float64(fastDups+slowDups), "duplicates")
		})
	}
}
