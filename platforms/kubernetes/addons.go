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
	"strings"
	"text/template"
	"time"

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
	streamsconfig "github.com/cloudtransit/transit/controllers/streams/config"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
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

// clusterDomain is the cluster's DNS domain (kubeadm's dnsDomain,
// CoreDNS's zone).
const clusterDomain = "cluster.local"

// addonValues are what the manifests are rendered with.
type addonValues struct {
	PodCIDR, DNSIP     string
	ClusterDomain      string
	Backend            string
	Image, PluginImage string
	// MeshInterface is the mesh's device on a cluster on the mesh:
	// flannel sends pod traffic through it.
	MeshInterface string
	// The controllers' settings (relations, streams).
	Replicas, Workers, History, APIQPS, APIBurst int
	// The streams addon's: the Kafka the controller uses, the sidecar it
	// runs beside functions, how long a standby upgrade may take, the
	// Secret saying how to reach that Kafka (TLS, SASL), and, without a
	// Kafka of the user's, the development broker's.
	Bootstrap, SidecarImage, UpgradeTimeout string
	KafkaSecret                             string
	DevBroker                               bool
	BrokerImage, ToolsImage, BrokerAddress  string
	BrokerDataDir                           string
}

// controllerConfig is what an addon's controller ships beside its
// manifest, from its embedded config package: the generated CRDs (crd/*.yaml)
// and an admission policy.
type controllerConfig struct {
	CRDs   fs.FS
	Policy []byte
}

// controllerConfigs are the addons' controller configs, by addon.
var controllerConfigs = map[string]controllerConfig{
	"relations": {CRDs: relationsconfig.CRDs, Policy: relationsconfig.Policy},
	"streams":   {CRDs: streamsconfig.CRDs, Policy: streamsconfig.Policy},
}

// crds are the config's CRD manifests, one per file, in file order.
func (c controllerConfig) crds() ([][]byte, error) {
	entries, err := fs.ReadDir(c.CRDs, "crd")
	if err != nil {
		return nil, err
	}
	var out [][]byte
	for _, e := range entries {
		data, err := fs.ReadFile(c.CRDs, "crd/"+e.Name())
		if err != nil {
			return nil, err
		}
		out = append(out, data)
	}
	return out, nil
}

// busyboxRepository is the bundle's busybox without its tag.
var busyboxRepository = bundle.BusyboxImage[:strings.LastIndex(bundle.BusyboxImage, ":")]

// renderAddon returns the objects of addon ad, labelled as transit's: a
// controller's CRDs first, then its manifest, then its admission policy.
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
	v := addonValues{PodCIDR: d.k8s.PodCIDR, DNSIP: dnsIP, ClusterDomain: clusterDomain, Backend: d.k8s.PodNetwork}
	switch name {
	case "flannel":
		v.Image, v.PluginImage = bundle.FlannelImage, bundle.FlannelCNIPluginImage
		if d.onMesh() {
			v.MeshInterface = meshInterface
		}
	case "coredns":
		v.Image = bundle.CoreDNSImage
	case "relations":
		err = d.relationsValues(ad, &v)
	case "streams":
		err = d.streamsValues(ad, &v)
	}
	if err != nil {
		return nil, fmt.Errorf("addon %s: %w", name, err)
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
	docs := [][]byte{buf.Bytes()}
	if cfg, ok := controllerConfigs[name]; ok {
		crds, err := cfg.crds()
		if err != nil {
			return nil, fmt.Errorf("addon %s: %w", name, err)
		}
		docs = append(append(crds, docs...), cfg.Policy)
	}
	var objs []*unstructured.Unstructured
	for _, doc := range docs {
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(doc), 4096)
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
	}
	return objs, nil
}

// intSettings reads ad's integer settings (validated, or their defaults).
func intSettings(ad districts.Addon, keys map[string]*int) error {
	for key, to := range keys {
		n, err := strconv.Atoi(ad.Setting(key))
		if err != nil {
			return fmt.Errorf("setting %s: %w", key, err)
		}
		*to = n
	}
	return nil
}

func (d *driver) relationsValues(ad districts.Addon, v *addonValues) error {
	var err error
	if v.Image, err = d.bundleImage(bundle.RelationsRepository); err != nil {
		return err
	}
	if err := intSettings(ad, map[string]*int{"replicas": &v.Replicas, "workers": &v.Workers, "history": &v.History, "api_qps": &v.APIQPS}); err != nil {
		return err
	}
	v.APIBurst = 2 * v.APIQPS
	return nil
}

// streamsBrokerAddress is where the development broker serves, and what
// it advertises: its Service's name.
const streamsBrokerAddress = "streams-broker.transit-streams.svc." + clusterDomain + ":9092"

func (d *driver) streamsValues(ad districts.Addon, v *addonValues) error {
	var err error
	if v.Image, err = d.bundleImage(bundle.StreamsControllerRepository); err != nil {
		return err
	}
	if v.SidecarImage, err = d.bundleImage(bundle.StreamsSidecarRepository); err != nil {
		return err
	}
	if err := intSettings(ad, map[string]*int{"replicas": &v.Replicas, "history": &v.History}); err != nil {
		return err
	}
	v.UpgradeTimeout = ad.Setting("upgrade_timeout")
	v.KafkaSecret = ad.Setting("kafka_secret")
	if v.Bootstrap = ad.Setting("bootstrap"); v.Bootstrap != "" {
		return nil
	}
	v.DevBroker, v.BrokerAddress, v.Bootstrap = true, streamsBrokerAddress, streamsBrokerAddress
	v.BrokerDataDir = ad.Setting("broker_data_dir")
	if v.BrokerImage, err = d.bundleImage(bundle.StreamsBrokerRepository); err != nil {
		return err
	}
	v.ToolsImage, err = d.bundleImage(busyboxRepository)
	return err
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
// transit made that no wanted addon has any more; then it waits (bounded:
// waitAddons) until each addon serves, the platform's own first: the pod
// network up on every node and the cluster DNS answering, so a converged
// cluster is a usable one. It returns what it installed, upgraded or
// removed.
func (d *driver) EnsureAddons(ctx context.Context, addons []districts.Addon) ([]string, error) {
	a, err := d.client(ctx)
	if err != nil {
		return nil, err
	}
	all := append(slices.Clone(platformAddons), addons...)
	changed, err := d.applyAddons(ctx, a, all)
	if err != nil {
		return changed, err
	}
	return changed, d.waitAddons(ctx, a, all)
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
		var crds []string // applied, not yet known to be served
		for _, obj := range objs {
			gk := obj.GroupVersionKind().GroupKind()
			if gk != crdKind && len(crds) > 0 {
				// What follows may need the kinds (a controller watches
				// them as it starts): they must be served first.
				if err := waitEstablished(ctx, dyn, crds); err != nil {
					return changed, fmt.Errorf("addon %s: %w", name, err)
				}
				crds = nil
			}
			change, err := applyObject(ctx, dyn, mapper, obj)
			if err != nil {
				return changed, fmt.Errorf("addon %s: %s %s: %w", name, obj.GetKind(), obj.GetName(), err)
			}
			if gk == crdKind {
				crds = append(crds, obj.GetName())
			}
			wanted[objectKey(gk, obj.GetNamespace(), obj.GetName())] = true
			if change != "" && what != "installed" {
				what = change
			}
		}
		if what != "" {
			changed = append(changed, name+" "+what)
		}
	}
	names := map[string]bool{}
	for _, ad := range addons {
		names[ad.Name] = true
	}
	pruned, err := prune(ctx, dyn, mapper, wanted, names)
	for _, p := range pruned {
		if !slices.Contains(changed, p) && !slices.Contains(changed, strings.Replace(p, " upgraded", " installed", 1)) {
			changed = append(changed, p)
		}
	}
	return changed, err
}

var (
	crdKind = schema.GroupKind{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}
	crdGVR  = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
)

// crdEstablishTimeout bounds the wait for an addon's CRDs to be served.
var crdEstablishTimeout = time.Minute

// waitEstablished waits, bounded, until the API server serves each CRD
// of names (condition Established).
func waitEstablished(ctx context.Context, dyn dynamic.Interface, names []string) error {
	ctx, cancel := context.WithTimeout(ctx, crdEstablishTimeout)
	defer cancel()
	for _, name := range names {
		for {
			crd, err := dyn.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
			if err == nil && crdEstablished(crd) {
				break
			}
			why := "not yet Established"
			if err != nil {
				why = err.Error()
			}
			select {
			case <-ctx.Done():
				if errors.Is(ctx.Err(), context.DeadlineExceeded) {
					return fmt.Errorf("CustomResourceDefinition %s is not served after %s: %s", name, crdEstablishTimeout, why)
				}
				return ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	return nil
}

func crdEstablished(crd *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
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

// addonUsers are, by addon, the objects of users whose existence refuses
// the addon's removal: only its controller can see them out (a streams
// Topology's finalizer deletes its Kafka topics and groups), and nothing
// would once it is gone.
var addonUsers = map[string]schema.GroupVersionResource{
	"streams": {Group: "streams.transit.io", Version: "v1alpha1", Resource: "topologies"},
}

// prune deletes transit's addon objects that are not wanted, webhook
// configurations and admission policies first, and says which addons it
// removed ("<name> removed") or changed (an addon still listed in addons
// that has objects no more: "<name> upgraded"). An addon being removed
// whose users still exist (addonUsers) keeps every object: its removal is
// refused with a *provider.AddonInUseError naming them.
func prune(ctx context.Context, dyn dynamic.Interface, mapper meta.RESTMapper, wanted, addons map[string]bool) ([]string, error) {
	type unwanted struct {
		ri          dynamic.ResourceInterface
		name, addon string
	}
	var all []unwanted
	removing := map[string]bool{}
	for _, gvk := range addonKinds {
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return nil, err
		}
		list, err := dyn.Resource(m.Resource).List(ctx, metav1.ListOptions{LabelSelector: labelManagedBy + "=transit," + labelAddon})
		if err != nil {
			return nil, err
		}
		for _, o := range list.Items {
			if wanted[objectKey(gvk.GroupKind(), o.GetNamespace(), o.GetName())] || o.GetDeletionTimestamp() != nil {
				continue // wanted, or going already (a Namespace emptied)
			}
			var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
			if o.GetNamespace() != "" {
				ri = dyn.Resource(m.Resource).Namespace(o.GetNamespace())
			}
			addon := o.GetLabels()[labelAddon]
			all = append(all, unwanted{ri: ri, name: o.GetName(), addon: addon})
			removing[addon] = !addons[addon]
		}
	}
	var refused []error
	kept := map[string]bool{}
	for _, addon := range slices.Sorted(maps.Keys(removing)) {
		if !removing[addon] {
			continue
		}
		inUse, err := addonInUse(ctx, dyn, addon)
		if inUse == nil && err == nil && addon == "relations" {
			inUse, err = protectedProviders(ctx, dyn, mapper)
		}
		if err != nil {
			return nil, fmt.Errorf("addon %s: %w", addon, err)
		}
		if inUse != nil {
			kept[addon] = true
			refused = append(refused, inUse)
		}
	}
	var pruned []string
	seen := map[string]bool{}
	for _, o := range all {
		if kept[o.addon] {
			continue
		}
		err := o.ri.Delete(ctx, o.name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return pruned, err
		}
		if !seen[o.addon] {
			seen[o.addon] = true
			what := " removed"
			if !removing[o.addon] {
				what = " upgraded"
			}
			pruned = append(pruned, o.addon+what)
		}
	}
	return pruned, errors.Join(refused...)
}

// addonInUse names the users that keep addon, or returns nil when none
// exists (nor their kind: no CRD, no users).
func addonInUse(ctx context.Context, dyn dynamic.Interface, addon string) (*provider.AddonInUseError, error) {
	gvr, ok := addonUsers[addon]
	if !ok {
		return nil, nil
	}
	list, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{})
	switch {
	case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("list %s: %w", gvr.GroupResource(), err)
	case len(list.Items) == 0:
		return nil, nil
	}
	e := &provider.AddonInUseError{Addon: addon, Resource: gvr.GroupResource().String()}
	for _, o := range list.Items {
		user := o.GetNamespace() + "/" + o.GetName()
		if o.GetDeletionTimestamp() != nil {
			user += " (being deleted)"
		}
		e.Users = append(e.Users, user)
	}
	slices.Sort(e.Users)
	return e, nil
}

// The relations controller's protect finalizer and its Relationships,
// which name the providers it may be on.
const relationsProtectFinalizer = "relations.transit.io/protect"

var relationshipsGVR = schema.GroupVersionResource{Group: "relations.transit.io", Version: "v1alpha1", Resource: "relationships"}

// protectedProviders names the providers that carry the relations
// controller's protect finalizer, or returns nil when none does: once the
// controller is gone nothing would lift it, and they could never be
// deleted. The controller lifts it when their protect annotation goes.
func protectedProviders(ctx context.Context, dyn dynamic.Interface, mapper meta.RESTMapper) (*provider.AddonInUseError, error) {
	rels, err := dyn.Resource(relationshipsGVR).List(ctx, metav1.ListOptions{})
	switch {
	case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("list %s: %w", relationshipsGVR.GroupResource(), err)
	}
	seen := map[string]bool{}
	var users []string
	for _, rel := range rels.Items {
		apiVersion, _, _ := unstructured.NestedString(rel.Object, "spec", "provider", "apiVersion")
		kind, _, _ := unstructured.NestedString(rel.Object, "spec", "provider", "kind")
		ns, _, _ := unstructured.NestedString(rel.Object, "spec", "provider", "namespace")
		name, _, _ := unstructured.NestedString(rel.Object, "spec", "provider", "name")
		id := kind + " " + ns + "/" + name
		if kind == "" || seen[id] {
			continue
		}
		seen[id] = true
		gvk := schema.FromAPIVersionAndKind(apiVersion, kind)
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if meta.IsNoMatchError(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		o, err := dyn.Resource(m.Resource).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("get %s: %w", id, err)
		}
		if slices.Contains(o.GetFinalizers(), relationsProtectFinalizer) {
			users = append(users, id)
		}
	}
	if len(users) == 0 {
		return nil, nil
	}
	slices.Sort(users)
	return &provider.AddonInUseError{Addon: "relations", Resource: "providers with the finalizer " + relationsProtectFinalizer, Users: users,
		Remedy: "remove their relations.transit.io/protect annotation first, while the addon still runs (its controller then lifts the finalizer)"}, nil
}
