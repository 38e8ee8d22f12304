package kubernetes

import (
	"errors"
	"io"
	"os/exec"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/cloudtransit/transit/districts"
)

// docs parses a multi-document YAML into objects by kind.
func docs(t *testing.T, y string) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(y), 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("not YAML: %v\n%s", err, y)
		}
		out[m["kind"].(string)] = m
	}
	return out
}

func get(m map[string]any, path ...string) any {
	var v any = m
	for _, p := range path {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[p]
	}
	return v
}

func testSettings() kubeadmSettings {
	return kubeadmSettings{
		cluster:  "demo",
		endpoint: ClusterEndpoint(districts.Cluster{ID: "demo"}),
		k8s:      districts.Kubernetes{PodCIDR: "10.244.0.0/16", ServiceCIDR: "10.96.0.0/12"},
		node:     districts.Node{ID: "demo-master-1", District: "local-a", Role: "master", PublicIP: "203.0.113.7", PrivateIP: "10.240.1.2"},
		bundle:   true,
		sans:     []string{"203.0.113.7", "10.240.1.2"},
	}
}

func TestInitConfig(t *testing.T) {
	s := testSettings()
	d := docs(t, s.initConfig())
	init, cluster, kubelet, proxy := d["InitConfiguration"], d["ClusterConfiguration"], d["KubeletConfiguration"], d["KubeProxyConfiguration"]
	if init == nil || cluster == nil || kubelet == nil || proxy == nil {
		t.Fatalf("kinds %v, want init, cluster, kubelet and proxy configurations", d)
	}
	for _, c := range []struct {
		doc  map[string]any
		path []string
		want any
	}{
		{init, []string{"localAPIEndpoint", "advertiseAddress"}, "10.240.1.2"},
		{init, []string{"nodeRegistration", "name"}, "demo-master-1"},
		{init, []string{"nodeRegistration", "kubeletExtraArgs"}, []any{map[string]any{"name": "node-ip", "value": "10.240.1.2"},
			map[string]any{"name": "node-labels", "value": labelNetworkPending + "=true"}}},
		{init, []string{"nodeRegistration", "taints"}, []any{}},
		{init, []string{"skipPhases"}, []any{"addon/coredns"}},
		{cluster, []string{"controlPlaneEndpoint"}, "api.demo.transit.internal:6443"},
		{cluster, []string{"kubernetesVersion"}, Version},
		{cluster, []string{"networking", "podSubnet"}, "10.244.0.0/16"},
		{cluster, []string{"networking", "serviceSubnet"}, "10.96.0.0/12"},
		{cluster, []string{"encryptionAlgorithm"}, "ECDSA-P256"},
		{cluster, []string{"apiServer", "certSANs"}, []any{"10.240.1.2", "127.0.0.1", "203.0.113.7", "api.demo.transit.internal", "localhost"}},
		// Sized for masters in different clouds on busy machines.
		{cluster, []string{"etcd", "local", "extraArgs"}, []any{map[string]any{"name": "heartbeat-interval", "value": "250"},
			map[string]any{"name": "election-timeout", "value": "2500"}}},
		{kubelet, []string{"cgroupDriver"}, "cgroupfs"},
		{kubelet, []string{"failSwapOn"}, false},
		{kubelet, []string{"imageGCHighThresholdPercent"}, float64(100)},
		{proxy, []string{"mode"}, "iptables"},
		{proxy, []string{"conntrack", "maxPerCore"}, float64(0)},
	} {
		if diff := cmp.Diff(c.want, get(c.doc, c.path...)); diff != "" {
			t.Errorf("%s %s (-want +got):\n%s", c.doc["kind"], strings.Join(c.path, "."), diff)
		}
	}
	s.systemd, s.bundle = true, false
	d = docs(t, s.initConfig())
	if got := get(d["KubeletConfiguration"], "cgroupDriver"); got != "systemd" {
		t.Errorf("with systemd the cgroup driver is %v", got)
	}
	if got := get(d["KubeletConfiguration"], "imageGCHighThresholdPercent"); got != nil {
		t.Errorf("a node that can pull keeps the default image GC, got %v", got)
	}
}

func TestJoinConfig(t *testing.T) {
	s := testSettings()
	sec := joinSecrets{token: "abcdef.0123456789abcdef", caHash: "sha256:00ff", certificateKey: "c0ffee"}
	w := docs(t, s.joinConfig(sec, false))["JoinConfiguration"]
	if get(w, "controlPlane") != nil {
		t.Error("a worker's join has a controlPlane section")
	}
	if get(w, "nodeRegistration", "taints") != nil {
		t.Error("a worker's join sets taints")
	}
	for path, want := range map[string]any{
		"discovery.bootstrapToken.apiServerEndpoint": "api.demo.transit.internal:6443",
		"discovery.bootstrapToken.token":             "abcdef.0123456789abcdef",
		"discovery.bootstrapToken.caCertHashes":      []any{"sha256:00ff"},
	} {
		if diff := cmp.Diff(want, get(w, strings.Split(path, ".")...)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", path, diff)
		}
	}
	m := docs(t, s.joinConfig(sec, true))["JoinConfiguration"]
	if get(m, "controlPlane", "certificateKey") != "c0ffee" || get(m, "controlPlane", "localAPIEndpoint", "advertiseAddress") != "10.240.1.2" {
		t.Errorf("a master's join: %v", get(m, "controlPlane"))
	}
}

// A user's endpoint is kept as given; the managed one names the cluster.
func TestClusterEndpoint(t *testing.T) {
	for _, c := range []struct {
		set  string
		want Endpoint
	}{
		{"", Endpoint{Host: "api.demo.transit.internal", Port: 6443, Managed: true}},
		{"k8s.example.com", Endpoint{Host: "k8s.example.com", Port: 6443}},
		{"k8s.example.com:8443", Endpoint{Host: "k8s.example.com", Port: 8443}},
		{"192.0.2.10", Endpoint{Host: "192.0.2.10", Port: 6443}},
	} {
		cl := districts.Cluster{ID: "demo"}
		if c.set != "" {
			cl.Kubernetes = &districts.Kubernetes{ControlPlaneEndpoint: c.set}
		}
		if got := ClusterEndpoint(cl); got != c.want {
			t.Errorf("%q: %+v, want %+v", c.set, got, c.want)
		}
	}
}

// flannel's backend is cluster.json's pod_network; wireguard checks each
// node's kernel before anything is installed, and says why it cannot be.
func TestPodNetwork(t *testing.T) {
	for _, pn := range []string{"", districts.PodNetworkWireGuard} {
		d := newDriver(districts.Cluster{ID: "k", Kubernetes: &districts.Kubernetes{PodNetwork: pn}}, Options{}, nil)
		objs, err := d.renderAddon(districts.Addon{Name: "flannel"})
		if err != nil {
			t.Fatal(err)
		}
		want := pn
		if want == "" {
			want = districts.PodNetworkVXLAN
		}
		found := false
		for _, o := range objs {
			if o.GetKind() == "ConfigMap" {
				conf, _, _ := unstructured.NestedString(o.Object, "data", "net-conf.json")
				found = strings.Contains(conf, `"Type": "`+want+`"`)
			}
		}
		if !found {
			t.Errorf("pod_network %q: flannel's net-conf.json does not use backend %s", pn, want)
		}
	}
	// This kernel has no WireGuard (the sandbox's): the check must say so.
	out, err := exec.Command("sh", "-c", wireguardScript).CombinedOutput()
	if err == nil {
		t.Log("this kernel has WireGuard; the refusal is not exercised here")
	} else if !strings.Contains(string(out), "use pod_network vxlan") {
		t.Errorf("the check's refusal does not say what to do:\n%s", out)
	}
}

// kubeadm's preflight checks all run; by name, only HTTPProxyCIDR is
// ignored, on masters running the bundle's kubeadm (whose Go cannot parse
// the URL the check builds), whatever the district's provider. Never
// "all".
func TestPreflightIgnored(t *testing.T) {
	sec := joinSecrets{token: "abcdef.0123456789abcdef", caHash: "sha256:00ff", certificateKey: "c0ffee"}
	for _, tc := range []struct {
		name   string
		bundle bool // the district's install mode is bundle
		config func(s kubeadmSettings) string
		want   any
	}{
		{"local district: first master", true, kubeadmSettings.initConfig, []any{"HTTPProxyCIDR"}},
		{"local district: further master", true, func(s kubeadmSettings) string { return s.joinConfig(sec, true) }, []any{"HTTPProxyCIDR"}},
		{"local district: worker", true, func(s kubeadmSettings) string { return s.joinConfig(sec, false) }, nil},
		{"aws district (packages): first master", false, kubeadmSettings.initConfig, nil},
		{"gce district (packages): further master", false, func(s kubeadmSettings) string { return s.joinConfig(sec, true) }, nil},
		{"openstack district (packages): worker", false, func(s kubeadmSettings) string { return s.joinConfig(sec, false) }, nil},
		{"emulated cloud district (bundle): first master", true, kubeadmSettings.initConfig, []any{"HTTPProxyCIDR"}},
		{"emulated cloud district (bundle): worker", true, func(s kubeadmSettings) string { return s.joinConfig(sec, false) }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := testSettings()
			s.bundle = tc.bundle
			y := tc.config(s)
			d := docs(t, y)
			reg := d["InitConfiguration"]
			if reg == nil {
				reg = d["JoinConfiguration"]
			}
			if diff := cmp.Diff(tc.want, get(reg, "nodeRegistration", "ignorePreflightErrors")); diff != "" {
				t.Errorf("ignorePreflightErrors (-want +got):\n%s", diff)
			}
			if strings.Contains(strings.ToLower(y), `"all"`) || strings.Contains(strings.ToLower(y), "- all\n") {
				t.Errorf("a check is ignored as all:\n%s", y)
			}
		})
	}
}
