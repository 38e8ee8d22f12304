package broker

import (
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// joinDelay gives kfake Apache Kafka's group.initial.rebalance.delay.ms,
// which kfake skips: a join to an empty group waits delay, each member
// joining meanwhile extends the wait by delay (up to the rebalance
// timeout), and all of them then join at once. Pipelines, benchmarks and
// upgrades pay on this broker what a real Kafka makes them pay for every
// group that forms.
//
// The broker's own view of a group is kfake's; this one is kept from the
// requests members send: a member is live while it was seen (join, sync,
// heartbeat, commit) within its session timeout, and a group with no live
// member is empty. A member that left is gone at once.
type joinDelay struct {
	c     *kfake.Cluster
	delay time.Duration

	mu     sync.Mutex
	groups map[string]*delayedGroup
}

type delayedGroup struct {
	members map[string]*member
	// The join window, while one is open: it closes at end, which joins
	// extend up to limit.
	end, limit time.Time
}

// member is a group member as its requests show it.
type member struct {
	session time.Duration // its join's session timeout
	until   time.Time     // when its session ends, if not seen again
}

func installJoinDelay(c *kfake.Cluster, delay time.Duration) {
	d := &joinDelay{c: c, delay: delay, groups: map[string]*delayedGroup{}}
	c.ControlKey(int16(kmsg.JoinGroup), d.join)
	observe := func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		switch r := req.(type) {
		case *kmsg.HeartbeatRequest:
			d.seen(r.Group, r.MemberID)
		case *kmsg.SyncGroupRequest:
			d.seen(r.Group, r.MemberID)
		case *kmsg.OffsetCommitRequest:
			d.seen(r.Group, r.MemberID)
		case *kmsg.TxnOffsetCommitRequest:
			d.seen(r.Group, r.MemberID)
		case *kmsg.LeaveGroupRequest:
			d.left(r.Group, r.MemberID)
			for _, m := range r.Members {
				d.left(r.Group, m.MemberID)
			}
		}
		return nil, nil, false // kfake handles it
	}
	for _, k := range []kmsg.Key{kmsg.Heartbeat, kmsg.SyncGroup, kmsg.OffsetCommit, kmsg.TxnOffsetCommit, kmsg.LeaveGroup} {
		c.ControlKey(int16(k), observe)
	}
}

// join holds a join to an empty group (or one in a join window) until the
// window closes, then lets kfake handle it.
func (d *joinDelay) join(req kmsg.Request) (kmsg.Response, error, bool) { //nolint:revive // kfake.Cluster.ControlKey's signature
	d.c.KeepControl()
	r := req.(*kmsg.JoinGroupRequest)
	session := time.Duration(r.SessionTimeoutMillis) * time.Millisecond
	// A first join without a member ID is answered MEMBER_ID_REQUIRED at
	// once, as Kafka does; the join with the ID given is the one held.
	if r.Version >= 4 && r.MemberID == "" {
		return nil, nil, false
	}
	rebalance := time.Duration(r.RebalanceTimeoutMillis) * time.Millisecond
	if rebalance <= 0 {
		rebalance = session
	}
	if d.window(r.Group, r.MemberID, session, rebalance) {
		d.c.SleepControl(func() { d.waitWindow(r.Group) })
	}
	return nil, nil, false
}

// window records the join and says whether it waits: the group is empty
// (a window opens) or a window is open (it is extended).
func (d *joinDelay) window(group, joiner string, session, rebalance time.Duration) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	g := d.group(group)
	open := now.Before(g.end)
	empty := true // of live members, the joiner too when it rejoins
	for _, m := range g.members {
		if now.Before(m.until) {
			empty = false
		}
	}
	// Its session counts from the join's answer, after the window.
	g.members[joiner] = &member{session: session, until: now.Add(session + d.delay)}
	switch {
	case open:
		g.end = minTime(now.Add(d.delay), g.limit)
	case empty:
		g.end, g.limit = now.Add(d.delay), now.Add(max(rebalance, d.delay))
	default:
		return false
	}
	return true
}

// waitWindow sleeps until the group's join window closes.
func (d *joinDelay) waitWindow(group string) {
	for {
		d.mu.Lock()
		left := time.Until(d.group(group).end)
		d.mu.Unlock()
		if left <= 0 {
			return
		}
		time.Sleep(left)
	}
}

// seen marks a member live for another session.
func (d *joinDelay) seen(group, id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if m := d.group(group).members[id]; m != nil {
		m.until = maxTime(m.until, time.Now().Add(m.session))
	}
}

func (d *joinDelay) left(group, member string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.group(group).members, member)
}

func (d *joinDelay) group(name string) *delayedGroup {
	g := d.groups[name]
	if g == nil {
		g = &delayedGroup{members: map[string]*member{}}
		d.groups[name] = g
	}
	return g
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
