package kubernetes

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"text/template"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"

	"github.com/cloudtransit/transit/bundle"
	relationsconfig "github.com/cloudtransit/transit/controllers/relations/config"
	"github.com/cloudtransit/transit/districts"
)

//go:embed addons/*.yaml
var addonFiles embed.FS

// Labels on every object of an addon: transit owns it, and which addon it
// belongs to, so an object an addon no longer has is found and removed.
const (
	labelManagedBy = "app.kubernetes.io/managed-by"
	labelAddon     = "transit.io/addon"
)

// platformAddons are the addons every cluster runs, in order: the pod
// network first (no node is Ready without it), then DNS.
var platformAddons = []districts.Addon{{Name: "flannel"}, {Name: "coredns"}}

// addonKinds are every kind an addon manifest holds; pruning looks for
// transit's objects among them, webhook configurations and admission
// policies first (a removed controller's webhook must not refuse anything
// meanwhile), and never
// CustomResourceDefinitions (deleting one deletes users' objects).
var addonKinds = []schema.GroupVersionKind{
	{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "MutatingWebhookConfiguration"},
	{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "ValidatingWebhookConfiguration"},
	{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "ValidatingAdmissionPolicyBinding"},
	{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "ValidatingAdmissionPolicy"},
	{Version: "v1", Kind: "Namespace"},
	{Version: "v1", Kind: "ServiceAccount"},
	{Version: "v1", Kind: "ConfigMap"},
	{Version: "v1", Kind: "Service"},
	{Group: "apps", Version: "v1", Kind: "DaemonSet"},
	{Group: "apps", Version: "v1", Kind: "Deployment"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRoleBinding"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "Role"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "RoleBinding"},
	{Group: "policy", Version: "v1", Kind: "PodDisruptionBudget"},
}

// addonValues are what the manifests are rendered with.
type addonValues struct {
	PodCIDR, DNSIP     string
	Backend            string
	Image, PluginImage string
	// The relations addon's settings.
	Replicas, Workers, History, APIQPS, APIBurst int
}

// relationsDefaults are the relations addon's settings left out.
var relationsDefaults = map[string]int{"replicas": 2, "workers": 4, "history": 10, "api_qps": 50}

// renderAddon returns the objects of addon ad, labelled as transit's.
func (d *driver) renderAddon(ad districts.Addon) ([]*unstructured.Unstructured, error) {
	name := ad.Name
	src, err := addonFiles.ReadFile("addons/" + name + ".yaml")
	if err != nil {
		return nil, fmt.Errorf("addon %s: not installable by this version of transit", name)
	}
	dnsIP, err := nthAddress(d.k8s.ServiceCIDR, 10)
	if err != nil {
		return nil, err
	}
	v := addonValues{PodCIDR: d.k8s.PodCIDR, DNSIP: dnsIP, Backend: d.k8s.PodNetwork}
	var extra [][]byte
	switch name {
	case "flannel":
		v.Image, v.PluginImage = bundle.FlannelImage, bundle.FlannelCNIPluginImage
	case "coredns":
		v.Image = bundle.CoreDNSImage
	case "relations":
		if v.Image, err = d.bundleImage(bundle.RelationsRepository); err != nil {
			return nil, fmt.Errorf("addon relations: %w", err)
		}
		set := func(key string) int {
			n, err := strconv.Atoi(ad.Settings[key])
			if err != nil {
				return relationsDefaults[key] // validated: unset
			}
			return n
		}
		v.Replicas, v.Workers, v.History, v.APIQPS = set("replicas"), set("workers"), set("history"), set("api_qps")
		v.APIBurst = 2 * v.APIQPS
		if extra, err = relationsCRDs(); err != nil {
			return nil, err
		}
		extra = append(extra, relationsconfig.Policy)
	}
	tmpl, err := template.New(name).Option("missingkey=error").Funcs(template.FuncMap{
		"json": func(s string) (string, error) { b, err := json.Marshal(s); return string(b), err },
	}).Parse(string(src))
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := tmpl.Execute(&buf, v); err != nil {
		return nil, err
	}
	for _, doc := range extra {
		buf.WriteString("\n---\n")
		buf.Write(doc)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(&buf, 4096)
	var objs []*unstructured.Unstructured
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("addon %s: %w", name, err)
		}
		if len(u.Object) == 0 {
			continue
		}
		labels := u.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		labels[labelManagedBy], labels[labelAddon] = "transit", name
		u.SetLabels(labels)
		objs = append(objs, &u)
	}
	return objs, nil
}

// relationsCRDs are the relationship controller's generated CRDs.
func relationsCRDs() ([][]byte, error) {
	entries, err := fs.ReadDir(relationsconfig.CRDs, "crd")
	if err != nil {
		return nil, err
	}
	var out [][]byte
	for _, e := range entries {
		data, err := fs.ReadFile(relationsconfig.CRDs, "crd/"+e.Name())
		if err != nil {
			return nil, err
		}
		out = append(out, data)
	}
	return out, nil
}

// bundleImage is the reference of the bundles' image of repository (a
// controller's, tagged by content): every district with nodes must have a
// bundle (a packages district's gives transit's images only) and every
// bundle the same image, since every node imports it.
func (d *driver) bundleImage(repository string) (string, error) {
	for _, dep := range d.cluster.Deployments {
		if dep.Quantity > 0 && d.opts.Bundles[dep.District] == "" && d.opts.Install[dep.District] == districts.InstallPackages {
			return "", fmt.Errorf("district %s installs Kubernetes from packages and names no bundle, so its nodes cannot run %s (no registry has it): set its kubernetes_bundle (or TRANSIT_BUNDLE) to the directory `make bundle` wrote", dep.District, repository)
		}
	}
	var ref, from string
	for _, district := range slices.Sorted(maps.Keys(d.opts.Bundles)) {
		m, err := d.manifest(d.opts.Bundles[district])
		if err != nil {
			return "", err
		}
		r := m.ImageRef(repository)
		switch {
		case r == "":
			return "", fmt.Errorf("the bundle of district %s (%s) has no %s image: rebuild it with `make bundle`", district, d.opts.Bundles[district], repository)
		case ref != "" && r != ref:
			return "", fmt.Errorf("districts %s and %s install from bundles with different %s images (%s, %s): build both from one transit", from, district, repository, ref, r)
		}
		ref, from = r, district
	}
	if ref == "" {
		return "", fmt.Errorf("its image (%s) comes only in a bundle, and no district has one (kubernetes_bundle, or TRANSIT_BUNDLE)", repository)
	}
	return ref, nil
}

// nthAddress is the n-th address of prefix (kubeadm gives cluster DNS the
// 10th of the service range).
func nthAddress(prefix string, n int) (string, error) {
	p, err := netip.ParsePrefix(prefix)
	if err != nil {
		return "", err
	}
	a := p.Masked().Addr()
	for range n {
		a = a.Next()
	}
	if !p.Contains(a) {
		return "", fmt.Errorf("%s has no %d-th address", prefix, n)
	}
	return a.String(), nil
}

// EnsureAddons applies the platform's addons and cluster.json's with
// server-side apply, as field manager transit, and removes every object
// transit made that no wanted addon has any more; then it waits (bounded)
// until each of cluster.json's addons serves. It returns what it
// installed, upgraded or removed.
func (d *driver) EnsureAddons(ctx context.Context, addons []districts.Addon) ([]string, error) {
	a, err := d.client(ctx)
	if err != nil {
		return nil, err
	}
	changed, err := d.applyAddons(ctx, a, append(slices.Clone(platformAddons), addons...))
	if err != nil {
		return changed, err
	}
	for _, ad := range addons {
		if err := waitAddon(ctx, a, ad.Name); err != nil {
			return changed, err
		}
	}
	return changed, nil
}

func (d *driver) applyAddons(ctx context.Context, a *api, addons []districts.Addon) ([]string, error) {
	dyn, err := dynamic.NewForConfig(a.cfg)
	if err != nil {
		return nil, err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(a.c.Discovery()))
	var changed []string
	wanted := map[string]bool{} // kind/namespace/name
	for _, ad := range addons {
		name := ad.Name
		objs, err := d.renderAddon(ad)
		if err != nil {
			return changed, err
		}
		what := ""
		for _, obj := range objs {
			change, err := applyObject(ctx, dyn, mapper, obj)
			if err != nil {
				return changed, fmt.Errorf("addon %s: %s %s: %w", name, obj.GetKind(), obj.GetName(), err)
			}
			wanted[objectKey(obj.GroupVersionKind().GroupKind(), obj.GetNamespace(), obj.GetName())] = true
			if change != "" && what != "installed" {
				what = change
			}
		}
		if what != "" {
			changed = append(changed, name+" "+what)
		}
	}
	removed, err := prune(ctx, dyn, mapper, wanted)
	return append(changed, removed...), err
}

func objectKey(gk schema.GroupKind, ns, name string) string {
	return gk.String() + "/" + ns + "/" + name
}

// applyObject server-side applies obj and says whether it was
// "installed" (new), "upgraded" (changed) or left as it was ("").
func applyObject(ctx context.Context, dyn dynamic.Interface, mapper meta.RESTMapper, obj *unstructured.Unstructured) (string, error) {
	gvk := obj.GroupVersionKind()
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return "", err
	}
	var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		ri = dyn.Resource(m.Resource).Namespace(obj.GetNamespace())
	}
	before, err := ri.Get(ctx, obj.GetName(), metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return "", err
	}
	after, err := ri.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: "transit", Force: true})
	if err != nil {
		return "", err
	}
	switch {
	case before == nil:
		return "installed", nil
	case before.GetResourceVersion() != after.GetResourceVersion():
		return "upgraded", nil
	}
	return "", nil
}

// prune deletes transit's addon objects that are not wanted.
func prune(ctx context.Context, dyn dynamic.Interface, mapper meta.RESTMapper, wanted map[string]bool) ([]string, error) {
	var removed []string
	seen := map[string]bool{}
	for _, gvk := range addonKinds {
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return removed, err
		}
		list, err := dyn.Resource(m.Resource).List(ctx, metav1.ListOptions{LabelSelector: labelManagedBy + "=transit," + labelAddon})
		if err != nil {
			return removed, err
		}
		for _, o := range list.Items {
			if wanted[objectKey(gvk.GroupKind(), o.GetNamespace(), o.GetName())] {
				continue
			}
			var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
			if o.GetNamespace() != "" {
				ri = dyn.Resource(m.Resource).Namespace(o.GetNamespace())
			}
			err := ri.Delete(ctx, o.GetName(), metav1.DeleteOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				return removed, err
			}
			if name := o.GetLabels()[labelAddon]; !seen[name] {
				seen[name] = true
				removed = append(removed, name+" removed")
			}
		}
	}
	return removed, nil
}
