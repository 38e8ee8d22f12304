package broker_test

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cloudtransit/transit/controllers/streams/broker"
	"github.com/cloudtransit/transit/controllers/streams/brokertest"
	"github.com/cloudtransit/transit/freeport"
)

// The broker advertises the name clients must dial, not kfake's 127.0.0.1:
// metadata and the group coordinator both carry it.
func TestAdvertisesItsName(t *testing.T) {
	port := freeport.Port(t)
	advertise := net.JoinHostPort("localhost", strconv.Itoa(port))
	b, err := broker.Start(t.Context(), broker.Options{Listen: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Advertise: advertise})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(advertise))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	md, err := adm.BrokerMetadata(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(md.Brokers) != 1 || md.Brokers[0].Host != "localhost" || int(md.Brokers[0].Port) != port {
		t.Fatalf("brokers advertised: %+v, want localhost:%d", md.Brokers, port)
	}
	coords := adm.FindGroupCoordinators(ctx, "g")
	for _, c := range coords {
		if c.Err != nil || c.Host != "localhost" {
			t.Fatalf("group coordinator: %+v, want localhost", c)
		}
	}
}

func TestBadAdvertise(t *testing.T) {
	for _, a := range []string{"nohost", ":9092", "host:0", "host:x", "host:70000"} {
		if b, err := broker.Start(t.Context(), broker.Options{Listen: "127.0.0.1:0", Advertise: a}); err == nil {
			b.Close()
			t.Errorf("advertise %q: started", a)
		}
	}
}

// What was produced and committed survives kill -9 of the broker process:
// records, a group's offsets and a committed transaction; an open
// transaction's records are never read committed.
func TestKilledBrokerKeepsItsData(t *testing.T) {
	b := brokertest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 2, 1, nil, "in"); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		r := &kgo.Record{Topic: "in", Value: []byte(strconv.Itoa(i)), Partition: int32(i % 2)}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	offsets := kadm.Offsets{}
	offsets.Add(kadm.Offset{Topic: "in", Partition: 0, At: 3, LeaderEpoch: -1})
	if _, err := adm.CommitOffsets(ctx, "g", offsets); err != nil {
		t.Fatal(err)
	}
	tx, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.TransactionalID("t"), kgo.DefaultProduceTopic("in"))
	if err != nil {
		t.Fatal(err)
	}
	for i, commit := range []bool{true, false} {
		if err := tx.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := tx.ProduceSync(ctx, &kgo.Record{Value: []byte(fmt.Sprintf("tx%d", i)), Partition: 0}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if commit {
			if err := tx.EndTransaction(ctx, kgo.TryCommit); err != nil {
				t.Fatal(err)
			}
		}
	}
	tx.Close()
	cl.Close()

	b.Restart()

	cl, err = kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.ConsumeTopics("in"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm = kadm.NewClient(cl)
	committed, err := adm.FetchOffsets(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := committed.Lookup("in", 0); !ok || o.At != 3 {
		t.Fatalf("group offset after restart: %+v, want 3", o)
	}
	var got []string
	for len(got) < 11 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read %d records after restart (%v), want 11: %v", len(got), got, err)
		}
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	short, cancelShort := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancelShort()
	cl.PollFetches(short).EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	want := map[string]bool{"tx0": true}
	for i := range 10 {
		want[strconv.Itoa(i)] = true
	}
	if len(got) != len(want) {
		t.Fatalf("read committed after restart: %v, want %d records", got, len(want))
	}
	for _, v := range got {
		if !want[v] {
			t.Fatalf("read %q after restart (an aborted or open transaction's record?): %v", v, got)
		}
	}
}

// Another Kafka client than franz-go — Debian's kcat (librdkafka) — writes
// to and reads from the broker process, and reads what a franz-go
// transaction committed: the broker speaks the protocol, not one client's
// dialect.
func TestKcat(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Fatal("kcat is missing: make deps installs it (Debian package kcat)")
	}
	b := brokertest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.TransactionalID("k"), kgo.DefaultProduceTopic("t"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, "t"); err != nil {
		t.Fatal(err)
	}
	produce := exec.CommandContext(ctx, kcat, "-b", b.Addr(), "-t", "t", "-P", "-K:")
	produce.Stdin = strings.NewReader("a:one\nb:two\n")
	if out, err := produce.CombinedOutput(); err != nil {
		t.Fatalf("kcat -P: %v\n%s", err, out)
	}
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte("c"), Value: []byte("three")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, kcat, "-b", b.Addr(), "-t", "t", "-C", "-e", "-f", "%k=%s\n",
		"-X", "isolation.level=read_committed").CombinedOutput()
	if err != nil {
		t.Fatalf("kcat -C: %v\n%s", err, out)
	}
	if got := string(out); !strings.Contains(got, "a=one\nb=two\nc=three\n") {
		t.Fatalf("kcat read %q", got)
	}
}

// The first join to an empty group waits the initial rebalance delay, as
// on Apache Kafka; a second member joining within it shares the first
// generation; a group that lost one member of two rebalances at once.
func TestInitialRebalanceDelay(t *testing.T) {
	const delay = 2 * time.Second
	b, err := broker.Start(t.Context(), broker.Options{Listen: "127.0.0.1:0", InitialRebalanceDelay: delay})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	adm := kadm.NewClient(newClient(t, b.Addr()))
	if _, err := adm.CreateTopic(t.Context(), 2, 1, nil, "in"); err != nil {
		t.Fatal(err)
	}
	assigned := make(chan time.Time, 8)
	member := func() *kgo.Client {
		return newClient(t, b.Addr(), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("in"), kgo.SessionTimeout(6*time.Second),
			kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) { assigned <- time.Now() }))
	}
	poll := func(cl *kgo.Client) {
		go func() {
			for {
				if cl.PollFetches(context.Background()).IsClientClosed() {
					return
				}
			}
		}()
	}
	began := time.Now()
	first := member()
	poll(first)
	time.Sleep(delay / 2)
	second := member()
	poll(second)
	var got []time.Duration
	for range 2 {
		select {
		case at := <-assigned:
			got = append(got, at.Sub(began))
		case <-time.After(30 * time.Second):
			t.Fatalf("assignments after %v, want two", got)
		}
	}
	if got[0] < delay {
		t.Errorf("the first member was assigned after %s, before the %s delay", got[0], delay)
	}
	d, err := adm.DescribeGroups(t.Context(), "g")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(d["g"].Members); n != 2 {
		t.Errorf("%d members after the window, want both", n)
	}
	// One leaves: the other is given its partitions without a delay.
	second.Close()
	left := time.Now()
	select {
	case at := <-assigned:
		if at.Sub(left) >= delay {
			t.Errorf("a live group's rebalance waited %s", at.Sub(left))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no rebalance after a member left")
	}
}

func newClient(t *testing.T, addr string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}
