package e2e

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/drivers/local"
	"github.com/cloudtransit/transit/hostclean"
	"github.com/cloudtransit/transit/platforms/platformtest"
	"github.com/cloudtransit/transit/platforms/ssh"
)

// Each group of e2e tests keeps its local nodes' records in a root of its
// own: fixed, so a run cleans up what a killed earlier run of the group
// left, apart from the default root, so the tests never touch a person's
// demo, and apart from the other groups', which run at the same time.
const (
	swarmRoot  = "/var/lib/transit/e2e-swarm"
	kubeRoot   = "/var/lib/transit/e2e-kubernetes"
	addonsRoot = "/var/lib/transit/e2e-addons"
	cloudsRoot = "/var/lib/transit/e2e-clouds"
)

// binDirPrefix names the directory each e2e run builds transit into, then
// its process's mark (hostclean.Mark: pid and start time): a run killed
// (its timeout, kill -9) leaves it, 130 MB, and the next run removes it
// once that process is gone, its pid free or reused. A live one may be
// another group's run, which shares nothing else.
const binDirPrefix = "transit-e2e-bin-"

// removeDeadBinDirs removes the build directories under tmp of e2e runs
// whose process is gone.
func removeDeadBinDirs(tmp string) {
	dirs, _ := filepath.Glob(filepath.Join(tmp, binDirPrefix+"*"))
	for _, d := range dirs {
		if mark, _, ok := strings.Cut(strings.TrimPrefix(filepath.Base(d), binDirPrefix), "-"); ok && hostclean.Gone(mark) {
			_ = os.RemoveAll(d)
		}
	}
}

// image is the container image the tests run; the local provider hands it
// to every node (no registry here).
const image = "transit-e2e/busybox:latest"

var transitBin string // built once by TestMain

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	flag.Parse()
	if !enabled() {
		return m.Run() // every test skips itself
	}
	// The groups run at once (groups_test.go) whatever -parallel's
	// default (the number of cores) would allow.
	if !flagSet("test.parallel") {
		if err := flag.Set("test.parallel", "8"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	began := time.Now()
	defer func() { writeReport(time.Since(began)) }()
	removeDeadBinDirs(os.TempDir())
	dir, err := os.MkdirTemp("", binDirPrefix+hostclean.Mark()+"-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	transitBin = filepath.Join(dir, "transit")
	// transit-mesh beside transit, as `make build` puts it: what a Swarm
	// on the node mesh sends to its nodes.
	for _, cmd := range []string{"transit", "transit-mesh"} {
		build := exec.Command("go", "build", "-o", filepath.Join(dir, cmd), "github.com/cloudtransit/transit/cmd/"+cmd)
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "build %s: %v\n", cmd, err)
			return 1
		}
	}
	return m.Run()
}

// flagSet says whether the command line set the flag.
func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// enabled says whether this run can do e2e work: not -short, as root.
func enabled() bool {
	return !testing.Short() && os.Geteuid() == 0
}

func requireE2E(tb testing.TB) {
	tb.Helper()
	if testing.Short() {
		tb.Skip("e2e: skipped with -short")
	}
	if os.Geteuid() != 0 {
		tb.Skip("e2e: needs root (network namespaces, bridges, iptables)")
	}
}

// outputs collects what transit runs printed; runs made by a sampling
// goroutine (whileApplying) add to it beside the test's own.
type outputs struct {
	mu  sync.Mutex
	all []string
}

func (o *outputs) add(out ...string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.all = append(o.all, out...)
}

func (o *outputs) list() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.all)
}

// cluster is one transit working directory driving local districts under
// root.
type cluster struct {
	tb testing.TB
	// root is the local provider's root the cluster's districts use.
	root string
	dir  string
	// cfg is shared by the copies with makes: a step's change to
	// cluster.json is the next step's starting point.
	cfg *districts.Cluster
	ds  []districts.District
	// seen and chains collect the provider ids of every node and group
	// a status showed, for the leftover check.
	seen, chains map[string]bool
	// env is added to transit's environment; outputs collects what every
	// transit run printed (shared by the copies with makes).
	env     []string
	outputs *outputs
	// limit bounds each transit run (commandLimit when zero).
	limit time.Duration
	// teardown: the runs of the cleanup, which may use its reserve.
	teardown bool
}

// commandLimit is how long one transit run may take before the harness
// kills it.
const commandLimit = 15 * time.Minute

// cleanupReserve is the time the harness keeps before the test binary's
// deadline (go test -timeout) to destroy and purge what the tests made:
// a step that would run into it is stopped with a clear failure, so a
// slow machine ends in a report and a clean host, never in the testing
// package's panic in the middle of a cluster.
const cleanupReserve = 3 * time.Minute

// commandContext bounds one transit run: by the cluster's limit and by
// the suite's deadline less the cleanup's reserve.
func (c *cluster) commandContext() (context.Context, context.CancelFunc) {
	limit := c.limit
	if limit == 0 {
		limit = commandLimit
	}
	left := timeLeft(c.tb)
	if c.teardown {
		left += cleanupReserve - 10*time.Second
	}
	if left < limit {
		if left <= 0 {
			c.tb.Fatalf("no time left for another transit run: the test binary's deadline (go test -timeout) is %s away and cleaning up takes up to %s; stopping here to clean up", (left + cleanupReserve).Round(time.Second), cleanupReserve)
		}
		limit = left
	}
	return context.WithTimeout(context.Background(), limit)
}

// timeLeft is how long a test may go on before the cleanup's reserve
// begins; a day when the binary has no deadline.
func timeLeft(tb testing.TB) time.Duration {
	if t, ok := tb.(interface{ Deadline() (time.Time, bool) }); ok {
		if d, ok := t.Deadline(); ok {
			return time.Until(d) - cleanupReserve
		}
	}
	return 24 * time.Hour
}

// newCluster purges what an earlier run left under root, writes the
// configuration and registers the teardown (destroy, purge, leftover check)
// that runs even when the test fails.
func newCluster(tb testing.TB, root string, cfg districts.Cluster, ds []districts.District) *cluster {
	tb.Helper()
	requireE2E(tb)
	if _, ok := tb.(*testing.B); ok {
		// A measurement: nothing else on this host's cores meanwhile.
		platformtest.HoldHost(tb)
	}
	ctx := context.Background()
	if err := platformtest.PurgeRules(ctx, "OUTPUT", ruleMark(root)); err != nil {
		tb.Fatalf("remove the firewall rules an earlier run left: %v", err)
	}
	if err := local.Purge(ctx, root); err != nil {
		tb.Fatalf("purge %s before the test: %v", root, err)
	}
	if err := writeImage(filepath.Join(root, "images", "busybox.tar")); err != nil {
		tb.Fatal(err)
	}
	c := &cluster{tb: tb, root: root, dir: tb.TempDir(), cfg: &cfg, ds: ds, seen: map[string]bool{}, chains: map[string]bool{}, outputs: &outputs{}}
	c.writeConfig()
	tb.Cleanup(func() {
		c.teardown = true
		if r := c.transit("destroy", "--auto-approve"); r.code != 0 {
			tb.Errorf("destroy at cleanup: exit %d\n%s", r.code, r.stderr)
		}
		if err := local.Purge(context.Background(), root); err != nil {
			tb.Errorf("purge at cleanup: %v", err)
		}
		if left := c.leftovers(); len(left) > 0 {
			tb.Errorf("left behind on the host:\n  %s", strings.Join(left, "\n  "))
		}
		if err := os.RemoveAll(root); err != nil {
			tb.Errorf("remove %s: %v", root, err)
		}
		// Its parent too, unless something else (a demo) lives there.
		_ = os.Remove(filepath.Dir(root))
	})
	return c
}

// ruleMark is the comment of the host firewall rules a group's tests
// insert (hostRule), so that the group's next run removes what a killed
// run left: a stale rule refusing SSH to an address refuses the next
// run's node at it.
func ruleMark(root string) string { return "transit-e2e " + filepath.Base(root) }

// hostRule inserts rule (iptables' filter table, its chain first) marked as
// the group's, and removes it when the test ends, whatever happens; it
// returns the removal for the test to call sooner.
func (c *cluster) hostRule(rule ...string) (remove func()) {
	c.tb.Helper()
	marked := append(slices.Clip(rule), "-m", "comment", "--comment", ruleMark(c.root))
	if out, err := exec.Command("iptables", append([]string{"-w", "-I"}, marked...)...).CombinedOutput(); err != nil {
		c.tb.Fatalf("iptables -I %v: %v\n%s", rule, err, out)
	}
	var once sync.Once
	remove = func() {
		once.Do(func() {
			if out, err := exec.Command("iptables", append([]string{"-w", "-D"}, marked...)...).CombinedOutput(); err != nil {
				c.tb.Errorf("iptables -D %v: %v\n%s", rule, err, out)
			}
		})
	}
	c.tb.Cleanup(remove)
	return remove
}

func (c *cluster) writeConfig() {
	c.tb.Helper()
	write := func(name string, v any) {
		data, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			c.tb.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(c.dir, name), data, 0o644); err != nil {
			c.tb.Fatal(err)
		}
	}
	write("cluster.json", c.cfg)
	write("districts.json", c.ds)
}

// setQuantity changes one deployment's quantity and rewrites cluster.json.
func (c *cluster) setQuantity(district, role string, n int) {
	c.tb.Helper()
	for i, d := range c.cfg.Deployments {
		if d.District == district && d.Role == role {
			c.cfg.Deployments[i].Quantity = n
			c.writeConfig()
			return
		}
	}
	c.tb.Fatalf("no deployment %s/%s", district, role)
}

type result struct {
	code           int
	stdout, stderr string
}

// String shows what a failed run said, its last words first: a CI log
// keeps only the start of a long failure, and the error that ended a run
// comes after minutes of its progress log.
func (r result) String() string {
	lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
	last := lines[max(0, len(lines)-15):]
	return fmt.Sprintf("stderr ended:\n%s\n\nstdout:\n%s\nstderr:\n%s", strings.Join(last, "\n"), r.stdout, r.stderr)
}

func (c *cluster) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, transitBin, args...)
	cmd.Dir = c.dir
	cmd.Env = append(append(os.Environ(), "TRANSIT_LOCAL_ROOT="+c.root), c.env...)
	return cmd
}

// transit runs the transit binary in the cluster's directory.
func (c *cluster) transit(args ...string) result {
	c.tb.Helper()
	r, err := c.run(args...)
	if err != nil {
		c.tb.Fatal(err)
	}
	return r
}

// run is transit for a goroutine other than the test's, which must not
// end the test: a run that could not start or was stopped is an error.
func (c *cluster) run(args ...string) (result, error) {
	ctx, cancel := c.commandContext()
	defer cancel()
	cmd := c.command(ctx, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	began := time.Now()
	err := cmd.Run()
	c.tb.Logf("transit %s: %s", strings.Join(args, " "), time.Since(began).Round(100*time.Millisecond))
	r := result{stdout: out.String(), stderr: errb.String()}
	c.outputs.add(r.stdout, r.stderr)
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil && timeLeft(c.tb) <= 0 && !c.teardown:
		return r, fmt.Errorf("transit %v was stopped: the test binary's deadline (go test -timeout) is near and cleaning up takes up to %s\n%s", args, cleanupReserve, r)
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	case err != nil:
		return r, fmt.Errorf("run transit %v: %w", args, err)
	}
	return r, nil
}

// apply runs `transit apply` and fails the test unless it converged.
func (c *cluster) apply() result {
	c.tb.Helper()
	r := c.transit("apply", "--auto-approve")
	if r.code != 0 {
		c.tb.Fatalf("apply: exit %d\n%s", r.code, r)
	}
	return r
}

// status runs `transit status --json` and returns the state it shows. A
// converged apply does not wait for the machines it terminated to finish
// dying (docs/control-loop.md: terminations are asynchronous), so status is asked again
// until no node is terminating, for up to a minute.
func (c *cluster) status() districts.Resources {
	c.tb.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		res := c.statusNow()
		if !slices.ContainsFunc(res.Nodes, func(n districts.Node) bool { return n.Phase == districts.PhaseTerminating }) ||
			time.Now().After(deadline) {
			return res
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// statusNow is one `transit status --json`.
func (c *cluster) statusNow() districts.Resources {
	c.tb.Helper()
	r := c.transit("status", "--json")
	if r.code != 0 {
		c.tb.Fatalf("status: exit %d\n%s", r.code, r.stderr)
	}
	var out struct {
		State districts.Resources `json:"state"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		c.tb.Fatalf("status --json: %v\n%s", err, r.stdout)
	}
	res := out.State
	for _, n := range res.Nodes {
		c.seen[n.ProviderID] = true
	}
	for _, g := range res.SecurityGroups {
		c.chains[g.ProviderID] = true
	}
	return res
}

// saved reads resources.json as the last run left it: with the journal
// of a run killed before it wrote the state whole.
func (c *cluster) saved() (districts.Resources, error) {
	return districts.LoadResources(filepath.Join(c.dir, "resources.json"))
}

// sshConfig is how the test reaches nodes: with the cluster key and pins
// transit itself keeps.
func (c *cluster) sshConfig() ssh.Config {
	c.tb.Helper()
	key, err := ssh.EnsureKey(c.dir, c.cfg.ID)
	if err != nil {
		c.tb.Fatal(err)
	}
	hosts, err := ssh.OpenHostKeys(ssh.HostKeysPath(c.dir, c.cfg.ID))
	if err != nil {
		c.tb.Fatal(err)
	}
	return ssh.Config{Signer: key.Signer, HostKeys: hosts, WaitTimeout: 20 * time.Second}
}

// on runs a script on a node over SSH.
func (c *cluster) on(ctx context.Context, n districts.Node, script string) (string, error) {
	return ssh.RunOn(ctx, c.sshConfig(), ssh.Target{HostID: n.ProviderID, Name: n.ID, Addr: n.PublicIP}, "e2e check", script)
}

func (c *cluster) mustOn(n districts.Node, script string) string {
	c.tb.Helper()
	out, err := c.on(context.Background(), n, script)
	if err != nil {
		c.tb.Fatalf("on %s: %v\n%s", n.ID, err, c.sshdLog(n))
	}
	return out
}

// sshdLog is the tail of a local node's sshd log, to tell why it would not
// talk.
func (c *cluster) sshdLog(n districts.Node) string {
	data, err := os.ReadFile(filepath.Join(c.root, "districts", n.District, "nodes", n.ProviderID, "boot", "sshd.log"))
	if err != nil {
		return "(no sshd log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	return "--- sshd.log (last lines)\n" + strings.Join(lines[max(0, len(lines)-15):], "\n")
}

// manager returns the cluster's first master.
func (c *cluster) manager(res districts.Resources) districts.Node {
	c.tb.Helper()
	for _, n := range res.Nodes {
		if n.Role == districts.RoleMaster {
			return n
		}
	}
	c.tb.Fatal("no master in the state")
	return districts.Node{}
}

// leftovers lists what transit's local provider made for this cluster on
// the host and did not take away: namespaces, links, firewall chains,
// cgroups, processes and records. It looks only at what the cluster's
// statuses showed and at its districts' subnets, so other tests' nodes on
// the same host do not count.
func (c *cluster) leftovers() []string {
	var left []string
	if out, err := exec.Command("ip", "netns", "list").Output(); err == nil {
		for line := range strings.Lines(string(out)) {
			if f := strings.Fields(line); len(f) > 0 && c.seen[strings.TrimPrefix(f[0], "transit-")] {
				left = append(left, "network namespace "+f[0])
			}
		}
	}
	if out, err := exec.Command("ip", "-o", "addr", "show").Output(); err == nil {
		for line := range strings.Lines(string(out)) {
			f := strings.Fields(line)
			if len(f) < 4 || f[2] != "inet" {
				continue
			}
			addr, err := netip.ParsePrefix(f[3])
			if err != nil {
				continue
			}
			for _, d := range c.ds {
				if subnet, err := netip.ParsePrefix(d.LocalSubnet); err == nil && subnet.Contains(addr.Addr()) {
					left = append(left, "link "+f[1]+" with "+f[3]+" of district "+d.ID)
				}
			}
		}
	}
	if out, err := exec.Command("iptables", "-S").Output(); err == nil {
		for line := range strings.Lines(string(out)) {
			for chain := range c.chains {
				if strings.Contains(line, chain) {
					left = append(left, "iptables: "+strings.TrimSpace(line))
				}
			}
		}
	}
	for id := range c.seen {
		dirs, _ := filepath.Glob("/sys/fs/cgroup/*/transit/" + id)
		for _, d := range dirs {
			left = append(left, "cgroup "+d)
		}
	}
	for pid, cmdline := range processesUnder(c.root) {
		left = append(left, "process "+pid+": "+cmdline)
	}
	_ = filepath.WalkDir(filepath.Join(c.root, "districts"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if entries, _ := os.ReadDir(path); !d.IsDir() || len(entries) == 0 {
			left = append(left, "record "+strings.TrimPrefix(path, c.root+"/"))
		}
		return nil
	})
	slices.Sort(left)
	return slices.Compact(left)
}

// applyUntil streams `transit apply --json` lines to fn until the command
// ends or fn returns false, which kills transit with SIGKILL.
func (c *cluster) applyUntil(fn func(ev map[string]any) bool) (killed bool) {
	c.tb.Helper()
	ctx, cancel := c.commandContext()
	defer cancel()
	cmd := c.command(ctx, "apply", "--auto-approve", "--json")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		c.tb.Fatal(err)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		c.tb.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var ev map[string]any
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			continue
		}
		if !fn(ev) {
			_ = cmd.Process.Kill()
			killed = true
			break
		}
	}
	_, _ = io.Copy(io.Discard, stdout)
	_ = cmd.Wait()
	return killed
}

// applyKilledAt runs `transit apply` and kills it (SIGKILL) delay after
// its first action of kind reached phase; it says whether the kill
// happened before the run ended.
func (c *cluster) applyKilledAt(kind, phase string, delay time.Duration) (killed bool) {
	c.tb.Helper()
	return c.applyUntil(func(ev map[string]any) bool {
		k, p, _ := action(ev)
		if k == kind && p == phase {
			time.Sleep(delay)
			return false
		}
		return true
	})
}

// action returns the kind, phase and node of an apply --json action event.
func action(ev map[string]any) (kind, phase, node string) {
	if ev["type"] != "action" {
		return "", "", ""
	}
	a, _ := ev["action"].(map[string]any)
	kind, _ = a["kind"].(string)
	node, _ = a["node"].(string)
	phase, _ = ev["phase"].(string)
	return kind, phase, node
}

// writeImage writes a docker-save archive of a busybox image: the local
// provider's nodes load it at install, as a machine image would carry it.
func writeImage(path string) error {
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return fmt.Errorf("the e2e image needs a static busybox (apt-get install busybox-static): %w", err)
	}
	var layer bytes.Buffer
	lw := tar.NewWriter(&layer)
	hdr := func(h *tar.Header) error { h.ModTime = time.Unix(0, 0); return lw.WriteHeader(h) }
	if err := hdr(&tar.Header{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755}); err != nil {
		return err
	}
	if err := hdr(&tar.Header{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(bb))}); err != nil {
		return err
	}
	if _, err := lw.Write(bb); err != nil {
		return err
	}
	for _, applet := range []string{"sh", "sleep", "true", "cat", "echo", "hostname"} {
		if err := hdr(&tar.Header{Name: "bin/" + applet, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777}); err != nil {
			return err
		}
	}
	if err := lw.Close(); err != nil {
		return err
	}
	layerSum := sha256.Sum256(layer.Bytes())
	layerID := hex.EncodeToString(layerSum[:])
	config, err := json.Marshal(map[string]any{
		"architecture": "amd64", "os": "linux",
		"config": map[string]any{"Cmd": []string{"/bin/sh"}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + layerID}},
	})
	if err != nil {
		return err
	}
	configSum := sha256.Sum256(config)
	configName := hex.EncodeToString(configSum[:]) + ".json"
	manifest, err := json.Marshal([]map[string]any{{
		"Config": configName, "RepoTags": []string{image}, "Layers": []string{layerID + "/layer.tar"},
	}})
	if err != nil {
		return err
	}
	var out bytes.Buffer
	w := tar.NewWriter(&out)
	for _, f := range []struct {
		name string
		data []byte
	}{{configName, config}, {layerID + "/layer.tar", layer.Bytes()}, {"manifest.json", manifest}} {
		if err := w.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data)), ModTime: time.Unix(0, 0)}); err != nil {
			return err
		}
		if _, err := w.Write(f.data); err != nil {
			return err
		}
	}
	if err := w.Close(); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, out.Bytes(), 0o644)
}

// TestKilledRunsRulesGo: a firewall rule a killed run of a group left (it
// refused SSH to an address, so the next run's node there never answered)
// is gone once the group's next cluster is made; another group's rule,
// which a run at the same time may need, stays.
func TestKilledRunsRulesGo(t *testing.T) {
	requireE2E(t)
	const root, other = "/var/lib/transit/e2e-ruletest", "/var/lib/transit/e2e-otherruletest"
	rule := func(root, addr string) []string {
		return []string{"OUTPUT", "-d", addr + "/32", "-p", "tcp", "--dport", "22", "-j", "REJECT", "--reject-with", "tcp-reset",
			"-m", "comment", "--comment", ruleMark(root)}
	}
	// TEST-NET-1 addresses: nothing here sends there.
	left, others := rule(root, "192.0.2.61"), rule(other, "192.0.2.62")
	for _, r := range [][]string{left, others} {
		if out, err := exec.Command("iptables", append([]string{"-w", "-I"}, r...)...).CombinedOutput(); err != nil {
			t.Fatalf("iptables: %v\n%s", err, out)
		}
	}
	t.Cleanup(func() { _ = exec.Command("iptables", append([]string{"-w", "-D"}, others...)...).Run() })
	cfg, ds := exampleCluster()
	cfg.ID = "e2e-ruletest"
	cfg.Deployments = nil
	newCluster(t, root, cfg, ds)
	out, err := exec.Command("iptables", "-w", "-S", "OUTPUT").Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "192.0.2.61/32") {
		_ = exec.Command("iptables", append([]string{"-w", "-D"}, left...)...).Run()
		t.Errorf("the rule a killed run of the group left is still there:\n%s", out)
	}
	if !strings.Contains(string(out), "192.0.2.62/32") {
		t.Errorf("another group's rule went:\n%s", out)
	}
}

// TestStepsShareTheConfig: each step of a group works on a copy of the
// cluster (its own testing.T), but cluster.json is one: what a step
// changes is where the next one starts. A copied config once made the
// Kubernetes kill step move the migrated masters back to their first
// district, so the kill landed in a master's join, not the worker's the
// step is about.
func TestStepsShareTheConfig(t *testing.T) {
	c := &cluster{tb: t, dir: t.TempDir(), outputs: &outputs{}, cfg: &districts.Cluster{
		Type: "cluster", ID: "share", Platform: "kubernetes",
		Deployments: []districts.Deployment{{District: "a", Flavor: "small", Role: districts.RoleMaster, Quantity: 1}},
	}}
	moved := c.with(t)
	moved.cfg.Deployments = append(moved.cfg.Deployments, districts.Deployment{District: "b", Flavor: "small", Role: districts.RoleMaster, Quantity: 1})
	moved.setQuantity("a", districts.RoleMaster, 0)

	next := c.with(t)
	want := []districts.Deployment{
		{District: "a", Flavor: "small", Role: districts.RoleMaster, Quantity: 0},
		{District: "b", Flavor: "small", Role: districts.RoleMaster, Quantity: 1},
	}
	if d := cmp.Diff(want, next.cfg.Deployments); d != "" {
		t.Errorf("the next step's deployments (-want +got):\n%s", d)
	}
	var saved districts.Cluster
	data, err := os.ReadFile(filepath.Join(c.dir, "cluster.json"))
	if err == nil {
		err = json.Unmarshal(data, &saved)
	}
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, saved.Deployments); d != "" {
		t.Errorf("cluster.json's deployments (-want +got):\n%s", d)
	}

	// A CI runner has its own checkout: its changes stay its own.
	r := c.runner(t)
	r.setQuantity("b", districts.RoleMaster, 3)
	if got := c.cfg.Deployments[1].Quantity; got != 1 {
		t.Errorf("a runner's change reached the cluster's config: quantity %d", got)
	}
}
