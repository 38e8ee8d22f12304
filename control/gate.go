package control

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/cloudtransit/transit/districts"
)

// readyGate admits the drains of ready members (actions with KeepReady)
// against the platform's latest answer: a drain starts only while, without
// its node, at least KeepReady members of the role are ready, not counting
// the nodes this round removes. It asks the platform again only when that
// can change the answer, after one of the round's joins ended, and waits
// for joins of the role still running; so a node leaves as soon as its
// replacement serves, and a member that turned unhealthy since the round
// began is never drained on the round's old count.
type readyGate struct {
	look func(context.Context) (map[string]string, error)

	mu sync.Mutex
	// ready holds the role of each node that was a ready, schedulable
	// member at the last look. After a failed look nothing is known
	// (lookErr): the world went on, the last answer is no longer true.
	ready   map[string]string
	lookErr error
	// leaving holds the nodes this round removes: admitted drains and
	// every removal that needs no admission.
	leaving map[string]bool
	// joining holds the nodes this round joins until their join
	// succeeded: only then do they count, labelled as cluster.json wants,
	// whatever the platform says before.
	joining map[string]bool
	// pending counts the round's joins per role still running; ended the
	// joins that ended, looked how many had when the platform was last
	// asked. wake is closed when a join ends.
	pending       map[string]int
	ended, looked int
	wake          chan struct{}
}

// newReadyGate starts from the round's observation (s, whose phases the
// platform reported) and the plan's joins and removals.
func newReadyGate(s districts.Resources, p Plan, look func(context.Context) (map[string]string, error)) *readyGate {
	g := &readyGate{look: look, ready: map[string]string{}, leaving: map[string]bool{}, joining: map[string]bool{},
		pending: map[string]int{}, wake: make(chan struct{})}
	for _, n := range liveNodes(s) {
		if n.Phase == districts.PhaseJoined {
			g.ready[n.ID] = n.Role
		}
	}
	gated := map[string]bool{}
	for _, a := range p.Actions {
		if a.Kind == KindDrain && a.KeepReady > 0 {
			gated[a.Node] = true
		}
	}
	for _, a := range p.Actions {
		switch a.Kind {
		case KindJoin:
			g.pending[a.Role]++
			g.joining[a.Node] = true
		case KindDrain, KindRemove, KindTerminate:
			if !gated[a.Node] {
				g.leaving[a.Node] = true
			}
		}
	}
	return g
}

// joinEnded counts the round's join a as ended; ok says it succeeded.
func (g *readyGate) joinEnded(a Action, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.pending[a.Role] > 0 {
		g.pending[a.Role]--
	}
	if ok {
		delete(g.joining, a.Node)
	}
	g.ended++
	close(g.wake)
	g.wake = make(chan struct{})
}

// joinsOver says no join of the round runs any more (some may not have
// started at all).
func (g *readyGate) joinsOver() {
	g.mu.Lock()
	defer g.mu.Unlock()
	clear(g.pending)
	close(g.wake)
	g.wake = make(chan struct{})
}

// admit decides a wave's drains together, against one answer of the
// platform: a drain goes when its node is no ready member (it costs
// nothing) or, without it and the wave's drains before it, at least
// KeepReady members of its role are ready. While a drain cannot go and a
// join of the round could change that, it asks the platform again or
// waits for the join (telling wait what it waits for). It returns, per
// drain, why it may not go ("" when it may); admitted nodes count as
// leaving.
func (g *readyGate) admit(ctx context.Context, drains []Action, wait func(string)) ([]string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for {
		short := g.decide(drains)
		switch {
		case len(short) == 0:
		case g.ended > g.looked:
			g.looked = g.ended
			g.mu.Unlock()
			ready, err := g.look(ctx)
			g.mu.Lock()
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			g.ready, g.lookErr = ready, err
			continue
		case slices.ContainsFunc(short, func(s shortfall) bool { return g.pending[s.role] > 0 }):
			s := short[0]
			msg := fmt.Sprintf("the drain of node %s waits until %d other %ss are ready: the platform reports %d, %d join(s) of the round still run",
				s.node, s.keep, s.role, s.others, g.pending[s.role])
			if g.lookErr != nil {
				msg = fmt.Sprintf("the drain of node %s waits: asking the platform which members are ready failed (%v), %d join(s) of the round still run",
					s.node, g.lookErr, g.pending[s.role])
			}
			wait(msg)
			wake := g.wake
			g.mu.Unlock()
			select {
			case <-wake:
			case <-ctx.Done():
			}
			g.mu.Lock()
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			continue
		}
		why := make([]string, len(drains))
		for _, s := range short {
			why[s.i] = fmt.Sprintf("the platform reports %d other ready %s(s) and %d must stay ready; the node stays until a later round", s.others, s.role, s.keep)
			if g.lookErr != nil {
				why[s.i] = fmt.Sprintf("asking the platform which members are ready failed: %v; the node stays until a later round", g.lookErr)
			}
		}
		for i, a := range drains {
			if why[i] == "" {
				g.leaving[a.Node] = true
			}
		}
		return why, nil
	}
}

// shortfall is a drain that may not go: drains[i] of node, whose role has
// others ready where it must keep keep.
type shortfall struct {
	i            int
	node, role   string
	others, keep int
}

// decide judges drains against the last answer, in order.
func (g *readyGate) decide(drains []Action) []shortfall {
	leaving := maps.Clone(g.leaving)
	var out []shortfall
	for i, a := range drains {
		others := 0
		for id, role := range g.ready {
			if role == a.Role && !leaving[id] && !g.joining[id] && id != a.Node {
				others++
			}
		}
		if _, ready := g.ready[a.Node]; g.lookErr != nil || ready && others < a.KeepReady {
			out = append(out, shortfall{i: i, node: a.Node, role: a.Role, others: others, keep: a.KeepReady})
			continue
		}
		leaving[a.Node] = true
	}
	return out
}
