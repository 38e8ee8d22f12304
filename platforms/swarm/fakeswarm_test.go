package swarm

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/platforms/ssh"
)

// fakeSwarm is a swarm harsher than a real one: a demotion takes
// demoteLag node listings to take the seat away, a demoted leader leaves
// the swarm without a leader for electLag more listings, and a node that
// left is reported down only downLag listings later. It records each step
// and every violation of what a real swarm needs to keep its leader.
type fakeSwarm struct {
	t                            *testing.T
	demoteLag, electLag, downLag int

	mu      sync.Mutex
	entries []*fakeEntry
	dead    map[string]bool // transit node ids that do not answer SSH
	// failOnce makes the first run whose name starts with the key fail.
	failOnce  map[string]bool
	electIn   int
	steps     []string
	bad       []string // violations
	rotations int
}

type fakeEntry struct {
	id, node string // swarm node id, transit node id
	role     string // spec role
	seat     bool
	leader   bool
	down     bool
	left     bool
	demoteIn int
	downIn   int
	labels   map[string]string // besides the identity label
}

func newFakeSwarm(t *testing.T, entries ...*fakeEntry) *fakeSwarm {
	return &fakeSwarm{t: t, entries: entries, dead: map[string]bool{}, failOnce: map[string]bool{}, demoteLag: 3, electLag: 2, downLag: 2}
}

func seat(id, node string, leader bool) *fakeEntry {
	return &fakeEntry{id: id, node: node, role: "manager", seat: true, leader: leader}
}

func (f *fakeSwarm) entry(pred func(*fakeEntry) bool) *fakeEntry {
	for _, e := range f.entries {
		if pred(e) {
			return e
		}
	}
	return nil
}

// leaders counts the seats that lead and those that vote.
func (f *fakeSwarm) quorum() (seats, up int, leader bool) {
	for _, e := range f.entries {
		if e.seat {
			seats++
			if !e.down {
				up++
			}
			leader = leader || e.leader
		}
	}
	return seats, up, leader
}

// tick moves the swarm's background work on by one listing.
func (f *fakeSwarm) tick() {
	for _, e := range f.entries {
		if e.seat && e.role == "worker" {
			if e.demoteIn--; e.demoteIn <= 0 {
				e.seat = false
				if e.leader {
					e.leader = false
					f.electIn = f.electLag
				}
			}
		}
		if e.left && !e.down {
			if e.downIn--; e.downIn <= 0 {
				e.down = true
			}
		}
	}
	if _, _, leader := f.quorum(); !leader && f.electIn > 0 {
		if f.electIn--; f.electIn == 0 {
			if e := f.entry(func(e *fakeEntry) bool { return e.seat && !e.down }); e != nil {
				e.leader = true
			}
		}
	}
}

func (e *fakeEntry) specLabels() map[string]string {
	l := map[string]string{labelNode: e.node}
	for k, v := range e.labels {
		l[k] = v
	}
	return l
}

func (f *fakeSwarm) inspect() string {
	var list []map[string]any
	for _, e := range f.entries {
		sn := map[string]any{
			"ID":          e.id,
			"Spec":        map[string]any{"Labels": e.specLabels(), "Role": e.role, "Availability": "active"},
			"Description": map[string]any{"Hostname": e.node},
			"Status":      map[string]any{"State": map[bool]string{true: "down", false: "ready"}[e.down]},
		}
		if e.seat {
			reach := "reachable"
			if e.down {
				reach = "unreachable"
			}
			sn["ManagerStatus"] = map[string]any{"Leader": e.leader, "Reachability": reach}
		}
		list = append(list, sn)
	}
	b, err := json.Marshal(list)
	if err != nil {
		f.t.Fatal(err)
	}
	return string(b)
}

var quotedID = regexp.MustCompile(`^docker node (?:demote|rm)(?: --force)? '?([^'\s]*)`)

func runErr(n districts.Node, name string, status int, stderr string) error {
	return &ssh.RunError{Target: ssh.Target{Name: n.ID}, Name: name, ExitStatus: status, Stderr: stderr}
}

func (f *fakeSwarm) Upload(_ context.Context, n districts.Node, path string, _ fs.FileMode, _ io.Reader, _ int64) error {
	f.t.Errorf("%s: unexpected upload of %s", n.ID, path)
	return fmt.Errorf("%s: the fake swarm takes no uploads", n.ID)
}

func (f *fakeSwarm) Run(ctx context.Context, n districts.Node, name, script string, _ []byte) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.dead[n.ID] {
		f.steps = append(f.steps, n.ID+": unreachable: "+name)
		return "", fmt.Errorf("%s (10.0.0.9:22): %w after 10s: i/o timeout", n.ID, ssh.ErrUnreachable)
	}
	for prefix := range f.failOnce {
		if strings.HasPrefix(name, prefix) {
			delete(f.failOnce, prefix)
			f.steps = append(f.steps, n.ID+": failed: "+name)
			return "", runErr(n, name, 1, "Error response from daemon: rpc error: code = Unavailable")
		}
	}
	self := f.entry(func(e *fakeEntry) bool { return e.node == n.ID && !e.left })
	isManager := self != nil && self.seat && !self.down
	switch {
	case strings.Contains(script, "docker swarm leave"):
		f.steps = append(f.steps, n.ID+": leave")
		if self == nil {
			return "", nil
		}
		if self.seat {
			if strings.Contains(script, "ControlAvailable") {
				return "", runErr(n, name, exitRetry, "the node still runs as a swarm manager")
			}
			f.bad = append(f.bad, n.ID+" left while it held a manager seat")
			self.seat, self.leader = false, false
		}
		if strings.Contains(script, "--force") {
			f.bad = append(f.bad, n.ID+" left with --force")
		}
		self.left, self.downIn = true, f.downLag
		return "", nil
	}
	f.tick() // the swarm moves on while the driver waits
	switch {
	case !isManager:
		f.t.Errorf("%s: %q run on a node that is no active manager", n.ID, name)
		return "", runErr(n, name, 1, "This node is not a swarm manager.")
	case script == inspectScript():
		return f.inspect(), nil
	case strings.Contains(script, "--rotate"):
		f.steps = append(f.steps, n.ID+": rotate")
		f.rotations++
		return "", nil
	case strings.Contains(script, "docker node demote"):
		id := quotedID.FindStringSubmatch(script[strings.Index(script, "docker node demote"):])[1]
		f.steps = append(f.steps, n.ID+": demote "+id)
		if e := f.entry(func(e *fakeEntry) bool { return e.id == id }); e != nil {
			e.role, e.demoteIn = "worker", f.demoteLag
			if strings.Contains(script, "--label-add "+labelRotate+"=true ") {
				if e.labels == nil {
					e.labels = map[string]string{}
				}
				e.labels[labelRotate] = "true"
			}
		}
		return "", nil
	case strings.Contains(script, "docker node rm"):
		id := quotedID.FindStringSubmatch(script[strings.Index(script, "docker node rm"):])[1]
		force := strings.Contains(script, "rm --force")
		e := f.entry(func(e *fakeEntry) bool { return e.id == id })
		if e == nil {
			return "", nil
		}
		switch {
		case e.seat:
			f.bad = append(f.bad, "removed swarm node "+id+" while it held a manager seat")
		case !force && !e.down:
			return "", runErr(n, name, exitRetry, "Error response from daemon: rpc error: code = FailedPrecondition desc = node "+id+" is not down and can't be removed")
		}
		f.steps = append(f.steps, n.ID+": rm "+map[bool]string{true: "--force ", false: ""}[force]+id)
		f.entries = slices.DeleteFunc(f.entries, func(x *fakeEntry) bool { return x == e })
		return "", nil
	}
	f.t.Errorf("%s: unexpected script %q:\n%s", n.ID, name, script)
	return "", runErr(n, name, 1, "unexpected")
}

// check fails the test on any violation, and when the swarm is left
// without a leader.
func (f *fakeSwarm) check() {
	f.t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, b := range f.bad {
		f.t.Error(b)
	}
	if seats, up, leader := f.quorum(); !leader || up < seats/2+1 {
		f.t.Errorf("the swarm lost its leader or quorum: %d seats, %d up, leader %t", seats, up, leader)
	}
}
