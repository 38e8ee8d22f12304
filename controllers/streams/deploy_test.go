package streams

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/cloudtransit/transit/controllers/streams/api/v1alpha1"
)

// TestDeploymentKafkaSecrets: a processor mounts, for each cluster its
// endpoints use, the topology's Secret for it, else on the addon's Kafka
// the addon's, and tells its sidecar which directory is whose; a cluster
// with neither gets nothing (plaintext: its sidecar would refuse a
// Secret for a cluster it does not use).
func TestDeploymentKafkaSecrets(t *testing.T) {
	o := Options{Bootstrap: "kafka-1:9093,kafka-0:9093", KafkaSecret: "kafka-client", SidecarImage: "sidecar"}
	at := func(bootstrap string) v1alpha1.Endpoint { return v1alpha1.Endpoint{Bootstrap: bootstrap, Topic: "t"} }
	for _, tc := range []struct {
		name    string
		p       v1alpha1.ComposedProcessor
		secrets []v1alpha1.ClusterSecret
		want    string   // STREAMS_KAFKA_SECURITY, "" for none
		mounted []string // Secrets
	}{
		{"on the addon's Kafka (brokers in another order) and a plaintext one", v1alpha1.ComposedProcessor{Name: "a",
			Input: at("kafka-0:9093,kafka-1:9093"), Outputs: []v1alpha1.Endpoint{at("other:9092")}, DeadLetter: at("other:9092")}, nil,
			`{"kafka-0:9093,kafka-1:9093":"/etc/transit/kafka/kafka-client"}`, []string{"kafka-client"}},
		{"all on a plaintext cluster", v1alpha1.ComposedProcessor{Name: "b",
			Input: at("other:9092"), Outputs: []v1alpha1.Endpoint{at("other:9092")}, DeadLetter: at("other:9092")}, nil, "", nil},
		{"the topology's Secrets: for the addon's Kafka and another", v1alpha1.ComposedProcessor{Name: "c",
			Input: at("kafka-0:9093,kafka-1:9093"), Outputs: []v1alpha1.Endpoint{at("other:9092")}, DeadLetter: at("kafka-0:9093,kafka-1:9093")},
			[]v1alpha1.ClusterSecret{{Bootstrap: "kafka-0:9093,kafka-1:9093", Secret: "team-a"}, {Bootstrap: "other:9092", Secret: "team-a-other"}},
			`{"kafka-0:9093,kafka-1:9093":"/etc/transit/kafka/team-a","other:9092":"/etc/transit/kafka/team-a-other"}`, []string{"team-a", "team-a-other"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rev := &v1alpha1.TopologyRevision{Spec: v1alpha1.TopologyRevisionSpec{KafkaSecrets: tc.secrets}}
			rev.Name = "pipe-1"
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
			var mounted []string
			for i, v := range spec.Volumes {
				if v.Secret == nil || sidecar.VolumeMounts[i].Name != v.Name || sidecar.VolumeMounts[i].MountPath != KafkaSecurityDir+"/"+v.Secret.SecretName {
					t.Errorf("volume %+v mounted as %+v", v, sidecar.VolumeMounts[i])
					continue
				}
				mounted = append(mounted, v.Secret.SecretName)
			}
			if !slices.Equal(mounted, tc.mounted) || len(sidecar.VolumeMounts) != len(spec.Volumes) {
				t.Errorf("Secrets mounted %v, want %v (mounts %+v)", mounted, tc.mounted, sidecar.VolumeMounts)
			}
		})
	}
}
