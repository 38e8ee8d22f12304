package openstack

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/cloudtransit/transit/cloudsim"
)

// Stopping, starting and soft-deleting servers, as Nova does: os-stop
// powers an ACTIVE (or ERROR) server off (task_state powering-off, then
// SHUTOFF), os-start a SHUTOFF one on (SHUTOFF with task_state
// powering-on, then ACTIVE); its fixed address, floating IPs and disk
// stay. A wrong state answers 409 with Nova's words. With
// Options.ReclaimInterval (Nova's reclaim_instance_interval) a DELETE
// soft-deletes a server that was ever ACTIVE: SOFT_DELETED, powered off,
// until the interval has passed; a DELETE of a SOFT_DELETED server
// soft-deletes it again (its reclaim time starts anew), forceDelete
// deletes it now, restore brings it back.

// actionOp classifies a server action's request for fault injection.
func actionOp(body []byte) cloudsim.Op {
	var b map[string]json.RawMessage
	if json.Unmarshal(body, &b) != nil {
		return cloudsim.OpList
	}
	switch {
	case b["os-stop"] != nil, b["os-start"] != nil, b["restore"] != nil:
		return cloudsim.OpPower
	case b["forceDelete"] != nil:
		return cloudsim.OpTerminate
	}
	return cloudsim.OpList
}

func invalidState(action, id, attr, state string) *apiError {
	return conflict("conflictingRequest", fmt.Sprintf("Cannot '%s' instance %s while it is in %s %s", action, id, attr, state))
}

// powerAction answers os-stop and os-start: 202, or 409 when the server is
// not on a host (InstanceNotReady) or not in a state the action takes.
func (c *call) powerAction(action string) (reply, error) {
	s := c.s
	lat := s.Latency()
	s.mu.Lock()
	defer s.mu.Unlock()
	sv, err := c.lookupServer(c.rest[1])
	if err != nil {
		return reply{}, err
	}
	now := s.sim.Time()
	status, task := s.state(sv, now)
	vm := vmStateName(status)
	switch {
	case !sv.host:
		return reply{}, conflict("conflictingRequest", fmt.Sprintf("Instance %s is not ready", sv.id))
	case action == "stop" && vm != "active" && vm != "error", action == "start" && vm != "stopped":
		return reply{}, invalidState(action, sv.id, "vm_state", vm)
	case task != "":
		return reply{}, invalidState(action, sv.id, "task_state", task)
	}
	if action == "stop" {
		s.stop(sv, now, lat.Stop)
	} else {
		s.start(sv, now, lat.Start)
	}
	return reply{202, nil}, nil
}

// stop powers a server off. Call with s.mu held.
func (s *Server) stop(sv *server, now time.Time, d time.Duration) {
	sv.failed, sv.failAt = "", time.Time{}
	sv.stopAt, sv.offAt = now, now.Add(s.sim.Wall(d))
	if sv.backed && sv.machine.ID != "" && !sv.off && !sv.powering {
		s.powerOff(sv)
	}
}

// start powers a SHUTOFF (or restored) server on. Call with s.mu held.
func (s *Server) start(sv *server, now time.Time, d time.Duration) {
	sv.stopAt, sv.offAt, sv.softAt, sv.softDone = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	sv.restart, sv.activeAt = true, now.Add(s.sim.Wall(d))
	if sv.backed && sv.machine.ID != "" && sv.off && !sv.powering {
		s.powerOn(sv)
	}
}

// softDelete soft-deletes a server. Call with s.mu held.
func (s *Server) softDelete(sv *server, now time.Time, d time.Duration) {
	if sv.softAt.IsZero() {
		sv.softAt, sv.softDone = now, now.Add(s.sim.Wall(d))
	}
	from := now
	if sv.softDone.After(now) {
		from = sv.softDone
	}
	sv.reclaimAt = from.Add(s.sim.Wall(s.opts.ReclaimInterval))
	if sv.backed && sv.machine.ID != "" && !sv.off && !sv.powering {
		s.powerOff(sv)
	}
}

// forceDelete deletes a server now, whatever its state (SOFT_DELETED
// included), as Nova's forceDelete action does: 202.
func (c *call) forceDelete() (reply, error) {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	sv, err := c.lookupServer(c.rest[1])
	if err != nil {
		return reply{}, err
	}
	s.hardDelete(sv, s.sim.Time())
	return reply{202, nil}, nil
}

// restore brings a SOFT_DELETED server back: ACTIVE again.
func (c *call) restore() (reply, error) {
	s := c.s
	lat := s.Latency()
	s.mu.Lock()
	defer s.mu.Unlock()
	sv, err := c.lookupServer(c.rest[1])
	if err != nil {
		return reply{}, err
	}
	now := s.sim.Time()
	if status, _ := s.state(sv, now); status != "SOFT_DELETED" {
		return reply{}, invalidState("restore", sv.id, "vm_state", vmStateName(status))
	}
	s.start(sv, now, lat.Start)
	return reply{202, nil}, nil
}

// powerOff stops a backed server's machine in the background; its
// public address (a floating IP's) stays. Call with s.mu held.
func (s *Server) powerOff(sv *server) {
	sv.powering = true
	s.Go(func(ctx context.Context) {
		// A failed power-off leaves a machine the backer's Destroy removes.
		_ = s.sim.Backer.PowerOff(ctx, "openstack:"+sv.region, sv.machine.ID, false)
		s.mu.Lock()
		sv.powering, sv.off = false, true
		s.mu.Unlock()
		s.afterMachine(sv)
	})
}

// powerOn boots a backed server's machine again in the background; a
// machine that does not come up leaves the server ERROR with a fault, as
// Nova does when a start fails. Call with s.mu held.
func (s *Server) powerOn(sv *server) {
	sv.powering = true
	s.Go(func(ctx context.Context) {
		m, err := s.sim.Backer.PowerOn(ctx, "openstack:"+sv.region, sv.machine.ID)
		s.mu.Lock()
		sv.powering = false
		if err != nil {
			sv.failed, sv.failAt = fmt.Sprintf("Failed to power on the instance: %v", err), time.Time{}
		} else {
			sv.off = false
			sv.machine.Address, sv.machine.PrivateAddress = m.Address, m.PrivateAddress
		}
		s.mu.Unlock()
		s.afterMachine(sv)
	})
}

// Stop stops a server outside any client (someone in Horizon): os-stop's
// effect.
func (s *Server) Stop(ctx context.Context, region, project, id string) error {
	c := &call{ctx: ctx, s: s, base: "http://cloudsim", region: region, project: project,
		rest: []string{"servers", id, "action"}, query: map[string][]string{}}
	_, err := c.powerAction("stop")
	return err
}

// Start starts a SHUTOFF server outside any client: os-start's effect.
func (s *Server) Start(ctx context.Context, region, project, id string) error {
	c := &call{ctx: ctx, s: s, base: "http://cloudsim", region: region, project: project,
		rest: []string{"servers", id, "action"}, query: map[string][]string{}}
	_, err := c.powerAction("start")
	return err
}

// Fail makes a server ERROR at once with a fault of msg (default the
// scheduler's "No valid host was found"), as Nova leaves one an
// operation failed on; its machine, if backed, is left as it is.
func (s *Server) Fail(_ context.Context, region, project, id, msg string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := &call{s: s, region: region, project: project}
	sv, err := c.lookupServer(id)
	if err != nil {
		return err
	}
	sv.failed, sv.failAt = cmp.Or(msg, noValidHost), time.Time{}
	return nil
}
