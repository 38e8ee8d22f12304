package streams

import (
	"encoding/json"
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/cloudtransit/transit/controllers/streams/api/v1alpha1"
	"github.com/cloudtransit/transit/controllers/streams/kafka"
	"github.com/cloudtransit/transit/controllers/streams/sidecar"
)

// Ports of a processor pod.
const (
	FunctionPort = 8080
	SidecarProbe = 8081
)

// KafkaSecurityDir is where a processor pod's sidecar finds the Kafka
// Secrets it uses mounted, each in a directory of its name.
const KafkaSecurityDir = "/etc/transit/kafka"

// deploymentName is a processor's Deployment in a revision.
func deploymentName(rev, processor string) string { return rev + "-" + processor }

// processorLabels select one processor's pods of one revision.
func processorLabels(topo, rev, processor string) map[string]string {
	return map[string]string{LabelTopology: topo, LabelRevision: rev, LabelProcessor: processor}
}

// deployment is a processor's Deployment: the function and the sidecar.
// Source readers' sidecars hold until their revision is active (the gate);
// every sidecar is Ready once it reaches Kafka and its function. The
// sidecar's last error, written to its termination message path, is what
// the pod's status and the Topology's conditions quote.
func deployment(rev *v1alpha1.TopologyRevision, p v1alpha1.ComposedProcessor, replicas int32, o Options) *appsv1.Deployment {
	labels := processorLabels(rev.Spec.Topology, rev.Name, p.Name)
	outputs, _ := json.Marshal(p.Outputs) // endpoints always marshal
	env := []corev1.EnvVar{
		{Name: "STREAMS_INPUT_BOOTSTRAP", Value: p.Input.Bootstrap},
		{Name: "STREAMS_INPUT_TOPIC", Value: p.Input.Topic},
		{Name: "STREAMS_GROUP", Value: p.Group},
		{Name: "STREAMS_OUTPUTS", Value: string(outputs)},
		{Name: "STREAMS_DEADLETTER_BOOTSTRAP", Value: p.DeadLetter.Bootstrap},
		{Name: "STREAMS_DEADLETTER_TOPIC", Value: p.DeadLetter.Topic},
		{Name: "STREAMS_DELIVERY", Value: string(rev.Spec.Delivery)},
		{Name: "STREAMS_REVISION", Value: rev.Name},
		{Name: "STREAMS_TERMINATION_LOG", Value: corev1.TerminationMessagePathDefault},
	}
	if p.ReadsSource {
		env = append(env,
			corev1.EnvVar{Name: "STREAMS_GATE_TOPOLOGY", Value: rev.Spec.Topology},
			corev1.EnvVar{Name: "STREAMS_GATE_NAMESPACE", ValueFrom: &corev1.EnvVarSource{
				FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
		)
	}
	volumes, mounts, security := kafkaSecrets(rev, p, o)
	if security != "" {
		env = append(env, corev1.EnvVar{Name: "STREAMS_KAFKA_SECURITY", Value: security})
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: rev.Namespace, Name: deploymentName(rev.Name, p.Name), Labels: labels,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: v1alpha1.GroupVersion.String(), Kind: "TopologyRevision", Name: rev.Name, UID: rev.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName: ProcessorAccount,
					Volumes:            volumes,
					// The sidecar finishes its batch and commits on SIGTERM;
					// a batch is bounded by the sidecar's batch limit.
					TerminationGracePeriodSeconds: ptr.To(int64(sidecar.DefaultGracePeriod().Seconds())),
					Containers: []corev1.Container{
						{
							Name: "function", Image: p.Image, Env: p.Env, Resources: p.Resources,
							Ports: []corev1.ContainerPort{{Name: "function", ContainerPort: FunctionPort}},
						},
						{
							Name: "sidecar", Image: o.SidecarImage, ImagePullPolicy: corev1.PullIfNotPresent, Env: env,
							VolumeMounts:           mounts,
							TerminationMessagePath: corev1.TerminationMessagePathDefault,
							Ports:                  []corev1.ContainerPort{{Name: "probe", ContainerPort: SidecarProbe}},
							ReadinessProbe: &corev1.Probe{
								ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromInt32(SidecarProbe)}},
								PeriodSeconds: 1, FailureThreshold: 2,
							},
							LivenessProbe: &corev1.Probe{
								ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(SidecarProbe)}},
								PeriodSeconds: 10, FailureThreshold: 6,
							},
						},
					},
				},
			},
		},
	}
}

// kafkaSecrets are the Secret volumes a processor's sidecar mounts and
// STREAMS_KAFKA_SECURITY: for each cluster its endpoints use, the
// revision's Secret for it (the topology's kafkaSecret), else, on the
// addon's Kafka, the addon's (Options.KafkaSecret); a cluster with
// neither is reached in plaintext.
func kafkaSecrets(rev *v1alpha1.TopologyRevision, p v1alpha1.ComposedProcessor, o Options) ([]corev1.Volume, []corev1.VolumeMount, string) {
	dirs := map[string]string{}
	var volumes []corev1.Volume
	var mounts []corev1.VolumeMount
	for _, e := range append([]v1alpha1.Endpoint{p.Input, p.DeadLetter}, p.Outputs...) {
		secret := rev.Spec.KafkaSecret(e.Bootstrap)
		if secret == "" && kafka.ClusterKey(e.Bootstrap) == kafka.ClusterKey(o.Bootstrap) {
			secret = o.KafkaSecret
		}
		if _, done := dirs[e.Bootstrap]; done || secret == "" {
			continue
		}
		dir := KafkaSecurityDir + "/" + secret
		dirs[e.Bootstrap] = dir
		if slices.ContainsFunc(mounts, func(m corev1.VolumeMount) bool { return m.MountPath == dir }) {
			continue
		}
		name := fmt.Sprintf("kafka-%d", len(volumes))
		volumes = append(volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
			Secret: &corev1.SecretVolumeSource{SecretName: secret, DefaultMode: ptr.To(int32(0o444))}}})
		mounts = append(mounts, corev1.VolumeMount{Name: name, MountPath: dir, ReadOnly: true})
	}
	if len(dirs) == 0 {
		return nil, nil, ""
	}
	security, _ := json.Marshal(dirs) // strings always marshal
	return volumes, mounts, string(security)
}
