package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// Interface is the type of a relationship: the keys a provider shares with
// its consumers. It is optional; without one an interface shares its
// provider's DNS name under the interface's own name. Both sides are
// checked against it: a ProviderConfig must give every required key, a
// ConsumerConfig may take only keys it declares.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=relations
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Interface struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec InterfaceSpec `json:"spec"`
}

// InterfaceSpec lists the interface's keys.
type InterfaceSpec struct {
	// Keys are what a provider of the interface shares.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	Keys []InterfaceKey `json:"keys"`
}

// InterfaceKey is one value an interface shares.
type InterfaceKey struct {
	// Name is the key, as ProviderConfig and ConsumerConfig name it.
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_.-]*$`
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// Required keys must have a value for the relationship to be Ready.
	// +optional
	Required bool `json:"required,omitempty"`
	// Sensitive values are never printed in events or conditions, and a
	// consumer takes them from a Secret (always so: values live in
	// Secrets), never from a ConfigMap source.
	// +optional
	Sensitive bool `json:"sensitive,omitempty"`
	// Format is checked on every value: host (a DNS name or an IP
	// address), port (1–65535), uri (absolute, with a scheme), hostport
	// (host:port), or string (anything, the default).
	// +kubebuilder:validation:Enum=string;host;port;uri;hostport
	// +optional
	Format string `json:"format,omitempty"`
}

// InterfaceList is a list of Interfaces.
//
// +kubebuilder:object:root=true
type InterfaceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Interface `json:"items"`
}
