package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cloudtransit/transit"
	"github.com/cloudtransit/transit/clock"
	"github.com/cloudtransit/transit/control"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/filelock"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// paper is the multi-cloud example of the paper transit's formats come
// from, kept at the repository root.
const paper = "../../../testdata/kratzke2017"

// harness is one user's working directory with the paper's files, a fake
// cloud and a fake platform that every run of the test shares.
type harness struct {
	dir      string
	cloud    *fakeCloud
	platform *fakePlatform
	clock    clock.Clock
	// noDrivers builds the CLI with empty registries, as main does today.
	noDrivers bool
	// priceLists are the registry's price lists (transit prices).
	priceLists map[string]transit.PriceListFunc
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	h := &harness{dir: t.TempDir(), cloud: newFakeCloud(), platform: newFakePlatform()}
	for _, name := range []string{"cluster.json", "districts.json", "credentials.json"} {
		copyFile(t, filepath.Join(paper, name), h.path(name))
	}
	if err := os.Chmod(h.path("credentials.json"), 0o600); err != nil {
		t.Fatal(err)
	}
	return h
}

func (h *harness) path(name string) string { return filepath.Join(h.dir, name) }

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// runOpts say how a command is run.
type runOpts struct {
	ctx   context.Context
	stdin string
	tty   bool // stdin and stdout are terminals
	// noState leaves out --state, for tests that set it otherwise.
	noState bool
}

// result is what a user sees: both streams (stderr with the error as main
// prints it) and the exit code.
type result struct {
	out, err string
	code     int
	error    error
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\n--- stdout\n%s--- stderr\n%s", r.code, r.out, r.err)
}

// run runs transit with args plus the paths of the harness's files.
func (h *harness) run(t *testing.T, o runOpts, args ...string) result {
	t.Helper()
	in := strings.NewReader(o.stdin)
	var out, errOut bytes.Buffer
	deps := Deps{
		In:  in,
		Out: &out,
		Err: &errOut,
		IsTerminal: func(s any) bool {
			return o.tty && (s == in || s == &out)
		},
		Clock:     h.clock,
		LookupEnv: os.LookupEnv, // as main does: tests set flags with t.Setenv
	}
	if !h.noDrivers {
		deps.Drivers = func(transit.BuiltinOptions) transit.Drivers {
			return transit.Drivers{
				Infrastructures: map[string]transit.InfrastructureFunc{"gce": h.cloud.driver, "aws": h.cloud.driver},
				Platforms:       map[string]transit.PlatformFunc{"swarm": h.platform.driver},
				PriceLists:      h.priceLists,
			}
		}
	}
	args = append(args, "-c", h.path("cluster.json"), "-d", h.path("districts.json"), "--credentials", h.path("credentials.json"), "--prices", h.path("prices.json"))
	if !o.noState {
		args = append(args, "--state", h.path("resources.json"))
	}
	cmd := NewRootCommand(deps)
	cmd.SetArgs(Args(args))
	ctx := o.ctx
	if ctx == nil {
		ctx = t.Context()
	}
	err := cmd.ExecuteContext(ctx)
	if err != nil && !Silent(err) {
		fmt.Fprintf(&errOut, "Error: %v\n", err) // as main does
	}
	return result{out: out.String(), err: errOut.String(), code: ExitCode(err), error: err}
}

// state reads the harness's resources.json.
func (h *harness) state(t *testing.T) districts.Resources {
	t.Helper()
	r, err := districts.LoadResources(h.path("resources.json"))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// setQuantity rewrites cluster.json with a new quantity for one line, as a
// MAPE monitor would.
func (h *harness) setQuantity(t *testing.T, district, role string, quantity int) {
	t.Helper()
	cfg, err := districts.Load(districts.Paths{Cluster: h.path("cluster.json"), Districts: h.path("districts.json"), Prices: h.path("prices.json")})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for i, d := range cfg.Cluster.Deployments {
		if d.District == district && d.Role == role {
			cfg.Cluster.Deployments[i].Quantity = quantity
			found = true
		}
	}
	if !found {
		t.Fatalf("no deployment %s/%s", district, role)
	}
	writeJSONFile(t, h.path("cluster.json"), cfg.Cluster)
}

func writeJSONFile(t *testing.T, path string, v any) {
	t.Helper()
	var b bytes.Buffer
	if err := writeJSON(&b, v); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run %s -update to create it)", err, t.Name())
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s differs (-want +got; go test -update rewrites it):\n%s", path, diff)
	}
}

// wantCode fails the test when the run did not exit with code.
func wantCode(t *testing.T, r result, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit code %d, want %d\n%s", r.code, code, r)
	}
}

func TestExitCode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err    error
		want   int
		silent bool
	}{
		{nil, 0, false},
		{errors.New("boom"), 1, false},
		{&CodeError{Code: ExitChanges}, 2, true},
		{fmt.Errorf("apply: %w", control.ErrNotConverged), 3, false},
		{&CodeError{Code: ExitNotConverged, Err: control.ErrNotConverged}, 3, false},
		{&CodeError{Code: ExitUnpriced}, 4, true},
		{fmt.Errorf("launch node x: %w", context.Canceled), ExitInterrupted, false},
		{&CodeError{Code: ExitInterrupted, Err: context.Canceled}, 130, false},
		{context.DeadlineExceeded, 1, false},
	} {
		if got := ExitCode(tc.err); got != tc.want {
			t.Errorf("ExitCode(%v) = %d, want %d", tc.err, got, tc.want)
		}
		if got := tc.err != nil && Silent(tc.err); got != tc.silent {
			t.Errorf("Silent(%v) = %v, want %v", tc.err, got, tc.silent)
		}
	}
}

// holdLock holds the state lock, as a running `transit apply --watch`
// would, until the test ends.
func (h *harness) holdLock(t *testing.T) {
	t.Helper()
	lock, err := filelock.Acquire(t.Context(), h.path("resources.json"), filelock.Options{Command: "transit apply --watch"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := lock.Release(); err != nil {
			t.Error(err)
		}
	})
}
