package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// ProviderConfig says where a provider's values for an interface come
// from. A provider names it with relations.transit.io/config:
// iface=<name>; it lives in the provider's namespace.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:categories=relations
// +kubebuilder:printcolumn:name="Interface",type=string,JSONPath=`.spec.interface`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ProviderConfig struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec ProviderConfigSpec `json:"spec"`
}

// ProviderConfigSpec maps each key to its source.
//
// +kubebuilder:validation:XValidation:rule="(has(self.values) && size(self.values) > 0) || (has(self.valuesFrom) && size(self.valuesFrom) > 0)",message="values or valuesFrom must name a source"
type ProviderConfigSpec struct {
	// Interface is the interface the values are for.
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=63
	Interface string `json:"interface"`
	// Values say where each key's value comes from.
	// +listType=map
	// +listMapKey=key
	// +kubebuilder:validation:MaxItems=64
	// +optional
	Values []ValueSource `json:"values,omitempty"`
	// ValuesFrom are whole Secrets: every key of each is a value (a key
	// Values also gives takes Values' source).
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	// +optional
	ValuesFrom []ValuesFromSource `json:"valuesFrom,omitempty"`
}

// ValuesFromSource is a source of many keys.
type ValuesFromSource struct {
	// SecretRef is a Secret of the provider's namespace (labelled
	// relations.transit.io/expose=true) whose every key is a value.
	SecretRef LocalRef `json:"secretRef"`
}

// LocalRef names an object in the provider's namespace.
type LocalRef struct {
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// ValueSource is where one key's value comes from: exactly one of a field
// of the provider object, a key of a Secret or ConfigMap in the
// provider's namespace (labelled relations.transit.io/expose=true), an
// entry of the provider's Service Binding Secret (.status.binding.name),
// or a field of another object in the provider's namespace.
//
// +kubebuilder:validation:XValidation:rule="[has(self.field), has(self.secretKeyRef), has(self.configMapKeyRef), has(self.bindingKey), has(self.objectFieldRef)].filter(x, x).size() == 1",message="exactly one of field, secretKeyRef, configMapKeyRef, bindingKey and objectFieldRef"
type ValueSource struct {
	// Key is the interface's key.
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_.-]*$`
	// +kubebuilder:validation:MaxLength=63
	Key string `json:"key"`
	// Field is a JSONPath into the provider object, e.g.
	// {.spec.externalName} or {.status.loadBalancer.ingress[0].ip}.
	// +kubebuilder:validation:MaxLength=256
	// +optional
	Field string `json:"field,omitempty"`
	// SecretKeyRef is a key of a Secret in the provider's namespace.
	// +optional
	SecretKeyRef *KeyRef `json:"secretKeyRef,omitempty"`
	// ConfigMapKeyRef is a key of a ConfigMap in the provider's namespace.
	// +optional
	ConfigMapKeyRef *KeyRef `json:"configMapKeyRef,omitempty"`
	// BindingKey is an entry of the Secret the provider's
	// .status.binding.name names (a Service Binding provisioned service).
	// +kubebuilder:validation:MaxLength=253
	// +optional
	BindingKey string `json:"bindingKey,omitempty"`
	// ObjectFieldRef is a field of another object in the provider's
	// namespace (the research prototype's type/name/path).
	// +optional
	ObjectFieldRef *ObjectFieldRef `json:"objectFieldRef,omitempty"`
}

// ObjectFieldRef is a field of an object in the provider's namespace. The
// controller reads Secrets and ConfigMaps labelled
// relations.transit.io/expose=true, Services and workloads, and kinds a
// ClusterRole labelled servicebinding.io/controller=true lets it read.
type ObjectFieldRef struct {
	// Kind is the object's kind, Kind.group outside the core and apps
	// groups (Secret, Service, Database.postgres.example.com).
	// +kubebuilder:validation:Pattern=`^[A-Z][A-Za-z0-9]*(\.[a-z0-9]([-a-z0-9.]*[a-z0-9])?)?$`
	// +kubebuilder:validation:MaxLength=253
	Kind string `json:"kind"`
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Field is a JSONPath into it, e.g. {.status.endpoint}; a Secret's
	// .data entries read decoded.
	// +kubebuilder:validation:MaxLength=256
	Field string `json:"field"`
}

// KeyRef names a key of a Secret or ConfigMap.
type KeyRef struct {
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key"`
}

// ProviderConfigList is a list of ProviderConfigs.
//
// +kubebuilder:object:root=true
type ProviderConfigList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ProviderConfig `json:"items"`
}

// Lifecycle dependencies of a consumer on its provider.
const (
	// LifecycleStart: the consumer starts only once the relationship's
	// values exist (a wait init container holds it until then).
	LifecycleStart = "start"
	// LifecycleAvailable: as start, and the consumer first starts only
	// once the provider is available too (its Ready or Available
	// condition True; a Service's endpoints a ready address).
	LifecycleAvailable = "available"
	// LifecycleNone: the consumer starts whenever.
	LifecycleNone = "none"
)

// How new values reach a consumer.
const (
	// UpdateRollout: a new revision's immutable Secret and a rollout of
	// the workload through its own strategy.
	UpdateRollout = "Rollout"
	// UpdateInPlace: files change in place in a mutable Secret the pods
	// mount; nothing restarts (only for keys injected as files).
	UpdateInPlace = "InPlace"
)

// ConsumerConfig says how a consumer takes an interface's values. A
// consumer names it with relations.transit.io/config: iface=<name>; it
// lives in the consumer's namespace.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:categories=relations
// +kubebuilder:printcolumn:name="Interface",type=string,JSONPath=`.spec.interface`
// +kubebuilder:printcolumn:name="Lifecycle",type=string,JSONPath=`.spec.lifecycle`
// +kubebuilder:printcolumn:name="Update",type=string,JSONPath=`.spec.update`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ConsumerConfig struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec ConsumerConfigSpec `json:"spec"`
}

// ConsumerConfigSpec maps each key to where it goes in the consumer.
//
// +kubebuilder:validation:XValidation:rule="!has(self.update) || self.update != 'InPlace' || self.keys.all(k, has(k.file))",message="update InPlace needs every key injected as a file"
type ConsumerConfigSpec struct {
	// Interface is the interface the values are of.
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=63
	Interface string `json:"interface"`
	// Lifecycle is start (the default: the consumer starts once the values
	// exist), available (once the values exist and the provider is
	// available) or none.
	// +kubebuilder:validation:Enum=start;available;none
	// +kubebuilder:default=start
	// +optional
	Lifecycle string `json:"lifecycle,omitempty"`
	// Update is Rollout (the default) or InPlace (files only).
	// +kubebuilder:validation:Enum=Rollout;InPlace
	// +kubebuilder:default=Rollout
	// +optional
	Update string `json:"update,omitempty"`
	// Keys say where each key goes; a key not listed is not injected.
	// +listType=map
	// +listMapKey=key
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	Keys []KeyInjection `json:"keys"`
}

// KeyInjection is where one key goes: exactly one of an environment
// variable of every container, a file (its mount path), or an entry of
// the Service Binding directory $SERVICE_BINDING_ROOT/<relationship>/.
//
// +kubebuilder:validation:XValidation:rule="[has(self.env), has(self.file), has(self.binding)].filter(x, x).size() == 1",message="exactly one of env, file and binding"
type KeyInjection struct {
	// Key is the interface's key.
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_.-]*$`
	// +kubebuilder:validation:MaxLength=63
	Key string `json:"key"`
	// Env is the environment variable's name.
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_]*$`
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Env string `json:"env,omitempty"`
	// File is the absolute path of the file holding the value.
	// +kubebuilder:validation:Pattern=`^/[^\x00]*[^/]$`
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	File string `json:"file,omitempty"`
	// Binding is the entry's name in the binding directory.
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_.-]+$`
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Binding string `json:"binding,omitempty"`
}

// ConsumerConfigList is a list of ConsumerConfigs.
//
// +kubebuilder:object:root=true
type ConsumerConfigList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ConsumerConfig `json:"items"`
}
