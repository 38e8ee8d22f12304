package brokertest

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The feed keeps its rate when a produce round trip is slower than the
// gap between two ids (a node port, a loaded broker): one id a round trip
// made 341 of 400 a second on a cluster. Every id it counts is on the
// topic, once.
func TestFeedKeepsItsRateOverSlowRoundTrips(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "ids"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const roundTrip = 20 * time.Millisecond // 50 round trips a second at most
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		c.SleepControl(func() { time.Sleep(roundTrip) })
		return nil, nil, false
	})
	const perSecond = 500
	f := StartFeed(t, c.ListenAddrs()[0], "ids", perSecond)
	time.Sleep(2 * time.Second)
	sent := f.Halt()
	// One id a round trip would send at most 100 in these 2 s.
	if sent < perSecond {
		t.Errorf("the feed sent %d ids in 2 s at %d a second over %s round trips", sent, perSecond, roundTrip)
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("ids"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	seen := map[int64]int{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for int64(len(seen)) < sent && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			id, err := strconv.ParseInt(string(r.Value), 10, 64)
			if err != nil {
				t.Errorf("a record that is no id: %q", r.Value)
			}
			seen[id]++
		})
	}
	for id := range sent {
		if seen[id] != 1 {
			t.Errorf("id %d is on the topic %d times", id, seen[id])
		}
	}
}

// A sink that keeps receiving missing ids is waited for past within (a
// slow pipeline on a loaded machine is no loss); one that stops is given
// up on within after the last.
func TestCheckWaitsWhileIDsArrive(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "ids"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("ids"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	sink := StartSink(t, c.ListenAddrs()[0], "ids")
	// within is six gaps: Check looks every 200 ms, and a loaded machine
	// delays a produce or a fetch; the ten ids still span more than it.
	const n, gap, within = 12, 250 * time.Millisecond, 1500 * time.Millisecond
	done := make(chan struct{})
	defer func() { <-done }() // before the client closes
	go func() {
		defer close(done)
		for id := range n - 2 { // the last two never come
			v := []byte(strconv.Itoa(id))
			if err := cl.ProduceSync(context.Background(), &kgo.Record{Key: v, Value: v}).FirstErr(); err != nil {
				t.Error(err)
			}
			time.Sleep(gap)
		}
	}()
	began := time.Now()
	missing, _ := sink.Check(n, within)
	took := time.Since(began)
	if len(missing) != 2 || missing[0] != n-2 {
		t.Errorf("missing %v, want the last two ids", missing)
	}
	// The ten came over 2.25 s, more than within: it waited for them.
	if took < (n-3)*gap {
		t.Errorf("gave up after %s while ids were still arriving every %s", took, gap)
	}
}
