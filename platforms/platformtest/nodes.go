package platformtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/drivers/local"
	"github.com/cloudtransit/transit/platforms/ssh"
	"github.com/cloudtransit/transit/provider"
)

// The suite's machines, by name.
const (
	nodeMaster1 = "master-1"
	nodeMaster2 = "master-2"
	nodeWorker1 = "worker-1"
	nodeWorker2 = "worker-2"
	// nodeSpare is a worker machine that never joins.
	nodeSpare = "worker-3"
	// nodeClone is a copy of worker 1's machine (Identity).
	nodeClone = "clone"
)

// The SSH waits drivers get: a node that does not answer is given up on
// as quickly as the SSH pool gives up on a node that answered before.
const (
	sshWait = 10 * time.Second
	sshDial = 5 * time.Second
)

// suite is one run of the suite: a local district with its machines, the
// cluster's key and pins, and the driver that does the work.
type suite struct {
	h        Harness
	env      Env
	root     string
	district districts.District
	infra    provider.Infrastructure
	group    provider.Group
	bridge   string
	p        provider.Platform
	// authorizedKey is the cluster key's authorized_keys line.
	authorizedKey string

	mu       sync.Mutex
	machines map[string]*machine // by name
	rules    map[string][]string // firewall rules in place, by node id
}

type machine struct {
	node districts.Node
	inst provider.Instance
	gone bool
}

// newSuite makes the district, launches the machines and the driver, and
// registers the cleanup that removes all of it.
func newSuite(t *testing.T, h Harness) *suite {
	t.Helper()
	ctx := t.Context()
	if err := local.Check(); err != nil {
		t.Fatalf("the local provider cannot run here (make deps): %v", err)
	}
	s := &suite{h: h, root: suiteRoot(h.Platform), machines: map[string]*machine{}, rules: map[string][]string{}}
	// What a killed earlier run of this platform's suite left: its
	// machines still run, its rules still silence their addresses.
	if err := purgeLeftovers(ctx, s.root, h.Platform); err != nil {
		t.Fatalf("purge what an earlier run left: %v", err)
	}
	stateDir := t.TempDir()
	cluster := "pt-" + h.Platform + "-" + randHex(2)
	key, err := ssh.EnsureKey(stateDir, cluster)
	if err != nil {
		t.Fatal(err)
	}
	s.authorizedKey = key.AuthorizedKey
	hosts, err := ssh.OpenHostKeys(ssh.HostKeysPath(stateDir, cluster))
	if err != nil {
		t.Fatal(err)
	}
	// Registered before anything is made: it runs last, after the
	// drivers are closed and the firewall rules are gone.
	t.Cleanup(func() { s.cleanup(t) })

	imagesDir := filepath.Join(s.root, "images")
	if err := os.MkdirAll(imagesDir, 0o755); err != nil {
		t.Fatal(err)
	}
	d := districts.District{Type: "district", Provider: districts.ProviderLocal,
		Flavors: []districts.DistrictFlavor{{Flavor: "small"}}}
	if h.Setup != nil {
		h.Setup(t, &d, imagesDir)
	}
	s.district, s.infra, s.group = s.makeDistrict(t, d, cluster, hosts)

	s.env = Env{
		Cluster:   districts.Cluster{Type: "cluster", ID: cluster, Platform: h.Platform},
		Districts: []districts.District{s.district},
		StateDir:  stateDir,
		SSH:       ssh.Config{Signer: key.Signer, HostKeys: hosts, KeyPath: key.Path, WaitTimeout: sshWait, DialTimeout: sshDial},
	}
	pool := ssh.NewPool(s.env.SSH, "the conformance suite")
	t.Cleanup(func() { _ = pool.Close() })
	s.env.Run = pool.Run

	began := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	for _, name := range []string{nodeMaster1, nodeMaster2, nodeWorker1, nodeWorker2, nodeSpare} {
		g.Go(func() error { return s.launchNode(gctx, name, districts.Node{}) })
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if s.bridge = bridgeOf(s.district.LocalSubnet); s.bridge == "" {
		t.Errorf("no bridge holds %s after the launches", s.district.LocalSubnet)
	}
	// Every machine may reach every other, as the loop allows the
	// cluster's addresses before joins.
	if _, err := s.infra.EnsureGroup(ctx, s.groupSpec(s.addresses())); err != nil {
		t.Fatalf("allow the machines into the group: %v", err)
	}
	t.Logf("launched %d machines in %s in district %s (%s)", len(s.machines), time.Since(began).Round(100*time.Millisecond),
		s.district.ID, s.district.LocalSubnet)

	s.p = h.New(s.env)
	t.Cleanup(func() { closeDriver(t, s.p) })
	return s
}

// makeDistrict picks a free subnet for d and makes the cluster's group
// there (which makes the district's bridge).
func (s *suite) makeDistrict(t *testing.T, d districts.District, cluster string, hosts *ssh.HostKeys) (districts.District, provider.Infrastructure, provider.Group) {
	t.Helper()
	var lastErr error
	for i := range 8 {
		d.ID = "pt-" + randHex(3)
		// The platform's own subnet first, apart from the other
		// platform's suite, which may run at once; another if it is
		// taken.
		d.LocalSubnet = fmt.Sprintf("10.247.%d.0/24", 1+int(randByte())%250)
		if sub, ok := suiteSubnets[s.h.Platform]; ok && i == 0 {
			d.LocalSubnet = sub
		}
		drv, err := local.New(t.Context(), d, local.Options{Root: s.root, SSHWait: 2 * time.Minute})
		if err != nil {
			t.Fatalf("local driver: %v", err)
		}
		infra := ssh.PinHostKeys(drv, hosts)
		spec := provider.GroupSpec{Name: provider.GroupName(cluster, d.ID), Cluster: cluster, District: d.ID,
			Tags: map[string]string{districts.TagCluster: cluster}}
		g, err := infra.EnsureGroup(t.Context(), spec)
		if err == nil {
			return d, infra, g
		}
		lastErr = err
		if !strings.Contains(err.Error(), "overlaps") {
			break
		}
		_ = infra.DeleteGroup(t.Context(), provider.Group{ProviderID: g.ProviderID, Name: spec.Name})
	}
	t.Fatalf("make a local district: %v", lastErr)
	return districts.District{}, nil, provider.Group{}
}

func (s *suite) groupSpec(sources []string) provider.GroupSpec {
	c := s.env.Cluster.ID
	return provider.GroupSpec{Name: provider.GroupName(c, s.district.ID), Cluster: c, District: s.district.ID,
		Tags: map[string]string{districts.TagCluster: c}, Sources: sources}
}

// launchNode launches the machine name; like, when it has an id, is the
// node whose identity (tags, id, hostname) the machine copies.
func (s *suite) launchNode(ctx context.Context, name string, like districts.Node) error {
	role := districts.RoleWorker
	if strings.HasPrefix(name, "master") {
		role = districts.RoleMaster
	}
	n := districts.Node{Type: "node", ID: s.env.Cluster.ID + "-" + name, Cluster: s.env.Cluster.ID, District: s.district.ID,
		Role: role, Flavor: "small", Tags: map[string]string{"site": "platformtest", "tier": role}}
	if like.ID != "" {
		n = like
		n.Tags = maps.Clone(like.Tags)
	}
	inst, err := s.infra.Launch(ctx, provider.LaunchSpec{
		Node: n, GroupID: s.group.ProviderID, Tags: provider.IdentityTags(n, "platformtest"),
		AuthorizedKey: s.authorizedKey,
	})
	if err != nil {
		return fmt.Errorf("launch %s: %w", name, err)
	}
	n.ProviderID, n.PublicIP, n.PrivateIP, n.Zone, n.CreatedAt = inst.ProviderID, inst.PublicIP, inst.PrivateIP, inst.Zone, inst.CreatedAt
	n.Phase = districts.PhaseLaunched
	s.mu.Lock()
	s.machines[name] = &machine{node: n, inst: inst}
	s.mu.Unlock()
	return nil
}

// launch launches machine name as a copy of like, for one step.
func (s *suite) launch(t *testing.T, name string, like districts.Node) districts.Node {
	t.Helper()
	if err := s.launchNode(t.Context(), name, like); err != nil {
		t.Fatal(err)
	}
	return s.nodeOf(name)
}

// terminate deletes machine name behind the driver's back and waits
// until the cloud no longer lists it.
func (s *suite) terminate(t *testing.T, name string) {
	t.Helper()
	s.mu.Lock()
	m := s.machines[name]
	s.mu.Unlock()
	if m == nil || m.gone {
		return
	}
	ctx := context.WithoutCancel(t.Context())
	if err := s.infra.Terminate(ctx, m.inst); err != nil {
		t.Fatalf("terminate %s: %v", name, err)
	}
	s.mu.Lock()
	m.gone = true
	s.mu.Unlock()
	deadline := time.Now().Add(time.Minute)
	for {
		insts, _, err := s.infra.List(ctx, s.env.Cluster.ID)
		if err != nil {
			t.Fatalf("list machines: %v", err)
		}
		if !slices.ContainsFunc(insts, func(i provider.Instance) bool { return i.ProviderID == m.inst.ProviderID }) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("machine %s (%s) still listed a minute after its termination", name, m.inst.ProviderID)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// node returns machine name's node.
func (s *suite) node(t *testing.T, name string) districts.Node {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.machines[name]
	if m == nil {
		t.Fatalf("no machine %s", name)
	}
	return m.node
}

func (s *suite) nodeOf(name string) districts.Node {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m := s.machines[name]; m != nil {
		return m.node
	}
	return districts.Node{}
}

func (s *suite) setPhase(name string, p districts.Phase) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m := s.machines[name]; m != nil {
		m.node.Phase = p
	}
}

// live are the cluster's machines that exist, as the loop would give
// them to the driver: the suite's five in order, without the copy.
func (s *suite) live() []districts.Node {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []districts.Node
	for _, name := range []string{nodeMaster1, nodeMaster2, nodeWorker1, nodeWorker2, nodeSpare} {
		if m := s.machines[name]; m != nil && !m.gone {
			out = append(out, m.node)
		}
	}
	return out
}

// allMachines are every machine ever launched, gone ones included.
func (s *suite) allMachines() []districts.Node {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []districts.Node
	for _, m := range s.machines {
		out = append(out, m.node)
	}
	return out
}

func (s *suite) addresses() []string {
	var out []string
	for _, n := range s.live() {
		out = append(out, address(n))
	}
	slices.Sort(out)
	return out
}

// silence makes node n stop answering: every packet from the host to
// its SSH port vanishes, as when its machine is cut off or hangs (a
// refused connection would be an answer of sorts). undo lets it answer
// again; whatever is left is undone at cleanup.
func (s *suite) silence(t *testing.T, n districts.Node) (undo func()) {
	t.Helper()
	rule := []string{"OUTPUT", "-d", address(n) + "/32", "-p", "tcp", "--dport", "22",
		"-m", "comment", "--comment", s.ruleComment(), "-j", "DROP"}
	if out, err := exec.Command("iptables", append([]string{"-w", "-I"}, rule...)...).CombinedOutput(); err != nil {
		t.Fatalf("silence %s: iptables: %v\n%s", n.ID, err, out)
	}
	s.mu.Lock()
	s.rules[n.ID] = rule
	s.mu.Unlock()
	return func() {
		if err := s.unsilence(n.ID); err != nil {
			t.Error(err)
		}
	}
}

func (s *suite) unsilence(id string) error {
	s.mu.Lock()
	rule, ok := s.rules[id]
	delete(s.rules, id)
	s.mu.Unlock()
	if !ok {
		return nil
	}
	if out, err := exec.Command("iptables", append([]string{"-w", "-D"}, rule...)...).CombinedOutput(); err != nil {
		return fmt.Errorf("let %s answer again: iptables: %w\n%s", id, err, out)
	}
	return nil
}

// ruleComment marks the suite's firewall rules.
func (s *suite) ruleComment() string { return "transit-platformtest " + s.env.Cluster.ID }

// suiteRoot is where a platform's suite keeps its machines' records:
// fixed, so that the next run finds what a killed one left.
func suiteRoot(platform string) string { return "/var/lib/transit/platformtest-" + platform }

// suiteSubnets are the platforms' suites' subnets, apart from each other
// and from every other test's.
var suiteSubnets = map[string]string{"swarm": "10.247.1.0/24", "kubernetes": "10.247.2.0/24"}

// purgeLeftovers removes what a killed run of platform's suite left: the
// rules that silenced its machines (marked with its clusters' names) and
// every machine, bridge and chain under root.
func purgeLeftovers(ctx context.Context, root, platform string) error {
	if err := PurgeRules(ctx, "OUTPUT", "transit-platformtest pt-"+platform+"-"); err != nil {
		return err
	}
	return local.Purge(ctx, root)
}

// PurgeRules deletes the rules of the filter table's chain whose comment
// begins with mark: the rules a test inserted to black-hole a node, which a
// killed run of it left (they would refuse the next run's node at the
// same address).
func PurgeRules(ctx context.Context, chain, mark string) error {
	out, err := exec.CommandContext(ctx, "iptables", "-w", "-S", chain).Output()
	if err != nil {
		return fmt.Errorf("iptables -S %s: %w", chain, err)
	}
	for line := range strings.Lines(string(out)) {
		rule, ok := strings.CutPrefix(strings.TrimSpace(line), "-A ")
		if !ok || !strings.Contains(rule, `--comment "`+mark) {
			continue
		}
		// The rule as listed, its comment one argument.
		args := []string{"-w", "-D"}
		for i, part := range strings.Split(rule, `"`) {
			if i%2 == 1 {
				args = append(args, part)
			} else {
				args = append(args, strings.Fields(part)...)
			}
		}
		if out, err := exec.CommandContext(ctx, "iptables", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("remove an earlier run's rule %q: %w\n%s", rule, err, out)
		}
	}
	return nil
}

// cleanup undoes the firewall rules, tears every machine, the bridge and
// the chains down (local.Purge), and reports whatever is left.
func (s *suite) cleanup(t *testing.T) {
	s.mu.Lock()
	ids := slices.Collect(maps.Keys(s.rules))
	s.mu.Unlock()
	for _, id := range ids {
		if err := s.unsilence(id); err != nil {
			t.Error(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	began := time.Now()
	if err := local.Purge(ctx, s.root); err != nil {
		t.Errorf("purge the local nodes: %v", err)
	}
	left := s.leftovers()
	for _, l := range left {
		t.Errorf("left behind: %s", l)
	}
	if len(left) == 0 {
		if err := os.RemoveAll(s.root); err != nil {
			t.Error(err)
		}
	}
	t.Logf("cleanup took %s", time.Since(began).Round(100*time.Millisecond))
}

// leftovers lists what the suite made that still exists.
func (s *suite) leftovers() []string {
	var left []string
	ns, _ := exec.Command("ip", "netns", "list").Output()
	links, _ := exec.Command("ip", "-o", "link", "show").Output()
	ipt, _ := exec.Command("iptables", "-w", "-S").Output()
	for _, n := range s.allMachines() {
		if n.ProviderID == "" {
			continue
		}
		// The local provider's documented names: netns transit-<id>,
		// cgroups transit/<id>.
		if strings.Contains(string(ns), "transit-"+n.ProviderID) {
			left = append(left, "network namespace of "+n.ID)
		}
		dirs, _ := filepath.Glob("/sys/fs/cgroup/*/transit/" + n.ProviderID)
		dirs2, _ := filepath.Glob("/sys/fs/cgroup/transit/" + n.ProviderID)
		for _, d := range append(dirs, dirs2...) {
			left = append(left, "cgroup "+d)
		}
	}
	if s.bridge != "" && (strings.Contains(string(links), " "+s.bridge+":") || strings.Contains(string(links), " "+s.bridge+"@")) {
		left = append(left, "bridge "+s.bridge)
	}
	if s.group.ProviderID != "" && strings.Contains(string(ipt), s.group.ProviderID) {
		left = append(left, "iptables chain "+s.group.ProviderID)
	}
	if s.env.Cluster.ID != "" && strings.Contains(string(ipt), s.ruleComment()) {
		left = append(left, "iptables rule marked "+s.ruleComment())
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if cmdline := strings.ReplaceAll(string(data), "\x00", " "); strings.Contains(cmdline, s.root+"/") {
			left = append(left, "process "+filepath.Base(filepath.Dir(p))+": "+cmdline)
		}
	}
	if _, err := os.Stat(filepath.Join(s.root, "districts")); err == nil {
		left = append(left, "records under "+s.root)
	}
	return left
}

// bridgeOf is the interface holding an address of subnet: the district's
// bridge.
func bridgeOf(subnet string) string {
	p, err := netip.ParsePrefix(subnet)
	if err != nil {
		return ""
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return ""
	}
	for _, ifc := range ifs {
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if ap, err := netip.ParsePrefix(a.String()); err == nil && p.Contains(ap.Addr()) {
				return ifc.Name
			}
		}
	}
	return ""
}

func randHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

func randByte() byte {
	b := make([]byte, 1)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return b[0]
}
