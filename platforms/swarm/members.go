package swarm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// askWorkersAtOnce bounds how many workers Members asks at a time.
const askWorkersAtOnce = 10

// Members asks every master among nodes at once for the swarm's node list
// and takes the first that answers as an active manager: one dead master
// must not stall the others. When every master answered and none can
// serve, it asks the workers (one may be the swarm's manager, whatever
// transit meant it to be). It returns provider.ErrNoPlatform only when
// every node answered and none is in a swarm. Otherwise it returns a
// *provider.UnreachableError, since building a new swarm then would split
// the cluster: naming the masters that could not be asked or cannot serve
// (Masters); else, when every master answered that it serves no swarm,
// naming the workers that did not answer (Silent); else, every node
// having answered and some being in a swarm nobody serves, naming none
// (the swarm is lost).
func (d *driver) Members(ctx context.Context, nodes []districts.Node) ([]provider.Member, error) {
	var masters, workers []districts.Node
	for _, n := range nodes {
		if n.Role == districts.RoleMaster {
			masters = append(masters, n)
		} else {
			workers = append(workers, n)
		}
	}
	fromMasters := d.askMasters(ctx, masters)
	var fromWorkers []answer
	if needWorkers(fromMasters) {
		fromWorkers = d.askWorkers(ctx, workers)
	}
	if err := ctx.Err(); err != nil {
		return nil, err // cancelled: not a verdict on the swarm
	}
	list, from, err := judge(fromMasters, fromWorkers)
	if err != nil {
		return nil, err
	}
	members := d.members(list, nodes)
	d.rememberManager(from)
	return members, nil
}

// answer is what one node said when asked about its swarm.
type answer struct {
	node  districts.Node
	state localState
	list  []swarmNode // the swarm's nodes, from a master that serves it
	err   error       // why the node could not be asked
}

// localState is a node's own view of its swarm (localStateScript).
type localState struct {
	// State is "none" (no swarm, or no engine yet), "down" (its engine
	// is not running but it belongs to a swarm), or docker's
	// LocalNodeState: inactive, pending, active, error, locked.
	State   string
	Manager bool // docker's ControlAvailable
	NodeID  string
}

// inSwarm says the node belongs to a swarm, working or not.
func (s localState) inSwarm() bool { return s.State != "none" && s.State != "inactive" }

// serves says the node is a manager that can list its swarm.
func (s localState) serves() bool { return s.State == "active" && s.Manager }

// parseLocalState reads localStateScript's line.
func parseLocalState(line string) (localState, error) {
	f := strings.Fields(line)
	switch {
	case len(f) == 1 && (f[0] == "none" || f[0] == "down"):
		return localState{State: f[0]}, nil
	case len(f) == 2 || len(f) == 3:
		if f[1] != "true" && f[1] != "false" {
			break
		}
		s := localState{State: f[0], Manager: f[1] == "true"}
		if len(f) == 3 {
			s.NodeID = f[2]
		}
		return s, nil
	}
	return localState{}, fmt.Errorf("unexpected swarm state %q", strings.TrimSpace(line))
}

// parseAnswer reads the output of localStateScript or membersScript from
// node n.
func parseAnswer(n districts.Node, out string) answer {
	line, rest, _ := strings.Cut(out, "\n")
	a := answer{node: n}
	a.state, a.err = parseLocalState(line)
	if a.err != nil {
		a.err = fmt.Errorf("%s: %w", n.ID, a.err)
		return a
	}
	if strings.TrimSpace(rest) != "" {
		a.list, a.err = parseNodes(n, rest)
	}
	return a
}

// ask runs script (localStateScript or membersScript) on n.
func (d *driver) ask(ctx context.Context, n districts.Node, name, script string) answer {
	if !hasAddress(n) {
		return answer{node: n, err: fmt.Errorf("%s: no address to ask it on: its machine is gone", n.ID)}
	}
	out, err := d.run(ctx, n, name, script)
	if err != nil {
		return answer{node: n, err: err}
	}
	return parseAnswer(n, out)
}

// askMasters asks every master at once; once one answers with the swarm's
// node list the others are cancelled.
func (d *driver) askMasters(ctx context.Context, masters []districts.Node) []answer {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	answers := make([]answer, len(masters))
	var mu sync.Mutex
	winner := -1
	var g errgroup.Group
	for i, m := range masters {
		g.Go(func() error {
			a := d.ask(ctx, m, "ask for the swarm's nodes", membersScript())
			mu.Lock()
			defer mu.Unlock()
			answers[i] = a
			if winner < 0 && a.err == nil && a.state.serves() && a.list != nil {
				winner = i
				cancel()
			}
			return nil
		})
	}
	_ = g.Wait() // the goroutines keep their errors in answers
	if winner >= 0 {
		// The others were cut short; only the master that served counts.
		return answers[winner : winner+1]
	}
	return answers
}

// needWorkers says whether the workers must be asked: every master
// answered, and none is a manager that cannot serve (down, locked,
// joining, listing nothing). A master that is a mere worker of a swarm
// leaves the question open: a node transit made a worker may be its
// manager. Otherwise the masters' answers decide.
func needWorkers(masters []answer) bool {
	for _, a := range masters {
		if a.err != nil || a.list != nil || a.state.serves() || (a.state.inSwarm() && a.state.State != "active") {
			return false
		}
	}
	return true
}

// askWorkers asks the workers, a few at a time, whether they are in a
// swarm; one that is an active manager (the swarm's role, whatever
// transit meant) also lists the swarm's nodes.
func (d *driver) askWorkers(ctx context.Context, workers []districts.Node) []answer {
	answers := make([]answer, len(workers))
	var g errgroup.Group
	g.SetLimit(askWorkersAtOnce)
	for i, w := range workers {
		g.Go(func() error {
			answers[i] = d.ask(ctx, w, "ask for the swarm state", membersScript())
			return nil
		})
	}
	_ = g.Wait() // the goroutines keep their errors in answers
	return answers
}

// judge decides from the nodes' answers: the swarm's node list and the
// node that gave it (a master, else a worker that is a manager), or
// provider.ErrNoPlatform when every node answered and none is in a swarm,
// else a *provider.UnreachableError with each node's reason. It names the
// masters that could not serve now (unreachable, engine down, locked,
// joining, listing nothing) in Masters; when every master answered that
// it serves no swarm, it names the other nodes that did not answer in
// Silent (whether they are in a swarm is unknown); only when every node
// answered and some are in a swarm no master serves does it name none:
// that swarm is lost.
func judge(masters, workers []answer) ([]swarmNode, districts.Node, error) {
	for _, a := range append(slices.Clone(masters), workers...) {
		if a.err == nil && a.state.serves() && a.list != nil {
			return a.list, a.node, nil
		}
	}
	var errs []error
	var down, silent, inSwarm []string
	for _, a := range masters {
		switch {
		case a.err != nil:
			errs = append(errs, a.err)
		case a.state.State == "down":
			errs = append(errs, fmt.Errorf("master %s belongs to a swarm but its docker engine is not running", a.node.ID))
		case a.state.serves():
			errs = append(errs, fmt.Errorf("master %s is a swarm manager but listed no nodes", a.node.ID))
		case a.state.State == "active":
			errs = append(errs, fmt.Errorf("master %s is only a worker of its swarm", a.node.ID))
			inSwarm = append(inSwarm, a.node.ID)
			continue
		case a.state.inSwarm():
			errs = append(errs, fmt.Errorf("master %s cannot serve its swarm now (state %s)", a.node.ID, a.state.State))
		default:
			errs = append(errs, fmt.Errorf("master %s is in no swarm", a.node.ID))
			continue
		}
		down = append(down, a.node.ID)
	}
	var workersIn []string
	for _, a := range workers {
		switch {
		case a.err != nil:
			errs = append(errs, a.err)
			silent = append(silent, a.node.ID)
		case a.state.inSwarm():
			workersIn = append(workersIn, fmt.Sprintf("%s (%s)", a.node.ID, a.state.State))
			inSwarm = append(inSwarm, a.node.ID)
		}
	}
	if len(workersIn) > 0 {
		errs = append(errs, fmt.Errorf("workers in a swarm no master serves: %s", strings.Join(workersIn, ", ")))
	}
	switch {
	case len(down) > 0:
		return nil, districts.Node{}, &provider.UnreachableError{Masters: down, Err: errors.Join(errs...)}
	case len(silent) > 0:
		return nil, districts.Node{}, &provider.UnreachableError{Silent: silent, Err: errors.Join(errs...)}
	case len(inSwarm) > 0:
		return nil, districts.Node{}, &provider.UnreachableError{Err: errors.Join(errs...)}
	}
	return nil, districts.Node{}, provider.ErrNoPlatform
}

// membersOf maps the swarm's nodes onto transit's: one member per
// identity, nodes' members first in their order, then the members whose
// machine is not among nodes (deleted behind transit's back) by id. It also
// returns the nodes that are voting, ready managers, to run manager commands
// on.
func membersOf(list []swarmNode, nodes []districts.Node) ([]provider.Member, []districts.Node) {
	var out []provider.Member
	var managers []districts.Node
	known := map[string]bool{}
	for _, n := range nodes {
		known[n.ID] = true
		sn, ok := match(list, n)
		if !ok {
			continue
		}
		m := member(sn, n.ID)
		if m.Voter && m.Ready {
			managers = append(managers, n)
		}
		out = append(out, m)
	}
	var others []string
	for _, sn := range list {
		if id := identity(sn); id != "" && !known[id] {
			known[id] = true
			others = append(others, id)
		}
	}
	slices.Sort(others)
	for _, id := range others {
		sn, _ := pick(list, id, "")
		out = append(out, member(sn, id))
	}
	return out, managers
}

// member is swarm node sn as the member with transit node id id. Its role
// is the swarm's, whatever transit meant it to be: a master is a manager,
// one holding a Raft seat or promoted and about to get one. It votes
// while it holds a seat the other managers reach, and a manager is ready
// only then. Its addresses are those the swarm reaches it on.
func member(sn swarmNode, id string) provider.Member {
	m := provider.Member{
		NodeID:    id,
		Role:      districts.RoleWorker,
		Ready:     sn.Status.State == "ready",
		Draining:  sn.Spec.Availability != "active",
		Labels:    map[string]string{},
		Addresses: addresses(sn),
	}
	if isVoter(sn) || sn.Spec.Role == "manager" {
		m.Role = districts.RoleMaster
	}
	if isVoter(sn) {
		m.Voter = reachable(sn)
		m.Ready = m.Ready && m.Voter
	}
	for _, k := range managedKeys(sn.Spec.Labels) {
		if v, ok := sn.Spec.Labels[k]; ok {
			m.Labels[k] = v
		}
	}
	return m
}

// addresses are the addresses the swarm knows node sn by: the one its
// engine reports from (Status.Addr) and, for a manager, the one it
// advertises to the other managers; never the unspecified address a
// manager may report as its Status.Addr.
func addresses(sn swarmNode) []string {
	var out []string
	add := func(a string) {
		if ip, err := netip.ParseAddr(a); err == nil && !ip.IsUnspecified() && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	add(sn.Status.Addr)
	if sn.ManagerStatus != nil {
		host, _, err := net.SplitHostPort(sn.ManagerStatus.Addr)
		if err != nil {
			host = sn.ManagerStatus.Addr
		}
		add(host)
	}
	return out
}

// members maps the swarm's nodes onto transit's (membersOf) and remembers
// the ready managers.
func (d *driver) members(list []swarmNode, nodes []districts.Node) []provider.Member {
	out, managers := membersOf(list, nodes)
	d.mu.Lock()
	d.managers = managers
	d.mu.Unlock()
	return out
}

// isVoter says the swarm node holds a Raft seat, reachable or not (a
// promotion takes effect, and a demotion ends, when the seat appears or
// goes); it votes while the other managers reach it.
func isVoter(sn swarmNode) bool { return sn.ManagerStatus != nil }

// identity is the transit node id a swarm node carries: its identity
// label, else its hostname; empty when it has neither.
func identity(sn swarmNode) string {
	if id := sn.Spec.Labels[labelNode]; id != "" {
		return id
	}
	return sn.Description.Hostname
}

// match finds n among the swarm's nodes by identity (see pick).
func match(list []swarmNode, n districts.Node) (swarmNode, bool) {
	return pick(list, n.ID, advertiseAddr(n))
}

// pick chooses among the swarm nodes with identity id. Of several (a node
// that left and joined again), a ready one wins, then one on addr: a stale
// entry that is down never hides the live one.
func pick(list []swarmNode, id, addr string) (swarmNode, bool) {
	best, score := swarmNode{}, -1
	for _, sn := range list {
		if id == "" || identity(sn) != id {
			continue
		}
		s := 0
		if sn.Status.State == "ready" {
			s += 2
		}
		if addr != "" && sn.Status.Addr == addr {
			s++
		}
		if s > score {
			best, score = sn, s
		}
	}
	return best, score >= 0
}
