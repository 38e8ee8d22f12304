package swarm

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// labelDrain records, in the same update that drains a node, the services
// that ran on it: a drain killed and resumed in a later run still knows
// what it waits for, though the node runs no task any more.
const labelDrain = "transit-drain-services"

// stuckPolls is how many polls in a row a task may wait for a node
// ("no suitable node") before the drain is refused.
const stuckPolls = 3

// Drain sets n to availability drain and waits until none of its tasks runs
// there and every service that ran on it (the services recorded by an
// earlier drain, those of its live tasks and of the tasks its history shows
// shut down) runs its desired tasks elsewhere. When that does not happen
// within timeout, a task can be placed on no other node, or a global
// service would be left with no task, it makes n active again and returns
// a *provider.DrainError.
func (d *driver) Drain(ctx context.Context, n districts.Node, timeout time.Duration) error {
	sn, err := d.find(ctx, n)
	if err != nil {
		return fmt.Errorf("drain node %s: %w", n.ID, err)
	}
	history, err := d.nodeTasks(ctx, sn.ID)
	if err != nil {
		return fmt.Errorf("drain node %s: %w", n.ID, err)
	}
	services := drainServices(sn.Spec.Labels[labelDrain], history)
	refuse := func(reason string, blocking []string) error {
		if sn.Spec.Availability == "active" && sn.Spec.Labels[labelDrain] == "" {
			return &provider.DrainError{Node: n.ID, Reason: reason, Blocking: blocking}
		}
		return d.undrain(ctx, n, sn.ID, reason, blocking)
	}
	// A global service running here alone is refused before anything
	// moves.
	if len(services) > 0 {
		out, _, err := d.runOnManager(ctx, "", "list tasks of the node's services", serviceTasksScript(services))
		if err != nil {
			return fmt.Errorf("drain node %s: %w", n.ID, err)
		}
		if p := judgeDrain(sn.ID, nil, parseServices(out)); p.refused != "" {
			return refuse(p.refused, p.blocking)
		}
	}
	label := strings.Join(services, ",")
	if sn.Spec.Availability != "drain" || sn.Spec.Labels[labelDrain] != label {
		set := map[string]string{labelDrain: label}
		if label == "" {
			set = nil
		}
		if err := d.onManager(ctx, "drain node "+n.ID, nodeUpdateScript(sn.ID, set, nil, "drain", ""), ""); err != nil {
			return fmt.Errorf("drain node %s: %w", n.ID, err)
		}
		sn.Spec.Availability = "drain"
	}

	start := d.opts.Clock.Now()
	lastLog := start
	stuck := 0
	for {
		p, err := d.drainProgress(ctx, sn.ID, services)
		if err != nil {
			return fmt.Errorf("drain node %s: %w", n.ID, err)
		}
		if p.refused != "" {
			return d.undrain(ctx, n, sn.ID, p.refused, p.blocking)
		}
		if len(p.blocking) == 0 {
			return nil
		}
		if p.stuck {
			stuck++
		} else {
			stuck = 0
		}
		now := d.opts.Clock.Now()
		switch {
		case stuck >= stuckPolls:
			return d.undrain(ctx, n, sn.ID, "its tasks can run on no other node", p.blocking)
		case now.Sub(start) >= timeout:
			return d.undrain(ctx, n, sn.ID, fmt.Sprintf("its tasks did not move within %s", timeout), p.blocking)
		}
		if now.Sub(lastLog) >= progressEvery {
			d.opts.Logger.InfoContext(ctx, "draining", "node", n.ID, "waited", now.Sub(start).Round(time.Second),
				"timeout", timeout, "waiting_for", strings.Join(p.blocking, "; "))
			lastLog = now
		}
		if err := d.opts.Clock.Sleep(ctx, d.opts.PollInterval); err != nil {
			return err
		}
	}
}

// undrain makes n active again after a refused drain, dropping the
// services recorded, and returns the *provider.DrainError.
func (d *driver) undrain(ctx context.Context, n districts.Node, swarmID, reason string, blocking []string) error {
	if err := d.onManager(ctx, "make node "+n.ID+" active again",
		nodeUpdateScript(swarmID, nil, []string{labelDrain}, "active", ""), ""); err != nil {
		return fmt.Errorf("drain of node %s failed (%s), and so did making it active again: %w", n.ID, reason, err)
	}
	return &provider.DrainError{Node: n.ID, Reason: reason, Blocking: blocking}
}

// drainServices are the services a drain of a node waits for: those
// recorded by an earlier drain, those of its live tasks, and those of its
// tasks the orchestrator shut down (a drain, interrupted or not, shuts
// them down), sorted.
func drainServices(recorded string, history []task) []string {
	set := map[string]bool{}
	for s := range strings.SplitSeq(recorded, ",") {
		if s != "" {
			set[s] = true
		}
	}
	for _, t := range history {
		if t.alive() || (t.desired == "shutdown" && t.state == "shutdown") {
			set[t.service] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// progress is what keeps a drain from finishing.
type progress struct {
	blocking []string // tasks on the node, services not running elsewhere
	stuck    bool     // some task waits for a node no node can be
	refused  string   // why the drain must not go on
}

// drainProgress asks a manager what still keeps a drain of node swarmID
// from finishing.
func (d *driver) drainProgress(ctx context.Context, swarmID string, services []string) (progress, error) {
	onNode, err := d.nodeTasks(ctx, swarmID)
	if err != nil {
		return progress{}, err
	}
	var svc map[string]*service
	if len(services) > 0 {
		out, _, err := d.runOnManager(ctx, "", "list tasks of drained services", serviceTasksScript(services))
		if err != nil {
			return progress{}, err
		}
		svc = parseServices(out)
	}
	return judgeDrain(swarmID, onNode, svc), nil
}

// judgeDrain says what keeps a drain of node swarmID from finishing: its
// live tasks, and each service not running its desired tasks on other
// nodes. A global service with no task wanted on any other node refuses
// the drain: it would run nowhere.
func judgeDrain(swarmID string, onNode []task, services map[string]*service) progress {
	var p progress
	names := map[string]bool{}
	for _, t := range onNode {
		if t.alive() {
			names["task "+t.id+" of service "+t.name] = true
		}
	}
	for _, id := range slices.Sorted(maps.Keys(services)) {
		s := services[id]
		if s.mode == "job" {
			continue // jobs end by themselves
		}
		elsewhere, running := 0, 0
		for _, t := range s.tasks {
			if t.node == swarmID {
				continue
			}
			elsewhere++
			if t.state == "running" {
				running++
				continue
			}
			why := t.state
			if t.err != "" {
				why = t.err
			}
			if strings.Contains(t.err, "no suitable node") {
				p.stuck = true
			}
			names["service "+s.name+" ("+why+")"] = true
		}
		switch {
		case s.mode == "global" && elsewhere == 0:
			if p.refused == "" {
				p.refused = "global service " + s.name + " would be left with no task"
			}
			names["service "+s.name+" (global, no other node)"] = true
		case s.mode == "replicated" && running < s.replicas:
			names[fmt.Sprintf("service %s (%d of %d tasks running elsewhere)", s.name, running, s.replicas)] = true
		}
	}
	p.blocking = slices.Sorted(maps.Keys(names))
	return p
}

type task struct {
	service, name string // id and name of its service
	id, state     string
	desired       string // the state the swarm wants it in
	node, err     string // serviceTasksScript only
}

// alive says the task occupies its node: it is not finished, failed or
// shut down.
func (t task) alive() bool {
	switch t.state {
	case "new", "pending", "assigned", "accepted", "preparing", "ready", "starting", "running":
		return true
	}
	return false
}

func (d *driver) nodeTasks(ctx context.Context, swarmID string) ([]task, error) {
	out, _, err := d.runOnManager(ctx, "", "list tasks on a node", nodeTasksScript(swarmID))
	if err != nil {
		return nil, err
	}
	return parseTasks(out), nil
}

// parseTasks reads nodeTasksScript's output.
func parseTasks(out string) []task {
	var tasks []task
	names := map[string]string{}
	for line := range strings.Lines(out) {
		f := strings.Split(strings.TrimSpace(line), "|")
		switch {
		case (len(f) == 4 || len(f) == 5) && f[0] == "task":
			t := task{service: f[1], id: f[2], state: f[3]}
			if len(f) == 5 {
				t.desired = f[4]
			}
			tasks = append(tasks, t)
		case len(f) == 3 && f[0] == "service":
			names[f[1]] = f[2]
		}
	}
	for i, t := range tasks {
		tasks[i].name = t.service
		if n, ok := names[t.service]; ok {
			tasks[i].name = n
		}
	}
	return tasks
}

// service is a service as serviceTasksScript reports it.
type service struct {
	name     string
	mode     string // replicated, global or job
	replicas int
	tasks    []task // those the swarm wants running
}

// parseServices reads serviceTasksScript's output, by service id; a
// service that no longer exists is absent.
func parseServices(out string) map[string]*service {
	services := map[string]*service{}
	for line := range strings.Lines(out) {
		f := strings.Split(strings.TrimRight(line, "\r\n"), "|")
		switch {
		case len(f) == 5 && f[0] == "service":
			r, _ := strconv.Atoi(f[4]) // empty unless replicated
			s := services[f[1]]
			if s == nil {
				s = &service{}
				services[f[1]] = s
			}
			s.name, s.mode, s.replicas = f[2], f[3], r
		case len(f) >= 5 && f[0] == "task":
			s := services[f[1]]
			if s == nil {
				s = &service{name: f[1]}
				services[f[1]] = s
			}
			// The error may hold "|".
			s.tasks = append(s.tasks, task{service: f[1], node: f[2], state: f[3], err: strings.Join(f[4:], "|")})
		}
	}
	for id, s := range services {
		if s.mode == "" {
			delete(services, id) // its tasks were listed but not the service: gone meanwhile
		}
	}
	return services
}
