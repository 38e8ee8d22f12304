package local

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/cloudtransit/transit/control"
	"github.com/cloudtransit/transit/districts"
)

// env is one integration test's world: its own root, districts and key.
type env struct {
	t       *testing.T
	root    string
	keyFile string
	pubKey  string

	mu        sync.Mutex
	districts []string
	chains    []string
	nodes     []string
	created   []string // created-dirs as last seen
}

// requireRoot skips integration tests under -short and when not root.
func requireRoot(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration: skipped with -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("integration: needs root (network namespaces, bridges, iptables)")
	}
}

func newEnv(t *testing.T) *env {
	t.Helper()
	requireRoot(t)
	e := &env{t: t, root: t.TempDir()}
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
	drv, err := New(e.t.Context(), d, Options{Root: e.root, SSHWait: 20 * time.Second})
	if err != nil {
		e.t.Fatalf("New: %v", err)
	}
	return drv.(*driver)
}

// group ensures cluster's group in drv's district with sources.
func (e *env) group(drv *driver, cluster string, sources ...string) control.Group {
	e.t.Helper()
	g, err := drv.EnsureGroup(e.t.Context(), control.GroupSpec{
		Name: control.GroupName(cluster, drv.district), Cluster: cluster, District: drv.district,
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

func (e *env) launchSpec(drv *driver, g control.Group, cluster, id string) control.LaunchSpec {
	n := districts.Node{ID: id, Cluster: cluster, District: drv.district, Role: districts.RoleWorker, Flavor: "small"}
	return control.LaunchSpec{Node: n, GroupID: g.ProviderID, Tags: control.IdentityTags(n), AuthorizedKey: e.pubKey}
}

func (e *env) launch(drv *driver, g control.Group, cluster, id string) control.Instance {
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
	for _, left := range e.leftovers(created) {
		t.Errorf("left behind: %s", left)
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
		if strings.Contains(links, " "+bridgeName(d)+":") {
			left = append(left, "bridge "+bridgeName(d)+" of "+d)
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
		if _, err := os.Stat(d); err == nil && !mountedSomewhere(d) {
			left = append(left, "created dir "+d)
		}
	}
	return left
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

func TestSmoke(t *testing.T) {
	e := newEnv(t)
	drv := e.driver(e.district())
	g := e.group(drv, "c1")
	start := time.Now()
	inst := e.launch(drv, g, "c1", "c1-n1")
	t.Logf("launch: %s %+v", time.Since(start), inst)
	out, err := e.ssh(inst.PrivateIP, "hostname; cat /proc/self/cgroup; ls /var/lib/transit; mount | wc -l")
	t.Logf("ssh: %v\n%s", err, out)
	start = time.Now()
	if err := drv.Terminate(t.Context(), inst); err != nil {
		t.Fatal(err)
	}
	for {
		insts, _, err := drv.List(t.Context(), "c1")
		if err != nil {
			t.Fatal(err)
		}
		if len(insts) == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("terminate: %s", time.Since(start))
}
