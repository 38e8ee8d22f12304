package sidecar_test

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cloudtransit/transit/controllers/streams/sidecar"
	"github.com/cloudtransit/transit/freeport"
)

// TestForward: events reach every output (fan-out across two clusters)
// with their attributes kept, made-up ones for plain records (id from
// topic/partition/offset), transitrevision stamped over the function's,
// the key kept; the function reads them with the CloudEvents SDK.
func TestForward(t *testing.T) {
	integration(t)
	t.Parallel()
	ctx := timeout(t, 60*time.Second)
	a, b := startKafka(t), startKafka(t)
	a.topic(ctx, "in", 3)
	a.topic(ctx, "out", 3)
	a.topic(ctx, "dlq", 1)
	b.topic(ctx, "copy", 2)
	fn := function(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		r.Body = io.NopCloser(bytes.NewReader(body))
		ev, err := cehttp.NewEventFromHTTPRequest(r)
		if err == nil {
			err = ev.Validate()
		}
		if err != nil {
			http.Error(w, "the SDK refuses the request: "+err.Error(), http.StatusBadRequest)
			return
		}
		ev.SetExtension("transitrevision", "forged") // the sidecar's stamp wins
		ev.SetExtension("seen", ev.ID())
		if err := cehttp.WriteResponseWriter(r.Context(), binding.ToMessage(ev), http.StatusOK, w); err != nil {
			t.Error(err)
		}
	})
	in := inputs("in", 60, 3)
	for i, r := range in {
		if i%2 == 0 {
			r.Headers = append(r.Headers,
				kgo.RecordHeader{Key: "ce_specversion", Value: []byte("1.0")}, kgo.RecordHeader{Key: "ce_id", Value: []byte("evt-" + id(i))},
				kgo.RecordHeader{Key: "ce_source", Value: []byte("/shop")}, kgo.RecordHeader{Key: "ce_type", Value: []byte("order.placed")},
				kgo.RecordHeader{Key: "ce_tenant", Value: []byte("acme")}, kgo.RecordHeader{Key: "content-type", Value: []byte("text/plain")})
		}
	}
	a.produce(ctx, in...)
	e := baseEnv(a, fn.URL)
	e["STREAMS_OUTPUTS"] = fmt.Sprintf(`[{"bootstrap":%q,"topic":"out"},{"bootstrap":%q,"topic":"copy"}]`, a.addr(), b.addr())
	s := run(t, e, nil)
	a.waitCommitted(ctx, "rev-1-p", "in", 3)

	// The inputs as read, for their partitions and offsets.
	byID := map[string]*kgo.Record{}
	for _, r := range a.readInput(ctx, "in") {
		byID[string(r.Value)] = r
	}
	for _, sink := range []struct {
		k     *kafka
		topic string
	}{{a, "out"}, {b, "copy"}} {
		out := sink.k.readAll(ctx, sink.topic, false)
		if d := cmp.Diff(ids(0, 60), values(out)); d != "" {
			t.Fatalf("%s (-want +got):\n%s", sink.topic, d)
		}
		for _, r := range out {
			i, _ := strconv.Atoi(strings.TrimPrefix(string(r.Value), "id-"))
			src := byID[string(r.Value)]
			want := map[string]string{"ce_specversion": "1.0", "ce_transitrevision": "rev-1"}
			if i%2 == 0 {
				want["ce_id"], want["ce_source"], want["ce_type"], want["ce_tenant"], want["content-type"] =
					"evt-"+id(i), "/shop", "order.placed", "acme", "text/plain"
			} else {
				want["ce_id"] = fmt.Sprintf("in/%d/%d", src.Partition, src.Offset)
				want["ce_source"], want["ce_type"] = "/topics/in", sidecar.RecordType
				want["ce_partitionkey"] = string(src.Key)
				want["ce_time"] = src.Timestamp.UTC().Format(time.RFC3339Nano)
				// No datacontenttype: Go's server sniffs the answer's.
				want["content-type"] = "text/plain; charset=utf-8"
			}
			want["ce_seen"] = want["ce_id"]
			got := map[string]string{}
			for _, h := range r.Headers {
				got[h.Key] = string(h.Value)
			}
			if got["ce_time"] != "" && i%2 == 0 {
				t.Errorf("%s: a time was added to an event without one", r.Value)
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("%s %s headers (-want +got):\n%s", sink.topic, r.Value, d)
			}
			if !slices.Equal(r.Key, src.Key) {
				t.Errorf("%s: key %q, want the input's %q", r.Value, r.Key, src.Key)
			}
		}
	}
	if dl := a.readAll(ctx, "dlq", false); len(dl) != 0 {
		t.Fatalf("%d dead letters", len(dl))
	}
	for name, want := range map[string]string{
		"streams_sidecar_records_consumed_total": "60", "streams_sidecar_records_forwarded_total": "60",
		"streams_sidecar_records_dead_lettered_total": "0", "streams_sidecar_function_call_duration_seconds_count": "60",
		"streams_sidecar_records_in_flight": "0",
	} {
		if got := metric(s.probe, name); got != want {
			t.Errorf("metric %s = %q, want %s", name, got, want)
		}
	}
}

// TestDropAndRetry: 204 and an empty 2xx drop; a 500 then success is
// retried and forwarded; nothing is dead-lettered or skipped.
func TestDropAndRetry(t *testing.T) {
	integration(t)
	t.Parallel()
	ctx := timeout(t, 60*time.Second)
	k := startKafka(t)
	for _, topic := range []string{"in", "out", "dlq"} {
		k.topic(ctx, topic, 2)
	}
	var mu sync.Mutex
	attempts := map[string]int{}
	fn := function(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		i, _ := strconv.Atoi(strings.TrimPrefix(string(body), "id-"))
		mu.Lock()
		attempts[string(body)]++
		n := attempts[string(body)]
		mu.Unlock()
		switch i % 4 {
		case 0:
			w.WriteHeader(http.StatusNoContent)
		case 1:
			w.WriteHeader(http.StatusOK)
		case 2:
			if n == 1 {
				http.Error(w, "not yet", http.StatusInternalServerError)
				return
			}
			echo(w, r, body)
		default:
			echo(w, r, body)
		}
	})
	k.produce(ctx, inputs("in", 40, 2)...)
	s := run(t, baseEnv(k, fn.URL), nil)
	k.waitCommitted(ctx, "rev-1-p", "in", 2)

	var want []string
	for i := range 40 {
		if i%4 >= 2 {
			want = append(want, id(i))
		}
	}
	if d := cmp.Diff(want, values(k.readAll(ctx, "out", false))); d != "" {
		t.Fatalf("out (-want +got):\n%s", d)
	}
	if dl := k.readAll(ctx, "dlq", false); len(dl) != 0 {
		t.Fatalf("%d dead letters, e.g. %s: %s", len(dl), dl[0].Value, header(dl[0], "transit_error"))
	}
	mu.Lock()
	for i := 2; i < 40; i += 4 {
		if attempts[id(i)] != 2 {
			t.Errorf("%s: %d attempts, want 2", id(i), attempts[id(i)])
		}
	}
	mu.Unlock()
	if got := metric(s.probe, "streams_sidecar_records_dropped_total"); got != "20" {
		t.Errorf("dropped %s, want 20", got)
	}
}

// TestDeadLetter: a function that fails a record every time — 500, an
// answer without an event, no answer within the call timeout — sends
// it, after the retries, to the dead-letter topic with the reason and its
// origin; the others go on; no offset is skipped.
func TestDeadLetter(t *testing.T) {
	integration(t)
	t.Parallel()
	for _, tc := range []struct {
		name        string
		fail        func(w http.ResponseWriter, r *http.Request)
		callTimeout string
		reason      string
	}{
		// A call timeout far above their answers' time: a loaded machine
		// must not turn their failure into a timeout.
		{"500", func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "boom: "+strings.Repeat("x", 300), http.StatusInternalServerError)
		}, "20s", "function answered 500: boom: " + strings.Repeat("x", 194) + "…"},
		{"garbage", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			_, _ = w.Write([]byte("<html>not an event</html>"))
		}, "20s", "function answered 200 without a CloudEvent (no ce-specversion header): <html>not an event</html>"},
		// Short, but long enough that the others' answers come in time.
		{"hang", func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() },
			"500ms", "function gave no answer within 500ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := timeout(t, 90*time.Second)
			k := startKafka(t)
			for _, topic := range []string{"in", "out", "dlq"} {
				k.topic(ctx, topic, 2)
			}
			var mu sync.Mutex
			attempts := map[string]int{}
			fn := function(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
				i, _ := strconv.Atoi(strings.TrimPrefix(string(body), "id-"))
				if i%3 != 0 {
					echo(w, r, body)
					return
				}
				mu.Lock()
				attempts[string(body)]++
				mu.Unlock()
				tc.fail(w, r)
			})
			k.produce(ctx, inputs("in", 30, 2)...)
			e := baseEnv(k, fn.URL)
			e["STREAMS_RETRIES"] = "2"
			e["STREAMS_CALL_TIMEOUT"] = tc.callTimeout
			s := run(t, e, nil)
			k.waitCommitted(ctx, "rev-1-p", "in", 2)

			byID := map[string]*kgo.Record{}
			for _, r := range k.readInput(ctx, "in") {
				byID[string(r.Value)] = r
			}
			var failing, rest []string
			for i := range 30 {
				if i%3 == 0 {
					failing = append(failing, id(i))
				} else {
					rest = append(rest, id(i))
				}
			}
			dl := k.readAll(ctx, "dlq", false)
			if d := cmp.Diff(failing, values(dl)); d != "" {
				t.Fatalf("dead letters (-want +got):\n%s", d)
			}
			if d := cmp.Diff(rest, values(k.readAll(ctx, "out", false))); d != "" {
				t.Fatalf("out (-want +got):\n%s", d)
			}
			for _, r := range dl {
				src := byID[string(r.Value)]
				want := map[string]string{"origin": "test", "transit_error": tc.reason, "transit_topic": "in",
					"transit_partition": strconv.Itoa(int(src.Partition)), "transit_offset": strconv.FormatInt(src.Offset, 10),
					"transit_revision": "rev-1"}
				if d := cmp.Diff(want, headerMapOf(r)); d != "" {
					t.Errorf("%s headers (-want +got):\n%s", r.Value, d)
				}
				if !slices.Equal(r.Key, src.Key) {
					t.Errorf("%s: key %q, want %q", r.Value, r.Key, src.Key)
				}
			}
			// A timed-out attempt may end before the function sees it, and
			// on a loaded machine another record's answer may come late:
			// the hanging function's counts are bounds.
			hang := tc.name == "hang"
			want := 3 * len(failing)
			if got, _ := strconv.Atoi(metric(s.probe, "streams_sidecar_function_failed_attempts_total")); got != want && (!hang || got < want) {
				t.Errorf("%d failed attempts, want %d (1 + STREAMS_RETRIES for each failing record)", got, want)
			}
			mu.Lock()
			defer mu.Unlock()
			for _, x := range failing {
				if n := attempts[x]; n != 3 && (!hang || n < 1 || n > 3) {
					t.Errorf("%s: the function saw %d attempts, want 3 (1 + STREAMS_RETRIES)", x, n)
				}
			}
		})
	}
}

func headerMapOf(r *kgo.Record) map[string]string {
	m := map[string]string{}
	for _, h := range r.Headers {
		m[h.Key] = string(h.Value)
	}
	return m
}

// TestFunctionDownThenUp: a function that refuses connections is waited
// for (not Ready, nothing dead-lettered or committed), and once it
// listens every record goes through.
func TestFunctionDownThenUp(t *testing.T) {
	integration(t)
	t.Parallel()
	ctx := timeout(t, 60*time.Second)
	k := startKafka(t)
	for _, topic := range []string{"in", "out", "dlq"} {
		k.topic(ctx, topic, 2)
	}
	addr := freeport.Addr(t) // nothing listens yet
	k.produce(ctx, inputs("in", 20, 2)...)
	e := baseEnv(k, "http://"+addr)
	e["STREAMS_RETRIES"] = "1"
	s := run(t, e, nil)
	// A sidecar that has not yet timed a record takes one at a time.
	waitFor(ctx, t, "a record to be read", func() bool {
		n, _ := strconv.Atoi(metric(s.probe, "streams_sidecar_records_consumed_total"))
		return n >= 1
	})
	// A window for what must not happen: with the function down, no
	// record may be given up on (dead-lettered, committed).
	time.Sleep(500 * time.Millisecond)
	if code, body := get(s.probe, "/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz %d %s while the function is down", code, body)
	}
	if c := k.committed(ctx, "rev-1-p", "in", 2); c[0]+c[1] != 0 {
		t.Fatalf("committed %v while the function is down", c)
	}
	if got := metric(s.probe, "streams_sidecar_records_dead_lettered_total"); got != "0" {
		t.Fatalf("%s dead letters while the function is down", got)
	}
	if n, _ := strconv.Atoi(metric(s.probe, "streams_sidecar_function_refused_total")); n < 2 {
		t.Fatalf("%d calls refused", n)
	}

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fn := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		echo(w, r, body)
	}))
	fn.Listener = ln
	fn.Start()
	t.Cleanup(fn.Close)
	k.waitCommitted(ctx, "rev-1-p", "in", 2)
	if d := cmp.Diff(ids(0, 20), values(k.readAll(ctx, "out", false))); d != "" {
		t.Fatalf("out (-want +got):\n%s", d)
	}
	if dl := k.readAll(ctx, "dlq", false); len(dl) != 0 {
		t.Fatalf("%d dead letters", len(dl))
	}
	waitFor(ctx, t, "/readyz 200", func() bool { code, _ := get(s.probe, "/readyz"); return code == http.StatusOK })
}

// TestPartitionOrder: each key's records (one partition each) come out in
// order although the function takes random time and partitions run at
// once.
func TestPartitionOrder(t *testing.T) {
	integration(t)
	t.Parallel()
	ctx := timeout(t, 60*time.Second)
	k := startKafka(t)
	k.topic(ctx, "in", 4)
	k.topic(ctx, "out", 4)
	k.topic(ctx, "dlq", 1)
	var cur, peak atomic.Int32
	fn := function(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		n := cur.Add(1)
		defer cur.Add(-1)
		for p := peak.Load(); n > p; p = peak.Load() {
			if peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(time.Duration(rand.IntN(1500)) * time.Microsecond)
		echo(w, r, body)
	})
	const keys, per = 8, 40
	var in []*kgo.Record
	for s := range per {
		for key := range keys {
			in = append(in, &kgo.Record{Topic: "in", Partition: int32(key % 4), Key: fmt.Appendf(nil, "key-%d", key),
				Value: fmt.Appendf(nil, "key-%d:%03d", key, s)})
		}
	}
	k.produce(ctx, in...)
	e := baseEnv(k, fn.URL)
	e["STREAMS_BATCH_RECORDS"] = "50"
	run(t, e, nil)
	k.waitCommitted(ctx, "rev-1-p", "in", 4)

	seqs := map[string][]string{}
	for _, r := range k.readAll(ctx, "out", false) {
		key, seq, _ := strings.Cut(string(r.Value), ":")
		if key != string(r.Key) {
			t.Fatalf("%s under key %s", r.Value, r.Key)
		}
		seqs[key] = append(seqs[key], seq)
	}
	for key := range keys {
		name := fmt.Sprintf("key-%d", key)
		var want []string
		for s := range per {
			want = append(want, fmt.Sprintf("%03d", s))
		}
		if d := cmp.Diff(want, seqs[name]); d != "" {
			t.Errorf("%s out of order or incomplete (-want +got):\n%s", name, d)
		}
	}
	t.Logf("at most %d calls at once", peak.Load())
}

// TestGate: held by its gate, the sidecar is a member of its group (the
// group formed: Kafka's initial rebalance delay paid) and Ready, but reads
// nothing; once the gate opens it begins each partition where the gate
// says (partition 0 at offset 2; partition 1, not named, at the start).
func TestGate(t *testing.T) {
	integration(t)
	t.Parallel()
	ctx := timeout(t, 60*time.Second)
	k := startKafka(t)
	k.topic(ctx, "in", 2)
	for _, topic := range []string{"out", "dlq"} {
		k.topic(ctx, topic, 1)
	}
	fn := function(t, echo)
	file := filepath.Join(t.TempDir(), "active")
	e := baseEnv(k, fn.URL)
	e["STREAMS_GATE_FILE"] = file
	s := run(t, e, sidecar.FileGate(file))
	k.produce(ctx, inputs("in", 10, 2)...) // partition 0: ids 0, 2, …; 1: ids 1, 3, …
	waitFor(ctx, t, "/readyz 200 while held", func() bool { code, _ := get(s.probe, "/readyz"); return code == http.StatusOK })
	if state, members := k.members(ctx, "rev-1-p"); state != "Stable" || members != 1 {
		t.Fatalf("group %s with %d members while held and Ready: want Stable with 1", state, members)
	}
	time.Sleep(500 * time.Millisecond) // a held sidecar that read would have by now
	if c := k.committed(ctx, "rev-1-p", "in", 2); c[0] != 0 || c[1] != 0 {
		t.Fatalf("committed %v while held", c)
	}
	if got := k.readAll(ctx, "out", false); len(got) != 0 {
		t.Fatalf("forwarded %v while held", values(got))
	}
	tmp := file + ".tmp" // the file appears whole
	if err := os.WriteFile(tmp, []byte(`{"0": 2}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, file); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "both partitions committed to their ends", func() bool {
		c := k.committed(ctx, "rev-1-p", "in", 2)
		return c[0] == 5 && c[1] == 5
	})
	got := values(k.readAll(ctx, "out", false))
	slices.Sort(got)
	want := []string{id(1), id(3), id(4), id(5), id(6), id(7), id(8), id(9)}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("out (-want +got):\n%s", d)
	}
}

// A gate that fails (not a stop) ends the run with its error.
func TestGateFails(t *testing.T) {
	integration(t)
	t.Parallel()
	ctx := timeout(t, 60*time.Second)
	k := startKafka(t)
	for _, topic := range []string{"in", "out", "dlq"} {
		k.topic(ctx, topic, 1)
	}
	fn := function(t, echo)
	file := filepath.Join(t.TempDir(), "active")
	if err := os.WriteFile(file, []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := run(t, baseEnv(k, fn.URL), sidecar.FileGate(file))
	k.produce(ctx, inputs("in", 3, 1)...)
	select {
	case err := <-s.done:
		close(s.done) // for the cleanup's stop
		if err == nil || !strings.Contains(err.Error(), "gate") || !strings.Contains(err.Error(), file) {
			t.Fatalf("run ended with %v, want the gate file's error", err)
		}
	case <-ctx.Done():
		t.Fatal("a failed gate did not end the run")
	}
	if c := k.committed(ctx, "rev-1-p", "in", 1); c[0] != 0 {
		t.Fatalf("committed %v behind a failed gate", c)
	}
}

// TestReadyNeedsTopics: the sidecar is not Ready while a topic it uses
// does not exist (it never creates one), nor while the function does not
// listen.
func TestReadyNeedsTopics(t *testing.T) {
	integration(t)
	t.Parallel()
	ctx := timeout(t, 60*time.Second)
	k := startKafka(t)
	k.topic(ctx, "in", 1)
	k.topic(ctx, "out", 1)
	fn := function(t, echo)
	e := baseEnv(k, fn.URL)
	s := run(t, e, sidecar.FileGate(filepath.Join(t.TempDir(), "never")))
	waitFor(ctx, t, "/readyz naming the missing topic", func() bool {
		code, body := get(s.probe, "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "topic dlq does not exist")
	})
	k.topic(ctx, "dlq", 1)
	waitFor(ctx, t, "/readyz 200", func() bool { code, _ := get(s.probe, "/readyz"); return code == http.StatusOK })
	if md, err := k.adm.ListTopics(ctx); err != nil || len(md) != 3 {
		t.Fatalf("topics %v, %v: the sidecar made one", md.Names(), err)
	}
	fn.Close()
	waitFor(ctx, t, "/readyz naming the function", func() bool {
		code, body := get(s.probe, "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "the function at")
	})
}
