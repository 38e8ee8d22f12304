package localnodes

import (
	"context"
	"os"
	"testing"
	"time"
)

// ForTest is a Backer for one test, in its own root and region subnets
// apart from every other test's. It skips the test with -short or without
// root (network namespaces, bridges, iptables). What the test leaves
// (nodes, bridges, firewall chains, the root) is torn down at cleanup, also
// when it fails; a crashed earlier run's leftovers are torn down first.
// Register it before the emulator whose Close must run first.
func ForTest(t *testing.T, root string, subnets map[string]string) *Backer {
	t.Helper()
	if testing.Short() {
		t.Skip("backed: skipped with -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("backed: needs root (network namespaces, bridges, iptables)")
	}
	b := &Backer{Root: root, Subnets: subnets}
	destroy := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := b.Destroy(ctx); err != nil {
			t.Errorf("destroy the backing nodes: %v", err)
		}
	}
	destroy()
	t.Cleanup(func() {
		destroy()
		if err := os.RemoveAll(root); err != nil {
			t.Error(err)
		}
	})
	return b
}
