package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

// GroupVersion is relations.transit.io/v1alpha1.
var GroupVersion = schema.GroupVersion{Group: "relations.transit.io", Version: "v1alpha1"}

var (
	// SchemeBuilder registers the kinds of this group and version.
	SchemeBuilder = (&scheme.Builder{GroupVersion: GroupVersion}).Register(
		&Interface{}, &InterfaceList{},
		&ProviderConfig{}, &ProviderConfigList{},
		&ConsumerConfig{}, &ConsumerConfigList{},
		&Relationship{}, &RelationshipList{},
	)
	// AddToScheme adds them to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
