package ec2

import (
	"strconv"
	"time"
)

// Status checks (DescribeInstanceStatus). EC2 runs its system and
// instance reachability checks on running instances only: they are
// initializing for a couple of minutes after an instance starts running
// (Options.StatusCheckDelay, cloud time), then pass. The emulator's
// instances never fail them.

const (
	statusOK            = "ok"
	statusInitializing  = "initializing"
	statusNotApplicable = "not-applicable"
)

// checkStatus is the instance's status checks at now, given its state.
// Call with s.mu held.
func (s *Server) checkStatus(in *instance, st instState, now time.Time) string {
	if st != stateRunning {
		return statusNotApplicable
	}
	// It runs since its machine booted in this run (backed: once up),
	// not before the launch or start latency passed.
	since := later(in.runningAt, in.bootAt)
	if now.Before(since.Add(s.sim.Wall(s.checks))) {
		return statusInitializing
	}
	return statusOK
}

// reachability is a status's one detail, as EC2 reports it; none unless
// the instance runs.
func reachability(status string) []xStatusDetail {
	switch status {
	case statusOK:
		return []xStatusDetail{{Name: "reachability", Status: "passed"}}
	case statusInitializing:
		return []xStatusDetail{{Name: "reachability", Status: "initializing"}}
	}
	return nil
}

func (c *call) describeInstanceStatus() (requestIDSetter, error) {
	fs, limit, err := c.describing()
	if err != nil {
		return nil, err
	}
	all, err := c.p.bool("IncludeAllInstances")
	if err != nil {
		return nil, err
	}
	ids := c.p.list("InstanceId")
	if len(ids) > 0 && c.p.has("MaxResults") {
		return nil, &apiError{status: 400, code: "InvalidParameterCombination", msg: "The parameter instancesSet cannot be used with the parameter maxResults"}
	}
	s := c.s
	s.mu.Lock()
	rg, now := s.region(c.region), s.now()
	s.sweep(rg, now)
	list, err := s.lookup(rg, ids, true)
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	wanted := map[string]bool{}
	for _, in := range list {
		wanted[in.id] = true
	}
	if err := checkFilters(fs, statusAttrs(&instance{}, stateRunning, statusOK)); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	type row struct {
		seq uint64
		x   xInstanceStatus
	}
	var rows []row
	for _, in := range rg.sortedInstances() {
		if len(ids) > 0 && !wanted[in.id] || !s.seen(in, now) {
			continue
		}
		st := s.state(in, now)
		if st != stateRunning && !all {
			continue
		}
		status := s.checkStatus(in, st, now)
		ok, err := matchAll(fs, statusAttrs(in, st, status))
		if err != nil {
			s.mu.Unlock()
			return nil, err
		}
		if !ok {
			continue
		}
		sum := xStatusSummary{Status: status, Details: reachability(status)}
		rows = append(rows, row{seq: in.seq, x: xInstanceStatus{InstanceID: in.id, AvailabilityZone: in.zone, AvailabilityZoneID: zoneID(in.zone),
			State: xState{Code: st.code, Name: st.name}, SystemStatus: sum, InstanceStatus: sum}})
	}
	s.mu.Unlock()
	pg, next, err := page(c, rows, func(r row) uint64 { return r.seq }, limit)
	if err != nil {
		return nil, err
	}
	out := &describeInstanceStatusResponse{NextToken: next}
	for _, r := range pg {
		out.Statuses = append(out.Statuses, r.x)
	}
	return out, nil
}

// statusAttrs answers DescribeInstanceStatus' filters for in, in state st
// with status checks status (system and instance alike).
func statusAttrs(in *instance, st instState, status string) attrs {
	return func(f string) ([]string, bool) {
		switch f {
		case "availability-zone":
			return []string{in.zone}, true
		case "instance-state-name":
			return []string{st.name}, true
		case "instance-state-code":
			return []string{strconv.Itoa(st.code)}, true
		case "instance-status.status", "system-status.status":
			return []string{status}, true
		case "instance-status.reachability", "system-status.reachability":
			var out []string
			for _, d := range reachability(status) {
				out = append(out, d.Status)
			}
			return out, true
		case "event.code", "event.description", "event.instance-event-id",
			"event.not-after", "event.not-before", "event.not-before-deadline":
			// No scheduled events are emulated: these match nothing.
			return nil, true
		}
		return nil, false
	}
}
