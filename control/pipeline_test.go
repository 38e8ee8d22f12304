package control

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// meeting lets two kinds of call prove they run at the same time: each
// call waits (bounded) for one of the other kind, and the meeting counts as
// held only if one arrives while the other is still there.
type meeting struct {
	once       [2]sync.Once
	arrived    [2]chan struct{}
	mu         sync.Mutex
	active     [2]int
	overlapped bool
}

func newMeeting() *meeting {
	return &meeting{arrived: [2]chan struct{}{make(chan struct{}), make(chan struct{})}}
}

func (m *meeting) arrive(side int) {
	m.mu.Lock()
	m.active[side]++
	if m.active[1-side] > 0 {
		m.overlapped = true
	}
	m.mu.Unlock()
	m.once[side].Do(func() { close(m.arrived[side]) })
	select {
	case <-m.arrived[1-side]:
	case <-time.After(2 * time.Second):
	}
	m.mu.Lock()
	m.active[side]--
	m.mu.Unlock()
}

type meetingInfra struct {
	provider.Infrastructure
	m *meeting
}

// EnsureGroup meets an install when it allows addresses into a group.
func (i meetingInfra) EnsureGroup(ctx context.Context, spec provider.GroupSpec) (provider.Group, error) {
	if len(spec.Sources) > 0 {
		i.m.arrive(0)
	}
	return i.Infrastructure.EnsureGroup(ctx, spec)
}

type meetingPlatform struct {
	provider.Platform
	m        *meeting
	mu       sync.Mutex
	installs map[string]int
}

func (p *meetingPlatform) Install(ctx context.Context, n districts.Node) error {
	p.mu.Lock()
	p.installs[n.ID]++
	p.mu.Unlock()
	p.m.arrive(1)
	return p.Platform.Install(ctx, n)
}

// A new machine's install overlaps the group changes that let the new
// addresses in, and joins do not install again.
func TestInstallOverlapsTheGroupUpdate(t *testing.T) {
	t.Parallel()
	h := newTestHarness(t)
	c := paperCluster(1, 2, 1)
	h.prepare(c)
	m := newMeeting()
	opts := h.options(c)
	for id, infra := range opts.Infra {
		opts.Infra[id] = meetingInfra{infra, m}
	}
	p := &meetingPlatform{Platform: opts.Platform, m: m, installs: map[string]int{}}
	opts.Platform = p
	res, err := Apply(t.Context(), opts)
	if err != nil || !res.Converged {
		t.Fatalf("apply: converged=%v err=%v", res.Converged, err)
	}
	if !m.overlapped {
		t.Errorf("no install ran while a group update let the new addresses in: installs wait for the group changes")
	}
	for id, n := range p.installs {
		if n != 1 {
			t.Errorf("node %s installed %d times, want once", id, n)
		}
	}
	if len(p.installs) != 4 {
		t.Errorf("%d nodes installed, want 4", len(p.installs))
	}
}

type failingInstall struct {
	provider.Platform
	node string
}

func (p failingInstall) Install(ctx context.Context, n districts.Node) error {
	if n.ID == p.node {
		return context.DeadlineExceeded
	}
	return p.Platform.Install(ctx, n)
}

// A failed install skips the node's join, marks the node, and a later run
// replaces it.
func TestFailedInstallSkipsTheJoinAndIsReplaced(t *testing.T) {
	t.Parallel()
	h := newTestHarness(t)
	c := paperCluster(1, 1, 0)
	h.prepare(c)
	opts := h.options(c)
	opts.Platform = failingInstall{opts.Platform, "paper-worker-1"}
	opts.MaxRounds = 1
	var skipped string
	opts.OnEvent = func(e Event) {
		if e.Type == EventAction && e.Phase == PhaseSkip && e.Action.Kind == KindJoin {
			skipped = e.Action.Node + ": " + e.Error
		}
	}
	if _, err := Apply(t.Context(), opts); err == nil {
		t.Fatal("apply converged although an install failed")
	}
	if !strings.HasPrefix(skipped, "paper-worker-1: its install failed") {
		t.Errorf("skipped join = %q, want paper-worker-1's, because its install failed", skipped)
	}
	var marked bool
	for _, n := range h.load().Nodes {
		if n.ID == "paper-worker-1" {
			marked = n.JoinFailed
		}
	}
	if !marked {
		t.Errorf("paper-worker-1 is not marked as failed in the state")
	}
	h.mustConverge(c)
	if ids := h.nodeIDs("worker"); len(ids) != 1 || ids[0] == "paper-worker-1" {
		t.Errorf("workers after the next run = %v, want one that replaced paper-worker-1", ids)
	}
}

// initMeeting meets the first master's init with the workers' installs.
type initMeeting struct {
	provider.Platform
	m *meeting
}

func (p initMeeting) Install(ctx context.Context, n districts.Node) error {
	if n.Role == districts.RoleWorker {
		p.m.arrive(1)
	}
	return p.Platform.Install(ctx, n)
}

func (p initMeeting) Init(ctx context.Context, n districts.Node) error {
	p.m.arrive(0)
	return p.Platform.Init(ctx, n)
}

// The first master initialises the platform as soon as its own install is
// done, while the workers' installs still run.
func TestInitWaitsOnlyForItsOwnInstall(t *testing.T) {
	t.Parallel()
	h := newTestHarness(t)
	c := paperCluster(1, 2, 0)
	h.prepare(c)
	m := newMeeting()
	opts := h.options(c)
	opts.Platform = initMeeting{opts.Platform, m}
	res, err := Apply(t.Context(), opts)
	if err != nil || !res.Converged {
		t.Fatalf("apply: converged=%v err=%v", res.Converged, err)
	}
	if !m.overlapped {
		t.Errorf("the first master's init waited for the workers' installs")
	}
}
