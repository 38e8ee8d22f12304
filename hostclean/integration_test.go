package hostclean

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/drivers/local"
	"github.com/cloudtransit/transit/provider"
)

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

// testBase holds the tests' scratch bases: fixed per test, so that a run
// removes what a killed earlier run of the same test left.
const testBase = "/var/lib/transit/hostclean-test"

// leftovers is what TestFindAndRemove makes: two local nodes (one whose
// records are gone), a cloudsim-style router with its uplink and chains,
// a platformtest rule, and decoys whose names are nearly transit's. Its
// names derive from the base, so a later run finds a killed run's.
type leftovers struct {
	base         string
	rootA, rootB string // rootB's records are moved away (orphaned)
	h8, h9       string // lower-case hex, 8 and 9 digits

	router, uplink           string
	forward, dnat, snat      string
	rule                     []string // the platformtest rule, without -I/-D
	comment                  string
	decoyLinks, decoyNetns   []string
	decoyChain, decoyChain9  string
	decoyRule, decoyJump     []string
	decoyComment             string
	nodeA, nodeB             provider.Instance
	districtA, districtB     string
	expected                 map[string]bool // "kind\x00name" Find must list
	expectedNetns, expectedC []string        // a process in these is the test's
}

func newLeftovers(base string) *leftovers {
	sum := sha256.Sum256([]byte(base))
	h := hex.EncodeToString(sum[:])
	l := &leftovers{
		base:  base,
		rootA: filepath.Join(base, "a"),
		rootB: filepath.Join(base, "deep", "er", "b"),
		h8:    h[:8], h9: h[8:17],
	}
	up := strings.ToUpper(l.h8)
	l.router, l.uplink = "cs-"+l.h8, "cu"+l.h8
	l.forward, l.dnat, l.snat = "CLOUDSIM-F-"+up, "CLOUDSIM-D-"+up, "CLOUDSIM-S-"+up
	l.comment = "transit-platformtest pt-hostclean-" + h[20:24]
	// TEST-NET-1 addresses: nothing here sends there.
	l.rule = []string{"OUTPUT", "-d", "192.0.2.77/32", "-p", "tcp", "--dport", "22", "-m", "comment", "--comment", l.comment, "-j", "DROP"}
	l.decoyLinks = []string{"tbogus", "tb" + l.h9, "tv" + l.h8}
	l.decoyNetns = []string{"cs-" + l.h8[:7], "cs-" + l.h9}
	l.decoyChain, l.decoyChain9 = "TRANSITORY", "TRANSIT-"+strings.ToUpper(l.h9)
	l.decoyJump = []string{"FORWARD", "-d", "192.0.2.78/32", "-j", l.decoyChain}
	l.decoyComment = "transit-platformtests " + h[20:24]
	l.decoyRule = []string{"OUTPUT", "-d", "192.0.2.79/32", "-m", "comment", "--comment", l.decoyComment, "-j", "DROP"}
	return l
}

func cmdRun(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// teardown removes everything the test made, whatever state a run (this
// one, or a killed earlier one) left it in, with the local driver's
// Purge and plain commands: never with the code under test.
func (l *leftovers) teardown(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	purged := true
	purge := func(root string) {
		if err := local.Purge(ctx, root); err != nil {
			t.Errorf("purge %s: %v", root, err)
			purged = false
		}
	}
	purge(l.rootA)
	purge(l.rootB)
	// rootB's records moved away: back, and purged (Purge left no
	// districts directory, or it failed above and the records stay).
	orphaned, records := filepath.Join(l.rootB, "orphaned"), filepath.Join(l.rootB, "districts")
	if _, err := os.Stat(orphaned); err == nil {
		if err := os.Rename(orphaned, records); err != nil {
			t.Errorf("put rootB's records back: %v", err)
			purged = false
		} else {
			purge(l.rootB)
		}
	}
	quiet := func(name string, args ...string) { _ = exec.Command(name, args...).Run() }
	// Every copy of a rule: a run may have been killed after adding it
	// and the next one added it again.
	deleteRule := func(table string, rule ...string) {
		for range 10 {
			if exec.Command("iptables", append([]string{"-w", "-t", table, "-D"}, rule...)...).Run() != nil {
				return
			}
		}
	}
	deleteRule("filter", l.rule...)
	deleteRule("filter", l.decoyRule...)
	deleteRule("filter", l.decoyJump...)
	deleteRule("filter", "FORWARD", "-i", l.uplink, "-j", l.forward)
	deleteRule("nat", "PREROUTING", "-j", l.dnat)
	deleteRule("nat", "OUTPUT", "-j", l.dnat)
	deleteRule("nat", "POSTROUTING", "-j", l.snat)
	for _, c := range [][2]string{{"filter", l.forward}, {"nat", l.dnat}, {"nat", l.snat}, {"filter", l.decoyChain}, {"filter", l.decoyChain9}} {
		quiet("iptables", "-w", "-t", c[0], "-F", c[1])
		quiet("iptables", "-w", "-t", c[0], "-X", c[1])
	}
	for _, link := range append([]string{l.uplink}, l.decoyLinks...) {
		quiet("ip", "link", "del", link)
	}
	for _, ns := range append([]string{l.router}, l.decoyNetns...) {
		quiet("ip", "netns", "del", ns)
	}
	if !purged {
		// The records name what is left: the next run purges it.
		return
	}
	if err := os.RemoveAll(l.base); err != nil {
		t.Error(err)
	}
	_ = os.Remove(testBase) // once no other test's base is there
}

// make launches the nodes and makes the rest.
func (l *leftovers) make(t *testing.T) {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	key := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sp)))
	const cluster = "hostclean"
	l.expected = map[string]bool{}
	// rootB first: the host directories nodes mount over that it
	// creates are recorded there, and go at teardown when rootB is
	// purged.
	l.districtB, l.nodeB = l.launch(t, l.rootB, cluster, key)
	l.districtA, l.nodeA = l.launch(t, l.rootA, cluster, key)
	for _, n := range []struct{ root, district, id string }{{l.rootA, l.districtA, l.nodeA.ProviderID}, {l.rootB, l.districtB, l.nodeB.ProviderID}} {
		for _, hn := range local.HostNames(n.root, cluster, []string{n.district}, []string{n.id}) {
			kind, name, _ := strings.Cut(hn, " ")
			switch kind {
			case "link":
				l.expect(KindLink, name)
			case "chain":
				l.expect(KindChain, "filter "+name)
			case "netns":
				l.expect(KindNetns, name)
				l.expectedNetns = append(l.expectedNetns, name)
			case "cgroup":
				l.expect(KindCgroup, name)
				l.expectedC = append(l.expectedC, name)
			default:
				t.Fatalf("local.HostNames names %q, a kind this test does not know", hn)
			}
		}
	}
	l.expect(KindRecords, l.rootA)
	// rootB's records go: only the names are left to find its node by.
	if err := os.Rename(filepath.Join(l.rootB, "districts"), filepath.Join(l.rootB, "orphaned")); err != nil {
		t.Fatal(err)
	}

	// A cloudsim region's router and uplink, and the backer's chains,
	// as cloudsim/localnodes makes them.
	must := func(name string, args ...string) {
		t.Helper()
		if err := cmdRun(name, args...); err != nil {
			t.Fatal(err)
		}
	}
	must("ip", "netns", "add", l.router)
	must("ip", "link", "add", l.uplink, "type", "veth", "peer", "name", "uplink", "netns", l.router)
	must("iptables", "-w", "-N", l.forward)
	must("iptables", "-w", "-I", "FORWARD", "1", "-i", l.uplink, "-j", l.forward)
	must("iptables", "-w", "-t", "nat", "-N", l.dnat)
	must("iptables", "-w", "-t", "nat", "-A", "PREROUTING", "-j", l.dnat)
	must("iptables", "-w", "-t", "nat", "-A", "OUTPUT", "-j", l.dnat)
	must("iptables", "-w", "-t", "nat", "-N", l.snat)
	must("iptables", "-w", "-t", "nat", "-A", "POSTROUTING", "-j", l.snat)
	must("iptables", append([]string{"-w", "-I"}, l.rule...)...)
	l.expect(KindNetns, l.router)
	l.expectedNetns = append(l.expectedNetns, l.router)
	l.expect(KindLink, l.uplink)
	l.expect(KindChain, "filter "+l.forward)
	l.expect(KindChain, "nat "+l.dnat)
	l.expect(KindChain, "nat "+l.snat)

	// Decoys: nearly transit's names, which must stay.
	for _, link := range l.decoyLinks {
		must("ip", "link", "add", link, "type", "bridge")
	}
	for _, ns := range l.decoyNetns {
		must("ip", "netns", "add", ns)
	}
	must("iptables", "-w", "-N", l.decoyChain)
	must("iptables", append([]string{"-w", "-A"}, l.decoyJump...)...)
	must("iptables", "-w", "-N", l.decoyChain9)
	must("iptables", append([]string{"-w", "-I"}, l.decoyRule...)...)
}

func (l *leftovers) expect(k Kind, name string) { l.expected[string(k)+"\x00"+name] = true }

// launch makes a district in root with a group and launches one node.
func (l *leftovers) launch(t *testing.T, root, cluster, key string) (string, provider.Instance) {
	t.Helper()
	ctx := t.Context()
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	var lastErr error
	for range 8 {
		b := make([]byte, 3)
		if _, err := rand.Read(b); err != nil {
			t.Fatal(err)
		}
		d := districts.District{Type: "district", ID: "hc-" + hex.EncodeToString(b), Provider: districts.ProviderLocal,
			LocalSubnet: fmt.Sprintf("10.248.%d.0/24", 1+int(b[0])%250)}
		drv, err := local.New(ctx, d, local.Options{Root: root, SSHWait: 2 * local.DefaultSSHWait})
		if err != nil {
			t.Fatalf("local driver: %v", err)
		}
		g, err := drv.EnsureGroup(ctx, provider.GroupSpec{Name: provider.GroupName(cluster, d.ID), Cluster: cluster, District: d.ID,
			Tags: map[string]string{districts.TagCluster: cluster}})
		if err != nil {
			lastErr = err
			if strings.Contains(err.Error(), "overlaps") { // another test's subnet: another one
				continue
			}
			t.Fatalf("EnsureGroup: %v", err)
		}
		n := districts.Node{ID: "hc-node-" + hex.EncodeToString(b), Cluster: cluster, District: d.ID, Role: districts.RoleWorker, Flavor: "small"}
		inst, err := drv.Launch(ctx, provider.LaunchSpec{Node: n, GroupID: g.ProviderID, Tags: provider.IdentityTags(n, ""), AuthorizedKey: key})
		if err != nil {
			t.Fatalf("Launch: %v", err)
		}
		return d.ID, inst
	}
	t.Fatalf("make a local district: %v", lastErr)
	return "", provider.Instance{}
}

// only scopes Find and Remove to what the test made, and to the decoys,
// which the names' shapes must keep out.
func (l *leftovers) only(it Item) bool {
	if l.expected[string(it.Kind)+"\x00"+it.Name] {
		return true
	}
	switch it.Kind {
	case KindProcess:
		if strings.HasPrefix(it.Because, "names "+l.base+"/") {
			return true
		}
		for _, ns := range l.expectedNetns {
			if it.Because == "in network namespace "+ns {
				return true
			}
		}
		for _, cg := range l.expectedC {
			if it.Because == "in cgroup "+cg || strings.HasPrefix(it.Because, "in cgroup "+cg+"/") {
				return true
			}
		}
	case KindLink:
		return slices.Contains(l.decoyLinks, it.Name)
	case KindNetns:
		return slices.Contains(l.decoyNetns, it.Name)
	case KindChain:
		return it.Name == "filter "+l.decoyChain || it.Name == "filter "+l.decoyChain9
	case KindRule:
		return strings.Contains(it.Name, l.comment) || strings.Contains(it.Name, l.decoyComment)
	}
	return false
}

// TestFindAndRemove makes real leftovers in a scratch base — two local
// nodes, one whose records are gone, a cloudsim-style router, uplink and
// chains, a platformtest rule — and decoys with nearly the same names:
// Find lists each leftover and no decoy, Remove leaves none of them and
// every decoy, and removing again is no error.
func TestFindAndRemove(t *testing.T) {
	requireRoot(t)
	if err := local.Check(); err != nil {
		t.Fatalf("the local provider cannot run here (make deps): %v", err)
	}
	l := newLeftovers(filepath.Join(testBase, t.Name()))
	l.teardown(t) // what a killed earlier run left
	t.Cleanup(func() { l.teardown(t) })
	if err := os.MkdirAll(l.base, 0o755); err != nil {
		t.Fatal(err)
	}
	l.make(t)

	ctx := t.Context()
	opts := Options{Base: l.base, Only: l.only}
	items, err := Find(ctx, opts)
	if err != nil {
		t.Fatalf("Find: %v", err)
	}
	var listing strings.Builder
	for _, it := range items {
		fmt.Fprintf(&listing, "  %s %s\n", it.Kind, it)
	}
	t.Logf("found:\n%s", listing.String())
	got := map[string]bool{}
	for _, it := range items {
		got[string(it.Kind)+"\x00"+it.Name] = true
	}
	for k := range l.expected {
		if !got[k] {
			t.Errorf("Find did not list %s", strings.Replace(k, "\x00", " ", 1))
		}
	}
	for _, n := range []provider.Instance{l.nodeA, l.nodeB} {
		if !slices.ContainsFunc(items, func(it Item) bool {
			return it.Kind == KindProcess && strings.Contains(it.Detail, n.ProviderID)
		}) {
			t.Errorf("Find listed no process of node %s", n.ProviderID)
		}
	}
	if !slices.ContainsFunc(items, func(it Item) bool { return it.Kind == KindRule && strings.Contains(it.Name, l.comment) }) {
		t.Errorf("Find did not list the rule commented %q", l.comment)
	}
	for _, it := range items {
		if isDecoy := !l.expected[string(it.Kind)+"\x00"+it.Name] && it.Kind != KindProcess &&
			!(it.Kind == KindRule && strings.Contains(it.Name, l.comment)); isDecoy {
			t.Errorf("Find listed a decoy: %s %s", it.Kind, it)
		}
	}
	if t.Failed() {
		return
	}

	if err := Remove(ctx, opts, items); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	after, err := Find(ctx, opts)
	if err != nil {
		t.Fatalf("Find after Remove: %v", err)
	}
	for _, it := range after {
		t.Errorf("left after Remove: %s %s", it.Kind, it)
	}
	l.checkGone(t)
	l.checkDecoys(t)

	// Again: everything is gone already, which is no error.
	if err := Remove(ctx, opts, items); err != nil {
		t.Errorf("Remove again: %v", err)
	}
}

// checkGone looks at the host without Find: none of the test's
// leftovers is there.
func (l *leftovers) checkGone(t *testing.T) {
	t.Helper()
	for k := range l.expected {
		kind, name, _ := strings.Cut(k, "\x00")
		switch Kind(kind) {
		case KindLink:
			if _, err := net.InterfaceByName(name); err == nil {
				t.Errorf("link %s is there", name)
			}
		case KindNetns:
			if _, err := os.Stat(filepath.Join(netnsDir, name)); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("network namespace %s is there", name)
			}
		case KindChain:
			table, chain, _ := strings.Cut(name, " ")
			out, err := exec.Command("iptables", "-w", "-t", table, "-S").Output()
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(out), chain) {
				t.Errorf("chain %s (or a jump to it) is in the %s table", chain, table)
			}
		case KindCgroup:
			mounts, err := cgroupMounts()
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range mounts {
				if _, err := os.Stat(filepath.Join(m, name)); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("cgroup %s is there", filepath.Join(m, name))
				}
			}
		case KindRecords:
			if _, err := os.Stat(filepath.Join(name, "districts")); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("records under %s are there", name)
			}
		}
	}
	if out, err := exec.Command("iptables", "-w", "-S", "OUTPUT").Output(); err != nil {
		t.Fatal(err)
	} else if strings.Contains(string(out), l.comment) {
		t.Errorf("the rule commented %q is there", l.comment)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if cmdline := strings.ReplaceAll(string(data), "\x00", " "); strings.Contains(cmdline, l.base+"/") {
			t.Errorf("process %s runs: %s", filepath.Base(filepath.Dir(p)), cmdline)
		}
	}
}

// checkDecoys: what only looks like transit's is still there.
func (l *leftovers) checkDecoys(t *testing.T) {
	t.Helper()
	for _, link := range l.decoyLinks {
		if _, err := net.InterfaceByName(link); err != nil {
			t.Errorf("decoy link %s is gone: %v", link, err)
		}
	}
	for _, ns := range l.decoyNetns {
		if _, err := os.Stat(filepath.Join(netnsDir, ns)); err != nil {
			t.Errorf("decoy network namespace %s is gone: %v", ns, err)
		}
	}
	out, err := exec.Command("iptables", "-w", "-S").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"-N " + l.decoyChain + "\n", "-N " + l.decoyChain9 + "\n", "-j " + l.decoyChain + "\n", l.decoyComment} {
		if !strings.Contains(string(out), want) {
			t.Errorf("decoy %q is gone from the filter table", strings.TrimSpace(want))
		}
	}
}

// TestRemoveKeepsGoing: a root whose records Purge refuses (writable by
// others) stays, and Remove says so, naming it and why, after removing
// everything else it was given.
func TestRemoveKeepsGoing(t *testing.T) {
	requireRoot(t)
	base := filepath.Join(testBase, t.Name())
	l := newLeftovers(base)
	l.teardown(t)
	t.Cleanup(func() { l.teardown(t) })
	bad := filepath.Join(base, "bad")
	if err := os.MkdirAll(filepath.Join(bad, "districts", "d1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(bad, 0o777); err != nil {
		t.Fatal(err)
	}
	for _, c := range [][]string{
		{"ip", "netns", "add", l.router},
		{"iptables", "-w", "-N", l.forward},
		{"iptables", "-w", "-I", "FORWARD", "1", "-i", l.uplink, "-j", l.forward},
	} {
		if err := cmdRun(c[0], c[1:]...); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]bool{string(KindRecords) + "\x00" + bad: true, string(KindNetns) + "\x00" + l.router: true,
		string(KindChain) + "\x00filter " + l.forward: true}
	opts := Options{Base: base, Only: func(it Item) bool { return want[string(it.Kind)+"\x00"+it.Name] }}
	items, err := Find(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != len(want) {
		t.Fatalf("Find listed %d items, want %d: %v", len(items), len(want), items)
	}
	err = Remove(t.Context(), opts, items)
	var re *RemoveError
	if !errors.As(err, &re) {
		t.Fatalf("Remove: %v, want a *RemoveError", err)
	}
	if len(re.Left) != 1 || re.Left[0].Kind != KindRecords || re.Left[0].Name != bad {
		t.Errorf("left %v, want only the records under %s", re.Left, bad)
	}
	if !strings.Contains(err.Error(), "1 item stayed:\n  records "+bad) || !strings.Contains(err.Error(), "writable by group or others") {
		t.Errorf("the error does not name what stayed and why:\n%v", err)
	}
	if _, err := os.Stat(filepath.Join(netnsDir, l.router)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("network namespace %s is there", l.router)
	}
	if out, err := exec.Command("iptables", "-w", "-S").Output(); err != nil {
		t.Fatal(err)
	} else if strings.Contains(string(out), l.forward) {
		t.Errorf("chain %s (or its jump) is there", l.forward)
	}
}
