package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TopologyRevision is a composed, validated topology as it runs: written by
// the controller, owned by its Topology, named `<topology>-<hash>`. Its
// state (active, next, phasing out) is on the Topology.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=streams,shortName=toporev
// +kubebuilder:printcolumn:name="Topology",type=string,JSONPath=`.spec.topology`
// +kubebuilder:printcolumn:name="Predecessor",type=string,JSONPath=`.spec.predecessor`,priority=1
// +kubebuilder:printcolumn:name="Switched",type=date,JSONPath=`.status.switched`
// +kubebuilder:printcolumn:name="Finished",type=date,JSONPath=`.status.finished`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type TopologyRevision struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   TopologyRevisionSpec   `json:"spec"`
	Status TopologyRevisionStatus `json:"status,omitempty"`
}

// TopologyRevisionSpec is the composed topology and what it carries over
// from its predecessor.
type TopologyRevisionSpec struct {
	// Topology is the owning Topology's name.
	Topology string `json:"topology"`
	// Hash identifies the composition (parts, delivery, predecessor; not
	// scale): the controller finds a revision it made before a crash by it.
	Hash string `json:"hash"`
	// Predecessor is the revision that was active when this one was made.
	// +optional
	Predecessor string `json:"predecessor,omitempty"`
	// Parts are the part revisions composed.
	// +listType=atomic
	Parts []PartRef `json:"parts"`
	// Delivery is the topology's delivery guarantee.
	Delivery Delivery `json:"delivery"`
	// Processors, sorted by name.
	// +listType=map
	// +listMapKey=name
	Processors []ComposedProcessor `json:"processors"`
	// Topics are the topics between processors this revision owns (made
	// for it, deleted once read to their end by every reader).
	// +listType=map
	// +listMapKey=name
	// +optional
	Topics []InternalTopic `json:"topics,omitempty"`
	// KafkaSecrets say, for the clusters whose endpoints name a
	// kafkaSecret, which Secret (in the topology's namespace) reaches
	// them, sorted by bootstrap. Another cluster is reached with the
	// addon's kafka_secret if it is the addon's Kafka, else in plaintext.
	// +listType=map
	// +listMapKey=bootstrap
	// +optional
	KafkaSecrets []ClusterSecret `json:"kafkaSecrets,omitempty"`
}

// ClusterSecret is the Secret that reaches one Kafka cluster.
type ClusterSecret struct {
	// Bootstrap is the cluster's broker list, sorted.
	Bootstrap string `json:"bootstrap"`
	// Secret is the Secret's name.
	Secret string `json:"secret"`
}

// KafkaSecret is the Secret of the cluster bootstrap (sorted, as in
// KafkaSecrets) names, "" if none.
func (s *TopologyRevisionSpec) KafkaSecret(bootstrap string) string {
	for _, c := range s.KafkaSecrets {
		if c.Bootstrap == bootstrap {
			return c.Secret
		}
	}
	return ""
}

// ComposedProcessor is a processor as it runs: its input and outputs
// resolved to topics, its consumer group and replica range fixed.
type ComposedProcessor struct {
	Name string `json:"name"`
	// Part is the TopologyPart the processor comes from.
	Part string `json:"part"`
	// InputFrom is the source or processor read.
	InputFrom string `json:"inputFrom"`
	// ReadsSource says InputFrom is a source.
	// +optional
	ReadsSource bool `json:"readsSource,omitempty"`
	// Input is the topic read.
	Input Endpoint `json:"input"`
	// Outputs are the topics written: the processor's own topic when other
	// processors read it, and its sinks.
	// +listType=atomic
	Outputs []Endpoint `json:"outputs"`
	// Group is the consumer group, the revision's own: a standby
	// revision's readers join it before the switch.
	Group string `json:"group"`
	// DeadLetter is where events the function fails on go.
	DeadLetter Endpoint `json:"deadLetter"`
	Image      string   `json:"image"`
	// +listType=atomic
	// +optional
	Env []corev1.EnvVar `json:"env,omitempty"`
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`
	MinScale  int32                       `json:"minScale"`
	MaxScale  int32                       `json:"maxScale"`
}

// InternalTopic is a topic a revision made.
type InternalTopic struct {
	Name       string `json:"name"`
	Bootstrap  string `json:"bootstrap"`
	Partitions int32  `json:"partitions"`
}

// TopologyRevisionStatus records the revision's switch and drain.
type TopologyRevisionStatus struct {
	// StartOffsets are where the source readers begin, per partition their
	// group never committed: recorded before the switch, read by the
	// readers as their gate opens.
	// +listType=atomic
	// +optional
	StartOffsets []GroupOffsets `json:"startOffsets,omitempty"`
	// Switched is when the revision became active.
	// +optional
	Switched *metav1.Time `json:"switched,omitempty"`
	// Deleted are processors the garbage collector removed after they read
	// their input to its end.
	// +listType=set
	// +optional
	Deleted []string `json:"deleted,omitempty"`
	// Finished is when the revision's last processor and topic went.
	// +optional
	Finished *metav1.Time `json:"finished,omitempty"`
}

// GroupOffsets are a consumer group's offsets in one topic, by partition.
type GroupOffsets struct {
	Group     string `json:"group"`
	Bootstrap string `json:"bootstrap"`
	Topic     string `json:"topic"`
	// +listType=atomic
	Offsets []int64 `json:"offsets"`
}

// StartOf is where the reader in group begins each partition of topic its
// group never committed, as StartOffsets record; nil if they name none.
func (s *TopologyRevisionStatus) StartOf(group, topic string) map[int32]int64 {
	for _, g := range s.StartOffsets {
		if g.Group == group && g.Topic == topic {
			start := make(map[int32]int64, len(g.Offsets))
			for p, at := range g.Offsets {
				start[int32(p)] = at
			}
			return start
		}
	}
	return nil
}

// TopologyRevisionList is a list of TopologyRevisions.
//
// +kubebuilder:object:root=true
type TopologyRevisionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TopologyRevision `json:"items"`
}
