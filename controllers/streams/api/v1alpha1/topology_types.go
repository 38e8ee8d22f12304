package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Topology is a pipeline: one revision of each of its parts, composed. The
// running pipeline changes only when the Topology pins other revisions.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=streams,shortName=topo
// +kubebuilder:printcolumn:name="Active",type=string,JSONPath=`.status.active`
// +kubebuilder:printcolumn:name="Next",type=string,JSONPath=`.status.next`
// +kubebuilder:printcolumn:name="Valid",type=string,JSONPath=`.status.conditions[?(@.type=="Valid")].status`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Topology struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   TopologySpec   `json:"spec"`
	Status TopologyStatus `json:"status,omitempty"`
}

// Delivery is what a topology promises about each event.
// +kubebuilder:validation:Enum=atLeastOnce;exactlyOnce
type Delivery string

const (
	// AtLeastOnce means every event reaches the sinks; a crash between a
	// processor's output and its commit repeats that batch.
	AtLeastOnce Delivery = "atLeastOnce"
	// ExactlyOnce means read, call, write and commit in one Kafka transaction;
	// readers of the sinks must read committed. Every topic of the topology
	// must be on one Kafka cluster.
	ExactlyOnce Delivery = "exactlyOnce"
)

// Upgrade is how a new revision takes over.
// +kubebuilder:validation:Enum=standby;cold
type Upgrade string

const (
	// Standby starts the whole new revision first; its source readers wait
	// until the switch. The pause is the switch itself.
	Standby Upgrade = "standby"
	// Cold stops the old source readers first, then starts the new revision:
	// the pause includes the new pods' start.
	Cold Upgrade = "cold"
)

// TopologySpec pins the parts.
type TopologySpec struct {
	// Parts are the TopologyParts, in the Topology's namespace, and the
	// revision of each that runs.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	Parts []PartRef `json:"parts"`
	// DefaultScale is the replica range of processors that name none.
	// +optional
	DefaultScale Scale `json:"defaultScale,omitempty"`
	// Delivery: atLeastOnce (default) or exactlyOnce.
	// +kubebuilder:default=atLeastOnce
	// +optional
	Delivery Delivery `json:"delivery,omitempty"`
	// Upgrade: standby (default) or cold.
	// +kubebuilder:default=standby
	// +optional
	Upgrade Upgrade `json:"upgrade,omitempty"`
	// UpgradeTimeout bounds how long a standby upgrade waits for every new
	// pod to be Ready before it is abandoned (UpgradeFailed) and the running
	// revision goes on. Default 5m.
	// +optional
	UpgradeTimeout *metav1.Duration `json:"upgradeTimeout,omitempty"`
	// Scaling tunes the built-in lag-based autoscaler.
	// +optional
	Scaling Scaling `json:"scaling,omitempty"`
}

// PartRef pins one revision of a part.
type PartRef struct {
	// Name is the TopologyPart's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=200
	Name string `json:"name"`
	// Revision is the TopologyPartRevision's number.
	// +kubebuilder:validation:Minimum=1
	Revision int64 `json:"revision"`
}

// Scale is a replica range.
//
// +kubebuilder:validation:XValidation:rule="!has(self.minScale) || !has(self.maxScale) || self.minScale <= self.maxScale",message="minScale is at most maxScale"
type Scale struct {
	// MinScale is the fewest replicas; 0 scales to zero while idle. Default 1.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:default=1
	// +optional
	MinScale *int32 `json:"minScale,omitempty"`
	// MaxScale is the most replicas. Default 4.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	// +kubebuilder:default=4
	// +optional
	MaxScale *int32 `json:"maxScale,omitempty"`
}

// Scaling tunes the autoscaler: replicas = ceil(expected arrival rate ×
// (1 + lag drained within TargetDrain) / per-replica throughput), within
// [minScale, maxScale] and the input's partitions.
type Scaling struct {
	// TargetDrain is how soon a backlog should be worked off. Default 30s.
	// +optional
	TargetDrain *metav1.Duration `json:"targetDrain,omitempty"`
	// ScaleDownDelay is how long a lower replica count must hold before
	// replicas are removed. Default 60s.
	// +optional
	ScaleDownDelay *metav1.Duration `json:"scaleDownDelay,omitempty"`
	// Disabled keeps every processor at minScale (at least 1).
	// +optional
	Disabled bool `json:"disabled,omitempty"`
}

// TopologyStatus says which revisions run.
type TopologyStatus struct {
	// ObservedGeneration is the generation the status is of.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Active is the TopologyRevision that reads the sources.
	// +optional
	Active string `json:"active,omitempty"`
	// Next is the TopologyRevision taking over at the next switch.
	// +optional
	Next string `json:"next,omitempty"`
	// PhasingOut are revisions draining what they read before the switch,
	// oldest first.
	// +listType=atomic
	// +optional
	PhasingOut []string `json:"phasingOut,omitempty"`
	// Failed is the revision whose standby upgrade failed (see the
	// UpgradeFailed condition): it is not tried again; pinning other part
	// revisions makes a new one.
	// +optional
	Failed string `json:"failed,omitempty"`
	// Problems lists every reason the composed topology is invalid, each
	// naming its part and node.
	// +listType=atomic
	// +optional
	Problems []string `json:"problems,omitempty"`
	// Processors is each active processor's scale.
	// +listType=map
	// +listMapKey=name
	// +optional
	Processors []ProcessorStatus `json:"processors,omitempty"`
	// Conditions: Valid, Ready, Upgrading, UpgradeFailed, KafkaReachable.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ProcessorStatus is one processor's scale and backlog.
type ProcessorStatus struct {
	Name string `json:"name"`
	// Replicas is what the autoscaler chose.
	Replicas int32 `json:"replicas"`
	// Lag is the records not yet committed across the input's partitions.
	Lag int64 `json:"lag"`
}

// Condition types of a Topology.
const (
	ConditionValid          = "Valid"
	ConditionReady          = "Ready"
	ConditionUpgrading      = "Upgrading"
	ConditionUpgradeFailed  = "UpgradeFailed"
	ConditionKafkaReachable = "KafkaReachable"
)

// TopologyList is a list of Topologies.
//
// +kubebuilder:object:root=true
type TopologyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Topology `json:"items"`
}
