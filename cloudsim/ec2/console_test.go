package ec2

import (
	"encoding/base64"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/cloudtransit/transit/cloudsim"
)

// simClock is a sim clock the test moves by hand.
type simClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *simClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *simClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// console reads the instance's console, the latest or as EC2 posted it:
// its text and the answer's timestamp.
func (f *fixture) console(id string, latest bool) (string, time.Time) {
	f.t.Helper()
	out, err := f.ec2().GetConsoleOutput(f.t.Context(), &ec2.GetConsoleOutputInput{InstanceId: aws.String(id), Latest: aws.Bool(latest)})
	if err != nil {
		f.t.Fatalf("GetConsoleOutput(%s, Latest=%v): %v", id, latest, err)
	}
	text, err := base64.StdEncoding.DecodeString(aws.ToString(out.Output))
	if err != nil {
		f.t.Fatalf("GetConsoleOutput(%s): output %q: %v", id, aws.ToString(out.Output), err)
	}
	return string(text), aws.ToTime(out.Timestamp)
}

// Without Latest, GetConsoleOutput answers what EC2 posted
// ConsolePostDelay after the instance's last boot, stop or termination,
// as the console was then; with Latest, what the machine printed in its
// last boot.
func TestConsolePosts(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2025, 9, 1, 12, 0, 0, 0, time.UTC)
	clk := &simClock{t: t0}
	f := newFixture(t, Options{ConsolePostDelay: time.Minute})
	f.sim.Now = clk.Now
	f.srv.SetLatency(cloudsim.Latency{Launch: 10 * time.Second, Stop: 10 * time.Second, Start: 10 * time.Second, Terminate: 10 * time.Second})
	c, ctx := f.ec2(), t.Context()
	id := aws.ToString(f.run(&ec2.RunInstancesInput{}).InstanceId)
	gone := aws.ToString(f.run(&ec2.RunInstancesInput{}).InstanceId)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	do := func(s int, what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s at %ds: %v", what, s, err)
		}
	}

	var boot1, boot2, boot3 string
	for _, step := range []struct {
		s      int
		before func()
		latest *string // want with Latest
		posted *string // want without
		postAt int     // the post's time (its timestamp)
	}{
		{s: 0, latest: new(""), posted: new("")}, // pending
		{s: 5, before: func() {
			_, err := c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{gone}})
			do(5, "TerminateInstances", err)
		}, latest: new(""), posted: new("")},
		{s: 9, latest: new(""), posted: new("")},
		// Running: its boot is not posted yet.
		{s: 10, before: func() { boot1, _ = f.console(id, true) }, latest: &boot1, posted: new("")},
		{s: 69, latest: &boot1, posted: new("")},
		{s: 70, latest: &boot1, posted: &boot1, postAt: 70},
		{s: 100, before: func() {
			_, err := c.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{id}})
			do(100, "StopInstances", err)
		}, latest: &boot1, posted: &boot1, postAt: 70},
		{s: 160, latest: &boot1, posted: &boot1, postAt: 160}, // the stop's post
		{s: 200, before: func() {
			_, err := c.StartInstances(ctx, &ec2.StartInstancesInput{InstanceIds: []string{id}})
			do(200, "StartInstances", err)
		}, latest: &boot1, posted: &boot1, postAt: 160}, // pending again: the boot before's
		{s: 210, before: func() { boot2, _ = f.console(id, true) }, latest: &boot2, posted: &boot1, postAt: 160},
		{s: 270, latest: &boot2, posted: &boot2, postAt: 270},
		// Started again before the stop's post: that post, due after
		// the new boot, shows it.
		{s: 300, before: func() {
			_, err := c.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{id}})
			do(300, "StopInstances", err)
		}, latest: &boot2, posted: &boot2, postAt: 270},
		{s: 320, before: func() {
			_, err := c.StartInstances(ctx, &ec2.StartInstancesInput{InstanceIds: []string{id}})
			do(320, "StartInstances", err)
		}, latest: &boot2, posted: &boot2, postAt: 270},
		{s: 359, before: func() { boot3, _ = f.console(id, true) }, latest: &boot3, posted: &boot2, postAt: 270},
		{s: 360, latest: &boot3, posted: &boot3, postAt: 360},
		{s: 400, before: func() {
			_, err := c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}})
			do(400, "TerminateInstances", err)
		}, latest: &boot3, posted: &boot3, postAt: 390},
		{s: 460, latest: &boot3, posted: &boot3, postAt: 460}, // the termination's post
	} {
		clk.Set(at(step.s))
		if step.before != nil {
			step.before()
		}
		if latest, _ := f.console(id, true); latest != *step.latest {
			t.Errorf("at %ds, Latest:\n%s\nwant:\n%s", step.s, latest, *step.latest)
		}
		posted, ts := f.console(id, false)
		if posted != *step.posted {
			t.Errorf("at %ds, as posted:\n%s\nwant:\n%s", step.s, posted, *step.posted)
		}
		if want := at(step.postAt); posted != "" && !ts.Equal(want) {
			t.Errorf("at %ds, the post's timestamp is %s, want %s", step.s, ts, want)
		}
	}
	if !strings.Contains(boot1, "-----BEGIN SSH HOST KEY KEYS-----\r\nssh-ed25519 AAAA") {
		t.Errorf("latest console of a running instance without its host keys:\n%s", boot1)
	}
	if boot2 == boot1 || boot3 == boot2 || !strings.Contains(boot2, "SSH HOST KEY KEYS") || !strings.Contains(boot3, "SSH HOST KEY KEYS") {
		t.Errorf("the boots' consoles are not each their own:\n%s\n%s\n%s", boot1, boot2, boot3)
	}
	// Terminated before it ran: it printed nothing, and nothing is posted.
	if latest, _ := f.console(gone, true); latest != "" {
		t.Errorf("latest console of an instance that never ran:\n%s", latest)
	}
	if posted, _ := f.console(gone, false); posted != "" {
		t.Errorf("posted console of an instance that never ran:\n%s", posted)
	}
}
