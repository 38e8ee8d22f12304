package e2e

import (
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudtransit/transit/cloudsim"
)

// The e2e tests come in groups that run at once (each its own top-level
// test, t.Parallel): a group's tests share what they can (one emulated
// multi-cloud for the cloud tests) and run one after the other; the groups
// share nothing (each has its own local root, subnets and cluster ids).

// TestSwarm is the local Swarm group: the lifecycle of the example
// cluster, two CI runners sharing a remote state, then transit autoscale
// adding and removing workers for a service.
func TestSwarm(t *testing.T) {
	group(t, "swarm", func(t *testing.T) {
		t.Run("Lifecycle", timed(testSwarmLifecycle))
		t.Run("CIRunners", timed(testCIRunners))
		t.Run("Autoscale", timed(testAutoscale))
	})
}

// TestKubernetes is the local Kubernetes group: one cluster through its
// nodes' lifecycle.
func TestKubernetes(t *testing.T) {
	group(t, "kubernetes", func(t *testing.T) {
		t.Run("Lifecycle", timed(testKubernetesLifecycle))
	})
}

// TestAddons is the addons group: one local Kubernetes cluster that runs
// both addons' steps and transit autoscale's, beside TestKubernetes's
// (their steps on one cluster took 24 minutes, one after the other).
func TestAddons(t *testing.T) {
	group(t, "addons", func(t *testing.T) {
		t.Run("Kubernetes", timed(testKubernetesAddons))
	})
}

// TestClouds is the emulated multi-cloud group: one emulator (AWS, GCE and
// OpenStack whose instances are local nodes, networks apart) serves a
// Swarm across clouds, a Swarm on the node mesh and Kubernetes across
// clouds, one after the other.
func TestClouds(t *testing.T) {
	group(t, "clouds", func(t *testing.T) {
		env := startClouds(t, cloudsim.Profile{Name: cloudsim.ProfileZero})
		t.Run("Swarm", timed(func(t *testing.T) { testCloudSwarm(t, env.with(t)) }))
		t.Run("SwarmOnTheMesh", timed(func(t *testing.T) { testCloudSwarmOnTheMesh(t, env.with(t)) }))
		t.Run("KubernetesAcrossClouds", timed(func(t *testing.T) { testKubernetesAcrossClouds(t, env.with(t)) }))
	})
}

// group runs one group beside the others and records its time.
func group(t *testing.T, name string, fn func(t *testing.T)) {
	requireE2E(t)
	t.Parallel()
	began := time.Now()
	t.Cleanup(func() {
		times.add(groupTime{name: name, test: t.Name(), took: time.Since(began), failed: t.Failed(), steps: stepTimes(t.Name())})
	})
	fn(t)
}

// groupTime is how long a group took, its cleanup included.
type groupTime struct {
	name   string
	test   string // the group's test
	took   time.Duration
	failed bool
	steps  []string
}

// groupTimes collect the groups' and their tests' times for the report
// TestMain writes.
type groupTimes struct {
	mu     sync.Mutex
	groups []groupTime
	tests  map[string]time.Duration // test name → time
	// steps are the lifecycle steps' times by their test's name, in order.
	steps map[string][]stepTime
}

type stepTime struct {
	name string
	took time.Duration
}

// step records the time of one of test's lifecycle steps.
func (g *groupTimes) step(test, name string, took time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.steps[test] = append(g.steps[test], stepTime{name, took})
}

var times = &groupTimes{tests: map[string]time.Duration{}, steps: map[string][]stepTime{}}

func (g *groupTimes) add(t groupTime) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.groups = append(g.groups, t)
}

// stepTimes are the times of a group's direct subtests, as "name 1m2s".
func stepTimes(parent string) []string {
	times.mu.Lock()
	defer times.mu.Unlock()
	var out []string
	for name, took := range times.tests {
		if rest, ok := strings.CutPrefix(name, parent+"/"); ok && !strings.Contains(rest, "/") {
			out = append(out, fmt.Sprintf("%s %s", rest, took.Round(time.Second)))
		}
	}
	slices.Sort(out)
	return out
}

// timed runs a group's test and records its time.
func timed(fn func(t *testing.T)) func(t *testing.T) {
	return func(t *testing.T) {
		began := time.Now()
		t.Cleanup(func() {
			times.mu.Lock()
			defer times.mu.Unlock()
			times.tests[t.Name()] = time.Since(began)
		})
		fn(t)
	}
}

// report writes the groups' times, slowest first, and the package's.
func (g *groupTimes) report(w io.Writer, total time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.groups) == 0 {
		return
	}
	slices.SortFunc(g.groups, func(a, b groupTime) int { return int(b.took - a.took) })
	fmt.Fprintf(w, "e2e groups (run at once), package %s:\n", total.Round(time.Second))
	for _, gt := range g.groups {
		verdict := "ok"
		if gt.failed {
			verdict = "FAIL"
		}
		fmt.Fprintf(w, "  %-11s %4s %8s  %s\n", gt.name, verdict, gt.took.Round(time.Second), strings.Join(gt.steps, ", "))
		for _, test := range slices.Sorted(maps.Keys(g.steps)) {
			if rest, ok := strings.CutPrefix(test, gt.test+"/"); ok {
				for _, st := range g.steps[test] {
					fmt.Fprintf(w, "      %8s  %s: %s\n", st.took.Round(time.Second), rest, st.name)
				}
			}
		}
	}
}

// writeReport puts the report where TRANSIT_E2E_TIMES says (make test
// prints it at its end), and on standard error.
func writeReport(total time.Duration) {
	var b strings.Builder
	times.report(&b, total)
	if b.Len() == 0 {
		return
	}
	fmt.Fprint(os.Stderr, b.String())
	if path := os.Getenv("TRANSIT_E2E_TIMES"); path != "" {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err == nil {
			_ = os.WriteFile(path, []byte(b.String()), 0o644)
		}
	}
}

// TestGroupTimesReport: the report make test prints names each group,
// slowest first, its tests and each lifecycle step, so growth shows.
func TestGroupTimesReport(t *testing.T) {
	g := &groupTimes{tests: map[string]time.Duration{}, steps: map[string][]stepTime{}}
	g.tests["TestKubernetes/Lifecycle"] = 9 * time.Minute
	g.step("TestKubernetes/Lifecycle", "launch", 3*time.Minute)
	g.step("TestKubernetes/Lifecycle", "destroy", 20*time.Second)
	g.step("TestSwarm/Lifecycle", "launch", time.Minute)
	g.add(groupTime{name: "swarm", test: "TestSwarm", took: 2 * time.Minute, steps: []string{"Lifecycle 2m0s"}})
	g.add(groupTime{name: "kubernetes", test: "TestKubernetes", took: 10 * time.Minute, failed: true, steps: []string{"Lifecycle 9m0s"}})
	var b strings.Builder
	g.report(&b, 11*time.Minute)
	want := `e2e groups (run at once), package 11m0s:
  kubernetes  FAIL    10m0s  Lifecycle 9m0s
          3m0s  Lifecycle: launch
           20s  Lifecycle: destroy
  swarm         ok     2m0s  Lifecycle 2m0s
          1m0s  Lifecycle: launch
`
	if b.String() != want {
		t.Errorf("report:\n%s\nwant:\n%s", b.String(), want)
	}
}
