package docs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	metavalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	relations "github.com/cloudtransit/transit/controllers/relations/config"
	streams "github.com/cloudtransit/transit/controllers/streams/config"
)

// crdSet is transit's own CustomResourceDefinitions (the ones its addons
// install), ready to validate objects as the API server would.
type crdSet struct {
	kinds  map[schema.GroupVersionKind]*crdKind
	groups map[string]bool
}

// crdKind is one version of one CRD.
type crdKind struct {
	crd        string // the CRD's name, for messages
	namespaced bool
	structural *structuralschema.Structural
	schema     validation.SchemaValidator
	cel        *cel.Validator // nil without x-kubernetes-validations
}

// loadCRDs reads the CRDs the relations and streams addons embed.
func loadCRDs() (*crdSet, error) {
	set := &crdSet{kinds: map[schema.GroupVersionKind]*crdKind{}, groups: map[string]bool{}}
	for dir, fsys := range map[string]fs.FS{
		"controllers/relations/config": relations.CRDs,
		"controllers/streams/config":   streams.CRDs,
	} {
		files, err := fs.Glob(fsys, "crd/*.yaml")
		if err != nil {
			return nil, err
		}
		for _, name := range files {
			data, err := fs.ReadFile(fsys, name)
			if err != nil {
				return nil, err
			}
			if err := set.add(data); err != nil {
				return nil, fmt.Errorf("%s/%s: %w", dir, name, err)
			}
		}
	}
	if len(set.kinds) == 0 {
		return nil, fmt.Errorf("no CRD found in the addons' embedded files")
	}
	return set, nil
}

func (s *crdSet) add(data []byte) error {
	var crd apiextv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(data, &crd); err != nil {
		return err
	}
	s.groups[crd.Spec.Group] = true
	for _, v := range crd.Spec.Versions {
		if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
			return fmt.Errorf("version %s has no schema", v.Name)
		}
		var props apiextensions.JSONSchemaProps
		if err := apiextv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.Schema.OpenAPIV3Schema, &props, nil); err != nil {
			return err
		}
		st, err := structuralschema.NewStructural(&props)
		if err != nil {
			return err
		}
		sv, _, err := validation.NewSchemaValidator(&props)
		if err != nil {
			return err
		}
		gvk := schema.GroupVersionKind{Group: crd.Spec.Group, Version: v.Name, Kind: crd.Spec.Names.Kind}
		s.kinds[gvk] = &crdKind{
			crd:        crd.Name,
			namespaced: crd.Spec.Scope == apiextv1.NamespaceScoped,
			structural: st,
			schema:     sv,
			cel:        cel.NewValidator(st, true, celconfig.PerCallLimit),
		}
	}
	return nil
}

// builtin decodes Kubernetes' own kinds strictly: an unknown or duplicate
// field is an error.
var builtin = kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme.Scheme, scheme.Scheme, kjson.SerializerOptions{Yaml: true, Strict: true})

// checkObject checks one document of a `yaml k8s` fence: it has
// apiVersion and kind; an object of transit's CRDs validates against its
// schema and rules; one of Kubernetes' kinds decodes strictly.
func (c *checker) checkObject(ctx context.Context, d yamlDoc, v any) []finding {
	bad := func(format string, args ...any) []finding {
		return []finding{{d.line, ruleK8s, fmt.Sprintf(format, args...)}}
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return bad("a Kubernetes object is a mapping, not %T", v)
	}
	apiVersion, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	if apiVersion == "" || kind == "" {
		return bad("a Kubernetes object needs apiVersion and kind (a part of one is ```yaml fragment)")
	}
	gvk := schema.FromAPIVersionAndKind(apiVersion, kind)
	who := kind + " " + objectName(obj)
	if c.crds.groups[gvk.Group] {
		k, ok := c.crds.kinds[gvk]
		if !ok {
			return bad("%s: transit's CRDs define no kind %s in %s", who, kind, apiVersion)
		}
		// As the API server reads it: whole numbers are int64.
		data, err := yaml.YAMLToJSON([]byte(d.text))
		if err == nil {
			err = utiljson.Unmarshal(data, &obj)
		}
		if err != nil {
			return bad("%s: %v", who, err)
		}
		var out []finding
		for _, e := range k.validate(ctx, obj) {
			out = append(out, finding{d.line, ruleK8s, fmt.Sprintf("%s: %s (CRD %s)", who, e, k.crd)})
		}
		return out
	}
	_, _, err := builtin.Decode([]byte(d.text), nil, nil)
	switch {
	case err == nil:
		return nil
	case runtime.IsNotRegisteredError(err):
		return bad("%s: %s is neither a Kubernetes kind nor one of transit's CRDs (another project's object is ```yaml fragment)", who, gvk)
	default:
		return bad("%s: %v", who, err)
	}
}

func objectName(obj map[string]any) string {
	meta, _ := obj["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	if ns, _ := meta["namespace"].(string); ns != "" {
		return ns + "/" + name
	}
	return name
}

// validate checks a custom object as the API server does on create with
// strict field validation: unknown fields (pruning), metadata, defaults,
// then the OpenAPI schema and the CEL rules.
func (k *crdKind) validate(ctx context.Context, obj map[string]any) []string {
	var out []string
	for _, p := range pruning.PruneWithOptions(obj, k.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true}) {
		out = append(out, fmt.Sprintf("unknown field %q", p))
	}
	out = append(out, k.validateMeta(obj)...)
	defaulting.Default(obj, k.structural)
	for _, e := range validation.ValidateCustomResource(nil, obj, k.schema) {
		out = append(out, e.Error())
	}
	if k.cel != nil {
		errs, _ := k.cel.Validate(ctx, nil, k.structural, obj, nil, celconfig.RuntimeCELCostBudget)
		for _, e := range errs {
			out = append(out, e.Error())
		}
	}
	return out
}

// validateMeta decodes metadata strictly and checks the name (and the
// namespace of a namespaced kind) as the API server would.
func (k *crdKind) validateMeta(obj map[string]any) []string {
	raw, err := json.Marshal(obj["metadata"])
	if err != nil {
		return []string{"metadata: " + err.Error()}
	}
	var meta metav1.ObjectMeta
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&meta); err != nil {
		return []string{"metadata: " + err.Error()}
	}
	var out []string
	errs := metavalidation.ValidateObjectMeta(&meta, k.namespaced, metavalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	for _, e := range errs {
		if e.Type == field.ErrorTypeRequired && e.Field == "metadata.namespace" {
			continue // a namespaced object without one is in kubectl's current namespace
		}
		out = append(out, e.Error())
	}
	return out
}
