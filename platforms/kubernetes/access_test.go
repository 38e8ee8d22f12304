package kubernetes

import (
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/cloudtransit/transit/districts"
)

func master(id string, phase districts.Phase, public, private string) districts.Node {
	return districts.Node{ID: id, Role: districts.RoleMaster, Phase: phase, PublicIP: public, PrivateIP: private}
}

func TestOperatorAPIServer(t *testing.T) {
	t.Parallel()
	const managed = "api.k.transit.internal"
	worker := districts.Node{ID: "k-worker-1", Role: districts.RoleWorker, Phase: districts.PhaseJoined, PublicIP: "203.0.113.1"}
	for _, tc := range []struct {
		name     string
		endpoint string
		nodes    []districts.Node
		want     APIServer
		wantErr  string
	}{
		{
			name: "managed: lowest joined master by number, its public address",
			nodes: []districts.Node{
				worker,
				master("k-master-10", districts.PhaseJoined, "203.0.113.10", "10.0.0.10"),
				master("k-master-1", districts.PhaseNotReady, "203.0.113.1", "10.0.0.1"),
				master("k-master-2", districts.PhaseJoined, "203.0.113.2", "10.0.0.2"),
			},
			want: APIServer{URL: "https://203.0.113.2:6443", TLSServerName: managed, Master: "k-master-2"},
		},
		{
			name:  "managed: private address when there is no public one",
			nodes: []districts.Node{master("k-master-3", districts.PhaseJoined, "", "10.240.1.2")},
			want:  APIServer{URL: "https://10.240.1.2:6443", TLSServerName: managed, Master: "k-master-3"},
		},
		{
			name:  "managed: IPv6",
			nodes: []districts.Node{master("k-master-1", districts.PhaseJoined, "", "fd00::2")},
			want:  APIServer{URL: "https://[fd00::2]:6443", TLSServerName: managed, Master: "k-master-1"},
		},
		{
			name:     "endpoint of cluster.json without a port",
			endpoint: "k8s.example.com",
			nodes:    []districts.Node{master("k-master-1", districts.PhaseJoined, "203.0.113.1", "")},
			want:     APIServer{URL: "https://k8s.example.com:6443"},
		},
		{
			name:     "endpoint of cluster.json with a port",
			endpoint: "10.9.8.7:8443",
			nodes:    []districts.Node{master("k-master-1", districts.PhaseJoined, "203.0.113.1", "")},
			want:     APIServer{URL: "https://10.9.8.7:8443"},
		},
		{
			name:    "no node",
			wantErr: `cluster "k" has no joined master in the state: run "transit apply" first`,
		},
		{
			name:     "no joined master, whatever the endpoint",
			endpoint: "k8s.example.com",
			nodes:    []districts.Node{worker, master("k-master-1", districts.PhaseLaunched, "203.0.113.1", ""), master("k-master-2", districts.PhaseJoined, "", "")},
			wantErr:  `cluster "k" has no joined master in the state (k-master-1 is launched, k-master-2 is joined but has no address): run "transit apply" first`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := districts.Cluster{ID: "k", Platform: "kubernetes"}
			if tc.endpoint != "" {
				c.Kubernetes = &districts.Kubernetes{ControlPlaneEndpoint: tc.endpoint}
			}
			got, err := OperatorAPIServer(c, districts.Resources{Nodes: tc.nodes})
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr || !errors.Is(err, ErrNotApplied) {
					t.Fatalf("error %v, want ErrNotApplied saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

func adminConf(t *testing.T) []byte {
	t.Helper()
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	return fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters:
- name: kubernetes
  cluster: {server: "https://api.k.transit.internal:6443", certificate-authority-data: %s}
users:
- name: kubernetes-admin
  user: {client-certificate-data: %s, client-key-data: %s}
contexts:
- name: kubernetes-admin@kubernetes
  context: {cluster: kubernetes, user: kubernetes-admin}
current-context: kubernetes-admin@kubernetes
`, b64("CA"), b64("CERT"), b64("KEY"))
}

func TestExportKubeconfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	opts := KubeconfigOptions{
		Cluster:   districts.Cluster{ID: "k", Platform: "kubernetes"},
		State:     districts.Resources{Nodes: []districts.Node{master("k-master-1", districts.PhaseJoined, "", "10.240.1.2")}},
		StateFile: filepath.Join(dir, "resources.json"),
	}
	admin := AdminConfigPath(dir, "k")

	_, _, err := ExportKubeconfig(opts)
	if !errors.Is(err, ErrNotApplied) || !strings.Contains(err.Error(), "no admin kubeconfig at "+admin) {
		t.Fatalf("without the admin file: %v", err)
	}

	if err := os.WriteFile(admin, adminConf(t), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ExportKubeconfig(opts); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("an admin file others can read: %v", err)
	}

	if err := os.Chmod(admin, 0o600); err != nil {
		t.Fatal(err)
	}
	data, srv, err := ExportKubeconfig(opts)
	if err != nil {
		t.Fatal(err)
	}
	c, err := clientcmd.Load(data)
	if err != nil {
		t.Fatal(err)
	}
	if cl := c.Clusters["k"]; cl == nil || cl.Server != "https://10.240.1.2:6443" || cl.TLSServerName != "api.k.transit.internal" ||
		c.CurrentContext != "k" || srv.Master != "k-master-1" {
		t.Errorf("exported kubeconfig:\n%s\nserver %+v", data, srv)
	}

	if err := os.WriteFile(admin, []byte("{KEY-SECRET: 1}: 2"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ExportKubeconfig(opts); err == nil || !strings.Contains(err.Error(), admin+": admin kubeconfig does not parse") || strings.Contains(err.Error(), "KEY-SECRET") {
		t.Errorf("a broken admin file: %v", err)
	}

	opts.Cluster.Platform = "swarm"
	if _, _, err := ExportKubeconfig(opts); !errors.Is(err, ErrNotKubernetes) {
		t.Errorf("a swarm cluster: %v", err)
	}
}
