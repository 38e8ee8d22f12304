package sidecar_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cloudtransit/transit/cmdtest"
	"github.com/cloudtransit/transit/controllers/streams/brokertest"
	"github.com/cloudtransit/transit/controllers/streams/sidecar"
	"github.com/cloudtransit/transit/freeport"
)

// kafka is a broker process (or, b nil, a broker in this process at
// at) and an admin on it.
type kafka struct {
	t   *testing.T
	b   *brokertest.Broker
	at  string
	cl  *kgo.Client
	adm *kadm.Client
}

func integration(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs a broker process (-short)")
	}
}

// startKafka runs a streams-broker process; flags go to it (-brokers 3).
func startKafka(t *testing.T, flags ...string) *kafka {
	t.Helper()
	b := brokertest.Start(t, flags...)
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &kafka{t: t, b: b, cl: cl, adm: kadm.NewClient(cl)}
}

// startFake runs a kfake broker in this process, for tests that control
// its answers.
func startFake(t *testing.T, opts ...kfake.Opt) (*kafka, *kfake.Cluster) {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	addr := c.ListenAddrs()[0]
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &kafka{t: t, at: addr, cl: cl, adm: kadm.NewClient(cl)}, c
}

func (k *kafka) addr() string {
	if k.b == nil {
		return k.at
	}
	return k.b.Addr()
}

// open is how many records of each partition of topic sit behind an open
// transaction: between the last stable offset and the end.
func (k *kafka) open(ctx context.Context, topic string) offsets {
	k.t.Helper()
	stable, err := k.adm.ListCommittedOffsets(ctx, topic)
	if err == nil {
		err = stable.Error()
	}
	if err != nil {
		k.t.Fatalf("last stable offsets of %s: %v", topic, err)
	}
	ends := k.ends(ctx, topic)
	o := offsets{}
	stable.Each(func(x kadm.ListedOffset) {
		if n := ends[x.Partition] - x.Offset; n > 0 {
			o[x.Partition] = n
		}
	})
	return o
}

func (k *kafka) topic(ctx context.Context, name string, partitions int32) {
	k.t.Helper()
	resp, err := k.adm.CreateTopic(ctx, partitions, 1, nil, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		k.t.Fatalf("create topic %s: %v", name, err)
	}
}

// produce writes records (Partition chosen by the caller) synchronously.
func (k *kafka) produce(ctx context.Context, rs ...*kgo.Record) {
	k.t.Helper()
	if err := k.cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		k.t.Fatalf("produce: %v", err)
	}
}

// inputs makes n records for topic spread over partitions, value id-<i>,
// key k<i%keys>, partition i%partitions.
func inputs(topic string, n int, partitions int32) []*kgo.Record {
	rs := make([]*kgo.Record, n)
	for i := range rs {
		rs[i] = &kgo.Record{Topic: topic, Partition: int32(i) % partitions, Key: fmt.Appendf(nil, "k%d", i%8),
			Value: []byte(id(i)), Headers: []kgo.RecordHeader{{Key: "origin", Value: []byte("test")}}}
	}
	return rs
}

func id(i int) string { return fmt.Sprintf("id-%04d", i) }

func ids(from, to int) []string {
	var s []string
	for i := from; i < to; i++ {
		s = append(s, id(i))
	}
	return s
}

// offsets maps partitions to offsets.
type offsets map[int32]int64

func (k *kafka) ends(ctx context.Context, topic string) offsets {
	k.t.Helper()
	l, err := k.adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = l.Error()
	}
	if err != nil {
		k.t.Fatalf("end offsets of %s: %v", topic, err)
	}
	o := offsets{}
	l.Each(func(x kadm.ListedOffset) { o[x.Partition] = x.Offset })
	return o
}

// committed is the group's committed offsets in topic, partitions without
// a commit at 0.
func (k *kafka) committed(ctx context.Context, group, topic string, partitions int32) offsets {
	k.t.Helper()
	o := offsets{}
	for p := range partitions {
		o[p] = 0
	}
	resp, err := k.adm.FetchOffsets(ctx, group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return o // not made yet
	}
	if err != nil {
		k.t.Fatalf("committed offsets of %s: %v", group, err)
	}
	resp.Each(func(x kadm.OffsetResponse) {
		if x.Topic == topic && x.Err == nil {
			o[x.Partition] = x.At
		}
	})
	return o
}

// waitCommitted waits until the group committed the input's end.
func (k *kafka) waitCommitted(ctx context.Context, group, topic string, partitions int32) {
	k.t.Helper()
	waitFor(ctx, k.t, "the group to commit every input offset", func() bool {
		return maps.Equal(k.committed(ctx, group, topic, partitions), k.ends(ctx, topic))
	})
}

func (k *kafka) members(ctx context.Context, group string) (string, int) {
	k.t.Helper()
	d, err := k.adm.DescribeGroups(ctx, group)
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		k.t.Fatalf("describe group %s: %v", group, err)
	}
	g := d[group]
	if errors.Is(g.Err, kerr.GroupIDNotFound) {
		return "Dead", 0
	}
	if g.Err != nil {
		k.t.Fatalf("describe group %s: %v", group, g.Err)
	}
	return g.State, len(g.Members)
}

// readAll reads a topic from its start up to sentinels it writes at the
// end of every partition first: everything written before is read (read
// committed: everything committed). Call it once nothing writes to the
// topic any more.
func (k *kafka) readAll(ctx context.Context, topic string, readCommitted bool) []*kgo.Record {
	k.t.Helper()
	md, err := k.adm.Metadata(ctx, topic)
	if err != nil || md.Topics[topic].Err != nil {
		k.t.Fatalf("metadata of %s: %v %v", topic, err, md.Topics[topic].Err)
	}
	parts := md.Topics[topic].Partitions.Numbers()
	for _, p := range parts {
		k.produce(ctx, &kgo.Record{Topic: topic, Partition: p, Value: []byte("sentinel"), Headers: []kgo.RecordHeader{{Key: "sentinel"}}})
	}
	opts := []kgo.Opt{kgo.SeedBrokers(k.addr()), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}
	if readCommitted {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	c, err := kgo.NewClient(opts...)
	if err != nil {
		k.t.Fatal(err)
	}
	defer c.Close()
	seen := map[int32]bool{}
	var out []*kgo.Record
	for len(seen) < len(parts) {
		fs := c.PollFetches(ctx)
		if ctx.Err() != nil {
			k.t.Fatalf("reading %s: sentinels of %d of %d partitions seen: %v", topic, len(seen), len(parts), ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			if len(r.Headers) == 1 && r.Headers[0].Key == "sentinel" {
				seen[r.Partition] = true
				return
			}
			out = append(out, r)
		})
	}
	return out
}

// readInput reads a topic nothing writes to transactionally up to its
// current ends, without sentinels (the sidecar would read them).
func (k *kafka) readInput(ctx context.Context, topic string) []*kgo.Record {
	k.t.Helper()
	ends := k.ends(ctx, topic)
	c, err := kgo.NewClient(kgo.SeedBrokers(k.addr()), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		k.t.Fatal(err)
	}
	defer c.Close()
	at := offsets{}
	var out []*kgo.Record
	for !maps.Equal(at, ends) {
		fs := c.PollFetches(ctx)
		if ctx.Err() != nil {
			k.t.Fatalf("reading %s to %v: at %v: %v", topic, ends, at, ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			out = append(out, r)
			at[r.Partition] = r.Offset + 1
		})
		for p, end := range ends {
			if end == 0 {
				at[p] = 0
			}
		}
	}
	return out
}

func values(rs []*kgo.Record) []string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = string(r.Value)
	}
	slices.Sort(s)
	return s
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// waitFor polls cond every 20 ms until it holds or ctx ends.
func waitFor(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func timeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// echo answers a binary-mode event with the same event, marked
// ce-echoed: yes.
func echo(w http.ResponseWriter, r *http.Request, body []byte) {
	for k, v := range r.Header {
		if strings.HasPrefix(k, "Ce-") || k == "Content-Type" {
			w.Header()[k] = v
		}
	}
	w.Header().Set("Ce-Echoed", "yes")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// function serves handle (the body read) as a test function.
func function(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, body []byte)) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		handle(w, r, body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// env is a sidecar's environment.
type env map[string]string

func baseEnv(k *kafka, function string) env {
	return env{
		"STREAMS_INPUT_BOOTSTRAP":      k.addr(),
		"STREAMS_INPUT_TOPIC":          "in",
		"STREAMS_GROUP":                "rev-1-p",
		"STREAMS_OUTPUTS":              fmt.Sprintf(`[{"bootstrap":%q,"topic":"out"}]`, k.addr()),
		"STREAMS_DEADLETTER_BOOTSTRAP": k.addr(),
		"STREAMS_DEADLETTER_TOPIC":     "dlq",
		"STREAMS_REVISION":             "rev-1",
		"STREAMS_FUNCTION":             function + "/",
		"STREAMS_RETRY_BACKOFF":        "5ms",
		"HOSTNAME":                     "pod-1",
	}
}

func (e env) config(t *testing.T) sidecar.Config {
	t.Helper()
	c, err := sidecar.ConfigFromEnv(func(k string) string { return e[k] })
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// running is a sidecar run in this process.
type running struct {
	cancel context.CancelFunc
	done   chan error
	probe  string
}

// run runs the sidecar in this process until stop or the test's end.
func run(t *testing.T, e env, gate sidecar.Gate) *running {
	t.Helper()
	if e["STREAMS_PROBE_ADDR"] == "" {
		e["STREAMS_PROBE_ADDR"] = freeport.Addr(t)
	}
	cfg := e.config(t)
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	r := &running{cancel: cancel, done: make(chan error, 1), probe: e["STREAMS_PROBE_ADDR"]}
	go func() { r.done <- sidecar.Run(ctx, cfg, gate) }()
	t.Cleanup(func() {
		if err := r.stop(); err != nil {
			t.Errorf("sidecar: %v", err)
		}
	})
	return r
}

// stop cancels the run and returns its error (once; nil after).
func (r *running) stop() error {
	r.cancel()
	select {
	case err, ok := <-r.done:
		if ok {
			close(r.done)
		}
		return err
	case <-time.After(30 * time.Second):
		return errors.New("did not stop within 30 s")
	}
}

// get answers a probe's status and body.
func get(addr, path string) (int, string) {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// metric reads one value from /metrics.
func metric(addr, name string) string {
	_, body := get(addr, "/metrics")
	for line := range strings.SplitSeq(body, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	return ""
}

func TestMain(m *testing.M) { os.Exit(cmdtest.Main(m, "streams-broker", "streams-sidecar")) }

// process is a streams-sidecar process.
type process struct {
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
	err  error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// start runs the sidecar binary with e (and no other STREAMS_ variable);
// it is killed at the test's end, its output logged if the test failed.
func start(t *testing.T, e env) *process {
	t.Helper()
	cmd := exec.Command(cmdtest.Build(t, "streams-sidecar"))
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "STREAMS_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	for k, v := range e {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	p := &process{cmd: cmd, out: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("streams-sidecar (pid %d) output:\n%s", cmd.Process.Pid, p.out)
		}
	})
	return p
}

// wait waits for the process to exit and returns its wait status.
func (p *process) wait(ctx context.Context, t *testing.T) syscall.WaitStatus {
	t.Helper()
	select {
	case <-p.done:
	case <-ctx.Done():
		t.Fatalf("streams-sidecar did not exit: %v\n%s", ctx.Err(), p.out)
	}
	return p.cmd.ProcessState.Sys().(syscall.WaitStatus)
}
