package streams_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cloudtransit/transit/controllers/streams"
	"github.com/cloudtransit/transit/controllers/streams/api/v1alpha1"
	"github.com/cloudtransit/transit/controllers/streams/brokertest"
	"github.com/cloudtransit/transit/controllers/streams/kafka"
)

// A Kafka that requires SCRAM logins and enforces ACLs (kfake's, in this
// process): the controller is the superuser "controller", processors
// log in as "app", allowed the pipeline's topics and groups but, at
// first, not to write the sink topic "enriched".
const (
	controllerPassword = "controller-pw-4f1c"
	appPassword        = "app-pw-9d2e"
)

func secureKafka(t *testing.T, ns string) (addr string, adm *kadm.Client) {
	t.Helper()
	allow := func(res kmsg.ACLResourceType, name string, pattern kmsg.ACLResourcePatternType, op kmsg.ACLOperation) kfake.ACL {
		return kfake.ACL{Allow: true, Resource: res, Name: name, Pattern: pattern, Operation: op}
	}
	lit, prefix := kmsg.ACLResourcePatternTypeLiteral, kmsg.ACLResourcePatternTypePrefixed
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(), kfake.EnableACLs(),
		kfake.Superuser("SCRAM-SHA-256", "controller", controllerPassword),
		kfake.User("SCRAM-SHA-256", "app", appPassword,
			allow(kmsg.ACLResourceTypeTopic, "orders", lit, kmsg.ACLOperationRead),
			allow(kmsg.ACLResourceTypeTopic, "orders", lit, kmsg.ACLOperationDescribe),
			allow(kmsg.ACLResourceTypeTopic, "enriched", lit, kmsg.ACLOperationDescribe),
			// The topology's own topics: internal ones and dead letters.
			allow(kmsg.ACLResourceTypeTopic, "streams."+ns+".pipe.", prefix, kmsg.ACLOperationAll),
			allow(kmsg.ACLResourceTypeGroup, "streams."+ns+".pipe.", prefix, kmsg.ACLOperationRead)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	addr = c.ListenAddrs()[0]
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), superuser())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return addr, kadm.NewClient(cl)
}

func superuser() kgo.Opt {
	return kgo.SASL(scram.Auth{User: "controller", Pass: controllerPassword}.AsSha256Mechanism())
}

// TestKafkaBehindSASLAndACLs: the controller (its own login, Options.
// Security) and every processor's sidecar (the Secret each pod mounts,
// Options.KafkaSecret) reach a Kafka that requires logins. A processor
// whose principal may not write its sink leaves the Topology not Ready,
// the condition naming the pod, the ACL, the principal and the topic —
// never a password; once the ACL is granted, every record reaches the
// sink without anyone touching the pipeline.
func TestKafkaBehindSASLAndACLs(t *testing.T) {
	e, ns := startEnv(t)
	addr, adm := secureKafka(t, ns)
	c := e.Client
	createTopics(t, adm, 2, "orders", "enriched")
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "kafka-client", Namespace: ns}, StringData: map[string]string{
		kafka.FileMechanism: "SCRAM-SHA-256", kafka.FileUsername: "app", kafka.FilePassword: appPassword}}
	if err := c.Create(t.Context(), secret); err != nil {
		t.Fatal(err)
	}
	startController(t, e, ns, addr, func(o *streams.Options) {
		o.Security = kafka.Security{Mechanism: "SCRAM-SHA-256", Username: "controller", Password: controllerPassword}
		o.KafkaSecret = "kafka-client"
	})
	startKubelet(t, e, ns)
	twoTeams(t, c, ns, "fn:v1")
	runPipe(t, c, ns, v1alpha1.TopologySpec{Parts: []v1alpha1.PartRef{{Name: "a", Revision: 1}, {Name: "b", Revision: 1}}})
	out := brokertest.StartSink(t, addr, "enriched", superuser())
	in := brokertest.StartFeed(t, addr, "orders", 50, superuser())

	var msg string
	eventuallyWithin(t, 2*time.Minute, "Ready=False naming the ACL on the sink", func() (bool, string) {
		tp := getTopology(t, c, ns, "pipe")
		msg = condition(tp, v1alpha1.ConditionReady)
		return meta.IsStatusConditionFalse(tp.Status.Conditions, v1alpha1.ConditionReady) &&
			strings.Contains(msg, "an ACL denies User:app") && strings.Contains(msg, "enriched"), msg
	})
	t.Logf("the condition: %s", msg)
	for _, want := range []string{"enrich", "pod pipe-", "container sidecar", "WRITE on its outputs"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the condition does not say %q: %s", want, msg)
		}
	}
	tp := getTopology(t, c, ns, "pipe")
	if status := fmt.Sprintf("%+v", tp.Status); strings.Contains(status, appPassword) || strings.Contains(status, controllerPassword) {
		t.Errorf("the Topology's status shows a password: %s", status)
	}
	var events corev1.EventList
	if err := c.List(t.Context(), &events); err != nil {
		t.Fatal(err)
	}
	for _, ev := range events.Items {
		if strings.Contains(ev.Message, appPassword) || strings.Contains(ev.Message, controllerPassword) {
			t.Errorf("event %s shows a password: %s", ev.Reason, ev.Message)
		}
	}

	// Granted: the crash-looping sidecars pick it up at their next start.
	granted, err := adm.CreateACLs(t.Context(), kadm.NewACLs().Allow("User:app").AllowHosts().Topics("enriched").Operations(kadm.OpWrite).ResourcePatternType(kadm.ACLPatternLiteral))
	if err == nil {
		for _, r := range granted {
			err = r.Err
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	eventuallyWithin(t, 2*time.Minute, "the pipeline Ready once granted", func() (bool, string) {
		tp := getTopology(t, c, ns, "pipe")
		return meta.IsStatusConditionTrue(tp.Status.Conditions, v1alpha1.ConditionReady), condition(tp, v1alpha1.ConditionReady)
	})
	time.Sleep(2 * time.Second)
	n := in.Halt()
	out.Expect(t, n, 2*time.Minute, false)
	t.Logf("%d ids through a Kafka with logins and ACLs", n)
}

// TestKafkaLoginRefused: a controller whose login Kafka refuses says so
// in KafkaReachable (which Secret keys to check), without the password,
// and makes nothing.
func TestKafkaLoginRefused(t *testing.T) {
	e, ns := startEnv(t)
	addr, adm := secureKafka(t, ns)
	c := e.Client
	createTopics(t, adm, 1, "orders", "enriched")
	const wrong = "not-the-password-77"
	startController(t, e, ns, addr, func(o *streams.Options) {
		o.Security = kafka.Security{Mechanism: "SCRAM-SHA-256", Username: "controller", Password: wrong}
	})
	twoTeams(t, c, ns, "fn:v1")
	topo := &v1alpha1.Topology{ObjectMeta: metav1.ObjectMeta{Name: "pipe", Namespace: ns},
		Spec: v1alpha1.TopologySpec{Parts: []v1alpha1.PartRef{{Name: "a", Revision: 1}, {Name: "b", Revision: 1}}}}
	if err := c.Create(t.Context(), topo); err != nil {
		t.Fatal(err)
	}
	var msg string
	eventually(t, "KafkaReachable=False", func() (bool, string) {
		tp := getTopology(t, c, ns, "pipe")
		msg = condition(tp, v1alpha1.ConditionKafkaReachable)
		return meta.IsStatusConditionFalse(tp.Status.Conditions, v1alpha1.ConditionKafkaReachable), msg
	})
	t.Logf("the condition: %s", msg)
	for _, want := range []string{"SCRAM-SHA-256 login", kafka.FilePassword, addr} {
		if !strings.Contains(msg, want) {
			t.Errorf("the condition does not say %q: %s", want, msg)
		}
	}
	if strings.Contains(msg, wrong) {
		t.Errorf("the condition shows the password: %s", msg)
	}
	if tp := getTopology(t, c, ns, "pipe"); tp.Status.Active != "" {
		t.Errorf("a revision was made (%s) while Kafka refused the login", tp.Status.Active)
	}
}

// TestTopologyKafkaSecret: a topology whose source and sink name another
// Kafka, one that requires logins, with a kafkaSecret: until that Secret
// exists, KafkaReachable=False names it; then the controller (for its
// internal topics, groups and dead letters, all on that cluster) and the
// processors reach it with the Secret, and every record arrives. The
// addon's own Kafka is plaintext and the addon names no Secret.
func TestTopologyKafkaSecret(t *testing.T) {
	e, ns := startEnv(t)
	b := brokertest.Start(t) // the addon's Kafka
	addr, adm := secureKafka(t, ns)
	c := e.Client
	createTopics(t, adm, 2, "orders", "enriched")
	if _, err := adm.CreateACLs(t.Context(), kadm.NewACLs().Allow("User:app").AllowHosts().Topics("enriched").Operations(kadm.OpWrite).ResourcePatternType(kadm.ACLPatternLiteral)); err != nil {
		t.Fatal(err)
	}
	startController(t, e, ns, b.Addr())
	startKubelet(t, e, ns)
	secure := func(topic string) v1alpha1.Endpoint {
		return v1alpha1.Endpoint{Bootstrap: addr, Topic: topic, KafkaSecret: "team-a"}
	}
	for _, p := range []*v1alpha1.TopologyPart{
		{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: ns}, Spec: v1alpha1.PartSpec{
			Sources:    map[string]v1alpha1.Endpoint{"orders": secure("orders")},
			Processors: map[string]v1alpha1.Processor{"clean": {InputFrom: "orders", Image: "fn:v1"}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: ns}, Spec: v1alpha1.PartSpec{
			Processors: map[string]v1alpha1.Processor{"enrich": {InputFrom: "clean", Image: "fn:v1", SinkBindings: []string{"out"}}},
			Sinks:      map[string]v1alpha1.Sink{"out": {Endpoint: secure("enriched")}}}},
	} {
		if err := c.Create(t.Context(), p); err != nil {
			t.Fatal(err)
		}
	}
	topo := &v1alpha1.Topology{ObjectMeta: metav1.ObjectMeta{Name: "pipe", Namespace: ns},
		Spec: v1alpha1.TopologySpec{Parts: []v1alpha1.PartRef{{Name: "a", Revision: 1}, {Name: "b", Revision: 1}}}}
	if err := c.Create(t.Context(), topo); err != nil {
		t.Fatal(err)
	}
	eventually(t, "KafkaReachable=False naming the missing Secret", func() (bool, string) {
		msg := condition(getTopology(t, c, ns, "pipe"), v1alpha1.ConditionKafkaReachable)
		return strings.Contains(msg, "kafkaSecret "+ns+"/team-a") && strings.Contains(msg, "not found"), msg
	})
	// A wrong password is explained by that cluster's login, not by the
	// addon's (plaintext) Kafka.
	const wrong = "not-the-password-78"
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "team-a", Namespace: ns}, StringData: map[string]string{
		kafka.FileMechanism: "SCRAM-SHA-256", kafka.FileUsername: "app", kafka.FilePassword: wrong}}
	if err := c.Create(t.Context(), secret); err != nil {
		t.Fatal(err)
	}
	eventually(t, "KafkaReachable=False explaining the refused login", func() (bool, string) {
		msg := condition(getTopology(t, c, ns, "pipe"), v1alpha1.ConditionKafkaReachable)
		return strings.Contains(msg, "SCRAM-SHA-256 login") && strings.Contains(msg, kafka.FilePassword) && strings.Contains(msg, addr), msg
	})
	if msg := condition(getTopology(t, c, ns, "pipe"), v1alpha1.ConditionKafkaReachable); strings.Contains(msg, wrong) {
		t.Errorf("the condition shows the password: %s", msg)
	}
	secret.StringData = map[string]string{kafka.FilePassword: appPassword} // written over Data's
	if err := c.Update(t.Context(), secret); err != nil {
		t.Fatal(err)
	}
	eventuallyWithin(t, 2*time.Minute, "the pipeline Ready", func() (bool, string) {
		tp := getTopology(t, c, ns, "pipe")
		return meta.IsStatusConditionTrue(tp.Status.Conditions, v1alpha1.ConditionReady), condition(tp, v1alpha1.ConditionReady) + "; " + condition(tp, v1alpha1.ConditionKafkaReachable)
	})
	out := brokertest.StartSink(t, addr, "enriched", superuser())
	in := brokertest.StartFeed(t, addr, "orders", 50, superuser())
	time.Sleep(3 * time.Second)
	n := in.Halt()
	out.Expect(t, n, 2*time.Minute, false)
	topics, err := kafkaAdmin(t, b.Addr()).ListTopics(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(topics.Names()) > 0 {
		t.Errorf("the addon's Kafka holds %v: the topology's topics belong on its own cluster", topics.Names())
	}
	t.Logf("%d ids through a topology's own Kafka with its own login", n)
}
