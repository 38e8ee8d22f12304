package gce

import (
	"testing"

	"github.com/cloudtransit/transit/provider"
)

// Every instance status of computepb.Instance_Status maps as provider.go
// documents; one Compute Engine may add is pending.
func TestInstanceStates(t *testing.T) {
	t.Parallel()
	for status, want := range map[string]provider.InstanceState{
		"PROVISIONING":   provider.InstancePending,
		"STAGING":        provider.InstancePending,
		"PENDING":        provider.InstancePending,
		"REPAIRING":      provider.InstancePending,
		"RUNNING":        provider.InstanceRunning,
		"STOPPING":       provider.InstanceStopped,
		"PENDING_STOP":   provider.InstanceStopped,
		"STOPPED":        provider.InstanceStopped,
		"TERMINATED":     provider.InstanceStopped,
		"SUSPENDING":     provider.InstanceStopped,
		"SUSPENDED":      provider.InstanceStopped,
		"DEPROVISIONING": provider.InstanceStopped,
		"HIBERNATING":    provider.InstancePending,
		"":               provider.InstancePending,
	} {
		if got := stateOf(status); got != want {
			t.Errorf("%q: %s, want %s", status, got, want)
		}
	}
}
