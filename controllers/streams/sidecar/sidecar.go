// Package sidecar is streams-sidecar, which runs beside every streams
// processor's function: it consumes the processor's input topic in its
// consumer group, hands each record to the function as a CloudEvent over
// HTTP (binary mode) on localhost, writes the event the function answers
// to every output topic, and commits input offsets only once everything
// produced for the records before them is acknowledged.
//
// # Records and events
//
// A record's ce_* headers become the request's ce-* headers and its
// content-type the Content-Type (the CloudEvents Kafka and HTTP
// bindings). A record that carries no event gets one: specversion 1.0,
// id <topic>/<partition>/<offset>, source /topics/<topic> (a
// URI-reference relative to the cluster), type transit.streams.record,
// time from the record's timestamp, partitionkey from its key, data its
// value. Every request and every output event carries the extension
// transitrevision, the topology revision (STREAMS_REVISION).
//
// The function answers:
//   - 2xx with an event (binary mode, or structured
//     application/cloudevents+json): the event goes to every output, keyed
//     by the input record's key (so one key keeps its order);
//   - 204, or 2xx with neither event nor body: the record is dropped;
//   - anything else (an error status, a 2xx without an event, no answer
//     within STREAMS_CALL_TIMEOUT) is a failed attempt, retried after a
//     doubling backoff; after STREAMS_RETRIES retries the input record
//     goes to the dead-letter topic with transit_error (the reason),
//     transit_topic, transit_partition, transit_offset and
//     transit_revision headers.
//
// A refused connection (the function not started, or restarting) is not
// the record's fault: the call is repeated until the function listens,
// and the sidecar is not Ready meanwhile.
//
// # Guarantees
//
// Records of a partition are handled strictly in order; the partitions of
// one poll run at once. No offset is skipped: each record is forwarded,
// dropped or dead-lettered before its offset is committed, and a batch is
// committed only once all it produced (outputs and dead letters) is
// acknowledged by all in-sync replicas. A produce that fails for good
// stops the sidecar with an error, nothing of its batch committed.
// Rebalances wait until the batch in hand is committed
// (BlockRebalanceOnPoll).
//
// At-least-once: a crash between an acknowledged output and its commit
// repeats that batch. Exactly-once: consume, call, produce and commit are
// one Kafka transaction (franz-go's GroupTransactSession, KIP-447),
// dead letters included; a transaction takes the records that are already
// fetched, up to STREAMS_BATCH_RECORDS and STREAMS_BATCH_INTERVAL, so an
// idle pipeline commits each record at once and a busy one batches; and
// no more than fit in the batch limit at the function's pace
// (Config.BatchLimit), so a slow function never outlives a transaction.
// Readers of the outputs must read committed. A transaction a crash left
// open holds those readers back until it ends: the pod's next sidecar
// aborts it as it starts (the transactional ID is the pod's), and the
// controller those of pods that are gone. A transaction whose group
// session ended while its batch was in hand is aborted, its records read
// again.
//
// # Lifecycle
//
// Run serves the probes, fences its transactional ID (exactly-once), joins
// its group and waits for its Gate before it reads: a standby revision's
// source reader is a member of its revision's group (so Kafka's initial
// rebalance delay is paid before the switch, not in it) but reads nothing
// until its revision is active; then it begins each partition its group
// never committed where the gate says (the controller's start offsets).
// It is Ready once it reaches its topics and the function and the group
// has given it its share (none, with more replicas than partitions).
//
// When ctx ends (SIGTERM) it stops polling, finishes the batch in hand
// (calls, produce, acknowledgements), commits it, leaves the group and
// returns nil; if the function is gone by then, it commits the records it
// finished and leaves the rest to the next owner.
//
// # Fault point
//
// STREAMS_FAILPOINT=after-produce:N is a test-only fault point, like
// etcd's gofail: the process kills itself with SIGKILL once the Nth
// batch's outputs are acknowledged, before its offsets are committed
// (exactly-once: before the transaction ends). The crash tests use it to
// prove what a restart delivers.
package sidecar

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"golang.org/x/sync/errgroup"

	"github.com/cloudtransit/transit/clock"
	"github.com/cloudtransit/transit/controllers/streams/kafka"
)

// maxAnswer is the largest answer forwarded: the producer's default batch
// limit less room for headers. Larger answers are failed attempts rather
// than produce errors that would stop the sidecar.
const maxAnswer = 1000000 - 12<<10

// errFunctionAway: the sidecar is stopping and the function refuses
// connections, so the record cannot be finished.
var errFunctionAway = errors.New("stopping while the function refuses connections")

// errStartBy: the batch's startBy passed while the function refused
// connections; the record is read again in the next batch.
var errStartBy = errors.New("the batch's time to start records passed while the function refuses connections")

type sidecar struct {
	cfg   Config
	log   *slog.Logger
	clock clock.Clock
	fn    *caller

	// secure are the clients' TLS and SASL options by cluster
	// (Config.Security).
	secure map[string][]kgo.Opt
	// kafka holds one client per cluster (by cluster()): at-least-once's
	// producers, and every mode's readiness checks.
	kafka    map[string]*kgo.Client
	consumer *kgo.Client               // at-least-once
	session  *kgo.GroupTransactSession // exactly-once
	// endGroup cancels the group client's context: a join in flight
	// ends at once (see leave).
	endGroup context.CancelFunc

	outputs    []sink
	deadLetter sink

	// gate holds the reading of the input until it opens, then is nil
	// (see opening); start is what it said.
	gate   Gate
	gateMu sync.Mutex
	start  Start
	// stop ends the run with a cause: a gate that failed.
	stop context.CancelCauseFunc

	ready   readiness
	m       metrics
	pace    pace // of records lately: sizes polls
	batches int  // for the fault point

	lastFetchLog atomic.Int64 // unix nanos of the last fetch error logged
}

// sink is a topic and the client that writes to it.
type sink struct {
	topic  string
	client *kgo.Client
}

// delivery is a record for a sink.
type delivery struct {
	to *kgo.Client
	r  *kgo.Record
}

// Run runs the sidecar until ctx ends, then finishes and commits the batch
// in hand, leaves the group and returns nil. It returns an error when it
// cannot go on without losing or skipping a record: a produce or commit
// that failed for good, a client that closed, a gate that failed.
//
// cfg is what ConfigFromEnv reads; one made by hand needs the same
// non-zero values.
func Run(ctx context.Context, cfg Config, gate Gate) error {
	err := run(ctx, cfg, gate)
	if err != nil {
		// Most of what fails is the input cluster's (and, exactly-once,
		// every topic is there).
		if why := cfg.securityOf(cfg.Input.Bootstrap).Explain(err); why != err.Error() {
			return &explained{err, why} // a refused login, an ACL: what to fix
		}
	}
	return err
}

// explained is an error with what to do about it as its message.
type explained struct {
	err error
	why string
}

func (e *explained) Error() string { return e.why }
func (e *explained) Unwrap() error { return e.err }

func run(ctx context.Context, cfg Config, gate Gate) error {
	if err := cfg.check(); err != nil {
		return err
	}
	s, err := newSidecar(cfg)
	if err != nil {
		return err
	}
	defer s.close()

	ln, err := net.Listen("tcp", cfg.ProbeAddr)
	if err != nil {
		return fmt.Errorf("probes on %s: %w", cfg.ProbeAddr, err)
	}
	probes := s.serveProbes(ln)
	defer probes.Close()
	readyCtx, stopReady := context.WithCancel(ctx)
	readyDone := make(chan struct{})
	go func() { defer close(readyDone); s.watchReadiness(readyCtx) }()
	defer func() { stopReady(); <-readyDone }()

	if cfg.Delivery == ExactlyOnce {
		if err := s.fence(ctx); err != nil {
			if ctx.Err() != nil {
				return nil // stopped before reading anything
			}
			return err
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	s.gate = gate
	if gate != nil {
		s.log.Info("held by the gate: in the group, reading nothing")
	}
	parent := ctx
	ctx, s.stop = context.WithCancelCause(parent)
	defer s.stop(nil)
	if err := s.join(); err != nil {
		return err
	}
	if s.session != nil {
		err = s.transact(ctx)
	} else {
		err = s.consume(ctx)
	}
	if cause := context.Cause(ctx); err == nil && parent.Err() == nil && cause != nil {
		return cause // the gate failed
	}
	return err
}

// opening is the group's AdjustFetchOffsetsFn: before the first session
// reads, it waits for the gate (later sessions pass at once), then moves
// each partition of the input the group never committed to where the gate
// says it begins. ctx ends when the session does (a rebalance): the next
// one waits again.
func (s *sidecar) opening(ctx context.Context, offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	s.gateMu.Lock()
	defer s.gateMu.Unlock()
	if s.gate != nil {
		start, err := s.gate(ctx)
		if err != nil {
			if ctx.Err() == nil {
				s.stop(fmt.Errorf("gate: %w", err))
			}
			return nil, err
		}
		s.gate, s.start = nil, start
		s.log.Info("gate open", "start", start)
	}
	for p, o := range offsets[s.cfg.Input.Topic] {
		if at, ok := s.start[p]; ok && o.EpochOffset().Offset < 0 { // never committed
			offsets[s.cfg.Input.Topic][p] = kgo.NewOffset().At(at).WithEpoch(-1)
		}
	}
	return offsets, nil
}

func newSidecar(cfg Config) (*sidecar, error) {
	s := &sidecar{cfg: cfg, log: cfg.Log, clock: cfg.Clock, kafka: map[string]*kgo.Client{}}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.log = s.log.With("revision", cfg.Revision, "group", cfg.Group)
	if s.clock == nil {
		s.clock = clock.Real{}
	}
	var err error
	if s.fn, err = newCaller(cfg.Function, cfg.CallTimeout); err != nil {
		return nil, fmt.Errorf("STREAMS_FUNCTION: %w", err)
	}
	s.secure = map[string][]kgo.Opt{}
	for c, sec := range cfg.Security {
		if s.secure[c], err = sec.Opts(); err != nil {
			return nil, fmt.Errorf("STREAMS_KAFKA_SECURITY %s: %w", c, err)
		}
	}
	for _, e := range s.endpoints() {
		c := cluster(e.Bootstrap)
		if s.kafka[c] != nil {
			continue
		}
		cl, err := kgo.NewClient(slices.Concat(s.producerOpts(), s.secure[c],
			[]kgo.Opt{kgo.SeedBrokers(brokers(e.Bootstrap)...), kgo.ClientID("streams-sidecar")})...)
		if err != nil {
			s.close()
			return nil, fmt.Errorf("kafka %s: %w", c, err)
		}
		s.kafka[c] = cl
	}
	return s, nil
}

func (s *sidecar) endpoints() []Endpoint {
	return append([]Endpoint{s.cfg.Input, s.cfg.DeadLetter}, s.cfg.Outputs...)
}

// noClientMetrics: no KIP-714 client metrics pushed to brokers that ask
// for them (the sidecar serves its own /metrics). franz-go 1.22.3
// compresses each push with lz4 through 8 MB of fresh buffers, and the
// garbage collections that follows showed as milliseconds of p99.9
// latency.
var noClientMetrics = kgo.DisableClientMetrics()

func (s *sidecar) producerOpts() []kgo.Opt {
	// Idempotent (the default with acks from all in-sync replicas), and
	// no linger unless asked: each record is sent at once.
	return []kgo.Opt{kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(s.cfg.ProduceLinger), noClientMetrics}
}

// fence aborts the transaction this pod's previous sidecar left open when
// it was killed: read-committed readers of every partition it wrote stop
// at it until it ends. kgo would fence only at the first produce, and a
// sidecar that never produces again (held by its gate, given no
// partitions, stopped first) would leave it to the transaction timeout,
// minutes away.
func (s *sidecar) fence(ctx context.Context) error {
	cl := s.kafka[cluster(s.cfg.Input.Bootstrap)]
	for {
		err := kafka.Fence(ctx, cl, s.cfg.TransactionalID, s.cfg.BatchLimit())
		if err == nil || ctx.Err() != nil {
			return err
		}
		var ke *kerr.Error
		if errors.As(err, &ke) && !ke.Retriable {
			return err
		}
		s.log.Warn("fencing the transactional id, again in a second", "err", err)
		if err := s.clock.Sleep(ctx, time.Second); err != nil {
			return err
		}
	}
}

// join makes the group consumer (exactly-once: the transactional
// session) and the sinks.
func (s *sidecar) join() error {
	c := s.cfg
	var groupCtx context.Context
	groupCtx, s.endGroup = context.WithCancel(context.Background())
	opts := []kgo.Opt{
		kgo.SeedBrokers(brokers(c.Input.Bootstrap)...), kgo.ClientID("streams-sidecar"), noClientMetrics,
		kgo.WithContext(groupCtx), // see leave
		kgo.ConsumerGroup(c.Group), kgo.ConsumeTopics(c.Input.Topic),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll(),
		// A rebalance waits for the batch in hand, as long as a record
		// failing every attempt by timeout may take.
		kgo.RebalanceTimeout(c.BatchLimit()),
		// A crashed sidecar's partitions move after 10 s (Kafka's default
		// before 3.0) rather than 45; heartbeats go on while a batch runs.
		kgo.SessionTimeout(sessionTimeout),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// Never hand the function an aborted upstream transaction's record.
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// What the group hands and takes, for whoever reads a stalled
		// pipeline's log.
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, p map[string][]int32) {
			s.ready.joined.Store(true)
			s.log.Info("partitions assigned", "partitions", p)
		}),
		kgo.AdjustFetchOffsetsFn(s.opening),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, p map[string][]int32) {
			if len(p) > 0 {
				s.log.Info("partitions revoked", "partitions", p)
			}
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, p map[string][]int32) {
			s.log.Warn("partitions lost: the group dropped this member", "partitions", p)
		}),
	}
	if c.Delivery == ExactlyOnce {
		var err error
		s.session, err = kgo.NewGroupTransactSession(slices.Concat(opts, s.producerOpts(), s.secure[cluster(c.Input.Bootstrap)], []kgo.Opt{
			kgo.TransactionalID(c.TransactionalID), kgo.TransactionTimeout(c.BatchLimit()),
		})...)
		if err != nil {
			return fmt.Errorf("kafka %s: %w", c.Input.Bootstrap, err)
		}
		for _, o := range c.Outputs {
			s.outputs = append(s.outputs, sink{o.Topic, s.session.Client()})
		}
		s.deadLetter = sink{c.DeadLetter.Topic, s.session.Client()}
		return nil
	}
	var err error
	if s.consumer, err = kgo.NewClient(append(opts, s.secure[cluster(c.Input.Bootstrap)]...)...); err != nil {
		return fmt.Errorf("kafka %s: %w", c.Input.Bootstrap, err)
	}
	for _, o := range c.Outputs {
		s.outputs = append(s.outputs, sink{o.Topic, s.kafka[cluster(o.Bootstrap)]})
	}
	s.deadLetter = sink{c.DeadLetter.Topic, s.kafka[cluster(c.DeadLetter.Bootstrap)]}
	return nil
}

// sessionTimeout is the group session timeout: without a heartbeat for
// that long, the coordinator drops a member.
const sessionTimeout = 10 * time.Second

// maxBatchTimeout is Kafka's default ceiling for transactions
// (transaction.max.timeout.ms).
const maxBatchTimeout = 15 * time.Minute

// worstRecord is how long one record may take: every attempt timing out,
// and the backoffs between them.
func (c Config) worstRecord() time.Duration {
	worst := time.Duration(c.Retries+1) * c.CallTimeout
	b := c.RetryBackoff
	for range c.Retries {
		worst += b
		b = min(2*b, MaxRetryBackoff)
	}
	return worst
}

// BatchLimit bounds a batch — an exactly-once transaction, a rebalance
// held while a batch is in hand, the work after SIGTERM: BatchTimeout, or
// by default one record's worst case (every attempt timing out) and 30 s,
// at least a minute and at most 15. A batch must end within it whatever
// the function's pace, so polls are sized to it: a poll takes as many
// records as fit before startBy, at the slowest pace records were lately
// handled (one record while no pace is known). A function that slows
// down within a batch would still outlast it, so no record starts past
// startBy: the batch ends with the records handled, the others are read
// again (see rewind). A slow function makes batches small, never longer
// than the limit.
func (c Config) BatchLimit() time.Duration {
	if c.BatchTimeout > 0 {
		return c.BatchTimeout
	}
	return min(max(c.worstRecord()+c.BatchInterval+30*time.Second, time.Minute), maxBatchTimeout)
}

// startBy is how far into a batch a record may start: one that starts
// then and takes its worst case ends with endReserve of the limit left to
// end the batch (flush, commit). Each partition's first record of a poll
// starts whenever: a batch always makes progress.
func (c Config) startBy() time.Duration {
	limit := c.BatchLimit()
	return limit - min(limit/10, endReserve) - c.worstRecord()
}

// endReserve is the most of the batch limit kept to end a batch: a few
// round trips to the coordinators.
const endReserve = 5 * time.Second

// GracePeriod is the termination grace period a sidecar needs: its batch
// limit, and time to commit and leave the group.
func (c Config) GracePeriod() time.Duration { return c.BatchLimit() + 15*time.Second }

// DefaultGracePeriod is GracePeriod with the defaults ConfigFromEnv reads:
// what the controller gives processor pods.
func DefaultGracePeriod() time.Duration {
	c, _ := parse(func(string) string { return "" })
	return c.GracePeriod()
}

// pace is the slowest time a record took lately: a new sample above it
// replaces it, one below pulls it down by an eighth of the difference.
type pace struct{ nanos atomic.Int64 }

func (p *pace) observe(d time.Duration) {
	for {
		was := p.nanos.Load()
		next := int64(d)
		if was > next {
			next = was - (was-next)/8
		}
		if p.nanos.CompareAndSwap(was, next) {
			return
		}
	}
}

// records is how many records fit in left at the pace: 1 while no pace is
// known, at most most.
func (p *pace) records(left time.Duration, most int) int {
	per := p.nanos.Load()
	if per <= 0 {
		return 1
	}
	return int(min(max(int64(left)/per, 0), int64(most)))
}

// pollSize is how many records a poll may take once elapsed of the batch
// has passed: 0 when no more fit.
func (s *sidecar) pollSize(elapsed time.Duration, taken int) int {
	left := s.cfg.startBy() - elapsed
	if left <= 0 {
		return 0
	}
	return s.pace.records(left, s.cfg.BatchRecords-taken)
}

func (s *sidecar) close() {
	if s.session != nil {
		s.leave(s.session.Client())
		s.session.Close()
	}
	if s.consumer != nil {
		s.leave(s.consumer)
		s.consumer.Close()
	}
	if s.endGroup != nil {
		s.endGroup()
	}
	for _, c := range s.kafka {
		c.Close()
	}
	s.fn.close()
}

// leaveWait bounds how long a stopping sidecar waits for kgo to leave its
// group before it ends the join in flight and leaves by itself.
const leaveWait = 5 * time.Second

// leave leaves the group of cl, whose offsets are committed (or whose
// transaction ended) already. kgo leaves only once a join in flight is
// answered, and a coordinator answers a join once every member has
// rejoined: a member whose batch in hand holds the rebalance
// (BlockRebalanceOnPoll) holds it up to the rebalance timeout, BatchLimit
// — minutes, for which this pod would live on and, its source reader's
// revision being replaced, the controller's switch would wait. So after
// leaveWait the join is ended (the client's context) and the member
// leaves by a LeaveGroup of its own, through the producers' client.
func (s *sidecar) leave(cl *kgo.Client) {
	cl.AllowRebalance()
	member, _ := cl.GroupMetadata()
	ctx, cancel := context.WithTimeout(context.Background(), leaveWait)
	defer cancel()
	if err := cl.LeaveGroupContext(ctx); err == nil || !errors.Is(err, context.DeadlineExceeded) {
		return
	}
	s.endGroup()
	if member == "" {
		return
	}
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Group = s.cfg.Group
	m := kmsg.NewLeaveGroupRequestMember()
	m.MemberID = member
	m.Reason = kmsg.StringPtr("stopping: leaving while a rebalance holds the join")
	req.Members = append(req.Members, m)
	ctx, cancel = context.WithTimeout(context.Background(), leaveWait)
	defer cancel()
	resp, err := req.RequestWith(ctx, s.kafka[cluster(s.cfg.Input.Bootstrap)])
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	s.log.Warn("a rebalance held the group's join: left without waiting for it", "waited", leaveWait.String(), "member", member, "err", err)
}

// consume is at-least-once: poll, handle, wait for every acknowledgement,
// commit, allow a rebalance; until ctx ends.
func (s *sidecar) consume(ctx context.Context) error {
	work := context.WithoutCancel(ctx) // the batch in hand is finished after SIGTERM
	for {
		fs := s.consumer.PollRecords(ctx, max(s.pollSize(0, 0), 1))
		if fs.IsClientClosed() {
			return errors.New("the Kafka consumer closed")
		}
		s.fetchErrors(fs)
		if recs := fs.Records(); len(recs) > 0 {
			began := s.clock.Now()
			done, next, err := s.handleBatch(ctx, work, recs, began.Add(s.cfg.startBy()))
			if err != nil {
				return fmt.Errorf("nothing of the batch committed: %w", err)
			}
			s.failpoint()
			if len(done) > 0 {
				if err := s.consumer.CommitRecords(work, done...); err != nil {
					return fmt.Errorf("commit %s: %w", s.cfg.Input.Topic, err)
				}
			}
			s.m.batches.Add(1)
			s.log.Debug("batch", "records", len(done), "offsets", offsetSpans(done).String(), "took", s.clock.Now().Sub(began).String(), "committed", true)
			if len(next) > 0 {
				if ctx.Err() != nil {
					s.log.Warn("stopping: the records after the committed ones go to the next owner",
						"committed", len(done), "left", len(recs)-len(done))
					return nil
				}
				s.rewind(s.consumer, next, len(recs)-len(done))
			}
		}
		s.consumer.AllowRebalance()
		if ctx.Err() != nil {
			return nil
		}
	}
}

// transact is exactly-once: each transaction takes a poll's records and
// any more already fetched, bounded by BatchRecords and BatchInterval,
// then ends with the offsets committed in it.
func (s *sidecar) transact(ctx context.Context) error {
	work := context.WithoutCancel(ctx)
	cl := s.session.Client()
	for {
		fs := s.session.PollRecords(ctx, max(s.pollSize(0, 0), 1))
		if fs.IsClientClosed() {
			return errors.New("the Kafka consumer closed")
		}
		s.fetchErrors(fs)
		recs := fs.Records()
		if len(recs) > 0 {
			if err := s.session.Begin(); err != nil {
				return fmt.Errorf("begin a transaction: %w", err)
			}
			began, n := s.clock.Now(), 0
			startBy := began.Add(s.cfg.startBy())
			var spans spans
			for len(recs) > 0 {
				done, next, err := s.handleBatch(ctx, work, recs, startBy)
				if err != nil {
					return s.abort(work, fmt.Errorf("transaction aborted: %w", err))
				}
				spans.add(done)
				n += len(done)
				if len(next) > 0 {
					if ctx.Err() != nil {
						s.log.Warn("stopping: transaction aborted, its records go to the next owner")
						return s.abort(work, nil)
					}
					s.rewind(cl, next, len(recs)-len(done)) // the transaction commits the offsets up to them
					break
				}
				elapsed := s.clock.Now().Sub(began)
				more := s.pollSize(elapsed, n)
				if more == 0 || elapsed >= s.cfg.BatchInterval || ctx.Err() != nil || cl.BufferedFetchRecords() == 0 {
					break
				}
				fs = s.session.PollRecords(ctx, more)
				s.fetchErrors(fs)
				recs = fs.Records()
			}
			if err := cl.Flush(work); err != nil {
				return s.abort(work, fmt.Errorf("transaction aborted: produce: %w", err))
			}
			s.failpoint()
			committed, err := s.end(work)
			if err != nil {
				return fmt.Errorf("end the transaction: %w", err)
			}
			s.m.batches.Add(1)
			s.log.Debug("batch", "records", n, "offsets", spans.String(), "took", s.clock.Now().Sub(began).String(), "committed", committed)
			if !committed {
				s.m.aborted.Add(1)
				s.log.Info("transaction aborted by a rebalance: its records are read again")
			}
		}
		s.session.AllowRebalance()
		if ctx.Err() != nil {
			return nil
		}
	}
}

// rewind sets cl to fetch each partition again from next, its first
// record not handled: the batch ends with those handled, and commits the
// offsets up to next. The buffered fetches of those partitions are
// dropped. Called while the poll holds rebalances (BlockRebalanceOnPoll),
// as kgo asks. left is how many records are read again.
func (s *sidecar) rewind(cl *kgo.Client, next []*kgo.Record, left int) {
	to := map[string]map[int32]kgo.EpochOffset{}
	for _, r := range next {
		if to[r.Topic] == nil {
			to[r.Topic] = map[int32]kgo.EpochOffset{}
		}
		to[r.Topic][r.Partition] = kgo.EpochOffset{Epoch: r.LeaderEpoch, Offset: r.Offset}
	}
	cl.SetOffsets(to)
	s.m.consumed.Add(-int64(left)) // counted again when read again
	s.log.Info("the batch reached its time limit: the records left are read again in the next one",
		"left", left, "limit", s.cfg.BatchLimit().String())
}

// end commits the transaction in hand, unless the group took its
// partitions away (then it aborts, and their records are read again).
//
// End waits for a heartbeat before it commits. When the coordinator forgot
// the member while the batch was in hand (a broker restart, a session
// timeout), the heartbeats have stopped and kgo holds the session's onLost
// until AllowRebalance (BlockRebalanceOnPoll), which comes after End: End
// would wait for ever. A member with no heartbeat for a session timeout is
// gone anyway; after that long the rebalance is let through, and End
// aborts.
func (s *sidecar) end(ctx context.Context) (bool, error) {
	wait, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		if s.clock.Sleep(wait, sessionTimeout) == nil {
			s.session.AllowRebalance()
		}
	}()
	return s.session.End(ctx, kgo.TryCommit)
}

// abort ends the transaction in hand without committing and returns err.
func (s *sidecar) abort(ctx context.Context, err error) error {
	if _, aerr := s.session.End(ctx, kgo.TryAbort); aerr != nil {
		return errors.Join(err, fmt.Errorf("abort the transaction: %w", aerr))
	}
	return err
}

func (s *sidecar) fetchErrors(fs kgo.Fetches) {
	fs.EachError(func(topic string, p int32, err error) {
		if errors.Is(err, context.Canceled) {
			return
		}
		// At most one line every 5 s: a broker outage fails every fetch.
		now := time.Now().UnixNano()
		if last := s.lastFetchLog.Load(); now-last > int64(5*time.Second) && s.lastFetchLog.CompareAndSwap(last, now) {
			s.log.Warn("fetch", "topic", topic, "partition", p, "err", err)
		}
	})
}

// spans are the offsets a batch took, first and last by partition, as
// its debug line shows them: "orders/0:282-303 orders/1:233".
type spans map[string][2]int64

func (sp *spans) add(recs []*kgo.Record) {
	if *sp == nil {
		*sp = spans{}
	}
	for _, r := range recs {
		key := r.Topic + "/" + strconv.Itoa(int(r.Partition))
		if was, ok := (*sp)[key]; ok {
			(*sp)[key] = [2]int64{min(was[0], r.Offset), max(was[1], r.Offset)}
		} else {
			(*sp)[key] = [2]int64{r.Offset, r.Offset}
		}
	}
}

func (sp spans) String() string {
	var out []string
	for _, key := range slices.Sorted(maps.Keys(sp)) {
		if o := sp[key]; o[0] == o[1] {
			out = append(out, fmt.Sprintf("%s:%d", key, o[0]))
		} else {
			out = append(out, fmt.Sprintf("%s:%d-%d", key, o[0], o[1]))
		}
	}
	return strings.Join(out, " ")
}

func offsetSpans(recs []*kgo.Record) spans {
	var sp spans
	sp.add(recs)
	return sp
}

// failpoint is the test-only fault point STREAMS_FAILPOINT.
func (s *sidecar) failpoint() {
	s.batches++
	if s.cfg.FailAfterProduce == 0 || s.batches != s.cfg.FailAfterProduce {
		return
	}
	s.log.Warn("failpoint after-produce: SIGKILL before the commit", "batch", s.batches)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // SIGKILL is not caught
}

// handleBatch handles a poll's records, each partition's in order and the
// partitions at once, produces what they yield and waits for every
// acknowledgement. No record but each partition's first starts after
// startBy (see Config.startBy). It returns the records handled: all of
// them, or each partition's handled prefix when startBy passed or stop
// ended while the function refused connections; then next holds the
// first record not handled of each partition that has one. An error is
// a produce that failed for good.
func (s *sidecar) handleBatch(stop, work context.Context, recs []*kgo.Record, startBy time.Time) (done, next []*kgo.Record, err error) {
	n := int64(len(recs))
	s.m.consumed.Add(n)
	s.m.inFlight.Add(n)
	defer s.m.inFlight.Add(-n)

	type topicPartition struct {
		topic     string
		partition int32
	}
	var parts [][]*kgo.Record
	index := map[topicPartition]int{}
	for _, r := range recs {
		k := topicPartition{r.Topic, r.Partition}
		i, ok := index[k]
		if !ok {
			i = len(parts)
			index[k] = i
			parts = append(parts, nil)
		}
		parts[i] = append(parts[i], r)
	}

	var (
		acks     sync.WaitGroup
		mu       sync.Mutex
		produced error
		failed   atomic.Bool
	)
	promise := func(r *kgo.Record, err error) {
		if err != nil {
			mu.Lock()
			produced = errors.Join(produced, fmt.Errorf("produce to %s: %w", r.Topic, err))
			mu.Unlock()
			failed.Store(true)
		}
		acks.Done()
	}
	handled := make([]int, len(parts))
	handlePart := func(i int) error {
		for j, r := range parts[i] {
			if failed.Load() {
				return nil // the batch is lost anyway
			}
			if j > 0 && !s.clock.Now().Before(startBy) {
				return nil // read again in the next batch
			}
			began := time.Now()
			ds, err := s.handle(stop, work, r, startBy)
			if err != nil {
				return err
			}
			s.pace.observe(time.Since(began))
			for _, d := range ds {
				acks.Add(1)
				d.to.Produce(work, d.r, promise)
			}
			handled[i] = j + 1
		}
		return nil
	}
	// errFunctionAway or errStartBy only: the handled prefixes say how far.
	if len(parts) == 1 {
		_ = handlePart(0) // no goroutine to hand over to
	} else {
		var g errgroup.Group
		g.SetLimit(maxIdle)
		for i := range parts {
			g.Go(func() error { return handlePart(i) })
		}
		_ = g.Wait()
	}
	acks.Wait()
	if produced != nil {
		return nil, nil, produced
	}
	done = recs
	for i, part := range parts {
		if handled[i] < len(part) {
			next = append(next, part[handled[i]])
		}
	}
	if len(next) > 0 {
		done = nil
		for i, part := range parts {
			done = append(done, part[:handled[i]]...)
		}
	}
	return done, next, nil
}

// handle calls the function for a record until it answers or the
// attempts are spent, and returns what to produce: the answer for every
// output, nothing (dropped), or the dead letter. It fails only with
// errFunctionAway, or errStartBy once startBy passed while the function
// refused connections.
func (s *sidecar) handle(stop, work context.Context, in *kgo.Record, startBy time.Time) ([]delivery, error) {
	ev := fromRecord(in)
	ev.attrs[RevisionAttribute] = s.cfg.Revision
	backoff, refusedBackoff := s.cfg.RetryBackoff, s.cfg.RetryBackoff
	for failures := 0; ; {
		out, oc, reason, refused := s.call(work, ev)
		if refused {
			s.m.refused.Add(1)
			if !s.ready.functionDown.Swap(true) {
				s.log.Warn("the function refuses connections: waiting for it", "reason", reason)
			}
			// Not the record's fault: again, however long, unless stopping.
			if s.clock.Sleep(stop, refusedBackoff) != nil {
				return nil, errFunctionAway
			}
			if !s.clock.Now().Before(startBy) {
				return nil, errStartBy
			}
			refusedBackoff = min(2*refusedBackoff, time.Second)
			continue
		}
		if s.ready.functionDown.Swap(false) {
			s.log.Info("the function answers again")
		}
		switch oc {
		case forward:
			s.m.forwarded.Add(1)
			r := out.record(in.Key, s.cfg.Revision)
			ds := make([]delivery, len(s.outputs))
			for i, o := range s.outputs {
				c := *r
				c.Topic = o.topic
				ds[i] = delivery{o.client, &c}
			}
			return ds, nil
		case drop:
			s.m.dropped.Add(1)
			return nil, nil
		}
		s.m.failedAttempts.Add(1)
		if failures++; failures > s.cfg.Retries {
			s.m.deadLettered.Add(1)
			s.log.Warn("dead letter", "topic", in.Topic, "partition", in.Partition, "offset", in.Offset, "reason", reason)
			return []delivery{{s.deadLetter.client, s.deadLetterRecord(in, reason)}}, nil
		}
		_ = s.clock.Sleep(work, backoff) // work never ends
		backoff = min(2*backoff, MaxRetryBackoff)
	}
}

// call is one attempt. refused: the function does not listen.
func (s *sidecar) call(ctx context.Context, ev event) (event, outcome, string, bool) {
	began := time.Now()
	a, err := s.fn.call(ctx, ev, maxAnswer)
	s.m.calls.Add(1)
	s.m.callNanos.Add(int64(time.Since(began)))
	switch {
	case errors.Is(err, errRefused):
		return event{}, failed, err.Error(), true
	case errors.Is(err, os.ErrDeadlineExceeded):
		return event{}, failed, fmt.Sprintf("function gave no answer within %s", s.cfg.CallTimeout), false
	case err != nil:
		return event{}, failed, "calling the function: " + err.Error(), false
	case len(a.body) > maxAnswer:
		return event{}, failed, fmt.Sprintf("function answered %d with more than %d bytes, more than an output record may hold", a.status, maxAnswer), false
	}
	out, oc, reason := judge(a)
	return out, oc, reason, false
}

// transitHeaders are the dead-letter headers the sidecar writes.
var transitHeaders = []string{"transit_error", "transit_topic", "transit_partition", "transit_offset", "transit_revision"}

// deadLetterRecord is the input record — key, value, headers — with the
// reason and its origin (earlier transit_* headers replaced).
func (s *sidecar) deadLetterRecord(in *kgo.Record, reason string) *kgo.Record {
	h := make([]kgo.RecordHeader, 0, len(in.Headers)+len(transitHeaders))
	for _, x := range in.Headers {
		if !slices.Contains(transitHeaders, x.Key) {
			h = append(h, x)
		}
	}
	h = append(h,
		kgo.RecordHeader{Key: "transit_error", Value: []byte(reason)},
		kgo.RecordHeader{Key: "transit_topic", Value: []byte(in.Topic)},
		kgo.RecordHeader{Key: "transit_partition", Value: []byte(strconv.Itoa(int(in.Partition)))},
		kgo.RecordHeader{Key: "transit_offset", Value: []byte(strconv.FormatInt(in.Offset, 10))},
		kgo.RecordHeader{Key: "transit_revision", Value: []byte(s.cfg.Revision)},
	)
	return &kgo.Record{Key: in.Key, Value: in.Value, Headers: h, Topic: s.deadLetter.topic}
}

// String describes the configuration for a log line.
func (c Config) String() string {
	outs := make([]string, len(c.Outputs))
	for i, o := range c.Outputs {
		outs[i] = o.Topic + "@" + o.Bootstrap
	}
	return fmt.Sprintf("%s %s@%s → [%s], dead letters %s@%s, revision %s, function %s",
		c.Delivery, c.Input.Topic, c.Input.Bootstrap, strings.Join(outs, " "), c.DeadLetter.Topic, c.DeadLetter.Bootstrap, c.Revision, c.Function)
}
