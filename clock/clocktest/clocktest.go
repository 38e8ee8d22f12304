// Package clocktest provides a fake clock.Clock for tests: time moves only
// when the code under test sleeps or the test advances it, so timeouts and
// backoff cost no real time.
package clocktest

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/cloudtransit/transit/clock"
)

// Fake is a clock.Clock whose time moves only when told: Sleep returns at
// once, moving the time forward by d, and Advance moves it too. It records
// every Sleep, so a test can check a backoff. The zero Fake starts at the
// zero time. A Fake is safe for concurrent use; set Step and OnSleep
// before it is in use.
type Fake struct {
	// Step, when positive, moves the time forward on every Now, before
	// Now reads it: each Now then returns a time later than any before,
	// as if time passed while the code worked. Peek reads without moving.
	Step time.Duration
	// OnSleep, when set, is called by each Sleep that ctx lets happen,
	// after the time has moved and the sleep is recorded, with the same
	// ctx and d; Sleep returns what it returns. It is called without the
	// clock's lock held, so it may use the clock; it must be safe for
	// concurrent use if the code under test sleeps concurrently. Use it
	// to act at a point of a wait (start a server after the third retry)
	// or to end a loop (return ctx.Err() after cancelling ctx).
	OnSleep func(ctx context.Context, d time.Duration) error

	mu     sync.Mutex
	now    time.Time
	sleeps []time.Duration
}

var _ clock.Clock = (*Fake)(nil)

// NewFake returns a Fake whose time starts at start.
func NewFake(start time.Time) *Fake {
	return &Fake{now: start}
}

// Now returns the fake time, moving it forward by Step first.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.Step > 0 {
		f.now = f.now.Add(f.Step)
	}
	return f.now
}

// Peek returns the fake time without moving it, even with a Step.
func (f *Fake) Peek() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Advance moves the fake time forward by d; a negative d moves it back.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
}

// Sleep returns ctx.Err() at once if ctx has ended. Otherwise it moves
// the fake time forward by d (not at all if d is negative, like a real
// sleep), records d, and returns at once: nil, or what OnSleep returns.
func (f *Fake) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f.mu.Lock()
	f.now = f.now.Add(max(d, 0))
	f.sleeps = append(f.sleeps, d)
	hook := f.OnSleep
	f.mu.Unlock()
	if hook != nil {
		return hook(ctx, d)
	}
	return nil
}

// Sleeps returns the durations Sleep was called with, in order, leaving
// out calls made after ctx had ended.
func (f *Fake) Sleeps() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.sleeps)
}
