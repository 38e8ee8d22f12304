package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// Relationship is one consumer's relationship over one interface, written
// by the controller and owned by the consumer (deleted with it). Its
// status is the relationship's state: `kubectl get relationships -A` is
// the topology.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=relations,shortName=rel
// +kubebuilder:printcolumn:name="Consumer",type=string,JSONPath=`.spec.consumer.name`
// +kubebuilder:printcolumn:name="Kind",type=string,JSONPath=`.spec.consumer.kind`,priority=1
// +kubebuilder:printcolumn:name="Interface",type=string,JSONPath=`.spec.interface`
// +kubebuilder:printcolumn:name="Provider",type=string,JSONPath=`.spec.provider.name`
// +kubebuilder:printcolumn:name="Provider-NS",type=string,JSONPath=`.spec.provider.namespace`,priority=1
// +kubebuilder:printcolumn:name="Revision",type=integer,JSONPath=`.status.revision`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Relationship struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   RelationshipSpec   `json:"spec"`
	Status RelationshipStatus `json:"status,omitempty"`
}

// RelationshipSpec is what the consumer's annotations asked for.
type RelationshipSpec struct {
	// Consumer is the workload in the Relationship's namespace.
	Consumer ObjectRef `json:"consumer"`
	// Provider is the object the consumer named.
	Provider ObjectRef `json:"provider"`
	// Interface is the interface both sides share.
	// +kubebuilder:validation:MaxLength=63
	Interface string `json:"interface"`
	// Pin, when set, holds the consumer at that revision
	// (relations.transit.io/pin).
	// +kubebuilder:validation:Minimum=1
	// +optional
	Pin *int64 `json:"pin,omitempty"`
}

// ObjectRef names an object. Kind and APIVersion are empty while a
// provider named by name alone has not been found.
type ObjectRef struct {
	// +optional
	APIVersion string `json:"apiVersion,omitempty"`
	// +optional
	Kind string `json:"kind,omitempty"`
	// +optional
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
}

// RelationshipStatus is the relationship's state.
type RelationshipStatus struct {
	// ObservedGeneration is the generation the status is of.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Revision is the revision the consumer's template carries: its values
	// are in the Secret Secret names.
	// +optional
	Revision int64 `json:"revision,omitempty"`
	// Hash is the hash of the revision's values.
	// +optional
	Hash string `json:"hash,omitempty"`
	// Secret is the name of the revision's values Secret, in the
	// consumer's namespace.
	// +optional
	Secret string `json:"secret,omitempty"`
	// History holds the last revisions, newest first (the controller's
	// history setting, 10 by default).
	// +listType=atomic
	// +optional
	History []RevisionRecord `json:"history,omitempty"`
	// Conditions: ProviderFound, InterfaceMatched, Permitted,
	// ValuesResolved, ProviderAvailable (lifecycle available), Injected,
	// RolledOut, Pinned and Ready.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// RevisionRecord is one revision of a relationship's values.
type RevisionRecord struct {
	Revision int64  `json:"revision"`
	Hash     string `json:"hash"`
	// Secret is the revision's values Secret.
	Secret string `json:"secret"`
	// Created is when the revision was made.
	Created metav1.Time `json:"created"`
}

// Condition types of a Relationship.
const (
	ConditionProviderFound     = "ProviderFound"
	ConditionInterfaceMatched  = "InterfaceMatched"
	ConditionPermitted         = "Permitted"
	ConditionValuesResolved    = "ValuesResolved"
	ConditionInjected          = "Injected"
	ConditionRolledOut         = "RolledOut"
	ConditionPinned            = "Pinned"
	ConditionProviderAvailable = "ProviderAvailable"
	ConditionReady             = "Ready"
)

// RelationshipList is a list of Relationships.
//
// +kubebuilder:object:root=true
type RelationshipList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Relationship `json:"items"`
}
