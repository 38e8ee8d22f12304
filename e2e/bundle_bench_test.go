package e2e

import (
	"testing"
	"time"

	"github.com/cloudtransit/transit/cloudsim"
	"github.com/cloudtransit/transit/districts"
)

// BenchmarkBundleShare launches 10 Kubernetes nodes in two emulated
// clouds (a master and 4 workers in AWS eu-central-1, 5 workers in GCE
// europe-west1, networks apart, on the mesh) from nothing, with the
// operator sending every node its files (TRANSIT_BUNDLE_PEERS=off) and
// then with each district's nodes fetching from their seed. It reports
// the megabytes this host sent into each cloud's network (its uplink's
// counter: the bundle, SSH and everything else) and the apply's wall
// time. One iteration builds and destroys the cluster (3–5 minutes).
func BenchmarkBundleShare(b *testing.B) {
	for _, peers := range []string{"off", "on"} {
		b.Run("peers="+peers, func(b *testing.B) {
			if peers == "off" {
				b.Setenv("TRANSIT_BUNDLE_PEERS", "off")
			}
			var aws, gce, secs float64
			for b.Loop() {
				a, g, s := bundleShare(b)
				aws, gce, secs = aws+a, gce+g, secs+s
			}
			n := float64(b.N)
			b.ReportMetric(aws/n, "MB-to-aws")
			b.ReportMetric(gce/n, "MB-to-gce")
			b.ReportMetric(secs/n, "s/apply")
			b.ReportMetric(float64(wholeBundle(b)>>20), "MB-bundle")
		})
	}
}

func bundleShare(b *testing.B) (awsMB, gceMB, secs float64) {
	env := startClouds(b, cloudsim.Profile{Name: cloudsim.ProfileZero})
	cfg, ds := acrossCluster(b, env)
	cfg.ID = "bench-share"
	site := func(s string) map[string]string { return map[string]string{"site": s} }
	cfg.Deployments = []districts.Deployment{
		{District: "aws-eu", Flavor: "small", Role: districts.RoleMaster, Quantity: 1, Tags: site("aws-eu")},
		{District: "aws-eu", Flavor: "small", Role: districts.RoleWorker, Quantity: 4, Tags: site("aws-eu")},
		{District: "gce-eu", Flavor: "small", Role: districts.RoleWorker, Quantity: 5, Tags: site("gce-eu")},
	}
	c := newCluster(b, cloudsRoot, cfg, ds)
	env.writeCredentials(c)
	defer func() {
		if r := c.transit("destroy", "--auto-approve"); r.code != 0 {
			b.Fatalf("destroy: exit %d\n%s", r.code, r.stderr)
		}
	}()
	awsBefore, gceBefore := uplinkSent(b, "aws:eu-central-1"), uplinkSent(b, "gce:europe-west1")
	start := time.Now()
	c.apply()
	secs = time.Since(start).Seconds()
	awsMB = float64(uplinkSent(b, "aws:eu-central-1")-awsBefore) / (1 << 20)
	gceMB = float64(uplinkSent(b, "gce:europe-west1")-gceBefore) / (1 << 20)
	return awsMB, gceMB, secs
}
