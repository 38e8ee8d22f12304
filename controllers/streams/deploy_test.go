package streams

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/cloudtransit/transit/controllers/streams/api/v1alpha1"
)

// TestDeploymentKafkaSecret: a processor that uses the addon's Kafka
// mounts the addon's Secret and tells its sidecar which cluster it is
// for; one whose endpoints are all on another cluster mounts nothing (it
// reaches that cluster in plaintext, and its sidecar would refuse a
// Secret for a cluster it does not use).
func TestDeploymentKafkaSecret(t *testing.T) {
	o := Options{Bootstrap: "kafka-1:9093,kafka-0:9093", KafkaSecret: "kafka-client", SidecarImage: "sidecar"}
	rev := &v1alpha1.TopologyRevision{}
	rev.Name = "pipe-1"
	at := func(bootstrap string) v1alpha1.Endpoint { return v1alpha1.Endpoint{Bootstrap: bootstrap, Topic: "t"} }
	for _, tc := range []struct {
		name string
		p    v1alpha1.ComposedProcessor
		want string // STREAMS_KAFKA_SECURITY, "" for none
	}{
		{"on the addon's Kafka (brokers in another order)", v1alpha1.ComposedProcessor{Name: "a",
			Input: at("kafka-0:9093,kafka-1:9093"), Outputs: []v1alpha1.Endpoint{at("other:9092")}, DeadLetter: at("other:9092")},
			`{"kafka-1:9093,kafka-0:9093":"/etc/transit/kafka"}`},
		{"all on another cluster", v1alpha1.ComposedProcessor{Name: "b",
			Input: at("other:9092"), Outputs: []v1alpha1.Endpoint{at("other:9092")}, DeadLetter: at("other:9092")}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := deployment(rev, tc.p, 1, o)
			spec := d.Spec.Template.Spec
			sidecar := spec.Containers[slices.IndexFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == "sidecar" })]
			var got string
			for _, e := range sidecar.Env {
				if e.Name == "STREAMS_KAFKA_SECURITY" {
					got = e.Value
				}
			}
			if got != tc.want {
				t.Errorf("STREAMS_KAFKA_SECURITY %q, want %q", got, tc.want)
			}
			mounted := len(sidecar.VolumeMounts) == 1 && len(spec.Volumes) == 1 && spec.Volumes[0].Secret != nil &&
				spec.Volumes[0].Secret.SecretName == "kafka-client" && sidecar.VolumeMounts[0].MountPath == KafkaSecurityDir
			if mounted != (tc.want != "") || len(sidecar.VolumeMounts) > 1 {
				t.Errorf("volumes %+v, mounts %+v", spec.Volumes, sidecar.VolumeMounts)
			}
		})
	}
}
