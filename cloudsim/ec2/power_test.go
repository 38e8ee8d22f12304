package ec2

import (
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	gocmp "github.com/google/go-cmp/cmp"

	"github.com/cloudtransit/transit/cloudsim"
)

// waitState polls DescribeInstances until the instance is in state want.
func (f *fixture) waitState(id string, want types.InstanceStateName) *types.Instance {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := f.describe(id)
		if got.State.Name == want {
			return got
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("instance %s is %s, never %s", id, got.State.Name, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func changes(sc []types.InstanceStateChange) []string {
	var out []string
	for _, c := range sc {
		out = append(out, aws.ToString(c.InstanceId)+" "+string(c.PreviousState.Name)+" "+string(c.CurrentState.Name))
	}
	return out
}

// Stop and start as EC2 does them for an EBS-backed instance: stopping,
// stopped (no public address, the private one kept), pending, running
// with a new public address; a stopped instance can be terminated. The
// emulator's clock is held, so stopping and pending last however slowly
// the steps run, and advanced past the latency when they must end.
func TestStopStart(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	clock := cloudsim.Hold(f.sim)
	c, ctx := f.ec2(), t.Context()
	f.srv.SetLatency(cloudsim.Latency{Stop: 300 * time.Millisecond, Start: 300 * time.Millisecond})
	id := aws.ToString(f.run(&ec2.RunInstancesInput{TagSpecifications: []types.TagSpecification{tagSpec(types.ResourceTypeInstance, "k", "v")}}).InstanceId)
	before := f.waitState(id, types.InstanceStateNameRunning)
	if aws.ToString(before.PublicIpAddress) == "" {
		t.Fatalf("no public address: %+v", before)
	}

	out, err := c.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{id}})
	if err != nil {
		t.Fatal(err)
	}
	if diff := gocmp.Diff([]string{id + " running stopping"}, changes(out.StoppingInstances)); diff != "" {
		t.Errorf("StopInstances (-want +got):\n%s", diff)
	}
	stopping := f.describe(id)
	if stopping.State.Name != types.InstanceStateNameStopping || stopping.State.Code == nil || *stopping.State.Code != 64 {
		t.Errorf("before the stop latency passed: %+v", stopping.State)
	}
	clock.Advance(300 * time.Millisecond)
	stopped := f.waitState(id, types.InstanceStateNameStopped)
	if *stopped.State.Code != 80 || aws.ToString(stopped.PublicIpAddress) != "" ||
		aws.ToString(stopped.PrivateIpAddress) != aws.ToString(before.PrivateIpAddress) {
		t.Errorf("stopped: code %d, public %q, private %q (was %q)", *stopped.State.Code, aws.ToString(stopped.PublicIpAddress),
			aws.ToString(stopped.PrivateIpAddress), aws.ToString(before.PrivateIpAddress))
	}
	if stopped.StateReason == nil || aws.ToString(stopped.StateReason.Code) != "Client.UserInitiatedShutdown" {
		t.Errorf("stopped: state reason %+v", stopped.StateReason)
	}
	if diff := gocmp.Diff(map[string]string{"k": "v"}, tagMap(stopped.Tags)); diff != "" {
		t.Errorf("stopped: tags (-want +got):\n%s", diff)
	}
	listed, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []types.Filter{flt("instance-state-name", "stopped")}})
	if err != nil || len(listed.Reservations) != 1 {
		t.Errorf("filter instance-state-name=stopped: %v %+v", err, listed)
	}
	again, err := c.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{id}})
	if err != nil {
		t.Fatal(err)
	}
	if diff := gocmp.Diff([]string{id + " stopped stopped"}, changes(again.StoppingInstances)); diff != "" {
		t.Errorf("StopInstances of a stopped instance (-want +got):\n%s", diff)
	}

	started, err := c.StartInstances(ctx, &ec2.StartInstancesInput{InstanceIds: []string{id}})
	if err != nil {
		t.Fatal(err)
	}
	if diff := gocmp.Diff([]string{id + " stopped pending"}, changes(started.StartingInstances)); diff != "" {
		t.Errorf("StartInstances (-want +got):\n%s", diff)
	}
	clock.Advance(300 * time.Millisecond)
	running := f.waitState(id, types.InstanceStateNameRunning)
	if pub := aws.ToString(running.PublicIpAddress); pub == "" || pub == aws.ToString(before.PublicIpAddress) {
		t.Errorf("started again with public address %q, want a new one (was %q)", pub, aws.ToString(before.PublicIpAddress))
	}
	if aws.ToString(running.PrivateIpAddress) != aws.ToString(before.PrivateIpAddress) {
		t.Errorf("started again with private address %q, want %q", aws.ToString(running.PrivateIpAddress), aws.ToString(before.PrivateIpAddress))
	}
	if _, err := c.StartInstances(ctx, &ec2.StartInstancesInput{InstanceIds: []string{id}}); err != nil {
		t.Errorf("StartInstances of a running instance: %v", err)
	}

	if _, err := c.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{id}}); err != nil {
		t.Fatal(err)
	}
	_, err = c.StartInstances(ctx, &ec2.StartInstancesInput{InstanceIds: []string{id}})
	wantCode(t, err, "IncorrectInstanceState", 400) // still stopping
	clock.Advance(300 * time.Millisecond)
	f.waitState(id, types.InstanceStateNameStopped)
	term, err := c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}})
	if err != nil {
		t.Fatal(err)
	}
	if diff := gocmp.Diff([]string{id + " stopped terminated"}, changes(term.TerminatingInstances)); diff != "" {
		t.Errorf("TerminateInstances of a stopped instance (-want +got):\n%s", diff)
	}
	_, err = c.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{id}})
	wantCode(t, err, "IncorrectInstanceState", 400)
	_, err = c.StartInstances(ctx, &ec2.StartInstancesInput{InstanceIds: []string{id}})
	wantCode(t, err, "IncorrectInstanceState", 400)
}

// An instance that never ran cannot be stopped; a request with one such
// instance stops none.
func TestStopPendingRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	c, ctx := f.ec2(), t.Context()
	ran := aws.ToString(f.run(&ec2.RunInstancesInput{}).InstanceId)
	f.waitState(ran, types.InstanceStateNameRunning)
	f.srv.SetLatency(cloudsim.Latency{Launch: time.Hour})
	pending := aws.ToString(f.run(&ec2.RunInstancesInput{}).InstanceId)
	_, err := c.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{ran, pending}})
	wantCode(t, err, "IncorrectInstanceState", 400)
	if st := f.describe(ran).State.Name; st != types.InstanceStateNameRunning {
		t.Errorf("the refused request stopped %s: %s", ran, st)
	}
	_, err = c.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{ran}, Hibernate: aws.Bool(true)})
	wantCode(t, err, "UnsupportedHibernationConfiguration", 400)
}

// A launch that fails (cloudsim.FaultFailed) is accepted, pending, then
// terminated with Server.InternalError, or stopped with
// Server.InsufficientInstanceCapacity. The emulator's clock is held while
// the launch must be pending.
func TestFailedLaunch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		reason, code string
		end          types.InstanceStateName
	}{
		{"", "Server.InternalError", types.InstanceStateNameTerminated},
		{"Server.InsufficientInstanceCapacity", "Server.InsufficientInstanceCapacity", types.InstanceStateNameStopped},
	} {
		t.Run(tc.code, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, Options{})
			clock := cloudsim.Hold(f.sim)
			f.srv.SetLatency(cloudsim.Latency{Launch: 300 * time.Millisecond})
			f.sim.Faults.Add(cloudsim.Fault{Op: cloudsim.OpLaunch, Kind: cloudsim.FaultFailed, Reason: tc.reason})
			id := aws.ToString(f.run(&ec2.RunInstancesInput{}).InstanceId)
			if st := f.describe(id).State.Name; st != types.InstanceStateNamePending {
				t.Errorf("a failing launch is %s at first, want pending", st)
			}
			clock.Resume(300 * time.Millisecond)
			got := f.waitState(id, tc.end)
			if got.StateReason == nil || aws.ToString(got.StateReason.Code) != tc.code {
				t.Errorf("state reason %+v, want %s", got.StateReason, tc.code)
			}
			if aws.ToString(got.PublicIpAddress) != "" {
				t.Errorf("a failed instance shows public address %s", aws.ToString(got.PublicIpAddress))
			}
			next := aws.ToString(f.run(&ec2.RunInstancesInput{}).InstanceId)
			f.srv.SetLatency(cloudsim.Latency{})
			f.waitState(next, types.InstanceStateNameRunning)
		})
	}
}

// Stop and Start stop and start an instance behind the client's back; Fail
// makes a running one end as EC2 ends one it gave up on.
func TestHooks(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	ctx := t.Context()
	id := aws.ToString(f.run(&ec2.RunInstancesInput{}).InstanceId)
	f.waitState(id, types.InstanceStateNameRunning)
	if err := f.srv.Stop(ctx, testRegion, id); err != nil {
		t.Fatal(err)
	}
	f.waitState(id, types.InstanceStateNameStopped)
	if err := f.srv.Start(ctx, testRegion, id); err != nil {
		t.Fatal(err)
	}
	f.waitState(id, types.InstanceStateNameRunning)
	if err := f.srv.Fail(ctx, testRegion, id, "Server.InsufficientInstanceCapacity"); err != nil {
		t.Fatal(err)
	}
	got := f.waitState(id, types.InstanceStateNameStopped)
	if aws.ToString(got.StateReason.Code) != "Server.InsufficientInstanceCapacity" {
		t.Errorf("state reason %+v", got.StateReason)
	}
	if err := f.srv.Fail(ctx, testRegion, id, ""); err != nil {
		t.Fatal(err)
	}
	f.waitState(id, types.InstanceStateNameTerminated)
}

// A backed instance's machine is powered off (its public address given
// up) when it stops and on again when it starts, with its new address.
func TestBackedStopStart(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	b := &fakeBacker{release: make(chan struct{})}
	close(b.release)
	f.sim.Backer = b
	c, ctx := f.ec2(), t.Context()
	id := aws.ToString(f.run(&ec2.RunInstancesInput{}).InstanceId)
	f.waitState(id, types.InstanceStateNameRunning)
	if _, err := c.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{id}}); err != nil {
		t.Fatal(err)
	}
	f.waitState(id, types.InstanceStateNameStopped)
	if _, err := c.StartInstances(ctx, &ec2.StartInstancesInput{InstanceIds: []string{id}}); err != nil {
		t.Fatal(err)
	}
	got := f.waitState(id, types.InstanceStateNameRunning)
	if aws.ToString(got.PublicIpAddress) != "10.241.1.8" || aws.ToString(got.PrivateIpAddress) != "10.241.1.7" {
		t.Errorf("started again: %s/%s, want the powered-on machine's 10.241.1.8/10.241.1.7",
			aws.ToString(got.PublicIpAddress), aws.ToString(got.PrivateIpAddress))
	}
	if _, err := c.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{id}}); err != nil {
		t.Fatal(err)
	}
	f.waitState(id, types.InstanceStateNameStopped)
	if _, err := c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}}); err != nil {
		t.Fatal(err)
	}
	f.waitState(id, types.InstanceStateNameTerminated)
	f.srv.Close()
	b.mu.Lock()
	defer b.mu.Unlock()
	m := "aws:" + testRegion + " m-" + id
	if diff := gocmp.Diff([]string{"off " + m + " true", "on " + m, "off " + m + " true"}, b.powers); diff != "" {
		t.Errorf("power calls (-want +got):\n%s", diff)
	}
	if diff := gocmp.Diff([]string{m}, b.stops); diff != "" {
		t.Errorf("stops (-want +got):\n%s", diff)
	}
}
