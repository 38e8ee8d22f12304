package control

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// heldJoins holds the joins of the nodes it names until the test releases
// them (or only their labels, which follow the join), and reports the
// nodes in notReady as not ready whatever the platform says: a node the
// platform lists, but that does not serve yet.
type heldJoins struct {
	provider.Platform
	mu       sync.Mutex
	held     map[string]chan struct{}
	labels   map[string]chan struct{}
	notReady map[string]bool
}

func newHeldJoins(p provider.Platform, ids ...string) *heldJoins {
	h := &heldJoins{Platform: p, held: map[string]chan struct{}{}, labels: map[string]chan struct{}{}, notReady: map[string]bool{}}
	for _, id := range ids {
		h.held[id] = make(chan struct{})
	}
	return h
}

func (h *heldJoins) release(id string) { close(h.held[id]) }

func (h *heldJoins) holdLabel(id string) { h.labels[id] = make(chan struct{}) }

func (h *heldJoins) releaseLabel(id string) { close(h.labels[id]) }

func (h *heldJoins) Label(ctx context.Context, n districts.Node, labels map[string]string) error {
	if ch, ok := h.labels[n.ID]; ok {
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return h.Platform.Label(ctx, n, labels)
}

func (h *heldJoins) setReady(id string, ready bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.notReady[id] = !ready
}

func (h *heldJoins) Join(ctx context.Context, n districts.Node) error {
	if ch, ok := h.held[n.ID]; ok {
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return h.Platform.Join(ctx, n)
}

func (h *heldJoins) Members(ctx context.Context, nodes []districts.Node) ([]provider.Member, error) {
	list, err := h.Platform.Members(ctx, nodes)
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range list {
		if h.notReady[list[i].NodeID] {
			list[i].Ready = false
		}
	}
	return list, err
}

// events records a run's action events as "phase kind node", in order.
type events struct {
	mu   sync.Mutex
	log  []string
	skip map[string]string // node -> why its drain was skipped
	seen chan string       // every event, for tests that wait for one
}

func newEvents() *events {
	return &events{skip: map[string]string{}, seen: make(chan string, 1000)}
}

func (e *events) on(ev Event) {
	var line string
	switch ev.Type {
	case EventAction:
		line = fmt.Sprintf("%s %s %s", ev.Phase, ev.Action.Kind, ev.Action.Node)
	case EventWait:
		line = "wait " + ev.Message
	default:
		return
	}
	e.mu.Lock()
	e.log = append(e.log, line)
	if ev.Type == EventAction && ev.Phase == PhaseSkip && ev.Action.Kind == KindDrain {
		e.skip[ev.Action.Node] = ev.Error
	}
	e.mu.Unlock()
	e.seen <- line
}

func (e *events) index(line string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Index(e.log, line)
}

// waitFor waits until an event starting with prefix happened.
func (e *events) waitFor(t *testing.T, prefix string, within time.Duration) bool {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case line := <-e.seen:
			if strings.HasPrefix(line, prefix) {
				return true
			}
		case <-deadline:
			return false
		}
	}
}

// applyInBackground starts Apply; the returned func waits for its end.
func applyInBackground(t *testing.T, opts Options) func() (Result, error) {
	type outcome struct {
		res Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := Apply(t.Context(), opts)
		done <- outcome{res, err}
	}()
	return func() (Result, error) {
		o := <-done
		return o.res, o.err
	}
}

// migration is 1 master and 3 gce workers, moving to 3 aws workers with
// max_surge 3: all replacements launch at once, nothing is spare.
func migration(t *testing.T) (*harness, districts.Cluster, []string) {
	h := newTestHarness(t)
	h.mustConverge(paperCluster(1, 3, 0))
	old := h.nodeIDs("worker")
	c := withStrategy(paperCluster(1, 0, 3), 3, 1)
	h.prepare(c)
	return h, c, old
}

// A replaced worker leaves as soon as a replacement is ready, while the
// other replacements still join, not a round after all of them joined.
func TestReplacedNodesLeaveAsReplacementsJoin(t *testing.T) {
	t.Parallel()
	h, c, old := migration(t)
	opts := h.options(c)
	p := newHeldJoins(opts.Platform, "paper-worker-4", "paper-worker-5", "paper-worker-6")
	opts.Platform = p
	ev := newEvents()
	opts.OnEvent = ev.on
	wait := applyInBackground(t, opts)
	p.release("paper-worker-4")
	drained := ev.waitFor(t, "finish drain ", 5*time.Second)
	p.release("paper-worker-5")
	p.release("paper-worker-6")
	res, err := wait()
	if err != nil || !res.Converged {
		t.Fatalf("apply: converged=%v err=%v", res.Converged, err)
	}
	if !drained {
		t.Fatalf("no old worker was drained while two replacements were still joining: %v", ev.log)
	}
	if res.Rounds != 2 {
		t.Log(ev.log)
		t.Errorf("%d rounds, want 2: the first does the whole move, the second finds nothing to do", res.Rounds)
	}
	// Each old worker's drain started after as many replacements joined:
	// the platform's ready count, not the plan, let it go.
	joined := 0
	for _, line := range ev.log {
		switch {
		case strings.HasPrefix(line, "finish join "):
			joined++
		case strings.HasPrefix(line, "start drain "):
			if joined == 0 {
				t.Errorf("%s before any replacement joined: %v", line, ev.log)
			}
			joined--
		}
	}
	for _, id := range old {
		if ev.index("finish terminate "+id) < 0 {
			t.Errorf("old worker %s was not terminated: %v", id, ev.log)
		}
	}
	h.checkConverged(c)
}

// A replacement that joined but that the platform does not report ready
// stands in for no one: the node it replaces stays, and the round says
// why; a later run moves it once the platform reports the replacement
// ready.
func TestJoinedButNotReadyReplacesNoOne(t *testing.T) {
	t.Parallel()
	h, c, old := migration(t)
	opts := h.options(c)
	p := newHeldJoins(opts.Platform)
	p.setReady("paper-worker-6", false)
	opts.Platform = p
	opts.MaxRounds = 1
	ev := newEvents()
	opts.OnEvent = ev.on
	if _, err := Apply(t.Context(), opts); err == nil {
		t.Fatal("apply converged with a replacement not ready")
	}
	var drained, stayed []string
	for _, id := range old {
		switch why := ev.skip[id]; {
		case why != "":
			if !strings.Contains(why, "2 other ready worker(s) and 3 must stay ready") {
				t.Errorf("%s skipped because %q, want the ready count", id, why)
			}
			stayed = append(stayed, id)
		case ev.index("finish drain "+id) >= 0:
			drained = append(drained, id)
		}
	}
	if len(drained) != 2 || len(stayed) != 1 {
		t.Fatalf("drained %v and kept %v, want two drained and one kept: %v", drained, stayed, ev.log)
	}
	for _, s := range h.sim.violations {
		t.Errorf("safety violation: %s", s)
	}

	p.setReady("paper-worker-6", true)
	opts = h.options(c)
	opts.Platform = p
	if res, err := Apply(t.Context(), opts); err != nil || !res.Converged {
		t.Fatalf("apply once the replacement is ready: converged=%v err=%v", res.Converged, err)
	}
	h.checkConverged(c)
}

// The gate counts what the platform says now, not what the round began
// with: a kept worker that stops being ready while replacements join
// holds back one more of the nodes being replaced.
func TestMemberLostMidRoundHoldsARemoval(t *testing.T) {
	t.Parallel()
	h := newTestHarness(t)
	h.mustConverge(paperCluster(1, 2, 1))
	var kept string
	for _, n := range h.load().Nodes {
		if n.Role == districts.RoleWorker && n.District == "aws-europe" {
			kept = n.ID
		}
	}
	c := withStrategy(paperCluster(1, 0, 3), 2, 1)
	h.prepare(c)
	opts := h.options(c)
	p := newHeldJoins(opts.Platform)
	opts.Platform = p
	opts.MaxRounds = 1
	ev := newEvents()
	opts.OnEvent = func(e Event) {
		// The round began with the kept worker ready; it is lost once
		// joins run.
		if e.Type == EventAction && e.Action.Kind == KindJoin {
			p.setReady(kept, false)
		}
		ev.on(e)
	}
	if _, err := Apply(t.Context(), opts); err == nil {
		t.Fatal("apply converged with a worker lost")
	}
	drains := 0
	for _, line := range ev.log {
		if strings.HasPrefix(line, "finish drain ") {
			drains++
		}
	}
	if drains != 1 || len(ev.skip) != 1 {
		t.Errorf("%d drains and %d skipped, want one of each: with %s lost, two replacements stand in for one: %v", drains, len(ev.skip), kept, ev.log)
	}
}

// A replacement counts only once its own join succeeded, labels set: the
// platform may report it ready before, when workloads that need its
// labels cannot move to it yet.
func TestUnlabelledReplacementReplacesNoOne(t *testing.T) {
	t.Parallel()
	h, c, _ := migration(t)
	opts := h.options(c)
	p := newHeldJoins(opts.Platform)
	p.holdLabel("paper-worker-5")
	p.holdLabel("paper-worker-6")
	opts.Platform = p
	ev := newEvents()
	opts.OnEvent = ev.on
	wait := applyInBackground(t, opts)
	// worker-4 joined and is labelled: one old worker may go. The next
	// must wait, although the platform lists 5 and 6 as ready members.
	left := ev.waitFor(t, "finish terminate ", 5*time.Second)
	waited := ev.waitFor(t, "wait the drain of node ", 5*time.Second)
	p.releaseLabel("paper-worker-5")
	p.releaseLabel("paper-worker-6")
	if res, err := wait(); err != nil || !res.Converged {
		t.Fatalf("apply: converged=%v err=%v", res.Converged, err)
	}
	if !left || !waited {
		t.Fatalf("want one old worker gone once paper-worker-4 joined (%v), the next waiting for another labelled replacement (%v): %v", left, waited, ev.log)
	}
	var drains []int
	for i, line := range ev.log {
		if strings.HasPrefix(line, "start drain ") {
			drains = append(drains, i)
		}
	}
	if first := min(ev.index("finish join paper-worker-5"), ev.index("finish join paper-worker-6")); len(drains) < 2 || drains[1] < first {
		t.Errorf("the second drain started before paper-worker-5 or 6 finished joining: %v", ev.log)
	}
	h.checkConverged(c)
}

// After a failed look the gate knows nothing: the last answer no longer
// holds (the world went on), so no drain is admitted on it, not even of a
// node that answer reported not ready.
func TestGateTrustsNoAnswerAfterAFailedLook(t *testing.T) {
	t.Parallel()
	w := func(id string) districts.Node { return pnode(id, gce, districts.RoleWorker, joined) }
	s := districts.Resources{Nodes: []districts.Node{w("paper-worker-1"), w("paper-worker-2"), w("paper-worker-3"), w("paper-worker-4")}}
	drain := func(id string) Action {
		return Action{Kind: KindDrain, Node: id, Role: districts.RoleWorker, KeepReady: 4}
	}
	join := func(id string) Action { return Action{Kind: KindJoin, Node: id, Role: districts.RoleWorker} }
	p := Plan{Actions: []Action{join("paper-worker-5"), join("paper-worker-6"), drain("paper-worker-3"), drain("paper-worker-4")}}
	looks := 0
	var g *readyGate
	look := func(context.Context) (map[string]string, error) {
		looks++
		if looks == 1 { // worker-4 has failed; worker-5 serves; worker-6 joins meanwhile
			g.joinEnded(join("paper-worker-6"), true)
			return map[string]string{"paper-worker-1": "worker", "paper-worker-2": "worker", "paper-worker-3": "worker", "paper-worker-5": "worker"}, nil
		}
		return nil, errors.New("ssh: dial tcp 192.0.2.1:22: i/o timeout")
	}
	g = newReadyGate(s, p, look)
	g.joinEnded(join("paper-worker-5"), true)
	why, err := g.admit(t.Context(), []Action{drain("paper-worker-3"), drain("paper-worker-4")}, func(string) {})
	if err != nil {
		t.Fatal(err)
	}
	if looks != 2 {
		t.Fatalf("%d looks, want 2: one after each join", looks)
	}
	for i, w := range why {
		if !strings.Contains(w, "i/o timeout") {
			t.Errorf("drain %d admitted (%q) after the platform did not answer", i, w)
		}
	}
}
