// Package platformtest is the conformance suite every platform driver
// (provider.Platform) passes on real nodes, as drivers/drivertest is for
// infrastructure drivers. A driver's package runs it from a test:
//
//	func TestConformance(t *testing.T) {
//		platformtest.Run(t, platformtest.Harness{Platform: "swarm", New: ..., ...})
//	}
//
// The nodes are real: local machines (drivers/local: network, mount, UTS,
// PID and cgroup namespaces with their own sshd) on a bridge of their own,
// reached over SSH with a cluster key and pinned host keys, as transit
// reaches them. The suite needs root and skips under -short, like the
// other end-to-end tests; everything it makes (machines, bridge, chains,
// firewall rules, processes, files) is removed at cleanup, also when it
// fails.
//
// It launches five machines, two masters, two workers and one that never
// joins, and checks, in order, on one platform it forms among them:
//
//   - NeverFormed: fresh machines, before and after Install, answer
//     provider.ErrNoPlatform.
//   - Silent: while the platform has not formed, a worker that does not
//     answer (its SSH port black-holed) makes Members answer a
//     *provider.UnreachableError naming it in Silent (not lost, never "no
//     platform"); a master that does not answer is named in Masters.
//   - Form: Init, Join (a second master, then the workers at once) and
//     Label; the platform then reports every node ready.
//   - Members: each node once, with its role, vote, readiness, labels,
//     and addresses that contain its machine's address and no other
//     machine's; a ProviderID, when the platform records one, names its
//     machine; the node that never joined is no member.
//   - Identity: a copy of a worker's machine carrying the same identity
//     tags and hostname, given the worker's id, is not taken for the
//     member: the member's addresses are still the real machine's.
//   - MayRemoveMaster: with two voters either may go; a worker holds no
//     seat.
//   - RefusedDrain: a workload the platform must not move (the harness's
//     Block: a PodDisruptionBudget, a Swarm global service pinned to the
//     node) makes Drain return provider.ErrDrainRefused naming it, and
//     the node stays schedulable; without it the drain goes through and
//     Uncordon undoes it.
//   - Remove: a master leaves; Remove again, and Remove of a machine
//     that never joined, are nil; the last master may not leave
//     (provider.ErrQuorum).
//   - MachineGone: a worker whose machine is deleted behind the
//     driver's back is still listed, not ready, until Remove (of the node
//     without addresses) takes it out.
//   - MasterDown: the only master's engine stopped makes Members answer
//     a *provider.UnreachableError naming it, never "no platform" and
//     never lost; started again, the platform answers.
//   - Lost: the only master's machine deleted, with a worker silent, is
//     unreachable naming the silent worker; once every node answers, the
//     platform is lost (UnreachableError.Lost).
//
// Verdicts (Members' errors) are checked both with the driver that did
// the work and with a new one, as the next run of transit would make it;
// the silent-node checks only with new ones (see Silent). Each step logs
// its duration.
package platformtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sync/errgroup"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/filelock"
	"github.com/cloudtransit/transit/platforms/ssh"
	"github.com/cloudtransit/transit/provider"
)

// Harness says how to drive one platform on the suite's nodes.
type Harness struct {
	// Platform is the cluster's platform, as cluster.json names it
	// ("swarm", "kubernetes").
	Platform string
	// Setup, optional, completes the local district before any machine
	// is launched (a Kubernetes bundle to install from); files written to
	// imagesDir appear read-only on every machine at
	// /var/lib/transit/images (container images to preload).
	Setup func(t *testing.T, d *districts.District, imagesDir string)
	// New returns a new driver for env.Cluster, as one run of transit
	// makes it: it knows nothing of earlier drivers. The suite closes it
	// (when it is an io.Closer).
	New func(env Env) provider.Platform
	// StopEngine stops the platform's engine on master n, so that it can
	// no longer serve the platform (Swarm: dockerd; Kubernetes: the
	// kubelet and the API server), leaving its machine and sshd up.
	StopEngine func(ctx context.Context, env Env, n districts.Node) error
	// StartEngine undoes StopEngine; p is the driver that formed the
	// platform.
	StartEngine func(ctx context.Context, env Env, p provider.Platform, n districts.Node) error
	// Block runs, through master m, a workload on node n that the
	// platform must refuse to move away (a PodDisruptionBudget that
	// allows no eviction, a global service pinned to n), and returns once
	// it runs there. It returns a name that a refused drain of n must
	// carry in its DrainError (Blocking or Reason).
	Block func(ctx context.Context, env Env, m, n districts.Node) (string, error)
	// Unblock removes what Block made.
	Unblock func(ctx context.Context, env Env, m districts.Node, name string) error
	// DrainTimeout is the timeout the suite's drains get; default 20s.
	DrainTimeout time.Duration
	// Timeout bounds each wait for the platform to report a change (nodes
	// joined and ready, a dead node not ready, an engine back); default
	// 3 minutes. It is a bound, not a performance assertion.
	Timeout time.Duration
}

// Env is what a harness gets to make drivers and reach nodes.
type Env struct {
	Cluster   districts.Cluster
	Districts []districts.District
	// StateDir holds the cluster's SSH key and pinned host keys, and is
	// where a driver keeps what it keeps beside the state (an admin
	// kubeconfig).
	StateDir string
	// SSH is how drivers reach the nodes: the cluster key, the pinned
	// host keys, and short waits (a node that does not answer is given
	// up on within seconds).
	SSH ssh.Config
	// Run runs a POSIX sh script as root on a node, for the harness's
	// own steps; stdin, when not nil, is the script's standard input.
	Run func(ctx context.Context, n districts.Node, name, script string, stdin []byte) (string, error)
}

func (h Harness) withDefaults() Harness {
	if h.DrainTimeout <= 0 {
		h.DrainTimeout = 20 * time.Second
	}
	if h.Timeout <= 0 {
		h.Timeout = 3 * time.Minute
	}
	return h
}

// Run runs the suite against the driver h makes. The steps run in order
// and build on each other; a step that fails leaves the later ones to run
// on what it left, except Form, without which nothing can go on.
func Run(t *testing.T, h Harness) {
	t.Helper()
	RequireRoot(t)
	switch {
	case h.Platform == "", h.New == nil, h.StopEngine == nil, h.StartEngine == nil, h.Block == nil, h.Unblock == nil:
		t.Fatal("platformtest: the harness needs Platform, New, StopEngine, StartEngine, Block and Unblock")
	}
	HoldHost(t)
	start := time.Now()
	s := newSuite(t, h.withDefaults())
	steps := []struct {
		name      string
		fn        func(t *testing.T)
		essential bool
	}{
		{"NeverFormed", s.neverFormed, true},
		{"Silent", s.silentNodes, false},
		{"Form", s.form, true},
		{"Members", s.members, false},
		{"Identity", s.identity, false},
		{"MayRemoveMaster", s.mayRemoveMaster, false},
		{"RefusedDrain", s.refusedDrain, false},
		{"Remove", s.remove, false},
		{"MachineGone", s.machineGone, false},
		{"MasterDown", s.masterDown, false},
		{"Lost", s.lost, false},
	}
	for _, st := range steps {
		if d, ok := t.Deadline(); ok && time.Until(d) < cleanupReserve {
			t.Fatalf("stopping before step %s: the test binary's deadline (go test -timeout) is %s away, and removing the machines takes up to %s",
				st.name, time.Until(d).Round(time.Second), cleanupReserve)
		}
		began := time.Now()
		ok := t.Run(st.name, st.fn)
		t.Logf("%s: %s", st.name, time.Since(began).Round(100*time.Millisecond))
		if !ok && st.essential {
			t.Fatalf("%s failed; the later steps need it", st.name)
		}
	}
	t.Logf("the %s conformance suite took %s (cleanup not counted)", h.Platform, time.Since(start).Round(time.Second))
}

// cleanupReserve is the time kept before the test binary's deadline for
// removing the machines: a slow machine stops between steps with a clear
// failure and a clean host, never in the testing package's panic in the
// middle of a cluster.
const cleanupReserve = 3 * time.Minute

// hostLock is held by tests that run whole clusters on local nodes.
const hostLock = "/run/transit-tests-host.lock"

// HoldHost takes the host's lock until t ends. This suite holds it, so
// that `go test ./...`, which runs packages at once, never runs the Swarm
// and the Kubernetes suites together on this machine's two cores; the
// e2e benchmarks hold it, so that what they measure is theirs alone.
func HoldHost(t testing.TB) {
	t.Helper()
	unlock, err := filelock.FlockContext(t.Context(), hostLock, filelock.FlockOptions{Command: t.Name()})
	if err != nil {
		t.Fatalf("take the host's test lock: %v", err)
	}
	t.Cleanup(unlock)
}

// RequireRoot skips t under -short and when not root, as every test on
// real nodes does.
func RequireRoot(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("platformtest: real nodes; skipped with -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("platformtest: real nodes need root (network namespaces, bridges, iptables)")
	}
}

// Step NeverFormed: fresh machines hold no platform, before and after
// Install.
func (s *suite) neverFormed(t *testing.T) {
	nodes := s.live()
	s.wantNoPlatform(t, nodes)
	g, ctx := errgroup.WithContext(t.Context())
	for _, n := range nodes {
		g.Go(func() error {
			if err := s.p.Install(ctx, n); err != nil {
				return fmt.Errorf("install %s: %w", n.ID, err)
			}
			return nil
		})
	}
	began := time.Now()
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	t.Logf("installed %d nodes in %s", len(nodes), time.Since(began).Round(100*time.Millisecond))
	s.wantNoPlatform(t, nodes)
}

// wantNoPlatform checks that Members answers ErrNoPlatform, from the
// suite's driver and from a new one.
func (s *suite) wantNoPlatform(t *testing.T, nodes []districts.Node) {
	t.Helper()
	for _, d := range s.drivers(t) {
		members, err := d.p.Members(t.Context(), nodes)
		if !errors.Is(err, provider.ErrNoPlatform) {
			t.Errorf("%s: Members of fresh nodes = %v, %v; want ErrNoPlatform", d.name, members, err)
		}
	}
}

// Step Silent: a node that does not answer is never taken for one that
// holds no platform. Only new drivers are asked: the suite's driver keeps
// SSH connections to every node, and a connection whose packets vanish
// (a partition) is another matter than a node that does not answer.
func (s *suite) silentNodes(t *testing.T) {
	nodes := s.live()
	x := s.node(t, nodeSpare)
	undo := s.silence(t, x)
	p := s.fresh(t)
	_, err := p.Members(t.Context(), nodes)
	ue := wantUnreachable(t, "a worker silent, the masters in no platform", err)
	if ue != nil {
		if len(ue.Masters) != 0 || !slices.Equal(ue.Silent, []string{x.ID}) || ue.Lost() {
			t.Errorf("a worker silent: Masters %v, Silent %v, Lost %t; want no masters, Silent [%s], not lost (%v)",
				ue.Masters, ue.Silent, ue.Lost(), x.ID, err)
		}
	}
	undo()

	m2 := s.node(t, nodeMaster2)
	undo = s.silence(t, m2)
	p = s.fresh(t)
	_, err = p.Members(t.Context(), nodes)
	if ue := wantUnreachable(t, "a master silent", err); ue != nil && (!slices.Contains(ue.Masters, m2.ID) || ue.Lost()) {
		t.Errorf("a master silent: Masters %v, Lost %t; want %s among the masters, not lost (%v)", ue.Masters, ue.Lost(), m2.ID, err)
	}
	undo()
	s.wantNoPlatform(t, nodes)
}

// Step Form: the first master inits, the second master and the workers
// join at once, every member gets its labels, and the platform reports
// them ready.
func (s *suite) form(t *testing.T) {
	ctx := t.Context()
	m1 := s.node(t, nodeMaster1)
	began := time.Now()
	if err := s.p.Init(ctx, m1); err != nil {
		t.Fatalf("Init %s: %v", m1.ID, err)
	}
	t.Logf("init took %s", time.Since(began).Round(100*time.Millisecond))
	// The second master first, then the workers at once: a control-plane
	// join (an etcd member) on two shared cores is slow enough without
	// worker joins beside it.
	began = time.Now()
	m2 := s.node(t, nodeMaster2)
	if err := s.p.Join(ctx, m2); err != nil {
		t.Fatalf("Join %s: %v", m2.ID, err)
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, name := range []string{nodeWorker1, nodeWorker2} {
		n := s.node(t, name)
		g.Go(func() error {
			if err := s.p.Join(gctx, n); err != nil {
				return fmt.Errorf("join %s: %w", n.ID, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	t.Logf("joins took %s", time.Since(began).Round(100*time.Millisecond))
	for _, name := range []string{nodeMaster1, nodeMaster2, nodeWorker1, nodeWorker2} {
		n := s.node(t, name)
		if err := s.p.Label(ctx, n, n.Tags); err != nil {
			t.Fatalf("Label %s: %v", n.ID, err)
		}
		s.setPhase(name, districts.PhaseJoined)
	}
	began = time.Now()
	want := s.want(nodeMaster1, nodeMaster2, nodeWorker1, nodeWorker2)
	s.eventually(t, "every member ready", func(ctx context.Context) error {
		got, err := s.p.Members(ctx, s.live())
		if err != nil {
			return err
		}
		for _, w := range want {
			if m, ok := find(got, w.node.ID); !ok || !m.Ready {
				return fmt.Errorf("%s is not listed ready: %+v", w.node.ID, m)
			}
		}
		return nil
	})
	t.Logf("members ready %s after the joins", time.Since(began).Round(100*time.Millisecond))
}

// Step Members: what each member says, from both drivers.
func (s *suite) members(t *testing.T) {
	want := s.want(nodeMaster1, nodeMaster2, nodeWorker1, nodeWorker2)
	for _, d := range s.drivers(t) {
		got, err := d.p.Members(t.Context(), s.live())
		if err != nil {
			t.Errorf("%s: Members: %v", d.name, err)
			continue
		}
		if err := s.compare(got, want); err != nil {
			t.Errorf("%s: %v", d.name, err)
		}
	}
}

// Step Identity: a copy of worker 1's machine, with its identity tags
// and hostname, is given worker 1's id, and worker 1's machine is given
// its provider id, as the loop names a machine whose id another claims.
// The member named worker 1 must still carry the real machine's address,
// and no member the copy's.
func (s *suite) identity(t *testing.T) {
	w1 := s.node(t, nodeWorker1)
	clone := s.launch(t, nodeClone, w1)
	defer s.terminate(t, nodeClone)
	copyAsW1 := clone
	copyAsW1.ID, copyAsW1.Phase = w1.ID, districts.PhaseJoined
	realAsOther := w1
	realAsOther.ID = w1.ProviderID
	var nodes []districts.Node
	for _, n := range s.live() {
		if n.ID == w1.ID {
			nodes = append(nodes, copyAsW1, realAsOther)
			continue
		}
		nodes = append(nodes, n)
	}
	for _, d := range s.drivers(t) {
		got, err := d.p.Members(t.Context(), nodes)
		if err != nil {
			t.Errorf("%s: Members with a copy of %s: %v", d.name, w1.ID, err)
			continue
		}
		if err := s.compare(got, s.want(nodeMaster1, nodeMaster2, nodeWorker1, nodeWorker2)); err != nil {
			t.Errorf("%s: with a copy of %s's machine (%s, %s) given its id: %v", d.name, w1.ID, clone.ProviderID, address(clone), err)
		}
	}
}

// Step MayRemoveMaster: two voters may lose one; a worker holds no seat.
func (s *suite) mayRemoveMaster(t *testing.T) {
	nodes := s.live()
	for _, d := range s.drivers(t) {
		for _, name := range []string{nodeMaster1, nodeMaster2, nodeWorker1} {
			n := s.node(t, name)
			if err := d.p.MayRemoveMaster(t.Context(), n, nodes); err != nil {
				t.Errorf("%s: MayRemoveMaster(%s) with two voting masters = %v, want nil", d.name, n.ID, err)
			}
		}
	}
}

// Step RefusedDrain: a workload the platform must not move refuses the
// drain, naming it, and the node stays schedulable; without it the drain
// goes through.
func (s *suite) refusedDrain(t *testing.T) {
	ctx := t.Context()
	m1, w1 := s.node(t, nodeMaster1), s.node(t, nodeWorker1)
	name, err := s.h.Block(ctx, s.env, m1, w1)
	if err != nil {
		t.Fatalf("Block %s: %v", w1.ID, err)
	}
	blocked := true
	unblock := func() {
		if blocked {
			blocked = false
			if err := s.h.Unblock(context.WithoutCancel(ctx), s.env, m1, name); err != nil {
				t.Errorf("Unblock %s: %v", name, err)
			}
		}
	}
	defer unblock()
	began := time.Now()
	err = s.p.Drain(ctx, w1, s.h.DrainTimeout)
	t.Logf("the refused drain took %s", time.Since(began).Round(100*time.Millisecond))
	var de *provider.DrainError
	switch {
	case err == nil:
		t.Errorf("Drain(%s) with %s on it = nil, want ErrDrainRefused", w1.ID, name)
	case !errors.Is(err, provider.ErrDrainRefused) || !errors.As(err, &de):
		t.Errorf("Drain(%s) = %v, want a *provider.DrainError matching ErrDrainRefused", w1.ID, err)
	default:
		if de.Node != w1.ID {
			t.Errorf("DrainError names node %q, want %q", de.Node, w1.ID)
		}
		if !slices.ContainsFunc(de.Blocking, func(b string) bool { return strings.Contains(b, name) }) && !strings.Contains(de.Reason, name) {
			t.Errorf("DrainError does not name the blocking workload %q: %v", name, de)
		}
	}
	got, err := s.p.Members(ctx, s.live())
	if err != nil {
		t.Fatalf("Members after the refused drain: %v", err)
	}
	if m, ok := find(got, w1.ID); !ok || m.Draining || !m.Ready {
		t.Errorf("after the refused drain %s is %+v, want it listed, ready and schedulable", w1.ID, m)
	}

	unblock()
	began = time.Now()
	if err := s.p.Drain(ctx, w1, s.h.Timeout); err != nil {
		t.Errorf("Drain(%s) without the blocking workload: %v", w1.ID, err)
	}
	t.Logf("the drain without it took %s", time.Since(began).Round(100*time.Millisecond))
	got, err = s.p.Members(ctx, s.live())
	if err != nil {
		t.Fatalf("Members after the drain: %v", err)
	}
	if m, _ := find(got, w1.ID); !m.Draining {
		t.Errorf("after a drain %s is %+v, want it draining", w1.ID, m)
	}
	if err := s.p.Uncordon(ctx, w1); err != nil {
		t.Fatalf("Uncordon(%s): %v", w1.ID, err)
	}
	got, err = s.p.Members(ctx, s.live())
	if err != nil {
		t.Fatalf("Members after Uncordon: %v", err)
	}
	if err := s.compare(got, s.want(nodeMaster1, nodeMaster2, nodeWorker1, nodeWorker2)); err != nil {
		t.Errorf("after Uncordon: %v", err)
	}
}

// Step Remove: the second master leaves; removing it again, and removing
// a machine that never joined, is nothing; the last master may not leave.
func (s *suite) remove(t *testing.T) {
	ctx := t.Context()
	m1, m2, x := s.node(t, nodeMaster1), s.node(t, nodeMaster2), s.node(t, nodeSpare)
	if err := s.p.MayRemoveMaster(ctx, m2, s.live()); err != nil {
		t.Fatalf("MayRemoveMaster(%s) before its removal: %v", m2.ID, err)
	}
	if err := s.p.Remove(ctx, m2); err != nil {
		t.Fatalf("Remove(%s): %v", m2.ID, err)
	}
	s.setPhase(nodeMaster2, districts.PhaseLeft)
	if err := s.p.Remove(ctx, m2); err != nil {
		t.Errorf("Remove(%s) a second time: %v", m2.ID, err)
	}
	if err := s.p.Remove(ctx, x); err != nil {
		t.Errorf("Remove(%s), which never joined: %v", x.ID, err)
	}
	want := s.want(nodeMaster1, nodeWorker1, nodeWorker2)
	s.eventually(t, "the members without "+m2.ID, func(ctx context.Context) error {
		got, err := s.p.Members(ctx, s.live())
		if err != nil {
			return err
		}
		return s.compare(got, want)
	})
	for _, d := range s.drivers(t) {
		got, err := d.p.Members(ctx, s.live())
		if err != nil {
			t.Errorf("%s: Members after the removal: %v", d.name, err)
		} else if err := s.compare(got, want); err != nil {
			t.Errorf("%s: after the removal of %s: %v", d.name, m2.ID, err)
		}
		err = d.p.MayRemoveMaster(ctx, m1, s.live())
		if !errors.Is(err, provider.ErrQuorum) {
			t.Errorf("%s: MayRemoveMaster(%s), the last master = %v, want ErrQuorum", d.name, m1.ID, err)
		}
	}
}

// Step MachineGone: a worker's machine deleted behind the driver's back
// stays a member, not ready, until Remove of the node (now without
// addresses) takes it out.
func (s *suite) machineGone(t *testing.T) {
	ctx := t.Context()
	w2 := s.node(t, nodeWorker2)
	s.terminate(t, nodeWorker2)
	began := time.Now()
	s.eventually(t, w2.ID+" listed and not ready", func(ctx context.Context) error {
		got, err := s.p.Members(ctx, s.live())
		if err != nil {
			return err
		}
		m, ok := find(got, w2.ID)
		switch {
		case !ok:
			return errFatal{fmt.Errorf("%s, whose machine is gone, is no longer listed: %v", w2.ID, got)}
		case m.Ready:
			return fmt.Errorf("%s is still ready", w2.ID)
		case m.Role != districts.RoleWorker || m.Voter:
			return errFatal{fmt.Errorf("%s is listed as %+v, want a worker", w2.ID, m)}
		}
		return nil
	})
	t.Logf("the platform reported %s not ready %s after its machine went", w2.ID, time.Since(began).Round(100*time.Millisecond))
	for _, d := range s.drivers(t) {
		got, err := d.p.Members(ctx, s.live())
		if err != nil {
			t.Errorf("%s: Members: %v", d.name, err)
			continue
		}
		if m, ok := find(got, w2.ID); !ok || m.Ready {
			t.Errorf("%s: %s, whose machine is gone, is %+v (listed %t), want listed and not ready", d.name, w2.ID, m, ok)
		}
	}
	gone := w2
	gone.PublicIP, gone.PrivateIP = "", ""
	if err := s.p.Remove(ctx, gone); err != nil {
		t.Fatalf("Remove(%s) without addresses: %v", w2.ID, err)
	}
	if err := s.p.Remove(ctx, gone); err != nil {
		t.Errorf("Remove(%s) without addresses, again: %v", w2.ID, err)
	}
	got, err := s.p.Members(ctx, s.live())
	if err != nil {
		t.Fatalf("Members after the removal: %v", err)
	}
	if err := s.compare(got, s.want(nodeMaster1, nodeWorker1)); err != nil {
		t.Errorf("after the removal of %s: %v", w2.ID, err)
	}
}

// Step MasterDown: the only master cannot serve; that is never "no
// platform" and never lost; started again, it serves.
func (s *suite) masterDown(t *testing.T) {
	ctx := t.Context()
	m1 := s.node(t, nodeMaster1)
	if err := s.h.StopEngine(ctx, s.env, m1); err != nil {
		t.Fatalf("StopEngine(%s): %v", m1.ID, err)
	}
	started := false
	start := func() {
		if !started {
			started = true
			if err := s.h.StartEngine(context.WithoutCancel(ctx), s.env, s.p, m1); err != nil {
				t.Fatalf("StartEngine(%s): %v", m1.ID, err)
			}
		}
	}
	defer start()
	for _, d := range s.drivers(t) {
		_, err := d.p.Members(ctx, s.live())
		ue := wantUnreachable(t, d.name+": the master's engine down", err)
		if ue != nil && (!slices.Contains(ue.Masters, m1.ID) || ue.Lost()) {
			t.Errorf("%s: the master's engine down: Masters %v, Silent %v, Lost %t; want %s among the masters, not lost (%v)",
				d.name, ue.Masters, ue.Silent, ue.Lost(), m1.ID, err)
		}
	}
	start()
	began := time.Now()
	want := s.want(nodeMaster1, nodeWorker1)
	s.eventually(t, "the platform served again", func(ctx context.Context) error {
		got, err := s.p.Members(ctx, s.live())
		if err != nil {
			return err
		}
		return s.compare(got, want)
	})
	t.Logf("the platform answered %s after the engine started again", time.Since(began).Round(100*time.Millisecond))
	p := s.fresh(t)
	got, err := p.Members(ctx, s.live())
	if err != nil {
		t.Fatalf("new driver: Members: %v", err)
	}
	if err := s.compare(got, want); err != nil {
		t.Errorf("new driver: %v", err)
	}
}

// Step Lost: every master's machine gone while a worker stays in the
// platform. While a node is silent that is unknown; once every node
// answered, the platform is lost.
func (s *suite) lost(t *testing.T) {
	ctx := t.Context()
	s.terminate(t, nodeMaster1)
	nodes := s.live() // worker 1 (a member) and the spare (never joined)
	x := s.node(t, nodeSpare)
	undo := s.silence(t, x)
	_, err := s.fresh(t).Members(ctx, nodes)
	if ue := wantUnreachable(t, "no master, a member worker, a silent node", err); ue != nil {
		if len(ue.Masters) != 0 || !slices.Equal(ue.Silent, []string{x.ID}) || ue.Lost() {
			t.Errorf("no master, a silent node: Masters %v, Silent %v, Lost %t; want no masters, Silent [%s], not lost (%v)",
				ue.Masters, ue.Silent, ue.Lost(), x.ID, err)
		}
	}
	undo()
	for _, d := range s.drivers(t) {
		_, err := d.p.Members(ctx, nodes)
		if ue := wantUnreachable(t, d.name+": no master left", err); ue != nil && !ue.Lost() {
			t.Errorf("%s: no master left, a worker in the platform, every node answered: Masters %v, Silent %v; want it lost (%v)",
				d.name, ue.Masters, ue.Silent, err)
		}
	}
}

// wantUnreachable checks that err is a *provider.UnreachableError matching
// ErrPlatformUnreachable and never ErrNoPlatform, and returns it (nil
// after reporting an error otherwise).
func wantUnreachable(t *testing.T, what string, err error) *provider.UnreachableError {
	t.Helper()
	ue, ok := errors.AsType[*provider.UnreachableError](err)
	switch {
	case errors.Is(err, provider.ErrNoPlatform):
		t.Errorf("%s: Members = %v, never ErrNoPlatform", what, err)
		return nil
	case !ok || !errors.Is(err, provider.ErrPlatformUnreachable):
		t.Errorf("%s: Members = %v (%T), want a *provider.UnreachableError", what, err, err)
		return nil
	}
	return ue
}

// wantMember is what the platform must report of a node.
type wantMember struct {
	node  districts.Node // its machine
	role  string
	voter bool
}

// want lists what the named nodes must be: each its role, a master a
// voter, all ready, schedulable, labelled with its tags.
func (s *suite) want(names ...string) []wantMember {
	var out []wantMember
	for _, name := range names {
		n := s.nodeOf(name)
		out = append(out, wantMember{node: n, role: n.Role, voter: n.Role == districts.RoleMaster})
	}
	return out
}

// compare says how got differs from want: the same members, each once;
// each with its role, vote, readiness (ready, schedulable), labels equal
// to its tags, addresses containing its machine's address and no other
// machine's, and a provider id, when it has one, naming its machine.
func (s *suite) compare(got []provider.Member, want []wantMember) error {
	var problems []string
	seen := map[string]int{}
	for _, m := range got {
		seen[m.NodeID]++
	}
	for id, n := range seen {
		if n > 1 {
			problems = append(problems, fmt.Sprintf("%s is listed %d times", id, n))
		}
	}
	wanted := map[string]districts.Node{}
	for _, w := range want {
		n := w.node
		wanted[n.ID] = n
		m, ok := find(got, n.ID)
		if !ok {
			problems = append(problems, n.ID+" is not listed")
			continue
		}
		if m.Role != w.role || m.Voter != w.voter || !m.Ready || m.Draining {
			problems = append(problems, fmt.Sprintf("%s is role %q voter %t ready %t draining %t, want role %q voter %t ready, schedulable",
				n.ID, m.Role, m.Voter, m.Ready, m.Draining, w.role, w.voter))
		}
		if diff := cmp.Diff(n.Tags, m.Labels); diff != "" {
			problems = append(problems, fmt.Sprintf("%s's labels (-tags +labels):\n%s", n.ID, diff))
		}
		if !slices.Contains(m.Addresses, address(n)) {
			problems = append(problems, fmt.Sprintf("%s's addresses %v lack its machine's %s", n.ID, m.Addresses, address(n)))
		}
		if m.ProviderID != "" && !strings.Contains(m.ProviderID, n.ProviderID) {
			problems = append(problems, fmt.Sprintf("%s's provider id %q does not name its machine %s", n.ID, m.ProviderID, n.ProviderID))
		}
	}
	for _, m := range got {
		w, ok := wanted[m.NodeID]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s is listed (%+v) but is no member", m.NodeID, m))
			continue
		}
		for _, other := range s.allMachines() {
			a := address(other)
			if other.ProviderID != w.ProviderID && a != address(w) && slices.Contains(m.Addresses, a) {
				problems = append(problems, fmt.Sprintf("%s's addresses %v hold %s, the address of another machine, %s (%s)",
					m.NodeID, m.Addresses, a, other.ProviderID, other.ID))
			}
		}
	}
	if len(problems) > 0 {
		slices.Sort(problems)
		return errors.New("members differ:\n  " + strings.Join(problems, "\n  "))
	}
	return nil
}

func find(members []provider.Member, id string) (provider.Member, bool) {
	for _, m := range members {
		if m.NodeID == id {
			return m, true
		}
	}
	return provider.Member{}, false
}

// address is the address a node's machine is reached on.
func address(n districts.Node) string {
	if n.PrivateIP != "" {
		return n.PrivateIP
	}
	return n.PublicIP
}

// errFatal ends an eventually wait at once: what it reports cannot get
// better by waiting.
type errFatal struct{ error }

// eventually runs check every second until it returns nil, failing t
// when it still fails after the harness's Timeout or returns an errFatal.
func (s *suite) eventually(t *testing.T, what string, check func(ctx context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(s.h.Timeout)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		err := check(ctx)
		cancel()
		var fatal errFatal
		switch {
		case err == nil:
			return
		case errors.As(err, &fatal):
			t.Fatalf("%s: %v", what, fatal.error)
		case time.Now().After(deadline):
			t.Fatalf("%s: still failing after %s: %v", what, s.h.Timeout, err)
		}
		select {
		case <-t.Context().Done():
			t.Fatalf("%s: %v (last: %v)", what, t.Context().Err(), err)
		case <-time.After(time.Second):
		}
	}
}

// namedDriver is a driver and how messages call it.
type namedDriver struct {
	name string
	p    provider.Platform
}

// drivers are the suite's driver, which did the work so far, and a new
// one, as the next run of transit makes it.
func (s *suite) drivers(t *testing.T) []namedDriver {
	return []namedDriver{{"the driver that did the work", s.p}, {"a new driver", s.fresh(t)}}
}

// fresh returns a new driver, closed when t ends.
func (s *suite) fresh(t *testing.T) provider.Platform {
	p := s.h.New(s.env)
	t.Cleanup(func() { closeDriver(t, p) })
	return p
}

func closeDriver(t testing.TB, p provider.Platform) {
	if c, ok := p.(io.Closer); ok {
		if err := c.Close(); err != nil {
			t.Errorf("close driver: %v", err)
		}
	}
}
