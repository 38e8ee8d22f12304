package streams_test

import (
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cloudtransit/transit/controllers/streams"
	"github.com/cloudtransit/transit/controllers/streams/api/v1alpha1"
	"github.com/cloudtransit/transit/controllers/streams/brokertest"
)

// waitSwitched waits until the topology runs a revision other than from,
// with nothing left phasing out.
func waitSwitched(t testing.TB, c client.Client, ns, from string) string {
	t.Helper()
	var tp *v1alpha1.Topology
	eventuallyWithin(t, 2*time.Minute, "the switch from "+from, func() (bool, string) {
		tp = getTopology(t, c, ns, "pipe")
		return tp.Status.Active != from && tp.Status.Active != "" && tp.Status.Next == "" && len(tp.Status.PhasingOut) == 0,
			fmt.Sprintf("active %s next %s phasing out %v; conditions: %s", tp.Status.Active, tp.Status.Next, tp.Status.PhasingOut, conditions(tp))
	})
	return tp.Status.Active
}

// runPipe creates the Topology "pipe" of spec and waits until it runs,
// Ready; it returns the active revision.
func runPipe(t testing.TB, c client.Client, ns string, spec v1alpha1.TopologySpec) string {
	t.Helper()
	topo := &v1alpha1.Topology{ObjectMeta: metav1.ObjectMeta{Name: "pipe", Namespace: ns}, Spec: spec}
	if err := c.Create(t.Context(), topo); err != nil {
		t.Fatal(err)
	}
	var active string
	eventuallyWithin(t, 2*time.Minute, "the pipeline Ready", func() (bool, string) {
		tp := getTopology(t, c, ns, "pipe")
		active = tp.Status.Active
		return active != "" && meta.IsStatusConditionTrue(tp.Status.Conditions, v1alpha1.ConditionReady), condition(tp, v1alpha1.ConditionReady)
	})
	return active
}

// TestUpgradesUnderLoad: the two-team pipeline runs on real sidecars and
// functions (the harness stands in for the kubelet) while ids stream in;
// team a upgrades its processor five times, standby and cold. Every id
// reaches the sink exactly once, each switch is one point (after it, no
// event from the old revision is read from the source), and the old
// revisions drain and go.
func TestUpgradesUnderLoad(t *testing.T) {
	e, ns := startEnv(t)
	b := brokertest.Start(t)
	startController(t, e, ns, b.Addr())
	k := startKubelet(t, e, ns)
	ctx, c := t.Context(), e.Client
	adm := kafkaAdmin(t, b.Addr())
	createTopics(t, adm, 3, "orders", "enriched")
	twoTeams(t, c, ns, "fn:v1")
	runPipe(t, c, ns, v1alpha1.TopologySpec{Parts: []v1alpha1.PartRef{{Name: "a", Revision: 1}, {Name: "b", Revision: 1}}})

	out := brokertest.StartSink(t, b.Addr(), "enriched")
	in := brokertest.StartFeed(t, b.Addr(), "orders", 200)
	time.Sleep(2 * time.Second)
	active := getTopology(t, c, ns, "pipe").Status.Active
	// A function killed mid-stream: its sidecar waits for it (restarted,
	// as the kubelet would), nothing is dead-lettered or lost.
	if n := k.kill(active+"-clean", "function", syscall.SIGKILL); n == 0 {
		t.Fatal("no function to kill")
	}
	time.Sleep(2 * time.Second)
	for i := 2; i <= 6; i++ {
		mode := v1alpha1.Standby
		if i%2 == 1 {
			mode = v1alpha1.Cold
		}
		rev := editPart(t, c, ns, "a", func(s *v1alpha1.PartSpec) {
			s.Processors["clean"] = v1alpha1.Processor{InputFrom: "orders", Image: fmt.Sprintf("fn:v%d", i)}
		})
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var tp v1alpha1.Topology
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "pipe"}, &tp); err != nil {
				return err
			}
			tp.Spec.Upgrade = mode
			tp.Spec.Parts = []v1alpha1.PartRef{{Name: "a", Revision: rev}, {Name: "b", Revision: 1}}
			return c.Update(ctx, &tp)
		})
		if err != nil {
			t.Fatal(err)
		}
		next := waitSwitched(t, c, ns, active)
		t.Logf("upgrade %d (%s): %s → %s", i, mode, active, next)
		active = next
		time.Sleep(time.Second)
	}
	n := in.Halt()
	out.Expect(t, n, time.Minute, true)
	ends, err := adm.ListEndOffsets(ctx, "streams."+ns+".pipe.deadletter")
	if err != nil {
		t.Fatal(err)
	}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			t.Errorf("%d records dead-lettered on partition %d: a killed function is no record's fault", o.Offset, o.Partition)
		}
	})
	t.Logf("%d ids, by revision: %v", n, out.Revisions())
}

// TestFaultsExactlyOnce: an exactly-once pipeline loses and repeats
// nothing while its sidecars kill themselves between producing and
// committing (every 7th batch), its controller is killed in the middle of
// an upgrade and the broker is killed and restarted mid-stream.
func TestFaultsExactlyOnce(t *testing.T) {
	e, ns := startEnv(t)
	b := brokertest.Start(t)
	stop := startController(t, e, ns, b.Addr())
	k := startKubelet(t, e, ns)
	k.extraEnv["STREAMS_FAILPOINT"] = "after-produce:7"
	c := e.Client
	createTopics(t, kafkaAdmin(t, b.Addr()), 3, "orders", "enriched")
	twoTeams(t, c, ns, "fn:v1")
	runPipe(t, c, ns, v1alpha1.TopologySpec{Delivery: v1alpha1.ExactlyOnce, Parts: []v1alpha1.PartRef{{Name: "a", Revision: 1}, {Name: "b", Revision: 1}}})
	out := brokertest.StartSink(t, b.Addr(), "enriched")
	in := brokertest.StartFeed(t, b.Addr(), "orders", 100)
	time.Sleep(3 * time.Second)

	// An upgrade, the controller killed as it starts.
	active := getTopology(t, c, ns, "pipe").Status.Active
	rev := editPart(t, c, ns, "a", func(s *v1alpha1.PartSpec) {
		s.Processors["clean"] = v1alpha1.Processor{InputFrom: "orders", Image: "fn:v2"}
	})
	pin(t, c, ns, "pipe", v1alpha1.PartRef{Name: "a", Revision: rev}, v1alpha1.PartRef{Name: "b", Revision: 1})
	time.Sleep(300 * time.Millisecond)
	stop()
	time.Sleep(time.Second)
	startController(t, e, ns, b.Addr())
	active = waitSwitched(t, c, ns, active)

	// The broker killed and back.
	b.Kill()
	time.Sleep(2 * time.Second)
	b.Restart()
	time.Sleep(3 * time.Second)

	rev = editPart(t, c, ns, "b", func(s *v1alpha1.PartSpec) {
		s.Processors["enrich"] = v1alpha1.Processor{InputFrom: "clean", Image: "fn:v3", SinkBindings: []string{"out"}}
	})
	pin(t, c, ns, "pipe", v1alpha1.PartRef{Name: "a", Revision: 2}, v1alpha1.PartRef{Name: "b", Revision: rev})
	waitSwitched(t, c, ns, active)
	time.Sleep(2 * time.Second)
	n := in.Halt()
	out.Expect(t, n, 2*time.Minute, true)
	t.Logf("%d ids through 2 upgrades, a controller crash, a broker crash and sidecars killed before every 7th commit", n)
}

// TestKilledBetweenProduceAndCommit: sidecars kill themselves after every
// 8th batch's output is acknowledged, before its commit, and restart.
// At-least-once repeats only those batches; exactly-once repeats nothing.
func TestKilledBetweenProduceAndCommit(t *testing.T) {
	for _, delivery := range []v1alpha1.Delivery{v1alpha1.AtLeastOnce, v1alpha1.ExactlyOnce} {
		t.Run(string(delivery), func(t *testing.T) {
			e, ns := startEnv(t)
			b := brokertest.Start(t)
			startController(t, e, ns, b.Addr())
			k := startKubelet(t, e, ns)
			k.extraEnv["STREAMS_FAILPOINT"] = "after-produce:8"
			c := e.Client
			createTopics(t, kafkaAdmin(t, b.Addr()), 3, "orders", "enriched")
			twoTeams(t, c, ns, "fn:v1")
			runPipe(t, c, ns, v1alpha1.TopologySpec{Delivery: delivery, Parts: []v1alpha1.PartRef{{Name: "a", Revision: 1}, {Name: "b", Revision: 1}}})
			out := brokertest.StartSink(t, b.Addr(), "enriched")
			in := brokertest.StartFeed(t, b.Addr(), "orders", 100)
			time.Sleep(10 * time.Second)
			n := in.Halt()
			dups := out.Expect(t, n, 2*time.Minute, delivery == v1alpha1.ExactlyOnce)
			if delivery == v1alpha1.AtLeastOnce && dups == 0 {
				t.Errorf("no duplicates: the failpoint never struck between produce and commit")
			}
			t.Logf("%s: %d ids, %d duplicates", delivery, n, dups)
		})
	}
}

// TestImageCannotBePulled: a standby revision whose function image cannot
// be pulled is abandoned after the upgrade timeout, the condition naming
// the pod, the container and ErrImagePull; the running revision goes on
// processing throughout.
func TestImageCannotBePulled(t *testing.T) {
	e, ns := startEnv(t)
	b := brokertest.Start(t)
	startController(t, e, ns, b.Addr())
	k := startKubelet(t, e, ns)
	k.badImages["fn:missing"] = "ErrImagePull"
	c := e.Client
	createTopics(t, kafkaAdmin(t, b.Addr()), 2, "orders", "enriched")
	twoTeams(t, c, ns, "fn:v1")
	runPipe(t, c, ns, v1alpha1.TopologySpec{Parts: []v1alpha1.PartRef{{Name: "a", Revision: 1}, {Name: "b", Revision: 1}}})
	first := getTopology(t, c, ns, "pipe").Status.Active
	out := brokertest.StartSink(t, b.Addr(), "enriched")
	in := brokertest.StartFeed(t, b.Addr(), "orders", 100)
	rev := editPart(t, c, ns, "a", func(s *v1alpha1.PartSpec) {
		s.Processors["clean"] = v1alpha1.Processor{InputFrom: "orders", Image: "fn:missing"}
	})
	pin(t, c, ns, "pipe", v1alpha1.PartRef{Name: "a", Revision: rev}, v1alpha1.PartRef{Name: "b", Revision: 1})
	// The timeout (the default 5 minutes) is cut to a second once the
	// kubelet has told why the new pod cannot start: a short timeout set
	// from the start races the kubelet on a loaded machine, and the
	// message then has no reason to give.
	eventually(t, "the new pod waiting with ErrImagePull", func() (bool, string) {
		var pods corev1.PodList
		if err := c.List(t.Context(), &pods, client.InNamespace(ns), client.MatchingLabels{streams.LabelProcessor: "clean"}); err != nil {
			return false, err.Error()
		}
		for _, p := range pods.Items {
			for _, cs := range p.Status.ContainerStatuses {
				if cs.State.Waiting != nil && cs.State.Waiting.Reason == "ErrImagePull" {
					return true, ""
				}
			}
		}
		return false, fmt.Sprint(len(pods.Items), " clean pods, none waiting with ErrImagePull")
	})
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		tp := getTopology(t, c, ns, "pipe")
		tp.Spec.UpgradeTimeout = &metav1.Duration{Duration: time.Second}
		return c.Update(t.Context(), tp)
	})
	if err != nil {
		t.Fatal(err)
	}
	var msg string
	eventuallyWithin(t, time.Minute, "UpgradeFailed", func() (bool, string) {
		tp := getTopology(t, c, ns, "pipe")
		msg = condition(tp, v1alpha1.ConditionUpgradeFailed)
		return meta.IsStatusConditionTrue(tp.Status.Conditions, v1alpha1.ConditionUpgradeFailed), condition(tp, v1alpha1.ConditionUpgrading)
	})
	if !strings.Contains(msg, "container function: ErrImagePull") || !strings.Contains(msg, first+" runs on") {
		t.Errorf("UpgradeFailed: %s", msg)
	}
	time.Sleep(time.Second)
	n := in.Halt()
	out.Expect(t, n, time.Minute, true) // while the upgrade failed
	if tp := getTopology(t, c, ns, "pipe"); tp.Status.Active != first {
		t.Errorf("active %s, want %s still", tp.Status.Active, first)
	}
}

// TestStandbyJoinsBeforeTheSwitch: a standby revision's source readers
// are members of their revision's group before the switch — Kafka's
// initial rebalance delay (3 s in the development broker, as in Apache
// Kafka) is paid while the old revision still reads, not in the pause —
// and read nothing until it is active. Held here by the other part's
// pod, whose image cannot be pulled; once that is mended (a replacing
// next revision) the switch goes through: every id once.
func TestStandbyJoinsBeforeTheSwitch(t *testing.T) {
	e, ns := startEnv(t)
	b := brokertest.Start(t)
	startController(t, e, ns, b.Addr())
	k := startKubelet(t, e, ns)
	k.badImages["fn:missing"] = "ErrImagePull"
	ctx, c := t.Context(), e.Client
	adm := kafkaAdmin(t, b.Addr())
	createTopics(t, adm, 2, "orders", "enriched")
	twoTeams(t, c, ns, "fn:v1")
	first := runPipe(t, c, ns, v1alpha1.TopologySpec{Parts: []v1alpha1.PartRef{{Name: "a", Revision: 1}, {Name: "b", Revision: 1}}})
	out := brokertest.StartSink(t, b.Addr(), "enriched")
	in := brokertest.StartFeed(t, b.Addr(), "orders", 100)
	a2 := editPart(t, c, ns, "a", func(s *v1alpha1.PartSpec) {
		s.Processors["clean"] = v1alpha1.Processor{InputFrom: "orders", Image: "fn:v2"}
	})
	b2 := editPart(t, c, ns, "b", func(s *v1alpha1.PartSpec) {
		p := s.Processors["enrich"]
		p.Image = "fn:missing"
		s.Processors["enrich"] = p
	})
	pin(t, c, ns, "pipe", v1alpha1.PartRef{Name: "a", Revision: a2}, v1alpha1.PartRef{Name: "b", Revision: b2})
	var next v1alpha1.TopologyRevision
	eventually(t, "a next revision", func() (bool, string) {
		tp := getTopology(t, c, ns, "pipe")
		return tp.Status.Next != "" && c.Get(ctx, client.ObjectKey{Namespace: ns, Name: tp.Status.Next}, &next) == nil, conditions(tp)
	})
	var clean v1alpha1.ComposedProcessor
	for _, p := range next.Spec.Processors {
		if p.Name == "clean" {
			clean = p
		}
	}
	eventually(t, "the standby source reader in its group", func() (bool, string) {
		ds, err := adm.DescribeGroups(ctx, clean.Group)
		if err != nil {
			return false, err.Error()
		}
		d := ds[clean.Group]
		return d.State == "Stable" && len(d.Members) == 1, fmt.Sprintf("group %s: %s with %d members", clean.Group, d.State, len(d.Members))
	})
	time.Sleep(time.Second) // a standby reader that read would have by now
	if tp := getTopology(t, c, ns, "pipe"); tp.Status.Active != first || tp.Status.Next != next.Name {
		t.Fatalf("active %s next %s: the held upgrade went on (%s)", tp.Status.Active, tp.Status.Next, conditions(tp))
	}
	if offs, err := adm.FetchOffsets(ctx, clean.Group); err != nil || len(offs) > 0 {
		t.Fatalf("the standby group %s committed %v (%v): it read", clean.Group, offs, err)
	}
	ends, err := adm.ListEndOffsets(ctx, next.Spec.Topics[0].Name)
	if err != nil {
		t.Fatal(err)
	}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			t.Errorf("the standby revision wrote %d records to partition %d of its topic", o.Offset, o.Partition)
		}
	})

	b3 := editPart(t, c, ns, "b", func(s *v1alpha1.PartSpec) {
		p := s.Processors["enrich"]
		p.Image = "fn:v2"
		s.Processors["enrich"] = p
	})
	pin(t, c, ns, "pipe", v1alpha1.PartRef{Name: "a", Revision: a2}, v1alpha1.PartRef{Name: "b", Revision: b3})
	waitSwitched(t, c, ns, first)
	n := in.Halt()
	out.Expect(t, n, time.Minute, true)
	// The replaced next revision goes once it is older than a status
	// write the cache may not show yet (orphanAge), its group with it.
	eventuallyWithin(t, 2*time.Minute, "the replaced next revision's group gone", func() (bool, string) {
		groups, err := adm.ListGroups(ctx)
		return err == nil && !slices.Contains(groups.Groups(), clean.Group), fmt.Sprint(groups.Groups(), err)
	})
}

// TestUpgradeTwoTeamsOneSource: two teams read one source; team s's
// function is slow, so its reader lags far behind team a's. Team s renames
// its processor (a new consumer group): the new reader starts where team
// s's old one stopped, not where team a's did, and team s's sink gets
// every id.
func TestUpgradeTwoTeamsOneSource(t *testing.T) {
	e, ns := startEnv(t)
	b := brokertest.Start(t)
	startController(t, e, ns, b.Addr())
	startKubelet(t, e, ns)
	c := e.Client
	createTopics(t, kafkaAdmin(t, b.Addr()), 3, "orders", "enriched", "slowed")
	twoTeams(t, c, ns, "fn:v1")
	slowTeam := func(processor string) map[string]v1alpha1.Processor {
		return map[string]v1alpha1.Processor{processor: {InputFrom: "orders-s", Image: "fn:slow-50ms", SinkBindings: []string{"slowed"}}}
	}
	part := &v1alpha1.TopologyPart{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: ns}, Spec: v1alpha1.PartSpec{
		Sources:    map[string]v1alpha1.Endpoint{"orders-s": {Topic: "orders"}},
		Processors: slowTeam("slow"),
		Sinks:      map[string]v1alpha1.Sink{"slowed": {Endpoint: v1alpha1.Endpoint{Topic: "slowed"}}}}}
	if err := c.Create(t.Context(), part); err != nil {
		t.Fatal(err)
	}
	eventually(t, "part s's first revision", func() (bool, string) {
		_ = c.Get(t.Context(), client.ObjectKeyFromObject(part), part)
		return part.Status.LatestRevision == 1, ""
	})
	active := runPipe(t, c, ns, v1alpha1.TopologySpec{Parts: []v1alpha1.PartRef{{Name: "a", Revision: 1}, {Name: "b", Revision: 1}, {Name: "s", Revision: 1}}})
	fast := brokertest.StartSink(t, b.Addr(), "enriched")
	slow := brokertest.StartSink(t, b.Addr(), "slowed")
	// 150 ids a second; the slow team handles 60 (3 partitions, 50 ms
	// each): by the upgrade it lags hundreds of ids behind team a.
	in := brokertest.StartFeed(t, b.Addr(), "orders", 150)
	// At most 25 s of ids: a switch slow on a loaded machine leaves the
	// slow team no more than that to work off.
	capped := time.AfterFunc(25*time.Second, func() { in.Halt() })
	defer capped.Stop()
	time.Sleep(5 * time.Second)
	rev := editPart(t, c, ns, "s", func(s *v1alpha1.PartSpec) { s.Processors = slowTeam("slower") })
	pin(t, c, ns, "pipe", v1alpha1.PartRef{Name: "a", Revision: 1}, v1alpha1.PartRef{Name: "b", Revision: 1}, v1alpha1.PartRef{Name: "s", Revision: rev})
	waitSwitched(t, c, ns, active)
	n := in.Halt()
	fast.Expect(t, n, time.Minute, false)
	slow.Expect(t, n, 3*time.Minute, false)
	t.Logf("%d ids; the slow team's sink by revision: %v", n, slow.Revisions())
}

// TestReplacedNextGetsItsOwnTimeout: a standby upgrade that cannot start
// is replaced by another pin before its timeout; the new next revision's
// upgrade starts when it was pinned, not when the first one was, so its
// upgradeTimeout is whole.
func TestReplacedNextGetsItsOwnTimeout(t *testing.T) {
	e, ns := startEnv(t)
	b := brokertest.Start(t)
	startController(t, e, ns, b.Addr())
	k := startKubelet(t, e, ns)
	k.badImages["fn:missing"] = "ErrImagePull"
	k.badImages["fn:missing-too"] = "ErrImagePull"
	c := e.Client
	createTopics(t, kafkaAdmin(t, b.Addr()), 1, "orders", "enriched")
	twoTeams(t, c, ns, "fn:v1")
	runPipe(t, c, ns, v1alpha1.TopologySpec{Parts: []v1alpha1.PartRef{{Name: "a", Revision: 1}, {Name: "b", Revision: 1}}})
	upgrade := func(image, from string) (string, time.Time) {
		rev := editPart(t, c, ns, "a", func(s *v1alpha1.PartSpec) {
			s.Processors["clean"] = v1alpha1.Processor{InputFrom: "orders", Image: image}
		})
		pinned := time.Now().Truncate(time.Second) // conditions keep whole seconds
		pin(t, c, ns, "pipe", v1alpha1.PartRef{Name: "a", Revision: rev}, v1alpha1.PartRef{Name: "b", Revision: 1})
		var next string
		eventually(t, "the upgrade to "+image+" starting", func() (bool, string) {
			tp := getTopology(t, c, ns, "pipe")
			next = tp.Status.Next
			return next != "" && next != from && strings.Contains(condition(tp, v1alpha1.ConditionUpgrading), next), condition(tp, v1alpha1.ConditionUpgrading)
		})
		return next, pinned
	}
	first, _ := upgrade("fn:missing", "")
	time.Sleep(3 * time.Second)
	second, pinned := upgrade("fn:missing-too", first)
	tp := getTopology(t, c, ns, "pipe")
	cond := meta.FindStatusCondition(tp.Status.Conditions, v1alpha1.ConditionUpgrading)
	if cond.LastTransitionTime.Time.Before(pinned) {
		t.Errorf("the upgrade to %s counts from %s, before it was pinned at %s: its timeout is cut short",
			second, cond.LastTransitionTime.Format(time.RFC3339), pinned.Format(time.RFC3339))
	}
}

// TestUpgradeKeepsKeyOrderInOneStage: where a source reader writes the
// sink itself, per-key order holds across upgrades (the old reader stops
// and commits before the new one reads); this is the order docs/streams.md
// promises, and no more (see TestUpgradesUnderLoad for several stages).
func TestUpgradeKeepsKeyOrderInOneStage(t *testing.T) {
	e, ns := startEnv(t)
	b := brokertest.Start(t)
	startController(t, e, ns, b.Addr())
	startKubelet(t, e, ns)
	c := e.Client
	createTopics(t, kafkaAdmin(t, b.Addr()), 3, "orders", "enriched")
	one := func(image string) v1alpha1.PartSpec {
		return v1alpha1.PartSpec{
			Sources:    map[string]v1alpha1.Endpoint{"orders": {Topic: "orders"}},
			Processors: map[string]v1alpha1.Processor{"enrich": {InputFrom: "orders", Image: image, SinkBindings: []string{"out"}}},
			Sinks:      map[string]v1alpha1.Sink{"out": {Endpoint: v1alpha1.Endpoint{Topic: "enriched"}}}}
	}
	if err := c.Create(t.Context(), &v1alpha1.TopologyPart{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: ns}, Spec: one("fn:v1")}); err != nil {
		t.Fatal(err)
	}
	active := runPipe(t, c, ns, v1alpha1.TopologySpec{Parts: []v1alpha1.PartRef{{Name: "a", Revision: 1}}})
	out := brokertest.StartSink(t, b.Addr(), "enriched")
	in := brokertest.StartKeyedFeed(t, b.Addr(), "orders", 150, 10)
	for i := 2; i <= 4; i++ {
		// Each revision writes before the next one takes over.
		eventually(t, active+" writing the sink", func() (bool, string) {
			return slices.Contains(out.Revisions(), active), fmt.Sprint(out.Revisions())
		})
		rev := editPart(t, c, ns, "a", func(s *v1alpha1.PartSpec) { *s = one(fmt.Sprintf("fn:v%d", i)) })
		pin(t, c, ns, "pipe", v1alpha1.PartRef{Name: "a", Revision: rev})
		active = waitSwitched(t, c, ns, active)
	}
	n := in.Halt()
	out.Expect(t, n, time.Minute, true)
	if bad := out.OutOfOrder(); len(bad) > 0 {
		t.Errorf("%d records out of their key's order (first: %v)", len(bad), bad[:min(5, len(bad))])
	}
	t.Logf("%d ids of 10 keys through 3 upgrades, by revision %v", n, out.Revisions())
}

// TestUpgradesOnThreeBrokers: the exactly-once two-team pipeline on three
// brokers, where partitions' leaders and the group and transaction
// coordinators are spread out; the coordinators move (as when one
// crashes) in the middle of an upgrade and again while the new revision
// runs. Every id arrives once. (Leader moves are not tested: see
// broker.MoveCoordinators.)
func TestUpgradesOnThreeBrokers(t *testing.T) {
	e, ns := startEnv(t)
	b := brokertest.Start(t, "-brokers", "3")
	startController(t, e, ns, b.Addr())
	startKubelet(t, e, ns)
	c := e.Client
	createTopics(t, kafkaAdmin(t, b.Addr()), 3, "orders", "enriched")
	twoTeams(t, c, ns, "fn:v1")
	active := runPipe(t, c, ns, v1alpha1.TopologySpec{Delivery: v1alpha1.ExactlyOnce, Parts: []v1alpha1.PartRef{{Name: "a", Revision: 1}, {Name: "b", Revision: 1}}})
	out := brokertest.StartSink(t, b.Addr(), "enriched")
	in := brokertest.StartFeed(t, b.Addr(), "orders", 100)
	eventually(t, active+" writing the sink", func() (bool, string) { return slices.Contains(out.Revisions(), active), "" })
	rev := editPart(t, c, ns, "a", func(s *v1alpha1.PartSpec) {
		s.Processors["clean"] = v1alpha1.Processor{InputFrom: "orders", Image: "fn:v2"}
	})
	pin(t, c, ns, "pipe", v1alpha1.PartRef{Name: "a", Revision: rev}, v1alpha1.PartRef{Name: "b", Revision: 1})
	time.Sleep(500 * time.Millisecond)
	b.MoveCoordinators()
	next := waitSwitched(t, c, ns, active)
	eventually(t, next+" writing the sink", func() (bool, string) { return slices.Contains(out.Revisions(), next), "" })
	b.MoveCoordinators()
	time.Sleep(4 * time.Second)
	n := in.Halt()
	out.Expect(t, n, 2*time.Minute, true)
	t.Logf("%d ids on three brokers, coordinators moved twice, by revision %v", n, out.Revisions())
}
