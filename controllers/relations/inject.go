package relations

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/structured-merge-diff/v4/fieldpath"

	"github.com/cloudtransit/transit/controllers/relations/api/v1alpha1"
)

// FieldManager is the controller's server-side apply manager: it owns
// the fields it injects and no other, so a user's variable or mount of
// the same name is a conflict, never overwritten.
const FieldManager = "transit-relations"

// RevisionAnnotationPrefix + a relationship's name, on a consumer's pod
// template, is the revision its pods run. A new revision changes it, and
// the values Secret the template refers to: one rollout.
const RevisionAnnotationPrefix = "revision.relations.transit.io/"

// inPlaceRevision is what the template carries for an InPlace
// relationship: the same for every revision, so none rolls the workload.
const inPlaceRevision = "in-place"

// liveSecretName is an InPlace relationship's mutable values Secret.
func liveSecretName(relationship string) string { return relationship + liveSuffix }

const liveSuffix = "-live"

// Injection is what one relationship puts into its consumer's pod
// template.
type Injection struct {
	// Relationship is the Relationship's name.
	Relationship string
	// Interface names the binding directory.
	Interface string
	Revision  int64
	// Secret holds the revision's values (the mutable one for InPlace).
	Secret string
	// InPlace: new values change the files of the mutable Secret, never
	// the template (which carries "in-place" instead of the revision).
	InPlace bool
	// Keys say where each key goes (ConsumerConfig, or the default
	// interface's one env variable).
	Keys []v1alpha1.KeyInjection
}

// DefaultKeys is the default interface's injection: its one value as the
// environment variable named after the interface (db-main → DB_MAIN).
func DefaultKeys(iface string) []v1alpha1.KeyInjection {
	return []v1alpha1.KeyInjection{{Key: iface, Env: EnvName(iface)}}
}

// EnvName is an interface's name as an environment variable.
func EnvName(iface string) string {
	return strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(iface))
}

// The Service Binding specification's root of binding directories: a
// container's own SERVICE_BINDING_ROOT is honoured, else it is set.
const (
	BindingRootEnv     = "SERVICE_BINDING_ROOT"
	defaultBindingRoot = "/bindings"
)

// Reserved entries of a values Secret that projects a binding directory:
// interface keys never start with a dot.
const (
	bindingTypeKey     = ".binding-type"
	bindingProviderKey = ".binding-provider"
)

// patchContainer is a container the template patch injects into.
type patchContainer struct {
	name string
	// bindingRoot is where binding directories go; setRoot says the patch
	// sets SERVICE_BINDING_ROOT to it (the container has none of its own).
	bindingRoot string
	setRoot     bool
}

// patchContainers are tpl's containers, each with its binding root: its
// own SERVICE_BINDING_ROOT, unless owned (the controller's own, from an
// earlier patch; nil: none is).
func patchContainers(tpl *corev1.PodTemplateSpec, owned *fieldpath.Set) []patchContainer {
	var out []patchContainer
	for _, c := range tpl.Spec.Containers {
		pc := patchContainer{name: c.Name, bindingRoot: defaultBindingRoot, setRoot: true}
		i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == BindingRootEnv })
		mine := owned != nil && owned.Has(fieldpath.MakePathOrDie("spec", "template", "spec", "containers",
			fieldpath.KeyByFields("name", c.Name), "env", fieldpath.KeyByFields("name", BindingRootEnv)))
		if i >= 0 && !mine {
			pc.bindingRoot, pc.setRoot = c.Env[i].Value, false
		}
		out = append(out, pc)
	}
	return out
}

// templatePatch is the part of a workload's spec.template the controller
// owns for injections, as a server-side apply patch: every container gets
// the env variables and mounts, the file volumes and binding directories
// are mounted, and the template carries each relationship's revision. No
// injection: an empty patch, which removes every field the controller
// added before.
func templatePatch(containers []patchContainer, injections []Injection) map[string]any {
	injections = slices.Clone(injections)
	slices.SortFunc(injections, func(a, b Injection) int { return strings.Compare(a.Relationship, b.Relationship) })
	annotations := map[string]any{}
	var env, mounts, volumes []any
	type binding struct{ volume, dir string }
	var bindings []binding
	for _, in := range injections {
		annotations[RevisionAnnotationPrefix+in.Relationship] = strconv.FormatInt(in.Revision, 10)
		if in.InPlace {
			annotations[RevisionAnnotationPrefix+in.Relationship] = inPlaceRevision
		}
		dirs := map[string][]any{} // mount directory → items
		var entries []any          // the binding directory's
		for _, k := range in.Keys {
			switch {
			case k.Env != "":
				env = append(env, map[string]any{"name": k.Env, "valueFrom": map[string]any{
					"secretKeyRef": map[string]any{"name": in.Secret, "key": k.Key}}})
			case k.File != "":
				dir := path.Dir(k.File)
				dirs[dir] = append(dirs[dir], map[string]any{"key": k.Key, "path": path.Base(k.File)})
			case k.Binding != "":
				entries = append(entries, map[string]any{"key": k.Key, "path": k.Binding})
			}
		}
		for _, dir := range sortedKeys(dirs) {
			// A directory mount, never subPath: an InPlace update reaches
			// the file without a restart.
			name := volumeName(in.Relationship, dir)
			volumes = append(volumes, map[string]any{"name": name, "secret": map[string]any{"secretName": in.Secret, "items": dirs[dir]}})
			mounts = append(mounts, map[string]any{"name": name, "mountPath": dir, "readOnly": true})
		}
		if len(entries) > 0 {
			// $SERVICE_BINDING_ROOT/<interface>/: the entries, type and
			// provider (the specification's workload projection).
			name := volumeName(in.Relationship, "binding")
			entries = append(entries, map[string]any{"key": bindingTypeKey, "path": "type"}, map[string]any{"key": bindingProviderKey, "path": "provider"})
			volumes = append(volumes, map[string]any{"name": name, "secret": map[string]any{"secretName": in.Secret, "items": entries}})
			bindings = append(bindings, binding{volume: name, dir: in.Interface})
		}
	}
	spec := map[string]any{}
	var cs []any
	for _, c := range containers {
		cenv, cmounts := slices.Clone(env), slices.Clone(mounts)
		if len(bindings) > 0 && c.setRoot {
			cenv = append(cenv, map[string]any{"name": BindingRootEnv, "value": c.bindingRoot})
		}
		for _, b := range bindings {
			cmounts = append(cmounts, map[string]any{"name": b.volume, "mountPath": path.Join(c.bindingRoot, b.dir), "readOnly": true})
		}
		if len(cenv) == 0 && len(cmounts) == 0 {
			continue
		}
		m := map[string]any{"name": c.name}
		if len(cenv) > 0 {
			m["env"] = cenv
		}
		if len(cmounts) > 0 {
			m["volumeMounts"] = cmounts
		}
		cs = append(cs, m)
	}
	if len(cs) > 0 {
		spec["containers"] = cs
	}
	if len(volumes) > 0 {
		spec["volumes"] = volumes
	}
	tpl := map[string]any{}
	if len(annotations) > 0 {
		tpl["metadata"] = map[string]any{"annotations": annotations}
	}
	if len(spec) > 0 {
		tpl["spec"] = spec
	}
	return tpl
}

// volumeName names a relationship's volume for one directory: a DNS label.
func volumeName(relationship, dir string) string {
	sum := sha256.Sum256([]byte(relationship + "\x00" + dir))
	return "rel-" + hex.EncodeToString(sum[:])[:12]
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// admit splits injections into those w's template may take and those
// that would overwrite a variable or mount someone else set there, with
// why: the one rule of the controller's patch and the webhook's
// injection, so a name the user set is never overwritten. owned are the
// fields the controller applied (ownedFields).
func admit(w client.Object, owned *fieldpath.Set, injections []Injection) (apply, blocked []Injection, why []string) {
	for _, in := range injections {
		if msg := conflict(w, owned, in); msg != "" {
			blocked, why = append(blocked, in), append(why, msg)
			continue
		}
		apply = append(apply, in)
	}
	return apply, blocked, why
}

// conflict is what an injection would set that another manager set first.
func conflict(w client.Object, owned *fieldpath.Set, in Injection) string {
	tpl := template(w)
	roots := patchContainers(tpl, owned)
	base := []any{"spec", "template", "spec"}
	for i, c := range tpl.Spec.Containers {
		at := func(parts ...any) fieldpath.Path {
			return fieldpath.MakePathOrDie(append(append(slices.Clone(base), "containers", fieldpath.KeyByFields("name", c.Name)), parts...)...)
		}
		// A field is the user's unless the controller applied it or it
		// is what the webhook injected for this relationship (admission
		// changes count as the requester's).
		mountedByUser := func(dir, volume string) bool {
			return slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == dir && m.Name != volume }) &&
				!owned.Has(at("volumeMounts", fieldpath.KeyByFields("mountPath", dir)))
		}
		if dir := path.Join(roots[i].bindingRoot, in.Interface); slices.ContainsFunc(in.Keys, func(k v1alpha1.KeyInjection) bool { return k.Binding != "" }) &&
			mountedByUser(dir, volumeName(in.Relationship, "binding")) {
			return fmt.Sprintf("container %s mounts a volume of its own at %s, the binding directory", c.Name, dir)
		}
		for _, k := range in.Keys {
			if k.Env != "" && slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == k.Env && !injectedEnv(e, in) }) &&
				!owned.Has(at("env", fieldpath.KeyByFields("name", k.Env))) {
				return fmt.Sprintf("container %s sets its own variable %s", c.Name, k.Env)
			}
			if dir := path.Dir(k.File); k.File != "" && mountedByUser(dir, volumeName(in.Relationship, dir)) {
				return fmt.Sprintf("container %s mounts a volume of its own at %s", c.Name, dir)
			}
		}
	}
	return ""
}

// injectedEnv says whether e is a variable a revision of in's
// relationship set.
func injectedEnv(e corev1.EnvVar, in Injection) bool {
	if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.Value != "" {
		return false
	}
	rest, ok := strings.CutPrefix(e.ValueFrom.SecretKeyRef.Name, in.Relationship+"-r")
	if !ok {
		return false
	}
	_, err := strconv.ParseInt(rest, 10, 64)
	return err == nil
}

// injectInto writes injections into a pod template as templatePatch
// would have them applied: the webhook's way, at admission.
func injectInto(tpl *corev1.PodTemplateSpec, injections []Injection) {
	data, err := json.Marshal(templatePatch(patchContainers(tpl, nil), injections))
	if err != nil {
		panic(err) // maps of strings and slices always marshal
	}
	var p corev1.PodTemplateSpec
	if err := json.Unmarshal(data, &p); err != nil {
		panic(err)
	}
	if len(p.Annotations) > 0 && tpl.Annotations == nil {
		tpl.Annotations = map[string]string{}
	}
	maps.Copy(tpl.Annotations, p.Annotations)
	for _, v := range p.Spec.Volumes {
		tpl.Spec.Volumes = upsert(tpl.Spec.Volumes, v, func(a, b corev1.Volume) bool { return a.Name == b.Name })
	}
	for _, pc := range p.Spec.Containers {
		i := slices.IndexFunc(tpl.Spec.Containers, func(c corev1.Container) bool { return c.Name == pc.Name })
		if i < 0 {
			continue
		}
		c := &tpl.Spec.Containers[i]
		for _, e := range pc.Env {
			c.Env = upsert(c.Env, e, func(a, b corev1.EnvVar) bool { return a.Name == b.Name })
		}
		for _, m := range pc.VolumeMounts {
			c.VolumeMounts = upsert(c.VolumeMounts, m, func(a, b corev1.VolumeMount) bool { return a.MountPath == b.MountPath })
		}
	}
}

// upsert replaces the element of s that same matches with v, or appends v.
func upsert[T any](s []T, v T, same func(a, b T) bool) []T {
	if i := slices.IndexFunc(s, func(x T) bool { return same(x, v) }); i >= 0 {
		s[i] = v
		return s
	}
	return append(s, v)
}

// ownedFields are the fields FieldManager applied to w.
func ownedFields(w client.Object) (*fieldpath.Set, error) {
	set := &fieldpath.Set{}
	for _, mf := range w.GetManagedFields() {
		if mf.Manager != FieldManager || mf.Operation != metav1.ManagedFieldsOperationApply || mf.FieldsV1 == nil {
			continue
		}
		s := &fieldpath.Set{}
		if err := s.FromJSON(bytes.NewReader(mf.FieldsV1.Raw)); err != nil {
			return nil, fmt.Errorf("managed fields of %s: %w", w.GetName(), err)
		}
		set = set.Union(s)
	}
	return set, nil
}
