// Package v1alpha1 is the streams.transit.io/v1alpha1 API: stream-processing
// pipelines on Kafka whose parts belong to different teams.
//
// A team owns a TopologyPart: sources and sinks (Kafka topics) and
// processors (a function image reading one stream and writing one). Each
// change of a part's spec is kept as an immutable TopologyPartRevision. A
// Topology pins one revision of each part; the controller composes them,
// validates the whole, and runs it as a TopologyRevision. Pinning new part
// revisions makes a new TopologyRevision, which takes over the sources at
// one point in each source partition: nothing is lost or processed twice.
//
// +kubebuilder:object:generate=true
// +groupName=streams.transit.io
package v1alpha1
