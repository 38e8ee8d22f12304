package aws

import (
	"testing"
	"time"

	"github.com/cloudtransit/transit/drivers/drivertest"
	"github.com/cloudtransit/transit/provider"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	w := newWorld(t, ec2Options())
	key, _ := newKey(t)
	drivertest.Run(t, func(t *testing.T) provider.Infrastructure {
		return w.driver(w.district(), credential(), fast())
	}, drivertest.Config{
		Cluster:           "conf",
		District:          "aws-test",
		Flavor:            "small",
		MachineType:       "t3.micro",
		AuthorizedKey:     key,
		SharedDistrict:    true,
		MissingProviderID: "i-0123456789abcdef0",
		Cloud:             cloud{w},
		CredentialID:      "aws-cred",
		Secrets:           []string{secretKey, session},
		Zones:             zones,
		FailedState:       provider.InstanceStopped,
		FailReason:        "Server.InsufficientInstanceCapacity",
		StuckLaunch: func(t *testing.T) (provider.Infrastructure, time.Duration) {
			opts := fast()
			opts.LaunchWait = 100 * time.Millisecond
			return w.driver(w.district(), credential(), opts), opts.LaunchWait
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
