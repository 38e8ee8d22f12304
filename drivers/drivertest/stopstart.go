package drivertest

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cloudtransit/transit/cloudsim"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// stopStart stops a machine through the cloud's API (behind the driver's
// back): from the moment the cloud took the request it is listed stopped
// (never terminating, never gone: it may run again), with its tags and
// private address; started again it is listed running with a public
// address (maybe a new one) and, where the machine is real, answers SSH
// with the host keys it had. Stopped again, Terminate deletes it: it is
// listed terminating or not at all, never running or stopped.
func (s *suite) stopStart(t *testing.T) {
	if s.cfg.Cloud == nil {
		return
	}
	ctx := t.Context()
	// Stopping and starting take a while, so the states between show.
	s.cfg.Cloud.SetLatency(cloudsim.Latency{Stop: 400 * time.Millisecond, Start: 400 * time.Millisecond})
	defer s.cfg.Cloud.SetLatency(cloudsim.Latency{})
	n := s.nodeN(10, s.cfg.Zone)
	inst, err := s.drv.Launch(ctx, s.launchSpec(n))
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	s.keep(inst)

	stop := func(what string) provider.Instance {
		t.Helper()
		if err := s.cfg.Cloud.Stop(ctx, inst.ProviderID); err != nil {
			t.Fatalf("stop %s through the cloud's API: %v", inst.ProviderID, err)
		}
		got := s.listed(t, inst.ProviderID)
		if got == nil {
			t.Fatalf("%s: machine %s left List once the cloud stopped it: a stopped machine exists and must be listed", what, inst.ProviderID)
		}
		if got.State != provider.InstanceStopped {
			t.Fatalf("%s: machine %s is listed %q once the cloud stopped it, want %q", what, inst.ProviderID, got.State, provider.InstanceStopped)
		}
		if diff := cmp.Diff(s.tagsOf(n), got.Tags); diff != "" {
			t.Errorf("%s: stopped machine's tags (-want +got):\n%s", what, diff)
		}
		if got.PrivateIP != inst.PrivateIP {
			t.Errorf("%s: stopped machine's private address is %q, want the one it had, %q", what, got.PrivateIP, inst.PrivateIP)
		}
		if s.cfg.CheckStopped != nil {
			s.cfg.CheckStopped(t, inst)
		}
		// However long the cloud takes, it stays stopped.
		if got := s.listed(t, inst.ProviderID); got == nil || got.State != provider.InstanceStopped {
			t.Fatalf("%s: machine %s is listed %+v once down, want %q", what, inst.ProviderID, got, provider.InstanceStopped)
		}
		return *got
	}
	stop("stopped")

	// The cloud refuses a start until the machine is all stopped, which
	// the listing cannot tell (stopping is stopped too): try until it
	// takes it.
	deadline := time.Now().Add(s.cfg.Timeout)
	for err := s.cfg.Cloud.Start(ctx, inst.ProviderID); err != nil; err = s.cfg.Cloud.Start(ctx, inst.ProviderID) {
		if time.Now().After(deadline) {
			t.Fatalf("start %s through the cloud's API: %v", inst.ProviderID, err)
		}
		if got := s.listed(t, inst.ProviderID); got == nil || got.State != provider.InstanceStopped {
			t.Fatalf("machine %s is listed %+v while the cloud stops it, want %q", inst.ProviderID, got, provider.InstanceStopped)
		}
		time.Sleep(s.cfg.Poll)
	}
	started := s.waitState(t, inst.ProviderID, provider.InstanceRunning, provider.InstancePending, provider.InstanceStopped)
	if started.PublicIP == "" || started.PrivateIP != inst.PrivateIP {
		t.Errorf("started again: addresses %q/%q, want a public one and the private one it had, %q", started.PublicIP, started.PrivateIP, inst.PrivateIP)
	}
	if diff := cmp.Diff(s.tagsOf(n), started.Tags); diff != "" {
		t.Errorf("started machine's tags (-want +got):\n%s", diff)
	}
	if s.cfg.CheckSSH != nil {
		// The same machine: the host keys it had at launch.
		again := *started
		again.HostKeys = inst.HostKeys
		s.cfg.CheckSSH(t, again)
	}

	stopped := stop("stopped again")
	if err := s.drv.Terminate(ctx, stopped); err != nil {
		t.Fatalf("Terminate of a stopped machine: %v", err)
	}
	s.waitGone(t, inst.ProviderID)
}

// failed checks the failed state: a launch whose machine the cloud gives
// up on (cloudsim.FaultFailed) returns an error naming the node and the
// cloud's reason within the bound and leaves no machine that is not
// terminating; a running machine the cloud gives up on is listed as
// Config.FailedState, never running, and Terminate deletes it.
func (s *suite) failed(t *testing.T) {
	if s.cfg.Cloud == nil {
		return
	}
	ctx := t.Context()
	t.Run("Launch", func(t *testing.T) {
		faults := s.cfg.Cloud.Faults()
		faults.Add(cloudsim.Fault{Op: cloudsim.OpLaunch, Kind: cloudsim.FaultFailed, Reason: s.cfg.FailReason})
		defer faults.Clear()
		n := s.nodeN(11, s.cfg.Zone)
		lctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
		defer cancel()
		inst, err := s.drv.Launch(lctx, s.launchSpec(n))
		s.noSecret(t, err)
		if err == nil {
			s.keep(inst)
			t.Fatalf("Launch of a machine the cloud gave up on returned %+v and no error", inst)
		}
		if lctx.Err() != nil {
			t.Fatalf("Launch of a machine the cloud gave up on waited until the deadline: %v", err)
		}
		if !strings.Contains(err.Error(), n.ID) {
			t.Errorf("Launch error %q does not name node %s", err, n.ID)
		}
		if s.cfg.FailReason != "" && !strings.Contains(err.Error(), s.cfg.FailReason) {
			t.Errorf("Launch error %q does not give the cloud's reason %q", err, s.cfg.FailReason)
		}
		insts, _, err := s.drv.List(ctx, s.cfg.Cluster)
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		for _, in := range insts {
			if in.Tags[districts.TagNode] != n.ID {
				continue
			}
			s.keep(in)
			if in.State != provider.InstanceTerminating {
				t.Errorf("the failed launch left machine %s listed %q: Launch must delete it", in.ProviderID, in.State)
			}
			s.waitGone(t, in.ProviderID)
		}
	})

	t.Run("Stuck", func(t *testing.T) {
		if s.cfg.StuckLaunch == nil {
			return
		}
		drv, wait := s.cfg.StuckLaunch(t)
		s.cfg.Cloud.SetLatency(cloudsim.Latency{Launch: time.Hour})
		defer s.cfg.Cloud.SetLatency(cloudsim.Latency{})
		n := s.nodeN(13, s.cfg.Zone)
		left, err := drv.Launch(ctx, s.launchSpec(n))
		if left.ProviderID != "" {
			s.keep(left)
		}
		if err == nil || !strings.Contains(err.Error(), n.ID) || !strings.Contains(err.Error(), "after "+wait.String()) {
			t.Fatalf("Launch past its wait of %s: %v, want an error naming node %s and the wait", wait, err, n.ID)
		}
		listed := s.machinesOf(t, n.ID, 1)
		if left.ProviderID != listed[0].ProviderID || left.State != provider.InstancePending {
			t.Errorf("Launch returned %+v, want the pending machine %s it left, for the loop to track", left, listed[0].ProviderID)
		}
	})

	t.Run("Machine", func(t *testing.T) {
		n := s.nodeN(12, s.cfg.Zone)
		inst, err := s.drv.Launch(ctx, s.launchSpec(n))
		if err != nil {
			t.Fatalf("Launch: %v", err)
		}
		s.keep(inst)
		if err := s.cfg.Cloud.Fail(ctx, inst.ProviderID); err != nil {
			t.Fatalf("make machine %s fail: %v", inst.ProviderID, err)
		}
		want := s.cfg.FailedState
		if want == "" {
			want = provider.InstanceStopped
		}
		got := s.listed(t, inst.ProviderID)
		switch {
		case got == nil:
			t.Fatalf("machine %s the cloud gave up on left List: it exists until deleted", inst.ProviderID)
		case got.State != want:
			t.Fatalf("machine %s the cloud gave up on is listed %q, want %q", inst.ProviderID, got.State, want)
		}
		if err := s.drv.Terminate(ctx, *got); err != nil {
			t.Fatalf("Terminate of a machine the cloud gave up on: %v", err)
		}
		s.waitGone(t, inst.ProviderID)
	})
}

// listed is the machine as List shows it now, or nil.
func (s *suite) listed(t *testing.T, id string) *provider.Instance {
	t.Helper()
	insts, _, err := s.drv.List(t.Context(), s.cfg.Cluster)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	return findInstance(insts, id)
}

// waitState polls List until the machine is listed in state want; until
// then it may be listed in any of meanwhile, and nothing else.
func (s *suite) waitState(t *testing.T, id string, want provider.InstanceState, meanwhile ...provider.InstanceState) *provider.Instance {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), s.cfg.Timeout)
	defer cancel()
	for {
		got := s.listed(t, id)
		switch {
		case got == nil:
			t.Fatalf("machine %s left List while waiting for it to be %q", id, want)
		case got.State == want:
			return got
		case !slices.Contains(meanwhile, got.State):
			t.Fatalf("machine %s is listed %q while waiting for it to be %q (allowed meanwhile: %v)", id, got.State, want, meanwhile)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("machine %s still %q after %s, want %q", id, got.State, s.cfg.Timeout, want)
		case <-time.After(s.cfg.Poll):
		}
	}
}
