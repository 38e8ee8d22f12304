package swarm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cloudtransit/transit/clock/clocktest"
	"github.com/cloudtransit/transit/provider"
)

// drainFake is a manager (master1) of a swarm in which worker1 (swarm node
// w) is drained. Each listing of the services' tasks is one poll; the
// test says what the node's task history and the services show at each.
type drainFake struct {
	t        *testing.T
	mu       sync.Mutex
	avail    string // worker1's availability
	label    string // its labelDrain, "" when absent
	history  func(poll int) string
	services func(poll int) string
	polls    int
	updates  []string
}

func (f *drainFake) manager(_ context.Context, script string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case script == inspectScript():
		labels := fmt.Sprintf(`{"transit-node":%q}`, worker1.ID)
		if f.label != "" {
			labels = fmt.Sprintf(`{"transit-node":%q,%q:%q}`, worker1.ID, labelDrain, f.label)
		}
		return fmt.Sprintf(`[{"ID":"w","Spec":{"Labels":%s,"Role":"worker","Availability":%q},
 "Description":{"Hostname":%q},"Status":{"State":"ready","Addr":%q}}]`, labels, f.avail, worker1.ID, worker1.PublicIP), nil
	case script == nodeTasksScript("w"):
		return f.history(f.polls), nil
	case strings.Contains(script, "docker service ps -q --filter desired-state=running"):
		f.polls++
		return f.services(f.polls), nil
	case strings.Contains(script, "docker node update"):
		f.updates = append(f.updates, strings.TrimPrefix(strings.TrimSpace(script), "set -eu\n"+outOfSequence))
		if strings.Contains(script, "--availability drain") {
			f.avail = "drain"
		}
		if strings.Contains(script, "--availability active") {
			f.avail = "active"
		}
		if m := strings.Index(script, "--label-add "+labelDrain+"="); m >= 0 {
			rest := script[m+len("--label-add "+labelDrain+"="):]
			f.label = rest[:strings.IndexByte(rest, ' ')]
		}
		if strings.Contains(script, "--label-rm "+labelDrain+" ") {
			f.label = ""
		}
		return "", nil
	}
	f.t.Errorf("unexpected script on the manager:\n%s", script)
	return "", errors.New("unexpected script")
}

func (f *drainFake) driver() (*driver, *fakeNodes) {
	nodes := &fakeNodes{nodes: map[string]func(context.Context, string) (string, error){master1.ID: f.manager}}
	return testDriver(nodes, master1), nodes
}

// web is a replicated service of 2 tasks; runningElsewhere says how many
// run on other nodes, pending how many wait with err.
func web(runningElsewhere, pending int, err string) string {
	var b strings.Builder
	b.WriteString("service|s1|web|replicated|2\n")
	for range runningElsewhere {
		b.WriteString("task|s1|other|running|\n")
	}
	for range pending {
		fmt.Fprintf(&b, "task|s1||pending|%s\n", err)
	}
	return b.String()
}

// shutDownAfter is the history of a node whose task t1 of web runs until
// poll n, then is shut down.
func shutDownAfter(n int) func(int) string {
	return func(poll int) string {
		if poll < n {
			return "task|s1|t1|running|running\nservice|s1|web\n"
		}
		return "task|s1|t1|shutdown|shutdown\nservice|s1|web\n"
	}
}

func always(s string) func(int) string { return func(int) string { return s } }

// A drain killed after the node was drained and its tasks shut down, then
// resumed in a later run: the node runs no task, yet the drain waits
// until the service it ran has its replicas running elsewhere, which
// takes the swarm several polls.
func TestDrainResumedWaitsForTheServices(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		label   string
		history string
	}{
		{name: "from the node's task history", history: "task|s1|t1|shutdown|shutdown\nservice|s1|web\n"},
		{name: "from the services recorded when draining (history pruned)", label: "s1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := &drainFake{t: t, avail: "drain", label: tt.label, history: always(tt.history),
				services: func(poll int) string {
					switch {
					case poll < 3:
						return web(1, 0, "") // the replacement not even created yet
					case poll < 5:
						return web(1, 1, "")
					}
					return web(2, 0, "")
				}}
			d, _ := f.driver()
			if err := d.Drain(t.Context(), worker1, time.Minute); err != nil {
				t.Fatalf("Drain: %v", err)
			}
			if f.polls < 5 {
				t.Errorf("Drain returned after %d polls, before the service ran elsewhere", f.polls)
			}
			if f.avail != "drain" {
				t.Errorf("the node is %s after its drain", f.avail)
			}
		})
	}
}

// The drain records the node's services in the same update that drains
// it, so no kill can fall between the two.
func TestDrainRecordsServicesWithTheDrain(t *testing.T) {
	t.Parallel()
	f := &drainFake{t: t, avail: "active",
		history: func(poll int) string {
			if poll == 0 {
				return "task|s2|t2|running|running\ntask|s1|t1|running|running\ntask|s3|t3|failed|shutdown\nservice|s1|web\nservice|s2|api\n"
			}
			return "task|s2|t2|shutdown|shutdown\ntask|s1|t1|shutdown|shutdown\ntask|s3|t3|failed|shutdown\nservice|s1|web\nservice|s2|api\n"
		},
		services: always(web(2, 0, "") + "service|s2|api|global|\ntask|s2|other|running|\n"),
	}
	d, _ := f.driver()
	if err := d.Drain(t.Context(), worker1, time.Minute); err != nil {
		t.Fatalf("Drain: %v", err)
	}
	want := []string{"in_sequence docker node update --label-add transit-drain-services=s1,s2 --availability drain w"}
	if diff := cmp.Diff(want, f.updates); diff != "" {
		t.Errorf("updates (-want +got):\n%s", diff)
	}
}

func TestDrainRefused(t *testing.T) {
	t.Parallel()
	live := always("task|s1|t1|running|running\nservice|s1|web\n")
	reactivate := "in_sequence docker node update --label-rm transit-drain-services --availability active w"
	drain := "in_sequence docker node update --label-add transit-drain-services=s1 --availability drain w"
	tests := []struct {
		name        string
		avail       string
		history     func(int) string
		services    func(int) string
		timeout     time.Duration
		wantReason  string
		wantPolls   int // at least
		wantUpdates []string
		wantWait    time.Duration // fake time passed, at least
	}{
		{
			name:        "stuck: no other node can take the task",
			avail:       "active",
			history:     live,
			services:    always(web(1, 1, "no suitable node (max replicas per node limit exceed)")),
			timeout:     time.Hour,
			wantReason:  "its tasks can run on no other node",
			wantPolls:   stuckPolls + 1, // one before draining
			wantUpdates: []string{drain, reactivate},
		},
		{
			// Stuck, placed, stuck again: the count starts over, and
			// the timeout ends it.
			name:    "stuck now and then until the timeout",
			avail:   "active",
			history: live,
			services: func(poll int) string {
				if poll%3 == 0 {
					return web(1, 1, "")
				}
				return web(1, 1, "no suitable node")
			},
			timeout:     time.Minute,
			wantReason:  "its tasks did not move within 1m0s",
			wantPolls:   60,
			wantUpdates: []string{drain, reactivate},
			wantWait:    time.Minute,
		},
		{
			name:        "timeout while the task starts slowly",
			avail:       "active",
			history:     live,
			services:    always(web(1, 1, "")),
			timeout:     5 * time.Minute,
			wantReason:  "its tasks did not move within 5m0s",
			wantPolls:   300,
			wantUpdates: []string{drain, reactivate},
			wantWait:    5 * time.Minute,
		},
		{
			// Nothing moves: the node is never drained.
			name:       "a global service runs on the node alone",
			avail:      "active",
			history:    always("task|s9|t9|running|running\nservice|s9|agent\n"),
			services:   always("service|s9|agent|global|\ntask|s9|w|running|\n"),
			timeout:    time.Hour,
			wantReason: "global service agent would be left with no task",
			wantPolls:  1,
		},
		{
			// Drained in an earlier run: made active again.
			name:        "a global service that had its task on the drained node alone",
			avail:       "drain",
			history:     always("task|s9|t9|shutdown|shutdown\nservice|s9|agent\n"),
			services:    always("service|s9|agent|global|\n"),
			timeout:     time.Hour,
			wantReason:  "global service agent would be left with no task",
			wantPolls:   1,
			wantUpdates: []string{reactivate},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := &drainFake{t: t, avail: tt.avail, history: tt.history, services: tt.services}
			d, _ := f.driver()
			start := d.opts.Clock.Now()
			err := d.Drain(t.Context(), worker1, tt.timeout)
			var de *provider.DrainError
			if !errors.As(err, &de) || !errors.Is(err, provider.ErrDrainRefused) {
				t.Fatalf("Drain: %v, want a *provider.DrainError", err)
			}
			if de.Node != worker1.ID || de.Reason != tt.wantReason || len(de.Blocking) == 0 {
				t.Errorf("DrainError %+v, want node %s, reason %q and what blocks", de, worker1.ID, tt.wantReason)
			}
			if f.polls < tt.wantPolls {
				t.Errorf("gave up after %d polls, want %d at least", f.polls, tt.wantPolls)
			}
			if waited := d.opts.Clock.Now().Sub(start); waited < tt.wantWait || waited > tt.wantWait+2*time.Second {
				t.Errorf("waited %s, want %s", waited, tt.wantWait)
			}
			if diff := cmp.Diff(tt.wantUpdates, f.updates); diff != "" {
				t.Errorf("updates (-want +got):\n%s", diff)
			}
			if f.avail != "active" {
				t.Errorf("the node is left %s", f.avail)
			}
		})
	}
}

// A five-minute drain says how it goes.
func TestDrainLogsProgress(t *testing.T) {
	t.Parallel()
	f := &drainFake{t: t, avail: "active", history: shutDownAfter(1),
		services: func(poll int) string {
			if poll < 300 {
				return web(1, 1, "")
			}
			return web(2, 0, "")
		}}
	var buf bytes.Buffer
	nodes := &fakeNodes{nodes: map[string]func(context.Context, string) (string, error){master1.ID: f.manager}}
	d := newDriver("c", Options{Clock: &clocktest.Fake{}, Logger: slog.New(slog.NewTextHandler(&buf, nil))}, nodes)
	d.managers = nil
	d.rememberManager(master1)
	if err := d.Drain(t.Context(), worker1, 10*time.Minute); err != nil {
		t.Fatalf("Drain: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) < 8 || len(lines) > 12 {
		t.Errorf("%d progress lines in 5 minutes, want one every %s:\n%s", len(lines), progressEvery, buf.String())
	}
	if !strings.Contains(lines[0], "node="+worker1.ID) || !strings.Contains(lines[0], "service web (1 of 2 tasks running elsewhere)") {
		t.Errorf("progress does not say which node waits for what: %s", lines[0])
	}
}

func TestParseServices(t *testing.T) {
	t.Parallel()
	out := "service|s1|web|replicated|3\ntask|s1|n1|running|\ntask|s1||pending|no suitable node (a|b)\n" +
		"service|s2|agent|global|\ntask|s3|n1|running|\n"
	got := parseServices(out)
	want := map[string]*service{
		"s1": {name: "web", mode: "replicated", replicas: 3, tasks: []task{
			{service: "s1", node: "n1", state: "running"},
			{service: "s1", state: "pending", err: "no suitable node (a|b)"},
		}},
		"s2": {name: "agent", mode: "global"},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(service{}, task{})); diff != "" {
		t.Errorf("parseServices (-want +got):\n%s", diff)
	}
}

// nodeTasksScript run by sh against a fake docker: a task or service
// removed between the listing and the inspection (docker service rm races
// with a drain) is skipped; any other error fails the script, so a drain
// never takes a failed listing for an empty node.
func TestNodeTasksScriptSkipsRemovedObjects(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		missing string // what docker inspect says on stderr
		exit    int
		out     string
	}{
		{name: "all there", out: "task|s1|t1|running|running\ntask|s1|t2|running|running\nservice|s1|web\n"},
		{name: "removed meanwhile", missing: "Error: No such object: t2", out: "task|s1|t1|running|running\nservice|s1|web\n"},
		{name: "daemon error", missing: "Cannot connect to the Docker daemon at unix:///var/run/docker.sock", exit: 1, out: "task|s1|t1|running|running\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			bin := t.TempDir()
			fail := ""
			if tt.missing != "" {
				fail = "echo '" + tt.missing + "' >&2; exit 1"
			}
			docker := `#!/bin/sh
case "$1 $2" in
"node ps") echo t1; echo t2 ;;
"service ls") echo s1 ;;
inspect*)
	shift 3
	for id in "$@"; do
		case "$id" in
		t1) echo 'task|s1|t1|running|running' ;;
		t2) [ -z "` + tt.missing + `" ] && echo 'task|s1|t2|running|running' ;;
		s1) echo 'service|s1|web' ;;
		esac
	done
	case "$*" in *t2*) ` + fail + ` ;; esac
	;;
*) echo "unexpected docker $*" >&2; exit 9 ;;
esac
exit 0
`
			exit, stdout, stderr := runWithFakes(t, bin, nodeTasksScript("n1"), map[string]string{"docker": docker})
			if exit != tt.exit || stdout != tt.out {
				t.Errorf("exit %d, stdout %q (stderr %q); want exit %d, stdout %q", exit, stdout, stderr, tt.exit, tt.out)
			}
			if tt.exit != 0 && !strings.Contains(stderr, tt.missing) {
				t.Errorf("the error is not passed on: stderr %q", stderr)
			}
		})
	}
}
