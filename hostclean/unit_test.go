package hostclean

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestNames(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name                string
		netns, link, chain  bool
		platformtestComment bool
	}{
		// Namespaces: a node's, a router's.
		{name: "transit-ln-0123456789ab", netns: true},
		{name: "cs-0123abcd", netns: true},
		{name: "transit-ln-0123456789a"},   // a digit short
		{name: "transit-ln-0123456789abc"}, // a digit over
		{name: "transit-ln-0123456789AB"},  // transit writes lower case
		{name: "transit-ln-0123456789ag"},  // not hex
		{name: "transit-0123456789ab"},     // not a node's
		{name: "cs-0123abc"},
		{name: "cs-something"},
		{name: "cni-0123abcd"},
		// Links: a bridge, a node's veth, a router's uplink.
		{name: "tb0123abcd", link: true},
		{name: "tv0123456789ab", link: true},
		{name: "cu0123abcd", link: true},
		{name: "tbogus"},
		{name: "tb0123abcde"}, // 9 digits
		{name: "tb0123abc"},   // 7
		{name: "tb0123ABCD"},  // upper case
		{name: "tv0123abcd"},  // a veth has 12
		{name: "tv0123456789abc"},
		{name: "cu0123456789ab"}, // an uplink has 8
		{name: "tun0"},
		{name: "eth0"},
		{name: "tb"},
		// Chains: a group's, a district's input, cloudsim's four.
		{name: "TRANSIT-0123456789", chain: true},
		{name: "TRANSIT-ABCDEF0123", chain: true},
		{name: "TRANSIT-IN-0123456789", chain: true},
		{name: "CLOUDSIM-F-0123ABCD", chain: true},
		{name: "CLOUDSIM-I-0123ABCD", chain: true},
		{name: "CLOUDSIM-D-0123ABCD", chain: true},
		{name: "CLOUDSIM-S-0123ABCD", chain: true},
		{name: "TRANSITORY"},
		{name: "TRANSIT-"},
		{name: "TRANSIT-012345678"},   // 9 digits
		{name: "TRANSIT-01234567890"}, // 11
		{name: "TRANSIT-abcdef0123"},  // lower case
		{name: "TRANSIT-IN-012345678"},
		{name: "TRANSIT-OUT-0123456789"},
		{name: "CLOUDSIM-X-0123ABCD"},
		{name: "CLOUDSIM-F-0123ABCDE"},
		{name: "CLOUDSIM-F-0123ABCG"},
		{name: "DOCKER-USER"},
		{name: "KUBE-SERVICES"},
	} {
		if got := isNetns(c.name); got != c.netns {
			t.Errorf("isNetns(%q) = %t, want %t", c.name, got, c.netns)
		}
		if got := isLink(c.name); got != c.link {
			t.Errorf("isLink(%q) = %t, want %t", c.name, got, c.link)
		}
		if got := isChain(c.name); got != c.chain {
			t.Errorf("isChain(%q) = %t, want %t", c.name, got, c.chain)
		}
	}
	for c, want := range map[string]bool{
		"transit-platformtest pt-swarm-1a2b": true,
		"transit-platformtest":               true,
		"transit-platformtests":              false,
		"transit-platformtest-x":             false,
		"transit-e2e e2e-swarm":              true,
		"transit-e2ex":                       false,
		"other transit-platformtest pt-x":    false,
		"":                                   false,
	} {
		if got := isTestRuleComment(c); got != want {
			t.Errorf("isTestRuleComment(%q) = %t, want %t", c, got, want)
		}
	}
}

func TestParseDump(t *testing.T) {
	t.Parallel()
	out := `-P INPUT ACCEPT
-P FORWARD ACCEPT
-P OUTPUT ACCEPT
-N TRANSIT-0123456789
-N TRANSITORY
-A FORWARD -o tb0123abcd -j TRANSIT-0123456789
-A FORWARD -g TRANSITORY
-A OUTPUT -d 192.0.2.7/32 -p tcp -m tcp --dport 22 -m comment --comment "transit-platformtest pt-swarm-1a2b" -j DROP
-A OUTPUT -m comment --comment "say \"hi\" \\ there" -j ACCEPT
-A TRANSIT-0123456789 -s 10.0.0.2/32 -j ACCEPT
`
	d, err := parseDump(out)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"TRANSIT-0123456789", "TRANSITORY"}, d.chains); diff != "" {
		t.Errorf("chains (-want +got):\n%s", diff)
	}
	type got struct{ Chain, Target, Comment string }
	var rules []got
	for _, r := range d.rules {
		rules = append(rules, got{r.chain, r.target(), r.comment()})
	}
	want := []got{
		{"FORWARD", "TRANSIT-0123456789", ""},
		{"FORWARD", "TRANSITORY", ""},
		{"OUTPUT", "DROP", "transit-platformtest pt-swarm-1a2b"},
		{"OUTPUT", "ACCEPT", `say "hi" \ there`},
		{"TRANSIT-0123456789", "ACCEPT", ""},
	}
	if diff := cmp.Diff(want, rules); diff != "" {
		t.Errorf("rules (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"-d", "192.0.2.7/32", "-p", "tcp", "-m", "tcp", "--dport", "22", "-m", "comment",
		"--comment", "transit-platformtest pt-swarm-1a2b", "-j", "DROP"}, d.rules[2].args); diff != "" {
		t.Errorf("args of the commented rule (-want +got):\n%s", diff)
	}
	if _, err := parseDump(`-A OUTPUT -m comment --comment "open`); err == nil {
		t.Error("an unterminated quote parsed")
	}
}

func TestParseCgroupMounts(t *testing.T) {
	t.Parallel()
	mountinfo := `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory
34 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
35 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
36 23 0:29 / /mnt/cpu\040again rw,relatime - cgroup cgroup rw,cpu
37 23 0:30 /docker /mnt/memsub rw,relatime - cgroup cgroup rw,memory
38 23 0:39 / /mnt/odd\040dir rw,relatime - cgroup2 cgroup2 rw
`
	got, err := parseCgroupMounts(strings.NewReader(mountinfo))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/memory", "/sys/fs/cgroup/systemd", "/sys/fs/cgroup/unified", "/mnt/odd dir"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("mounts (-want +got):\n%s", diff)
	}
}

// TestFindCgroups: the nodes' cgroups under transit/ in each hierarchy,
// one item a name, transit/ after them, and the cgroup a killed make test
// left its other packages' processes in; nothing else.
func TestFindCgroups(t *testing.T) {
	t.Parallel()
	cpu, memory := t.TempDir(), t.TempDir()
	for _, d := range []string{
		filepath.Join(cpu, "transit", "ln-a"), filepath.Join(memory, "transit", "ln-a"), filepath.Join(cpu, "transit", "ln-b"),
		filepath.Join(cpu, "transit-make-test"), filepath.Join(cpu, "k8s.io"), filepath.Join(memory, "user.slice"),
	} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	items, err := findCgroups([]string{cpu, memory})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, it := range items {
		got = append(got, it.Name+" "+it.Detail)
	}
	want := []string{"transit/ln-a in 2 hierarchies", "transit/ln-b in 1 hierarchy", "transit in 2 hierarchies", "transit-make-test in 1 hierarchy"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("cgroups (-want +got):\n%s", diff)
	}
}

// TestFindRoots: a root is a directory with a districts subdirectory, up
// to the depth; Find does not enter a root, nor follow a link.
func TestFindRoots(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	mk := func(p string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(base, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mk("local/districts/d1/nodes/ln-0123456789ab")
	mk("local/districts/d1/nodes/ln-ba9876543210")
	mk("local/districts/d2/groups")
	mk("local/nested/districts") // inside a root: not another
	mk("local-test/TestX/0/districts/d/nodes/ln-0123456789ab/fs/var/lib/transit/districts")
	mk("a/b/c/d/districts")   // depth 4
	mk("a/b/c/d/e/districts") // depth 5: too deep
	mk("images")              // no districts: not a root
	if err := os.WriteFile(filepath.Join(base, "file-root"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(base, "local"), filepath.Join(base, "link")); err != nil {
		t.Fatal(err)
	}
	items, err := findRoots(base, DefaultDepth)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, it := range items {
		got = append(got, strings.TrimPrefix(it.String(), base))
	}
	want := []string{"/a/b/c/d (0 districts, 0 nodes)", "/local (2 districts, 2 nodes)", "/local-test/TestX/0 (1 district, 1 node)"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("roots (-want +got):\n%s", diff)
	}
	// The base itself may be a root; a missing base holds none.
	if items, err := findRoots(filepath.Join(base, "local"), DefaultDepth); err != nil || len(items) != 1 {
		t.Errorf("the base as a root: %v, %v", items, err)
	}
	if items, err := findRoots(filepath.Join(base, "missing"), DefaultDepth); err != nil || len(items) != 0 {
		t.Errorf("a missing base: %v, %v", items, err)
	}
}

func TestRemoveErrorNamesWhatStayed(t *testing.T) {
	t.Parallel()
	err := error(&RemoveError{
		Left: []Item{
			{Kind: KindLink, Name: "tb0123abcd", Detail: "a district's bridge"},
			{Kind: KindProcess, Name: "42", Detail: "sshd -D -f /var/lib/transit/x/boot/sshd_config", Because: "names /var/lib/transit/x/boot/sshd_config"},
		},
		Errs: []error{errors.New("ip link del tb0123abcd: busy")},
	})
	want := `2 items stayed:
  link tb0123abcd (a district's bridge)
  process 42 sshd -D -f /var/lib/transit/x/boot/sshd_config (names /var/lib/transit/x/boot/sshd_config)
ip link del tb0123abcd: busy`
	if diff := cmp.Diff(want, err.Error()); diff != "" {
		t.Errorf("message (-want +got):\n%s", diff)
	}
	var re *RemoveError
	if !errors.As(err, &re) || len(re.Left) != 2 {
		t.Errorf("errors.As: %v", re)
	}
}
