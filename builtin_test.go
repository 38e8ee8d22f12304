package transit

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cloudtransit/transit/bundle"
	"github.com/cloudtransit/transit/districts"
)

// TestKubernetesInstall: a bundle district needs a bundle (its own, else
// the default); a packages district takes one if it names one or a
// default is set (for transit's own images), and needs none.
func TestKubernetesInstall(t *testing.T) {
	dir := t.TempDir()
	bundleDir := filepath.Join(dir, "bundle")
	if err := os.MkdirAll(bundleDir, 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(bundle.Manifest{Kubernetes: "v1.32.4"})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bundleDir, bundle.ManifestFile), data, 0o644); err != nil {
		t.Fatal(err)
	}
	env := PlatformEnv{DistrictsFile: filepath.Join(dir, "districts.json"), Changes: true, Districts: []districts.District{
		{ID: "local", Provider: districts.ProviderLocal},
		{ID: "aws-own", Provider: "aws", KubernetesBundle: "bundle"},
		{ID: "aws-plain", Provider: "aws"},
	}}
	_, _, err = kubernetesInstall(env, "")
	if err == nil || !strings.Contains(err.Error(), "district local installs Kubernetes from a bundle: set kubernetes_bundle") {
		t.Fatalf("a bundle district without a bundle: %v", err)
	}
	install, bundles, err := kubernetesInstall(env, bundleDir)
	if err != nil {
		t.Fatal(err)
	}
	if install["aws-own"] != districts.InstallPackages || bundles["aws-own"] != bundleDir || bundles["aws-plain"] != bundleDir || bundles["local"] != bundleDir {
		t.Errorf("with a default bundle: install %v, bundles %v", install, bundles)
	}
	env.Districts = env.Districts[1:]
	if _, bundles, err = kubernetesInstall(env, ""); err != nil || bundles["aws-own"] != bundleDir || bundles["aws-plain"] != "" {
		t.Errorf("packages districts only: bundles %v, %v", bundles, err)
	}
	env.Districts[0].KubernetesBundle = "missing"
	if _, _, err = kubernetesInstall(env, ""); err == nil || !strings.Contains(err.Error(), "district aws-own") {
		t.Errorf("a packages district naming a missing bundle: %v", err)
	}
}

// TestSwarmMeshBinary: TRANSIT_MESH_BINARY wins, found or not (the
// driver's error then names it); else the first transit-mesh there of a
// bundle's (the default, then the districts'); none found is "".
func TestSwarmMeshBinary(t *testing.T) {
	dir := t.TempDir()
	own := filepath.Join(dir, "own", "bin", "transit-mesh")
	if err := os.MkdirAll(filepath.Dir(own), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(own, []byte("elf"), 0o755); err != nil {
		t.Fatal(err)
	}
	env := PlatformEnv{DistrictsFile: filepath.Join(dir, "districts.json"), Districts: []districts.District{
		{ID: "a", Provider: "aws"},
		{ID: "b", Provider: "aws", KubernetesBundle: "own"},
	}}
	for _, tc := range []struct {
		name string
		o    BuiltinOptions
		want string
	}{
		{"set", BuiltinOptions{MeshBinary: "/x/transit-mesh", Bundle: filepath.Join(dir, "own")}, "/x/transit-mesh"},
		{"a district's bundle", BuiltinOptions{Bundle: filepath.Join(dir, "empty")}, own},
	} {
		if got := tc.o.swarmMeshBinary(env); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	env.Districts = env.Districts[:1]
	if got := (BuiltinOptions{}).swarmMeshBinary(env); got != "" {
		exe, _ := os.Executable()
		if got != filepath.Join(filepath.Dir(exe), "transit-mesh") {
			t.Errorf("with none anywhere: %q", got)
		}
	}
}
