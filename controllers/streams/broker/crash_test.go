package broker_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cloudtransit/transit/controllers/streams/brokertest"
)

// A transaction open when the broker is killed is aborted as it restarts,
// and what its producer commits afterwards is read committed: an abort
// leaves a marker, or a read-committed reader (franz-go, the Java client)
// skips every later batch of that producer.
func TestCommitsAfterACrashAbortAreRead(t *testing.T) {
	b := brokertest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tx, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.TransactionalID("t"), kgo.DefaultProduceTopic("in"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kadm.NewClient(tx).CreateTopic(ctx, 1, 1, nil, "in"); err != nil {
		t.Fatal(err)
	}
	if err := tx.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := tx.ProduceSync(ctx, &kgo.Record{Value: []byte("open at the crash")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	tx.Close()

	b.Restart()

	// The producer's next incarnation (the same transactional ID).
	tx, err = kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.TransactionalID("t"), kgo.DefaultProduceTopic("in"))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	if err := tx.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := tx.ProduceSync(ctx, &kgo.Record{Value: []byte("committed after")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := tx.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.ConsumeTopics("in"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var got []string
	read, cancelRead := context.WithTimeout(ctx, 5*time.Second)
	defer cancelRead()
	for read.Err() == nil && !slices.Contains(got, "committed after") {
		cl.PollFetches(read).EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	if !slices.Equal(got, []string{"committed after"}) {
		t.Fatalf("read committed after the crash: %q, want only the transaction committed after it", got)
	}
}
