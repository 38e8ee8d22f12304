// Package broker is streams-broker: a one-process Kafka-protocol broker for
// development clusters, built on franz-go's kfake.
//
// kfake calls itself a test fake: one process, no replication, timings kinder
// than Apache Kafka's (it skips group.initial.rebalance.delay.ms, which this
// package adds back: Options.InitialRebalanceDelay). transit
// installs it only when a streams addon names no `bootstrap`, and says so;
// production pipelines point `bootstrap` at a real Kafka.
//
// kfake binds and advertises 127.0.0.1; this package serves it on any address
// and advertises the name clients must dial (in a cluster, the Service's DNS
// name), so pods on other nodes reach it.
//
// kfake lets a member waiting in a join expire after its session, which
// Kafka does not: this package heartbeats for it (see joinKeepalive).
//
// After a crash kfake aborts the transactions that were open without writing
// their abort markers; this package writes them before it serves (see
// repairAborts).
package broker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Options configure the broker.
type Options struct {
	// Listen is the TCP address to serve on, e.g. ":9092".
	Listen string
	// Advertise is host:port clients are told to dial (metadata, group
	// coordinators); it defaults to Listen's address.
	Advertise string
	// DataDir keeps topics, offsets, groups and transactions across restarts;
	// empty keeps them in memory only.
	DataDir string
	// SyncWrites fsyncs every produced batch (durable across a machine crash,
	// not only a process crash).
	SyncWrites bool
	// Partitions is the partition count of topics created without one.
	Partitions int
	// Logger receives kfake's log lines; nil logs nothing.
	Logger kfake.Logger
	// Brokers is how many brokers serve (default 1): with more, each
	// partition has a leader among them and groups and transactions a
	// coordinator, which MoveCoordinators moves (development on one
	// machine: no Advertise).
	Brokers int
	// InitialRebalanceDelay is Apache Kafka's
	// group.initial.rebalance.delay.ms (3 s there; streams-broker's flag
	// defaults to it): how long the first join to an empty group waits
	// for more members. 0 joins at once, as kfake alone does.
	InitialRebalanceDelay time.Duration
}

// Broker is a running broker.
type Broker struct {
	cluster   *kfake.Cluster
	keepalive *joinKeepalive
	addr      string
}

// Start serves a broker until Close. With a data dir, it first repairs
// what a crash left (see repairAborts).
func Start(ctx context.Context, opts Options) (*Broker, error) {
	n := max(opts.Brokers, 1)
	if n > 1 && opts.Advertise != "" {
		return nil, fmt.Errorf("-advertise names one broker's address: with %d brokers each advertises its own listener (development on one machine)", n)
	}
	if opts.DataDir != "" {
		if err := repair(ctx, opts); err != nil {
			return nil, fmt.Errorf("repair the data dir %s: %w", opts.DataDir, err)
		}
	}
	lns, err := listen(opts.Listen, n)
	if err != nil {
		return nil, err
	}
	advertise := opts.Advertise
	if advertise == "" {
		advertise = lns[0].Addr().String()
	}
	host, portText, err := net.SplitHostPort(advertise)
	port, perr := strconv.Atoi(portText)
	if err != nil || perr != nil || host == "" || port <= 0 || port > 65535 {
		closeAll(lns)
		return nil, fmt.Errorf("advertised address %q: want host:port", advertise)
	}
	// The first broker is known by the advertised port, its listener
	// reporting the advertised address as its own.
	ports := []int{port}
	for _, ln := range lns[1:] {
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	addr := lns[0].Addr().String()
	lns[0] = advertised{Listener: lns[0], addr: hostPort(advertise)}
	c, err := kfake.NewCluster(append(onListeners(ports, lns), opts.kfake()...)...)
	if err != nil {
		closeAll(lns)
		return nil, fmt.Errorf("start the broker: %w", err)
	}
	if opts.InitialRebalanceDelay > 0 {
		installJoinDelay(c, opts.InitialRebalanceDelay)
	}
	self := dialable(addr)
	keepalive, err := installJoinKeepalive(c, self, map[string]string{advertise: self})
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("start the broker: %w", err)
	}
	return &Broker{cluster: c, keepalive: keepalive, addr: addr}, nil
}

// dialable is how this process reaches a listener on addr: on loopback
// when it listens on every address.
func dialable(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		return net.JoinHostPort("127.0.0.1", port)
	}
	return addr
}

// onListeners has kfake serve broker i on lns[i], known by ports[i]:
// kfake asks for 127.0.0.1:port of each port and gets that listener.
func onListeners(ports []int, lns []net.Listener) []kfake.Opt {
	byPort := map[string]net.Listener{}
	for i, p := range ports {
		byPort[strconv.Itoa(p)] = lns[i]
	}
	return []kfake.Opt{
		kfake.NumBrokers(len(lns)),
		kfake.Ports(ports...),
		kfake.ListenFn(func(_, address string) (net.Listener, error) {
			_, p, _ := net.SplitHostPort(address)
			ln, ok := byPort[p]
			if !ok {
				return nil, fmt.Errorf("streams-broker has no listener for %s", address)
			}
			delete(byPort, p)
			return ln, nil
		}),
	}
}

func closeAll(lns []net.Listener) {
	for _, ln := range lns {
		ln.Close()
	}
}

// listen makes n listeners: on addr, then n-1 more on its host, at ports
// the system picks.
func listen(addr string, n int) ([]net.Listener, error) {
	first, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	lns := []net.Listener{first}
	host, _, _ := net.SplitHostPort(addr)
	for len(lns) < n {
		ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			closeAll(lns)
			return nil, fmt.Errorf("listen on %s for broker %d: %w", host, len(lns), err)
		}
		lns = append(lns, ln)
	}
	return lns, nil
}

// kfake are the options of opts that are kfake's own.
func (opts Options) kfake() []kfake.Opt {
	var kopts []kfake.Opt
	if opts.DataDir != "" {
		kopts = append(kopts, kfake.DataDir(opts.DataDir))
	}
	if opts.SyncWrites {
		kopts = append(kopts, kfake.SyncWrites())
	}
	if opts.Partitions > 0 {
		kopts = append(kopts, kfake.DefaultNumPartitions(opts.Partitions))
	}
	if opts.Logger != nil {
		kopts = append(kopts, kfake.WithLogger(opts.Logger))
	}
	return kopts
}

// repair loads the data dir into a broker only this process reaches, writes
// the abort markers a crash left out (repairAborts) and closes it: no
// client sees the log before it is whole.
func repair(ctx context.Context, opts Options) error {
	lns, err := listen("127.0.0.1:0", max(opts.Brokers, 1))
	if err != nil {
		return err
	}
	var ports []int
	for _, ln := range lns {
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	c, err := kfake.NewCluster(append(onListeners(ports, lns), opts.kfake()...)...)
	if err != nil {
		closeAll(lns)
		return fmt.Errorf("load: %w", err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, repairTimeout)
	defer cancel()
	return repairAborts(ctx, lns[0].Addr().String())
}

// repairTimeout bounds reading the log through at a start.
const repairTimeout = 5 * time.Minute

// repairAborts writes an abort marker where a transaction was aborted
// without one. kfake, loading a log after a crash, aborts the transactions
// that were open (as Kafka's coordinator does) but writes no markers, only
// its index of aborted ranges. A read-committed reader (franz-go, the Java
// client) drops a producer's batches from an aborted range's start until
// that producer's abort marker: without one it drops everything the same
// producer (a restarted one with the same transactional ID) commits after
// the crash, and a group reading so commits past records it never saw.
//
// A producer's last batch in a partition is a transaction's data with no
// marker after it only if the transaction is open (kfake keeps open only
// what a clean shutdown saved) or was aborted that way.
func repairAborts(ctx context.Context, addr string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.KeepControlRecords(),
		kgo.FetchIsolationLevel(kgo.ReadUncommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	starts, err := adm.ListStartOffsets(ctx)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return fmt.Errorf("start offsets: %w", err)
	}
	ends, err := adm.ListEndOffsets(ctx)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return fmt.Errorf("end offsets: %w", err)
	}
	open, err := adm.ListTransactions(ctx, nil, []string{"Ongoing"})
	if err != nil {
		return fmt.Errorf("open transactions: %w", err)
	}
	ongoing := map[int64]bool{}
	for _, t := range open {
		ongoing[t.ProducerID] = true
	}

	// Read every partition to its end: per producer, its last
	// transactional batch and whether that is data (not a marker).
	type last struct {
		epoch int16
		data  bool
	}
	type tp struct {
		topic     string
		partition int32
	}
	lasts := map[tp]map[int64]last{}
	from := map[string]map[int32]kgo.Offset{}
	pending := 0
	ends.Each(func(o kadm.ListedOffset) {
		if start, _ := starts.Lookup(o.Topic, o.Partition); start.Offset < o.Offset {
			if from[o.Topic] == nil {
				from[o.Topic] = map[int32]kgo.Offset{}
			}
			from[o.Topic][o.Partition] = kgo.NewOffset().AtStart()
			pending++
		}
	})
	cl.AddConsumePartitions(from)
	for pending > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("read the log: %w", err)
		}
		if err := fs.Err(); err != nil {
			return fmt.Errorf("read the log: %w", err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			k := tp{r.Topic, r.Partition}
			if r.Attrs.IsTransactional() {
				if lasts[k] == nil {
					lasts[k] = map[int64]last{}
				}
				lasts[k][r.ProducerID] = last{r.ProducerEpoch, !r.Attrs.IsControl()}
			}
			if end, _ := ends.Lookup(r.Topic, r.Partition); r.Offset == end.Offset-1 {
				pending--
			}
		})
	}

	var markers []kadm.TxnMarkers
	for k, producers := range lasts {
		for pid, l := range producers {
			if l.data && !ongoing[pid] {
				markers = append(markers, kadm.TxnMarkers{ProducerID: pid, ProducerEpoch: l.epoch,
					Topics: kadm.TopicsSet{k.topic: {k.partition: {}}}})
			}
		}
	}
	if len(markers) == 0 {
		return nil
	}
	written, err := adm.WriteTxnMarkers(ctx, markers...)
	if err != nil {
		return fmt.Errorf("write abort markers: %w", err)
	}
	var errs []error
	written.EachPartition(func(p kadm.TxnMarkersPartitionResponse) {
		if p.Err != nil {
			errs = append(errs, fmt.Errorf("abort marker of producer %d in %s/%d: %w", p.ProducerID, p.Topic, p.Partition, p.Err))
		}
	})
	return errors.Join(errs...)
}

// Addr is the address the broker listens on.
func (b *Broker) Addr() string { return b.addr }

// MoveCoordinators moves every group's and transactional ID's coordinator
// to another of the brokers, as a coordinator's crash does on Kafka:
// clients find it again (NOT_COORDINATOR) in the middle of joins,
// commits and transactions. Partition leaders stay: kfake answers
// OffsetForLeaderEpoch after a leader change with offset 0 (a consumer
// told so re-reads its partition from the start, duplicating what it
// had done), where Apache Kafka answers where the epoch ended, so leader
// moves on this broker would test kfake, not transit.
func (b *Broker) MoveCoordinators() { b.cluster.RehashCoordinators() }

// Close stops serving and, with a data dir, writes what is still unsaved.
func (b *Broker) Close() {
	b.keepalive.close() // before the cluster: it asks kfake's loop
	b.cluster.Close()
}

// advertised is a listener that names the advertised address as its own:
// kfake puts a listener's address in metadata and coordinator answers.
type advertised struct {
	net.Listener
	addr net.Addr
}

func (a advertised) Addr() net.Addr { return a.addr }

type hostPort string

func (hostPort) Network() string  { return "tcp" }
func (h hostPort) String() string { return string(h) }
