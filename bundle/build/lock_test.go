package build

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A second build of one directory waits for the first.
func TestLockOutWaitsForTheHolder(t *testing.T) {
	t.Parallel()
	out := t.TempDir()
	if err := os.MkdirAll(filepath.Join(out, ".work"), 0o755); err != nil {
		t.Fatal(err)
	}
	unlock, err := lockOut(t.Context(), out, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if _, err := lockOut(ctx, out, io.Discard); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second lock while held = %v, want it to wait until its context ends", err)
	}
	unlock()
	again, err := lockOut(t.Context(), out, io.Discard)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	again()
}
