package sidecar_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cloudtransit/transit/freeport"
)

// TestSIGTERM: on SIGTERM the sidecar finishes its batch, commits, leaves
// the group and exits 0: the output holds exactly the records before the
// committed offset, once each.
func TestSIGTERM(t *testing.T) {
	integration(t)
	t.Parallel()
	ctx := timeout(t, 90*time.Second)
	k := startKafka(t)
	for _, topic := range []string{"in", "out", "dlq"} {
		k.topic(ctx, topic, 1)
	}
	fn := function(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		time.Sleep(5 * time.Millisecond)
		echo(w, r, body)
	})
	k.produce(ctx, inputs("in", 300, 1)...)
	e := baseEnv(k, fn.URL)
	e["STREAMS_BATCH_RECORDS"] = "20"
	e["STREAMS_PROBE_ADDR"] = freeport.Addr(t)
	p := start(t, e)
	waitFor(ctx, t, "40 records committed", func() bool { return k.committed(ctx, "rev-1-p", "in", 1)[0] >= 40 })
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if ws := p.wait(ctx, t); ws.ExitStatus() != 0 {
		t.Fatalf("exit %v after SIGTERM:\n%s", ws, p.out)
	}
	if state, members := k.members(ctx, "rev-1-p"); members != 0 {
		t.Fatalf("group %s keeps %d members after SIGTERM", state, members)
	}
	c := k.committed(ctx, "rev-1-p", "in", 1)[0]
	if d := cmp.Diff(ids(0, int(c)), values(k.readAll(ctx, "out", false))); d != "" {
		t.Fatalf("out after SIGTERM with %d committed (-want +got):\n%s", c, d)
	}
	t.Logf("stopped at offset %d of 300", c)
}

// TestCrashAfterProduce: a sidecar killed after its third batch's output
// is acknowledged and before its commit, then restarted: at-least-once
// delivers every id, repeating the killed batch only; exactly-once
// delivers every id once to a read-committed reader.
func TestCrashAfterProduce(t *testing.T) {
	integration(t)
	t.Parallel()
	for _, delivery := range []string{"atLeastOnce", "exactlyOnce"} {
		t.Run(delivery, func(t *testing.T) {
			t.Parallel()
			ctx := timeout(t, 120*time.Second)
			k := startKafka(t)
			for _, topic := range []string{"in", "out", "dlq"} {
				k.topic(ctx, topic, 2)
			}
			fn := function(t, echo)
			k.produce(ctx, inputs("in", 100, 2)...)
			e := baseEnv(k, fn.URL)
			e["STREAMS_DELIVERY"] = delivery
			e["STREAMS_BATCH_RECORDS"] = "10"
			e["STREAMS_PROBE_ADDR"] = freeport.Addr(t)
			e["STREAMS_FAILPOINT"] = "after-produce:3"
			p := start(t, e)
			if ws := p.wait(ctx, t); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Fatalf("the sidecar ended with %v, not killed at its fault point:\n%s", ws, p.out)
			}
			delete(e, "STREAMS_FAILPOINT")
			p = start(t, e)
			k.waitCommitted(ctx, "rev-1-p", "in", 2)
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if ws := p.wait(ctx, t); ws.ExitStatus() != 0 {
				t.Fatalf("exit %v after SIGTERM:\n%s", ws, p.out)
			}

			committed := values(k.readAll(ctx, "out", true))
			all := values(k.readAll(ctx, "out", false))
			dups := duplicates(all)
			if len(dups) == 0 || len(dups) > 10 {
				t.Fatalf("%d ids written twice (%v): want the killed batch's, 1 to 10", len(dups), dups)
			}
			if delivery == "exactlyOnce" {
				if d := cmp.Diff(ids(0, 100), committed); d != "" {
					t.Fatalf("read committed (-want +got):\n%s", d)
				}
				return
			}
			if d := cmp.Diff(ids(0, 100), slices.Compact(slices.Clone(all))); d != "" {
				t.Fatalf("ids (-want +got):\n%s", d)
			}
		})
	}
}

func duplicates(sorted []string) []string {
	var d []string
	for i := 1; i < len(sorted); i++ {
		if sorted[i] == sorted[i-1] {
			d = append(d, sorted[i])
		}
	}
	return d
}

// TestBrokerRestart: the broker killed and restarted mid-stream; the
// sidecar rides it out or exits with an error and is restarted (as its
// pod's container would be); every id arrives.
func TestBrokerRestart(t *testing.T) {
	integration(t)
	t.Parallel()
	ctx := timeout(t, 180*time.Second)
	k := startKafka(t)
	for _, topic := range []string{"in", "out", "dlq"} {
		k.topic(ctx, topic, 2)
	}
	fn := function(t, echo)
	e := baseEnv(k, fn.URL)
	e["STREAMS_PROBE_ADDR"] = freeport.Addr(t)

	// The producer: 400 ids, one every 2 ms, riding out the restart.
	pc, err := kgo.NewClient(kgo.SeedBrokers(k.addr()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pc.Close)
	const n = 400
	var sent sync.WaitGroup
	sent.Add(1)
	var produceErr error
	go func() {
		defer sent.Done()
		for i, r := range inputs("in", n, 2) {
			if err := pc.ProduceSync(ctx, r).FirstErr(); err != nil {
				produceErr = fmt.Errorf("produce %s: %w", id(i), err)
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()

	// The supervisor: restarts the sidecar whenever it exits.
	var mu sync.Mutex
	var exits []string
	cur := start(t, e)
	superviseCtx, stopSupervising := context.WithCancel(ctx)
	supervised := make(chan struct{})
	go func() {
		defer close(supervised)
		for {
			select {
			case <-superviseCtx.Done():
				return
			case <-cur.done:
				mu.Lock()
				exits = append(exits, fmt.Sprint(cur.err))
				mu.Unlock()
				cur = start(t, e)
			}
		}
	}()

	waitFor(ctx, t, "100 records committed", func() bool {
		c := k.committed(ctx, "rev-1-p", "in", 2)
		return c[0]+c[1] >= 100
	})
	k.b.Restart()
	sent.Wait()
	if produceErr != nil {
		t.Fatal(produceErr)
	}
	k.waitCommitted(ctx, "rev-1-p", "in", 2)
	stopSupervising()
	<-supervised
	if err := cur.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	cur.wait(ctx, t)

	got := slices.Compact(values(k.readAll(ctx, "out", false)))
	if d := cmp.Diff(ids(0, n), got); d != "" {
		t.Fatalf("ids after the broker's restart (-want +got):\n%s", d)
	}
	if dl := k.readAll(ctx, "dlq", false); len(dl) != 0 {
		t.Fatalf("%d dead letters", len(dl))
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("the sidecar exited %d times: %v", len(exits), exits)
}
