package local

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/sync/errgroup"

	"github.com/cloudtransit/transit/clock/clocktest"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/drivers/drivertest"
	"github.com/cloudtransit/transit/provider"
)

// env is one integration test's world: its own root, districts and key.
type env struct {
	t       testing.TB
	root    string
	keyFile string
	pubKey  string

	mu        sync.Mutex
	districts []string
	chains    []string
	nodes     []string
}

// requireRoot skips integration tests under -short and when not root.
func requireRoot(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration: skipped with -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("integration: needs root (network namespaces, bridges, iptables)")
	}
}

func newEnv(t testing.TB) *env {
	t.Helper()
	requireRoot(t)
	e := &env{t: t, root: testRoot(t)}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "transit test")
	if err != nil {
		t.Fatal(err)
	}
	e.keyFile = filepath.Join(t.TempDir(), "id_ed25519")
	if err := os.WriteFile(e.keyFile, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	e.pubKey = strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sp))) + " transit-test"
	t.Cleanup(e.cleanup)
	return e
}

// testRoots holds the integration tests' roots: fixed per test, so that a
// run purges what a killed earlier run of the same test left (its nodes
// still run there).
const testRoots = "/var/lib/transit/local-test"

var (
	rootsMu   sync.Mutex
	rootsMade = map[string]int{} // test name → roots made for it
)

// testRoot is a root of t's own, emptied of what an earlier run left.
func testRoot(t testing.TB) string {
	t.Helper()
	rootsMu.Lock()
	n := rootsMade[t.Name()]
	rootsMade[t.Name()]++
	rootsMu.Unlock()
	root := filepath.Join(testRoots, strings.NewReplacer("/", "-", " ", "_").Replace(t.Name()), fmt.Sprint(n))
	if err := os.MkdirAll(root, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := Purge(t.Context(), root); err != nil {
		t.Fatalf("purge what an earlier run left in %s: %v", root, err)
	}
	return root
}

// subnetSeq hands out test subnets 10.250.x.0/24, starting at a random x so
// a leftover of a crashed run is unlikely to collide.
var subnetSeq = func() *atomic.Int32 {
	var n atomic.Int32
	b := make([]byte, 1)
	_, _ = rand.Read(b)
	n.Store(int32(b[0]) % 200)
	return &n
}()

func randHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// district returns a new local district with a unique id and subnet.
func (e *env) district() districts.District {
	x := subnetSeq.Add(1)%250 + 1
	d := districts.District{
		Type:        "district",
		ID:          "lt-" + randHex(4),
		Provider:    districts.ProviderLocal,
		LocalSubnet: fmt.Sprintf("10.250.%d.0/24", x),
	}
	e.mu.Lock()
	e.districts = append(e.districts, d.ID)
	e.mu.Unlock()
	return d
}

func (e *env) driver(d districts.District) *driver {
	e.t.Helper()
	// Twice the default wait: `go test ./...` boots nodes here while
	// other packages run clusters and API servers on the same two cores,
	// and five parallel boots once took more than 20 s. These tests are of
	// what boots, not how fast (BenchmarkLaunch is).
	drv, err := New(e.t.Context(), d, Options{Root: e.root, SSHWait: 2 * DefaultSSHWait})
	if err != nil {
		e.t.Fatalf("New: %v", err)
	}
	return drv.(*driver)
}

// group ensures cluster's group in drv's district with sources.
func (e *env) group(drv *driver, cluster string, sources ...string) provider.Group {
	e.t.Helper()
	g, err := drv.EnsureGroup(e.t.Context(), provider.GroupSpec{
		Name: provider.GroupName(cluster, drv.district), Cluster: cluster, District: drv.district,
		Tags:    map[string]string{districts.TagCluster: cluster},
		Sources: sources,
	})
	if err != nil {
		e.t.Fatalf("EnsureGroup: %v", err)
	}
	e.mu.Lock()
	e.chains = append(e.chains, g.ProviderID)
	e.mu.Unlock()
	return g
}

func (e *env) launchSpec(drv *driver, g provider.Group, cluster, id string) provider.LaunchSpec {
	n := districts.Node{ID: id, Cluster: cluster, District: drv.district, Role: districts.RoleWorker, Flavor: "small"}
	return provider.LaunchSpec{Node: n, GroupID: g.ProviderID, Tags: provider.IdentityTags(n, ""), AuthorizedKey: e.pubKey}
}

func (e *env) launch(drv *driver, g provider.Group, cluster, id string) provider.Instance {
	e.t.Helper()
	inst, err := drv.Launch(e.t.Context(), e.launchSpec(drv, g, cluster, id))
	if err != nil {
		e.t.Fatalf("Launch %s: %v", id, err)
	}
	e.track(inst.ProviderID)
	return inst
}

func (e *env) track(id string) {
	e.mu.Lock()
	e.nodes = append(e.nodes, id)
	e.mu.Unlock()
}

// ssh runs a command on a node as root with the test key.
func (e *env) ssh(ip, command string) (string, error) {
	ctx, cancel := context.WithTimeout(e.t.Context(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ssh", "-i", e.keyFile, "-o", "StrictHostKeyChecking=no",
		"-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o", "LogLevel=ERROR",
		"root@"+ip, command).CombinedOutput()
	return string(out), err
}

// mustIP runs ip with each argument list in turn, failing the test on the
// first error.
func mustIP(t *testing.T, cmds ...[]string) {
	t.Helper()
	for _, args := range cmds {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v\n%s", args, err, out)
		}
	}
}

// inNode runs a command in the node's namespaces (all but pid), targeting
// its init.
func inNode(t *testing.T, initPID int, command string) string {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), "nsenter", "-t", fmt.Sprint(initPID), "--net", "--mount", "--uts", "--cgroup",
		"bash", "-c", command).CombinedOutput()
	if err != nil {
		t.Fatalf("in node (pid %d): %s: %v\n%s", initPID, command, err, out)
	}
	return string(out)
}

// cleanup purges the root and asserts nothing of the test is left.
func (e *env) cleanup() {
	t := e.t
	var created []string
	if data, err := os.ReadFile(filepath.Join(e.root, "created-dirs")); err == nil {
		created = strings.Fields(string(data))
	}
	// Every node dir still on disk is a node to check too.
	for _, d := range e.districts {
		entries, _ := os.ReadDir(filepath.Join(e.root, "districts", d, "nodes"))
		for _, en := range entries {
			e.track(en.Name())
		}
	}
	if err := Purge(context.WithoutCancel(t.Context()), e.root); err != nil {
		t.Errorf("Purge: %v", err)
	}
	left := e.leftovers(created)
	for _, l := range left {
		t.Errorf("left behind: %s", l)
	}
	if len(left) == 0 {
		if err := os.RemoveAll(e.root); err != nil {
			t.Error(err)
		}
		// Its parents too, once empty.
		_ = os.Remove(filepath.Dir(e.root))
		_ = os.Remove(testRoots)
	}
}

func (e *env) leftovers(created []string) []string {
	var left []string
	out, _ := exec.Command("ip", "-o", "link", "show").Output()
	links := string(out)
	ns, _ := exec.Command("ip", "netns", "list").Output()
	ipt, _ := exec.Command("iptables", "-S").Output()
	for _, id := range e.nodes {
		if strings.Contains(string(ns), netnsName(id)) {
			left = append(left, "netns "+netnsName(id))
		}
		if strings.Contains(links, " "+vethName(id)+"@") || strings.Contains(links, " "+vethName(id)+":") {
			left = append(left, "link "+vethName(id))
		}
		dirs, _ := filepath.Glob("/sys/fs/cgroup/*/transit/" + id)
		for _, d := range dirs {
			left = append(left, "cgroup "+d)
		}
	}
	for _, d := range e.districts {
		if strings.Contains(links, " "+bridgeName(e.root, d)+":") {
			left = append(left, "bridge "+bridgeName(e.root, d)+" of "+d)
		}
		if c := inputChainName(e.root, d); strings.Contains(string(ipt), c) {
			left = append(left, "iptables chain "+c+" of "+d)
		}
	}
	for _, c := range e.chains {
		if strings.Contains(string(ipt), c) {
			left = append(left, "iptables chain "+c)
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		cmdline := strings.ReplaceAll(string(data), "\x00", " ")
		if strings.Contains(cmdline, e.root+"/") {
			left = append(left, "process "+filepath.Base(filepath.Dir(p))+": "+cmdline)
		}
	}
	if _, err := os.Stat(filepath.Join(e.root, "districts")); err == nil {
		left = append(left, "records under "+e.root)
	}
	for _, d := range created {
		// With other transit users on the host (their nodes mount over
		// these dirs), the dirs are rightly left.
		if _, err := os.Stat(d); err == nil && !mountedSomewhere(d) && !e.othersActive() {
			left = append(left, "created dir "+d)
		}
	}
	return left
}

// othersActive says whether nodes that are not this test's exist on the
// host (another root: a concurrent e2e run, a demo).
func (e *env) othersActive() bool {
	entries, _ := os.ReadDir("/run/netns")
	for _, en := range entries {
		if id, ok := strings.CutPrefix(en.Name(), "transit-"); ok && !slices.Contains(e.nodes, id) {
			return true
		}
	}
	return false
}

// mountedSomewhere says whether another mount namespace (someone else's
// node) still mounts over dir, which is why Purge leaves it.
func mountedSomewhere(dir string) bool {
	files, _ := filepath.Glob("/proc/[0-9]*/mountinfo")
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err == nil && strings.Contains(string(data), " "+dir+" ") {
			return true
		}
	}
	return false
}

func TestConformance(t *testing.T) {
	e := newEnv(t)
	d := e.district()
	cluster := "conf-" + randHex(3)
	drivertest.Run(t, func(t *testing.T) provider.Infrastructure {
		drv := e.driver(d)
		e.chains = append(e.chains, chainName(e.root, cluster, d.ID))
		return drv
	}, drivertest.Config{
		Cluster:           cluster,
		District:          d.ID,
		AuthorizedKey:     e.pubKey,
		MissingProviderID: "ln-000000000000",
		CheckSSH: func(t *testing.T, inst provider.Instance) {
			e.track(inst.ProviderID)
			if out, err := e.ssh(inst.PublicIP, "true"); err != nil {
				t.Errorf("ssh root@%s with the authorized key: %v\n%s", inst.PublicIP, err, out)
			}
		},
	})
}

func TestNodeShape(t *testing.T) {
	e := newEnv(t)
	// The machine image: a file every node sees read-only.
	if err := os.MkdirAll(filepath.Join(e.root, "images"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.root, "images", "probe.tar"), []byte("image"), 0o644); err != nil {
		t.Fatal(err)
	}
	drv := e.driver(e.district())
	g := e.group(drv, "shape")
	inst := e.launch(drv, g, "shape", "shape-n1")
	rec, err := drv.readNode(inst.ProviderID)
	if err != nil {
		t.Fatal(err)
	}

	out, err := e.ssh(inst.PrivateIP, "hostname")
	if err != nil {
		t.Fatalf("ssh: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(out); got != "shape-n1" {
		t.Errorf("hostname over ssh = %q, want the node id %q", got, "shape-n1")
	}
	if got := strings.TrimSpace(inNode(t, rec.InitPID, "hostname")); got != "shape-n1" {
		t.Errorf("hostname in the node's namespaces = %q, want %q", got, "shape-n1")
	}

	// Private directories: what the node writes stays in the node.
	probe := "probe-" + randHex(4)
	for _, dir := range []string{"/var/lib/docker", "/etc/kubernetes", "/var/lib/transit", "/tmp", "/run"} {
		if out, err := e.ssh(inst.PrivateIP, "echo node > "+dir+"/"+probe); err != nil {
			t.Fatalf("write %s in the node: %v\n%s", dir, err, out)
		}
		if _, err := os.Stat(filepath.Join(dir, probe)); err == nil {
			t.Errorf("%s/%s written in the node appears on the host", dir, probe)
			_ = os.Remove(filepath.Join(dir, probe))
		}
	}
	if _, err := os.Stat(filepath.Join(rec.NodeDir, "fs", "var/lib/docker", probe)); err != nil {
		t.Errorf("the node's /var/lib/docker is not its private dir: %v", err)
	}
	if got := inNode(t, rec.InitPID, "cat /var/lib/docker/"+probe); strings.TrimSpace(got) != "node" {
		t.Errorf("nsenter sees /var/lib/docker/%s = %q", probe, got)
	}

	// cgroup root "/" inside, for every hierarchy: the init as its cgroup
	// namespace sees it, and a login session.
	out, err = e.ssh(inst.PrivateIP, "cat /proc/self/cgroup")
	if err != nil {
		t.Fatalf("ssh: %v\n%s", err, out)
	}
	for _, cg := range []string{inNode(t, rec.InitPID, "cat /proc/1/cgroup"), out} {
		for line := range strings.Lines(cg) {
			if !strings.HasSuffix(strings.TrimSpace(line), ":/") {
				t.Errorf("cgroup inside the node is not /: %s", strings.TrimSpace(line))
			}
		}
	}
	if out := inNode(t, rec.InitPID, "ls /sys/fs/cgroup"); !strings.Contains(out, "memory") && !strings.Contains(out, "cgroup.procs") {
		t.Errorf("no cgroupfs inside the node: %q", out)
	}

	// The machine image, read-only; sshd's privilege separation dir.
	if out, err := e.ssh(inst.PrivateIP, "cat /var/lib/transit/images/probe.tar && ! touch /var/lib/transit/images/x 2>/dev/null && test -d /run/sshd"); err != nil || !strings.Contains(out, "image") {
		t.Errorf("image dir inside the node: %v\n%s", err, out)
	}

	// A machine of its own: its processes only (sshd is PID 1), its own
	// interfaces in /sys, the host's filesystem read-only but for its own
	// paths, and the host's own mounts untouched.
	out, err = e.ssh(inst.PrivateIP, `tr '\0' ' ' </proc/1/cmdline; echo; ls /proc | grep -c '^[0-9]'`)
	if err != nil {
		t.Fatalf("ssh: %v\n%s", err, out)
	}
	if f := strings.Split(strings.TrimSpace(out), "\n"); len(f) != 2 || !strings.Contains(f[0], "sshd") || len(f[1]) > 2 {
		t.Errorf("the node's PID 1 and process count: %q; want sshd and a handful of processes", out)
	}
	if out, err := e.ssh(inst.PrivateIP, "ls /sys/class/net | tr '\n' ' '"); err != nil || strings.TrimSpace(out) != "eth0 lo" {
		t.Errorf("the node's /sys/class/net = %q, %v; want only its own eth0 and lo", out, err)
	}
	for _, p := range []string{"/usr/transit-" + probe, "/etc/transit-" + probe, "/var/lib/transit-" + probe} {
		if out, err := e.ssh(inst.PrivateIP, "touch "+p); err == nil {
			t.Errorf("the node wrote the host's %s:\n%s", p, out)
			_ = os.Remove(p)
		}
	}
	// Nor its own boot files: the host key there is what List reports.
	if out, err := e.ssh(inst.PrivateIP, "echo x >> "+rec.NodeDir+"/boot/ssh_host_ed25519_key.pub"); err == nil {
		t.Errorf("the node changed its boot files:\n%s", out)
	}
	for _, p := range []string{"/root", "/var/tmp", "/var/lib/kubelet"} {
		if out, err := e.ssh(inst.PrivateIP, "touch "+p+"/"+probe); err != nil {
			t.Errorf("the node cannot write its own %s: %v\n%s", p, err, out)
		}
	}
	hostProbe := "/usr/local/transit-" + probe
	if err := os.WriteFile(hostProbe, nil, 0o644); err != nil {
		t.Errorf("the host's /usr is no longer writable after a node booted: %v", err)
	}
	_ = os.Remove(hostProbe)

	// Root by key only: another key is refused.
	other := newEnv(t)
	if out, err := other.ssh(inst.PrivateIP, "true"); err == nil {
		t.Errorf("ssh with a key that is not authorized succeeded:\n%s", out)
	}
}

// connects says whether a TCP connection from inside a node's netns to
// addr:22 succeeds within 2 s.
func connects(t *testing.T, from provider.Instance, addr string) bool {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "nsenter", "--net=/run/netns/"+netnsName(from.ProviderID),
		"timeout", "2", "bash", "-c", "exec 3<>/dev/tcp/"+addr+"/22")
	return cmd.Run() == nil
}

func TestFirewall(t *testing.T) {
	e := newEnv(t)
	a := e.driver(e.district())
	b := e.driver(e.district())
	const cluster = "fw"
	ga := e.group(a, cluster)
	gb := e.group(b, cluster)
	a1 := e.launch(a, ga, cluster, "fw-a1")
	b1 := e.launch(b, gb, cluster, "fw-b1")

	if connects(t, b1, a1.PrivateIP) {
		t.Fatalf("b1 reaches a1:22 before its address is in A's group")
	}
	if err := sshBanner(t.Context(), a1.PrivateIP+":22"); err != nil {
		t.Errorf("the host (operator) cannot reach a1:22: %v", err)
	}
	e.group(a, cluster, b1.PrivateIP)
	if !connects(t, b1, a1.PrivateIP) {
		t.Fatalf("b1 cannot reach a1:22 with its address in A's group")
	}
	e.group(a, cluster)
	if connects(t, b1, a1.PrivateIP) {
		t.Fatalf("b1 still reaches a1:22 after its address left A's group")
	}
	// Traffic from A to B is B's group's business.
	if connects(t, a1, b1.PrivateIP) {
		t.Errorf("a1 reaches b1:22 without being in B's group")
	}

	// One cluster per local district.
	_, err := a.EnsureGroup(t.Context(), provider.GroupSpec{Name: "transit-other-x", Cluster: "other", District: a.district})
	if err == nil || !strings.Contains(err.Error(), "one cluster") {
		t.Errorf("EnsureGroup of a second cluster in a district: err = %v, want the one-cluster error", err)
	}
}

// waitGone polls List until none of ids is listed.
func waitGone(t testing.TB, drv *driver, cluster string, ids ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	for {
		insts, _, err := drv.List(ctx, cluster)
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		left := 0
		for _, i := range insts {
			if slices.Contains(ids, i.ProviderID) {
				left++
				if i.State != provider.InstanceTerminating {
					t.Errorf("%s is %s while being torn down", i.ProviderID, i.State)
				}
			}
		}
		if left == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d of %v still listed", left, ids)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func TestResumeTeardown(t *testing.T) {
	e := newEnv(t)
	drv := e.driver(e.district())
	g := e.group(drv, "crash")
	inst := e.launch(drv, g, "crash", "crash-n1")
	rec, err := drv.readNode(inst.ProviderID)
	if err != nil {
		t.Fatal(err)
	}
	// A transit that marked the node terminating and was killed with its
	// teardown: the recorded teardown pid is a process that is gone.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	if err := drv.updateNode(t.Context(), inst.ProviderID, func(r *nodeRecord) error {
		r.State = stateTerminating
		r.TeardownPID, r.TeardownStart = dead.Process.Pid, 1
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	insts, _, err := drv.List(t.Context(), "crash")
	if err != nil {
		t.Fatal(err)
	}
	if len(insts) != 1 || insts[0].State != provider.InstanceTerminating {
		t.Fatalf("List after the crash = %+v, want the node terminating", insts)
	}
	waitGone(t, drv, "crash", inst.ProviderID)
	if initAlive(rec) {
		t.Errorf("the node's sshd (pid %d) survived the resumed teardown", rec.InitPID)
	}
	if netnsExists(rec.Netns) {
		t.Errorf("netns %s survived the resumed teardown", rec.Netns)
	}
}

// A transit killed while it wrote a group record leaves the write's
// temporary file; the district must still go away with its last group.
func TestStaleTempFileDoesNotKeepDistrict(t *testing.T) {
	e := newEnv(t)
	drv := e.driver(e.district())
	g := e.group(drv, "stale")
	stale := filepath.Join(districtDir(e.root, drv.district), "groups", "."+g.ProviderID+".json.12345")
	if err := os.WriteFile(stale, []byte(`{"half":`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, groups, err := drv.List(t.Context(), "stale"); err != nil || len(groups) != 1 {
		t.Fatalf("List with a stale temporary file = %v, %v; want the one group", groups, err)
	}
	if err := drv.DeleteGroup(t.Context(), g); err != nil {
		t.Fatal(err)
	}
	if _, err := net.InterfaceByName(drv.bridge); err == nil {
		t.Errorf("bridge %s is still there", drv.bridge)
	}
	if _, err := os.Stat(districtDir(e.root, drv.district)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("district records still there: %v", err)
	}
}

func TestInterruptedLaunch(t *testing.T) {
	e := newEnv(t)
	drv := e.driver(e.district())
	g := e.group(drv, "intr")
	ctx := t.Context()

	// Killed right after the record write: nothing made yet.
	r1, err := drv.prepare(ctx, e.launchSpec(drv, g, "intr", "intr-n1"))
	if err != nil {
		t.Fatal(err)
	}
	e.track(r1.ProviderID)
	// Killed while booting: the netns and veth exist, no init.
	r2, err := drv.prepare(ctx, e.launchSpec(drv, g, "intr", "intr-n2"))
	if err != nil {
		t.Fatal(err)
	}
	e.track(r2.ProviderID)
	mustIP(t,
		[]string{"netns", "add", r2.Netns},
		[]string{"link", "add", r2.HostVeth, "type", "veth", "peer", "name", "eth0", "netns", r2.Netns})
	// Killed while waiting for SSH: the node runs, the record says pending.
	r3, err := drv.prepare(ctx, e.launchSpec(drv, g, "intr", "intr-n3"))
	if err != nil {
		t.Fatal(err)
	}
	e.track(r3.ProviderID)
	if _, err := drv.startInit(t.Context(), r3); err != nil {
		t.Fatal(err)
	}

	// Killed while waiting for SSH, and the node's init died since.
	r4, err := drv.prepare(ctx, e.launchSpec(drv, g, "intr", "intr-n4"))
	if err != nil {
		t.Fatal(err)
	}
	e.track(r4.ProviderID)
	if _, err := drv.startInit(t.Context(), r4); err != nil {
		t.Fatal(err)
	}
	if r4, err = drv.readNode(r4.ProviderID); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(r4.InitPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}

	// Nobody will write the records again, yet a cloud moves a machine
	// out of pending by itself: the node that boots is running, the one
	// whose init died failed; those without an init stay pending until a
	// launch would have given up on them, then failed.
	want := map[string]provider.InstanceState{r1.ProviderID: provider.InstancePending, r2.ProviderID: provider.InstancePending,
		r3.ProviderID: provider.InstanceRunning, r4.ProviderID: provider.InstanceFailed}
	var insts []provider.Instance
	for deadline := time.Now().Add(drv.sshWait); ; time.Sleep(100 * time.Millisecond) {
		if insts, _, err = drv.List(ctx, "intr"); err != nil {
			t.Fatal(err)
		}
		got := map[string]provider.InstanceState{}
		for _, i := range insts {
			got[i.ProviderID] = i.State
		}
		if maps.Equal(got, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("interrupted launches listed %v, want %v", got, want)
		}
	}
	if inst, err := drv.Describe(ctx, provider.Instance{ProviderID: r3.ProviderID}); err != nil || inst.State != provider.InstanceRunning {
		t.Errorf("Describe %s = %s, %v; want running", r3.ProviderID, inst.State, err)
	}
	late := *drv
	late.clock = clocktest.NewFake(time.Now().Add(drv.sshWait + time.Minute))
	for _, r := range []*nodeRecord{r1, r2} {
		if inst, err := late.Describe(ctx, provider.Instance{ProviderID: r.ProviderID}); err != nil || inst.State != provider.InstanceFailed {
			t.Errorf("%s past the SSH wait without an init: %s, %v; want failed", r.ProviderID, inst.State, err)
		}
	}
	var ids []string
	for _, i := range insts {
		ids = append(ids, i.ProviderID)
		if err := drv.Terminate(ctx, i); err != nil {
			t.Fatalf("Terminate %s: %v", i.ProviderID, err)
		}
	}
	waitGone(t, drv, "intr", ids...)
	if _, err := drv.Describe(ctx, provider.Instance{ProviderID: r3.ProviderID}); !errors.Is(err, provider.ErrCloudNotFound) {
		t.Errorf("Describe of a terminated node: %v, want not found", err)
	}
	for _, r := range []*nodeRecord{r1, r2, r3, r4} {
		if netnsExists(r.Netns) {
			t.Errorf("netns %s left after Terminate", r.Netns)
		}
		// The teardown's last two steps remove the record (List stops
		// showing the node) and then the emptied directory: CI once
		// looked in between.
		deadline := time.Now().Add(10 * time.Second)
		for {
			_, err := os.Stat(r.NodeDir)
			if err != nil {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("node dir %s left after Terminate", r.NodeDir)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func TestParallelLaunch(t *testing.T) {
	e := newEnv(t)
	drv := e.driver(e.district())
	g := e.group(drv, "par")
	const n = 5
	insts := make([]provider.Instance, n)
	var eg errgroup.Group
	start := time.Now()
	for i := range n {
		eg.Go(func() error {
			inst, err := drv.Launch(t.Context(), e.launchSpec(drv, g, "par", fmt.Sprintf("par-n%d", i)))
			if err != nil {
				return err
			}
			e.track(inst.ProviderID)
			insts[i] = inst
			return nil
		})
	}
	if err := eg.Wait(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d parallel launches took %s", n, time.Since(start))
	ips := map[string]bool{}
	for _, inst := range insts {
		if ips[inst.PrivateIP] {
			t.Errorf("address %s handed out twice", inst.PrivateIP)
		}
		ips[inst.PrivateIP] = true
		if out, err := e.ssh(inst.PrivateIP, "hostname"); err != nil || strings.TrimSpace(out) != inst.Tags[districts.TagNode] {
			t.Errorf("node %s: hostname over ssh = %q (%v)", inst.Tags[districts.TagNode], out, err)
		}
	}
	start = time.Now()
	var ids []string
	for _, inst := range insts {
		if err := drv.Terminate(t.Context(), inst); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, inst.ProviderID)
	}
	waitGone(t, drv, "par", ids...)
	t.Logf("%d terminations took %s", n, time.Since(start))
}

func TestLaunchFailureReportsLog(t *testing.T) {
	e := newEnv(t)
	drv := e.driver(e.district())
	// Somewhere the node sees (not /tmp or /var/tmp: a node has its own).
	dir, err := os.MkdirTemp("/var/lib", "transit-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	fake := filepath.Join(dir, "sshd")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho 'fatal: test sshd refuses to start' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	drv.sshd = fake
	g := e.group(drv, "fail")
	_, err = drv.Launch(t.Context(), e.launchSpec(drv, g, "fail", "fail-n1"))
	if err == nil {
		t.Fatal("Launch with a broken sshd succeeded")
	}
	if !strings.Contains(err.Error(), "test sshd refuses to start") {
		t.Errorf("Launch error lacks the sshd log: %v", err)
	}
	insts, _, lerr := drv.List(t.Context(), "fail")
	if lerr != nil {
		t.Fatal(lerr)
	}
	if len(insts) != 0 {
		t.Errorf("a failed launch is still listed: %+v", insts)
	}
}

func TestLaunchValidates(t *testing.T) {
	e := newEnv(t)
	drv := e.driver(e.district())
	g := e.group(drv, "val")
	for name, mut := range map[string]func(*provider.LaunchSpec){
		"missing group": func(s *provider.LaunchSpec) { s.GroupID = "TRANSIT-0000000000" },
		"no key":        func(s *provider.LaunchSpec) { s.AuthorizedKey = "" },
		"bad node id":   func(s *provider.LaunchSpec) { s.Node.ID = "a b" },
		"no tags":       func(s *provider.LaunchSpec) { s.Tags = nil },
	} {
		spec := e.launchSpec(drv, g, "val", "val-n1")
		mut(&spec)
		if _, err := drv.Launch(t.Context(), spec); err == nil {
			t.Errorf("%s: Launch succeeded", name)
		}
	}
	if err := drv.DeleteGroup(t.Context(), provider.Group{ProviderID: "TRANSIT-0000000000"}); err != nil {
		t.Errorf("DeleteGroup of a missing group: %v", err)
	}
}

func TestPurgeAfterCrash(t *testing.T) {
	e := newEnv(t)
	drv := e.driver(e.district())
	g := e.group(drv, "purge", "192.0.2.1")
	e.launch(drv, g, "purge", "purge-n1")
	r, err := drv.prepare(t.Context(), e.launchSpec(drv, g, "purge", "purge-n2"))
	if err != nil {
		t.Fatal(err)
	}
	e.track(r.ProviderID)
	// Nothing terminated, nothing deleted: the cleanup's Purge must find
	// and remove all of it, and assert nothing is left.
}

// BenchmarkLaunch measures launching one node until it answers SSH, and
// its teardown until List no longer shows it.
func BenchmarkLaunch(b *testing.B) { benchLaunch(b, 1) }

// BenchmarkLaunch10 does the same for 10 nodes launched in parallel.
func BenchmarkLaunch10(b *testing.B) { benchLaunch(b, 10) }

func benchLaunch(b *testing.B, n int) {
	e := newEnv(b)
	drv := e.driver(e.district())
	g := e.group(drv, "bench")
	var launch, term time.Duration
	for b.Loop() {
		start := time.Now()
		insts := make([]provider.Instance, n)
		var eg errgroup.Group
		for i := range n {
			eg.Go(func() error {
				inst, err := drv.Launch(b.Context(), e.launchSpec(drv, g, "bench", fmt.Sprintf("bench-n%d", i)))
				if err == nil {
					e.track(inst.ProviderID)
				}
				insts[i] = inst
				return err
			})
		}
		if err := eg.Wait(); err != nil {
			b.Fatal(err)
		}
		launch += time.Since(start)
		start = time.Now()
		var ids []string
		for _, inst := range insts {
			if err := drv.Terminate(b.Context(), inst); err != nil {
				b.Fatal(err)
			}
			ids = append(ids, inst.ProviderID)
		}
		waitGone(b, drv, "bench", ids...)
		term += time.Since(start)
	}
	b.ReportMetric(launch.Seconds()/float64(b.N), "launch-s/op")
	b.ReportMetric(term.Seconds()/float64(b.N), "terminate-s/op")
}

// A node whose init died (a crash, a host reboot) is a dead machine: List
// tears it down and reports it terminating, then gone.
func TestDeadNodeIsListedGone(t *testing.T) {
	e := newEnv(t)
	drv := e.driver(e.district())
	g := e.group(drv, "dead")
	inst := e.launch(drv, g, "dead", "dead-n1")
	rec, err := drv.readNode(inst.ProviderID)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := e.ssh(inst.PublicIP, "setsid sleep 1000 </dev/null >/dev/null 2>&1 &"); err != nil {
		t.Fatalf("start a daemon on the node: %v\n%s", err, out)
	}
	if err := syscall.Kill(rec.InitPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); initAlive(rec); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the node's init does not die")
		}
	}
	// Its init gone, the node is gone: nothing of it runs, before any
	// teardown (a PID namespace ends with its PID 1).
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		procs := ""
		for _, cg := range rec.Cgroups {
			b, _ := os.ReadFile(filepath.Join(cg, "cgroup.procs"))
			procs += string(b)
		}
		if strings.TrimSpace(procs) == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes of the node outlive its init: %q", procs)
		}
	}
	insts, _, err := drv.List(t.Context(), "dead")
	if err != nil {
		t.Fatal(err)
	}
	if len(insts) == 1 && insts[0].State == provider.InstanceRunning {
		t.Fatalf("List = %+v: a node whose init died is listed running", insts)
	}
	waitGone(t, drv, "dead", inst.ProviderID)
	if netnsExists(rec.Netns) {
		t.Errorf("netns %s survived", rec.Netns)
	}
}

// A FORWARD jump flushed behind transit's back (a firewalld reload) makes
// the group list as allowing nothing; EnsureGroup puts the jump back.
func TestFlushedJumpIsRepaired(t *testing.T) {
	e := newEnv(t)
	drv := e.driver(e.district())
	g := e.group(drv, "jump", "192.0.2.7")
	if out, err := exec.Command("iptables", "-w", "-D", "FORWARD", "-o", drv.bridge, "-j", g.ProviderID).CombinedOutput(); err != nil {
		t.Fatalf("delete the jump: %v\n%s", err, out)
	}
	_, groups, err := drv.List(t.Context(), "jump")
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 1 || len(groups[0].Sources) != 0 {
		t.Fatalf("List = %+v, want the group allowing nothing while its jump is missing", groups)
	}
	e.group(drv, "jump", "192.0.2.7")
	_, groups, err = drv.List(t.Context(), "jump")
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 1 || !slices.Equal(groups[0].Sources, []string{"192.0.2.7"}) {
		t.Fatalf("List after EnsureGroup = %+v, want the jump back and the source listed", groups)
	}
}

// A node shows the kubelet the kernel tunables it insists on, from files
// of its own; the host's values never change, other global tunables are
// read-only, and the per-namespace net ones stay writable.
func TestNodeKernelTunables(t *testing.T) {
	e := newEnv(t)
	drv := e.driver(e.district())
	g := e.group(drv, "sysctl")
	inst := e.launch(drv, g, "sysctl", "sysctl-n1")
	host := func(key string) string {
		t.Helper()
		data, err := os.ReadFile("/proc/sys/" + key)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(data))
	}
	before := map[string]string{}
	for _, tu := range kubeletTunables {
		before[tu.key] = host(tu.key)
	}
	localnet := host("net/ipv4/conf/all/route_localnet")
	script := `set -e
for k in vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops kernel/keys/root_maxkeys kernel/keys/root_maxbytes; do
	echo "$k=$(cat /proc/sys/$k)"
done
if echo 7 > /proc/sys/kernel/panic 2>/dev/null; then echo panic=written; fi
if echo 1 > /proc/sys/vm/overcommit_memory 2>/dev/null; then echo overcommit=written; fi
if echo 4194304 > /proc/sys/kernel/pid_max 2>/dev/null; then echo pid_max=written; fi
echo 1 > /proc/sys/net/ipv4/conf/all/route_localnet
echo "route_localnet=$(cat /proc/sys/net/ipv4/conf/all/route_localnet)"
`
	out, err := e.ssh(inst.PrivateIP, script)
	if err != nil {
		t.Fatalf("ssh: %v\n%s", err, out)
	}
	for _, tu := range kubeletTunables {
		if !strings.Contains(out, tu.key+"="+tu.value+"\n") {
			t.Errorf("the node reads %s other than the kubelet's %s:\n%s", tu.key, tu.value, out)
		}
		if got := host(tu.key); got != before[tu.key] {
			t.Errorf("host %s changed: %s → %s", tu.key, before[tu.key], got)
		}
	}
	if strings.Contains(out, "=written") {
		t.Errorf("the node wrote a global tunable (its own copy or the host's):\n%s", out)
	}
	if !strings.Contains(out, "route_localnet=1") {
		t.Errorf("a net sysctl is not writable in the node:\n%s", out)
	}
	if got := host("net/ipv4/conf/all/route_localnet"); got != localnet {
		t.Errorf("the node's net sysctl changed the host's: %s → %s", localnet, got)
	}
}

// A process in a frozen cgroup (runc freezes a container to signal it, and
// a runc killed meanwhile leaves it frozen) cannot die: the teardown thaws
// it, so the node goes whole (an e2e destroy waited for ever on one).
func TestFrozenProcessIsTornDown(t *testing.T) {
	e := newEnv(t)
	drv := e.driver(e.district())
	g := e.group(drv, "frozen")
	inst := e.launch(drv, g, "frozen", "frozen-n1")
	rec, err := drv.readNode(inst.ProviderID)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := e.ssh(inst.PublicIP, "setsid sleep 1000 </dev/null >/dev/null 2>&1 & echo $!"); err != nil {
		t.Fatalf("start a process on the node: %v\n%s", err, out)
	}
	// The sleep, by its command line, among the node's processes.
	var pid string
	for deadline := time.Now().Add(5 * time.Second); pid == ""; time.Sleep(20 * time.Millisecond) {
		for _, cg := range rec.Cgroups {
			b, _ := os.ReadFile(filepath.Join(cg, "cgroup.procs"))
			for p := range strings.FieldsSeq(string(b)) {
				if cmd, _ := os.ReadFile("/proc/" + p + "/cmdline"); string(cmd) == "sleep\x001000\x00" {
					pid = p
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the node's sleep is in none of its cgroups")
		}
	}
	frozen := false
	for _, cg := range rec.Cgroups {
		dir := filepath.Join(cg, "container")
		freezer, state := filepath.Join(dir, "freezer.state"), "FROZEN"
		if !strings.Contains(cg, "/freezer/") {
			freezer, state = filepath.Join(dir, "cgroup.freeze"), "1"
			if _, err := os.Stat(filepath.Join(cg, "cgroup.freeze")); err != nil {
				continue
			}
		}
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(pid), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(freezer, []byte(state), 0o644); err != nil {
			t.Fatal(err)
		}
		frozen = true
		break
	}
	if !frozen {
		t.Fatal("no freezer among the node's cgroups")
	}
	if err := drv.Terminate(t.Context(), inst); err != nil {
		t.Fatal(err)
	}
	waitGone(t, drv, "frozen", inst.ProviderID)
	if _, err := os.Stat("/proc/" + pid); err == nil {
		t.Errorf("the frozen process %s outlived its node", pid)
	}
	for _, cg := range rec.Cgroups {
		if _, err := os.Stat(cg); err == nil {
			t.Errorf("cgroup %s outlived its node", cg)
		}
	}
}
