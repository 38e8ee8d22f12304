package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cloudtransit/transit/bundle"
	"github.com/cloudtransit/transit/controllers/streams/api/v1alpha1"
	"github.com/cloudtransit/transit/controllers/streams/brokertest"
	"github.com/cloudtransit/transit/districts"
)

// Scaling with real pods: each stage's function handles one record at a
// time in scaleDelay (a single-threaded function: scalePodRate records a
// second per pod), its topic has scalePartitions partitions, and the
// source steps from scaleLow to scaleHigh records a second.
const (
	scaleDelay      = 10 * time.Millisecond
	scalePodRate    = int(time.Second / scaleDelay)
	scalePartitions = 8
	scaleLow        = 10
	scaleHigh       = 400
)

// scalingSample is one look at the Topology's status, at since the step.
type scalingSample struct {
	since    time.Duration
	replicas map[string]int32
	lag      map[string]int64
}

// BenchmarkStreamsScalingOnCluster is the autoscaler with real pods on a
// transit-made cluster (the Kubernetes lifecycle's shape): two stages
// (clean → enrich) of a function that takes 10 ms a record one at a time
// (100 records/s a pod), topics of 8 partitions, the source stepping from
// 10 to 400 records/s. It reports, per stage, the seconds from the step
// until its lag stays at most one second of input (400 records), and the
// replicas it reached; the log shows replicas and lag over time.
func BenchmarkStreamsScalingOnCluster(b *testing.B) {
	cfg, ds := kubernetesCluster(b)
	c := newCluster(b, kubeRoot, cfg, ds)
	c.apply()
	var samples []scalingSample
	for b.Loop() {
		samples = streamsScaling(b, c)
	}
	for _, stage := range []string{"clean", "enrich"} {
		settled, most := scalingSettled(samples, stage)
		b.ReportMetric(settled.Seconds(), stage+"-lag≤1s-after-s")
		b.ReportMetric(float64(most), stage+"-replicas-max")
	}
}

// streamsScaling runs the step on c and returns the samples, one every
// two seconds from the step until both stages' lags have stayed within a
// second of input for a minute (at most 6 minutes).
func streamsScaling(tb testing.TB, c *cluster) []scalingSample {
	c.installAddons(districts.Addon{Name: "streams"})
	ctx := context.Background()
	k := c.kube()
	admin := c.streamsClient("")
	kafka := c.brokerFromHost(ctx)
	defer kafka.close()
	adm := kadm.NewClient(kafka.client(tb))
	eventually(tb, time.Minute, "the broker through its node port", func(ctx context.Context) error {
		_, err := adm.ListBrokers(ctx)
		return err
	})
	if resp, err := adm.CreateTopics(ctx, scalePartitions, 1, nil, "orders", "enriched"); err != nil || resp.Error() != nil {
		tb.Fatalf("create topics: %v %v", err, resp.Error())
	}
	if _, err := k.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{}); err != nil {
		tb.Fatal(err)
	}
	echo := c.bundleImage(bundle.StreamsEchoRepository)
	stage := func(from string, sinks ...string) v1alpha1.Processor {
		return v1alpha1.Processor{InputFrom: from, Image: echo, SinkBindings: sinks,
			Env:      []corev1.EnvVar{{Name: "ECHO_DELAY", Value: scaleDelay.String()}, {Name: "ECHO_CONCURRENCY", Value: "1"}},
			MinScale: ptr(int32(1)), MaxScale: ptr(int32(scalePartitions))}
	}
	for _, p := range []*v1alpha1.TopologyPart{
		{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "shop"}, Spec: v1alpha1.PartSpec{
			Sources:    map[string]v1alpha1.Endpoint{"orders": {Topic: "orders"}},
			Processors: map[string]v1alpha1.Processor{"clean": stage("orders")}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "shop"}, Spec: v1alpha1.PartSpec{
			Processors: map[string]v1alpha1.Processor{"enrich": stage("clean", "out")},
			Sinks:      map[string]v1alpha1.Sink{"out": {Endpoint: v1alpha1.Endpoint{Topic: "enriched"}}}}},
	} {
		if err := admin.Create(ctx, p); err != nil {
			tb.Fatal(err)
		}
	}
	topo := &v1alpha1.Topology{ObjectMeta: metav1.ObjectMeta{Name: "pipe", Namespace: "shop"},
		Spec: v1alpha1.TopologySpec{Parts: []v1alpha1.PartRef{{Name: "a", Revision: 1}, {Name: "b", Revision: 1}}}}
	if err := admin.Create(ctx, topo); err != nil {
		tb.Fatal(err)
	}
	waitTopology(tb, admin, "", 5*time.Minute)
	low := brokertest.StartFeed(tb, kafka.addr, "orders", scaleLow, kafka.dialer())
	time.Sleep(30 * time.Second)
	low.Halt()
	high := brokertest.StartFeed(tb, kafka.addr, "orders", scaleHigh, kafka.dialer())
	step := time.Now()

	var samples []scalingSample
	calm := time.Duration(0) // how long both lags have been within a second of input
	for time.Since(step) < 6*time.Minute && calm < time.Minute {
		time.Sleep(2 * time.Second)
		var tp v1alpha1.Topology
		if err := admin.Get(ctx, client.ObjectKeyFromObject(topo), &tp); err != nil {
			tb.Fatal(err)
		}
		s := scalingSample{since: time.Since(step).Round(time.Second), replicas: map[string]int32{}, lag: map[string]int64{}}
		within := len(tp.Status.Processors) == 2
		for _, p := range tp.Status.Processors {
			s.replicas[p.Name], s.lag[p.Name] = p.Replicas, p.Lag
			within = within && p.Lag <= scaleHigh
		}
		samples = append(samples, s)
		if within {
			calm += 2 * time.Second
		} else {
			calm = 0
		}
	}
	sent := high.Halt()
	rate := float64(sent) / time.Since(step).Seconds()
	var table strings.Builder
	fmt.Fprintf(&table, "%8s  %14s  %14s\n", "after", "clean pods/lag", "enrich pods/lag")
	for _, s := range samples {
		fmt.Fprintf(&table, "%8s  %5d %8d  %5d %8d\n", s.since, s.replicas["clean"], s.lag["clean"], s.replicas["enrich"], s.lag["enrich"])
	}
	tb.Logf("the source stepped from %d to %d records/s (%.0f sent a second); each pod handles %d a second:\n%s",
		scaleLow, scaleHigh, rate, scalePodRate, table.String())
	if rate < 0.9*scaleHigh {
		tb.Errorf("the feed reached %.0f records/s of %d: the step was not made", rate, scaleHigh)
	}
	if calm < time.Minute {
		tb.Errorf("the lags did not stay within a second of input for a minute in 6 minutes")
	}

	if err := admin.Delete(ctx, topo); err != nil {
		tb.Fatal(err)
	}
	eventually(tb, 2*time.Minute, "the topology's finalizer done", func(ctx context.Context) error {
		err := admin.Get(ctx, client.ObjectKeyFromObject(topo), &v1alpha1.Topology{})
		if err == nil {
			return fmt.Errorf("topology shop/pipe still there")
		}
		return client.IgnoreNotFound(err)
	})
	if err := k.CoreV1().Namespaces().Delete(ctx, "shop", metav1.DeleteOptions{}); err != nil {
		tb.Error(err)
	}
	return samples
}

// scalingSettled is, for stage, the time from the step to the sample
// after the last one whose lag exceeded a second of input (0 if none
// did), and the most replicas it ran.
func scalingSettled(samples []scalingSample, stage string) (time.Duration, int32) {
	var settled time.Duration
	var most int32
	for i, s := range samples {
		most = max(most, s.replicas[stage])
		if s.lag[stage] > scaleHigh {
			settled = s.since
			if i+1 < len(samples) {
				settled = samples[i+1].since
			}
		}
	}
	return settled, most
}
