package streams_test

import (
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cloudtransit/transit/controllers/streams"
	"github.com/cloudtransit/transit/controllers/streams/api/v1alpha1"
	"github.com/cloudtransit/transit/controllers/streams/brokertest"
)

// TestScaledToZeroWakes: a stage with minScale 0 that ran idle (its group
// never committed) is scaled to zero; records then wait in its input
// while no more arrive (they came while the controller was down, which
// forgets the arrival rates), and it must be woken by them: a partition
// never committed has all of its records to read, not none.
func TestScaledToZeroWakes(t *testing.T) {
	e, ns := startEnv(t)
	b := brokertest.Start(t)
	stop := startController(t, e, ns, b.Addr())
	startKubelet(t, e, ns)
	c := e.Client
	createTopics(t, kafkaAdmin(t, b.Addr()), 3, "orders", "enriched")
	twoTeams(t, c, ns, "fn:v1")
	rev := editPart(t, c, ns, "b", func(s *v1alpha1.PartSpec) {
		s.Processors["enrich"] = v1alpha1.Processor{InputFrom: "clean", Image: "fn:v1", SinkBindings: []string{"out"}, MinScale: ptr.To[int32](0), MaxScale: ptr.To[int32](2)}
	})
	runPipe(t, c, ns, v1alpha1.TopologySpec{
		Parts:   []v1alpha1.PartRef{{Name: "a", Revision: 1}, {Name: "b", Revision: rev}},
		Scaling: v1alpha1.Scaling{ScaleDownDelay: &metav1.Duration{Duration: 2 * time.Second}},
	})
	eventuallyWithin(t, time.Minute, "enrich scaled to zero while idle", func() (bool, string) {
		var ds appsv1.DeploymentList
		if err := c.List(t.Context(), &ds, client.InNamespace(ns), client.MatchingLabels{streams.LabelProcessor: "enrich"}); err != nil {
			return false, err.Error()
		}
		for _, d := range ds.Items {
			return ptr.Deref(d.Spec.Replicas, 1) == 0, fmt.Sprint(ptr.Deref(d.Spec.Replicas, 1), " replicas")
		}
		return false, "no Deployment"
	})
	stop()
	out := brokertest.StartSink(t, b.Addr(), "enriched")
	in := brokertest.StartFeed(t, b.Addr(), "orders", 50)
	time.Sleep(2 * time.Second)
	n := in.Halt()
	time.Sleep(3 * time.Second) // clean forwards them all meanwhile
	startController(t, e, ns, b.Addr())
	out.Expect(t, n, time.Minute, false)
}
