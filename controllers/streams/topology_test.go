package streams_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cloudtransit/transit/controllers/streams"
	"github.com/cloudtransit/transit/controllers/streams/api/v1alpha1"
	"github.com/cloudtransit/transit/controllers/streams/brokertest"
)

// kafkaAdmin is an admin client of the test's broker.
func kafkaAdmin(t testing.TB, addr string) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

func createTopics(t testing.TB, adm *kadm.Client, partitions int32, topics ...string) {
	t.Helper()
	resp, err := adm.CreateTopics(t.Context(), partitions, 1, nil, topics...)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
}

func topicExists(t testing.TB, adm *kadm.Client, topic string) bool {
	t.Helper()
	md, err := adm.Metadata(t.Context(), topic)
	if err != nil {
		t.Fatal(err)
	}
	td, ok := md.Topics[topic]
	return ok && td.Err == nil
}

// twoTeams writes the research's use case: team a reads orders and
// cleans them, team b enriches them into a sink.
func twoTeams(t testing.TB, c client.Client, ns, image string) {
	t.Helper()
	for _, p := range []*v1alpha1.TopologyPart{
		{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: ns}, Spec: v1alpha1.PartSpec{
			Sources:    map[string]v1alpha1.Endpoint{"orders": {Topic: "orders"}},
			Processors: map[string]v1alpha1.Processor{"clean": {InputFrom: "orders", Image: image}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: ns}, Spec: v1alpha1.PartSpec{
			Processors: map[string]v1alpha1.Processor{"enrich": {InputFrom: "clean", Image: image, SinkBindings: []string{"out"}}},
			Sinks:      map[string]v1alpha1.Sink{"out": {Endpoint: v1alpha1.Endpoint{Topic: "enriched"}}}}},
	} {
		if err := c.Create(t.Context(), p); err != nil {
			t.Fatal(err)
		}
	}
}

// editPart changes a part's spec and waits for its new revision.
func editPart(t testing.TB, c client.Client, ns, name string, edit func(*v1alpha1.PartSpec)) int64 {
	t.Helper()
	part := &v1alpha1.TopologyPart{}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, part); err != nil {
			return err
		}
		edit(&part.Spec)
		return c.Update(t.Context(), part)
	})
	if err != nil {
		t.Fatal(err)
	}
	gen := part.Generation
	eventually(t, "part "+name+"'s new revision", func() (bool, string) {
		_ = c.Get(t.Context(), client.ObjectKeyFromObject(part), part)
		return part.Status.ObservedGeneration >= gen, fmt.Sprint("latest ", part.Status.LatestRevision)
	})
	return part.Status.LatestRevision
}

// pin points the topology at part revisions.
func pin(t testing.TB, c client.Client, ns, topo string, refs ...v1alpha1.PartRef) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var tp v1alpha1.Topology
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: topo}, &tp); err != nil {
			return err
		}
		tp.Spec.Parts = refs
		return c.Update(t.Context(), &tp)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func getTopology(t testing.TB, c client.Client, ns, name string) *v1alpha1.Topology {
	t.Helper()
	var tp v1alpha1.Topology
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, &tp); err != nil {
		t.Fatal(err)
	}
	return &tp
}

func condition(tp *v1alpha1.Topology, typ string) string {
	if c := meta.FindStatusCondition(tp.Status.Conditions, typ); c != nil {
		return fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message)
	}
	return "none"
}

// conditions are all of a topology's conditions, one after another.
func conditions(tp *v1alpha1.Topology) string {
	var all []string
	for _, c := range tp.Status.Conditions {
		all = append(all, fmt.Sprintf("%s %s %s: %s", c.Type, c.Status, c.Reason, c.Message))
	}
	return strings.Join(all, "; ")
}

func deployments(t testing.TB, c client.Client, ns, rev string) map[string]*appsv1.Deployment {
	t.Helper()
	var list appsv1.DeploymentList
	if err := c.List(t.Context(), &list, client.InNamespace(ns), client.MatchingLabels{streams.LabelRevision: rev}); err != nil {
		t.Fatal(err)
	}
	out := map[string]*appsv1.Deployment{}
	for i := range list.Items {
		out[list.Items[i].Labels[streams.LabelProcessor]] = &list.Items[i]
	}
	return out
}

func envOf(d *appsv1.Deployment, container string) map[string]string {
	out := map[string]string{}
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name == container {
			for _, e := range c.Env {
				out[e.Name] = e.Value
			}
		}
	}
	return out
}

// TestComposition, without pods: the first revision becomes active at
// once with its Deployments, internal and dead-letter topics, and its
// source reader's start recorded at the source's end, and the processors'
// Role an earlier version made is given the rule the gate now needs; an
// invalid composition is reported naming part and node and touches
// nothing that runs; a scale-only edit applies in place; a standby
// revision whose pods never get Ready is abandoned in time, naming the
// pod, and the active revision runs on.
func TestComposition(t *testing.T) {
	e, ns := startEnv(t)
	b := brokertest.Start(t)
	startController(t, e, ns, b.Addr(), func(o *streams.Options) { o.UpgradeTimeout = 3 * time.Second })
	ctx, c := t.Context(), e.Client
	adm := kafkaAdmin(t, b.Addr())
	createTopics(t, adm, 2, "orders", "enriched")
	for i := range 5 {
		cl, _ := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "orders", Value: []byte("old"), Partition: int32(i % 2)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		cl.Close()
	}
	twoTeams(t, c, ns, "fn:1")
	// The processors' Role as an earlier version made it: Topologies only.
	oldRole := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: streams.ProcessorAccount},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"topologies"}, Verbs: []string{"get", "list", "watch"}}}}
	if err := c.Create(ctx, oldRole); err != nil {
		t.Fatal(err)
	}
	topo := &v1alpha1.Topology{ObjectMeta: metav1.ObjectMeta{Name: "pipe", Namespace: ns},
		Spec: v1alpha1.TopologySpec{Parts: []v1alpha1.PartRef{{Name: "a", Revision: 1}, {Name: "b", Revision: 1}}}}
	if err := c.Create(ctx, topo); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the first revision active", func() (bool, string) {
		topo = getTopology(t, c, ns, "pipe")
		return topo.Status.Active != "" && len(deployments(t, c, ns, topo.Status.Active)) == 2, condition(topo, v1alpha1.ConditionValid)
	})
	// Its sidecars' gates read the revision's start offsets: the Role
	// gets that rule.
	role := &rbacv1.Role{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(oldRole), role); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(role.Rules, func(r rbacv1.PolicyRule) bool {
		return slices.Equal(r.Resources, []string{"topologyrevisions"}) && slices.Equal(r.Verbs, []string{"get"})
	}) {
		t.Errorf("the processors' Role an earlier version made was not given get on topologyrevisions: %+v", role.Rules)
	}
	first := topo.Status.Active
	var rev v1alpha1.TopologyRevision
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: first}, &rev); err != nil {
		t.Fatal(err)
	}
	deps := deployments(t, c, ns, first)
	clean, enrich := envOf(deps["clean"], "sidecar"), envOf(deps["enrich"], "sidecar")
	internal := rev.Spec.Topics[0].Name
	if clean["STREAMS_INPUT_TOPIC"] != "orders" || !strings.Contains(clean["STREAMS_OUTPUTS"], internal) ||
		enrich["STREAMS_INPUT_TOPIC"] != internal || !strings.Contains(enrich["STREAMS_OUTPUTS"], `"topic":"enriched"`) ||
		clean["STREAMS_REVISION"] != first || clean["STREAMS_GATE_TOPOLOGY"] != "pipe" || enrich["STREAMS_GATE_TOPOLOGY"] != "" {
		t.Fatalf("sidecar env: clean %v, enrich %v", clean, enrich)
	}
	for _, topic := range []string{internal, "streams." + ns + ".pipe.deadletter"} {
		if !topicExists(t, adm, topic) {
			t.Errorf("topic %s was not made", topic)
		}
	}
	group := rev.Spec.Processors[0].Group
	if want := []v1alpha1.GroupOffsets{{Group: group, Bootstrap: b.Addr(), Topic: "orders", Offsets: []int64{3, 2}}}; !equality.Semantic.DeepEqual(rev.Status.StartOffsets, want) {
		t.Errorf("start offsets %+v, want %+v (the source's end when it became active)", rev.Status.StartOffsets, want)
	}

	// Invalid: a cycle across the two parts, then a missing revision.
	bad := editPart(t, c, ns, "a", func(s *v1alpha1.PartSpec) {
		s.Processors["clean"] = v1alpha1.Processor{InputFrom: "enrich", Image: "fn:1"}
	})
	pin(t, c, ns, "pipe", v1alpha1.PartRef{Name: "a", Revision: bad}, v1alpha1.PartRef{Name: "b", Revision: 1})
	eventually(t, "Valid=False naming the cycle", func() (bool, string) {
		topo = getTopology(t, c, ns, "pipe")
		return strings.Contains(strings.Join(topo.Status.Problems, "\n"), `processors "clean" → "enrich" → "clean" form a cycle (parts "a", "b")`),
			condition(topo, v1alpha1.ConditionValid)
	})
	pin(t, c, ns, "pipe", v1alpha1.PartRef{Name: "a", Revision: 1}, v1alpha1.PartRef{Name: "b", Revision: 9})
	eventually(t, "Valid=False naming the missing revision", func() (bool, string) {
		topo = getTopology(t, c, ns, "pipe")
		return slices.Contains(topo.Status.Problems, `part "b": revision 9 does not exist (no TopologyPartRevision b-9)`), strings.Join(topo.Status.Problems, "; ")
	})
	if topo.Status.Active != first || topo.Status.Next != "" || len(deployments(t, c, ns, first)) != 2 {
		t.Fatalf("an invalid composition changed what runs: active %q next %q", topo.Status.Active, topo.Status.Next)
	}

	// Scale only: in place.
	scaled := editPart(t, c, ns, "a", func(s *v1alpha1.PartSpec) {
		s.Processors["clean"] = v1alpha1.Processor{InputFrom: "orders", Image: "fn:1", MinScale: ptr.To[int32](2), MaxScale: ptr.To[int32](6)}
	})
	pin(t, c, ns, "pipe", v1alpha1.PartRef{Name: "a", Revision: scaled}, v1alpha1.PartRef{Name: "b", Revision: 1})
	eventually(t, "the scale applied in place", func() (bool, string) {
		topo = getTopology(t, c, ns, "pipe")
		d := deployments(t, c, ns, first)["clean"]
		return d != nil && *d.Spec.Replicas == 2 && topo.Status.Active == first && topo.Status.Next == "" &&
			meta.IsStatusConditionTrue(topo.Status.Conditions, v1alpha1.ConditionValid), condition(topo, v1alpha1.ConditionValid)
	})

	// A new image: a standby revision starts, never gets Ready (no kubelet
	// here), and is abandoned after the timeout.
	newer := editPart(t, c, ns, "b", func(s *v1alpha1.PartSpec) {
		s.Processors["enrich"] = v1alpha1.Processor{InputFrom: "clean", Image: "fn:2", SinkBindings: []string{"out"}}
	})
	pin(t, c, ns, "pipe", v1alpha1.PartRef{Name: "a", Revision: scaled}, v1alpha1.PartRef{Name: "b", Revision: newer})
	var next string
	eventually(t, "a next revision", func() (bool, string) {
		topo = getTopology(t, c, ns, "pipe")
		next = topo.Status.Next
		return next != "" && len(deployments(t, c, ns, next)) == 2, condition(topo, v1alpha1.ConditionUpgrading)
	})
	eventually(t, "UpgradeFailed", func() (bool, string) {
		topo = getTopology(t, c, ns, "pipe")
		return meta.IsStatusConditionTrue(topo.Status.Conditions, v1alpha1.ConditionUpgradeFailed), condition(topo, v1alpha1.ConditionUpgrading)
	})
	msg := condition(topo, v1alpha1.ConditionUpgradeFailed)
	if !strings.Contains(msg, "revision "+next+" was not Ready within 3s") || !strings.Contains(msg, "not scheduled") || !strings.Contains(msg, first+" runs on") {
		t.Errorf("UpgradeFailed: %s", msg)
	}
	if topo.Status.Active != first || topo.Status.Next != "" || topo.Status.Failed != next {
		t.Errorf("after the failure: active %q next %q failed %q", topo.Status.Active, topo.Status.Next, topo.Status.Failed)
	}
	eventually(t, "the failed revision's Deployments gone", func() (bool, string) {
		n := len(deployments(t, c, ns, next))
		return n == 0, fmt.Sprint(n, " left")
	})
	if len(deployments(t, c, ns, first)) != 2 {
		t.Error("the running revision lost Deployments")
	}
	// It is not tried again.
	time.Sleep(2 * time.Second)
	if topo = getTopology(t, c, ns, "pipe"); topo.Status.Next != "" {
		t.Errorf("the failed revision was tried again: next %q", topo.Status.Next)
	}

	// Deleting the topology removes its pods' Deployments and its Kafka
	// topics.
	if err := c.Delete(ctx, topo); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the topology gone with its topics", func() (bool, string) {
		err := c.Get(ctx, client.ObjectKeyFromObject(topo), &v1alpha1.Topology{})
		return client.IgnoreNotFound(err) == nil && err != nil && !topicExists(t, adm, internal), fmt.Sprint(err)
	})
}
