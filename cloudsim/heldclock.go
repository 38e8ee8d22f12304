package cloudsim

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// HeldClock is a Sim's clock that a test stops and starts, so that what
// the emulator derives from its clock (an instance pending, stopping or
// terminating for its latency, a visibility lag, a reclaim interval)
// lasts exactly as long as the test needs, however slowly a loaded
// machine runs the test's steps: a state that must last is asserted
// while the clock is held, and ends when the test advances or resumes it.
//
// Install it with Hold before the emulator serves its first request (the
// Sim's Now field is read unlocked); the clock itself is safe for
// concurrent use.
type HeldClock struct {
	mu     sync.Mutex
	held   bool
	at     time.Time     // the time while held
	offset time.Duration // how far ahead of the wall clock it runs
}

// Hold installs a HeldClock as sim's clock (Sim.Now), held at the current
// time. A test that needs the clock running until some later step calls
// Resume(0) at once and Hold when the step comes.
func Hold(sim *Sim) *HeldClock {
	c := &HeldClock{held: true, at: time.Now()}
	sim.Now = c.Now
	return c
}

// Now is the clock's time: where it stands while held, else the wall
// clock plus every jump ahead so far.
func (c *HeldClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held {
		return c.at
	}
	return time.Now().Add(c.offset)
}

// Hold stops the clock where it stands; a held clock stays as it is.
func (c *HeldClock) Hold() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.held {
		c.held, c.at = true, time.Now().Add(c.offset)
	}
}

// Resume lets the clock run again, jumped ahead by d: it reads at least
// d past where it stood (more by the wall time it was held, which it
// catches up on), so every latency of d or less that was running when it
// was held is over. Resuming a running clock only jumps it ahead by d.
func (c *HeldClock) Resume(d time.Duration) {
	checkAhead("Resume", d)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held {
		// Run on from the wall clock, never behind where it stood (an
		// Advance may have put it ahead of the wall clock).
		c.offset = max(c.offset, time.Until(c.at))
		c.held = false
	}
	c.offset += d
}

// ResumeWhen resumes the clock, jumped ahead by d, once seen says so
// (asked every 5 ms in a goroutine of its own), unless ctx ends first: a
// state held until the test's code under test did something, say a
// request was refused and tried again.
func (c *HeldClock) ResumeWhen(ctx context.Context, d time.Duration, seen func() bool) {
	checkAhead("ResumeWhen", d)
	go func() {
		for !seen() {
			if ctx.Err() != nil {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		c.Resume(d)
	}()
}

// Advance moves the clock ahead by d, held or running; a held clock stays
// held at its new time.
func (c *HeldClock) Advance(d time.Duration) {
	checkAhead("Advance", d)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held {
		c.at = c.at.Add(d)
		return
	}
	c.offset += d
}

// checkAhead refuses to turn the clock back: the emulators take their
// clock to be monotonic.
func checkAhead(what string, d time.Duration) {
	if d < 0 {
		panic(fmt.Sprintf("cloudsim: HeldClock.%s(%s): a clock does not go back", what, d))
	}
}
