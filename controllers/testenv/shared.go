package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// shared are the servers tests share, by key.
var shared struct {
	mu      sync.Mutex
	servers map[string]*sharedServer
}

// sharedServer is one shared server: started at its first use, stopped
// by StopShared.
type sharedServer struct {
	options string // what it was started with (options)
	env     *Env
	stop    func() error
	dir     string
	skip    string // why every test asking for it skips
	err     error  // why it did not start
}

// Shared returns the API server (with the controller manager, if opts ask)
// that the tests of this test binary asking for key share: started with
// opts at the first call, stopped by StopShared, which the package's
// TestMain calls after the tests ran. Tests sharing a server work in
// namespaces of their own (Env.Namespace) and leave the cluster-scoped
// objects as they found them; tests are sequential: a test that runs a
// controller stops it before it ends. A key is asked for with the same
// options every time.
func Shared(t testing.TB, key string, opts Options) *Env {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	s := shared.servers[key]
	if s == nil {
		s = startShared(t, key, opts)
		if shared.servers == nil {
			shared.servers = map[string]*sharedServer{}
		}
		shared.servers[key] = s
	}
	if o := options(opts); o != s.options {
		t.Fatalf("testenv: shared server %q asked for with options %s; it runs with %s", key, o, s.options)
	}
	if s.skip != "" {
		t.Skip(s.skip)
	}
	if s.err != nil {
		t.Fatalf("testenv: shared server %q: %v", key, s.err)
	}
	if s.env.cmLog != nil {
		s.env.logFailed(t, s.env.cmLog.Len())
	}
	return s.env
}

// startShared starts the shared server key; what goes wrong is kept for
// every test that asks for it.
func startShared(t testing.TB, key string, opts Options) *sharedServer {
	s := &sharedServer{options: options(opts)}
	purgeKilled(t.Logf)
	paths, skip, err := binaries(opts)
	if s.skip, s.err = skip, err; skip != "" || err != nil {
		return s
	}
	if s.dir, s.err = os.MkdirTemp("", "testenv-"+notLabel.ReplaceAllString(strings.ToLower(key), "-")+"-"); s.err != nil {
		return s
	}
	if s.env, s.stop, s.err = launch(opts, paths, s.dir); s.err != nil {
		s.err = errors.Join(s.err, os.RemoveAll(s.dir))
		s.dir = ""
	}
	return s
}

// options describes opts for telling two option sets apart (the scheme's
// functions cannot be compared: only their number is).
func options(opts Options) string {
	var hooks []string
	for _, h := range opts.MutatingWebhooks {
		hooks = append(hooks, h.Name)
	}
	return fmt.Sprintf("{CRDDirs:%v AddToScheme:%d ControllerManager:%v MutatingWebhooks:%v}",
		opts.CRDDirs, len(opts.AddToScheme), opts.ControllerManager, hooks)
}

// StopShared stops every shared server and removes its files once the
// tests ran, and returns the exit code of the run: code, or 1 if a
// server would not stop. A TestMain ends with
// os.Exit(testenv.StopShared(m.Run())); a run killed before leaves the
// servers to the next run's purge.
func StopShared(code int) int {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	for key, s := range shared.servers {
		var errs []error
		if s.stop != nil {
			errs = append(errs, s.stop())
		}
		if s.dir != "" {
			errs = append(errs, os.RemoveAll(s.dir))
		}
		if err := errors.Join(errs...); err != nil {
			fmt.Fprintf(os.Stderr, "testenv: shared server %q: %v\n", key, err)
			if code == 0 {
				code = 1
			}
		}
		delete(shared.servers, key)
	}
	return code
}

// namespaces numbers the namespaces made for tests.
var namespaces atomic.Int64

// notLabel matches what a namespace's name may not hold.
var notLabel = regexp.MustCompile(`[^a-z0-9-]+`)

// Namespace creates a namespace for t alone, named after it, and deletes
// it when t ends (with what is in it, when the controller manager runs;
// without one, the namespace is left terminating). Call it before starting
// what watches the namespace, so that it stops before the deletion.
func (e *Env) Namespace(t testing.TB) string {
	t.Helper()
	suffix := "-" + strconv.FormatInt(namespaces.Add(1), 10)
	name := strings.Trim(notLabel.ReplaceAllString(strings.ToLower(t.Name()), "-"), "-")
	if room := 63 - len(suffix); len(name) > room {
		name = strings.TrimRight(name[:room], "-")
	}
	if name == "" {
		name = "test"
	}
	name += suffix
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := e.Client.Create(context.Background(), ns); err != nil {
		t.Fatalf("testenv: create namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		err := e.Client.Delete(context.Background(), ns, client.PropagationPolicy(metav1.DeletePropagationBackground))
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("testenv: delete namespace %s: %v", name, err)
		}
	})
	return name
}
