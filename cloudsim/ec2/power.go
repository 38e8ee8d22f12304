package ec2

import (
	"context"
	"fmt"
	"time"
)

// Stopping and starting instances, as EC2 does for EBS-backed ones: a
// stopped instance keeps its id, private address, disk and host keys and
// gives its auto-assigned public address back; started again it gets a
// new one.

func userInitiated(now time.Time) string {
	return fmt.Sprintf("User initiated (%s)", now.UTC().Format("2006-01-02 15:04:05 MST"))
}

func incorrectState(msg string) *apiError {
	return &apiError{status: 400, code: "IncorrectInstanceState", msg: msg}
}

func (c *call) stopInstances() (requestIDSetter, error) {
	ids := c.p.list("InstanceId")
	if len(ids) == 0 {
		return nil, missing("InstanceId")
	}
	if _, err := c.p.bool("Force"); err != nil {
		return nil, err
	}
	if hib, err := c.p.bool("Hibernate"); err != nil || hib {
		if err == nil {
			err = &apiError{status: 400, code: "UnsupportedHibernationConfiguration",
				msg: "The instance is not configured for hibernation."}
		}
		return nil, err
	}
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	rg, now := s.region(c.region), s.now()
	s.sweep(rg, now)
	list, err := s.lookup(rg, ids, false)
	if err != nil {
		return nil, err
	}
	// EC2 refuses the whole request if one instance cannot be stopped.
	for _, in := range list {
		switch st := s.state(in, now); {
		case st == statePending && !in.ran:
			return nil, incorrectState(fmt.Sprintf("Instance '%s' cannot be stopped as it has never reached the 'running' state.", in.id))
		case st == statePending, st == stateShuttingDown, st == stateTerminated:
			return nil, incorrectState(fmt.Sprintf("This instance '%s' is not in a state from which it can be stopped.", in.id))
		}
	}
	out := &stateChangeResponse{}
	for _, in := range list {
		prev := s.state(in, now)
		if prev == stateRunning {
			s.stop(c.region, in, now)
		}
		cur := s.state(in, now)
		out.Instances = append(out.Instances, xStateChange{InstanceID: in.id,
			CurrentState: xState{Code: cur.code, Name: cur.name}, PreviousState: xState{Code: prev.code, Name: prev.name}})
	}
	return out, nil
}

// stop makes a running instance stopping. Call with s.mu held.
func (s *Server) stop(region string, in *instance, now time.Time) {
	in.stopAt, in.stoppedAt = now, now.Add(s.sim.Wall(s.Latency().Stop))
	in.transition, in.stateReason = userInitiated(now), nil // Client.UserInitiatedShutdown
	if in.backed && in.machine.ID != "" && !in.off {
		s.powerOff(region, in)
	}
}

func (c *call) startInstances() (requestIDSetter, error) {
	ids := c.p.list("InstanceId")
	if len(ids) == 0 {
		return nil, missing("InstanceId")
	}
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	rg, now := s.region(c.region), s.now()
	s.sweep(rg, now)
	list, err := s.lookup(rg, ids, false)
	if err != nil {
		return nil, err
	}
	need := 0
	for _, in := range list {
		switch st := s.state(in, now); st {
		case stateStopping, stateShuttingDown, stateTerminated:
			return nil, incorrectState(fmt.Sprintf("The instance '%s' is not in a state from which it can be started.", in.id))
		case stateStopped:
			n, _ := vcpus(in.itype)
			need += n
		}
	}
	if s.vcpus > 0 && s.usedVCPUs(rg, now)+need > s.vcpus {
		return nil, &apiError{status: 400, code: "VcpuLimitExceeded",
			msg: fmt.Sprintf("You have requested more vCPU capacity than your current vCPU limit of %d allows for the instance bucket that the specified instance type belongs to. Please visit http://aws.amazon.com/contact-us/ec2-request to request an adjustment to this limit.", s.vcpus)}
	}
	out := &stateChangeResponse{}
	for _, in := range list {
		prev := s.state(in, now)
		if prev == stateStopped {
			s.start(c.region, in, now)
		}
		cur := s.state(in, now)
		out.Instances = append(out.Instances, xStateChange{InstanceID: in.id,
			CurrentState: xState{Code: cur.code, Name: cur.name}, PreviousState: xState{Code: prev.code, Name: prev.name}})
	}
	return out, nil
}

// start makes a stopped instance pending, with a new public address if
// it has one. Call with s.mu held.
func (s *Server) start(region string, in *instance, now time.Time) {
	s.newRun(in, now)
	in.stopAt, in.stoppedAt = time.Time{}, time.Time{}
	in.runningAt = now.Add(s.sim.Wall(s.Latency().Start))
	in.transition, in.stateReason = "", nil
	if !in.backed {
		in.bootAt = in.runningAt
		if in.public && in.publicIP == "" {
			in.publicIP, _ = s.public.take()
		}
		return
	}
	if in.machine.ID != "" {
		s.powerOn(region, in)
	}
}

// usedVCPUs counts the vCPUs of the region's pending and running
// instances (the On-Demand quota counts those). Call with s.mu held.
func (s *Server) usedVCPUs(rg *region, now time.Time) int {
	used := 0
	for _, in := range rg.instances {
		if st := s.state(in, now); st == statePending || st == stateRunning {
			n, _ := vcpus(in.itype)
			used += n
		}
	}
	return used
}

// Stop stops an instance outside any client (someone in the console, a
// scheduled retirement): StopInstances' effect.
func (s *Server) Stop(ctx context.Context, region, id string) error {
	c := &call{ctx: ctx, s: s, region: region, p: params{"InstanceId.1": id}}
	_, err := c.stopInstances()
	return err
}

// Start starts a stopped instance outside any client: StartInstances'
// effect.
func (s *Server) Start(ctx context.Context, region, id string) error {
	c := &call{ctx: ctx, s: s, region: region, p: params{"InstanceId.1": id}}
	_, err := c.startInstances()
	return err
}

// Fail makes an instance end as one EC2 gave up on (a host failure): at
// once terminated with state reason code (default Server.InternalError),
// or, for Server.InsufficientInstanceCapacity, stopped. Its machine, if
// backed, is torn down or powered off.
func (s *Server) Fail(_ context.Context, region, id, code string) error {
	s.mu.Lock()
	rg, now := s.region(region), s.now()
	s.sweep(rg, now)
	list, err := s.lookup(rg, []string{id}, false)
	if err != nil {
		s.mu.Unlock()
		return err
	}
	in := list[0]
	if st := s.state(in, now); st == stateShuttingDown || st == stateTerminated {
		s.mu.Unlock()
		return fmt.Errorf("cloudsim/ec2: instance %s is %s already", id, st.name)
	}
	failInstance(in, now, code)
	s.mu.Unlock()
	if in.backed {
		s.afterMachine(region, in)
	}
	return nil
}
