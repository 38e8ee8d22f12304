// Package v1alpha1 is the relations.transit.io/v1alpha1 API: typed
// relationships between independently managed workloads.
//
// Providers and consumers are ordinary objects annotated
// relations.transit.io/provides and relations.transit.io/consumes (see
// package relations for every annotation). The kinds here say what an
// interface shares (Interface), where a provider's values come from
// (ProviderConfig) and how a consumer takes them (ConsumerConfig); the
// controller writes one Relationship per consumer and interface, owned by
// the consumer, whose status is the relationship's state and history.
//
// +kubebuilder:object:generate=true
// +groupName=relations.transit.io
package v1alpha1
