package sidecar

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/cloudtransit/transit/clock"
)

// Gate blocks until the sidecar may join its consumer group: a standby
// revision's source readers wait until the controller makes their
// revision active (package gate watches the Topology for it). Run calls
// it before it makes the consumer; nil lets it start at once. An error
// while ctx lives stops Run with that error.
type Gate func(ctx context.Context) error

// FileGate opens once a file exists, looking every 20 ms (tests, and
// anything that can drop a file into the pod).
func FileGate(path string) Gate {
	var c clock.Clock = clock.Real{}
	return func(ctx context.Context) error {
		for {
			_, err := os.Stat(path)
			switch {
			case err == nil:
				return nil
			case !errors.Is(err, fs.ErrNotExist):
				return fmt.Errorf("gate file: %w", err)
			}
			if err := c.Sleep(ctx, 20*time.Millisecond); err != nil {
				return fmt.Errorf("waiting for the gate file %s: %w", path, err)
			}
		}
	}
}
