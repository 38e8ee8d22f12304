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

	env   *envtest.Environment
	cmLog *lockedBuffer // the controller manager's output, if it runs
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

// Etcd is the path of the bundle's etcd, for tests that run one of their
// own (with TLS, say, as kubeadm's masters do).
func Etcd() (string, error) { return etcd.path() }

// path finds b, or says how to get it.
func (b binary) path() (string, error) {
	if p := os.Getenv(b.env); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w", b.env, p, err)
		}
		return p, nil
	}
	p := filepath.Join(bundleDir(), ".work", filepath.FromSlash(b.work))
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s is missing: run `make bundle` (it builds the Kubernetes v1.32.4 binaries the controller tests run against), or set %s", p, b.env)
	}
	return p, nil
}

// bundleDir is $TRANSIT_BUNDLE, a bundle taken as it is (`make test`
// builds it once, before every package), else the repository's
// build/bundle.
func bundleDir() string {
	if dir := os.Getenv("TRANSIT_BUNDLE"); dir != "" {
		return dir
	}
	return filepath.Join(repoRoot(), "build", "bundle")
}

// ensureBundle brings build/bundle up to date as `make bundle` does,
// once per test binary, unless every binary comes from a TEST_ASSET_*
// variable or the bundle from $TRANSIT_BUNDLE. The build holds the
// bundle's lock: tests of other packages may build it at once.
func ensureBundle(need []binary) error {
	if os.Getenv("TRANSIT_BUNDLE") != "" || !slices.ContainsFunc(need, func(b binary) bool { return os.Getenv(b.env) == "" }) {
		return nil
	}
	if err := bundleOnce(); err != nil {
		return fmt.Errorf("testenv: build the bundle the controller tests run against (make bundle): %w", err)
	}
	return nil
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
	for _, u := range decodeYAML(t, manifest) {
		if err := c.Create(context.Background(), u); err != nil {
			t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
}

// DeleteYAML deletes every object of a multi-document YAML manifest
// (what CreateYAML created), failing the test on the first that cannot
// be deleted; one already gone is fine.
func DeleteYAML(t testing.TB, c client.Client, manifest []byte) {
	t.Helper()
	for _, u := range decodeYAML(t, manifest) {
		if err := c.Delete(context.Background(), u); client.IgnoreNotFound(err) != nil {
			t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
}

// decodeYAML decodes a multi-document YAML manifest's objects.
func decodeYAML(t testing.TB, manifest []byte) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifest), 4096)
	for {
		u := &unstructured.Unstructured{}
		err := dec.Decode(&u.Object)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

// Start starts etcd and the API server for t (and the controller manager
// if asked), installs the CRDs and stops everything when t ends. A test
// that needs a server of its own (it stops it, say) starts one; others
// share one (Shared).
func Start(t testing.TB, opts Options) *Env {
	t.Helper()
	purgeKilled(t.Logf)
	paths, skip, err := binaries(opts)
	if skip != "" {
		t.Skip(skip)
	}
	if err != nil {
		t.Fatal(err)
	}
	// t.TempDir is removed after the cleanups below: the servers are
	// stopped by then.
	e, stop, err := launch(opts, paths, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("testenv: %v", err)
		}
	})
	e.logFailed(t, 0)
	return e
}

// purgeKilled kills what test runs killed before they could stop their
// servers left; this run's are marked, for the next one.
func purgeKilled(logf func(string, ...any)) {
	if killed, err := hostclean.TestRun(); err != nil {
		logf("testenv: what killed test runs left: %v", err)
	} else if len(killed) > 0 {
		logf("testenv: killed %d processes killed test runs left", len(killed))
	}
}

// binaries finds the binaries opts need, building the bundle first
// (unless -short). With -short a missing binary is a reason to skip;
// otherwise it is an error naming `make bundle`.
func binaries(opts Options) (paths map[binary]string, skip string, err error) {
	need := []binary{apiServer, etcd, kubectl}
	if opts.ControllerManager {
		need = append(need, controllerManager)
	}
	if !testing.Short() {
		if err := ensureBundle(need); err != nil {
			return nil, "", err
		}
	}
	paths = map[binary]string{}
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
			return nil, fmt.Sprintf("testenv: %v (skipped with -short)", errors.Join(missing...)), nil
		}
		return nil, "", fmt.Errorf("testenv: %w", errors.Join(missing...))
	}
	return paths, "", nil
}

// launch starts etcd, the API server and, if opts ask, the controller
// manager, keeping their files in dir, and installs the CRDs and
// webhooks; stop stops them all.
func launch(opts Options, paths map[binary]string, dir string) (e *Env, stop func() error, err error) {
	// envtest finds its binaries by name in one directory.
	assets := filepath.Join(dir, "assets")
	if err := os.Mkdir(assets, 0o755); err != nil {
		return nil, nil, err
	}
	for _, b := range []binary{apiServer, etcd, kubectl} {
		if err := os.Symlink(paths[b], filepath.Join(assets, b.name)); err != nil {
			return nil, nil, err
		}
	}
	sch := runtime.NewScheme()
	for _, add := range append([]func(*runtime.Scheme) error{clientgoscheme.AddToScheme}, opts.AddToScheme...) {
		if err := add(sch); err != nil {
			return nil, nil, err
		}
	}
	e = &Env{Scheme: sch, Kubectl: paths[kubectl], env: &envtest.Environment{
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
		return nil, nil, fmt.Errorf("testenv: start the API server: %w", err)
	}
	stopServer := func() error {
		if err := e.env.Stop(); err != nil {
			return fmt.Errorf("stop the API server: %w", err)
		}
		return nil
	}
	e.Config = cfg
	wo := e.env.WebhookInstallOptions
	e.Webhook = Webhook{Host: wo.LocalServingHost, Port: wo.LocalServingPort, CertDir: wo.LocalServingCertDir}
	if e.Client, err = client.New(cfg, client.Options{Scheme: sch}); err != nil {
		return nil, nil, errors.Join(err, stopServer())
	}
	if e.Kubeconfig, err = writeKubeconfig(dir, cfg); err != nil {
		return nil, nil, errors.Join(err, stopServer())
	}
	if !opts.ControllerManager {
		return e, stopServer, nil
	}
	stopCM, err := e.startControllerManager(paths[controllerManager])
	if err != nil {
		return nil, nil, errors.Join(err, stopServer())
	}
	return e, func() error { stopCM(); return stopServer() }, nil
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
// the API server until stop; its output goes to e's controller manager
// log.
func (e *Env) startControllerManager(path string) (stop func(), err error) {
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
	e.cmLog = &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = e.cmLog, e.cmLog
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, fmt.Errorf("testenv: start kube-controller-manager: %w", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	return func() {
		cancel()
		<-done
	}, nil
}

// logFailed prints, if t fails, what the controller manager logged from
// the byte from on.
func (e *Env) logFailed(t testing.TB, from int) {
	if e.cmLog == nil {
		return
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kube-controller-manager's log while the test ran:\n%s", e.cmLog.Since(from))
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

// Len is how much was written so far.
func (l *lockedBuffer) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Len()
}

// Since is what was written after the first n bytes.
func (l *lockedBuffer) Since(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.b.Bytes()[n:])
}
