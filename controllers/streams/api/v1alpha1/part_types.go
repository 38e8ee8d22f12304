package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TopologyPart is one team's part of a pipeline. Editing it changes nothing
// that runs: each change is kept as a TopologyPartRevision, and a Topology
// decides which revision runs.
//
// Node names (sources, sinks, processors) are unique across every part of a
// topology: parts refer to each other's nodes by name.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=streams,shortName=tpart
// +kubebuilder:printcolumn:name="Revision",type=integer,JSONPath=`.status.latestRevision`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type TopologyPart struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   PartSpec           `json:"spec"`
	Status TopologyPartStatus `json:"status,omitempty"`
}

// PartSpec is a part's nodes, by name.
//
// +kubebuilder:validation:XValidation:rule="(has(self.sources) ? size(self.sources) : 0) + (has(self.sinks) ? size(self.sinks) : 0) + (has(self.processors) ? size(self.processors) : 0) > 0",message="a part has at least one source, sink or processor"
type PartSpec struct {
	// Sources are topics the pipeline reads.
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, size(k) <= 40 && k.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'))",message="node names are DNS labels of at most 40 characters"
	// +optional
	Sources map[string]Endpoint `json:"sources,omitempty"`
	// Sinks are topics the pipeline writes.
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, size(k) <= 40 && k.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'))",message="node names are DNS labels of at most 40 characters"
	// +optional
	Sinks map[string]Sink `json:"sinks,omitempty"`
	// Processors are functions, each reading one stream and writing one.
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, size(k) <= 40 && k.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'))",message="node names are DNS labels of at most 40 characters"
	// +optional
	Processors map[string]Processor `json:"processors,omitempty"`
}

// Endpoint is a Kafka topic.
type Endpoint struct {
	// Bootstrap lists the Kafka cluster's brokers (host:port, comma
	// separated); empty means the Kafka the streams addon was installed with.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Bootstrap string `json:"bootstrap,omitempty"`
	// Topic is the topic's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=249
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9._-]+$`
	Topic string `json:"topic"`
	// KafkaSecret names a Secret in this object's namespace that says how
	// to reach the Kafka of Bootstrap: TLS and SASL, in the keys of the
	// addon's kafka_secret (ca.crt, tls.crt, tls.key, tls,
	// sasl.mechanism, sasl.username, sasl.password, sasl.session-token).
	// Only with Bootstrap; one Secret per cluster in a topology. Every
	// endpoint of the topology on that cluster (its internal topics and
	// dead letters too) is reached with it by the processors and, but on
	// the addon's own Kafka (where the controller uses its own login), by
	// the controller.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	// +optional
	KafkaSecret string `json:"kafkaSecret,omitempty"`
}

// Sink is a topic the pipeline writes. Processors name the sinks they write
// in sinkBindings; a sink's owner may instead name the processor in
// inputFrom (a team owning a sink need not edit another's processor).
type Sink struct {
	Endpoint `json:",inline"`
	// InputFrom names a processor whose output this sink takes.
	// +optional
	InputFrom string `json:"inputFrom,omitempty"`
}

// Processor is a function: an image serving CloudEvents over HTTP on port
// 8080, called once per event by the sidecar beside it.
type Processor struct {
	// InputFrom names the source or processor this processor reads.
	// +kubebuilder:validation:MinLength=1
	InputFrom string `json:"inputFrom"`
	// Image is the function's container image.
	// +kubebuilder:validation:MinLength=1
	Image string `json:"image"`
	// SinkBindings names the sinks this processor's output goes to, beside
	// the processors reading it.
	// +listType=set
	// +optional
	SinkBindings []string `json:"sinkBindings,omitempty"`
	// MinScale is the fewest replicas (0: scaled to zero while idle, woken
	// by lag); default: the topology's defaultScale.
	// +kubebuilder:validation:Minimum=0
	// +optional
	MinScale *int32 `json:"minScale,omitempty"`
	// MaxScale is the most replicas; default: the topology's defaultScale.
	// Topics between processors get as many partitions as their readers'
	// largest maxScale.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	// +optional
	MaxScale *int32 `json:"maxScale,omitempty"`
	// Env is the function container's environment.
	// +listType=map
	// +listMapKey=name
	// +optional
	Env []corev1.EnvVar `json:"env,omitempty"`
	// Resources are the function container's.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`
}

// TopologyPartStatus is a part's revisions.
type TopologyPartStatus struct {
	// ObservedGeneration is the generation the latest revision was made of.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// LatestRevision is the number of the revision of the current spec.
	// +optional
	LatestRevision int64 `json:"latestRevision,omitempty"`
}

// TopologyPartList is a list of TopologyParts.
//
// +kubebuilder:object:root=true
type TopologyPartList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TopologyPart `json:"items"`
}

// TopologyPartRevision is an immutable snapshot of a part, made by the
// controller on every change of the part's spec and named
// `<part>-<revision>`. It is kept while a Topology or a running
// TopologyRevision names it; deleting or editing such a revision is refused.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:categories=streams,shortName=tpartrev
// +kubebuilder:printcolumn:name="Part",type=string,JSONPath=`.spec.part`
// +kubebuilder:printcolumn:name="Revision",type=integer,JSONPath=`.spec.revision`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type TopologyPartRevision struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec TopologyPartRevisionSpec `json:"spec"`
}

// TopologyPartRevisionSpec is the snapshot.
//
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="a part revision is immutable: edit the TopologyPart, which makes a new revision"
type TopologyPartRevisionSpec struct {
	// Part is the TopologyPart's name.
	Part string `json:"part"`
	// Revision counts the part's revisions from 1.
	// +kubebuilder:validation:Minimum=1
	Revision int64 `json:"revision"`
	// Hash is a hash of Spec: a part changed back and forth makes a
	// revision each time, a repeated write of one spec makes one.
	Hash string `json:"hash"`
	// Spec is the part's spec at this revision.
	Spec PartSpec `json:"spec"`
}

// TopologyPartRevisionList is a list of TopologyPartRevisions.
//
// +kubebuilder:object:root=true
type TopologyPartRevisionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TopologyPartRevision `json:"items"`
}
