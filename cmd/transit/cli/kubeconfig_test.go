package cli

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/clientcmd/api"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/platforms/kubernetes"
)

// The kubeconfig tests' cluster: Kubernetes in the paper's districts.
const k8sID = "k8s-europe"

// adminSecret is in the admin kubeconfig's client key: it must never
// appear in an error.
const adminSecret = "ADMIN-KEY-5e3a"

// kubernetesCluster rewrites cluster.json as a Kubernetes cluster with
// control_plane_endpoint endpoint ("" for the managed one).
func (h *harness) kubernetesCluster(t *testing.T, endpoint string) {
	t.Helper()
	c := districts.Cluster{
		Type:     "cluster",
		ID:       k8sID,
		Platform: "kubernetes",
		Flavors:  []districts.Flavor{{Flavor: "small", Cores: 1, MemoryGB: 3.75, DiskGB: 20}},
		Deployments: []districts.Deployment{
			{District: "gce-europe", Flavor: "small", Role: districts.RoleMaster, Quantity: 3},
			{District: "aws-europe", Flavor: "small", Role: districts.RoleWorker, Quantity: 1},
		},
	}
	if endpoint != "" {
		c.Kubernetes = &districts.Kubernetes{ControlPlaneEndpoint: endpoint}
	}
	writeJSONFile(t, h.path("cluster.json"), c)
}

// k8sNode is a node of the kubeconfig tests' cluster in resources.json.
func k8sNode(role string, n int, phase districts.Phase, public, private string) districts.Node {
	at := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	district := "gce-europe"
	if role == districts.RoleWorker {
		district = "aws-europe"
	}
	return districts.Node{
		Type: "node", ID: fmt.Sprintf("%s-%s-%d", k8sID, role, n), Cluster: k8sID, District: district,
		Role: role, Flavor: "small", ProviderID: fmt.Sprintf("i-%s%d", role, n),
		PublicIP: public, PrivateIP: private, Phase: phase, CreatedAt: at, UpdatedAt: at,
	}
}

// writeState writes resources.json with nodes.
func (h *harness) writeState(t *testing.T, nodes ...districts.Node) {
	t.Helper()
	writeJSONFile(t, h.path("resources.json"), districts.Resources{
		Type: "resources", Version: districts.ResourcesVersion, Cluster: k8sID, Lineage: "lin-1", Serial: 7, Nodes: nodes,
	})
}

// writeAdmin writes the admin kubeconfig the driver keeps beside the
// state, as kubeadm's admin.conf.
func (h *harness) writeAdmin(t *testing.T) {
	t.Helper()
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	admin := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: kubernetes
  cluster:
    certificate-authority-data: %s
    server: https://api.%s.transit.internal:6443
users:
- name: kubernetes-admin
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: kubernetes-admin@kubernetes
  context: {cluster: kubernetes, user: kubernetes-admin}
current-context: kubernetes-admin@kubernetes
`, b64("CA"), k8sID, b64("CERT"), b64(adminSecret))
	if err := os.WriteFile(kubernetes.AdminConfigPath(h.dir, k8sID), []byte(admin), 0o600); err != nil {
		t.Fatal(err)
	}
}

// loadKubeconfig parses a kubeconfig the way kubectl does.
func loadKubeconfig(t *testing.T, data []byte) *api.Config {
	t.Helper()
	c, err := clientcmd.Load(data)
	if err != nil {
		t.Fatalf("not a kubeconfig: %v\n%s", err, data)
	}
	return c
}

// k8sHarness is a Kubernetes cluster transit applied: three masters (the
// first not ready, the others joined), a worker, the admin kubeconfig.
func k8sHarness(t *testing.T, endpoint string) *harness {
	t.Helper()
	h := newHarness(t)
	h.kubernetesCluster(t, endpoint)
	h.writeState(t,
		k8sNode(districts.RoleMaster, 1, districts.PhaseNotReady, "198.51.100.1", "10.1.0.1"),
		k8sNode(districts.RoleMaster, 10, districts.PhaseJoined, "198.51.100.10", "10.1.0.10"),
		k8sNode(districts.RoleMaster, 2, districts.PhaseJoined, "", "10.1.0.2"),
		k8sNode(districts.RoleWorker, 1, districts.PhaseJoined, "198.51.100.50", "10.2.0.1"),
	)
	h.writeAdmin(t)
	return h
}

func TestKubeconfigStdout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, endpoint  string
		server, tlsName string
	}{
		{"managed endpoint: a joined master's address, the name checked", "", "https://10.1.0.2:6443", "api." + k8sID + ".transit.internal"},
		{"endpoint of cluster.json", "k8s.example.com", "https://k8s.example.com:6443", ""},
		{"endpoint of cluster.json with its port", "lb.example.com:443", "https://lb.example.com:443", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := k8sHarness(t, tc.endpoint)
			stateBefore, err := os.ReadFile(h.path("resources.json"))
			if err != nil {
				t.Fatal(err)
			}
			h.holdLock(t) // an apply --watch runs: kubeconfig takes no lock
			r := h.run(t, runOpts{}, "kubeconfig")
			wantCode(t, r, 0)
			if r.err != "" {
				t.Errorf("stderr: %s", r.err)
			}
			c := loadKubeconfig(t, []byte(r.out))
			cl, user, ctx := c.Clusters[k8sID], c.AuthInfos[k8sID+"-admin"], c.Contexts[k8sID]
			if len(c.Clusters) != 1 || len(c.AuthInfos) != 1 || len(c.Contexts) != 1 || cl == nil || user == nil || ctx == nil || c.CurrentContext != k8sID {
				t.Fatalf("want one cluster, user and context named after the cluster, current:\n%s", r.out)
			}
			if cl.Server != tc.server || cl.TLSServerName != tc.tlsName {
				t.Errorf("server %q, tls-server-name %q; want %q, %q", cl.Server, cl.TLSServerName, tc.server, tc.tlsName)
			}
			if string(cl.CertificateAuthorityData) != "CA" || string(user.ClientKeyData) != adminSecret || ctx.Cluster != k8sID || ctx.AuthInfo != k8sID+"-admin" {
				t.Errorf("credentials or context wrong:\n%s", r.out)
			}
			// Like status --refresh=false: no driver, nothing written.
			if h.cloud.built.Load() != 0 || h.platform.built.Load() != 0 {
				t.Error("kubeconfig constructed drivers")
			}
			if after, err := os.ReadFile(h.path("resources.json")); err != nil || string(after) != string(stateBefore) {
				t.Errorf("resources.json changed: %v", err)
			}
		})
	}
}

// --merge writes the first file of $KUBECONFIG, else ~/.kube/config.
func TestKubeconfigMerge(t *testing.T) {
	h := k8sHarness(t, "")
	home := t.TempDir()
	t.Setenv("HOME", home)

	t.Run("HOME", func(t *testing.T) {
		t.Setenv("KUBECONFIG", "")
		r := h.run(t, runOpts{}, "kubeconfig", "--merge")
		wantCode(t, r, 0)
		path := filepath.Join(home, ".kube", "config")
		want := fmt.Sprintf("Wrote context %q to %s and made it current (server https://10.1.0.2:6443, master %s-master-2).\n", k8sID, path, k8sID)
		if r.out != want {
			t.Errorf("stdout = %q, want %q", r.out, want)
		}
		if strings.Contains(r.out+r.err, adminSecret) || strings.Contains(r.out, base64.StdEncoding.EncodeToString([]byte(adminSecret))) {
			t.Error("--merge printed the credentials")
		}
		for p, want := range map[string]fs.FileMode{path: 0o600, filepath.Dir(path): 0o700} {
			if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != want {
				t.Errorf("%s: %v, %v; want mode %04o", p, fi.Mode(), err, want)
			}
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if c := loadKubeconfig(t, data); c.CurrentContext != k8sID || c.Clusters[k8sID].Server != "https://10.1.0.2:6443" {
			t.Errorf("merged file:\n%s", data)
		}
	})

	t.Run("KUBECONFIG", func(t *testing.T) {
		dir := t.TempDir()
		first, second := filepath.Join(dir, "first"), filepath.Join(dir, "second")
		other := api.NewConfig()
		other.Clusters["kind-kind"] = &api.Cluster{Server: "https://127.0.0.1:40000"}
		other.AuthInfos["kind-kind"] = &api.AuthInfo{Token: "kind-token"}
		other.Contexts["kind-kind"] = &api.Context{Cluster: "kind-kind", AuthInfo: "kind-kind", Namespace: "apps"}
		other.CurrentContext = "kind-kind"
		data, err := clientcmd.Write(*other)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(first, data, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Setenv("KUBECONFIG", first+string(filepath.ListSeparator)+second)

		for range 2 { // a second merge changes nothing more
			r := h.run(t, runOpts{}, "kubeconfig", "--merge")
			wantCode(t, r, 0)
			if !strings.Contains(r.out, "to "+first+" ") {
				t.Errorf("stdout does not name %s: %q", first, r.out)
			}
		}
		data, err = os.ReadFile(first)
		if err != nil {
			t.Fatal(err)
		}
		c := loadKubeconfig(t, data)
		if c.CurrentContext != k8sID || c.Contexts[k8sID] == nil || len(c.Contexts) != 2 {
			t.Errorf("merged file:\n%s", data)
		}
		if k := c.Contexts["kind-kind"]; k == nil || k.Namespace != "apps" || c.AuthInfos["kind-kind"].Token != "kind-token" {
			t.Errorf("the other context did not survive:\n%s", data)
		}
		if fi, err := os.Stat(first); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, %v; want mode 0600", first, fi.Mode(), err)
		}
		if _, err := os.Stat(second); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the second file of $KUBECONFIG was written: %v", err)
		}
	})

	t.Run("broken file left alone", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "config")
		const broken = "{ohno: 1}: 2\n"
		if err := os.WriteFile(path, []byte(broken), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Setenv("KUBECONFIG", path)
		r := h.run(t, runOpts{}, "kubeconfig", "--merge")
		wantCode(t, r, ExitError)
		if !strings.Contains(r.err, path) || !strings.Contains(r.err, "does not parse") || strings.Contains(r.err, "ohno") {
			t.Errorf("stderr: %s", r.err)
		}
		if data, err := os.ReadFile(path); err != nil || string(data) != broken {
			t.Errorf("broken file changed: %q, %v", data, err)
		}
	})
}

func TestKubeconfigErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		setup func(*testing.T, *harness)
		kind  string
		want  []string
	}{
		{
			name:  "a swarm cluster",
			setup: func(*testing.T, *harness) {}, // the paper's cluster
			kind:  kindUsage,
			want:  []string{`cluster "swarm-europe" has platform "swarm": only a Kubernetes cluster has a kubeconfig`},
		},
		{
			name: "never applied",
			setup: func(t *testing.T, h *harness) {
				h.kubernetesCluster(t, "")
			},
			kind: kindError,
			want: []string{fmt.Sprintf(`cluster %q has no joined master in the state: run "transit apply" first`, k8sID)},
		},
		{
			name: "no master joined",
			setup: func(t *testing.T, h *harness) {
				h.kubernetesCluster(t, "k8s.example.com")
				h.writeState(t,
					k8sNode(districts.RoleMaster, 1, districts.PhaseLaunched, "198.51.100.1", ""),
					k8sNode(districts.RoleWorker, 1, districts.PhaseJoined, "198.51.100.2", ""))
				h.writeAdmin(t)
			},
			kind: kindError,
			want: []string{k8sID + `-master-1 is launched`, `run "transit apply" first`},
		},
		{
			name: "no admin kubeconfig",
			setup: func(t *testing.T, h *harness) {
				h.kubernetesCluster(t, "")
				h.writeState(t, k8sNode(districts.RoleMaster, 1, districts.PhaseJoined, "198.51.100.1", ""))
			},
			kind: kindError,
			want: []string{"no admin kubeconfig at " + "DIR/transit-" + k8sID + ".kubeconfig", `run "transit apply" first`},
		},
		{
			name: "admin kubeconfig others can read",
			setup: func(t *testing.T, h *harness) {
				h.kubernetesCluster(t, "")
				h.writeState(t, k8sNode(districts.RoleMaster, 1, districts.PhaseJoined, "198.51.100.1", ""))
				h.writeAdmin(t)
				if err := os.Chmod(kubernetes.AdminConfigPath(h.dir, k8sID), 0o640); err != nil {
					t.Fatal(err)
				}
			},
			kind: kindError,
			want: []string{"mode 0640", "chmod 600"},
		},
		{
			name: "admin kubeconfig broken",
			setup: func(t *testing.T, h *harness) {
				h.kubernetesCluster(t, "")
				h.writeState(t, k8sNode(districts.RoleMaster, 1, districts.PhaseJoined, "198.51.100.1", ""))
				if err := os.WriteFile(kubernetes.AdminConfigPath(h.dir, k8sID), []byte("{"+adminSecret+": 1}: 2\n"), 0o600); err != nil {
					t.Fatal(err)
				}
			},
			kind: kindError,
			want: []string{"admin kubeconfig does not parse as a kubeconfig"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			tc.setup(t, h)
			r := h.run(t, runOpts{}, "kubeconfig")
			wantCode(t, r, ExitError)
			if got := errorKind(r.error); got != tc.kind {
				t.Errorf("error kind %q, want %q", got, tc.kind)
			}
			for _, w := range tc.want {
				if w = strings.ReplaceAll(w, "DIR", h.dir); !strings.Contains(r.err, w) {
					t.Errorf("stderr lacks %q:\n%s", w, r.err)
				}
			}
			if r.out != "" {
				t.Errorf("stdout = %q, want nothing", r.out)
			}
			if strings.Contains(r.err, adminSecret) {
				t.Errorf("the admin kubeconfig's content is in the error:\n%s", r.err)
			}
		})
	}
}
