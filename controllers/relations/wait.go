package relations

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"
)

// The wait init container's environment: which variables must be there,
// and what it waits for, in words.
const (
	// WaitForEnv lists the variables the consumer needs, comma-separated.
	WaitForEnv = "TRANSIT_RELATIONS_WAIT_FOR"
	// WaitWhatEnv says what is awaited ("interface db from default/pg").
	WaitWhatEnv = "TRANSIT_RELATIONS_WAITING_ON"
)

// waitLogEvery is how often a waiting container says again what it waits
// for.
const waitLogEvery = time.Minute

// Wait is the wait init container of a consumer whose lifecycle depends
// on its providers: it returns at once when every variable WaitForEnv
// names is set (its relationships are established), else it says what it
// waits for and blocks until ctx ends. The rollout that brings the values
// also removes the container, so it never unblocks by itself.
func Wait(ctx context.Context, getenv func(string) string, log io.Writer) error {
	var missing []string
	for _, name := range strings.Split(getenv(WaitForEnv), ",") {
		if name = strings.TrimSpace(name); name != "" && getenv(name) == "" {
			missing = append(missing, name)
		}
	}
	if len(missing) == 0 {
		fmt.Fprintln(log, "transit-relations wait: every relationship is established")
		return nil
	}
	say := func() {
		fmt.Fprintf(log, "transit-relations wait: waiting for %s (variables %s are not set yet); the pod is replaced once they are\n",
			getenv(WaitWhatEnv), strings.Join(missing, ", "))
	}
	say()
	t := time.NewTicker(waitLogEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("stopped while waiting for %s", getenv(WaitWhatEnv))
		case <-t.C:
			say()
		}
	}
}
