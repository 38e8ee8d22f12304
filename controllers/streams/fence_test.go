package streams_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cloudtransit/transit/controllers/streams/api/v1alpha1"
	"github.com/cloudtransit/transit/controllers/streams/brokertest"
	"github.com/cloudtransit/transit/controllers/streams/sidecar"
)

// TestFencesTransactionsOfGonePods: an exactly-once sidecar killed inside
// a transaction, its pod deleted before a restart could fence it, leaves
// the transaction open, and read-committed readers of the sink stop there
// until it times out (here ten minutes). The controller aborts it: the
// pipeline's records after it reach the sink, once each, and the dead
// producer can no longer commit.
func TestFencesTransactionsOfGonePods(t *testing.T) {
	e, ns := startEnv(t)
	b := brokertest.Start(t)
	startController(t, e, ns, b.Addr())
	startKubelet(t, e, ns)
	ctx, c := t.Context(), e.Client
	createTopics(t, kafkaAdmin(t, b.Addr()), 3, "orders", "enriched")
	twoTeams(t, c, ns, "fn:v1")
	active := runPipe(t, c, ns, v1alpha1.TopologySpec{Delivery: v1alpha1.ExactlyOnce, Parts: []v1alpha1.PartRef{{Name: "a", Revision: 1}, {Name: "b", Revision: 1}}})

	// The transaction a killed sidecar of a deleted enrich pod left.
	var rev v1alpha1.TopologyRevision
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: active}, &rev); err != nil {
		t.Fatal(err)
	}
	var group string
	for _, p := range rev.Spec.Processors {
		if p.Name == "enrich" {
			group = p.Group
		}
	}
	zombie, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.TransactionalID(sidecar.TransactionalID(group, active+"-enrich-5d4b9dbd66-gone1")), kgo.TransactionTimeout(10*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(zombie.Close)
	if err := zombie.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for p := range int32(3) {
		if err := zombie.ProduceSync(ctx, &kgo.Record{Topic: "enriched", Partition: p, Value: []byte("abandoned")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	out := brokertest.StartSink(t, b.Addr(), "enriched")
	in := brokertest.StartFeed(t, b.Addr(), "orders", 100)
	eventually(t, "300 ids fed", func() (bool, string) { return in.Sent() >= 300, fmt.Sprint(in.Sent(), " sent") })
	n := in.Halt()
	out.Expect(t, n, time.Minute, true) // far less than the transaction's timeout
	end, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := zombie.EndTransaction(end, kgo.TryCommit); err == nil {
		t.Error("the dead pod's producer committed its transaction: it was not fenced")
	}
}
