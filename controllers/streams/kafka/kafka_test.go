package kafka

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cloudtransit/transit/controllers/streams/brokertest"
)

func setup(t *testing.T) (*Admin, *brokertest.Broker, context.Context) {
	t.Helper()
	b := brokertest.Start(t)
	a := New()
	t.Cleanup(a.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return a, b, ctx
}

func produce(ctx context.Context, t *testing.T, addr, topic string, txn string, commit bool, n int) {
	t.Helper()
	opts := []kgo.Opt{kgo.SeedBrokers(addr), kgo.DefaultProduceTopic(topic)}
	if txn != "" {
		opts = append(opts, kgo.TransactionalID(txn))
	}
	c, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if txn != "" {
		if err := c.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		if err := c.ProduceSync(ctx, &kgo.Record{Value: []byte("v"), Partition: 0}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if txn != "" {
		if err := c.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
}

func commit(ctx context.Context, t *testing.T, addr, group, topic string, at int64) {
	t.Helper()
	c, _ := kgo.NewClient(kgo.SeedBrokers(addr))
	defer c.Close()
	os := kadm.Offsets{}
	os.Add(kadm.Offset{Topic: topic, Partition: 0, At: at, LeaderEpoch: -1})
	if err := kadm.NewClient(c).CommitAllOffsets(ctx, group, os); err != nil {
		t.Fatal(err)
	}
}

func TestTopics(t *testing.T) {
	a, b, ctx := setup(t)
	for range 2 {
		if err := a.EnsureTopic(ctx, b.Addr(), "t", 3); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := a.Partitions(ctx, b.Addr(), "t"); err != nil || n != 3 {
		t.Fatalf("partitions %d, %v", n, err)
	}
	if err := a.EnsureTopic(ctx, b.Addr(), "t", 5); err != nil {
		t.Fatal(err)
	}
	if n, _ := a.Partitions(ctx, b.Addr(), "t"); n != 3 {
		t.Fatalf("EnsureTopic changed a topic's partitions to %d", n)
	}
	if _, err := a.Partitions(ctx, b.Addr(), "missing"); err == nil || !strings.Contains(err.Error(), "topic missing does not exist") {
		t.Fatalf("a missing topic: %v", err)
	}
	for range 2 {
		if err := a.DeleteTopic(ctx, b.Addr(), "t"); err != nil {
			t.Fatal(err)
		}
	}
}

func TestGroups(t *testing.T) {
	a, b, ctx := setup(t)
	if err := a.EnsureTopic(ctx, b.Addr(), "in", 2); err != nil {
		t.Fatal(err)
	}
	state := func() (string, int) {
		t.Helper()
		st, members, err := a.GroupState(ctx, b.Addr(), "g")
		if err != nil {
			t.Fatal(err)
		}
		return st, len(members)
	}
	if st, n := state(); st != "Dead" || n != 0 {
		t.Fatalf("an unknown group: %s with %d members", st, n)
	}
	commit(ctx, t, b.Addr(), "g", "in", 9)
	if got, err := a.Committed(ctx, b.Addr(), "g", "in"); err != nil || len(got) != 1 || got[0] != 9 {
		t.Fatalf("committed %v, %v: want 0→9", got, err)
	}
	// Never committed: where the reader begins, given, else the start.
	if from, err := a.Positions(ctx, b.Addr(), "g", "in", Offsets{0: 20, 1: 20}, Offsets{0: 4, 1: 7}); err != nil || from[0] != 9 || from[1] != 7 {
		t.Fatalf("positions %v, %v: want 0→9 (the commit), 1→7 (the begin given)", from, err)
	}
	if from, err := a.Positions(ctx, b.Addr(), "g", "in", Offsets{0: 20, 1: 20}, nil); err != nil || from[0] != 9 || from[1] != 0 {
		t.Fatalf("positions %v, %v: want 0→9, 1→0 (the partition's start)", from, err)
	}

	member, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("in"))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if st, n := state(); st == "Stable" && n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the group never showed its member")
		}
		pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		member.PollFetches(pctx)
		cancel()
	}
	member.Close() // leaves the group
	if st, n := state(); st != "Empty" || n != 0 {
		t.Fatalf("after the member left: %s with %d members", st, n)
	}
	if err := a.DeleteGroup(ctx, b.Addr(), "g"); err != nil {
		t.Fatal(err)
	}
	if got, _ := a.Committed(ctx, b.Addr(), "g", "in"); len(got) != 0 {
		t.Fatalf("a deleted group kept offsets %v", got)
	}
	if err := a.DeleteGroup(ctx, b.Addr(), "g"); err != nil {
		t.Fatalf("deleting a missing group: %v", err)
	}
}

// Drained is what lets the garbage collector delete a processor: it must
// never say so while a readable record lies past the commit, and must say
// so past commit markers a reader never commits beyond.
func TestDrained(t *testing.T) {
	a, b, ctx := setup(t)
	for _, tp := range []string{"plain", "txn", "aborted", "empty"} {
		if err := a.EnsureTopic(ctx, b.Addr(), tp, 1); err != nil {
			t.Fatal(err)
		}
	}
	drained := func(group, topic string, rc bool) bool {
		t.Helper()
		d, err := a.Drained(ctx, b.Addr(), group, topic, rc)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if !drained("g", "empty", false) || !drained("g", "empty", true) {
		t.Error("an empty topic never committed is not drained")
	}
	produce(ctx, t, b.Addr(), "plain", "", false, 3)
	if drained("g", "plain", false) {
		t.Error("nothing committed of 3 records: drained")
	}
	commit(ctx, t, b.Addr(), "g", "plain", 2)
	if drained("g", "plain", false) {
		t.Error("committed 2 of 3: drained")
	}
	commit(ctx, t, b.Addr(), "g", "plain", 3)
	if !drained("g", "plain", false) {
		t.Error("committed 3 of 3: not drained")
	}

	// Two committed transactions of one record each: offsets 0 and 2 are
	// data, 1 and 3 markers; a reader of both commits 3.
	produce(ctx, t, b.Addr(), "txn", "p", true, 1)
	produce(ctx, t, b.Addr(), "txn", "p", true, 1)
	commit(ctx, t, b.Addr(), "g", "txn", 1)
	if drained("g", "txn", true) {
		t.Error("a committed record past the commit: drained")
	}
	commit(ctx, t, b.Addr(), "g", "txn", 3)
	if !drained("g", "txn", true) {
		t.Error("only a commit marker past the commit: not drained")
	}
	// An aborted transaction is nothing to read.
	produce(ctx, t, b.Addr(), "aborted", "q", false, 2)
	if !drained("g", "aborted", true) {
		t.Error("only aborted records: not drained")
	}

	// A record committed past a transaction left open (its writer died
	// inside it) is not readable yet: a reader that read all it could
	// has not drained the topic, not before the transaction is fenced
	// and it read the record.
	if err := a.EnsureTopic(ctx, b.Addr(), "behind", 1); err != nil {
		t.Fatal(err)
	}
	dead, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.DefaultProduceTopic("behind"), kgo.TransactionalID("dead-pod"))
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	if err := dead.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := dead.ProduceSync(ctx, &kgo.Record{Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	produce(ctx, t, b.Addr(), "behind", "", false, 1)
	commit(ctx, t, b.Addr(), "g", "behind", 0) // the last stable offset
	if drained("g", "behind", true) {
		t.Error("a record committed past an open transaction: drained")
	}
	open, err := a.OpenTransactions(ctx, b.Addr())
	if err != nil || !slices.Contains(open, "dead-pod") {
		t.Fatalf("open transactions %v, %v: want dead-pod's", open, err)
	}
	if err := a.FenceTransactions(ctx, b.Addr(), "dead-pod"); err != nil {
		t.Fatal(err)
	}
	if open, err := a.OpenTransactions(ctx, b.Addr()); err != nil || slices.Contains(open, "dead-pod") {
		t.Fatalf("open transactions after the fence %v, %v", open, err)
	}
	if err := dead.EndTransaction(ctx, kgo.TryCommit); err == nil {
		t.Error("a fenced producer committed")
	}
	if drained("g", "behind", true) {
		t.Error("the record past the aborted transaction unread: drained")
	}
	commit(ctx, t, b.Addr(), "g", "behind", 3) // record, abort marker
	if !drained("g", "behind", true) {
		t.Error("read past the aborted transaction: not drained")
	}

	// Kafka down: an error, never an answer.
	b.Kill()
	short, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if d, err := a.Drained(short, b.Addr(), "g", "plain", false); err == nil {
		t.Errorf("broker down: drained %v without error", d)
	}
}
