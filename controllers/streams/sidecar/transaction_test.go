package sidecar_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/cloudtransit/transit/controllers/streams/sidecar"
	"github.com/cloudtransit/transit/freeport"
)

// TestGroupSessionLostInTransaction: the coordinator forgets the member
// while it holds a polled batch (here its heartbeat is answered
// UNKNOWN_MEMBER_ID; a broker restart or a session timeout does the same).
// kgo runs the session's onLost only once the sidecar allows a rebalance,
// and End waits for a heartbeat the ended session never sends: the
// sidecar must not wait for ever but abort that transaction and go on.
// Every id arrives once.
func TestGroupSessionLostInTransaction(t *testing.T) {
	integration(t)
	t.Parallel()
	ctx := timeout(t, 120*time.Second)
	k, c := startFake(t, kfake.SeedTopics(1, "in", "out", "dlq"))
	k.produce(ctx, inputs("in", 20, 1)...)
	held, release := make(chan struct{}), make(chan struct{})
	var first sync.Once
	fn := function(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		first.Do(func() {
			close(held)
			<-release
		})
		echo(w, r, body)
	})
	e := baseEnv(k, fn.URL)
	e["STREAMS_DELIVERY"] = "exactlyOnce"
	run(t, e, nil)

	select {
	case <-held: // a transaction holds the first batch
	case <-ctx.Done():
		t.Fatal("the function was never called")
	}
	lost := make(chan struct{})
	c.ControlKey(int16(kmsg.Heartbeat), func(req kmsg.Request) (kmsg.Response, error, bool) {
		resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
		resp.ErrorCode = kerr.UnknownMemberID.Code
		close(lost)
		return resp, nil, true // once: the control is dropped
	})
	select {
	case <-lost:
	case <-ctx.Done():
		t.Fatal("no heartbeat while the batch was held")
	}
	close(release)

	k.waitCommitted(ctx, "rev-1-p", "in", 1)
	if d := cmp.Diff(ids(0, 20), values(k.readAll(ctx, "out", true))); d != "" {
		t.Fatalf("out, read committed (-want +got):\n%s", d)
	}
}

// TestRestartFencesAbandonedTransaction: a sidecar killed inside a
// transaction leaves it open, and read-committed readers of what it wrote
// stop there until the transaction times out (minutes). Its pod's next
// sidecar, with the same transactional ID, aborts it as it starts, before
// it reads anything: here it never does, held by its gate.
func TestRestartFencesAbandonedTransaction(t *testing.T) {
	integration(t)
	t.Parallel()
	ctx := timeout(t, 120*time.Second)
	k := startKafka(t)
	for _, topic := range []string{"in", "out", "dlq"} {
		k.topic(ctx, topic, 1)
	}
	fn := function(t, echo)
	k.produce(ctx, inputs("in", 10, 1)...)
	e := baseEnv(k, fn.URL)
	e["STREAMS_DELIVERY"] = "exactlyOnce"
	e["STREAMS_PROBE_ADDR"] = freeport.Addr(t)
	e["STREAMS_FAILPOINT"] = "after-produce:1"
	e["STREAMS_CALL_TIMEOUT"] = "60s" // a batch budget, so a transaction timeout, past two minutes
	p := start(t, e)
	if ws := p.wait(ctx, t); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the sidecar ended with %v, not killed at its fault point:\n%s", ws, p.out)
	}
	if open := k.open(ctx, "out"); len(open) == 0 {
		t.Fatal("no transaction left open on out by the killed sidecar")
	}

	delete(e, "STREAMS_FAILPOINT")
	e["STREAMS_PROBE_ADDR"] = freeport.Addr(t)
	run(t, e, func(ctx context.Context) (sidecar.Start, error) { <-ctx.Done(); return nil, ctx.Err() })
	// Far less than the transaction's timeout (3 minutes by default).
	fenced := timeout(t, 30*time.Second)
	waitFor(fenced, t, "the abandoned transaction's end", func() bool { return len(k.open(ctx, "out")) == 0 })
	if got := k.readAll(ctx, "out", true); len(got) != 0 {
		t.Fatalf("%d records of the abandoned transaction readable", len(got))
	}
	// The fences registered the sidecar's own transaction timeout (kfake
	// keeps the first one an ID registers), not a shorter one.
	d, err := k.adm.DescribeTransactions(ctx, "rev-1-p-pod-1")
	if err != nil {
		t.Fatal(err)
	}
	if ms := d["rev-1-p-pod-1"].TimeoutMillis; ms < int32((2 * time.Minute).Milliseconds()) {
		t.Errorf("transaction timeout %d ms, want the batch budget, over two minutes", ms)
	}
}

// TestSlowFunctionUnderBacklog: a backlog and a slow but healthy function
// (150 ms a record) under exactly-once, with a batch limit (the
// transaction timeout) of 4 s. A transaction holding the whole backlog
// would outlive it: the broker aborts it, the sidecar fails
// (INVALID_PRODUCER_EPOCH), restarts and takes the same records, for ever.
// Polls are sized to the limit instead: every id arrives once, no
// transaction aborted. (A call that a loaded machine makes late is
// retried, not dead-lettered: that is not what is tested here.)
func TestSlowFunctionUnderBacklog(t *testing.T) {
	integration(t)
	t.Parallel()
	ctx := timeout(t, 120*time.Second)
	k := startKafka(t)
	for _, topic := range []string{"in", "out", "dlq"} {
		k.topic(ctx, topic, 1)
	}
	const n = 60 // 9 s of work, over twice the limit
	k.produce(ctx, inputs("in", n, 1)...)
	fn := function(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		time.Sleep(150 * time.Millisecond)
		echo(w, r, body)
	})
	e := baseEnv(k, fn.URL)
	e["STREAMS_DELIVERY"] = "exactlyOnce"
	e["STREAMS_CALL_TIMEOUT"] = "1s"
	e["STREAMS_RETRIES"] = "1"
	e["STREAMS_BATCH_TIMEOUT"] = "4s"
	r := run(t, e, nil)
	k.waitCommitted(ctx, "rev-1-p", "in", 1)
	if d := cmp.Diff(ids(0, n), values(k.readAll(ctx, "out", true))); d != "" {
		t.Fatalf("out, read committed (-want +got):\n%s", d)
	}
	if got := metric(r.probe, "streams_sidecar_transactions_aborted_total"); got != "0" {
		t.Errorf("%s transactions aborted", got)
	}
}

// TestFunctionSlowsDownWithinABatch: a function fast for the first
// records (10 ms) and then slow (250 ms; 600 ms when three partitions run
// side by side) under a backlog, with a batch limit of 6 s. The fast pace
// sizes a poll to the whole backlog; handling it at the slow pace would
// take 10 s (8 s a partition), past the limit: the broker would abort
// the transaction (INVALID_PRODUCER_EPOCH), and a second member joining
// meanwhile would have the first, whose batch holds the rebalance,
// dropped from the group. So no record starts past the batch's time: the
// batch ends with the records handled and each partition's others are
// read again. Every id arrives once, in both delivery modes; no
// transaction outlives its timeout, no member is dropped.
func TestFunctionSlowsDownWithinABatch(t *testing.T) {
	integration(t)
	t.Parallel()
	for _, tc := range []struct {
		delivery   string
		partitions int32
		slow       time.Duration
	}{
		{"exactlyOnce", 1, 250 * time.Millisecond},
		{"atLeastOnce", 1, 250 * time.Millisecond},
		{"exactlyOnce", 3, 600 * time.Millisecond},
		{"atLeastOnce", 3, 600 * time.Millisecond},
	} {
		t.Run(fmt.Sprintf("%s/%d-partitions", tc.delivery, tc.partitions), func(t *testing.T) {
			t.Parallel()
			ctx := timeout(t, 120*time.Second)
			k := startKafka(t)
			k.topic(ctx, "in", tc.partitions)
			k.topic(ctx, "out", 1)
			k.topic(ctx, "dlq", 1)
			const n, fast = 60, 20
			k.produce(ctx, inputs("in", n, tc.partitions)...)
			slow := make(chan struct{})
			var once sync.Once
			fn := function(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
				i, _ := strconv.Atoi(strings.TrimPrefix(string(body), "id-"))
				if i < fast {
					time.Sleep(10 * time.Millisecond)
				} else {
					once.Do(func() { close(slow) })
					time.Sleep(tc.slow)
				}
				echo(w, r, body)
			})
			e := baseEnv(k, fn.URL)
			e["STREAMS_DELIVERY"] = tc.delivery
			e["STREAMS_CALL_TIMEOUT"] = "1s"
			e["STREAMS_RETRIES"] = "2"
			e["STREAMS_BATCH_TIMEOUT"] = "6s"
			first := run(t, e, nil)
			select {
			case <-slow:
			case <-ctx.Done():
				t.Fatal("no slow record handled")
			}
			e2 := maps.Clone(e)
			e2["HOSTNAME"], e2["STREAMS_PROBE_ADDR"] = "pod-2", ""
			second := run(t, e2, nil)

			k.waitCommitted(ctx, "rev-1-p", "in", tc.partitions)
			got := values(k.readAll(ctx, "out", true))
			slices.Sort(got) // the partitions' records interleave
			if d := cmp.Diff(ids(0, n), got); d != "" {
				t.Fatalf("out, read committed, sorted (-want +got):\n%s", d)
			}
			// A transaction past its timeout, a member dropped from the
			// group: either stops its sidecar with an error.
			consumed, aborted := 0, 0
			for name, r := range map[string]*running{"pod-1": first, "pod-2": second} {
				c, _ := strconv.Atoi(metric(r.probe, "streams_sidecar_records_consumed_total"))
				a, _ := strconv.Atoi(metric(r.probe, "streams_sidecar_transactions_aborted_total"))
				consumed, aborted = consumed+c, aborted+a
				if err := r.stop(); err != nil {
					t.Errorf("%s: %v", name, err)
				}
			}
			// A transaction that ends while the second member's join is
			// under way may be aborted (REBALANCE_IN_PROGRESS): its records
			// are read again, and counted again.
			if aborted == 0 && consumed != n || consumed < n {
				t.Errorf("%d records consumed, %d transactions aborted by a rebalance: want %d, one count for each whatever was read again", consumed, aborted, n)
			}
			t.Logf("%d records consumed, %d transactions aborted by the rebalance", consumed, aborted)
		})
	}
}

// TestExactlyOnceOnThreeBrokers: three brokers, the input's partitions'
// leaders and the group and transaction coordinators spread over them;
// the coordinators move (as when one crashes) every half second while a
// backlog goes through in transactions. Every id arrives once, read
// committed, and the group commits the input's end.
func TestExactlyOnceOnThreeBrokers(t *testing.T) {
	integration(t)
	t.Parallel()
	ctx := timeout(t, 120*time.Second)
	k := startKafka(t, "-brokers", "3")
	k.topic(ctx, "in", 3)
	k.topic(ctx, "out", 3)
	k.topic(ctx, "dlq", 1)
	const n = 600
	k.produce(ctx, inputs("in", n, 3)...)
	fn := function(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		time.Sleep(5 * time.Millisecond)
		echo(w, r, body)
	})
	e := baseEnv(k, fn.URL)
	e["STREAMS_DELIVERY"] = "exactlyOnce"
	e["STREAMS_BATCH_RECORDS"] = "50"
	r := run(t, e, nil)
	moved := 0
	for metric(r.probe, "streams_sidecar_records_consumed_total") != strconv.Itoa(n) && ctx.Err() == nil {
		k.b.MoveCoordinators()
		moved++
		time.Sleep(500 * time.Millisecond)
	}
	k.waitCommitted(ctx, "rev-1-p", "in", 3)
	got := values(k.readAll(ctx, "out", true))
	slices.Sort(got)
	if d := cmp.Diff(ids(0, n), got); d != "" {
		t.Fatalf("out, read committed, sorted (-want +got):\n%s", d)
	}
	t.Logf("%d ids once; coordinators moved %d times", n, moved)
}

// TestACLDeniesTheSink: a sidecar whose principal (SASL SCRAM, from the
// mounted Secret's files) may read its input but not write its output
// stops with an error that names the output topic, the principal and the
// ACL to grant, and never the password.
func TestACLDeniesTheSink(t *testing.T) {
	integration(t)
	t.Parallel()
	ctx := timeout(t, 60*time.Second)
	allow := func(res kmsg.ACLResourceType, name string, op kmsg.ACLOperation) kfake.ACL {
		return kfake.ACL{Allow: true, Resource: res, Name: name, Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: op}
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "in", "out", "dlq"),
		kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", "admin", "admin-pw"), kfake.EnableACLs(),
		kfake.User("SCRAM-SHA-256", "app", "app-pw",
			allow(kmsg.ACLResourceTypeTopic, "in", kmsg.ACLOperationRead), allow(kmsg.ACLResourceTypeTopic, "in", kmsg.ACLOperationDescribe),
			allow(kmsg.ACLResourceTypeGroup, "rev-1-p", kmsg.ACLOperationRead),
			allow(kmsg.ACLResourceTypeTopic, "dlq", kmsg.ACLOperationWrite), allow(kmsg.ACLResourceTypeTopic, "dlq", kmsg.ACLOperationDescribe),
			allow(kmsg.ACLResourceTypeTopic, "out", kmsg.ACLOperationDescribe)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	addr := c.ListenAddrs()[0]
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.SASL(scram.Auth{User: "admin", Pass: "admin-pw"}.AsSha256Mechanism()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	k := &kafka{t: t, at: addr, cl: cl, adm: kadm.NewClient(cl)}
	k.produce(ctx, inputs("in", 5, 1)...)
	dir := t.TempDir()
	for name, v := range map[string]string{"sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "app", "sasl.password": "app-pw"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	e := baseEnv(k, function(t, echo).URL)
	e["STREAMS_KAFKA_SECURITY"] = fmt.Sprintf(`{%q: %q}`, addr, dir)
	e["STREAMS_PROBE_ADDR"] = freeport.Addr(t)
	done := make(chan error, 1)
	go func() { done <- sidecar.Run(ctx, e.config(t), nil) }()
	select {
	case err := <-done:
		msg := fmt.Sprint(err)
		t.Logf("the sidecar stopped: %s", msg)
		for _, want := range []string{"produce to out", "an ACL denies User:app", "WRITE on its outputs"} {
			if !strings.Contains(msg, want) {
				t.Errorf("the sidecar stopped with %q, which does not say %q", msg, want)
			}
		}
		if strings.Contains(msg, "app-pw") {
			t.Error("the error shows the password")
		}
	case <-ctx.Done():
		t.Fatal("the sidecar went on without writing its output")
	}
	for p, end := range k.ends(ctx, "out") {
		if end != 0 {
			t.Errorf("out partition %d holds %d records", p, end)
		}
	}
}
