package sidecar

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// readiness is what /readyz answers: ready once every topic exists on its
// cluster, the function accepts connections and the group gave the member
// its share once; not while calls find the function refusing them.
type readiness struct {
	mu           sync.Mutex
	reason       string // "" is ready
	checked      bool
	functionDown atomic.Bool
	joined       atomic.Bool
}

func (r *readiness) set(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checked = true
	r.reason = ""
	if err != nil {
		r.reason = err.Error()
	}
}

// ready returns "" when ready, else why not.
func (r *readiness) ready() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case !r.checked:
		return "not checked yet"
	case r.reason != "":
		return r.reason
	case r.functionDown.Load():
		return "the function refuses connections"
	case !r.joined.Load():
		return "not in its consumer group yet"
	}
	return ""
}

// watchReadiness checks every second until ctx ends.
func (s *sidecar) watchReadiness(ctx context.Context) {
	fn, _ := url.Parse(s.cfg.Function) // checked by ConfigFromEnv
	host := fn.Host
	if fn.Port() == "" {
		host = net.JoinHostPort(fn.Hostname(), "80")
	}
	for {
		err := s.check(ctx, host)
		if ctx.Err() != nil {
			return
		}
		was := s.ready.ready() == ""
		s.ready.set(err)
		if err != nil && was {
			s.log.Warn("not ready", "reason", err)
		}
		if err := s.clock.Sleep(ctx, time.Second); err != nil {
			return
		}
	}
}

func (s *sidecar) check(ctx context.Context, functionHost string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	topics := map[string][]string{}
	for _, e := range s.endpoints() {
		topics[cluster(e.Bootstrap)] = append(topics[cluster(e.Bootstrap)], e.Topic)
	}
	for c, ts := range topics {
		md, err := kadm.NewClient(s.kafka[c]).Metadata(ctx, ts...)
		if err != nil {
			return fmt.Errorf("kafka %s: %s", c, s.cfg.Security[c].Explain(err))
		}
		for _, t := range ts {
			td, ok := md.Topics[t]
			switch {
			case !ok || errors.Is(td.Err, kerr.UnknownTopicOrPartition):
				return fmt.Errorf("kafka %s: topic %s does not exist", c, t)
			case td.Err != nil:
				return fmt.Errorf("kafka %s: topic %s: %s", c, t, s.cfg.Security[c].Explain(td.Err))
			}
		}
	}
	conn, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", functionHost)
	if err != nil {
		return fmt.Errorf("the function at %s: %w", functionHost, err)
	}
	return conn.Close()
}

// metrics are the sidecar's counters, served in Prometheus' text format.
type metrics struct {
	consumed, forwarded, dropped, deadLettered atomic.Int64
	calls, callNanos, failedAttempts, refused  atomic.Int64
	inFlight, batches, aborted                 atomic.Int64
}

func (m *metrics) write(w io.Writer, ready bool) {
	type metric struct {
		name, kind, help string
		value            string
	}
	i := func(v *atomic.Int64) string { return fmt.Sprint(v.Load()) }
	readyValue := "0"
	if ready {
		readyValue = "1"
	}
	ms := []metric{
		{"streams_sidecar_records_consumed_total", "counter", "Records read from the input topic.", i(&m.consumed)},
		{"streams_sidecar_records_forwarded_total", "counter", "Records whose event the function answered, written to every output.", i(&m.forwarded)},
		{"streams_sidecar_records_dropped_total", "counter", "Records the function answered without an event (204).", i(&m.dropped)},
		{"streams_sidecar_records_dead_lettered_total", "counter", "Records written to the dead-letter topic after their retries.", i(&m.deadLettered)},
		{"streams_sidecar_records_in_flight", "gauge", "Records read and not yet committed.", i(&m.inFlight)},
		{"streams_sidecar_function_failed_attempts_total", "counter", "Calls that failed (error status, no event, timeout).", i(&m.failedAttempts)},
		{"streams_sidecar_function_refused_total", "counter", "Calls the function refused to connect (not counted as attempts).", i(&m.refused)},
		{"streams_sidecar_batches_total", "counter", "Batches (exactly-once: transactions) ended with a commit attempt.", i(&m.batches)},
		{"streams_sidecar_transactions_aborted_total", "counter", "Exactly-once transactions aborted by a rebalance.", i(&m.aborted)},
		{"streams_sidecar_ready", "gauge", "1 when /readyz answers 200.", readyValue},
	}
	sort.Slice(ms, func(a, b int) bool { return ms[a].name < ms[b].name })
	var b strings.Builder
	for _, x := range ms {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n%s %s\n", x.name, x.help, x.name, x.kind, x.name, x.value)
	}
	const call = "streams_sidecar_function_call_duration_seconds"
	fmt.Fprintf(&b, "# HELP %s Time the function took to answer a call.\n# TYPE %s summary\n%s_sum %g\n%s_count %d\n",
		call, call, call, time.Duration(m.callNanos.Load()).Seconds(), call, m.calls.Load())
	_, _ = io.WriteString(w, b.String())
}

// serveProbes serves /healthz, /readyz and /metrics on ln until Close.
func (s *sidecar) serveProbes(ln net.Listener) io.Closer {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if why := s.ready.ready(); why != "" {
			http.Error(w, "not ready: "+why, http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		s.m.write(w, s.ready.ready() == "")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }() // ends with Close
	return srv
}
