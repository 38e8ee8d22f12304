package streams_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cloudtransit/transit/controllers/streams/api/v1alpha1"
	"github.com/cloudtransit/transit/controllers/streams/brokertest"
)

// TestCrashAtEveryWrite runs a topology's whole life — first revision, a
// cold upgrade, the switch, the old revision collected — under a
// controller killed at its 1st write, then (restarted) at its 2nd, and so
// on: every write from the crash on is lost. Whatever the crash point, one
// composition makes one revision, the switch happens once, and the end
// state is the same. The writes counted are all of them (to the API server
// or to Kafka), then, in a second life, Kafka's only: which write of a run
// is the n-th depends on timing, so only the second sweep is sure to
// crash at each of Kafka's writes.
func TestCrashAtEveryWrite(t *testing.T) {
	t.Run("every write", func(t *testing.T) { crashSweep(t, false) })
	t.Run("every Kafka write", func(t *testing.T) { crashSweep(t, true) })
}

func crashSweep(t *testing.T, kafkaOnly bool) {
	e, ns := startEnv(t)
	b := brokertest.Start(t)
	ctx, c := t.Context(), e.Client
	adm := kafkaAdmin(t, b.Addr())
	createTopics(t, adm, 2, "orders", "enriched")

	// Every revision ever made, from a watch.
	wc, err := client.NewWithWatch(e.Config, client.Options{Scheme: e.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(ctx, &v1alpha1.TopologyRevisionList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var mu sync.Mutex
	made := map[string]bool{}
	go func() {
		for ev := range w.ResultChan() {
			if r, ok := ev.Object.(*v1alpha1.TopologyRevision); ok && ev.Type == watch.Added {
				mu.Lock()
				made[r.Name] = true
				mu.Unlock()
			}
		}
	}()

	twoTeams(t, c, ns, "fn:v1")
	topo := &v1alpha1.Topology{ObjectMeta: metav1.ObjectMeta{Name: "pipe", Namespace: ns},
		Spec: v1alpha1.TopologySpec{Upgrade: v1alpha1.Cold, Parts: []v1alpha1.PartRef{{Name: "a", Revision: 1}, {Name: "b", Revision: 1}}}}
	if err := c.Create(ctx, topo); err != nil {
		t.Fatal(err)
	}

	var first, second string
	stage := 0
	// The stages: 0 → the first revision runs; 1 → pinned a new one, it
	// runs and the first is finished.
	converged := func() bool {
		tp := getTopology(t, c, ns, "pipe")
		switch stage {
		case 0:
			if tp.Status.Active == "" || len(deployments(t, c, ns, tp.Status.Active)) != 2 {
				return false
			}
			first = tp.Status.Active
			p := &v1alpha1.TopologyPart{}
			if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "a"}, p); err != nil {
					return err
				}
				p.Spec.Processors["clean"] = v1alpha1.Processor{InputFrom: "orders", Image: "fn:v2"}
				return c.Update(ctx, p)
			}); err != nil {
				t.Fatal(err)
			}
			stage = 1
			return false
		case 1:
			// The part's revision 2 is made by the (crashing) controller.
			var pr v1alpha1.TopologyPartRevision
			if c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "a-2"}, &pr) != nil {
				return false
			}
			pin(t, c, ns, "pipe", v1alpha1.PartRef{Name: "a", Revision: 2}, v1alpha1.PartRef{Name: "b", Revision: 1})
			stage = 2
			return false
		default:
			if tp.Status.Active == first || tp.Status.Active == "" || tp.Status.Next != "" || len(tp.Status.PhasingOut) > 0 {
				return false
			}
			var old v1alpha1.TopologyRevision
			if c.Get(ctx, client.ObjectKey{Namespace: ns, Name: first}, &old) != nil || old.Status.Finished == nil {
				return false
			}
			second = tp.Status.Active
			return len(deployments(t, c, ns, first)) == 0 && len(deployments(t, c, ns, second)) == 2
		}
	}

	crashes := 0
	for limit := int64(1); ; limit++ {
		stop, crashed := startCrashingController(t, e, ns, b.Addr(), limit, kafkaOnly)
		done := false
		deadline := time.Now().Add(time.Minute)
		for !done {
			select {
			case <-crashed:
				crashes++
				done = true
				continue
			case <-time.After(100 * time.Millisecond):
			}
			if converged() {
				done = true
			}
			if time.Now().After(deadline) {
				t.Fatalf("limit %d: no progress in a minute at stage %d: %s", limit, stage, condition(getTopology(t, c, ns, "pipe"), v1alpha1.ConditionUpgrading))
			}
		}
		stop()
		if second != "" {
			break
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(made) != 2 || !made[first] || !made[second] {
		t.Errorf("revisions made across %d crashes: %v, want %s and %s only", crashes, made, first, second)
	}
	t.Logf("converged after %d crashes", crashes)
	if kafkaOnly && crashes < 3 {
		// At least: the first revision's internal topic, the second's, the
		// first's topic deleted.
		t.Errorf("%d crashes at Kafka's writes, want at least 3", crashes)
	}

	tp := getTopology(t, c, ns, "pipe")
	if !meta.IsStatusConditionTrue(tp.Status.Conditions, v1alpha1.ConditionValid) {
		t.Errorf("Valid: %s", condition(tp, v1alpha1.ConditionValid))
	}
	var old v1alpha1.TopologyRevision
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: first}, &old); err != nil {
		t.Fatal(err)
	}
	for _, it := range old.Spec.Topics {
		if topicExists(t, adm, it.Name) {
			t.Errorf("the finished revision's topic %s is left", it.Name)
		}
	}
	groups, err := adm.ListGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range old.Spec.Processors {
		if _, ok := groups[p.Group]; ok {
			t.Errorf("the finished revision's group %s is left", p.Group)
		}
	}
}

// TestKafkaDown: while the broker is down no revision is made, switched
// or collected (KafkaReachable=False names it); once it is back, the
// pinned change goes through.
func TestKafkaDown(t *testing.T) {
	e, ns := startEnv(t)
	b := brokertest.Start(t)
	startController(t, e, ns, b.Addr())
	ctx, c := t.Context(), e.Client
	createTopics(t, kafkaAdmin(t, b.Addr()), 2, "orders", "enriched")
	twoTeams(t, c, ns, "fn:v1")
	topo := &v1alpha1.Topology{ObjectMeta: metav1.ObjectMeta{Name: "pipe", Namespace: ns},
		Spec: v1alpha1.TopologySpec{Upgrade: v1alpha1.Cold, Parts: []v1alpha1.PartRef{{Name: "a", Revision: 1}, {Name: "b", Revision: 1}}}}
	if err := c.Create(ctx, topo); err != nil {
		t.Fatal(err)
	}
	var first string
	eventually(t, "the first revision", func() (bool, string) {
		first = getTopology(t, c, ns, "pipe").Status.Active
		return first != "", ""
	})

	b.Kill()
	rev := editPart(t, c, ns, "a", func(s *v1alpha1.PartSpec) {
		s.Processors["clean"] = v1alpha1.Processor{InputFrom: "orders", Image: "fn:v2"}
	})
	pin(t, c, ns, "pipe", v1alpha1.PartRef{Name: "a", Revision: rev}, v1alpha1.PartRef{Name: "b", Revision: 1})
	eventually(t, "KafkaReachable=False", func() (bool, string) {
		tp := getTopology(t, c, ns, "pipe")
		return meta.IsStatusConditionFalse(tp.Status.Conditions, v1alpha1.ConditionKafkaReachable), condition(tp, v1alpha1.ConditionKafkaReachable)
	})
	time.Sleep(3 * time.Second)
	tp := getTopology(t, c, ns, "pipe")
	if tp.Status.Active != first || tp.Status.Next != "" || len(deployments(t, c, ns, first)) != 2 {
		t.Fatalf("with Kafka down: active %q next %q, %d Deployments of %s", tp.Status.Active, tp.Status.Next, len(deployments(t, c, ns, first)), first)
	}
	if msg := condition(tp, v1alpha1.ConditionKafkaReachable); !strings.Contains(msg, b.Addr()) {
		t.Errorf("KafkaReachable does not name the broker: %s", msg)
	}

	b.Restart()
	eventuallyWithin(t, 2*time.Minute, "the upgrade once Kafka is back", func() (bool, string) {
		tp := getTopology(t, c, ns, "pipe")
		return tp.Status.Active != first && tp.Status.Next == "" && len(tp.Status.PhasingOut) == 0 &&
			meta.IsStatusConditionTrue(tp.Status.Conditions, v1alpha1.ConditionKafkaReachable), condition(tp, v1alpha1.ConditionUpgrading)
	})
}
