package broker

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// joinKeepalive keeps a member alive while its join waits for the rest of
// the group, as Apache Kafka does (a member awaiting its join does not
// expire). kfake lets the member's session timer run meanwhile: a
// rebalance held longer than a session — a member finishing its batch
// before it rejoins, a killed member whose session has not yet run out —
// dropped every member already waiting, their joins never answered, and
// the group went on without them while their clients waited out the
// rebalance timeout (minutes) with partitions no one read. The broker
// heartbeats for each waiting member, through its own listener, until the
// join ends; a member that stops heartbeating without joining is dropped
// after its session as before.
type joinKeepalive struct {
	c    *kfake.Cluster
	cl   *kgo.Client // the broker's own client
	stop chan struct{}
	wg   sync.WaitGroup

	mu      sync.Mutex
	waiting map[[2]string]*watched // by group and member
}

// installJoinKeepalive starts keeping waiting joins alive on c, reached at
// dial: the address each advertised host:port is served on.
func installJoinKeepalive(c *kfake.Cluster, seed string, dial map[string]string) (*joinKeepalive, error) {
	var d net.Dialer
	cl, err := kgo.NewClient(kgo.SeedBrokers(seed), kgo.ClientID("streams-broker-keepalive"), noClientMetrics,
		kgo.Dialer(func(ctx context.Context, network, host string) (net.Conn, error) {
			if served, ok := dial[host]; ok {
				host = served
			}
			return d.DialContext(ctx, network, host)
		}))
	if err != nil {
		return nil, err
	}
	k := &joinKeepalive{c: c, cl: cl, stop: make(chan struct{}), waiting: map[[2]string]*watched{}}
	c.ControlKey(int16(kmsg.JoinGroup), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if r := req.(*kmsg.JoinGroupRequest); r.MemberID != "" {
			k.watch(r.Group, r.MemberID, r.InstanceID, time.Duration(r.SessionTimeoutMillis)*time.Millisecond)
		}
		return nil, nil, false // kfake handles it
	})
	return k, nil
}

var noClientMetrics = kgo.DisableClientMetrics()

// watch heartbeats for member while its join waits: while the group
// prepares the rebalance of the generation it joined in. GroupInfo runs on
// kfake's loop, as control functions do, so the watch sees what kfake made
// of the join. A member that joins again while watched (its join was
// answered, it rejoins) is watched from its new join on.
func (k *joinKeepalive) watch(group, member string, instance *string, session time.Duration) {
	key := [2]string{group, member}
	k.mu.Lock()
	defer k.mu.Unlock()
	if w, ok := k.waiting[key]; ok {
		w.joins++
		return
	}
	w := &watched{joins: 1}
	k.waiting[key] = w
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		seen, generation := 0, int32(-1)
		for {
			k.mu.Lock()
			if w.joins != seen {
				seen, generation = w.joins, -1
			}
			k.mu.Unlock()
			info := k.c.GroupInfo(group)
			waiting := info != nil && info.State == "PreparingRebalance" &&
				(generation == -1 || info.Epoch == generation) && // else answered
				slices.ContainsFunc(info.Members, func(m kfake.GroupMember) bool { return m.MemberID == member })
			if !waiting {
				k.mu.Lock()
				done := w.joins == seen
				if done {
					delete(k.waiting, key)
				}
				k.mu.Unlock()
				if done {
					return
				}
				continue
			}
			generation = info.Epoch
			if !k.heartbeat(group, member, instance, generation, session) {
				generation = -2 // no longer known: done unless it joins again
			}
			select {
			case <-k.stop:
				return
			case <-time.After(session / 4):
			}
		}
	}()
}

// watched is a member whose joins are watched.
type watched struct{ joins int }

// heartbeat refreshes member's session; false when the broker no longer
// knows it in that generation.
func (k *joinKeepalive) heartbeat(group, member string, instance *string, generation int32, session time.Duration) bool {
	req := kmsg.NewPtrHeartbeatRequest()
	req.Group, req.MemberID, req.InstanceID, req.Generation = group, member, instance, generation
	ctx, cancel := context.WithTimeout(context.Background(), session/4)
	defer cancel()
	go func() {
		select {
		case <-k.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	resp, err := req.RequestWith(ctx, k.cl)
	if err != nil {
		return true // the next tick tries again
	}
	err = kerr.ErrorForCode(resp.ErrorCode)
	return err == nil || errors.Is(err, kerr.RebalanceInProgress)
}

func (k *joinKeepalive) close() {
	close(k.stop)
	k.wg.Wait()
	k.cl.Close()
}
