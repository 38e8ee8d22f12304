package brokertest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Feed produces increasing ids to a topic (the id as key and value, the
// send time in a header "sent") until halted. Each id is retried until
// acknowledged: the feed never loses one itself.
type Feed struct {
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
	sent     atomic.Int64
}

// StartFeed feeds topic on the broker at addr perSecond ids a second;
// opts add to the client's (a dialer, for one).
func StartFeed(t testing.TB, addr, topic string, perSecond int, opts ...kgo.Opt) *Feed {
	t.Helper()
	return StartKeyedFeed(t, addr, topic, perSecond, 0, opts...)
}

// StartKeyedFeed is StartFeed with keys keys: id's key is id mod keys
// (0: the id itself), so one key's records come in increasing ids.
func StartKeyedFeed(t testing.TB, addr, topic string, perSecond, keys int, opts ...kgo.Opt) *Feed {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(0)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	f := &Feed{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(f.done)
		defer cl.Close()
		f.run(cl, perSecond, keys)
	}()
	t.Cleanup(func() { f.Halt() })
	return f
}

// run produces, every tick, the ids due by then in one request, so the
// rate holds however long a round trip takes (one id a round trip made
// 341 of 400 a second through a node port). A batch is retried until
// acknowledged, its failed records alone; the schedule restarts after a
// failure rather than bursting to catch up.
func (f *Feed) run(cl *kgo.Client, perSecond, keys int) {
	every := min(time.Second/time.Duration(perSecond), 10*time.Millisecond)
	tick := time.NewTicker(every)
	defer tick.Stop()
	began, first := time.Now(), int64(0)
	for id := int64(0); ; {
		select {
		case <-f.stop:
			return
		case <-tick.C:
		}
		due := first + int64(time.Since(began).Seconds()*float64(perSecond)) - id
		if due <= 0 {
			continue
		}
		due = min(due, int64(perSecond)) // at most a second's worth a request
		now := []byte(time.Now().Format(time.RFC3339Nano))
		batch := make([]*kgo.Record, 0, due)
		for n := id; n < id+due; n++ {
			v := []byte(strconv.FormatInt(n, 10))
			k := v
			if keys > 0 {
				k = []byte(strconv.FormatInt(n%int64(keys), 10))
			}
			batch = append(batch, &kgo.Record{Key: k, Value: v, Headers: []kgo.RecordHeader{{Key: "sent", Value: now}}})
		}
		for pending := batch; len(pending) > 0; {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			results := cl.ProduceSync(ctx, pending...)
			cancel()
			// Only what failed again: what was acknowledged is not repeated.
			pending = pending[:0:0]
			for _, r := range results {
				if r.Err != nil {
					pending = append(pending, r.Record)
				}
			}
			if len(pending) == 0 {
				break
			}
			select {
			case <-f.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			began, first = time.Now(), id+due
		}
		id += due
		f.sent.Add(due)
	}
}

// Sent is how many ids the broker acknowledged so far.
func (f *Feed) Sent() int64 { return f.sent.Load() }

// Halt stops the feed and returns how many ids it sent (0…n-1); it may
// be called more than once, from any goroutine.
func (f *Feed) Halt() int64 {
	f.stopOnce.Do(func() { close(f.stop) })
	<-f.done
	return f.sent.Load()
}

// Sink reads a topic (read committed) from its start and keeps what
// arrived, with the revision that wrote it (the transitrevision
// attribute).
type Sink struct {
	mu        sync.Mutex
	ids       map[int64]int // id → times seen
	revisions map[string]int
	events    []event
	// unreadable are records whose value is no id.
	unreadable []string
	done       chan struct{}
}

// event is one record the sink read.
type event struct {
	ID       int64
	Key      string
	Revision string
	At       time.Time
}

// StartSink reads topic on the broker at addr until the test ends; opts
// add to the client's.
func StartSink(t testing.TB, addr, topic string, opts ...kgo.Opt) *Sink {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Sink{ids: map[int64]int{}, revisions: map[string]int{}, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer cl.Close()
		for ctx.Err() == nil {
			cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
				id, err := strconv.ParseInt(string(r.Value), 10, 64)
				if err != nil {
					s.mu.Lock()
					s.unreadable = append(s.unreadable, fmt.Sprintf("partition %d offset %d: %q", r.Partition, r.Offset, truncate(r.Value, 40)))
					s.mu.Unlock()
					return
				}
				rev := ""
				for _, h := range r.Headers {
					if h.Key == "ce_transitrevision" {
						rev = string(h.Value)
					}
				}
				s.mu.Lock()
				s.ids[id]++
				s.revisions[rev]++
				s.events = append(s.events, event{ID: id, Key: string(r.Key), Revision: rev, At: time.Now()})
				s.mu.Unlock()
			})
		}
	}()
	t.Cleanup(func() { cancel(); <-s.done })
	return s
}

// Switch is when the sink last read an event of revision old and first
// one of next (zero: none yet).
func (s *Sink) Switch(old, next string) (lastOld, first time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ev := range s.events {
		switch ev.Revision {
		case next:
			if first.IsZero() {
				first = ev.At
			}
		case old:
			lastOld = ev.At
		}
	}
	return lastOld, first
}

// Revisions are the revisions that wrote what was read, sorted.
func (s *Sink) Revisions() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.revisions))
}

// Check waits until ids 0…n-1 all arrived or within passed without a
// missing one arriving, then reports the ids missing and how many records
// repeated one. A pipeline that works off a backlog slowly (a loaded
// machine) is waited for; one that stopped delivering is not.
func (s *Sink) Check(n int64, within time.Duration) (missing []int64, dups int) {
	deadline := time.Now().Add(within)
	left := n + 1
	for {
		s.mu.Lock()
		missing, dups = nil, 0
		for id := range n {
			switch c := s.ids[id]; {
			case c == 0:
				missing = append(missing, id)
			case c > 1:
				dups += c - 1
			}
		}
		s.mu.Unlock()
		if int64(len(missing)) < left {
			left, deadline = int64(len(missing)), time.Now().Add(within)
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			return missing, dups
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// OutOfOrder names the records that reached the sink after a record of
// the same key with a higher id (per-key order broken).
func (s *Sink) OutOfOrder() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	last := map[string]int64{}
	var out []string
	for _, ev := range s.events {
		if was, ok := last[ev.Key]; ok && ev.ID < was {
			out = append(out, fmt.Sprintf("key %s: id %d after %d", ev.Key, ev.ID, was))
		}
		last[ev.Key] = max(last[ev.Key], ev.ID)
	}
	return out
}

// Unreadable names the records read whose value is no id.
func (s *Sink) Unreadable() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.unreadable)
}

// Expect waits as Check does, then fails t for the ids that never arrived
// (naming the first ten), for records that hold no id (a pipeline that
// mangles values is no pass) and, with once (exactly-once delivery), for the
// duplicates; it returns how many records repeated an id.
func (s *Sink) Expect(t testing.TB, n int64, within time.Duration, once bool) int {
	t.Helper()
	missing, dups := s.Check(n, within)
	if unreadable := s.Unreadable(); len(unreadable) > 0 {
		t.Errorf("%d records at the sink hold no id (first: %v)", len(unreadable), unreadable[:min(5, len(unreadable))])
	}
	if len(missing) > 0 {
		t.Errorf("%d of %d ids never reached the sink (none of them came in %s; first: %v)", len(missing), n, within, missing[:min(10, len(missing))])
	}
	if once && dups > 0 {
		t.Errorf("%d duplicates at the sink with exactly-once", dups)
	}
	return dups
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}
