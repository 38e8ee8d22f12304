package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

// GroupVersion is streams.transit.io/v1alpha1.
var GroupVersion = schema.GroupVersion{Group: "streams.transit.io", Version: "v1alpha1"}

var (
	// SchemeBuilder registers the kinds of this group and version.
	SchemeBuilder = (&scheme.Builder{GroupVersion: GroupVersion}).Register(
		&TopologyPart{}, &TopologyPartList{},
		&TopologyPartRevision{}, &TopologyPartRevisionList{},
		&Topology{}, &TopologyList{},
		&TopologyRevision{}, &TopologyRevisionList{},
	)
	// AddToScheme adds them to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
