package e2e

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	clientset "k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/cloudtransit/transit/bundle"
	"github.com/cloudtransit/transit/controllers/streams"
	"github.com/cloudtransit/transit/controllers/streams/api/v1alpha1"
	"github.com/cloudtransit/transit/controllers/streams/brokertest"
	"github.com/cloudtransit/transit/controllers/streams/sidecar"
	"github.com/cloudtransit/transit/districts"
)

// The e2e's streams step makes 5 upgrades under load, with a history of 3
// finished revisions, so that collection past the history happens; what
// 20 upgrades add is a measurement (pauses, update times), which
// BenchmarkStreamsOnCluster makes with the addon's default history.
const (
	streamsUpgrades = 5
	streamsHistory  = 3
)

// testKubeStreams installs the streams addon (controller and development
// broker) and runs the research's use case on it (streamsOnCluster).
func testKubeStreams(t *testing.T, c *cluster) {
	m := streamsOnCluster(t, c, streamsUpgrades, streamsHistory)
	t.Logf("%d upgrades; where the sink's writer changed: pause median %s max %s, update median %s max %s", streamsUpgrades,
		median(m.pauses), slices.Max(m.pauses).Round(10*time.Millisecond), median(m.updates), slices.Max(m.updates).Round(10*time.Millisecond))
}

// streamsMeasure is what streamsOnCluster measured: the pauses at the
// sink and the times from pin to the first new record, where the sink's
// writer changed, and the duplicates an exactly-once pipeline made.
type streamsMeasure struct {
	pauses, updates []time.Duration
	dups            int
}

// streamsOnCluster installs the streams addon (history finished revisions
// kept; 0: its default) and runs the research's use case on it: two
// teams, each allowed by RBAC to edit only its own part of one
// exactly-once pipeline, upgrade it in turn while ids flow through; old
// revisions are collected as they drain, no more kept than the history;
// workers are drained and replaced under it; removing the addon is
// refused while the topology exists and done once it is gone. The ids are
// fed and read from the host through a node port to the broker: every id
// arrives, none twice.
func streamsOnCluster(t testing.TB, c *cluster, upgrades, history int) streamsMeasure {
	addon := districts.Addon{Name: "streams"}
	if history > 0 {
		addon.Settings = map[string]string{"history": fmt.Sprint(history)}
	} else {
		history = 10
	}
	c.installAddons(addon)
	ctx := context.Background()
	k := c.kube()
	admin := c.streamsClient("")
	kafka := c.brokerFromHost(ctx)
	adm := kadm.NewClient(kafka.client(t))
	// kube-proxy opens a new node port within seconds.
	eventually(t, time.Minute, "the broker through its node port", func(ctx context.Context) error {
		_, err := adm.ListBrokers(ctx)
		return err
	})
	if resp, err := adm.CreateTopics(ctx, 3, 1, nil, "orders", "enriched"); err != nil || resp.Error() != nil {
		t.Fatalf("create topics through the node port: %v %v", err, resp.Error())
	}

	// The shop: team a owns part a (orders → clean), team b part b
	// (clean → enrich → enriched); each may edit only its own.
	if _, err := k.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, team := range []struct{ user, part string }{{"alice", "a"}, {"bob", "b"}} {
		grantPart(ctx, t, admin, team.user, team.part)
	}
	echo := c.bundleImage(bundle.StreamsEchoRepository)
	scale := func(p v1alpha1.Processor) v1alpha1.Processor {
		p.MinScale, p.MaxScale = ptr(int32(2)), ptr(int32(3))
		return p
	}
	for _, p := range []*v1alpha1.TopologyPart{
		{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "shop"}, Spec: v1alpha1.PartSpec{
			Sources:    map[string]v1alpha1.Endpoint{"orders": {Topic: "orders"}},
			Processors: map[string]v1alpha1.Processor{"clean": scale(v1alpha1.Processor{InputFrom: "orders", Image: echo})}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "shop"}, Spec: v1alpha1.PartSpec{
			Processors: map[string]v1alpha1.Processor{"enrich": scale(v1alpha1.Processor{InputFrom: "clean", Image: echo, SinkBindings: []string{"out"}})},
			Sinks:      map[string]v1alpha1.Sink{"out": {Endpoint: v1alpha1.Endpoint{Topic: "enriched"}}}}},
	} {
		if err := admin.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	alice, bob := c.streamsClient("alice"), c.streamsClient("bob")
	if err := editPart(ctx, alice, "b", "enrich", "alice"); !apierrors.IsForbidden(err) {
		t.Errorf("alice edited team b's part: %v", err)
	}
	if err := editPart(ctx, bob, "a", "clean", "bob"); !apierrors.IsForbidden(err) {
		t.Errorf("bob edited team a's part: %v", err)
	}
	topo := &v1alpha1.Topology{ObjectMeta: metav1.ObjectMeta{Name: "pipe", Namespace: "shop"}, Spec: v1alpha1.TopologySpec{
		Delivery: v1alpha1.ExactlyOnce, Parts: []v1alpha1.PartRef{{Name: "a", Revision: 1}, {Name: "b", Revision: 1}}}}
	if err := admin.Create(ctx, topo); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	active := waitTopology(t, admin, "", 5*time.Minute)
	t.Logf("the pipeline ran (4 pods, real kubelets) %s after its Topology", time.Since(start).Round(time.Second))

	out := brokertest.StartSink(t, kafka.addr, "enriched", kafka.dialer())
	in := brokertest.StartFeed(t, kafka.addr, "orders", 100, kafka.dialer())

	// The upgrades, the teams in turn: each edits its function's
	// version, the platform pins the new revision.
	var m streamsMeasure
	revs := map[string]int64{"a": 1, "b": 1}
	for i := range upgrades {
		team, part, proc := alice, "a", "clean"
		if i%2 == 1 {
			team, part, proc = bob, "b", "enrich"
		}
		if err := editPart(ctx, team, part, proc, fmt.Sprintf("v%d", i+2)); err != nil {
			t.Fatalf("upgrade %d: team of part %s: %v", i+1, part, err)
		}
		revs[part] = latestRevision(t, admin, part)
		pinned := time.Now()
		pinParts(t, admin, []v1alpha1.PartRef{{Name: "a", Revision: revs["a"]}, {Name: "b", Revision: revs["b"]}})
		next := waitTopology(t, admin, active, 3*time.Minute)
		if part == "b" { // the sink's writer changed: its events show the pause
			var lastOld, first time.Time
			eventually(t, time.Minute, "the first event of "+next+" at the sink", func(context.Context) error {
				if lastOld, first = out.Switch(active, next); first.IsZero() {
					return fmt.Errorf("none yet")
				}
				return nil
			})
			m.pauses = append(m.pauses, first.Sub(lastOld))
			m.updates = append(m.updates, first.Sub(pinned))
		}
		active = next
	}

	// The GC run: only the active revision's processors run, and no more
	// finished revisions are kept than the history.
	eventually(t, time.Minute, "only the active revision's Deployments", func(ctx context.Context) error {
		ds, err := k.AppsV1().Deployments("shop").List(ctx, metav1.ListOptions{LabelSelector: streams.LabelTopology + "=pipe"})
		if err != nil {
			return err
		}
		for _, d := range ds.Items {
			if d.Labels[streams.LabelRevision] != active {
				return fmt.Errorf("deployment %s of revision %s outlived the switch to %s", d.Name, d.Labels[streams.LabelRevision], active)
			}
		}
		if len(ds.Items) != 2 {
			return fmt.Errorf("%d Deployments, want 2", len(ds.Items))
		}
		return nil
	})
	// A revision whose Deployments went is finished once its pods are gone
	// too (a sidecar may finish its batch first), and only then counts in
	// the history, the oldest pruned as another finishes: once none phases
	// out, the history and the active one are kept (CI counted 5 where 4
	// are kept while a revision's pods were still stopping). A pod's grace
	// period bounds its stopping.
	eventually(t, sidecar.DefaultGracePeriod()+time.Minute, "the old revisions finished, the history kept", func(ctx context.Context) error {
		var trs v1alpha1.TopologyRevisionList
		if err := admin.List(ctx, &trs, client.InNamespace("shop")); err != nil {
			return err
		}
		finished := 0
		for _, tr := range trs.Items {
			if tr.Status.Finished != nil {
				finished++
			}
		}
		if len(trs.Items) != history+1 || finished != history {
			return fmt.Errorf("%d TopologyRevisions (%d finished) after %d upgrades: want history %d plus the active one", len(trs.Items), finished, upgrades, history)
		}
		return nil
	})

	// Workers drained and replaced while it runs: site b's worker goes
	// (a new one in site a takes its place), then one of site a's.
	before := processorNodes(ctx, t, k)
	c.setQuantity("e2e-b", districts.RoleWorker, 0)
	c.setQuantity("e2e-a", districts.RoleWorker, 3)
	c.apply()
	c.setQuantity("e2e-b", districts.RoleWorker, 1)
	c.setQuantity("e2e-a", districts.RoleWorker, 2)
	c.apply()
	t.Logf("processor pods on %v before the workers were replaced, on %v after", before, processorNodes(ctx, t, k))
	waitTopology(t, admin, "", 3*time.Minute) // Ready again

	n := in.Halt()
	m.dups = out.Expect(t, n, 3*time.Minute, true)
	t.Logf("%d ids through %d upgrades and two worker replacements: %d duplicates; revisions at the sink %d",
		n, upgrades, m.dups, len(out.Revisions()))

	// The addon stays while a topology uses it, then goes.
	c.cfg.Addons = nil
	c.writeConfig()
	if r := c.transit("apply", "--auto-approve"); r.code != 3 || !strings.Contains(r.stderr, "shop/pipe") {
		t.Errorf("removing the addon under a topology: exit %d, want 3 naming shop/pipe:\n%s", r.code, r.stderr)
	}
	if err := admin.Delete(ctx, topo); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "the topology's finalizer done", func(ctx context.Context) error {
		err := admin.Get(ctx, client.ObjectKeyFromObject(topo), &v1alpha1.Topology{})
		if err == nil {
			return fmt.Errorf("topology shop/pipe still there")
		}
		return client.IgnoreNotFound(err)
	})
	topics, err := adm.ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Its topics between processors go; the source, the sink and the
	// dead-letter topic (records someone must still look at) stay.
	if got, want := topics.Names(), []string{"enriched", "orders", "streams.shop.pipe.deadletter"}; !slices.Equal(got, want) {
		t.Errorf("topics after the topology went: %v, want %v", got, want)
	}
	groups, err := adm.ListGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) > 0 {
		t.Errorf("consumer groups left after the topology went: %v", groups.Groups())
	}
	kafka.close()
	c.apply()
	eventually(t, 2*time.Minute, "the addon's namespace gone", func(ctx context.Context) error {
		_, err := k.CoreV1().Namespaces().Get(ctx, "transit-streams", metav1.GetOptions{})
		switch {
		case err == nil:
			return fmt.Errorf("namespace transit-streams is still there")
		case apierrors.IsNotFound(err):
			return nil
		}
		return err
	})
	if err := k.CoreV1().Namespaces().Delete(ctx, "shop", metav1.DeleteOptions{}); err != nil {
		t.Error(err)
	}
	return m
}

// streamsClient is a client of the cluster with the streams kinds, as
// user (impersonated by the admin) or, "", the admin.
func (c *cluster) streamsClient(user string) client.Client {
	c.tb.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		c.tb.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		c.tb.Fatal(err)
	}
	cfg := c.restConfig(20 * time.Second)
	cfg.Impersonate.UserName = user
	log.SetLogger(logr.Discard()) // controller-runtime's client logs nothing a test needs
	cl, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		c.tb.Fatal(err)
	}
	return cl
}

// bundleImage is the reference of the bundle's image of repository.
func (c *cluster) bundleImage(repository string) string {
	c.tb.Helper()
	dir, err := bundleDir()
	if err != nil {
		c.tb.Fatal(err)
	}
	m, err := bundle.Read(dir)
	if err != nil {
		c.tb.Fatal(err)
	}
	ref := m.ImageRef(repository)
	if ref == "" {
		c.tb.Fatalf("the bundle has no image of %s", repository)
	}
	return ref
}

// hostKafka reaches the development broker from the host: through a node
// port, every address the broker advertises (its DNS name, which the host
// cannot resolve) dialled there.
type hostKafka struct {
	addr   string // as the broker advertises itself
	target string // a master's address and the node port
	cl     *kgo.Client
}

func (c *cluster) brokerFromHost(ctx context.Context) *hostKafka {
	c.tb.Helper()
	k := c.kube()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "streams-broker-e2e", Namespace: "transit-streams"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort,
			Selector: map[string]string{"app.kubernetes.io/name": "streams-broker"},
			Ports:    []corev1.ServicePort{{Port: 9092, TargetPort: intstr.FromString("kafka")}}},
	}
	svc, err := k.CoreV1().Services("transit-streams").Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		c.tb.Fatal(err)
	}
	master := c.manager(c.status())
	return &hostKafka{addr: "streams-broker.transit-streams.svc.cluster.local:9092",
		target: net.JoinHostPort(master.PublicIP, fmt.Sprint(svc.Spec.Ports[0].NodePort))}
}

func (h *hostKafka) dialer() kgo.Opt {
	return kgo.Dialer(func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, h.target)
	})
}

func (h *hostKafka) client(tb testing.TB) *kgo.Client {
	tb.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.addr), h.dialer())
	if err != nil {
		tb.Fatal(err)
	}
	h.cl = cl
	tb.Cleanup(h.close)
	return cl
}

func (h *hostKafka) close() {
	if h.cl != nil {
		h.cl.Close()
		h.cl = nil
	}
}

// grantPart lets user edit only part (and read the others) in shop.
func grantPart(ctx context.Context, t testing.TB, c client.Client, user, part string) {
	t.Helper()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "part-" + part, Namespace: "shop"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"topologyparts"}, ResourceNames: []string{part}, Verbs: []string{"get", "update", "patch"}},
		{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"topologyparts", "topologypartrevisions", "topologies"}, Verbs: []string{"get", "list", "watch"}},
	}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "part-" + part, Namespace: "shop"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}}}
	for _, o := range []client.Object{role, binding} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
}

// editPart sets processor proc's ECHO_VERSION in part, as the client's
// user.
func editPart(ctx context.Context, c client.Client, part, proc, version string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var p v1alpha1.TopologyPart
		if err := c.Get(ctx, client.ObjectKey{Namespace: "shop", Name: part}, &p); err != nil {
			return err
		}
		pr := p.Spec.Processors[proc]
		pr.Env = []corev1.EnvVar{{Name: "ECHO_VERSION", Value: version}}
		p.Spec.Processors[proc] = pr
		return c.Update(ctx, &p)
	})
}

// latestRevision waits for part's revision of its current spec.
func latestRevision(t testing.TB, c client.Client, part string) int64 {
	t.Helper()
	var rev int64
	eventually(t, time.Minute, "part "+part+"'s new revision", func(ctx context.Context) error {
		var p v1alpha1.TopologyPart
		if err := c.Get(ctx, client.ObjectKey{Namespace: "shop", Name: part}, &p); err != nil {
			return err
		}
		if p.Status.ObservedGeneration < p.Generation {
			return fmt.Errorf("generation %d observed %d", p.Generation, p.Status.ObservedGeneration)
		}
		rev = p.Status.LatestRevision
		return nil
	})
	return rev
}

func pinParts(t testing.TB, c client.Client, refs []v1alpha1.PartRef) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var tp v1alpha1.Topology
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: "shop", Name: "pipe"}, &tp); err != nil {
			return err
		}
		tp.Spec.Parts = refs
		return c.Update(context.Background(), &tp)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// waitTopology waits until shop/pipe runs a revision other than from,
// Ready, with nothing next or phasing out, and returns it.
func waitTopology(t testing.TB, c client.Client, from string, within time.Duration) string {
	t.Helper()
	var active string
	eventually(t, within, "the pipeline Ready on a revision after "+from, func(ctx context.Context) error {
		var tp v1alpha1.Topology
		if err := c.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "pipe"}, &tp); err != nil {
			return err
		}
		active = tp.Status.Active
		ready := false
		for _, cond := range tp.Status.Conditions {
			if cond.Type == v1alpha1.ConditionReady {
				ready = cond.Status == metav1.ConditionTrue
			}
		}
		if active == "" || active == from || tp.Status.Next != "" || len(tp.Status.PhasingOut) > 0 || !ready {
			return fmt.Errorf("active %q next %q phasing out %v ready %t: %v", active, tp.Status.Next, tp.Status.PhasingOut, ready, tp.Status.Conditions)
		}
		return nil
	})
	return active
}

// processorNodes names the nodes running the pipeline's pods.
func processorNodes(ctx context.Context, t testing.TB, k clientset.Interface) []string {
	t.Helper()
	pods, err := k.CoreV1().Pods("shop").List(ctx, metav1.ListOptions{LabelSelector: streams.LabelTopology + "=pipe"})
	if err != nil {
		t.Fatal(err)
	}
	var nodes []string
	for _, p := range pods.Items {
		nodes = append(nodes, p.Spec.NodeName)
	}
	slices.Sort(nodes)
	return slices.Compact(nodes)
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2].Round(10 * time.Millisecond)
}
