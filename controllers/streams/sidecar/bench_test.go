package sidecar_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cloudtransit/transit/cmdtest"
	"github.com/cloudtransit/transit/controllers/streams/brokertest"
	"github.com/cloudtransit/transit/controllers/streams/sidecar"
	"github.com/cloudtransit/transit/freeport"
)

// BenchmarkSidecarLatency measures end-to-end latency, source topic →
// processor → sink topic (1 partition, 1 replica, the broker process),
// for the sidecar (in-process Run, at-least-once and exactly-once) beside
// an HTTP echo function, against a baseline: the same echo as a Go call
// in a franz-go consume → call → produce → commit-after-ack loop. A
// producer sends TRANSIT_STREAMS_EVENTS events (10000) at
// TRANSIT_STREAMS_RATE per second (800) stamping the send time; a
// consumer of the sink takes the difference. Each scenario runs once, so
// use -benchtime=1x:
//
//	go test -run '^$' -bench SidecarLatency -benchtime=1x ./controllers/streams/sidecar/
func BenchmarkSidecarLatency(b *testing.B) {
	rate := envInt(b, "TRANSIT_STREAMS_RATE", 800)
	events := envInt(b, "TRANSIT_STREAMS_EVENTS", 10000)
	broker := brokertest.Start(b)
	admin, err := kgo.NewClient(kgo.SeedBrokers(broker.Addr()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(admin.Close)
	fn := echoProcess(b)

	type result struct {
		name string
		lat  []time.Duration
	}
	var results []result
	for _, sc := range []struct {
		name    string
		process func(ctx context.Context, b *testing.B, src, sink string) (stop func())
	}{
		{"baseline", func(ctx context.Context, b *testing.B, src, sink string) func() {
			return baseline(ctx, b, broker.Addr(), src, sink)
		}},
		{"sidecar-atLeastOnce", func(ctx context.Context, b *testing.B, src, sink string) func() {
			return runSidecar(ctx, b, broker.Addr(), fn, src, sink, sidecar.AtLeastOnce)
		}},
		{"sidecar-exactlyOnce", func(ctx context.Context, b *testing.B, src, sink string) func() {
			return runSidecar(ctx, b, broker.Addr(), fn, src, sink, sidecar.ExactlyOnce)
		}},
	} {
		ctx, cancel := context.WithTimeout(b.Context(), time.Duration(events/rate+120)*time.Second)
		src, sink := sc.name+"-src", sc.name+"-sink"
		for _, t := range []string{src, sink, sc.name + "-dlq"} {
			resp, err := kadm.NewClient(admin).CreateTopic(ctx, 1, 1, nil, t)
			if err == nil {
				err = resp.Err
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		stop := sc.process(ctx, b, src, sink)
		lat := measure(ctx, b, broker.Addr(), src, sink, rate, events, strings.HasSuffix(sc.name, "exactlyOnce"))
		stop()
		cancel()
		results = append(results, result{sc.name, lat})
	}

	b.Logf("%d events at %d/s, latency source → sink:", events, rate)
	b.Logf("%-22s %10s %10s %10s %10s", "", "median", "p99", "p99.9", "max")
	var base [3]float64
	for i, r := range results {
		p := [3]float64{ms(percentile(r.lat, 0.5)), ms(percentile(r.lat, 0.99)), ms(percentile(r.lat, 0.999))}
		b.Logf("%-22s %8.3fms %8.3fms %8.3fms %8.3fms", r.name, p[0], p[1], p[2], ms(slices.Max(r.lat)))
		b.ReportMetric(p[0], "ms-p50-"+r.name)
		b.ReportMetric(p[1], "ms-p99-"+r.name)
		b.ReportMetric(p[2], "ms-p99.9-"+r.name)
		if i == 0 {
			base = p
		} else {
			b.Logf("%-22s %+8.3fms %+8.3fms %+8.3fms", "  over baseline", p[0]-base[0], p[1]-base[1], p[2]-base[2])
		}
	}
}

// echoProcess runs cmd/streams-echo, the example function, as its own
// process, as it runs in a pod beside the sidecar, and returns its URL.
func echoProcess(b *testing.B) string {
	addr := freeport.Addr(b)
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command(cmdtest.Build(b, "streams-echo"))
	cmd.Env = append(os.Environ(), "PORT="+port)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return "http://" + addr
		}
		if time.Now().After(deadline) {
			b.Fatalf("streams-echo does not listen on %s: %v", addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

func runSidecar(ctx context.Context, b *testing.B, addr, function, src, sink string, d sidecar.Delivery) func() {
	e := env{
		"STREAMS_INPUT_BOOTSTRAP": addr, "STREAMS_INPUT_TOPIC": src, "STREAMS_GROUP": src + "-group",
		"STREAMS_OUTPUTS":              fmt.Sprintf(`[{"bootstrap":%q,"topic":%q}]`, addr, sink),
		"STREAMS_DEADLETTER_BOOTSTRAP": addr, "STREAMS_DEADLETTER_TOPIC": strings.TrimSuffix(src, "-src") + "-dlq",
		"STREAMS_REVISION": "bench", "STREAMS_FUNCTION": function + "/", "STREAMS_DELIVERY": string(d),
		"STREAMS_PROBE_ADDR": freeport.Addr(b), "STREAMS_TRANSACTIONAL_ID": src + "-txn",
	}
	cfg, err := sidecar.ConfigFromEnv(func(k string) string { return e[k] })
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- sidecar.Run(ctx, cfg, nil) }()
	return func() {
		sum, _ := strconv.ParseFloat(metric(e["STREAMS_PROBE_ADDR"], "streams_sidecar_function_call_duration_seconds_sum"), 64)
		n, _ := strconv.ParseFloat(metric(e["STREAMS_PROBE_ADDR"], "streams_sidecar_function_call_duration_seconds_count"), 64)
		b.Logf("%s: %.0f function calls, %.3f ms on average", src, n, 1000*sum/max(n, 1))
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}
}

// baseline is the echo in a plain franz-go loop: poll, call, produce,
// wait for the acknowledgements, commit.
func baseline(ctx context.Context, b *testing.B, addr, src, sink string) func() {
	consumer, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DisableClientMetrics(), kgo.ConsumerGroup(src+"-group"), kgo.ConsumeTopics(src),
		kgo.Balancers(kgo.CooperativeStickyBalancer()), kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		b.Fatal(err)
	}
	producer, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DisableClientMetrics(), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			recs := consumer.PollRecords(ctx, 500).Records()
			var acks sync.WaitGroup
			for _, r := range recs {
				out := &kgo.Record{Topic: sink, Key: r.Key, Value: r.Value, Headers: r.Headers}
				acks.Add(1)
				producer.Produce(ctx, out, func(_ *kgo.Record, err error) {
					if err != nil && ctx.Err() == nil {
						b.Error(err)
					}
					acks.Done()
				})
			}
			acks.Wait()
			if len(recs) > 0 {
				if err := consumer.CommitRecords(context.WithoutCancel(ctx), recs...); err != nil {
					b.Error(err)
				}
			}
			consumer.AllowRebalance()
		}
	}()
	return func() {
		cancel()
		<-done
		consumer.CloseAllowingRebalance()
		producer.Close()
	}
}

// measure sends events at rate to src, after a warm-up, and returns the
// sorted latencies seen at sink.
func measure(ctx context.Context, b *testing.B, addr, src, sink string, rate, events int, readCommitted bool) []time.Duration {
	producer, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DisableClientMetrics(), kgo.DefaultProduceTopic(src), kgo.ProducerLinger(0))
	if err != nil {
		b.Fatal(err)
	}
	defer producer.Close()
	opts := []kgo.Opt{kgo.SeedBrokers(addr), kgo.DisableClientMetrics(), kgo.ConsumeTopics(sink), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}
	if readCommitted {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	consumer, err := kgo.NewClient(opts...)
	if err != nil {
		b.Fatal(err)
	}
	defer consumer.Close()

	warmup := max(rate, 100) / 2
	total := warmup + events
	got := make(chan []time.Duration, 1)
	go func() {
		lat := make([]time.Duration, 0, events)
		for n := 0; n < total && ctx.Err() == nil; {
			fs := consumer.PollFetches(ctx)
			now := time.Now()
			fs.EachRecord(func(r *kgo.Record) {
				n++
				sent, err := strconv.ParseInt(header(r, "ce_sent"), 10, 64)
				if err != nil {
					b.Errorf("record without its send time: %v", r.Headers)
					return
				}
				if header(r, "ce_warmup") == "" {
					lat = append(lat, now.Sub(time.Unix(0, sent)))
				}
			})
		}
		got <- lat
	}()

	interval := time.Second / time.Duration(rate)
	begin := time.Now()
	for i := range total {
		if d := time.Until(begin.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		h := []kgo.RecordHeader{{Key: "ce_sent", Value: strconv.AppendInt(nil, time.Now().UnixNano(), 10)}}
		if i < warmup {
			h = append(h, kgo.RecordHeader{Key: "ce_warmup", Value: []byte("1")})
		}
		producer.Produce(ctx, &kgo.Record{Key: []byte(strconv.Itoa(i % 16)), Value: fmt.Appendf(nil, "event-%d", i), Headers: h},
			func(_ *kgo.Record, err error) {
				if err != nil && ctx.Err() == nil {
					b.Error(err)
				}
			})
	}
	lat := <-got
	if len(lat) != events {
		b.Fatalf("%d of %d events arrived: %v", len(lat), events, ctx.Err())
	}
	slices.Sort(lat)
	return lat
}
