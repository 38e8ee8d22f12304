package gce

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
		District:          "gce-test",
		Flavor:            "small",
		MachineType:       "e2-small",
		AuthorizedKey:     newKey(t),
		SharedDistrict:    true,
		MissingProviderID: "europe-west1-b/no-such-instance",
		Cloud:             cloud{w},
		CredentialID:      "gce-cred",
		Secrets:           w.secrets(),
		Zones:             zones,
		FailedState:       provider.InstanceStopped,
		FailReason:        "transit conformance: the host failed",
		StuckLaunch: func(t *testing.T) (provider.Infrastructure, time.Duration) {
			opts := fast()
			opts.LaunchWait = 100 * time.Millisecond
			return w.driver(w.district(), w.credential(), opts), opts.LaunchWait
		},
		Timeout: 30 * time.Second,
		Poll:    10 * time.Millisecond,
	})
	for _, r := range w.srv.Resources() {
		t.Errorf("left behind: %+v", r)
	}
}
