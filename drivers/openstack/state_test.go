package openstack

import (
	"testing"

	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"

	"github.com/cloudtransit/transit/provider"
)

// Every Nova status (and the task states that change its meaning) maps
// as provider.go documents; one Nova may add is pending.
func TestServerStates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status, task string
		want         provider.InstanceState
	}{
		{"BUILD", "spawning", provider.InstancePending},
		{"ACTIVE", "", provider.InstanceRunning},
		{"ACTIVE", "powering-off", provider.InstanceStopped},
		{"ACTIVE", "soft-deleting", provider.InstanceTerminating},
		{"SHUTOFF", "soft-deleting", provider.InstanceTerminating},
		{"ACTIVE", "deleting", provider.InstanceTerminating},
		{"SHUTOFF", "", provider.InstanceStopped},
		{"SHUTOFF", "powering-on", provider.InstancePending},
		{"SHUTOFF", "deleting", provider.InstanceTerminating},
		{"SUSPENDED", "", provider.InstanceStopped},
		{"PAUSED", "", provider.InstanceStopped},
		{"SHELVED", "", provider.InstanceStopped},
		{"SHELVED_OFFLOADED", "", provider.InstanceStopped},
		{"SOFT_DELETED", "", provider.InstanceStopped},
		{"ERROR", "", provider.InstanceFailed},
		{"ERROR", "deleting", provider.InstanceTerminating},
		{"DELETED", "", provider.InstanceTerminating},
		{"REBOOT", "rebooting", provider.InstancePending},
		{"HARD_REBOOT", "", provider.InstancePending},
		{"REBUILD", "", provider.InstancePending},
		{"RESIZE", "", provider.InstancePending},
		{"VERIFY_RESIZE", "", provider.InstancePending},
		{"MIGRATING", "", provider.InstancePending},
		{"RESCUE", "", provider.InstancePending},
		{"UNKNOWN", "", provider.InstancePending},
	} {
		if got := stateOf(servers.Server{Status: tc.status, TaskState: tc.task}); got != tc.want {
			t.Errorf("%s (task %q): %s, want %s", tc.status, tc.task, got, tc.want)
		}
	}
}
