package gce

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Stopping and starting instances, as Compute Engine does: instances.stop
// and instances.start are zonal operations; a stopping instance is
// STOPPING, a stopped one TERMINATED (it keeps its internal address and
// disk, and gives its ephemeral external address back); started again it
// is PROVISIONING, STAGING, then RUNNING with a new external address.

// hostError is the statusMessage of an instance Compute Engine stopped
// itself (FaultFailed, Fail).
const hostError = "Instance terminated by Compute Engine: the host it ran on failed."

// externalIP is the ephemeral external address number n of an unbacked
// instance.
func externalIP(n uint64) string {
	return fmt.Sprintf("34.%d.%d.%d", 64+n/65536%64, n/256%256, n%256)
}

func notReady(resource string) *apiError {
	return &apiError{400, "FAILED_PRECONDITION", "resourceNotReady", fmt.Sprintf("The resource '%s' is not ready", resource)}
}

func (c *call) stopInstance() (any, error) {
	return c.power("stop")
}

func (c *call) startInstance() (any, error) {
	return c.power("start")
}

// power answers instances.stop and instances.start with their operation.
// Stopping a stopped instance and starting a running one are done at once;
// an instance that is being made, deleted, or (to start) stopped is not
// ready.
func (c *call) power(kind string) (any, error) {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if out, done, err := c.replay(); done {
		return out, err
	}
	in, err := c.lookupInstance()
	if err != nil {
		return nil, err
	}
	now := s.sim.Time()
	st := s.status(in, now)
	link := c.link("zones", in.zone, "instances", in.name)
	resource := fmt.Sprintf("projects/%s/zones/%s/instances/%s", c.project, in.zone, in.name)
	lat := s.Latency()
	var op *operation
	switch {
	case in.deleting:
		return nil, notReady(resource)
	case kind == "stop" && st == "RUNNING":
		op = s.newOp(c, in.zone, kind, link, in.id, lat.Stop)
		s.stop(in, now, lat.Stop)
	case kind == "stop" && (st == "STOPPING" || st == "TERMINATED"):
		op = s.newOp(c, in.zone, kind, link, in.id, 0)
	case kind == "start" && st == "TERMINATED":
		op = s.newOp(c, in.zone, kind, link, in.id, lat.Start)
		s.start(in, now, lat.Start)
	case kind == "start" && st != "STOPPING":
		op = s.newOp(c, in.zone, kind, link, in.id, 0)
	default:
		return nil, notReady(resource)
	}
	op.ready = func() bool { return !in.powering }
	s.remember(c, op)
	return c.xOp(op), nil
}

// stop makes a running instance STOPPING. Call with s.mu held.
func (s *Server) stop(in *instance, now time.Time, d time.Duration) {
	in.stopAt, in.stoppedAt, in.statusMsg = now, now.Add(s.sim.Wall(d)), ""
	if in.backed && in.machine.ID != "" && !in.off && !in.powering {
		s.powerOff(in)
	}
}

// start makes a TERMINATED instance PROVISIONING, with a new external
// address if it has one. Call with s.mu held.
func (s *Server) start(in *instance, now time.Time, d time.Duration) {
	in.stopAt, in.stoppedAt, in.statusMsg = time.Time{}, time.Time{}, ""
	in.bootAt, in.runningAt = now, now.Add(s.sim.Wall(d))
	if !in.backed {
		if in.public {
			in.publicIP = externalIP(s.nextSeq())
		}
		return
	}
	if in.machine.ID != "" && !in.powering {
		s.powerOn(in)
	}
}

// powerOff stops a backed instance's machine in the background, giving
// its external address up; the instance is STOPPING until it is off.
// Call with s.mu held.
func (s *Server) powerOff(in *instance) {
	in.powering = true
	s.Go(func(ctx context.Context) {
		// A failed power-off leaves a machine the backer's Destroy removes.
		_ = s.sim.Backer.PowerOff(ctx, "gce:"+zoneRegion(in.zone), in.machine.ID, true)
		s.mu.Lock()
		in.powering, in.off, in.publicIP = false, true, ""
		s.mu.Unlock()
		s.afterMachine(in)
		s.tick()
	})
}

// powerOn boots a stopped backed instance's machine in the background;
// the instance is STAGING until it is up, with its new external address.
// A machine that does not come up leaves the instance TERMINATED. Call
// with s.mu held.
func (s *Server) powerOn(in *instance) {
	in.powering = true
	s.Go(func(ctx context.Context) {
		m, err := s.sim.Backer.PowerOn(ctx, "gce:"+zoneRegion(in.zone), in.machine.ID)
		s.mu.Lock()
		in.powering = false
		if err != nil {
			now := s.sim.Time()
			in.stopAt, in.stoppedAt, in.statusMsg = now, now, fmt.Sprintf("The instance could not be started: %v", err)
		} else {
			in.off = false
			in.publicIP, in.privateIP = m.Address, m.Address
			if m.PrivateAddress != "" {
				in.privateIP = m.PrivateAddress
			}
		}
		s.mu.Unlock()
		s.afterMachine(in)
		s.tick()
	})
}

// listOperations answers zoneOperations.list, filtered (name, status,
// operationType, targetId, targetLink) and paged.
func (c *call) listOperations() (any, error) {
	zone, err := c.zone()
	if err != nil {
		return nil, err
	}
	f, err := parseFilter(c.q("filter"))
	if err != nil {
		return nil, err
	}
	c.s.mu.Lock()
	var all []*operation
	for _, op := range c.s.sortedOps() {
		if op.project != c.project || op.zone != zone {
			continue
		}
		status := "RUNNING"
		if op.done {
			status = "DONE"
		}
		if f.match(func(field string) (string, bool) {
			switch field {
			case "name":
				return op.name, true
			case "status":
				return status, true
			case "operationType":
				return op.opType, true
			case "targetId":
				return fmt.Sprint(op.targetI), true
			case "targetLink":
				return op.target, true
			}
			return "", false
		}) {
			all = append(all, op)
		}
	}
	c.s.mu.Unlock()
	items, next, err := page(c, all)
	if err != nil {
		return nil, err
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	out := map[string]any{"kind": "compute#operationList", "id": c.link("zones", zone, "operations"),
		"selfLink": c.link("zones", zone, "operations")}
	var xs []xOperation
	for _, op := range items {
		xs = append(xs, c.xOp(op))
	}
	if len(xs) > 0 {
		out["items"] = xs
	}
	if next != "" {
		out["nextPageToken"] = next
	}
	return out, nil
}

// instanceCall is a call on an instance ("zone/name") outside any client.
func (s *Server) instanceCall(ctx context.Context, project, id, action string) (*call, error) {
	zone, name, ok := strings.Cut(id, "/")
	if !ok {
		return nil, fmt.Errorf("cloudsim/gce: instance %q: want zone/name", id)
	}
	rest := []string{"zones", zone, "instances", name}
	if action != "" {
		rest = append(rest, action)
	}
	return &call{ctx: ctx, s: s, base: "https://compute.googleapis.com/compute/v1", project: project,
		rest: rest, query: map[string][]string{}}, nil
}

// Stop stops an instance ("zone/name") outside any client (someone in the
// console): instances.stop's effect.
func (s *Server) Stop(ctx context.Context, project, id string) error {
	c, err := s.instanceCall(ctx, project, id, "stop")
	if err == nil {
		_, err = c.stopInstance()
	}
	s.tick()
	return err
}

// Start starts a TERMINATED instance ("zone/name") outside any client:
// instances.start's effect.
func (s *Server) Start(ctx context.Context, project, id string) error {
	c, err := s.instanceCall(ctx, project, id, "start")
	if err == nil {
		_, err = c.startInstance()
	}
	s.tick()
	return err
}

// Fail stops an instance ("zone/name") as Compute Engine does after a host
// failure: TERMINATED at once, with statusMessage msg (default a host
// error's). Its machine, if backed, is powered off.
func (s *Server) Fail(ctx context.Context, project, id, msg string) error {
	c, err := s.instanceCall(ctx, project, id, "")
	if err != nil {
		return err
	}
	s.mu.Lock()
	in, err := c.lookupInstance()
	if err != nil {
		s.mu.Unlock()
		return err
	}
	if in.deleting {
		s.mu.Unlock()
		return fmt.Errorf("cloudsim/gce: instance %s is being deleted", id)
	}
	now := s.sim.Time()
	in.stopAt, in.stoppedAt = now, now
	in.statusMsg = msg
	if msg == "" {
		in.statusMsg = hostError
	}
	s.mu.Unlock()
	if in.backed {
		s.afterMachine(in)
	}
	return nil
}
