// Package relations is the relationship controller transit installs with
// the "relations" addon: typed relationships between workloads that teams
// manage independently, declared by annotations on ordinary objects
// (package annotations). Per consumer and interface it keeps a Relationship
// (api/v1alpha1), resolves the provider's values (values.go), writes them
// into an immutable Secret per revision and points the consumer's pod
// template at it by server-side apply of its own fields (inject.go,
// reconciler.go). Its mutating webhook injects the persisted revision at
// admission and holds consumers whose start depends on an unestablished
// relationship (webhook.go, wait.go).
package relations
