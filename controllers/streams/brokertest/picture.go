package brokertest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Picture describes what a broker holds, for a failed test's log: each
// topic's partitions (end offset, and the last stable offset when an open
// transaction holds read-committed readers back), each group (state,
// members and their partitions, commits) and the transactions not yet
// ended. A stalled pipeline shows where: a commit behind an end, an LSO
// behind it, a member holding partitions.
func Picture(addr string, opts ...kgo.Opt) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.RequestRetries(1)}, opts...)...)
	if err != nil {
		return err.Error()
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var b strings.Builder
	topics, err := adm.ListTopics(ctx)
	if err != nil {
		return fmt.Sprintf("topics: %v", err)
	}
	ends, _ := adm.ListEndOffsets(ctx, topics.Names()...)
	stable, _ := adm.ListCommittedOffsets(ctx, topics.Names()...)
	for _, name := range topics.Names() {
		fmt.Fprintf(&b, "topic %s:", name)
		for _, p := range topics[name].Partitions.Numbers() {
			end, _ := ends.Lookup(name, p)
			lso, _ := stable.Lookup(name, p)
			fmt.Fprintf(&b, " %d:%d", p, end.Offset)
			if lso.Offset != end.Offset {
				fmt.Fprintf(&b, "(stable %d)", lso.Offset)
			}
		}
		b.WriteString("\n")
	}
	groups, err := adm.DescribeGroups(ctx)
	if err != nil {
		fmt.Fprintf(&b, "groups: %v\n", err)
	}
	for _, g := range groups.Sorted() {
		fmt.Fprintf(&b, "group %s %s:", g.Group, g.State)
		for _, m := range g.Members {
			assigned, _ := m.Assigned.AsConsumer()
			var parts []string
			if assigned != nil {
				for _, t := range assigned.Topics {
					parts = append(parts, fmt.Sprintf("%s%v", t.Topic, t.Partitions))
				}
			}
			fmt.Fprintf(&b, " member %s %s", m.MemberID, strings.Join(parts, ","))
		}
		commits, err := adm.FetchOffsets(ctx, g.Group)
		if err != nil {
			fmt.Fprintf(&b, " commits: %v", err)
		}
		commits.Each(func(o kadm.OffsetResponse) {
			fmt.Fprintf(&b, " commit %s/%d:%d", o.Topic, o.Partition, o.At)
		})
		b.WriteString("\n")
	}
	txns, err := adm.ListTransactions(ctx, nil, nil)
	if err != nil {
		fmt.Fprintf(&b, "transactions: %v\n", err)
		return b.String()
	}
	described, _ := adm.DescribeTransactions(ctx, txns.TransactionalIDs()...)
	for _, id := range slices.Sorted(slices.Values(txns.TransactionalIDs())) {
		d, ok := described[id]
		if !ok || d.State == "Empty" || d.State == "CompleteCommit" || d.State == "CompleteAbort" {
			continue
		}
		fmt.Fprintf(&b, "transaction %s %s since %s:", id, d.State, time.UnixMilli(d.StartTimestamp).Format("15:04:05.000"))
		for _, t := range d.Topics.Sorted() {
			fmt.Fprintf(&b, " %s%v", t.Topic, t.Partitions)
		}
		b.WriteString("\n")
	}
	return b.String()
}
