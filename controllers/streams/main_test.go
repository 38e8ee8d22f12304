package streams_test

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/cloudtransit/transit/cmdtest"
	"github.com/cloudtransit/transit/controllers/streams"
	"github.com/cloudtransit/transit/controllers/streams/api/v1alpha1"
	streamsconfig "github.com/cloudtransit/transit/controllers/streams/config"
	"github.com/cloudtransit/transit/controllers/streams/kafka"
	"github.com/cloudtransit/transit/controllers/testenv"
)

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	os.Exit(testenv.StopShared(cmdtest.Main(m, "streams-broker", "streams-sidecar", "streams-echo")))
}

// The tests share one API server (testenv.Shared), each test in a
// namespace of its own, and run one after another. What a test starts
// that watches the server — its controller (startController), its
// harness kubelet (startKubelet) — sees that namespace only and stops
// before the test ends; what a test makes cluster-wide (the admission
// policy, installPolicy) goes when it ends. A test's namespace is deleted
// then, but may stay terminating (a Topology's Kafka finalizer, which
// only the test's controller removes; pods bound to the harness's node):
// nothing of a later test watches it.

// envOptions are the API server's: the streams CRDs and the bundle's
// controller manager (Deployments make ReplicaSets make Pods).
func envOptions() testenv.Options {
	return testenv.Options{
		CRDDirs:           []string{filepath.Join("config", "crd")},
		AddToScheme:       []func(*runtime.Scheme) error{v1alpha1.AddToScheme},
		ControllerManager: true,
	}
}

// startEnv is the shared API server and a new namespace for the test.
func startEnv(t testing.TB) (*testenv.Env, string) {
	t.Helper()
	e := testenv.Shared(t, "controller-manager", envOptions())
	return e, e.Namespace(t)
}

// startOwnEnv runs an API server for the benchmark alone (what it
// measures has the server to itself), its objects in "default".
func startOwnEnv(b testing.TB) (*testenv.Env, string) {
	b.Helper()
	return testenv.Start(b, envOptions()), "default"
}

// startController runs the streams controller against e, for namespace
// ns only, and Kafka at bootstrap until the test ends; stop stops it
// earlier (a crash: nothing is cleaned up).
func startController(t testing.TB, e *testenv.Env, ns, bootstrap string, opts ...func(*streams.Options)) (stop func()) {
	t.Helper()
	stop, _ = startCrashingController(t, e, ns, bootstrap, 0, false, opts...)
	return stop
}

// startCrashingController is startController whose controller crashes at
// its limit-th write (0: never) to the API server or Kafka, or with
// kafkaOnly at its limit-th write to Kafka: that write and every later
// one are dropped and the manager stops, as a kill -9 would leave it.
// crashed is closed then. Its cache holds namespace ns alone: it never
// sees, so never reconciles, another test's objects on a shared server.
func startCrashingController(t testing.TB, e *testenv.Env, ns, bootstrap string, limit int64, kafkaOnly bool, opts ...func(*streams.Options)) (stop func(), crashed chan struct{}) {
	t.Helper()
	cacheOpts := streams.CacheOptions()
	cacheOpts.DefaultNamespaces = maps.Clone(cacheOpts.DefaultNamespaces)
	if cacheOpts.DefaultNamespaces == nil {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{}
	}
	cacheOpts.DefaultNamespaces[ns] = cache.Config{}
	mgr, err := ctrl.NewManager(e.Config, ctrl.Options{
		Scheme:                 e.Scheme,
		Cache:                  cacheOpts,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	o := streams.Options{Bootstrap: bootstrap, SidecarImage: "transit.local/streams-sidecar:test"}
	for _, f := range opts {
		f(&o)
	}
	admin := kafka.New()
	if err := admin.Secure(o.Bootstrap, o.Security); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	crashed = make(chan struct{})
	c := mgr.GetClient()
	if limit > 0 {
		var once sync.Once
		cc := &crashingClient{Client: c, limit: limit, kafkaOnly: kafkaOnly, crash: func() { once.Do(func() { close(crashed); cancel() }) }}
		admin.BeforeWrite = func(string) error { return cc.write(true) }
		c = cc
	}
	if err := (&streams.PartReconciler{Client: c}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	r := &streams.TopologyReconciler{Client: c, Reader: mgr.GetAPIReader(), Kafka: admin,
		Recorder: mgr.GetEventRecorderFor("transit-streams"), Options: o}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("manager: %v", err)
			}
			admin.Close()
		})
	}
	t.Cleanup(stop)
	return stop, crashed
}

var errCrashed = errors.New("the controller crashed (test)")

// crashingClient drops its limit-th write and every later one (to the
// API server or, through the Admin's BeforeWrite, to Kafka), and crashes
// the controller. With kafkaOnly only Kafka's writes count.
type crashingClient struct {
	client.Client
	writes    atomic.Int64
	limit     int64
	kafkaOnly bool
	crashed   atomic.Bool
	crash     func()
}

func (c *crashingClient) write(toKafka bool) error {
	if c.crashed.Load() {
		return errCrashed
	}
	if c.kafkaOnly && !toKafka {
		return nil
	}
	if c.writes.Add(1) >= c.limit {
		c.crashed.Store(true)
		c.crash()
		return errCrashed
	}
	return nil
}

func (c *crashingClient) Create(ctx context.Context, o client.Object, opts ...client.CreateOption) error {
	if err := c.write(false); err != nil {
		return err
	}
	return c.Client.Create(ctx, o, opts...)
}

func (c *crashingClient) Update(ctx context.Context, o client.Object, opts ...client.UpdateOption) error {
	if err := c.write(false); err != nil {
		return err
	}
	return c.Client.Update(ctx, o, opts...)
}

func (c *crashingClient) Patch(ctx context.Context, o client.Object, p client.Patch, opts ...client.PatchOption) error {
	if err := c.write(false); err != nil {
		return err
	}
	return c.Client.Patch(ctx, o, p, opts...)
}

func (c *crashingClient) Delete(ctx context.Context, o client.Object, opts ...client.DeleteOption) error {
	if err := c.write(false); err != nil {
		return err
	}
	return c.Client.Delete(ctx, o, opts...)
}

func (c *crashingClient) Status() client.SubResourceWriter {
	return &crashingStatus{SubResourceWriter: c.Client.Status(), c: c}
}

type crashingStatus struct {
	client.SubResourceWriter
	c *crashingClient
}

func (s *crashingStatus) Update(ctx context.Context, o client.Object, opts ...client.SubResourceUpdateOption) error {
	if err := s.c.write(false); err != nil {
		return err
	}
	return s.SubResourceWriter.Update(ctx, o, opts...)
}

func (s *crashingStatus) Patch(ctx context.Context, o client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
	if err := s.c.write(false); err != nil {
		return err
	}
	return s.SubResourceWriter.Patch(ctx, o, p, opts...)
}

// installPolicy creates the part revisions' admission policy (cluster
// wide) and waits until the API server enforces it; it goes when the test
// ends.
func installPolicy(t testing.TB, c client.Client, probe func() error) {
	t.Helper()
	t.Cleanup(func() { testenv.DeleteYAML(t, c, streamsconfig.Policy) }) // what was made of it, too
	testenv.CreateYAML(t, c, streamsconfig.Policy)
	eventually(t, "the policy enforced", func() (bool, string) {
		err := probe()
		return err != nil, "a dry-run delete of an in-use revision was admitted"
	})
}

// eventually polls cond for up to a minute.
func eventually(t testing.TB, what string, cond func() (bool, string)) {
	t.Helper()
	eventuallyWithin(t, time.Minute, what, cond)
}

func eventuallyWithin(t testing.TB, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s; last: %s", d, what, state)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
