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
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"

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

// streamsRefs are a bundle's images of the streams addon.
var streamsRefs = []string{
	bundle.StreamsControllerRepository + ":c0c0c0c0c0c0c0c0",
	bundle.StreamsSidecarRepository + ":5151515151515151",
	bundle.StreamsBrokerRepository + ":b0b0b0b0b0b0b0b0",
	bundle.StreamsEchoRepository + ":e0e0e0e0e0e0e0e0",
	bundle.BusyboxImage,
}

// objectsByKind indexes rendered objects as Kind/namespace/name.
func objectsByKind(objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	out := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		out[o.GetKind()+"/"+o.GetNamespace()+"/"+o.GetName()] = o
	}
	return out
}

// firstContainer is a workload's first container, or of its init
// containers with init.
func firstContainer(t *testing.T, o *unstructured.Unstructured, init bool) map[string]any {
	t.Helper()
	field := "containers"
	if init {
		field = "initContainers"
	}
	cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", field)
	if len(cs) == 0 {
		t.Fatalf("%s %s has no %s", o.GetKind(), o.GetName(), field)
	}
	return cs[0].(map[string]any)
}

// TestRenderStreams: the streams addon runs the bundle's controller with
// the bundle's sidecar image and cluster.json's settings; without a Kafka
// of the user's it runs the development broker (a Service and a
// Recreate Deployment pinned to a master, its data a hostPath the broker,
// user 65532, is given by a root init container) and the controller uses
// its advertised address; with one (bootstrap) neither broker object is
// there and the controller uses it. Its CRDs come first, its admission
// policy last; every kind but the CRDs is one pruning finds.
func TestRenderStreams(t *testing.T) {
	t.Parallel()
	const broker = "streams-broker.transit-streams.svc.cluster.local:9092"
	cl := districts.Cluster{ID: "k", Kubernetes: &districts.Kubernetes{}}
	d := newDriver(cl, Options{Bundles: map[string]string{"a": testBundle(t, streamsRefs...)}}, nil)

	for _, tc := range []struct {
		name     string
		settings map[string]string
		args     []string
		broker   bool
		replicas string
	}{
		{"defaults: the development broker", nil,
			[]string{"--bootstrap=" + broker, "--sidecar-image=" + streamsRefs[1], "--history=10", "--upgrade-timeout=5m", "--leader-election-namespace=transit-streams"},
			true, "2"},
		{"settings and a Kafka of the user's", map[string]string{"bootstrap": "kafka-0.kafka:9092,kafka-1.kafka:9092", "replicas": "3", "history": "4", "upgrade_timeout": "90s"},
			[]string{"--bootstrap=kafka-0.kafka:9092,kafka-1.kafka:9092", "--sidecar-image=" + streamsRefs[1], "--history=4", "--upgrade-timeout=90s", "--leader-election-namespace=transit-streams"},
			false, "3"},
		{"a Kafka behind TLS and SASL", map[string]string{"bootstrap": "kafka:9093", "kafka_secret": "kafka-client"},
			[]string{"--bootstrap=kafka:9093", "--kafka-security-dir=/etc/transit/kafka", "--kafka-secret=kafka-client"},
			false, "2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := d.renderAddon(districts.Addon{Name: "streams", Settings: tc.settings})
			if err != nil {
				t.Fatal(err)
			}
			var kinds []string
			for i, o := range objs {
				kinds = append(kinds, o.GetKind())
				if o.GetLabels()[labelAddon] != "streams" || o.GetLabels()[labelManagedBy] != "transit" {
					t.Errorf("%s %s is not labelled as the streams addon's", o.GetKind(), o.GetName())
				}
				if k := o.GetKind(); k != "CustomResourceDefinition" && !slices.ContainsFunc(addonKinds, func(gvk schema.GroupVersionKind) bool { return gvk.Kind == k }) {
					t.Errorf("the addon has a %s, a kind pruning does not look for", k)
				}
				if (i < 4) != (o.GetKind() == "CustomResourceDefinition") {
					t.Errorf("object %d is a %s: the 4 CRDs come first (%v)", i, o.GetKind(), kinds)
				}
			}
			if last := kinds[len(kinds)-2:]; !slices.Equal(last, []string{"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}) {
				t.Errorf("the addon ends with %v, want its admission policy", last)
			}
			by := objectsByKind(objs)
			for _, key := range []string{"Namespace//transit-streams", "ServiceAccount/transit-streams/transit-streams",
				"ClusterRole//transit-streams", "ClusterRoleBinding//transit-streams", "Role/transit-streams/transit-streams",
				"RoleBinding/transit-streams/transit-streams", "PodDisruptionBudget/transit-streams/transit-streams",
				"CustomResourceDefinition//topologies.streams.transit.io", "ValidatingAdmissionPolicy//transit-streams-revisions"} {
				if by[key] == nil {
					t.Errorf("no %s", key)
				}
			}

			ctl := by["Deployment/transit-streams/transit-streams"]
			if ctl == nil {
				t.Fatal("no controller Deployment")
			}
			if n, _, _ := unstructured.NestedFieldNoCopy(ctl.Object, "spec", "replicas"); fmt.Sprint(n) != tc.replicas {
				t.Errorf("controller replicas %v, want %s", n, tc.replicas)
			}
			c := firstContainer(t, ctl, false)
			if c["image"] != streamsRefs[0] || c["imagePullPolicy"] != "Never" {
				t.Errorf("controller image %v (%v), want %s never pulled", c["image"], c["imagePullPolicy"], streamsRefs[0])
			}
			args, _, _ := unstructured.NestedStringSlice(c, "args")
			for _, want := range tc.args {
				if !slices.Contains(args, want) {
					t.Errorf("controller args %q lack %s", args, want)
				}
			}
			for probe, path := range map[string]string{"readinessProbe": "/readyz", "livenessProbe": "/healthz"} {
				if got, _, _ := unstructured.NestedString(c, probe, "httpGet", "path"); got != path {
					t.Errorf("%s path %q, want %s", probe, got, path)
				}
			}
			if ro, _, _ := unstructured.NestedBool(c, "securityContext", "readOnlyRootFilesystem"); !ro {
				t.Error("the controller's root file system is writable")
			}
			// The Kafka Secret is mounted where the controller reads it,
			// only when named.
			mounts, _, _ := unstructured.NestedSlice(c, "volumeMounts")
			vols, _, _ := unstructured.NestedSlice(ctl.Object, "spec", "template", "spec", "volumes")
			secretMounted := slices.ContainsFunc(mounts, func(m any) bool { return m.(map[string]any)["mountPath"] == "/etc/transit/kafka" })
			secretVolume := slices.ContainsFunc(vols, func(v any) bool {
				name, _, _ := unstructured.NestedString(v.(map[string]any), "secret", "secretName")
				return name != "" && name == tc.settings["kafka_secret"]
			})
			if want := tc.settings["kafka_secret"] != ""; secretMounted != want || secretVolume != want {
				t.Errorf("Kafka Secret mounted %v, volume of it %v; want %v", secretMounted, secretVolume, want)
			}

			svc, dep := by["Service/transit-streams/streams-broker"], by["Deployment/transit-streams/streams-broker"]
			if !tc.broker {
				if svc != nil || dep != nil {
					t.Errorf("with a Kafka of the user's, the broker is installed too: %v %v", svc != nil, dep != nil)
				}
				return
			}
			if svc == nil || dep == nil {
				t.Fatalf("no development broker: Service %v, Deployment %v", svc != nil, dep != nil)
			}
			if p, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports"); len(p) != 1 || fmt.Sprint(p[0].(map[string]any)["port"]) != "9092" {
				t.Errorf("broker Service ports %v, want 9092", p)
			}
			if s, _, _ := unstructured.NestedString(dep.Object, "spec", "strategy", "type"); s != "Recreate" {
				t.Errorf("broker strategy %q, want Recreate", s)
			}
			if n, _, _ := unstructured.NestedFieldNoCopy(dep.Object, "spec", "replicas"); fmt.Sprint(n) != "1" {
				t.Errorf("broker replicas %v, want 1", n)
			}
			if sel, _, _ := unstructured.NestedStringMap(dep.Object, "spec", "template", "spec", "nodeSelector"); sel["node-role.kubernetes.io/control-plane"] != "" || len(sel) != 1 {
				t.Errorf("broker nodeSelector %v, want the control plane", sel)
			}
			b := firstContainer(t, dep, false)
			bargs, _, _ := unstructured.NestedStringSlice(b, "args")
			if b["image"] != streamsRefs[2] || !slices.Equal(bargs, []string{"--listen=:9092", "--advertise=" + broker, "--data-dir=/data"}) {
				t.Errorf("broker %v %q", b["image"], bargs)
			}
			vols, _, _ = unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "volumes")
			if hp, _, _ := unstructured.NestedStringMap(vols[0].(map[string]any), "hostPath"); hp["path"] != "/var/lib/transit/streams-broker" || hp["type"] != "DirectoryOrCreate" {
				t.Errorf("broker data %v, want the default hostPath, created if missing", hp)
			}
			if uid, _, _ := unstructured.NestedFieldNoCopy(dep.Object, "spec", "template", "spec", "securityContext", "runAsUser"); fmt.Sprint(uid) != "65532" {
				t.Errorf("broker runs as %v, want 65532", uid)
			}
			init := firstContainer(t, dep, true)
			cmd, _, _ := unstructured.NestedStringSlice(init, "command")
			if init["image"] != bundle.BusyboxImage || !slices.Equal(cmd, []string{"chown", "65532:65532", "/data"}) {
				t.Errorf("broker init container %v %q, want busybox giving /data to 65532", init["image"], cmd)
			}
		})
	}

	// broker_data_dir is the hostPath, written as given.
	objs, err := d.renderAddon(districts.Addon{Name: "streams", Settings: map[string]string{"broker_data_dir": "/srv/kafka data"}})
	if err != nil {
		t.Fatal(err)
	}
	vols, _, _ := unstructured.NestedSlice(objectsByKind(objs)["Deployment/transit-streams/streams-broker"].Object, "spec", "template", "spec", "volumes")
	if p, _, _ := unstructured.NestedString(vols[0].(map[string]any), "hostPath", "path"); p != "/srv/kafka data" {
		t.Errorf("hostPath %q, want /srv/kafka data", p)
	}

	// Without the images in the bundle, the addon says what to do.
	for name, refs := range map[string][]string{
		"no controller": streamsRefs[1:],
		"no sidecar":    {streamsRefs[0], streamsRefs[2], bundle.BusyboxImage},
		"no broker":     {streamsRefs[0], streamsRefs[1], bundle.BusyboxImage},
	} {
		_, err := newDriver(cl, Options{Bundles: map[string]string{"a": testBundle(t, refs...)}}, nil).renderAddon(districts.Addon{Name: "streams"})
		if err == nil || !strings.Contains(err.Error(), "addon streams: ") || !strings.Contains(err.Error(), "make bundle") {
			t.Errorf("%s: %v", name, err)
		}
	}
	// A Kafka of the user's needs no broker image.
	if _, err := newDriver(cl, Options{Bundles: map[string]string{"a": testBundle(t, streamsRefs[0], streamsRefs[1])}}, nil).
		renderAddon(districts.Addon{Name: "streams", Settings: map[string]string{"bootstrap": "kafka:9092"}}); err != nil {
		t.Errorf("with bootstrap and no broker image: %v", err)
	}
}

// waitEstablished waits until each CRD is served, and says which is not
// once its time is up.
func TestWaitEstablished(t *testing.T) {
	crd := func(name, established string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
			"metadata": map[string]any{"name": name},
		}}
		if established != "" {
			_ = unstructured.SetNestedSlice(u.Object, []any{map[string]any{"type": "Established", "status": established}}, "status", "conditions")
		}
		return u
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{crdGVR: "CustomResourceDefinitionList"},
		crd("a.example.com", "True"), crd("b.example.com", "False"))
	old := crdEstablishTimeout
	crdEstablishTimeout = 500 * time.Millisecond
	defer func() { crdEstablishTimeout = old }()
	if err := waitEstablished(t.Context(), dyn, []string{"a.example.com"}); err != nil {
		t.Errorf("an Established CRD: %v", err)
	}
	err := waitEstablished(t.Context(), dyn, []string{"a.example.com", "b.example.com"})
	if err == nil || !strings.Contains(err.Error(), "CustomResourceDefinition b.example.com is not served after 500ms: not yet Established") {
		t.Errorf("a CRD not Established: %v", err)
	}
	err = waitEstablished(t.Context(), dyn, []string{"c.example.com"})
	if err == nil || !strings.Contains(err.Error(), "c.example.com") || !strings.Contains(err.Error(), "not found") {
		t.Errorf("a CRD missing: %v", err)
	}
}
