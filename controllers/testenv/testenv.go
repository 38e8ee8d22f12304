// Package testenv runs controller tests against a real API server:
// envtest pointed at the kube-apiserver, etcd and kubectl that `make
// bundle` builds (Kubernetes v1.32.4, etcd 3.5.16), never a download. With
// Options.ControllerManager the bundle's kube-controller-manager runs
// beside it, so Deployments make ReplicaSets and the garbage collector
// deletes what owners leave behind (no kubelet: pods never run).
//
// The binaries are found, in order: TEST_ASSET_KUBE_APISERVER,
// TEST_ASSET_ETCD, TEST_ASSET_KUBECTL and TEST_ASSET_KUBE_CONTROLLER_MANAGER
// (each a path), else the repository's build/bundle/.work, where `make
// bundle` keeps what it built; that bundle is brought up to date first, as
// the Kubernetes tests do (seconds when it is, minutes cold). With -short
// nothing is built and a test without its binaries is skipped, as tests
// on real nodes are; otherwise a missing binary fails the test naming
// `make bundle`.
package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/cloudtransit/transit/bundle/build"
	"github.com/cloudtransit/transit/hostclean"
)

// Options say what the test needs beside the API server.
type Options struct {
	// CRDDirs are directories of CustomResourceDefinition manifests to
	// install before the test starts.
	CRDDirs []string
	// AddToScheme registers the test's kinds (client-go's are always in).
	AddToScheme []func(*runtime.Scheme) error
	// ControllerManager starts the bundle's kube-controller-manager with
	// the workload and garbage-collector controllers.
	ControllerManager bool
	// MutatingWebhooks are installed pointing at Env.Webhook's address,
	// trusting its certificate: the API server calls them over real TLS.
	MutatingWebhooks []*admissionregistrationv1.MutatingWebhookConfiguration
}

// Webhook is where the test serves the webhooks: host, port and the
// directory with tls.crt and tls.key.
type Webhook struct {
	Host    string
	Port    int
	CertDir string
}

// Env is a running API server.
type Env struct {
	// Config is an admin's (system:masters) client configuration.
	Config *rest.Config
	// Client is a controller-runtime client with Scheme.
	Client client.Client
	Scheme *runtime.Scheme
	// Kubeconfig is the admin's kubeconfig file, for kubectl.
	Kubeconfig string
	// Kubectl is the bundle's kubectl.
	Kubectl string
	// Webhook is where Options.MutatingWebhooks expect the server.
	Webhook Webhook

	env *envtest.Environment
}

// binary is one of the bundle's binaries envtest needs.
type binary struct {
	env  string // TEST_ASSET_* variable
	work string // path under build/bundle/.work
	name string // the name envtest looks for in its asset directory
}

var (
	apiServer         = binary{"TEST_ASSET_KUBE_APISERVER", "kubernetes/kube-apiserver", "kube-apiserver"}
	etcd              = binary{"TEST_ASSET_ETCD", "etcd/server", "etcd"}
	kubectl           = binary{"TEST_ASSET_KUBECTL", "kubernetes/kubectl", "kubectl"}
	controllerManager = binary{"TEST_ASSET_KUBE_CONTROLLER_MANAGER", "kubernetes/kube-controller-manager", "kube-controller-manager"}
)

// path finds b, or says how to get it.
func (b binary) path() (string, error) {
	if p := os.Getenv(b.env); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w", b.env, p, err)
		}
		return p, nil
	}
	p := filepath.Join(repoRoot(), "build", "bundle", ".work", filepath.FromSlash(b.work))
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s is missing: run `make bundle` (it builds the Kubernetes v1.32.4 binaries the controller tests run against), or set %s", p, b.env)
	}
	return p, nil
}

// ensureBundle brings build/bundle up to date as `make bundle` does,
// once per test binary, unless every binary comes from a TEST_ASSET_*
// variable. The build holds the bundle's lock: tests of other packages may
// build it at once.
func ensureBundle(t testing.TB, need []binary) {
	t.Helper()
	if !slices.ContainsFunc(need, func(b binary) bool { return os.Getenv(b.env) == "" }) {
		return
	}
	if err := bundleOnce(); err != nil {
		t.Fatalf("testenv: build the bundle the controller tests run against (make bundle): %v", err)
	}
}

var bundleOnce = sync.OnceValue(func() error {
	began := time.Now()
	out := filepath.Join(repoRoot(), "build", "bundle")
	if _, err := build.Build(context.Background(), build.Options{Repo: repoRoot(), Out: out, Log: os.Stderr}); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "testenv: bundle %s up to date in %s\n", out, time.Since(began).Round(100*time.Millisecond))
	return nil
})

// repoRoot is the repository this file is in.
func repoRoot() string {
	_, file, _, _ := goruntime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// CreateYAML creates every object of a multi-document YAML manifest (an
// admission policy and its binding, say), failing the test on the first
// that is refused.
func CreateYAML(t testing.TB, c client.Client, manifest []byte) {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifest), 4096)
	for {
		u := &unstructured.Unstructured{}
		err := dec.Decode(&u.Object)
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(u.Object) == 0 {
			continue
		}
		if err := c.Create(context.Background(), u); err != nil {
			t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
}

// Start starts etcd and the API server for t (and the controller manager
// if asked), installs the CRDs and stops everything when t ends.
func Start(t testing.TB, opts Options) *Env {
	t.Helper()
	// The servers of a test run killed before it could stop them go
	// first; this run's are marked, for the next one.
	if killed, err := hostclean.TestRun(); err != nil {
		t.Logf("testenv: what killed test runs left: %v", err)
	} else if len(killed) > 0 {
		t.Logf("testenv: killed %d processes killed test runs left", len(killed))
	}
	paths := map[binary]string{}
	need := []binary{apiServer, etcd, kubectl}
	if opts.ControllerManager {
		need = append(need, controllerManager)
	}
	if !testing.Short() {
		ensureBundle(t, need)
	}
	var missing []error
	for _, b := range need {
		p, err := b.path()
		if err != nil {
			missing = append(missing, err)
		}
		paths[b] = p
	}
	if len(missing) > 0 {
		if testing.Short() {
			t.Skipf("testenv: %v (skipped with -short)", errors.Join(missing...))
		}
		t.Fatalf("testenv: %v", errors.Join(missing...))
	}
	// envtest finds its binaries by name in one directory.
	assets := t.TempDir()
	for _, b := range []binary{apiServer, etcd, kubectl} {
		if err := os.Symlink(paths[b], filepath.Join(assets, b.name)); err != nil {
			t.Fatal(err)
		}
	}
	sch := runtime.NewScheme()
	for _, add := range append([]func(*runtime.Scheme) error{clientgoscheme.AddToScheme}, opts.AddToScheme...) {
		if err := add(sch); err != nil {
			t.Fatal(err)
		}
	}
	e := &Env{Scheme: sch, Kubectl: paths[kubectl], env: &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     opts.CRDDirs,
		ErrorIfCRDPathMissing: true,
		Scheme:                sch,
		// A loaded CI machine starts the API server in more than envtest's
		// default 20 s.
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  time.Minute,
		WebhookInstallOptions:    envtest.WebhookInstallOptions{MutatingWebhooks: opts.MutatingWebhooks},
	}}
	cfg, err := e.env.Start()
	if err != nil {
		_ = e.env.Stop()
		t.Fatalf("testenv: start the API server: %v", err)
	}
	t.Cleanup(func() {
		if err := e.env.Stop(); err != nil {
			t.Errorf("testenv: stop the API server: %v", err)
		}
	})
	e.Config = cfg
	wo := e.env.WebhookInstallOptions
	e.Webhook = Webhook{Host: wo.LocalServingHost, Port: wo.LocalServingPort, CertDir: wo.LocalServingCertDir}
	if e.Client, err = client.New(cfg, client.Options{Scheme: sch}); err != nil {
		t.Fatal(err)
	}
	if e.Kubeconfig, err = writeKubeconfig(t.TempDir(), cfg); err != nil {
		t.Fatal(err)
	}
	if opts.ControllerManager {
		e.startControllerManager(t, paths[controllerManager])
	}
	return e
}

// writeKubeconfig writes cfg as a kubeconfig file.
func writeKubeconfig(dir string, cfg *rest.Config) (string, error) {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["testenv"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["testenv"] = &clientcmdapi.Context{Cluster: "testenv", AuthInfo: "admin"}
	kc.CurrentContext = "testenv"
	path := filepath.Join(dir, "kubeconfig")
	return path, clientcmd.WriteToFile(*kc, path)
}

// controllers the controller manager runs: the workloads' and the
// garbage collector, and the aggregation of ClusterRoles (no service
// accounts, nodes or cloud).
const controllers = "deployment,replicaset,statefulset,daemonset,garbagecollector,namespace,clusterrole-aggregation"

// startControllerManager runs the bundle's kube-controller-manager against
// the API server until t ends; its log is printed if t fails.
func (e *Env) startControllerManager(t testing.TB, path string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, path,
		"--kubeconfig="+e.Kubeconfig,
		"--authentication-kubeconfig="+e.Kubeconfig,
		"--authorization-kubeconfig="+e.Kubeconfig,
		"--controllers="+controllers,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port=0",
		"--concurrent-deployment-syncs=10",
		"--concurrent-replicaset-syncs=10",
		"--concurrent-gc-syncs=20",
	)
	var log lockedBuffer
	cmd.Stdout, cmd.Stderr = &log, &log
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("testenv: start kube-controller-manager: %v", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		if t.Failed() {
			t.Logf("kube-controller-manager's log:\n%s", log.String())
		}
	})
}

// lockedBuffer is a bytes.Buffer for a process's two output streams.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
