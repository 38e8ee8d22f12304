package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cloudtransit/transit/clock/clocktest"
	"github.com/cloudtransit/transit/control"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/filelock"
	"github.com/cloudtransit/transit/provider"
	"github.com/cloudtransit/transit/statestore/seal"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := h.run(t, runOpts{}, "validate")
	wantCode(t, r, 0)
	if want := "configuration is valid: 3 deployments, 16 nodes in 2 districts\n"; r.out != want {
		t.Errorf("stdout = %q, want %q", r.out, want)
	}
}

func TestValidateInvalid(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	for _, name := range []string{"cluster.json", "districts.json", "credentials.json"} {
		copyFile(t, filepath.Join("../../../testdata/invalid", name), h.path(name))
	}
	r := h.run(t, runOpts{}, "validate")
	wantCode(t, r, 1)
	ps, ok := errors.AsType[districts.Problems](r.error)
	if !ok || len(ps) < 10 {
		t.Fatalf("error is not the list of every problem: %v", r.error)
	}
	// Every problem is printed, one per line, once.
	for _, p := range ps {
		if n := strings.Count(r.err, "\n  "+p.String()+"\n"); n != 1 {
			t.Errorf("problem printed %d times, want once: %s", n, p)
		}
	}
	if !strings.HasPrefix(r.err, "Error: ") {
		t.Errorf("stderr does not start with the error: %q", r.err)
	}
	if r.out != "" {
		t.Errorf("stdout = %q, want nothing", r.out)
	}
	// Secrets of the broken credentials never print.
	if strings.Contains(r.err, "must-never-print") {
		t.Errorf("a secret was printed:\n%s", r.err)
	}
}

// validate names every bad setting of an addon by its path in
// cluster.json and says what to write; an unknown one gets a
// did-you-mean.
func TestValidateAddonSettings(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	c := districts.Cluster{
		Type: "cluster", ID: k8sID, Platform: "kubernetes",
		Flavors:     []districts.Flavor{{Flavor: "small", Cores: 1, MemoryGB: 3.75, DiskGB: 20}},
		Deployments: []districts.Deployment{{District: "gce-europe", Flavor: "small", Role: districts.RoleMaster, Quantity: 1}},
	}
	c.Addons = []districts.Addon{{Name: "streams", Settings: map[string]string{
		"bootstrap": "kafka", "replicas": "11", "history": "0", "upgrade_timeout": "forever", "broker_data_dir": "var/kafka", "histroy": "5"}}}
	writeJSONFile(t, h.path("cluster.json"), c)
	r := h.run(t, runOpts{}, "validate")
	wantCode(t, r, 1)
	for _, want := range []string{
		`cluster.json: addons[0].settings.bootstrap: "kafka" is not a Kafka broker list: "kafka" is not host:port; write host:port, comma separated`,
		`cluster.json: addons[0].settings.broker_data_dir: "var/kafka" is not an absolute path; write an absolute path on the master`,
		`cluster.json: addons[0].settings.broker_data_dir: has no effect while bootstrap is set; remove broker_data_dir, or bootstrap`,
		`cluster.json: addons[0].settings.history: "0" is not a whole number from 1 to 100`,
		`cluster.json: addons[0].settings.histroy: addon streams has no setting "histroy" (settings: bootstrap, broker_data_dir, history, kafka_secret, replicas, upgrade_timeout); did you mean "history"?`,
		`cluster.json: addons[0].settings.replicas: "11" is not a whole number from 1 to 10`,
		`cluster.json: addons[0].settings.upgrade_timeout: "forever" is not a duration from 10s to 1h; write a Go duration such as "5m" or "90s"`,
	} {
		if !strings.Contains(r.err, "\n  "+want) {
			t.Errorf("validate does not say %q:\n%s", want, r.err)
		}
	}
}

func TestPlanGolden(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		state string // copied to resources.json; "" for none
		args  []string
	}{
		{name: "plan-kratzke2017-empty.golden", args: []string{"plan", "--refresh=false"}},
		{name: "plan-kratzke2017-empty.json.golden", args: []string{"plan", "--refresh=false", "--json"}},
		{name: "plan-kratzke2017-drift.golden", state: "testdata/drift/resources.json", args: []string{"plan", "--refresh=false"}},
		{name: "status-kratzke2017-drift.golden", state: "testdata/drift/resources.json", args: []string{"status", "--refresh=false"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			h.clock = clocktest.NewFake(time.Date(2026, 3, 1, 10, 30, 0, 0, time.UTC))
			if tc.state != "" {
				copyFile(t, tc.state, h.path("resources.json"))
			}
			r := h.run(t, runOpts{}, tc.args...)
			wantCode(t, r, 0)
			golden(t, tc.name, r.out)
			if r.err != "" {
				t.Errorf("stderr: %s", r.err)
			}
			if h.cloud.built.Load() != 0 || h.platform.built.Load() != 0 {
				t.Errorf("--refresh=false constructed drivers")
			}
		})
	}
}

func TestPlanJSONIsThePlan(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := h.run(t, runOpts{}, "plan", "--refresh=false", "--json")
	wantCode(t, r, 0)
	var got planJSON
	if err := json.Unmarshal([]byte(r.out), &got); err != nil {
		t.Fatal(err)
	}
	p := control.Plan{Cluster: got.Cluster}
	for _, a := range got.Actions {
		p.Actions = append(p.Actions, control.Action{Kind: control.Kind(a.Kind), District: a.District, Node: a.Node,
			Role: a.Role, Flavor: a.Flavor, Group: a.Group, Reason: a.Reason, After: a.After})
	}
	if s := p.Summary(); !got.Changes || got.Summary != (summaryJSON{s.Add, s.Change, s.Remove}) || len(got.Actions) == 0 || got.Refreshed {
		t.Errorf("plan JSON: changes %v, refreshed %v, summary %+v for %d actions", got.Changes, got.Refreshed, got.Summary, len(got.Actions))
	}
}

func TestPlanDetailedExitcode(t *testing.T) {
	t.Parallel()
	h := newHarness(t)

	r := h.run(t, runOpts{}, "plan", "--detailed-exitcode")
	wantCode(t, r, ExitChanges)
	if r.err != "" {
		t.Errorf("exit 2 printed an error: %s", r.err)
	}
	wantCode(t, h.run(t, runOpts{}, "plan"), 0) // without the flag, changes are success

	wantCode(t, h.run(t, runOpts{}, "apply", "--auto-approve"), 0)
	r = h.run(t, runOpts{}, "plan", "--detailed-exitcode")
	wantCode(t, r, 0)
	if !strings.Contains(r.out, "No changes. The cluster matches cluster.json.") {
		t.Errorf("no-change plan:\n%s", r.out)
	}

	if err := os.Remove(h.path("cluster.json")); err != nil {
		t.Fatal(err)
	}
	wantCode(t, h.run(t, runOpts{}, "plan", "--detailed-exitcode"), 1)
}

func TestApplyRefusesWithoutTTY(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	for _, cmd := range []string{"apply", "destroy"} {
		r := h.run(t, runOpts{stdin: "yes\n"}, cmd)
		wantCode(t, r, 1)
		if !strings.Contains(r.err, "--auto-approve") || !strings.Contains(r.err, "not a terminal") {
			t.Errorf("%s without a terminal: %s", cmd, r.err)
		}
	}
	if h.cloud.built.Load() != 0 {
		t.Error("a refused apply constructed drivers")
	}
	if _, err := os.Stat(h.path("resources.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused apply wrote the state: %v", err)
	}
}

func TestApplyConfirmation(t *testing.T) {
	t.Parallel()
	t.Run("no", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		r := h.run(t, runOpts{tty: true, stdin: "no\n"}, "apply")
		wantCode(t, r, 1)
		if !strings.Contains(r.out, "Do you want to perform these actions? Only 'yes' will be accepted:") {
			t.Errorf("no prompt:\n%s", r)
		}
		if !strings.Contains(r.err, "apply cancelled") {
			t.Errorf("no cancel message:\n%s", r)
		}
		if n, _ := h.cloud.count(); n != 0 {
			t.Errorf("a cancelled apply launched %d machines", n)
		}
	})
	t.Run("yes", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		r := h.run(t, runOpts{tty: true, stdin: "yes\n"}, "apply")
		wantCode(t, r, 0)
		for _, want := range []string{"Plan: 18 to add", "✓ launch swarm-europe-master-1", "✓ init swarm-europe-master-1", "Apply complete"} {
			if !strings.Contains(r.out, want) {
				t.Errorf("terminal output lacks %q:\n%s", want, r.out)
			}
		}
	})
	t.Run("destroy wants the cluster id", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		wantCode(t, h.run(t, runOpts{}, "apply", "--auto-approve"), 0)
		r := h.run(t, runOpts{tty: true, stdin: "yes\n"}, "destroy")
		wantCode(t, r, 1)
		if !strings.Contains(r.out, `Do you really want to destroy cluster "swarm-europe"?`) {
			t.Errorf("no destroy prompt:\n%s", r)
		}
		if n, _ := h.cloud.count(); n != 16 {
			t.Errorf("%d machines after a cancelled destroy, want 16", n)
		}
		r = h.run(t, runOpts{tty: true, stdin: "swarm-europe\n"}, "destroy")
		wantCode(t, r, 0)
		if n, g := h.cloud.count(); n != 0 || g != 0 {
			t.Errorf("%d machines and %d groups after destroy, want none", n, g)
		}
	})
}

func TestApplyAndDestroy(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := h.run(t, runOpts{}, "apply", "--auto-approve", "--parallel", "4")
	wantCode(t, r, 0)
	if !strings.Contains(r.out, "Plan: 18 to add, ") || !strings.Contains(r.out, "apply converged") {
		t.Errorf("apply output:\n%s", r)
	}
	st := h.state(t)
	if len(st.Nodes) != 16 || len(st.SecurityGroups) != 2 {
		t.Fatalf("state after apply: %d nodes, %d groups; want 16, 2", len(st.Nodes), len(st.SecurityGroups))
	}
	for _, n := range st.Nodes {
		if n.Phase != districts.PhaseJoined {
			t.Errorf("node %s is %s after apply", n.ID, n.Phase)
		}
	}
	if n, g := h.cloud.count(); n != 16 || g != 2 {
		t.Errorf("cloud after apply: %d machines, %d groups", n, g)
	}

	r = h.run(t, runOpts{}, "status")
	wantCode(t, r, 0)
	for _, want := range []string{"16 nodes and 2 security groups", "# district aws-europe", "  master (3)", "  worker (10)", "scheduling-priority=high"} {
		if !strings.Contains(r.out, want) {
			t.Errorf("status lacks %q:\n%s", want, r.out)
		}
	}
	r = h.run(t, runOpts{}, "status", "--json")
	wantCode(t, r, 0)
	var status statusJSON
	if err := json.Unmarshal([]byte(r.out), &status); err != nil || len(status.State.Nodes) != 16 {
		t.Errorf("status --json: %v, %d nodes", err, len(status.State.Nodes))
	}

	r = h.run(t, runOpts{}, "destroy", "--auto-approve")
	wantCode(t, r, 0)
	if st := h.state(t); len(st.Nodes) != 0 || len(st.SecurityGroups) != 0 {
		t.Errorf("state after destroy: %d nodes, %d groups", len(st.Nodes), len(st.SecurityGroups))
	}
	r = h.run(t, runOpts{}, "destroy", "--auto-approve")
	wantCode(t, r, 0)
	if !strings.Contains(r.out, `No changes. Cluster "swarm-europe" has no nodes or security groups left.`) {
		t.Errorf("second destroy:\n%s", r)
	}
	if n, g := h.cloud.count(); n != 0 || g != 0 {
		t.Errorf("cloud after destroy: %d machines, %d groups", n, g)
	}
	// cluster.json is untouched: destroy only zeroes a copy.
	cfg, err := districts.Load(districts.Paths{Cluster: h.path("cluster.json"), Districts: h.path("districts.json"), Prices: h.path("prices.json")})
	if err != nil || cfg.Cluster.Deployments[2].Quantity != 10 {
		t.Errorf("cluster.json changed by destroy: %v", err)
	}
}

func TestNotConverged(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		args    []string
		breakIt func(h *harness)
		why     string
	}{
		{
			name: "apply with a refused drain",
			args: []string{"apply", "--auto-approve"},
			breakIt: func(h *harness) {
				h.setQuantity(t, "aws-europe", districts.RoleWorker, 8)
				h.platform.refuse(true)
			},
			why: "disruption budget",
		},
		{
			name:    "destroy with a failing cloud",
			args:    []string{"destroy", "--auto-approve"},
			breakIt: func(h *harness) { h.cloud.failTerminate("instance is protected from termination") },
			why:     "protected from termination",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			wantCode(t, h.run(t, runOpts{}, "apply", "--auto-approve"), 0)
			tc.breakIt(h)
			r := h.run(t, runOpts{}, tc.args...)
			wantCode(t, r, ExitNotConverged)
			if !errors.Is(r.error, control.ErrNotConverged) {
				t.Errorf("error does not match ErrNotConverged: %v", r.error)
			}
			// The message names the node and why.
			if !strings.Contains(r.err, "node swarm-europe-") || !strings.Contains(r.err, tc.why) {
				t.Errorf("not-converged message does not say which node and why:\n%s", r.err)
			}
			if n, _ := h.cloud.count(); n != 16 {
				t.Errorf("%d machines left, want 16: a refused drain must not kill its node", n)
			}
		})
	}
}

func TestApplyJSONLines(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := h.run(t, runOpts{}, "apply", "--auto-approve", "--json")
	wantCode(t, r, 0)
	lines, last := jsonLines(t, r)
	if len(lines) < 3 {
		t.Fatalf("%d lines", len(lines))
	}
	var first planJSON
	if err := json.Unmarshal([]byte(strings.SplitN(r.out, "\n", 2)[0]), &first); err != nil || first.Type != typePlan || len(first.Actions) == 0 {
		t.Errorf("first line is not the plan (%v): %+v", err, first)
	}
	if !last.Result.Converged || last.Error != "" || last.ErrorKind != "" {
		t.Errorf("last line is not a converged result: %+v", last)
	}
	finished := 0
	for _, l := range lines {
		if l["type"] == typeAction && l["phase"] == control.PhaseFinish {
			finished++
		}
	}
	if finished < 16+16 { // a launch and a join per node at least
		t.Errorf("%d finished actions reported", finished)
	}
}

// Not parallel: t.Setenv.
func TestEnvironmentSetsFlags(t *testing.T) {
	h := newHarness(t)
	elsewhere := filepath.Join(t.TempDir(), "state.json")
	t.Setenv("TRANSIT_STATE", elsewhere)
	t.Setenv("TRANSIT_AUTO_APPROVE", "true")
	t.Setenv("TRANSIT_PARALLEL", "3")
	r := h.run(t, runOpts{noState: true}, "apply")
	wantCode(t, r, 0)
	if _, err := os.Stat(elsewhere); err != nil {
		t.Errorf("TRANSIT_STATE was not used: %v", err)
	}
	if _, err := os.Stat(h.path("resources.json")); err == nil {
		t.Errorf("state written to the default path despite TRANSIT_STATE")
	}
	// A flag on the command line wins over the environment.
	r = h.run(t, runOpts{}, "status", "--refresh=false")
	wantCode(t, r, 0)
	if !strings.Contains(r.out, "0 nodes") {
		t.Errorf("--state did not win over TRANSIT_STATE:\n%s", r.out)
	}
	t.Setenv("TRANSIT_LOCK_TIMEOUT", "soon")
	r = h.run(t, runOpts{}, "plan")
	wantCode(t, r, 1)
	if !strings.Contains(r.err, `TRANSIT_LOCK_TIMEOUT="soon"`) {
		t.Errorf("bad env value not named:\n%s", r.err)
	}
}

func TestLockHeld(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	wantCode(t, h.run(t, runOpts{}, "apply", "--auto-approve"), 0)
	// A machine vanishes: a refresh sees what resources.json does not.
	if !h.cloud.vanish("swarm-europe-worker-4") {
		t.Fatal("no machine swarm-europe-worker-4")
	}
	h.platform.down("swarm-europe-worker-4")
	before, err := os.ReadFile(h.path("resources.json"))
	if err != nil {
		t.Fatal(err)
	}
	h.holdLock(t)
	// Only apply and destroy take the lock.
	for _, args := range [][]string{
		{"apply", "--auto-approve"},
		{"destroy", "--auto-approve", "--lock-timeout", "50ms"},
	} {
		r := h.run(t, runOpts{}, args...)
		wantCode(t, r, 1)
		if !errors.Is(r.error, filelock.ErrLocked) || !strings.Contains(r.err, `"transit apply --watch"`) {
			t.Errorf("%v with a held lock:\n%s", args, r)
		}
	}
	// plan and status refresh in memory: they run beside the lock holder
	// and see the vanished machine.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"plan"}, "+ launch        swarm-europe-worker-14"},
		{[]string{"plan", "--json"}, `"node": "swarm-europe-worker-14"`},
		{[]string{"plan", "--detailed-exitcode"}, "Plan: 1 to add"},
		{[]string{"status"}, "15 nodes and 2 security groups"},
		{[]string{"status", "--json"}, `"id": "swarm-europe-worker-3"`},
		{[]string{"plan", "--refresh=false"}, "No changes."},
		{[]string{"status", "--refresh=false"}, "16 nodes and 2 security groups"},
	} {
		r := h.run(t, runOpts{}, tc.args...)
		if slices.Contains(tc.args, "--detailed-exitcode") {
			wantCode(t, r, ExitChanges)
		} else {
			wantCode(t, r, 0)
		}
		if !strings.Contains(r.out, tc.want) {
			t.Errorf("%v lacks %q:\n%s", tc.args, tc.want, r)
		}
		if strings.Contains(r.out, "\n    swarm-europe-worker-4 ") && tc.args[0] == "status" && !slices.Contains(tc.args, "--refresh=false") {
			t.Errorf("%v shows the vanished machine:\n%s", tc.args, r.out)
		}
	}
	after, err := os.ReadFile(h.path("resources.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Errorf("plan or status wrote resources.json")
	}
}

func TestNoDriverInThisBuild(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.noDrivers = true
	r := h.run(t, runOpts{}, "plan")
	wantCode(t, r, 1)
	for _, want := range []string{
		`district "gce-europe": no infrastructure driver for provider "gce" in this build (available: none)`,
		`district "aws-europe": no infrastructure driver for provider "aws" in this build (available: none)`,
	} {
		if !strings.Contains(r.err, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.err)
		}
	}
	// Without refresh, no driver is needed.
	wantCode(t, h.run(t, runOpts{}, "plan", "--refresh=false"), 0)
}

func TestStateOfAnotherCluster(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	writeJSONFile(t, h.path("resources.json"), districts.Resources{Type: "resources", Version: 1, Cluster: "other"})
	r := h.run(t, runOpts{}, "plan", "--refresh=false")
	wantCode(t, r, 1)
	if !strings.Contains(r.err, `holds the state of cluster "other"`) {
		t.Errorf("stderr:\n%s", r.err)
	}
}

// watchInterval is the --interval of the watch tests: no other wait of
// the loop is as long, so a sleep of exactly watchInterval is the wait
// between two iterations.
const watchInterval = 7 * time.Minute

func TestWatch(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	waits := 0
	clk := &clocktest.Fake{}
	clk.OnSleep = func(_ context.Context, d time.Duration) error {
		if d != watchInterval {
			return nil // the loop's short polls
		}
		waits++
		switch waits {
		case 1:
			// A monitor rewrites cluster.json between two applies.
			h.setQuantity(t, "aws-europe", districts.RoleWorker, 4)
		case 2:
			// A broken cluster.json: the iteration fails, the watch goes on.
			if err := os.WriteFile(h.path("cluster.json"), []byte("{"), 0o600); err != nil {
				t.Error(err)
			}
		default:
			cancel()
			return ctx.Err()
		}
		return nil
	}
	h.clock = clk
	r := h.run(t, runOpts{ctx: ctx}, "apply", "--watch", "--auto-approve", "--interval", watchInterval.String())
	wantCode(t, r, 0)
	if waits != 3 {
		t.Errorf("%d iterations, want 3", waits)
	}
	if n, _ := h.cloud.count(); n != 10 {
		t.Errorf("%d machines after the watch, want 10 (6 in gce, 4 in aws)", n)
	}
	if !strings.Contains(r.err, "apply failed; the next iteration retries") {
		t.Errorf("the failed iteration was not reported:\n%s", r.err)
	}
}

func TestWatchNeedsAutoApprove(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := h.run(t, runOpts{tty: true}, "apply", "--watch")
	wantCode(t, r, 1)
	if !strings.Contains(r.err, "--auto-approve") {
		t.Errorf("stderr:\n%s", r.err)
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := h.run(t, runOpts{}, "version", "--json")
	wantCode(t, r, 0)
	var v VersionInfo
	if err := json.Unmarshal([]byte(r.out), &v); err != nil {
		t.Fatal(err)
	}
	if v.Version == "" || !strings.HasPrefix(v.Go, "go") {
		t.Errorf("version: %+v", v)
	}
	r = h.run(t, runOpts{}, "version")
	wantCode(t, r, 0)
	if !strings.HasPrefix(r.out, "transit "+v.Version+"\n") {
		t.Errorf("version:\n%s", r.out)
	}
}

func TestBadFlags(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"plan", "--log-level", "loud"}, "--log-level"},
		{[]string{"apply", "--auto-approve", "--parallel", "0"}, "--parallel 0"},
		{[]string{"plan", "--nope"}, "unknown flag: --nope"},
		{[]string{"plan", "extra"}, "unknown command"},
	} {
		r := h.run(t, runOpts{}, tc.args...)
		wantCode(t, r, 1)
		if !strings.Contains(r.err, tc.want) {
			t.Errorf("%v: stderr lacks %q:\n%s", tc.args, tc.want, r.err)
		}
	}
}

func TestCompletion(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := h.run(t, runOpts{}, "completion", "bash")
	wantCode(t, r, 0)
	if !strings.Contains(r.out, "__start_transit") {
		t.Errorf("no bash completion script")
	}
}

// destroy never asks the platform: it builds no platform driver and tears
// down a cluster whose masters do not answer.
func TestDestroyNeedsNoPlatform(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	wantCode(t, h.run(t, runOpts{}, "apply", "--auto-approve"), 0)
	h.platform.setUnreachable("dial tcp 203.0.113.6:22: connect: connection refused")
	built := h.platform.built.Load()
	r := h.run(t, runOpts{}, "destroy", "--auto-approve")
	wantCode(t, r, 0)
	if h.platform.built.Load() != built {
		t.Errorf("destroy constructed the platform driver")
	}
	if n, g := h.cloud.count(); n != 0 || g != 0 {
		t.Errorf("%d machines and %d groups after destroy, want none", n, g)
	}
	if st := h.state(t); len(st.Nodes) != 0 || len(st.SecurityGroups) != 0 {
		t.Errorf("state after destroy: %d nodes, %d groups", len(st.Nodes), len(st.SecurityGroups))
	}
	// The prompt says what destroy does: no drain.
	wantCode(t, h.run(t, runOpts{}, "apply", "--auto-approve", "--max-rounds", "1"), 3) // unreachable platform: nothing joins
	r = h.run(t, runOpts{tty: true, stdin: "no\n"}, "destroy")
	wantCode(t, r, 1)
	if !strings.Contains(r.out, "will be terminated, without draining") || strings.Contains(r.out, "drained") {
		t.Errorf("destroy prompt:\n%s", r.out)
	}
}

// status says whether each addon serves, and why not, only when the
// platform answered.
func TestStatusAddons(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	wantCode(t, h.run(t, runOpts{}, "apply", "--auto-approve"), 0)
	r := h.run(t, runOpts{}, "status")
	wantCode(t, r, 0)
	if !strings.Contains(r.out, "Addon net: serving.\n") {
		t.Errorf("status lacks the addons:\n%s", r)
	}
	h.platform.setAddonProblem("DaemonSet kube-system/net: 1 of 3 pods updated and available")
	r = h.run(t, runOpts{}, "status", "--json")
	wantCode(t, r, 0)
	checkJSON(t, []byte(r.out))
	var st statusJSON
	if err := json.Unmarshal([]byte(r.out), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Addons) != 1 || st.Addons[0].Ready || !strings.Contains(st.Addons[0].Message, "1 of 3 pods") {
		t.Errorf("status --json: addons %+v", st.Addons)
	}
	if r := h.run(t, runOpts{}, "status"); !strings.Contains(r.out, "Addon net: not serving: DaemonSet kube-system/net: 1 of 3 pods updated and available\n") {
		t.Errorf("status does not say why an addon does not serve:\n%s", r)
	}
	if r := h.run(t, runOpts{}, "status", "--refresh=false"); strings.Contains(r.out, "Addon") {
		t.Errorf("status without refresh asked the platform's addons:\n%s", r)
	}
}

// status works while the platform cannot be asked: it shows the machines
// the clouds report and says why the platform did not answer.
// status shows the version the platform reports, only when it answered.
func TestStatusPlatformVersion(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	wantCode(t, h.run(t, runOpts{}, "apply", "--auto-approve"), 0)
	r := h.run(t, runOpts{}, "status")
	wantCode(t, r, 0)
	if !strings.Contains(r.out, "Platform version v9.9.9-fake, as its control plane reports it.\n") {
		t.Errorf("status lacks the platform's version:\n%s", r)
	}
	r = h.run(t, runOpts{}, "status", "--json")
	checkJSON(t, []byte(r.out))
	var st statusJSON
	if err := json.Unmarshal([]byte(r.out), &st); err != nil {
		t.Fatal(err)
	}
	if st.PlatformVersion != "v9.9.9-fake" {
		t.Errorf("status --json: platform_version %q", st.PlatformVersion)
	}
	h.platform.setUnreachable("dial tcp 203.0.113.6:22: connect: connection refused")
	if r := h.run(t, runOpts{}, "status"); strings.Contains(r.out, "Platform version") {
		t.Errorf("an unreachable platform's version was shown:\n%s", r)
	}
	if r := h.run(t, runOpts{}, "status", "--refresh=false"); strings.Contains(r.out, "Platform version") {
		t.Errorf("status without refresh asked the platform:\n%s", r)
	}
}

func TestStatusPlatformUnreachable(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	wantCode(t, h.run(t, runOpts{}, "apply", "--auto-approve"), 0)
	h.platform.setUnreachable("dial tcp 203.0.113.6:22: connect: connection refused")
	if !h.cloud.vanish("swarm-europe-worker-4") {
		t.Fatal("no machine swarm-europe-worker-4")
	}
	h.platform.down("swarm-europe-worker-4")
	r := h.run(t, runOpts{}, "status")
	wantCode(t, r, 0)
	for _, want := range []string{
		"15 nodes and 2 security groups",
		"Platform unreachable: no master answered (swarm-europe-master-1, swarm-europe-master-2, swarm-europe-master-3): dial tcp 203.0.113.6:22: connect: connection refused\n",
		"phases are those resources.json last recorded",
		"\n    swarm-europe-master-1 ",
	} {
		if !strings.Contains(r.out, want) {
			t.Errorf("status lacks %q:\n%s", want, r)
		}
	}
	r = h.run(t, runOpts{}, "status", "--json")
	wantCode(t, r, 0)
	checkJSON(t, []byte(r.out))
	var st statusJSON
	if err := json.Unmarshal([]byte(r.out), &st); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(st.PlatformError, "platform unreachable: no master answered") || len(st.State.Nodes) != 15 {
		t.Errorf("status --json: platform_error %q, %d nodes", st.PlatformError, len(st.State.Nodes))
	}
}

// setAllQuantities rewrites cluster.json with every deployment's quantity
// set to q.
func (h *harness) setAllQuantities(t *testing.T, q int) {
	t.Helper()
	cfg, err := districts.Load(districts.Paths{Cluster: h.path("cluster.json"), Districts: h.path("districts.json"), Prices: h.path("prices.json")})
	if err != nil {
		t.Fatal(err)
	}
	for i := range cfg.Cluster.Deployments {
		cfg.Cluster.Deployments[i].Quantity = q
	}
	writeJSONFile(t, h.path("cluster.json"), cfg.Cluster)
}

// An apply of a cluster.json that wants no node is refused: one bad write
// of cluster.json must not wipe a platform.
func TestApplyWouldDestroy(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	wantCode(t, h.run(t, runOpts{}, "apply", "--auto-approve"), 0)
	h.setAllQuantities(t, 0)
	for _, o := range []runOpts{{}, {tty: true, stdin: "yes\n"}} {
		r := h.run(t, o, "apply", "--auto-approve")
		wantCode(t, r, 1)
		if !errors.Is(r.error, control.ErrWouldDestroy) || !strings.Contains(r.err, "`transit destroy`") || !strings.Contains(r.err, "--allow-destroy") {
			t.Errorf("apply of an empty cluster.json:\n%s", r)
		}
		if n, _ := h.cloud.count(); n != 16 {
			t.Fatalf("%d machines after a refused apply, want 16", n)
		}
	}
	r := h.run(t, runOpts{}, "apply", "--auto-approve", "--allow-destroy")
	wantCode(t, r, 0)
	if n, g := h.cloud.count(); n != 0 || g != 0 {
		t.Errorf("%d machines and %d groups after apply --allow-destroy, want none", n, g)
	}
}

// Not parallel: t.Setenv.
func TestAllowDestroyFromEnvironment(t *testing.T) {
	h := newHarness(t)
	wantCode(t, h.run(t, runOpts{}, "apply", "--auto-approve"), 0)
	h.setAllQuantities(t, 0)
	t.Setenv("TRANSIT_ALLOW_DESTROY", "true")
	t.Setenv("TRANSIT_REBUILD_PLATFORM", "true")
	wantCode(t, h.run(t, runOpts{}, "apply", "--auto-approve"), 0)
	if n, g := h.cloud.count(); n != 0 || g != 0 {
		t.Errorf("%d machines and %d groups after TRANSIT_ALLOW_DESTROY=true apply, want none", n, g)
	}
	t.Setenv("TRANSIT_REBUILD_PLATFORM", "maybe")
	r := h.run(t, runOpts{}, "apply", "--auto-approve")
	wantCode(t, r, 1)
	if !strings.Contains(r.err, `TRANSIT_REBUILD_PLATFORM="maybe"`) {
		t.Errorf("bad env value not named:\n%s", r.err)
	}
}

// A platform whose masters are all gone is lost: apply stops not converged
// and says how to go on; --rebuild-platform builds a new one over the
// nodes.
func TestRebuildPlatform(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	wantCode(t, h.run(t, runOpts{}, "apply", "--auto-approve"), 0)
	for _, m := range []string{"swarm-europe-master-1", "swarm-europe-master-2", "swarm-europe-master-3"} {
		if !h.cloud.vanish(m) {
			t.Fatalf("no machine %s", m)
		}
	}
	h.platform.loseMasters()

	r := h.run(t, runOpts{}, "plan")
	wantCode(t, r, 0)
	if !strings.Contains(r.out, "--rebuild-platform") {
		t.Errorf("plan of a lost platform does not name --rebuild-platform:\n%s", r)
	}
	r = h.run(t, runOpts{}, "apply", "--auto-approve")
	wantCode(t, r, ExitNotConverged)
	if !errors.Is(r.error, control.ErrPlatformLost) || !strings.Contains(r.err, "--rebuild-platform") {
		t.Errorf("apply over a lost platform:\n%s", r)
	}
	if n, _ := h.cloud.count(); n != 13 {
		t.Errorf("%d machines after apply over a lost platform, want the 13 workers", n)
	}
	r = h.run(t, runOpts{}, "apply", "--auto-approve", "--rebuild-platform")
	wantCode(t, r, 0)
	masters := 0
	for _, n := range h.state(t).Nodes {
		if n.Role == districts.RoleMaster && n.Phase == districts.PhaseJoined {
			masters++
		}
	}
	if masters != 3 {
		t.Errorf("%d joined masters after apply --rebuild-platform, want 3", masters)
	}
}

// A district whose listing drops every machine is not believed: plan says
// so, apply exits 3 with error_kind missing_machines and changes nothing;
// --forget-missing believes it.
func TestMissingMachinesNeedForgetMissing(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.clock = clocktest.NewFake(time.Now()) // the wait for the listing costs no time
	wantCode(t, h.run(t, runOpts{}, "apply", "--auto-approve"), 0)
	gone := h.cloud.vanishDistrict("aws-europe")
	for _, id := range gone {
		h.platform.down(id)
	}
	before, err := os.ReadFile(h.path("resources.json"))
	if err != nil {
		t.Fatal(err)
	}
	r := h.run(t, runOpts{}, "plan")
	wantCode(t, r, 0)
	if !strings.Contains(r.out, "listings lack") || !strings.Contains(r.out, gone[0]) || !strings.Contains(r.out, "--forget-missing") {
		t.Errorf("plan does not name the missing machines and --forget-missing:\n%s", r)
	}
	r = h.run(t, runOpts{}, "apply", "--auto-approve", "--json")
	wantCode(t, r, ExitNotConverged)
	if !errors.Is(r.error, control.ErrMissingMachines) || !strings.Contains(r.out, `"error_kind":"missing_machines"`) {
		t.Errorf("apply with machines missing:\n%s", r)
	}
	if after, err := os.ReadFile(h.path("resources.json")); err != nil || string(after) != string(before) {
		t.Errorf("resources.json changed by a run that did not believe its listing (err %v)", err)
	}
	if n, _ := h.cloud.count(); n != 16-len(gone) {
		t.Errorf("%d machines: a run that did not believe its listing launched", n)
	}
	r = h.run(t, runOpts{}, "apply", "--auto-approve", "--forget-missing")
	wantCode(t, r, 0)
	if n, _ := h.cloud.count(); n != 16 {
		t.Errorf("%d machines after --forget-missing, want the 16 of cluster.json", n)
	}
}

// A signal during apply cancels the context: the loop stops, the state is
// saved, and the CLI exits 130 naming what was left undone.
func TestApplyInterrupted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts runOpts
		args []string
	}{
		{"terminal", runOpts{tty: true}, []string{"apply", "--auto-approve"}},
		{"json", runOpts{}, []string{"apply", "--auto-approve", "--json"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			// The operator presses Ctrl-C while the first node installs;
			// the install gives up when its context ends.
			h.platform.setOnInstall(func(ictx context.Context, _ districts.Node) error {
				cancel()
				<-ictx.Done()
				return ictx.Err()
			})
			tc.opts.ctx = ctx
			r := h.run(t, tc.opts, tc.args...)
			wantCode(t, r, ExitInterrupted)
			if !errors.Is(r.error, context.Canceled) {
				t.Errorf("error does not match context.Canceled: %v", r.error)
			}
			for _, want := range []string{"Error: interrupted: the state is saved", "; run apply again to finish\n"} {
				if !strings.Contains(r.err, want) {
					t.Errorf("stderr lacks %q:\n%s", want, r)
				}
			}
			if tc.opts.tty && !strings.Contains(r.out, "\nApply interrupted in round 1; the state is saved.\n") {
				t.Errorf("the terminal view does not say the apply was interrupted:\n%s", r.out)
			}
			if !tc.opts.tty {
				_, last := jsonLines(t, r)
				if last.ErrorKind != kindInterrupted || last.Result.Converged {
					t.Errorf("result line: %+v", last)
				}
				// What is left undone is named in the message.
				for _, l := range last.Result.Left {
					if !strings.Contains(last.Error, l) {
						t.Errorf("left %q is not in the message %q", l, last.Error)
					}
				}
			}
			// What was done is saved: the machines launched before the
			// signal are in resources.json.
			n, _ := h.cloud.count()
			if got := len(h.state(t).Nodes); n == 0 || got != n {
				t.Errorf("resources.json has %d nodes, the cloud %d machines", got, n)
			}
			// The next run finishes.
			h.platform.setOnInstall(nil)
			wantCode(t, h.run(t, runOpts{}, "apply", "--auto-approve"), 0)
			if n, _ := h.cloud.count(); n != 16 {
				t.Errorf("%d machines after the next apply, want 16", n)
			}
		})
	}
}

func TestInterruptedMessage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&interruptedError{verb: "apply", left: []string{"join node a", "join node b"}, err: context.Canceled},
			"interrupted: the state is saved; left undone: join node a, join node b; run apply again to finish"},
		{&interruptedError{verb: "destroy", err: context.Canceled},
			"interrupted: the state is saved; run destroy again to finish"},
		{explain(fmt.Errorf("list instances: %w", context.Canceled), control.Result{}, "apply"),
			"interrupted before apply changed anything: list instances: context canceled"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("message %q, want %q", got, tc.want)
		}
		if ExitCode(explain(tc.err, control.Result{}, "apply")) != ExitInterrupted || errorKind(tc.err) != kindInterrupted {
			t.Errorf("%v: exit code %d, kind %q", tc.err, ExitCode(explain(tc.err, control.Result{}, "apply")), errorKind(tc.err))
		}
	}
}

// apply --watch interrupted while an apply changes the cluster exits 130,
// like a single apply; interrupted between applies it exits 0 (TestWatch).
func TestWatchInterruptedInApply(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	h.clock = &clocktest.Fake{}
	h.platform.setOnInstall(func(ictx context.Context, _ districts.Node) error {
		cancel()
		<-ictx.Done()
		return ictx.Err()
	})
	r := h.run(t, runOpts{ctx: ctx}, "apply", "--watch", "--auto-approve", "--interval", watchInterval.String())
	wantCode(t, r, ExitInterrupted)
	if !strings.Contains(r.err, "Error: interrupted: the state is saved") {
		t.Errorf("stderr:\n%s", r.err)
	}
}

// A cloud's refusal says what kind it is, wherever it stopped the run: a
// monitor retries throttling later and pages someone for credentials.
func TestCloudErrorKinds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		kind string
	}{
		{withKind(kindRefresh, fmt.Errorf("district %q: list: %w", "aws-eu", fmt.Errorf("%w: EC2 refused credential \"a\"", provider.ErrCloudAuth))), kindCloudAuth},
		{fmt.Errorf("launch: %w", provider.ErrThrottled), kindCloudThrottled},
		{fmt.Errorf("launch: %w: VcpuLimitExceeded", provider.ErrQuota), kindCloudQuota},
		{withKind(kindRefresh, errors.New("connection refused")), kindRefresh},
	} {
		if got := errorKind(tc.err); got != tc.kind {
			t.Errorf("errorKind(%v) = %q, want %q", tc.err, got, tc.kind)
		}
	}
}

// A state key made by keygen opens what it sealed; two are never alike.
func TestStateKeygen(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := h.run(t, runOpts{}, "state", "keygen")
	wantCode(t, r, 0)
	k, err := seal.Parse(r.out)
	if err != nil {
		t.Fatalf("keygen printed %q: %v", r.out, err)
	}
	if r.err != "public key: "+k.Recipient()+"\n" {
		t.Errorf("stderr %q, want the public key", r.err)
	}
	again := h.run(t, runOpts{}, "state", "keygen")
	if again.out == r.out {
		t.Error("two keygens printed the same key")
	}
}

// The state commands on a path: list, pull, push from stdin, and a
// force-unlock that the kernel's lock makes pointless.
func TestStateCommands(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	wantCode(t, h.run(t, runOpts{}, "apply", "--auto-approve"), 0)
	r := h.run(t, runOpts{}, "state", "list", "--json")
	wantCode(t, r, 0)
	var past []struct {
		Serial  int64 `json:"serial"`
		Current bool  `json:"current"`
	}
	if err := json.Unmarshal([]byte(r.out), &past); err != nil || len(past) != 2 || !past[0].Current || past[0].Serial != past[1].Serial {
		t.Fatalf("state list: %v\n%s", err, r.out)
	}
	pulled := h.run(t, runOpts{}, "state", "pull")
	wantCode(t, pulled, 0)
	st := h.state(t)
	if !strings.Contains(pulled.out, st.Lineage) || !strings.Contains(pulled.out, `"serial": `+strconv.FormatInt(st.Serial, 10)) {
		t.Fatalf("state pull:\n%s", pulled.out)
	}
	// The same state again is not newer: refused, exit 1.
	r = h.run(t, runOpts{stdin: pulled.out}, "state", "push", "-")
	wantCode(t, r, 1)
	if !strings.Contains(r.err, "not newer") {
		t.Errorf("push of the same state:\n%s", r.err)
	}
	r = h.run(t, runOpts{stdin: pulled.out}, "state", "push", "--force", "-")
	wantCode(t, r, 0)
	if got := h.state(t).Serial; got != st.Serial+1 {
		t.Errorf("after a forced push: serial %d, want %d", got, st.Serial+1)
	}
	r = h.run(t, runOpts{}, "force-unlock", "abc")
	wantCode(t, r, 1)
	if !strings.Contains(r.err, "not locked") {
		t.Errorf("force-unlock of an unlocked path:\n%s", r.err)
	}
}

// transit mesh rotate on a cluster without the mesh is refused as a usage
// error before anything changes, naming why.
func TestMeshRotateWithoutMesh(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	wantCode(t, h.run(t, runOpts{}, "apply", "--auto-approve"), 0)
	before, err := os.ReadFile(h.path("resources.json"))
	if err != nil {
		t.Fatal(err)
	}
	r := h.run(t, runOpts{}, "mesh", "rotate", "--auto-approve", "--json", "paper-worker-1")
	wantCode(t, r, ExitError)
	if !errors.Is(r.error, control.ErrNoMesh) || !strings.Contains(r.out, `"error_kind":"usage"`) || !strings.Contains(r.out, "cluster swarm-europe runs none (network.mesh is none), so it has no mesh key to rotate") {
		t.Errorf("mesh rotate without a mesh:\n%s", r)
	}
	if after, err := os.ReadFile(h.path("resources.json")); err != nil || string(after) != string(before) {
		t.Errorf("resources.json changed by a refused rotation (err %v)", err)
	}
}
