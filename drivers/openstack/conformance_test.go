package openstack

import (
	"testing"
	"time"

	"github.com/cloudtransit/transit/drivers/drivertest"
	"github.com/cloudtransit/transit/provider"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	drivertest.Run(t, func(t *testing.T) provider.Infrastructure {
		return w.driver(w.district(), w.credential(), fast())
	}, drivertest.Config{
		Cluster:           "conf",
		District:          "os-test",
		Flavor:            "small",
		MachineType:       "m1.small",
		AuthorizedKey:     newKey(t),
		SharedDistrict:    true,
		MissingProviderID: "00000000-0000-4000-8000-000000000000",
		Cloud:             cloud{w},
		CredentialID:      "os-cred",
		Secrets:           secrets(),
		Zones:             zones,
		FailedState:       provider.InstanceFailed,
		FailReason:        "transit conformance: no valid host",
		StuckLaunch: func(t *testing.T) (provider.Infrastructure, time.Duration) {
			opts := fast()
			opts.LaunchWait = 100 * time.Millisecond
			return w.driver(w.district(), w.credential(), opts), opts.LaunchWait
		},
		Timeout: 30 * time.Second,
		Poll:    10 * time.Millisecond,
	})
	for _, r := range w.srv.Resources() {
		if r.Kind != "key-pair" {
			t.Errorf("left behind: %+v", r)
		}
	}
}
