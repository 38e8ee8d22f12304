package kubernetes

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/cloudtransit/transit/bundle"
	"github.com/cloudtransit/transit/districts"
)

// relationsBundle writes a bundle holding only an image of ref.
func relationsBundle(t *testing.T, ref string) string {
	return testBundle(t, ref)
}

// testBundle writes a bundle of one image per ref (images/<i>.tar).
func testBundle(t *testing.T, refs ...string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "images"), 0o755); err != nil {
		t.Fatal(err)
	}
	m := bundle.Manifest{Kubernetes: "v1.32.4"}
	for i, ref := range refs {
		content := []byte("image " + ref)
		p := fmt.Sprintf("images/%d.tar", i)
		if err := os.WriteFile(filepath.Join(dir, p), content, 0o644); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(content)
		m.Images = append(m.Images, bundle.Image{Ref: ref,
			File: bundle.File{Path: p, SHA256: hex.EncodeToString(sum[:]), Size: int64(len(content)), Mode: 0o644, For: bundle.ForAll}})
	}
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, bundle.ManifestFile), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestRenderRelations: the relations addon runs the bundle's image (its
// content tag), with cluster.json's settings, its CRDs and its webhook;
// every object is labelled for pruning; a bundle without the image, or
// two bundles with different ones, is an error saying what to do.
func TestRenderRelations(t *testing.T) {
	const ref = bundle.RelationsRepository + ":0123456789abcdef"
	cl := districts.Cluster{ID: "k", Kubernetes: &districts.Kubernetes{}}
	d := newDriver(cl, Options{Bundles: map[string]string{"a": relationsBundle(t, ref), "b": relationsBundle(t, ref)}}, nil)
	objs, err := d.renderAddon(districts.Addon{Name: "relations", Settings: map[string]string{"workers": "16", "api_qps": "100"}})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, o := range objs {
		kinds = append(kinds, o.GetKind())
		if o.GetLabels()[labelAddon] != "relations" || o.GetLabels()[labelManagedBy] != "transit" {
			t.Errorf("%s %s is not labelled as the relations addon's", o.GetKind(), o.GetName())
		}
		if o.GetKind() != "Deployment" {
			continue
		}
		c, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		ctr := c[0].(map[string]any)
		args, _, _ := unstructured.NestedStringSlice(ctr, "args")
		if ctr["image"] != ref || ctr["imagePullPolicy"] != "Never" {
			t.Errorf("controller image %v (%v), want %s never pulled", ctr["image"], ctr["imagePullPolicy"], ref)
		}
		for _, want := range []string{"--image=" + ref, "--workers=16", "--history=10", "--api-qps=100", "--api-burst=200"} {
			if !slices.Contains(args, want) {
				t.Errorf("args %q lack %s", args, want)
			}
		}
		if n, _, _ := unstructured.NestedFieldNoCopy(o.Object, "spec", "replicas"); fmt.Sprint(n) != "2" {
			t.Errorf("replicas %v, want the default 2", n)
		}
	}
	if n := strings.Count(strings.Join(kinds, ","), "CustomResourceDefinition"); n != 4 {
		t.Errorf("%d CRDs, want 4 (%v)", n, kinds)
	}
	for _, k := range []string{"MutatingWebhookConfiguration", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "PodDisruptionBudget", "Service", "Deployment"} {
		if !slices.Contains(kinds, k) {
			t.Errorf("no %s among %v", k, kinds)
		}
	}
	// Every kind but the CRDs is among those pruning looks for: an object
	// of another would outlive the addon.
	for _, k := range kinds {
		if k != "CustomResourceDefinition" && !slices.ContainsFunc(addonKinds, func(gvk schema.GroupVersionKind) bool { return gvk.Kind == k }) {
			t.Errorf("the addon has a %s, a kind pruning does not look for", k)
		}
	}

	for name, opts := range map[string]Options{
		"a bundle without the image":        {Bundles: map[string]string{"a": relationsBundle(t, "transit.local/busybox:1")}},
		"two bundles, two images":           {Bundles: map[string]string{"a": relationsBundle(t, ref), "b": relationsBundle(t, bundle.RelationsRepository+":fedcba")}},
		"no bundle (packages install mode)": {},
		"a packages district with nodes and no bundle": {Bundles: map[string]string{"a": relationsBundle(t, ref)},
			Install: map[string]string{"a": districts.InstallBundle, "p": districts.InstallPackages}},
	} {
		cl := cl
		cl.Deployments = []districts.Deployment{{District: "a", Quantity: 1}, {District: "p", Quantity: 1}}
		_, err := newDriver(cl, opts, nil).renderAddon(districts.Addon{Name: "relations"})
		if err == nil || !strings.Contains(err.Error(), "addon relations: ") {
			t.Errorf("%s: %v", name, err)
			continue
		}
		t.Logf("%s: %v", name, err)
	}
}
