package relations

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/util/jsonpath"

	"github.com/cloudtransit/transit/controllers/relations/api/v1alpha1"
)

// MaxValuesSize bounds a relationship's values: they go into one Secret,
// whose limit is 1 MiB.
const MaxValuesSize = 1 << 20

// Values are a relationship's resolved values, key → value.
type Values map[string]string

// Hash identifies values: equal values, equal hash. A revision is made
// only when the hash changes.
func (v Values) Hash() string {
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	h := sha256.New()
	for _, k := range keys {
		fmt.Fprintf(h, "%d:%s%d:%s", len(k), k, len(v[k]), v[k])
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// Problem is why values could not be resolved, for a condition: which
// key, what is wrong. It never holds a value.
type Problem struct {
	Key    string
	Reason string // a condition reason: MissingKey, NotExposed, BadFormat…
	Detail string
	// Interface: the values break what the two sides agreed (condition
	// InterfaceMatched), not a source (ValuesResolved).
	Interface bool
}

func (p Problem) String() string {
	if p.Key == "" {
		return p.Detail
	}
	return "key " + p.Key + ": " + p.Detail
}

// Source is what a provider's values come from.
type Source struct {
	// Provider is the provider object.
	Provider *unstructured.Unstructured
	// Config is the provider's ProviderConfig for the interface; nil: the
	// default interface (the provider's DNS name under the interface's
	// name).
	Config *v1alpha1.ProviderConfig
	// Secret and ConfigMap look up an object of the provider's namespace
	// that carries relations.transit.io/expose=true; nil, nil: none such.
	Secret    func(name string) (*corev1.Secret, error)
	ConfigMap func(name string) (*corev1.ConfigMap, error)
	// Object looks up an object of the provider's namespace by kind
	// (Kind or Kind.group) and name; nil and a note saying why when it
	// cannot be read (not exposed, a kind the controller may not read).
	Object func(kind, name string) (*unstructured.Unstructured, string, error)
	// ClusterDomain is the cluster's DNS domain (cluster.local).
	ClusterDomain string
}

// DNSName is a provider's name as its consumers reach it: an ExternalName
// Service's externalName, else the Service of the provider's name in its
// namespace.
func DNSName(provider *unstructured.Unstructured, clusterDomain string) string {
	if provider.GetKind() == "Service" {
		if ext, _, _ := unstructured.NestedString(provider.Object, "spec", "externalName"); ext != "" {
			return ext
		}
	}
	return provider.GetName() + "." + provider.GetNamespace() + ".svc." + clusterDomain
}

// hasDNSName: a Service, and a workload (by its Service of the same
// name), are reached by a name; other providers share values only
// through a ProviderConfig.
func hasDNSName(gvk schema.GroupVersionKind) bool {
	switch gvk.GroupKind() {
	case schema.GroupKind{Kind: "Service"}, schema.GroupKind{Group: "apps", Kind: "Deployment"},
		schema.GroupKind{Group: "apps", Kind: "StatefulSet"}, schema.GroupKind{Group: "apps", Kind: "DaemonSet"}:
		return true
	}
	return false
}

// Resolve reads the values of interface iface from src and checks them
// against the Interface, if any. Problems are returned all at once, values
// only when there are none. An error is a failed lookup to retry.
func Resolve(iface string, src Source, it *v1alpha1.Interface) (Values, []Problem, error) {
	vals := Values{}
	var problems []Problem
	switch gvk := src.Provider.GroupVersionKind(); {
	case src.Config == nil && !hasDNSName(gvk):
		return nil, []Problem{{Reason: "NoConfig", Detail: fmt.Sprintf("%s %s has no DNS name: it shares values only through a ProviderConfig (%s: %s=<name>)",
			gvk.Kind, src.Provider.GetName(), AnnotationConfig, iface)}}, nil
	case src.Config == nil:
		vals[iface] = DNSName(src.Provider, src.ClusterDomain)
	default:
		// Whole Secrets first: a key Values names takes its own source.
		for _, vf := range src.Config.Spec.ValuesFrom {
			fromVals, p, err := resolveFrom(vf, src)
			if err != nil {
				return nil, nil, err
			}
			if p != nil {
				problems = append(problems, *p)
			}
			maps.Copy(vals, fromVals)
		}
		for _, vs := range src.Config.Spec.Values {
			v, p, err := resolveOne(vs, src)
			if err != nil {
				return nil, nil, err
			}
			if p != nil {
				problems = append(problems, *p)
				continue
			}
			vals[vs.Key] = v
		}
	}
	if it != nil {
		problems = append(problems, check(vals, it)...)
		problems = append(problems, checkSensitive(src.Config, it)...)
	}
	size := 0
	for k, v := range vals {
		size += len(k) + len(v)
	}
	if size > MaxValuesSize {
		problems = append(problems, Problem{Reason: "TooLarge", Detail: fmt.Sprintf("the values take %d bytes, over the 1 MiB a Secret holds", size)})
	}
	if len(problems) > 0 {
		return nil, problems, nil
	}
	return vals, nil, nil
}

// resolveOne reads one key's value.
func resolveOne(vs v1alpha1.ValueSource, src Source) (string, *Problem, error) {
	problem := func(reason, format string, a ...any) (string, *Problem, error) {
		return "", &Problem{Key: vs.Key, Reason: reason, Detail: fmt.Sprintf(format, a...)}, nil
	}
	switch {
	case vs.Field != "":
		v, err := field(src.Provider, vs.Field)
		if err != nil {
			return problem("MissingField", "%s %s: %v", src.Provider.GetKind(), src.Provider.GetName(), err)
		}
		return v, nil, nil
	case vs.SecretKeyRef != nil:
		s, err := src.Secret(vs.SecretKeyRef.Name)
		if err != nil {
			return "", nil, err
		}
		if s == nil {
			return problem("NotExposed", "Secret %s does not exist or lacks the label %s=true", vs.SecretKeyRef.Name, LabelExpose)
		}
		v, ok := s.Data[vs.SecretKeyRef.Key]
		if !ok {
			return problem("MissingKey", "Secret %s has no key %s", vs.SecretKeyRef.Name, vs.SecretKeyRef.Key)
		}
		return string(v), nil, nil
	case vs.ConfigMapKeyRef != nil:
		cm, err := src.ConfigMap(vs.ConfigMapKeyRef.Name)
		if err != nil {
			return "", nil, err
		}
		if cm == nil {
			return problem("NotExposed", "ConfigMap %s does not exist or lacks the label %s=true", vs.ConfigMapKeyRef.Name, LabelExpose)
		}
		if v, ok := cm.Data[vs.ConfigMapKeyRef.Key]; ok {
			return v, nil, nil
		}
		if v, ok := cm.BinaryData[vs.ConfigMapKeyRef.Key]; ok {
			return string(v), nil, nil
		}
		return problem("MissingKey", "ConfigMap %s has no key %s", vs.ConfigMapKeyRef.Name, vs.ConfigMapKeyRef.Key)
	case vs.BindingKey != "":
		name, _, _ := unstructured.NestedString(src.Provider.Object, "status", "binding", "name")
		if name == "" {
			return problem("NoBinding", "%s %s has no .status.binding.name", src.Provider.GetKind(), src.Provider.GetName())
		}
		s, err := src.Secret(name)
		if err != nil {
			return "", nil, err
		}
		if s == nil {
			return problem("NotExposed", "binding Secret %s does not exist or lacks the label %s=true", name, LabelExpose)
		}
		v, ok := s.Data[vs.BindingKey]
		if !ok {
			return problem("MissingKey", "binding Secret %s has no entry %s", name, vs.BindingKey)
		}
		return string(v), nil, nil
	case vs.ObjectFieldRef != nil:
		ref := vs.ObjectFieldRef
		o, note, err := src.Object(ref.Kind, ref.Name)
		if err != nil {
			return "", nil, err
		}
		if o == nil {
			return problem("NotReadable", "%s %s: %s", ref.Kind, ref.Name, note)
		}
		v, err := field(o, ref.Field)
		if err != nil {
			return problem("MissingField", "%s %s: %v", ref.Kind, ref.Name, err)
		}
		return v, nil, nil
	}
	return problem("NoSource", "no source (the CRD's validation should have refused this)")
}

// resolveFrom reads every key of a whole Secret. A key that cannot be an
// interface key is a problem naming it.
func resolveFrom(vf v1alpha1.ValuesFromSource, src Source) (Values, *Problem, error) {
	name := vf.SecretRef.Name
	s, err := src.Secret(name)
	if err != nil {
		return nil, nil, err
	}
	if s == nil {
		return nil, &Problem{Reason: "NotExposed", Detail: fmt.Sprintf("Secret %s (valuesFrom) does not exist or lacks the label %s=true", name, LabelExpose)}, nil
	}
	vals := Values{}
	for k, v := range s.Data {
		if !interfaceKey.MatchString(k) {
			return nil, &Problem{Key: k, Reason: "BadKey", Detail: fmt.Sprintf("Secret %s (valuesFrom): not an interface key (a letter or _ first, then letters, digits, _ . -): rename it or name its keys in values", name)}, nil
		}
		vals[k] = string(v)
	}
	return vals, nil, nil
}

// secretValues are a Secret's entries as values.
func secretValues(s *corev1.Secret) Values {
	vals := Values{}
	for k, v := range s.Data {
		vals[k] = string(v)
	}
	return vals
}

// interfaceKey is the CRDs' pattern of a key.
var interfaceKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]*$`)

// decodedSecret is a Secret as an object whose .data entries are the
// values themselves, for a JSONPath.
func decodedSecret(s *corev1.Secret) (*unstructured.Unstructured, error) {
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(s)
	if err != nil {
		return nil, err
	}
	data := map[string]any{}
	for k, v := range s.Data {
		data[k] = string(v)
	}
	obj["data"] = data
	u := &unstructured.Unstructured{Object: obj}
	u.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	return u, nil
}

// field evaluates a JSONPath on obj to one scalar.
func field(obj *unstructured.Unstructured, path string) (string, error) {
	jp := jsonpath.New("field")
	if err := jp.Parse(path); err != nil {
		return "", fmt.Errorf("JSONPath %s: %w", path, err)
	}
	results, err := jp.FindResults(obj.Object)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	var found []string
	for _, rs := range results {
		for _, r := range rs {
			if !r.IsValid() || !r.CanInterface() {
				continue
			}
			switch v := r.Interface().(type) {
			case string:
				found = append(found, v)
			case int64, float64, bool, int32, int:
				found = append(found, fmt.Sprint(v))
			case nil:
			default:
				return "", fmt.Errorf("%s is a %T, not a string, number or boolean", path, v)
			}
		}
	}
	switch len(found) {
	case 0:
		return "", fmt.Errorf("%s has no value", path)
	case 1:
		return found[0], nil
	}
	return "", fmt.Errorf("%s has %d values, want one", path, len(found))
}

// check holds values to the Interface: required keys present, formats
// kept, no key it does not declare.
func check(vals Values, it *v1alpha1.Interface) []Problem {
	var problems []Problem
	declared := map[string]v1alpha1.InterfaceKey{}
	for _, k := range it.Spec.Keys {
		declared[k.Name] = k
		v, ok := vals[k.Name]
		if !ok {
			if k.Required {
				problems = append(problems, Problem{Key: k.Name, Reason: "MissingKey", Interface: true, Detail: "required by Interface " + it.Name + ", no value"})
			}
			continue
		}
		if err := checkFormat(k.Format, v); err != nil {
			detail := err.Error()
			if k.Sensitive {
				detail = "not a " + k.Format + " (the value is sensitive and not shown)"
			}
			problems = append(problems, Problem{Key: k.Name, Reason: "BadFormat", Interface: true, Detail: detail})
		}
	}
	for k := range vals {
		if _, ok := declared[k]; !ok {
			problems = append(problems, Problem{Key: k, Reason: "InterfaceMismatch", Interface: true, Detail: "Interface " + it.Name + " has no such key"})
		}
	}
	slices.SortFunc(problems, func(a, b Problem) int { return strings.Compare(a.Key, b.Key) })
	return problems
}

// checkSensitive: a value the Interface marks sensitive comes from a
// Secret, never from a ConfigMap, which anyone who may read the
// namespace's configuration reads.
func checkSensitive(cfg *v1alpha1.ProviderConfig, it *v1alpha1.Interface) []Problem {
	if cfg == nil {
		return nil
	}
	var problems []Problem
	for _, vs := range cfg.Spec.Values {
		i := slices.IndexFunc(it.Spec.Keys, func(k v1alpha1.InterfaceKey) bool { return k.Name == vs.Key })
		if i >= 0 && it.Spec.Keys[i].Sensitive && vs.ConfigMapKeyRef != nil {
			problems = append(problems, Problem{Key: vs.Key, Reason: "SensitiveInConfigMap", Interface: true,
				Detail: fmt.Sprintf("sensitive in Interface %s, but ProviderConfig %s takes it from ConfigMap %s: keep it in a Secret (secretKeyRef)", it.Name, cfg.Name, vs.ConfigMapKeyRef.Name)})
		}
	}
	return problems
}

// checkTakes holds the keys a consumer takes to the Interface, if any,
// and to the values: a key they lack would point the template at a key
// its Secret lacks. config names the ConsumerConfig ("": the default
// interface's one key).
func checkTakes(keys []v1alpha1.KeyInjection, vals Values, it *v1alpha1.Interface, config string) []Problem {
	var problems []Problem
	for _, k := range keys {
		if _, ok := vals[k.Key]; ok {
			continue
		}
		by := "the default interface takes it (no ConsumerConfig names the keys to take)"
		if config != "" {
			by = "ConsumerConfig " + config + " takes it"
		}
		detail := fmt.Sprintf("%s, but the provider supplies only %s", by, strings.Join(sortedKeys(vals), ", "))
		if it != nil && !slices.ContainsFunc(it.Spec.Keys, func(ik v1alpha1.InterfaceKey) bool { return ik.Name == k.Key }) {
			detail = fmt.Sprintf("%s, but Interface %s declares no such key", by, it.Name)
		}
		problems = append(problems, Problem{Key: k.Key, Reason: "MissingKey", Interface: true, Detail: detail})
	}
	return problems
}

// checkFormat checks v against an Interface key's format.
func checkFormat(format, v string) error {
	switch format {
	case "", "string":
		return nil
	case "host":
		if net.ParseIP(v) != nil || len(validation.IsDNS1123Subdomain(strings.TrimSuffix(v, "."))) == 0 {
			return nil
		}
		return fmt.Errorf("%q is not a host name or IP address", v)
	case "port":
		if n, err := strconv.Atoi(v); err == nil && n >= 1 && n <= 65535 {
			return nil
		}
		return fmt.Errorf("%q is not a port (1-65535)", v)
	case "hostport":
		h, p, err := net.SplitHostPort(v)
		if err != nil {
			return fmt.Errorf("%q is not host:port", v)
		}
		if err := checkFormat("host", h); err != nil {
			return err
		}
		return checkFormat("port", p)
	case "uri":
		if u, err := url.Parse(v); err == nil && u.Scheme != "" && (u.Host != "" || u.Opaque != "") {
			return nil
		}
		return fmt.Errorf("%q is not an absolute URI", v)
	}
	return fmt.Errorf("unknown format %q", format)
}
