package e2e

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/platforms/ssh"
)

// exampleCluster is the shape of the repository's example: a manager and
// two workers in district A, two workers in district B, every deployment
// tagged. The e2e districts and subnets differ from the example's so a
// demo and the tests can share a host.
func exampleCluster() (districts.Cluster, []districts.District) {
	tags := func(location string) map[string]string { return map[string]string{"location": location} }
	c := districts.Cluster{
		Type: "cluster", ID: "e2e", Platform: "swarm",
		Flavors: []districts.Flavor{{Flavor: "small", Cores: 1, MemoryGB: 1, DiskGB: 10}},
		Deployments: []districts.Deployment{
			{District: "e2e-a", Flavor: "small", Role: districts.RoleMaster, Quantity: 1, Tags: tags("Germany")},
			{District: "e2e-a", Flavor: "small", Role: districts.RoleWorker, Quantity: 2, Tags: tags("Germany")},
			{District: "e2e-b", Flavor: "small", Role: districts.RoleWorker, Quantity: 2, Tags: tags("France")},
		},
		Strategy: districts.Strategy{MaxSurge: districts.Int(1), MaxUnavailable: districts.Int(1), DrainTimeout: districts.Duration(2 * time.Minute)},
	}
	ds := []districts.District{
		{Type: "district", ID: "e2e-a", Provider: "local", LocalSubnet: "10.241.1.0/24", Flavors: []districts.DistrictFlavor{{Flavor: "small"}}},
		{Type: "district", ID: "e2e-b", Provider: "local", LocalSubnet: "10.241.2.0/24", Flavors: []districts.DistrictFlavor{{Flavor: "small"}}},
	}
	return c, ds
}

// testSwarmLifecycle drives one real Swarm through everything transit does
// to it, in order; a step that fails stops the rest, which would only
// report the same breakage again.
func testSwarmLifecycle(t *testing.T) {
	cfg, ds := exampleCluster()
	c := newCluster(t, swarmRoot, cfg, ds)
	c.runSteps(t, []lifecycleStep{
		{"launch the example from nothing", testLaunch},
		{"a service constrained to a tag runs only on matching nodes", testConstraint},
		{"scale workers up and down, draining before removal", testScale},
		{"migrate the workers from one district to the other", testMigrate},
		{"masters: 1 → 2 → 1 → 3 → 1, one leader throughout", testMasters},
		{"a node killed behind transit's back is replaced", testKilledNode},
		{"a flushed FORWARD jump is repaired", testFirewallRepair},
		{"kill -9 transit during apply, then converge", testKill},
		{"a drain that would strand a service is refused", testRefusedDrain},
		{"bad input gives clear errors and keeps the state", testBadInput},
		{"destroy leaves nothing behind", testDestroy},
	})
}

// lifecycleStep is one step of a lifecycle test: later steps build on
// what the earlier ones left.
type lifecycleStep struct {
	name string
	fn   func(t *testing.T, c *cluster)
}

// runSteps runs steps in order on c, each a subtest; the first that
// fails (or panics) ends the test.
func (c *cluster) runSteps(t *testing.T, steps []lifecycleStep) {
	for _, s := range steps {
		began := time.Now()
		ok := t.Run(s.name, func(t *testing.T) {
			// A step's panic fails the step, not the binary: the group's
			// cluster is still destroyed and the other groups go on.
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("panic: %v\n%s", r, debug.Stack())
				}
			}()
			s.fn(t, c.with(t))
		})
		times.step(t.Name(), s.name, time.Since(began))
		if !ok {
			return
		}
	}
}

// with returns the cluster reporting to tb (a subtest).
func (c *cluster) with(tb testing.TB) *cluster {
	cc := *c
	cc.tb = tb
	return &cc
}

// swarmNodes is `docker node ls` on the manager: hostname → "status
// availability role".
func (c *cluster) swarmNodes(res districts.Resources) map[string]string {
	out := c.mustOn(c.manager(res), `docker node ls --format '{{.Hostname}} {{.Status}} {{.Availability}} {{if .ManagerStatus}}manager{{else}}worker{{end}}'`)
	got := map[string]string{}
	for line := range strings.Lines(out) {
		host, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
		got[host] = rest
	}
	return got
}

// checkAgree asserts that docker node ls, transit status and the firewall
// tell the same story.
func (c *cluster) checkAgree(res districts.Resources) {
	c.tb.Helper()
	want := map[string]string{}
	for _, n := range res.Nodes {
		if n.Phase != districts.PhaseJoined {
			c.tb.Errorf("node %s is %s, want joined", n.ID, n.Phase)
		}
		role := "worker"
		if n.Role == districts.RoleMaster {
			role = "manager"
		}
		want[n.ID] = "Ready Active " + role
	}
	if got := c.swarmNodes(res); !maps.Equal(got, want) {
		c.tb.Errorf("docker node ls disagrees with transit status:\n got  %v\n want %v", got, want)
	}
	// Every node's address is allowed into every district's group.
	var addrs []string
	for _, n := range res.Nodes {
		addrs = append(addrs, n.PublicIP)
	}
	for _, g := range res.SecurityGroups {
		out, err := exec.Command("iptables", "-S", g.ProviderID).CombinedOutput()
		if err != nil {
			c.tb.Errorf("group %s: iptables -S %s: %v\n%s", g.ID, g.ProviderID, err, out)
			continue
		}
		var sources []string
		for line := range strings.Lines(string(out)) {
			f := strings.Fields(line)
			if len(f) >= 6 && f[0] == "-A" && f[2] == "-s" && f[4] == "-j" && f[5] == "ACCEPT" {
				sources = append(sources, strings.TrimSuffix(f[3], "/32"))
			}
		}
		if !sameSet(sources, addrs) {
			c.tb.Errorf("group %s (chain %s) allows %v, want every node: %v", g.ID, g.ProviderID, sources, addrs)
		}
		if !strings.Contains(string(out), "-j DROP") {
			c.tb.Errorf("chain %s does not end in DROP:\n%s", g.ProviderID, out)
		}
	}
}

func sameSet(a, b []string) bool {
	return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
}

func testLaunch(t *testing.T, c *cluster) {
	c.apply()
	res := c.status()
	if len(res.Nodes) != 5 {
		t.Fatalf("%d nodes, want 5: %v", len(res.Nodes), res.Nodes)
	}
	c.checkAgree(res)
	// The deployment's tags are node labels.
	mgr := c.manager(res)
	for _, n := range res.Nodes {
		want := "Germany"
		if n.District == "e2e-b" {
			want = "France"
		}
		got := strings.TrimSpace(c.mustOn(mgr, "docker node inspect --format '{{index .Spec.Labels \"location\"}}' "+n.ID))
		if got != want {
			t.Errorf("node %s: label location=%q, want %q", n.ID, got, want)
		}
		if n.Tags["location"] != want {
			t.Errorf("transit status: node %s tags %v, want location=%s", n.ID, n.Tags, want)
		}
	}
	// Converged means a second apply has nothing to do.
	if r := c.transit("plan", "--detailed-exitcode"); r.code != 0 {
		t.Errorf("plan after apply: exit %d, want 0 (no changes)\n%s", r.code, r.stdout)
	}
}

// service creates a service on the manager and waits until its tasks run.
// Its tasks ignore SIGTERM (sleep is their pid 1), so stopping one takes
// the stop grace period: 1s unless args say otherwise.
func (c *cluster) service(res districts.Resources, name string, replicas int, args ...string) {
	c.tb.Helper()
	mgr := c.manager(res)
	mode := "--replicas " + strconv.Itoa(replicas)
	if replicas == 0 {
		mode = "--mode global"
	}
	c.mustOn(mgr, fmt.Sprintf("docker service create --detach --quiet --no-resolve-image --name %s %s --stop-grace-period 1s %s %s sleep 100000",
		name, mode, strings.Join(args, " "), image))
	c.waitRunning(res, name, replicas)
}

// running lists the nodes running name's tasks.
func (c *cluster) running(ctx context.Context, mgr districts.Node, name string) ([]string, error) {
	out, err := c.on(ctx, mgr, "docker service ps --filter desired-state=running --format '{{.Node}} {{.CurrentState}}' "+name)
	if err != nil {
		return nil, err
	}
	var nodes []string
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) >= 2 && f[1] == "Running" {
			nodes = append(nodes, f[0])
		}
	}
	return nodes, nil
}

func (c *cluster) waitRunning(res districts.Resources, name string, replicas int) []string {
	c.tb.Helper()
	mgr := c.manager(res)
	if replicas == 0 {
		replicas = len(res.Nodes)
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		nodes, err := c.running(context.Background(), mgr, name)
		if err != nil {
			c.tb.Fatal(err)
		}
		if len(nodes) == replicas {
			return nodes
		}
		if time.Now().After(deadline) {
			out, _ := c.on(context.Background(), mgr, "docker service ps --no-trunc "+name)
			c.tb.Fatalf("service %s: %d of %d tasks running after 90s:\n%s", name, len(nodes), replicas, out)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func testConstraint(t *testing.T, c *cluster) {
	res := c.status()
	c.service(res, "germany", 4, "--constraint node.labels.location==Germany")
	nodes := c.waitRunning(res, "germany", 4)
	for _, host := range nodes {
		n, ok := find(res, host)
		if !ok || n.Tags["location"] != "Germany" {
			t.Errorf("a task of the Germany-only service runs on %s (%v)", host, n.Tags)
		}
	}
	// The engines transit started on these registry-less machines ran
	// the tasks from their own images, asking no registry first.
	for _, n := range res.Nodes {
		if out := c.mustOn(n, "grep -c 'pulling image failed' /run/transit/dockerd.log || true"); strings.TrimSpace(out) != "0" {
			t.Errorf("node %s's engine asked a registry for the service's image (%s failed pulls in its log)", n.ID, strings.TrimSpace(out))
		}
	}
	c.mustOn(c.manager(res), "docker service rm germany >/dev/null")
}

func find(res districts.Resources, id string) (districts.Node, bool) {
	for _, n := range res.Nodes {
		if n.ID == id {
			return n, true
		}
	}
	return districts.Node{}, false
}

// applyEvents runs apply --json to the end and returns its action events
// as "kind phase node" strings.
func (c *cluster) applyEvents() []string {
	c.tb.Helper()
	var evs []string
	c.applyUntil(func(ev map[string]any) bool {
		if kind, phase, node := action(ev); kind != "" {
			evs = append(evs, kind+" "+phase+" "+node)
		}
		if ev["type"] == "result" {
			if r, _ := ev["result"].(map[string]any); r != nil && r["converged"] != true {
				c.tb.Errorf("apply did not converge: %v", r)
			}
		}
		return true
	})
	return evs
}

func testScale(t *testing.T, c *cluster) {
	c.setQuantity("e2e-b", districts.RoleWorker, 3)
	c.apply()
	res := c.status()
	if len(res.Nodes) != 6 {
		t.Fatalf("%d nodes after scaling up, want 6", len(res.Nodes))
	}
	c.checkAgree(res)

	// Every node runs a task of a global service, so every drain has work
	// to wait for.
	c.service(res, "everywhere", 0)
	c.setQuantity("e2e-b", districts.RoleWorker, 2)
	evs := c.applyEvents()
	removed := ""
	for _, e := range evs {
		if strings.HasPrefix(e, "terminate start ") {
			removed = strings.TrimPrefix(e, "terminate start ")
		}
	}
	if removed == "" {
		t.Fatalf("scaling down terminated nothing; events:\n%s", strings.Join(evs, "\n"))
	}
	order := []string{"drain finish " + removed, "remove finish " + removed, "terminate start " + removed}
	last := -1
	for _, want := range order {
		i := slices.Index(evs, want)
		if i < last || i < 0 {
			t.Errorf("want %q after the previous step; events:\n%s", want, strings.Join(evs, "\n"))
		}
		last = i
	}
	res = c.status()
	if len(res.Nodes) != 5 {
		var nodes []string
		for _, n := range res.Nodes {
			nodes = append(nodes, n.ID+" "+string(n.Phase)+" "+n.ProviderID)
		}
		t.Fatalf("%d nodes after scaling down, want 5: %s; events:\n%s", len(res.Nodes), strings.Join(nodes, ", "), strings.Join(evs, "\n"))
	}
	c.checkAgree(res)
	c.mustOn(c.manager(res), "docker service rm everywhere >/dev/null")
}

func testMigrate(t *testing.T, c *cluster) {
	res := c.status()
	c.service(res, "web", 2, "--constraint node.role==worker")
	mgr := c.manager(res)

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	maxNodes, minRunning, samples := 0, 99, 0
	var sampleErr error
	wg.Go(func() {
		for ctx.Err() == nil {
			if s, err := c.saved(); err == nil {
				live := 0
				for _, n := range s.Nodes {
					if n.Phase != districts.PhaseTerminating {
						live++
					}
				}
				mu.Lock()
				maxNodes = max(maxNodes, live)
				mu.Unlock()
			}
			nodes, err := c.running(ctx, mgr, "web")
			mu.Lock()
			if err != nil && ctx.Err() == nil {
				sampleErr = err
			} else if err == nil {
				samples++
				minRunning = min(minRunning, len(nodes))
			}
			mu.Unlock()
			time.Sleep(200 * time.Millisecond)
		}
	})
	c.setQuantity("e2e-a", districts.RoleWorker, 0)
	c.setQuantity("e2e-b", districts.RoleWorker, 4)
	c.apply()
	stop()
	wg.Wait()

	if sampleErr != nil {
		t.Errorf("sampling the service: %v", sampleErr)
	}
	t.Logf("migration: %d samples, at most %d nodes, at least %d running replicas", samples, maxNodes, minRunning)
	if maxNodes > 5+1 {
		t.Errorf("the migration ran %d nodes at once, want at most 5 + max_surge 1", maxNodes)
	}
	if minRunning < 1 {
		t.Errorf("the replicated service had no running replica during the migration")
	}
	res = c.status()
	for _, n := range res.Nodes {
		if n.Role == districts.RoleWorker && n.District != "e2e-b" {
			t.Errorf("worker %s still in %s", n.ID, n.District)
		}
	}
	if len(res.Nodes) != 5 {
		t.Errorf("%d nodes after the migration, want 5", len(res.Nodes))
	}
	c.checkAgree(res)
	c.waitRunning(res, "web", 2)
}

// testMasters grows the swarm to two managers and back to one, then to
// three and back to one (3 → 2 → 1): each leaving manager is demoted and
// leaves only once the swarm agrees, and while transit works the first
// manager, which stays, always sees exactly one leader.
func testMasters(t *testing.T, c *cluster) {
	c.cfg.Deployments = append(c.cfg.Deployments, districts.Deployment{
		District: "e2e-b", Flavor: "small", Role: districts.RoleMaster, Quantity: 0,
		Tags: map[string]string{"location": "France"},
	})
	managers := func(res districts.Resources) int {
		n := 0
		for _, state := range c.swarmNodes(res) {
			if strings.HasSuffix(state, " manager") {
				n++
			}
		}
		return n
	}
	first := c.manager(c.status())
	for _, extra := range []int{1, 2} {
		for _, q := range []int{extra, 0} {
			c.setQuantity("e2e-b", districts.RoleMaster, q)
			samples, problems := c.whileApplying(func(ctx context.Context) error { return c.oneLeader(ctx, first) })
			t.Logf("%d → %d extra managers: %d leader samples", extra-q, q, samples)
			for _, p := range problems {
				t.Errorf("%d extra managers → %d: %v", extra-q, q, p)
			}
			res := c.status()
			if got := managers(res); got != 1+q {
				t.Errorf("%d managers, want %d", got, 1+q)
			}
			c.checkAgree(res)
		}
	}
	c.cfg.Deployments = c.cfg.Deployments[:len(c.cfg.Deployments)-1]
	c.writeConfig()
}

// oneLeader asks mgr's `docker node ls` for the managers: it must answer
// (a swarm without a leader refuses) and name exactly one leader.
func (c *cluster) oneLeader(ctx context.Context, mgr districts.Node) error {
	out, err := c.on(ctx, mgr, `docker node ls --format '{{.Hostname}} {{.ManagerStatus}}'`)
	if err != nil {
		return err
	}
	leaders := 0
	for line := range strings.Lines(out) {
		if strings.HasSuffix(strings.TrimSpace(line), " Leader") {
			leaders++
		}
	}
	if leaders != 1 {
		return fmt.Errorf("%d leaders:\n%s", leaders, out)
	}
	return nil
}

// whileApplying runs apply to convergence while sample runs over and
// over; it returns how often sample ran and the distinct problems it saw.
func (c *cluster) whileApplying(sample func(ctx context.Context) error) (int, []string) {
	c.tb.Helper()
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	samples, seen := 0, map[string]bool{}
	wg.Go(func() {
		for ctx.Err() == nil {
			sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			err := sample(sctx)
			cancel()
			mu.Lock()
			if ctx.Err() == nil {
				samples++
				if err != nil {
					seen[err.Error()] = true
				}
			}
			mu.Unlock()
			time.Sleep(200 * time.Millisecond)
		}
	})
	c.apply()
	stop()
	wg.Wait()
	return samples, slices.Sorted(maps.Keys(seen))
}

// testKilledNode kills every process of a worker (its machine crashed
// behind transit's back): the next apply replaces it, and the swarm no
// longer lists it.
func testKilledNode(t *testing.T, c *cluster) {
	res := c.status()
	var victim districts.Node
	for _, n := range res.Nodes {
		if n.Role == districts.RoleWorker {
			victim = n
		}
	}
	out, err := exec.Command("ip", "netns", "pids", "transit-"+victim.ProviderID).Output()
	if err != nil {
		t.Fatalf("pids of %s: %v", victim.ID, err)
	}
	pids := strings.Fields(string(out))
	if len(pids) == 0 {
		t.Fatalf("node %s runs no process", victim.ID)
	}
	// The list is a moment old: a short-lived process of the node (a
	// health check, an exec) may have exited since, and that is no
	// failure; the node's long-lived ones are there to kill.
	killed := 0
	for _, p := range pids {
		pid, err := strconv.Atoi(p)
		if err != nil {
			t.Fatalf("pid %q of %s: %v", p, victim.ID, err)
		}
		switch err := syscall.Kill(pid, syscall.SIGKILL); {
		case err == nil:
			killed++
		case !errors.Is(err, syscall.ESRCH):
			t.Fatalf("kill %d of %s: %v", pid, victim.ID, err)
		}
	}
	if killed == 0 {
		t.Fatalf("node %s: every process of it exited before it was killed", victim.ID)
	}
	// The swarm notices a few heartbeats later; a member it still calls
	// ready is not transit's to remove.
	for deadline := time.Now().Add(2 * time.Minute); !strings.HasPrefix(c.swarmNodes(res)[victim.ID], "Down"); time.Sleep(time.Second) {
		if time.Now().After(deadline) {
			t.Fatalf("the swarm still lists %s as %q", victim.ID, c.swarmNodes(res)[victim.ID])
		}
	}
	c.apply()
	res = c.status()
	for _, n := range res.Nodes {
		if n.ProviderID == victim.ProviderID {
			t.Errorf("the killed node %s (%s) is still in the state as %s", n.ID, n.ProviderID, n.Phase)
		}
	}
	if len(res.Nodes) != 5 {
		t.Errorf("%d nodes, want 5: the killed node was not replaced", len(res.Nodes))
	}
	c.checkAgree(res) // docker node ls no longer lists the dead node
	c.checkNoOrphans(res)
}

// testFirewallRepair deletes the FORWARD jumps to the cluster's chains (a
// firewalld reload does that): the next apply puts them back.
func testFirewallRepair(t *testing.T, c *cluster) {
	jumps := func() []string {
		out, err := exec.Command("iptables", "-S", "FORWARD").Output()
		if err != nil {
			t.Fatal(err)
		}
		var rules []string
		for line := range strings.Lines(string(out)) {
			f := strings.Fields(line)
			if len(f) >= 2 && f[0] == "-A" && c.chains[f[len(f)-1]] {
				rules = append(rules, strings.TrimSpace(line))
			}
		}
		return rules
	}
	before := jumps()
	if len(before) == 0 {
		t.Fatal("no FORWARD jump to the cluster's chains")
	}
	for _, rule := range before {
		args := append([]string{"-D"}, strings.Fields(rule)[1:]...)
		if out, err := exec.Command("iptables", args...).CombinedOutput(); err != nil {
			t.Fatalf("iptables %v: %v\n%s", args, err, out)
		}
	}
	c.apply()
	if after := jumps(); !sameSet(after, before) {
		t.Errorf("FORWARD jumps after apply:\n  %s\nwant:\n  %s", strings.Join(after, "\n  "), strings.Join(before, "\n  "))
	}
	c.checkAgree(c.status())
}

func testKill(t *testing.T, c *cluster) {
	res := c.status()
	// Drains take 10s here, so the kill lands in the middle of one.
	c.service(res, "everywhere", 0, "--stop-grace-period 10s")
	points := []struct {
		name        string
		quantity    int
		kind, phase string
		delay       time.Duration
	}{
		{"after a launch", 5, "launch", "finish", 0},
		{"during install", 6, "install", "start", 700 * time.Millisecond},
		{"during a drain", 4, "drain", "start", time.Second},
	}
	for _, p := range points {
		c.setQuantity("e2e-b", districts.RoleWorker, p.quantity)
		killed := c.applyKilledAt(p.kind, p.phase, p.delay)
		if !killed {
			t.Errorf("%s: apply ended before the kill point", p.name)
		}
		c.apply()
		res := c.status()
		if len(res.Nodes) != 1+p.quantity {
			t.Errorf("%s: %d nodes, want %d", p.name, len(res.Nodes), 1+p.quantity)
		}
		c.checkAgree(res)
		c.checkNoOrphans(res)
	}
	c.mustOn(c.manager(c.status()), "docker service rm everywhere >/dev/null")
}

// checkNoOrphans asserts that, once terminations finished, every node
// namespace and every node process on the host belongs to a node transit
// knows, and every firewall chain to one of its groups.
func (c *cluster) checkNoOrphans(res districts.Resources) {
	c.tb.Helper()
	want := map[string]bool{}
	for _, n := range res.Nodes {
		want[n.ProviderID] = true
	}
	var orphans []string
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		orphans = nil
		out, err := exec.Command("ip", "netns", "list").Output()
		if err != nil {
			c.tb.Fatal(err)
		}
		have := map[string]bool{}
		for line := range strings.Lines(string(out)) {
			if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], "transit-") {
				have[strings.TrimPrefix(f[0], "transit-")] = true
			}
		}
		for id := range have {
			if c.seen[id] && !want[id] {
				orphans = append(orphans, "namespace of "+id)
			}
		}
		for id := range want {
			if !have[id] {
				orphans = append(orphans, "node "+id+" has no namespace")
			}
		}
		for pid, cmdline := range processesUnder(c.root) {
			_, rest, ok := strings.Cut(cmdline, c.root+"/districts/")
			if !ok {
				continue
			}
			// <district>/nodes/<provider id>/...
			if f := strings.SplitN(rest, "/", 4); len(f) >= 3 && f[1] == "nodes" && !want[f[2]] {
				orphans = append(orphans, "process "+pid+" of node "+f[2])
			}
		}
		out, err = exec.Command("iptables", "-S").Output()
		if err != nil {
			c.tb.Fatal(err)
		}
		groups := map[string]bool{}
		for _, g := range res.SecurityGroups {
			groups[g.ProviderID] = true
		}
		for line := range strings.Lines(string(out)) {
			if f := strings.Fields(line); len(f) == 2 && f[0] == "-N" && c.chains[f[1]] && !groups[f[1]] {
				orphans = append(orphans, "chain "+f[1])
			}
		}
		if len(orphans) == 0 {
			return
		}
		if time.Now().After(deadline) {
			break
		}
	}
	slices.Sort(orphans)
	c.tb.Errorf("orphans after terminations should have finished:\n  %s", strings.Join(orphans, "\n  "))
}

// testRefusedDrain runs a service that needs every France node (one task
// per node), then asks for one France node less: every drain would leave a
// task with nowhere to run, so each is refused, the nodes stay schedulable
// and apply ends not converged (exit 3), naming them.
func testRefusedDrain(t *testing.T, c *cluster) {
	france := func(res districts.Resources) (ids []string) {
		for _, n := range res.Nodes {
			if n.Tags["location"] == "France" {
				ids = append(ids, n.ID)
			}
		}
		return ids
	}
	res := c.status()
	want := len(france(res))
	c.service(res, "pinned", want, "--constraint node.labels.location==France", "--replicas-max-per-node 1")
	c.setQuantity("e2e-b", districts.RoleWorker, want-1)
	r := c.transit("apply", "--auto-approve")
	if r.code != 3 {
		t.Fatalf("apply: exit %d, want 3 (not converged)\n%s", r.code, r)
	}
	if !strings.Contains(r.stderr, "drain of node") || !strings.Contains(r.stderr, "can run on no other node") {
		t.Errorf("the message does not say which drain was refused and why:\n%s", r.stderr)
	}
	res = c.status()
	if got := france(res); len(got) != want {
		t.Errorf("France nodes %v, want all %d kept", got, want)
	}
	for host, state := range c.swarmNodes(res) {
		if !strings.HasPrefix(state, "Ready Active") {
			t.Errorf("node %s is %q after a refused drain, want Ready Active", host, state)
		}
	}
	c.waitRunning(res, "pinned", want)
	// Without the service, the same change goes through.
	c.mustOn(c.manager(res), "docker service rm pinned >/dev/null")
	c.apply()
	if got := france(c.status()); len(got) != want-1 {
		t.Errorf("France nodes %v after the service left, want %d", got, want-1)
	}
}

func testBadInput(t *testing.T, c *cluster) {
	// Settle first, so the state holds no machine that finished dying
	// since the last apply: each failing apply below must change nothing.
	c.apply()
	res := c.status()
	mgr := c.manager(res)
	statePath := filepath.Join(c.dir, "resources.json")
	// The platform cannot be asked: status still shows the machines and
	// says why, without writing; apply changes no node and ends not
	// converged (exit 3), naming the node.
	expectFailure := func(name, want string) {
		t.Helper()
		before, err := os.ReadFile(statePath)
		if err != nil {
			t.Fatal(err)
		}
		r := c.transit("status")
		if r.code != 0 || !strings.Contains(r.stdout, "Platform unreachable") || !strings.Contains(r.stdout, want) {
			t.Errorf("%s: status exit %d, want exit 0, \"Platform unreachable\" and %q:\n%s", name, r.code, want, r)
		}
		if after, err := os.ReadFile(statePath); err != nil || !bytes.Equal(after, before) {
			t.Errorf("%s: status changed resources.json or it is unreadable (%v)", name, err)
		}
		r = c.transit("apply", "--auto-approve")
		if r.code != 3 || !strings.Contains(r.stderr, want) {
			t.Errorf("%s: apply exit %d, stderr:\n%s\nwant exit 3 and %q", name, r.code, r.stderr, want)
		}
		after, err := c.saved()
		if err != nil {
			t.Fatalf("%s: resources.json after apply: %v", name, err)
		}
		if got, want := nodePhases(after), nodePhases(res); !maps.Equal(got, want) {
			t.Errorf("%s: apply changed nodes %v, want %v", name, got, want)
		}
	}

	// A changed host key: the manager presents another key than the one
	// its provider reported (and transit pinned), as a machine in the
	// middle would. sshd reads its host key again for every connection.
	hostKey := filepath.Join(c.root, "districts", mgr.District, "nodes", mgr.ProviderID, "boot", "ssh_host_ed25519_key")
	realKey, err := os.ReadFile(hostKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(hostKey, newPrivateKey(t), 0o600); err != nil {
		t.Fatal(err)
	}
	expectFailure("changed host key", "host key of "+mgr.ProviderID)
	if err := os.WriteFile(hostKey, realKey, 0o600); err != nil {
		t.Fatal(err)
	}

	// sshd refusing the key: another key pair in the cluster key's place.
	keyPath := ssh.KeyPath(c.dir, c.cfg.ID)
	for _, suffix := range []string{"", ".pub"} {
		if err := os.Rename(keyPath+suffix, keyPath+suffix+".saved"); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(keyPath, newPrivateKey(t), 0o600); err != nil {
		t.Fatal(err)
	}
	expectFailure("key refused", "refused transit's key")
	// No key at all beside a state that records machines: refused,
	// naming the key, before anything is asked; never a new pair, which
	// every machine would refuse.
	for _, suffix := range []string{"", ".pub"} {
		if err := os.Remove(keyPath + suffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
	}
	before, err := os.ReadFile(statePath)
	if err != nil {
		t.Fatal(err)
	}
	if r := c.transit("apply", "--auto-approve"); r.code != 1 || !strings.Contains(r.stderr, "its SSH private key "+filepath.Base(keyPath)+" is missing") {
		t.Errorf("key missing: apply exit %d, stderr:\n%s\nwant exit 1 naming the missing key", r.code, r.stderr)
	}
	if _, err := os.Stat(keyPath); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a new key pair was made over live machines (%v)", err)
	}
	if after, err := os.ReadFile(statePath); err != nil || !bytes.Equal(after, before) {
		t.Errorf("key missing: apply changed resources.json (%v)", err)
	}
	for _, suffix := range []string{"", ".pub"} {
		if err := os.Rename(keyPath+suffix+".saved", keyPath+suffix); err != nil {
			t.Fatal(err)
		}
	}

	// An unreachable master: the host's SSH connections to it are reset.
	unblock := c.hostRule("OUTPUT", "-d", mgr.PublicIP, "-p", "tcp", "--dport", "22", "-j", "REJECT", "--reject-with", "tcp-reset")
	// This cluster's runs only: the other groups' run at the same time.
	env := c.env
	c.env = append(slices.Clip(c.env), "TRANSIT_SSH_TIMEOUT=3s")
	expectFailure("unreachable master", "not reachable over SSH")
	c.env = env
	unblock()

	// Everything works again.
	c.checkAgree(c.status())
}

// nodePhases maps each node of res to its phase.
func nodePhases(res districts.Resources) map[string]districts.Phase {
	out := map[string]districts.Phase{}
	for _, n := range res.Nodes {
		out[n.ID] = n.Phase
	}
	return out
}

// newPrivateKey is a fresh ed25519 host key in OpenSSH's PEM format.
func newPrivateKey(t *testing.T) []byte {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := gossh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(block)
}

func testDestroy(t *testing.T, c *cluster) {
	if r := c.transit("destroy", "--auto-approve"); r.code != 0 {
		t.Fatalf("destroy: exit %d\n%s", r.code, r)
	}
	// Terminations finish in the background; give them a moment.
	deadline := time.Now().Add(60 * time.Second)
	for {
		left := c.leftovers()
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after destroy, left behind:\n  %s", strings.Join(left, "\n  "))
		}
		time.Sleep(500 * time.Millisecond)
	}
	res, err := c.saved()
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Nodes) != 0 || len(res.SecurityGroups) != 0 {
		t.Errorf("resources.json after destroy: %d nodes, %d groups", len(res.Nodes), len(res.SecurityGroups))
	}
}
