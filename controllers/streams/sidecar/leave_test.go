package sidecar_test

import (
	"bytes"
	"net/http"
	"runtime/pprof"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestStopsWhileAnotherHoldsTheRebalance: three members of a group are
// stopped at once, as a Deployment's deletion stops its pods; each
// finishes its batch in hand. One that ends its batch while another
// member's longer batch still holds the group's rebalance must still
// leave and return at once: the controller's switch to a new revision
// waits for every old source reader's pod to be gone.
func TestStopsWhileAnotherHoldsTheRebalance(t *testing.T) {
	integration(t)
	ctx := timeout(t, 3*time.Minute)
	k := startKafka(t)
	k.topic(ctx, "in", 3)
	k.topic(ctx, "out", 3)
	k.topic(ctx, "dlq", 1)
	fn := function(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		time.Sleep(20 * time.Millisecond)
		echo(w, r, body)
	})
	k.produce(ctx, inputs("in", 6000, 3)...)
	// Batches of 1 s, 4 s and 15 s at 20 ms a record.
	batches := []string{"50", "200", "750"}
	var rs []*running
	for _, batch := range batches {
		e := baseEnv(k, fn.URL)
		e["STREAMS_BATCH_RECORDS"] = batch
		rs = append(rs, run(t, e, nil))
	}
	waitFor(ctx, t, "every member handling records", func() bool {
		c := k.committed(ctx, "rev-1-p", "in", 3)
		return len(c) == 3 && c[0] > 0 && c[1] > 0 && c[2] > 0
	})
	time.Sleep(3 * time.Second)
	began := time.Now()
	for _, r := range rs {
		r.cancel()
	}
	// The longest batch is 15 s; the rebalance timeout (BatchLimit) is
	// minutes.
	for i, r := range rs {
		select {
		case err := <-r.done:
			close(r.done)
			if err != nil {
				t.Errorf("member %d: %v", i, err)
			}
			t.Logf("member %d (batches of %s records) returned after %s", i, batches[i], time.Since(began).Round(10*time.Millisecond))
		case <-time.After(time.Until(began.Add(40 * time.Second))):
			var stacks bytes.Buffer
			_ = pprof.Lookup("goroutine").WriteTo(&stacks, 1)
			t.Fatalf("member %d (batches of %s records) did not return within 40 s of its stop:\n%s", i, batches[i], stacks.String())
		}
	}
	waitFor(ctx, t, "the group empty", func() bool {
		_, members := k.members(ctx, "rev-1-p")
		return members == 0
	})
	// Each stopped after its batch's commit: the output is exactly the
	// records before the committed offsets, once each.
	committed := k.committed(ctx, "rev-1-p", "in", 3)
	var want []string
	for i := range 6000 {
		if int64(i/3) < committed[int32(i%3)] {
			want = append(want, id(i))
		}
	}
	got := values(k.readAll(ctx, "out", false))
	slices.Sort(got)
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("out after the stop, %v committed (-want +got):\n%s", committed, d)
	}
}
