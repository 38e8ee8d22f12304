// Package kafka is what the streams controller asks of Kafka: topics,
// consumer groups, offsets and transactions, on any number of clusters
// (one admin client per bootstrap list). Every answer is read from the
// brokers at the time of asking; nothing is cached but the connections.
// Fence is also the sidecar's, which fences its predecessor as it starts.
package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Offsets are a topic's offsets by partition.
type Offsets map[int32]int64

// Admin asks Kafka clusters.
type Admin struct {
	// BeforeWrite, if set, is asked before each write to Kafka (a topic
	// created or deleted, a start committed, a group deleted); its error
	// stops the write. Crash tests count writes with it.
	BeforeWrite func(what string) error

	opts []kgo.Opt

	mu      sync.Mutex
	clients map[string]*kgo.Client
	secure  map[string][]kgo.Opt // by cluster (ClusterKey)
}

// New makes an Admin; opts go to every client (dialers, timeouts). A
// cluster is reached in plaintext unless Secure says otherwise.
func New(opts ...kgo.Opt) *Admin {
	return &Admin{opts: opts, clients: map[string]*kgo.Client{}, secure: map[string][]kgo.Opt{}}
}

// Secure makes the clients of the cluster bootstrap names speak s (TLS,
// SASL); call it before the Admin's first use of that cluster.
func (a *Admin) Secure(bootstrap string, s Security) error {
	opts, err := s.Opts()
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.secure[ClusterKey(bootstrap)] = opts
	return nil
}

// ClusterKey names the cluster a bootstrap list names, whatever the order
// and repeats of its brokers.
func ClusterKey(bootstrap string) string {
	var hosts []string
	for h := range strings.SplitSeq(bootstrap, ",") {
		if h = strings.TrimSpace(h); h != "" {
			hosts = append(hosts, h)
		}
	}
	slices.Sort(hosts)
	return strings.Join(slices.Compact(hosts), ",")
}

// Close closes every client.
func (a *Admin) Close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, c := range a.clients {
		c.Close()
	}
	a.clients = map[string]*kgo.Client{}
}

// client is the client of the cluster bootstrap names, with the security
// ctx gives it (WithSecurity), else Secure's, else none.
func (a *Admin) client(ctx context.Context, bootstrap string) (*kgo.Client, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	key, secure := bootstrap, a.secure[ClusterKey(bootstrap)]
	sec, own := securityFrom(ctx)[ClusterKey(bootstrap)]
	if own {
		key = bootstrap + "\x00" + sec.fingerprint()
	}
	if c, ok := a.clients[key]; ok {
		return c, nil
	}
	if own {
		var err error
		if secure, err = sec.Opts(); err != nil {
			return nil, fmt.Errorf("kafka %s: %w", bootstrap, err)
		}
	}
	seeds := strings.Split(bootstrap, ",")
	c, err := kgo.NewClient(slices.Concat([]kgo.Opt{kgo.SeedBrokers(seeds...), kgo.RequestRetries(2),
		kgo.RetryTimeout(10 * time.Second)}, a.opts, secure)...)
	if err != nil {
		return nil, fmt.Errorf("kafka %s: %w", bootstrap, err)
	}
	a.clients[key] = c
	return c, nil
}

func (a *Admin) admin(ctx context.Context, bootstrap string) (*kadm.Client, error) {
	c, err := a.client(ctx, bootstrap)
	if err != nil {
		return nil, err
	}
	return kadm.NewClient(c), nil
}

type securityKey struct{}

// WithSecurity returns ctx saying how the Admin's calls made with it reach
// clusters, by ClusterKey (a topology's own Secrets): for those clusters
// it takes the place of Secure's.
func WithSecurity(ctx context.Context, by map[string]Security) context.Context {
	return context.WithValue(ctx, securityKey{}, by)
}

func securityFrom(ctx context.Context) map[string]Security {
	by, _ := ctx.Value(securityKey{}).(map[string]Security)
	return by
}

// SecurityOf is the security ctx gives the cluster bootstrap names
// (WithSecurity), if it gives one.
func SecurityOf(ctx context.Context, bootstrap string) (Security, bool) {
	s, ok := securityFrom(ctx)[ClusterKey(bootstrap)]
	return s, ok
}

func (a *Admin) write(what string) error {
	if a.BeforeWrite == nil {
		return nil
	}
	return a.BeforeWrite(what)
}

// Reachable asks the cluster for its brokers.
func (a *Admin) Reachable(ctx context.Context, bootstrap string) error {
	adm, err := a.admin(ctx, bootstrap)
	if err != nil {
		return err
	}
	if _, err := adm.ListBrokers(ctx); err != nil {
		return fmt.Errorf("kafka %s: %w", bootstrap, err)
	}
	return nil
}

// EnsureTopic creates a topic unless it exists (with whatever partitions
// it has: more are never added behind readers' backs).
func (a *Admin) EnsureTopic(ctx context.Context, bootstrap, topic string, partitions int32) error {
	adm, err := a.admin(ctx, bootstrap)
	if err != nil {
		return err
	}
	if err := a.write("create topic " + topic); err != nil {
		return err
	}
	resp, err := adm.CreateTopic(ctx, partitions, -1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("kafka %s: create topic %s: %w", bootstrap, topic, err)
	}
	return nil
}

// Partitions is a topic's partition count; a missing topic is an error
// naming it.
func (a *Admin) Partitions(ctx context.Context, bootstrap, topic string) (int32, error) {
	adm, err := a.admin(ctx, bootstrap)
	if err != nil {
		return 0, err
	}
	md, err := adm.Metadata(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("kafka %s: metadata of %s: %w", bootstrap, topic, err)
	}
	td, ok := md.Topics[topic]
	if !ok || td.Err != nil {
		if ok && !errors.Is(td.Err, kerr.UnknownTopicOrPartition) {
			return 0, fmt.Errorf("kafka %s: topic %s: %w", bootstrap, topic, td.Err)
		}
		return 0, fmt.Errorf("kafka %s: topic %s does not exist", bootstrap, topic)
	}
	return int32(len(td.Partitions)), nil
}

// DeleteTopic deletes a topic; a missing one is no error.
func (a *Admin) DeleteTopic(ctx context.Context, bootstrap, topic string) error {
	adm, err := a.admin(ctx, bootstrap)
	if err != nil {
		return err
	}
	if err := a.write("delete topic " + topic); err != nil {
		return err
	}
	resp, err := adm.DeleteTopic(ctx, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.UnknownTopicOrPartition) {
		return fmt.Errorf("kafka %s: delete topic %s: %w", bootstrap, topic, err)
	}
	return nil
}

// GroupState is a group's state as the coordinator says (Empty, Stable,
// PreparingRebalance, CompletingRebalance, Dead) and its members' ids,
// sorted; a group that does not exist is Dead.
func (a *Admin) GroupState(ctx context.Context, bootstrap, group string) (string, []string, error) {
	adm, err := a.admin(ctx, bootstrap)
	if err != nil {
		return "", nil, err
	}
	ds, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		return "", nil, fmt.Errorf("kafka %s: describe group %s: %w", bootstrap, group, err)
	}
	d, ok := ds[group]
	if !ok {
		return "Dead", nil, nil
	}
	if d.Err != nil {
		if errors.Is(d.Err, kerr.GroupIDNotFound) {
			return "Dead", nil, nil
		}
		return "", nil, fmt.Errorf("kafka %s: describe group %s: %w", bootstrap, group, d.Err)
	}
	members := make([]string, 0, len(d.Members))
	for _, m := range d.Members {
		members = append(members, m.MemberID)
	}
	slices.Sort(members)
	return d.State, members, nil
}

// Committed is a group's committed offsets in a topic (partitions without
// a commit are absent).
func (a *Admin) Committed(ctx context.Context, bootstrap, group, topic string) (Offsets, error) {
	adm, err := a.admin(ctx, bootstrap)
	if err != nil {
		return nil, err
	}
	resp, err := adm.FetchOffsetsForTopics(ctx, group, topic)
	if err == nil {
		err = resp.Error()
	}
	if errors.Is(err, kerr.GroupIDNotFound) {
		return Offsets{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("kafka %s: offsets of group %s: %w", bootstrap, group, err)
	}
	out := Offsets{}
	for p, o := range resp[topic] {
		if o.At >= 0 {
			out[p] = o.At
		}
	}
	return out, nil
}

// Ends is the end of each partition of a topic: the high watermark, or,
// readCommitted, the last stable offset (what a read-committed reader can
// reach while a transaction is open).
func (a *Admin) Ends(ctx context.Context, bootstrap, topic string, readCommitted bool) (Offsets, error) {
	adm, err := a.admin(ctx, bootstrap)
	if err != nil {
		return nil, err
	}
	list := adm.ListEndOffsets
	if readCommitted {
		list = adm.ListCommittedOffsets
	}
	listed, err := list(ctx, topic)
	if err == nil {
		err = listed.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("kafka %s: end offsets of %s: %w", bootstrap, topic, err)
	}
	out := Offsets{}
	for p, o := range listed[topic] {
		out[p] = o.Offset
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("kafka %s: topic %s does not exist", bootstrap, topic)
	}
	return out, nil
}

// Drained says a group has read a topic to its end on every partition.
// With transactions a partition's end is past commit markers a reader
// never commits beyond, so a partition whose commit is short of its end is
// drained when nothing readable lies between the two. Read committed, a
// partition whose last stable offset is short of its end is not drained:
// records committed past a transaction still open (its writer died inside
// it, or, on Apache Kafka, its markers are not written yet) are not
// readable yet, and a reader gone before they are would lose them.
func (a *Admin) Drained(ctx context.Context, bootstrap, group, topic string, readCommitted bool) (bool, error) {
	ends, err := a.Ends(ctx, bootstrap, topic, false)
	if err != nil {
		return false, err
	}
	if readCommitted {
		stable, err := a.Ends(ctx, bootstrap, topic, true)
		if err != nil {
			return false, err
		}
		for p, end := range ends {
			if stable[p] < end {
				return false, nil
			}
		}
	}
	from, err := a.Positions(ctx, bootstrap, group, topic, ends, nil)
	if err != nil {
		return false, err
	}
	short := map[int32]kgo.Offset{}
	for p, end := range ends {
		at := from[p]
		if at >= end {
			continue
		}
		if !readCommitted {
			return false, nil
		}
		short[p] = kgo.NewOffset().At(at)
	}
	if len(short) == 0 {
		return true, nil
	}
	return a.nothingReadable(ctx, bootstrap, topic, short, ends)
}

// Positions is where the group reads each partition of parts from: its
// commit, or, never committed, where its reader begins: begin's offset
// for it (a revision's recorded start), else the partition's start (the
// sidecars reset to the start).
func (a *Admin) Positions(ctx context.Context, bootstrap, group, topic string, parts, begin Offsets) (Offsets, error) {
	committed, err := a.Committed(ctx, bootstrap, group, topic)
	if err != nil {
		return nil, err
	}
	var starts Offsets
	from := Offsets{}
	for p := range parts {
		at, ok := committed[p]
		if !ok {
			at, ok = begin[p]
		}
		if !ok {
			if starts == nil {
				if starts, err = a.Starts(ctx, bootstrap, topic); err != nil {
					return nil, err
				}
			}
			at = starts[p]
		}
		from[p] = at
	}
	return from, nil
}

// Starts is the first offset each partition of a topic still holds.
func (a *Admin) Starts(ctx context.Context, bootstrap, topic string) (Offsets, error) {
	adm, err := a.admin(ctx, bootstrap)
	if err != nil {
		return nil, err
	}
	listed, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = listed.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("kafka %s: start offsets of %s: %w", bootstrap, topic, err)
	}
	out := Offsets{}
	for p, o := range listed[topic] {
		out[p] = o.Offset
	}
	return out, nil
}

// nothingReadable reads each partition from its offset with read-committed
// isolation, keeping control records: drained when the partition's last
// offset before its end comes back as a commit or abort marker with no data
// record before it. Not reaching the end in time is an error, never
// "drained".
func (a *Admin) nothingReadable(ctx context.Context, bootstrap, topic string, from map[int32]kgo.Offset, ends Offsets) (bool, error) {
	seeds := strings.Split(bootstrap, ",")
	c, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords()}, a.opts...)...)
	if err != nil {
		return false, fmt.Errorf("kafka %s: %w", bootstrap, err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	pending := len(from)
	readable := false
	for pending > 0 && !readable {
		fs := c.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return false, fmt.Errorf("kafka %s: read %s to its end: %w", bootstrap, topic, err)
		}
		if err := fs.Err(); err != nil {
			return false, fmt.Errorf("kafka %s: read %s: %w", bootstrap, topic, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			end := ends[r.Partition]
			if r.Offset >= end {
				return
			}
			if !r.Attrs.IsControl() {
				readable = true
			}
			if r.Offset == end-1 {
				pending--
			}
		})
	}
	return !readable, nil
}

// DeleteGroup deletes a consumer group; a missing one is no error.
func (a *Admin) DeleteGroup(ctx context.Context, bootstrap, group string) error {
	adm, err := a.admin(ctx, bootstrap)
	if err != nil {
		return err
	}
	if err := a.write("delete group " + group); err != nil {
		return err
	}
	resp, err := adm.DeleteGroup(ctx, group)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		return fmt.Errorf("kafka %s: delete group %s: %w", bootstrap, group, err)
	}
	return nil
}

// OpenTransactions lists the transactional IDs that have a transaction
// open (Ongoing) on the cluster.
func (a *Admin) OpenTransactions(ctx context.Context, bootstrap string) ([]string, error) {
	return a.transactions(ctx, bootstrap, "Ongoing")
}

// UnfinishedTransactions lists the transactional IDs whose transaction has
// not ended: open, or ending (its markers and offsets not all written).
func (a *Admin) UnfinishedTransactions(ctx context.Context, bootstrap string) ([]string, error) {
	return a.transactions(ctx, bootstrap, "Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence")
}

func (a *Admin) transactions(ctx context.Context, bootstrap string, states ...string) ([]string, error) {
	adm, err := a.admin(ctx, bootstrap)
	if err != nil {
		return nil, err
	}
	listed, err := adm.ListTransactions(ctx, nil, states)
	if err != nil {
		return nil, fmt.Errorf("kafka %s: list transactions: %w", bootstrap, err)
	}
	var ids []string
	for _, l := range listed.Sorted() {
		if slices.Contains(states, l.State) { // ListTransactions v0 has no filter
			ids = append(ids, l.TxnID)
		}
	}
	return ids, nil
}

// FenceTransactions aborts the open transactions of transactional IDs
// whose producers are gone (see Fence).
func (a *Admin) FenceTransactions(ctx context.Context, bootstrap string, txnIDs ...string) error {
	cl, err := a.client(ctx, bootstrap)
	if err != nil {
		return err
	}
	for _, id := range txnIDs {
		if err := a.write("fence transactional id " + id); err != nil {
			return err
		}
		if err := Fence(ctx, cl, id, fenceTimeout); err != nil {
			return fmt.Errorf("kafka %s: %w", bootstrap, err)
		}
	}
	return nil
}

// fenceTimeout is the transaction timeout the fence of a gone pod's
// transactional ID registers: nothing runs under it.
const fenceTimeout = time.Minute

// Fence makes txnID's earlier producers zombies: InitProducerID bumps its
// epoch, and the coordinator aborts the transaction a producer that died
// left open (Java's initTransactions does the same). Until then
// read-committed readers of every partition that transaction wrote stop
// at it, for up to its timeout. A live producer of txnID is fenced too:
// its next transactional request fails. timeout is the transaction
// timeout txnID's next transactions run under (kfake keeps the first one
// registered).
func Fence(ctx context.Context, cl *kgo.Client, txnID string, timeout time.Duration) error {
	req := kmsg.NewPtrInitProducerIDRequest()
	req.TransactionalID = &txnID
	req.TransactionTimeoutMillis = int32(timeout.Milliseconds())
	req.ProducerID, req.ProducerEpoch = -1, -1
	for {
		resp, err := req.RequestWith(ctx, cl)
		if err == nil {
			err = kerr.ErrorForCode(resp.ErrorCode)
		}
		switch {
		case err == nil:
			return nil
		case !errors.Is(err, kerr.ConcurrentTransactions):
			return fmt.Errorf("fence transactional id %s: %w", txnID, err)
		}
		// The coordinator is still ending the open transaction; asked
		// again, it answers once that is done.
		select {
		case <-ctx.Done():
			return fmt.Errorf("fence transactional id %s: %w", txnID, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
