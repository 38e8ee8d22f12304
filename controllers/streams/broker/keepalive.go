package broker

import (
	"bytes"
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
// join is answered; a member that stops heartbeating without a join
// waiting is dropped after its session as before.
//
// A join waits in the generation the group had when it came (a rebalance
// starts in it; only the join's answer moves it on), so the broker
// heartbeats in that generation, and stops at the first answer that is not
// REBALANCE_IN_PROGRESS: the generation moved on (answered), the group is
// stable again or completing, or the member is gone.
//
// A join answered at once (a follower rejoining a stable group with the
// same metadata, or any member while the group completes) keeps the
// generation: a heartbeat in it that comes late — a loaded machine, a
// first answer lost — meets the next rebalance and cannot tell it from a
// join still waiting, and a member that died meanwhile was kept alive
// until the rebalance timeout, holding that rebalance (run 29). Such a join is not kept alive:
// the broker knows it as kfake does, from the group's state, its leader
// (who sends the assignments) and the member's last join. When a
// generation's leader left, kfake names every member leader of the next
// (each then sends assignments, one counts): a join of any of them is
// kept alive, as before.
type joinKeepalive struct {
	c    *kfake.Cluster
	cl   *kgo.Client // the broker's own client
	stop chan struct{}
	wg   sync.WaitGroup
	// firstBeat delays each keepalive's first heartbeat (tests: a
	// loaded machine).
	firstBeat time.Duration

	mu      sync.Mutex
	waiting map[[2]string]*watched // by group and member
	// joins are each member's last join's protocols, by group and
	// member; leaders the members that sent assignments in each
	// group's latest generation.
	joins   map[[2]string][]kmsg.JoinGroupRequestProtocol
	leaders map[string]*generationLeaders
}

// generationLeaders are the members that sent assignments in a
// generation.
type generationLeaders struct {
	generation int32
	members    map[string]bool
}

// watched is a member whose latest join is kept alive.
type watched struct{ join int }

// installJoinKeepalive starts keeping waiting joins alive on c, reached at
// seed; dial maps each advertised host:port to where it is served.
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
	k := &joinKeepalive{c: c, cl: cl, stop: make(chan struct{}), waiting: map[[2]string]*watched{},
		joins: map[[2]string][]kmsg.JoinGroupRequestProtocol{}, leaders: map[string]*generationLeaders{}}
	c.ControlKey(int16(kmsg.JoinGroup), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.JoinGroupRequest)
		if r.MemberID == "" {
			return nil, nil, false // answered MEMBER_ID_REQUIRED at once
		}
		// Control functions run beside kfake's loop, which answers
		// GroupInfo meanwhile: this is the group before the join.
		info := c.GroupInfo(r.Group)
		if k.answeredAtOnce(r, info) {
			return nil, nil, false
		}
		generation := int32(0)
		if info != nil {
			generation = info.Epoch
		}
		k.keep(r.Group, r.MemberID, r.InstanceID, generation, time.Duration(r.SessionTimeoutMillis)*time.Millisecond)
		return nil, nil, false // kfake handles it
	})
	c.ControlKey(int16(kmsg.SyncGroup), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if r := req.(*kmsg.SyncGroupRequest); len(r.GroupAssignment) > 0 {
			k.mu.Lock()
			l := k.leaders[r.Group]
			if l == nil || r.Generation != l.generation {
				l = &generationLeaders{generation: r.Generation, members: map[string]bool{}}
				k.leaders[r.Group] = l
			}
			l.members[r.MemberID] = true
			k.mu.Unlock()
		}
		return nil, nil, false // kfake handles it
	})
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		for {
			select {
			case <-k.stop:
				return
			case <-time.After(forgetEvery):
				k.forgetEmptyGroups()
			}
		}
	}()
	return k, nil
}

// forgetEvery is how often the keepalive forgets groups left empty.
const forgetEvery = time.Minute

// forgetEmptyGroups drops what is remembered of groups without members
// (an old topology revision's): a group that empties gets no join that
// would prune it, and each would stay for the broker's life. A join that
// comes meanwhile may be forgotten with its group: its member's next
// join is then kept alive, as after a restart.
func (k *joinKeepalive) forgetEmptyGroups() {
	k.mu.Lock()
	groups := k.remembered()
	k.mu.Unlock()
	for group := range groups {
		if info := k.c.GroupInfo(group); info != nil && len(info.Members) > 0 {
			continue
		}
		k.mu.Lock()
		for key := range k.joins {
			if key[0] == group {
				delete(k.joins, key)
			}
		}
		delete(k.leaders, group)
		k.mu.Unlock()
	}
}

// remembered are the groups whose joins or assignment senders are
// remembered; k.mu is held.
func (k *joinKeepalive) remembered() map[string]bool {
	groups := map[string]bool{}
	for key := range k.joins {
		groups[key[0]] = true
	}
	for group := range k.leaders {
		groups[group] = true
	}
	return groups
}

// answeredAtOnce records r as its member's last join and says whether
// kfake answers it at once, info being the group before it: a member of
// a stable group other than its leader, or of a completing one, whose
// protocols are those of its last join. A leader not seen since the
// broker started could be this member (the join is kept alive).
func (k *joinKeepalive) answeredAtOnce(r *kmsg.JoinGroupRequest, info *kfake.GroupInfo) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	key := [2]string{r.Group, r.MemberID}
	last, seen := k.joins[key]
	k.joins[key] = r.Protocols
	if info == nil {
		return false
	}
	members := make(map[string]bool, len(info.Members))
	for _, m := range info.Members {
		members[m.MemberID] = true
	}
	// Forget the joins of members the group no longer has.
	for other := range k.joins {
		if other[0] == r.Group && other != key && !members[other[1]] {
			delete(k.joins, other)
		}
	}
	if !members[r.MemberID] || !seen || !sameProtocols(last, r.Protocols) {
		return false
	}
	switch info.State {
	case "CompletingRebalance":
		return true
	case "Stable":
		l := k.leaders[r.Group]
		return l != nil && !l.members[r.MemberID]
	}
	return false
}

func sameProtocols(a, b []kmsg.JoinGroupRequestProtocol) bool {
	return slices.EqualFunc(a, b, func(x, y kmsg.JoinGroupRequestProtocol) bool {
		return x.Name == y.Name && bytes.Equal(x.Metadata, y.Metadata)
	})
}

var noClientMetrics = kgo.DisableClientMetrics()

// keep heartbeats for member in generation while its join waits. A later
// join of the same member takes over.
func (k *joinKeepalive) keep(group, member string, instance *string, generation int32, session time.Duration) {
	key := [2]string{group, member}
	k.mu.Lock()
	defer k.mu.Unlock()
	w := k.waiting[key]
	if w == nil {
		w = &watched{}
		k.waiting[key] = w
	}
	w.join++
	join := w.join
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		select {
		case <-k.stop:
			return
		case <-time.After(k.firstBeat):
		}
		for {
			k.mu.Lock()
			superseded := w.join != join
			k.mu.Unlock()
			if superseded || !k.heartbeat(group, member, instance, generation, session) {
				break
			}
			select {
			case <-k.stop:
				return
			case <-time.After(session / 4):
			}
		}
		k.mu.Lock()
		if w.join == join {
			delete(k.waiting, key)
		}
		k.mu.Unlock()
	}()
}

// heartbeat refreshes member's session; false once the answer says its
// join no longer waits. The request comes after the join on kfake's loop.
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
		return true // no answer: again at the next tick (or the stop)
	}
	return errors.Is(kerr.ErrorForCode(resp.ErrorCode), kerr.RebalanceInProgress)
}

func (k *joinKeepalive) close() {
	close(k.stop)
	k.wg.Wait()
	k.cl.Close()
}
