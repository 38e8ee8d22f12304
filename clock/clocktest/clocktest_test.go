package clocktest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var start = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

func TestFakeSleepMovesTime(t *testing.T) {
	t.Parallel()
	f := NewFake(start)
	for _, d := range []time.Duration{time.Second, time.Hour, -time.Minute, 0} {
		if err := f.Sleep(t.Context(), d); err != nil {
			t.Fatalf("Sleep(%v) = %v", d, err)
		}
	}
	f.Advance(time.Minute)
	if got, want := f.Now(), start.Add(time.Hour+time.Second+time.Minute); !got.Equal(want) {
		t.Errorf("Now = %v, want %v (a negative sleep must not move time back)", got, want)
	}
	want := []time.Duration{time.Second, time.Hour, -time.Minute, 0}
	if diff := cmp.Diff(want, f.Sleeps()); diff != "" {
		t.Errorf("sleeps (-want +got):\n%s", diff)
	}
}

func TestFakeZeroValue(t *testing.T) {
	t.Parallel()
	var f Fake
	if err := f.Sleep(t.Context(), time.Second); err != nil {
		t.Fatal(err)
	}
	if got := f.Now(); !got.Equal(time.Time{}.Add(time.Second)) {
		t.Errorf("Now = %v, want the zero time plus 1s", got)
	}
}

func TestFakeSleepEndedContext(t *testing.T) {
	t.Parallel()
	f := NewFake(start)
	f.OnSleep = func(context.Context, time.Duration) error {
		t.Error("OnSleep called for an ended context")
		return nil
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := f.Sleep(ctx, time.Second); !errors.Is(err, context.Canceled) {
		t.Errorf("Sleep = %v, want context.Canceled", err)
	}
	if got := f.Now(); !got.Equal(start) {
		t.Errorf("Now = %v after a cancelled sleep, want %v", got, start)
	}
	if n := len(f.Sleeps()); n != 0 {
		t.Errorf("%d sleeps recorded, want none", n)
	}
}

func TestFakeOnSleep(t *testing.T) {
	t.Parallel()
	f := NewFake(start)
	stop := errors.New("stop")
	var seen []time.Time
	f.OnSleep = func(ctx context.Context, d time.Duration) error {
		if ctx == nil || d <= 0 {
			t.Errorf("OnSleep(%v, %v)", ctx, d)
		}
		seen = append(seen, f.Now()) // the clock is usable from the hook
		if len(f.Sleeps()) == 2 {
			return stop
		}
		return nil
	}
	if err := f.Sleep(t.Context(), time.Second); err != nil {
		t.Fatalf("first Sleep = %v", err)
	}
	if err := f.Sleep(t.Context(), time.Second); !errors.Is(err, stop) {
		t.Fatalf("second Sleep = %v, want OnSleep's error", err)
	}
	want := []time.Time{start.Add(time.Second), start.Add(2 * time.Second)}
	if diff := cmp.Diff(want, seen); diff != "" {
		t.Errorf("time seen by OnSleep, after the sleep moved it (-want +got):\n%s", diff)
	}
}

func TestFakeStep(t *testing.T) {
	t.Parallel()
	f := NewFake(start)
	f.Step = 10 * time.Millisecond
	first, second := f.Now(), f.Now()
	if !first.Equal(start.Add(10*time.Millisecond)) || !second.Equal(start.Add(20*time.Millisecond)) {
		t.Errorf("Now, Now = %v, %v, want each a step later", first, second)
	}
	if got := f.Peek(); !got.Equal(second) {
		t.Errorf("Peek = %v, want %v", got, second)
	}
	if got := f.Peek(); !got.Equal(second) {
		t.Errorf("Peek moved the time: %v, want %v", got, second)
	}
}

// TestFakeConcurrent is for the race detector.
func TestFakeConcurrent(t *testing.T) {
	t.Parallel()
	f := NewFake(start)
	f.Step = time.Nanosecond
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if err := f.Sleep(t.Context(), time.Millisecond); err != nil {
					t.Error(err)
				}
				f.Advance(time.Millisecond)
				f.Now()
				f.Peek()
				f.Sleeps()
			}
		})
	}
	wg.Wait()
	if n := len(f.Sleeps()); n != 800 {
		t.Errorf("%d sleeps, want 800", n)
	}
	// Each round: a sleep, an advance, one step.
	if got, want := f.Peek(), start.Add(800*(2*time.Millisecond+time.Nanosecond)); !got.Equal(want) {
		t.Errorf("time %v, want %v", got, want)
	}
}
