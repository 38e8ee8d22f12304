package sidecar

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/cloudtransit/transit/clock"
)

// Gate blocks until the sidecar may read its input, and says where each
// partition its group never committed begins: a standby revision's source
// readers wait until the controller makes their revision active, then
// begin where the controller recorded (package gate watches the Topology
// and reads the revision). The sidecar is in its group meanwhile. nil lets
// it read at once, from its commits or the topic's start. An error while
// ctx lives stops Run with that error; ctx also ends with the group
// session the wait is for.
type Gate func(ctx context.Context) (Start, error)

// Start is where partitions of the input begin when the group never
// committed them; a partition it does not name begins at the topic's
// start.
type Start map[int32]int64

// FileGate opens once a file exists, looking every 20 ms (tests, and
// anything that can drop a file into the pod). The file holds the Start
// as JSON ({"0": 12}), or nothing.
func FileGate(path string) Gate {
	var c clock.Clock = clock.Real{}
	return func(ctx context.Context) (Start, error) {
		for {
			data, err := os.ReadFile(path)
			switch {
			case err == nil && len(bytes.TrimSpace(data)) == 0:
				return nil, nil
			case err == nil:
				var start Start
				if err := json.Unmarshal(data, &start); err != nil {
					return nil, fmt.Errorf("gate file %s: %w", path, err)
				}
				return start, nil
			case !errors.Is(err, fs.ErrNotExist):
				return nil, fmt.Errorf("gate file: %w", err)
			}
			if err := c.Sleep(ctx, 20*time.Millisecond); err != nil {
				return nil, fmt.Errorf("waiting for the gate file %s: %w", path, err)
			}
		}
	}
}
