package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
)

// NotifyContext returns a context that the first of sigs cancels: the
// command then finishes the actions under way, saves the state and exits
// 130. The first signal also restores the signals' default handling, so a
// second one ends the process at once, and it prints a note saying so on
// w. stop releases the signals early, as signal.NotifyContext's does.
func NotifyContext(parent context.Context, w io.Writer, sigs ...os.Signal) (ctx context.Context, stop context.CancelFunc) {
	ctx, stop = signal.NotifyContext(parent, sigs...)
	go func() {
		<-ctx.Done()
		stop() // default handling again: the next signal kills
		// Cancelled by stop or the parent, the cause is the parent's or
		// context.Canceled itself; a signal leaves its own.
		if cause := context.Cause(ctx); cause != context.Canceled && parent.Err() == nil { //nolint:errorlint // a signal's cause is Is(context.Canceled) too
			fmt.Fprintf(w, "transit: %v: finishing the actions under way and saving the state; send it again to quit at once\n", cause)
		}
	}()
	return ctx, stop
}
