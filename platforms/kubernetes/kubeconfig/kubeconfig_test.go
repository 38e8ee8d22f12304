package kubeconfig

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/clientcmd/api"
)

// adminConf is an admin.conf as kubeadm writes it, with the given CA,
// client certificate and key.
func adminConf(ca, cert, key string) []byte {
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Appendf(nil, `apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: %s
    server: https://api.demo.transit.internal:6443
  name: kubernetes
contexts:
- context:
    cluster: kubernetes
    user: kubernetes-admin
  name: kubernetes-admin@kubernetes
current-context: kubernetes-admin@kubernetes
kind: Config
preferences: {}
users:
- name: kubernetes-admin
  user:
    client-certificate-data: %s
    client-key-data: %s
`, b64([]byte(ca)), b64([]byte(cert)), b64([]byte(key)))
}

var admin = adminConf("CA-DATA", "CERT-DATA", "KEY-DATA")

func mustLoad(t *testing.T, data []byte) *api.Config {
	t.Helper()
	c, err := clientcmd.Load(data)
	if err != nil {
		t.Fatalf("load %q: %v", data, err)
	}
	return c
}

// configDiff compares kubeconfigs in meaning: nil and empty maps alike,
// LocationOfOrigin (never written) ignored.
func configDiff(want, got *api.Config) string {
	return cmp.Diff(want, got, cmpopts.EquateEmpty(),
		cmpopts.IgnoreFields(api.Cluster{}, "LocationOfOrigin"),
		cmpopts.IgnoreFields(api.AuthInfo{}, "LocationOfOrigin"),
		cmpopts.IgnoreFields(api.Context{}, "LocationOfOrigin"))
}

// exported is what Export should make.
func exported(name, server, tlsServerName string) *api.Config {
	c := api.NewConfig()
	c.Clusters[name] = &api.Cluster{Server: server, TLSServerName: tlsServerName, CertificateAuthorityData: []byte("CA-DATA")}
	c.AuthInfos[name+"-admin"] = &api.AuthInfo{ClientCertificateData: []byte("CERT-DATA"), ClientKeyData: []byte("KEY-DATA")}
	c.Contexts[name] = &api.Context{Cluster: name, AuthInfo: name + "-admin"}
	c.CurrentContext = name
	return c
}

func TestExport(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, cluster, server, tls string
	}{
		{"managed endpoint: a master's address, checked against the name", "demo", "https://10.240.1.2:6443", "api.demo.transit.internal"},
		{"endpoint of cluster.json", "prod", "https://k8s.example.com:8443", ""},
		{"IPv6 master", "v6", "https://[fd00::2]:6443", "api.v6.transit.internal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			data, err := Export(admin, tc.cluster, tc.server, tc.tls)
			if err != nil {
				t.Fatal(err)
			}
			if d := configDiff(exported(tc.cluster, tc.server, tc.tls), mustLoad(t, data)); d != "" {
				t.Errorf("exported kubeconfig (-want +got):\n%s", d)
			}
			if tc.tls == "" && strings.Contains(string(data), "tls-server-name") {
				t.Errorf("tls-server-name written though none was given:\n%s", data)
			}
		})
	}
}

// What Export takes from the admin file is only its CA, certificate and
// key: its own settings (a tls-server-name, a namespace) do not leak in.
func TestExportTakesOnlyTheCredentials(t *testing.T) {
	t.Parallel()
	c := mustLoad(t, admin)
	c.Clusters["kubernetes"].TLSServerName = "old.example"
	c.Clusters["kubernetes"].InsecureSkipTLSVerify = true
	c.Contexts["kubernetes-admin@kubernetes"].Namespace = "kube-system"
	in, err := clientcmd.Write(*c)
	if err != nil {
		t.Fatal(err)
	}
	data, err := Export(in, "demo", "https://k8s.example.com:6443", "")
	if err != nil {
		t.Fatal(err)
	}
	if d := configDiff(exported("demo", "https://k8s.example.com:6443", ""), mustLoad(t, data)); d != "" {
		t.Errorf("exported kubeconfig (-want +got):\n%s", d)
	}
}

func TestExportRefuses(t *testing.T) {
	t.Parallel()
	const secret = "SECRET-4f1c"
	twoClusters := mustLoad(t, admin)
	twoClusters.Clusters["other"] = twoClusters.Clusters["kubernetes"].DeepCopy()
	tokenUser := mustLoad(t, admin)
	tokenUser.AuthInfos["kubernetes-admin"] = &api.AuthInfo{Token: secret}
	write := func(c *api.Config) string {
		data, err := clientcmd.Write(*c)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	for _, tc := range []struct {
		name, admin string
		server      string
		want        []string // in the error
	}{
		{name: "not YAML that quotes itself in errors", admin: "{" + secret + ": x}: y\n", want: []string{"admin kubeconfig does not parse as a kubeconfig", "holds credentials"}},
		{name: "a YAML error with a line", admin: "clusters:\n- name: " + secret + "\n  [oops\n", want: []string{"admin kubeconfig does not parse as a kubeconfig at line"}},
		{name: "another kind", admin: "apiVersion: v1\nkind: Pod\nmetadata: {name: " + secret + "}\n", want: []string{"admin kubeconfig does not parse"}},
		{name: "empty", admin: "", want: []string{"admin kubeconfig", "0 clusters, want exactly 1", "0 users, want exactly 1"}},
		{name: "two clusters", admin: write(twoClusters), want: []string{"2 clusters, want exactly 1"}},
		{name: "no CA", admin: string(adminConf("", "CERT", "KEY")), want: []string{`cluster "kubernetes" has no certificate-authority-data`}},
		{name: "no client key", admin: string(adminConf("CA", "CERT", "")), want: []string{`user "kubernetes-admin" has no client-key-data`}},
		{name: "a token, not a certificate", admin: write(tokenUser), want: []string{"no client-certificate-data", "no client-key-data"}},
		{name: "server not https", admin: string(admin), server: "http://10.0.0.1:6443", want: []string{`server "http://10.0.0.1:6443" is not an https://host:port URL`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			server := tc.server
			if server == "" {
				server = "https://10.0.0.1:6443"
			}
			_, err := Export([]byte(tc.admin), "demo", server, "")
			if err == nil {
				t.Fatal("Export accepted it")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if tc.server == "" && !errors.Is(err, ErrInvalid) {
				t.Errorf("error %q is not ErrInvalid", err)
			}
			if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "CERT") {
				t.Errorf("the error shows the file's content: %q", err)
			}
		})
	}
}

// existing is a user's kubeconfig with other clusters, one of them current,
// preferences and extensions.
const existing = `apiVersion: v1
kind: Config
preferences:
  colors: true
  extensions:
  - name: pref-ext
    extension: {theme: dark}
extensions:
- name: top-ext
  extension:
    owner: someone
clusters:
- name: kind-kind
  cluster:
    server: https://127.0.0.1:34567
    certificate-authority-data: S0lORC1DQQ==
    extensions:
    - name: client.authentication.k8s.io/exec
      extension: {audience: kind}
- name: gke
  cluster:
    server: https://34.1.2.3
    insecure-skip-tls-verify: true
users:
- name: kind-kind
  user:
    client-certificate-data: S0lORC1DRVJU
    client-key-data: S0lORC1LRVk=
- name: gke-user
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1beta1
      command: gke-gcloud-auth-plugin
      interactiveMode: IfAvailable
      provideClusterInfo: true
contexts:
- name: kind-kind
  context: {cluster: kind-kind, user: kind-kind}
- name: gke
  context: {cluster: gke, user: gke-user, namespace: apps}
current-context: kind-kind
`

// withOut returns c less the entries of cluster name, as Merge should
// leave them.
func withOut(c *api.Config, name string) *api.Config {
	c = c.DeepCopy()
	delete(c.Clusters, name)
	delete(c.AuthInfos, name+"-admin")
	delete(c.Contexts, name)
	c.CurrentContext = ""
	return c
}

func TestMerge(t *testing.T) {
	t.Parallel()
	demo, err := Export(admin, "demo", "https://10.240.1.2:6443", "api.demo.transit.internal")
	if err != nil {
		t.Fatal(err)
	}
	moved, err := Export(adminConf("CA-2", "CERT-2", "KEY-2"), "demo", "https://10.240.1.9:6443", "api.demo.transit.internal")
	if err != nil {
		t.Fatal(err)
	}
	mergedOnce, err := Merge([]byte(existing), demo)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		existing string
		exported []byte
	}{
		{"into nothing", "", demo},
		{"into whitespace", " \n", demo},
		{"beside other clusters", existing, demo},
		{"again: idempotent", string(mergedOnce), demo},
		{"same name, another server and credentials: replaced", string(mergedOnce), moved},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := Merge([]byte(tc.existing), tc.exported)
			if err != nil {
				t.Fatal(err)
			}
			g, x := mustLoad(t, got), mustLoad(t, tc.exported)
			// The cluster's entries are exactly the exported ones, current.
			if d := configDiff(x, &api.Config{
				Clusters:       map[string]*api.Cluster{"demo": g.Clusters["demo"]},
				AuthInfos:      map[string]*api.AuthInfo{"demo-admin": g.AuthInfos["demo-admin"]},
				Contexts:       map[string]*api.Context{"demo": g.Contexts["demo"]},
				CurrentContext: g.CurrentContext,
			}); d != "" {
				t.Errorf("the cluster's entries (-exported +merged):\n%s", d)
			}
			// Everything else is as it was.
			before := api.NewConfig()
			if strings.TrimSpace(tc.existing) != "" {
				before = mustLoad(t, []byte(tc.existing))
			}
			if d := configDiff(withOut(before, "demo"), withOut(g, "demo")); d != "" {
				t.Errorf("other entries changed (-before +after):\n%s", d)
			}
		})
	}
	// Merging the same kubeconfig twice writes the same bytes.
	twice, err := Merge(mergedOnce, demo)
	if err != nil {
		t.Fatal(err)
	}
	if string(twice) != string(mergedOnce) {
		t.Errorf("merging twice changed the file:\n%s", cmp.Diff(string(mergedOnce), string(twice)))
	}
	// The other file's specifics survived: a spot check beyond the diff.
	for _, w := range []string{"gke-gcloud-auth-plugin", "namespace: apps", "theme: dark", "owner: someone", "audience: kind", "colors: true"} {
		if !strings.Contains(string(mergedOnce), w) {
			t.Errorf("merged file lost %q:\n%s", w, mergedOnce)
		}
	}
}

func TestMergeRefuses(t *testing.T) {
	t.Parallel()
	demo, err := Export(admin, "demo", "https://10.240.1.2:6443", "")
	if err != nil {
		t.Fatal(err)
	}
	const secret = "TOKEN-77aa"
	for _, tc := range []struct {
		name               string
		existing, exported string
		want               string
	}{
		{"existing does not parse", "users:\n- name: x\n  user: {token: " + secret + "}\n{" + secret + ": 1}: 2\n", string(demo), "existing kubeconfig does not parse as a kubeconfig"},
		{"exported has two contexts", "", existing, "exported kubeconfig: not a usable kubeconfig: want one context"},
		{"exported does not parse", "", "{" + secret + ": 1}: 2", "exported kubeconfig does not parse"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Merge([]byte(tc.existing), []byte(tc.exported))
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("Merge = %v, want an ErrInvalid saying %q", err, tc.want)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("the error shows the file's content: %q", err)
			}
		})
	}
}
