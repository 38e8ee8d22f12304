package cloudsim

import (
	"testing"
	"time"
)

// TestHeldClock: a held clock stands still however much wall time passes,
// Advance moves it by exactly its step, Resume jumps it ahead at least by
// its step and lets it run, and it never goes back.
func TestHeldClock(t *testing.T) {
	t.Parallel()
	sim := New(Profile{})
	before := time.Now()
	c := Hold(sim)
	held := sim.Time()
	if held.Before(before) || held.After(time.Now()) {
		t.Fatalf("held at %v, want the time Hold was called (%v)", held, before)
	}
	time.Sleep(5 * time.Millisecond)
	if got := sim.Time(); !got.Equal(held) {
		t.Errorf("a held clock moved: %v, then %v", held, got)
	}
	c.Advance(time.Minute)
	if got := sim.Time(); got.Sub(held) != time.Minute {
		t.Errorf("Advance(1m) moved a held clock by %v", got.Sub(held))
	}

	// Resumed, it runs on from where it stood (ahead of the wall clock
	// after the Advance), jumped ahead by d.
	c.Resume(time.Second)
	resumed := sim.Time()
	if d := resumed.Sub(held); d < time.Minute+time.Second {
		t.Errorf("Resume(1s) after Advance(1m) stands %v past where the clock was held, want at least 1m1s", d)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !sim.Time().After(resumed) {
		if time.Now().After(deadline) {
			t.Fatal("a resumed clock does not run")
		}
		time.Sleep(time.Millisecond)
	}

	// Held again it stands still, and no step turns it back.
	c.Hold()
	again := sim.Time()
	if again.Before(resumed) {
		t.Errorf("held again at %v, before %v", again, resumed)
	}
	time.Sleep(5 * time.Millisecond)
	if got := sim.Time(); !got.Equal(again) {
		t.Errorf("a clock held again moved: %v, then %v", again, got)
	}
	c.Resume(0)
	if got := sim.Time(); got.Before(again) {
		t.Errorf("Resume(0) turned the clock back from %v to %v", again, got)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("Advance(-1s) did not refuse to turn the clock back")
			}
		}()
		c.Advance(-time.Second)
	}()
}
