// Package annotations parses the relations.transit.io annotations of
// providers and consumers: a leaf package, so its fuzz target builds
// without the controller.
package annotations

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// The annotations and the label of the relations API. Providers carry
// provides (and optionally config, allow-namespaces, protect); consumers
// carry consumes and relationship (and optionally config and pin).
const (
	Prefix = "relations.transit.io/"

	// AnnotationProvides: "a,b", the interfaces an object provides.
	AnnotationProvides = Prefix + "provides"
	// AnnotationConsumes: "a,b", the interfaces a workload consumes.
	AnnotationConsumes = Prefix + "consumes"
	// AnnotationRelationship: "db,shared/cache,Database.example.com/pg",
	// the providers a consumer asks to relate to: [namespace/]name, or
	// [namespace/]Kind[.group]/name for one kind (a kind begins with a
	// capital letter, a namespace never does).
	AnnotationRelationship = Prefix + "relationship"
	// AnnotationConfig: "db=pg-config,cache=redis", per interface the
	// ProviderConfig (on a provider) or ConsumerConfig (on a consumer).
	AnnotationConfig = Prefix + "config"
	// AnnotationAllowNamespaces: "team-a,team-b" or "*", the namespaces
	// whose consumers a provider admits (its own always).
	AnnotationAllowNamespaces = Prefix + "allow-namespaces"
	// AnnotationProtect: "true" keeps a provider (a finalizer) while
	// consumers relate to it.
	AnnotationProtect = Prefix + "protect"
	// AnnotationPin: "db=3", hold a consumer's interface at a revision.
	AnnotationPin = Prefix + "pin"

	// LabelExpose marks the Secrets and ConfigMaps a ProviderConfig may
	// read: "true". The controller watches no other.
	LabelExpose = Prefix + "expose"

	// WaitContainer is the init container the webhook gives a consumer
	// whose lifecycle depends on a relationship not yet established.
	WaitContainer = "transit-relations-wait"
)

// ProviderAnnotations is what a provider's annotations say.
type ProviderAnnotations struct {
	Interfaces []string
	// Configs maps an interface to its ProviderConfig.
	Configs map[string]string
	// AllowNamespaces are the other namespaces whose consumers may relate;
	// AllowAll when "*".
	AllowNamespaces []string
	AllowAll        bool
	Protect         bool
}

// Request is a provider a consumer names: Namespace is the consumer's when
// the entry had none; Kind ("Service", "Database.example.com") is empty
// when the entry named none, meaning any of the built-in provider kinds.
type Request struct {
	Namespace, Name string
	Kind            string
}

// Key is the namespace/name a provider of the request has, whatever its
// kind.
func (r Request) Key() string { return r.Namespace + "/" + r.Name }

func (r Request) String() string {
	if r.Kind == "" {
		return r.Key()
	}
	return r.Kind + " " + r.Key()
}

// ConsumerAnnotations is what a consumer's annotations say.
type ConsumerAnnotations struct {
	Interfaces []string
	Requests   []Request
	// Configs maps an interface to its ConsumerConfig.
	Configs map[string]string
	// Pins maps an interface to the revision it is held at.
	Pins map[string]int64
}

// AnnotationError is a malformed annotation: which one, which entry, what
// is wrong.
type AnnotationError struct {
	Annotation string
	Entry      string // empty for the whole value
	Problem    string
}

func (e *AnnotationError) Error() string {
	if e.Entry == "" {
		return fmt.Sprintf("annotation %s: %s", e.Annotation, e.Problem)
	}
	return fmt.Sprintf("annotation %s: entry %q: %s", e.Annotation, e.Entry, e.Problem)
}

// maxEntries bounds every list annotation: more is a mistake, not a design.
const maxEntries = 64

// IsProvider says whether an object's annotations make it a provider.
func IsProvider(annotations map[string]string) bool {
	_, ok := annotations[AnnotationProvides]
	return ok
}

// IsConsumer says whether an object's annotations make it a consumer.
func IsConsumer(annotations map[string]string) bool {
	_, ok := annotations[AnnotationConsumes]
	return ok
}

// ParseProvider reads a provider's annotations. The first problem found
// is returned as an *AnnotationError.
func ParseProvider(annotations map[string]string) (ProviderAnnotations, error) {
	var p ProviderAnnotations
	var err error
	if p.Interfaces, err = interfaces(AnnotationProvides, annotations[AnnotationProvides]); err != nil {
		return p, err
	}
	if p.Configs, err = configs(annotations, p.Interfaces); err != nil {
		return p, err
	}
	if v, ok := annotations[AnnotationAllowNamespaces]; ok {
		if strings.TrimSpace(v) == "*" {
			p.AllowAll = true
		} else {
			entries, err := list(AnnotationAllowNamespaces, v)
			if err != nil {
				return p, err
			}
			for _, ns := range entries {
				if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
					return p, &AnnotationError{AnnotationAllowNamespaces, ns, "not a namespace name (or \"*\" alone): " + strings.Join(msgs, "; ")}
				}
			}
			p.AllowNamespaces = entries
		}
	}
	if v, ok := annotations[AnnotationProtect]; ok {
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			return p, &AnnotationError{AnnotationProtect, "", fmt.Sprintf("%q is not true or false", v)}
		}
		p.Protect = b
	}
	return p, nil
}

// ParseConsumer reads a consumer's annotations; namespace is the
// consumer's, where a provider named without one is looked for.
func ParseConsumer(namespace string, annotations map[string]string) (ConsumerAnnotations, error) {
	var c ConsumerAnnotations
	var err error
	if c.Interfaces, err = interfaces(AnnotationConsumes, annotations[AnnotationConsumes]); err != nil {
		return c, err
	}
	v, ok := annotations[AnnotationRelationship]
	if !ok {
		return c, &AnnotationError{AnnotationRelationship, "", "missing: a consumer names the providers it relates to ([namespace/]name or [namespace/]Kind.group/name)"}
	}
	entries, err := list(AnnotationRelationship, v)
	if err != nil {
		return c, err
	}
	for _, e := range entries {
		r, err := request(namespace, e)
		if err != nil {
			return c, err
		}
		if slices.Contains(c.Requests, r) {
			return c, &AnnotationError{AnnotationRelationship, e, "named twice"}
		}
		c.Requests = append(c.Requests, r)
	}
	if c.Configs, err = configs(annotations, c.Interfaces); err != nil {
		return c, err
	}
	if v, ok := annotations[AnnotationPin]; ok {
		pairs, err := keyValues(AnnotationPin, v, c.Interfaces)
		if err != nil {
			return c, err
		}
		c.Pins = map[string]int64{}
		for iface, s := range pairs {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil || n < 1 {
				return c, &AnnotationError{AnnotationPin, iface + "=" + s, "the revision must be a positive integer"}
			}
			c.Pins[iface] = n
		}
	}
	return c, nil
}

// relationshipGrammar is what an entry of the relationship annotation is.
const relationshipGrammar = "want name, namespace/name, Kind.group/name or namespace/Kind.group/name"

// request parses one entry of the relationship annotation.
func request(namespace, e string) (Request, error) {
	bad := func(problem string) (Request, error) {
		return Request{}, &AnnotationError{AnnotationRelationship, e, problem}
	}
	r := Request{Namespace: namespace}
	parts := strings.Split(e, "/")
	switch {
	case len(parts) == 1:
		r.Name = parts[0]
	case len(parts) == 2 && isKind(parts[0]):
		r.Kind, r.Name = parts[0], parts[1]
	case len(parts) == 2:
		r.Namespace, r.Name = parts[0], parts[1]
	case len(parts) == 3:
		r.Namespace, r.Kind, r.Name = parts[0], parts[1], parts[2]
	default:
		return bad(relationshipGrammar)
	}
	if r.Namespace != namespace {
		if msgs := validation.IsDNS1123Label(r.Namespace); len(msgs) > 0 {
			return bad("namespace: " + strings.Join(msgs, "; ") + " (" + relationshipGrammar + ")")
		}
	}
	if r.Kind != "" {
		kind, group, _ := strings.Cut(r.Kind, ".")
		if !isKind(kind) || len(kind) > 63 || strings.IndexFunc(kind, func(c rune) bool { return !isAlnum(c) }) >= 0 {
			return bad("kind: " + kind + " is not a Kind (letters and digits, from a capital letter)")
		}
		if group != "" {
			if msgs := validation.IsDNS1123Subdomain(group); len(msgs) > 0 {
				return bad("group: " + strings.Join(msgs, "; "))
			}
		}
	}
	if msgs := validation.IsDNS1123Subdomain(r.Name); len(msgs) > 0 {
		return bad("name: " + strings.Join(msgs, "; "))
	}
	return r, nil
}

// isKind: a Kind begins with a capital letter, a namespace (a DNS label)
// never does.
func isKind(s string) bool { return s != "" && s[0] >= 'A' && s[0] <= 'Z' }

func isAlnum(c rune) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// interfaces parses a provides or consumes value: distinct DNS labels.
func interfaces(annotation, v string) ([]string, error) {
	entries, err := list(annotation, v)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if msgs := validation.IsDNS1123Label(e); len(msgs) > 0 {
			return nil, &AnnotationError{annotation, e, "an interface name is a DNS label: " + strings.Join(msgs, "; ")}
		}
	}
	return entries, nil
}

// configs parses the config annotation: each entry names an interface of
// declared and a config object.
func configs(annotations map[string]string, declared []string) (map[string]string, error) {
	v, ok := annotations[AnnotationConfig]
	if !ok {
		return nil, nil
	}
	pairs, err := keyValues(AnnotationConfig, v, declared)
	if err != nil {
		return nil, err
	}
	for iface, name := range pairs {
		if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
			return nil, &AnnotationError{AnnotationConfig, iface + "=" + name, "the config's name: " + strings.Join(msgs, "; ")}
		}
	}
	return pairs, nil
}

// keyValues parses "iface=value" entries whose interfaces are declared,
// each once.
func keyValues(annotation, v string, declared []string) (map[string]string, error) {
	entries, err := list(annotation, v)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, e := range entries {
		k, val, ok := strings.Cut(e, "=")
		k, val = strings.TrimSpace(k), strings.TrimSpace(val)
		switch {
		case !ok || k == "" || val == "":
			return nil, &AnnotationError{annotation, e, "want interface=value"}
		case !slices.Contains(declared, k):
			return nil, &AnnotationError{annotation, e, fmt.Sprintf("interface %q is not among the object's (%s)", k, strings.Join(declared, ", "))}
		}
		if _, dup := out[k]; dup {
			return nil, &AnnotationError{annotation, e, fmt.Sprintf("interface %q is given twice", k)}
		}
		out[k] = val
	}
	return out, nil
}

// list splits a comma-separated value into trimmed entries: at least one,
// at most maxEntries, none empty, none twice.
func list(annotation, v string) ([]string, error) {
	if strings.TrimSpace(v) == "" {
		return nil, &AnnotationError{annotation, "", "empty"}
	}
	parts := strings.Split(v, ",")
	if len(parts) > maxEntries {
		return nil, &AnnotationError{annotation, "", fmt.Sprintf("%d entries, at most %d", len(parts), maxEntries)}
	}
	out := make([]string, 0, len(parts))
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if p == "" {
			return nil, &AnnotationError{annotation, "", fmt.Sprintf("entry %d is empty", i+1)}
		}
		if slices.Contains(out, p) {
			return nil, &AnnotationError{annotation, p, "given twice"}
		}
		out = append(out, p)
	}
	return out, nil
}
