package local

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cloudtransit/transit/districts"
)

func testRecord() *nodeRecord {
	return &nodeRecord{
		ProviderID: "ln-0123456789ab",
		NodeID:     "c1-w1",
		District:   "home",
		IP:         "10.240.1.2",
		Prefix:     24,
		Gateway:    "10.240.1.1",
		Root:       "/var/lib/transit/local",
		NodeDir:    "/var/lib/transit/local/districts/home/nodes/ln-0123456789ab",
		Netns:      "transit-ln-0123456789ab",
		HostVeth:   "tv0123456789ab",
		Bridge:     bridgeName("/var/lib/transit/local", "home"),
		Cgroups: []string{
			"/sys/fs/cgroup/cpuset/transit/ln-0123456789ab",
			"/sys/fs/cgroup/systemd/transit/ln-0123456789ab",
			"/sys/fs/cgroup/unified/transit/ln-0123456789ab",
		},
		SSHD:      "/usr/sbin/sshd",
		InitPID:   4242,
		InitStart: 777,
	}
}

var testHierarchies = []hierarchy{
	{Mount: "/sys/fs/cgroup/cpuset", Type: "cgroup", Options: "cpuset"},
	{Mount: "/sys/fs/cgroup/systemd", Type: "cgroup", Options: "none,name=systemd"},
	{Mount: "/sys/fs/cgroup/unified", Type: "cgroup2", Options: ""},
}

// inOrder checks that script contains each want line (trimmed), in order.
func inOrder(t *testing.T, name, script string, want []string) {
	t.Helper()
	lines := strings.Split(script, "\n")
	i := 0
	for _, w := range want {
		for i < len(lines) && strings.TrimSpace(lines[i]) != w {
			i++
		}
		if i == len(lines) {
			t.Errorf("%s lacks, in order, the line %q; script:\n%s", name, w, script)
			return
		}
		i++
	}
}

// syntaxOK runs bash -n on a script.
func syntaxOK(t *testing.T, name, script string) {
	t.Helper()
	if out, err := exec.Command("bash", "-n", "-c", script).CombinedOutput(); err != nil {
		t.Errorf("%s: bash -n: %v\n%s", name, err, out)
	}
}

func TestScripts(t *testing.T) {
	r := testRecord()
	parents := []string{"/sys/fs/cgroup/cpuset/transit", "/sys/fs/cgroup/unified/transit"}
	for _, tc := range []struct {
		name   string
		script string
		want   []string
	}{
		{"boot", bootScript(r, testHierarchies), []string{
			"set -eu",
			"ip netns add transit-ln-0123456789ab",
			"ip link add tv0123456789ab type veth peer name eth0 netns transit-ln-0123456789ab",
			"ip link set tv0123456789ab master " + bridgeName("/var/lib/transit/local", "home") + " up",
			"ip neigh flush to 10.240.1.2 dev " + bridgeName("/var/lib/transit/local", "home") + " 2>/dev/null || true",
			"ip -n transit-ln-0123456789ab addr add 10.240.1.2/24 dev eth0",
			"ip -n transit-ln-0123456789ab link set lo up",
			"nsenter --net=/run/netns/transit-ln-0123456789ab sh -c 'echo 1 > /proc/sys/net/ipv4/conf/eth0/arp_notify'",
			"ip -n transit-ln-0123456789ab link set eth0 up",
			"ip -n transit-ln-0123456789ab route add default via 10.240.1.1",
			"mkcg /sys/fs/cgroup/cpuset/transit/ln-0123456789ab",
			"fillcpuset /sys/fs/cgroup/cpuset/transit /sys/fs/cgroup/cpuset",
			"fillcpuset /sys/fs/cgroup/cpuset/transit/ln-0123456789ab /sys/fs/cgroup/cpuset/transit",
			"mkcg /sys/fs/cgroup/systemd/transit/ln-0123456789ab",
			"mkcg /sys/fs/cgroup/unified/transit/ln-0123456789ab",
			"echo $$ > /sys/fs/cgroup/cpuset/transit/ln-0123456789ab/cgroup.procs",
			"echo $$ > /sys/fs/cgroup/systemd/transit/ln-0123456789ab/cgroup.procs",
			"echo $$ > /sys/fs/cgroup/unified/transit/ln-0123456789ab/cgroup.procs",
			"exec nsenter --net=/run/netns/transit-ln-0123456789ab unshare --cgroup /bin/bash " + r.NodeDir + "/boot/enter.sh",
		}},
		{"enter", enterScript(r, testHierarchies), []string{
			"set -eu",
			"exec unshare --mount --uts --pid --kill-child --mount-proc --propagation private /bin/bash " + r.NodeDir + "/boot/init.sh",
		}},
		{"init", initScript(r, testHierarchies), []string{
			"set -eu",
			"BOOT=" + r.NodeDir + "/boot",
			"mount -n -t tmpfs -o mode=755,nosuid,nodev tmpfs " + r.NodeDir + "/run",
			"mount -n --bind \"$BOOT\" " + r.NodeDir + "/run/.transit-boot",
			"mount -n --bind " + r.NodeDir + "/fs " + r.NodeDir + "/run/.transit-fs",
			"if [ -d /var/lib/transit/local/images ]; then",
			"mount -n --move " + r.NodeDir + "/run /run",
			"mount -n -t tmpfs -o mode=1777,nosuid,nodev tmpfs /tmp",
			"mount -n --bind /run/.transit-fs/etc/cni/net.d /etc/cni/net.d",
			"mount -n --bind /run/.transit-fs/etc/docker /etc/docker",
			"mount -n --bind /run/.transit-fs/var/lib/docker /var/lib/docker",
			"mount -n --bind /run/.transit-fs/var/lib/kubelet /var/lib/kubelet",
			"mount -n --bind /run/.transit-fs/var/lib/transit /var/lib/transit",
			"mount -n --bind /run/.transit-fs/var/log/pods /var/log/pods",
			"mount -n --move /run/.transit-images /var/lib/transit/images",
			"mount -n --bind /run/.transit-boot \"$BOOT\"",
			"mount -n -t sysfs sysfs /sys",
			"mount -n -t tmpfs -o mode=755 cgroup_root /sys/fs/cgroup",
			"mount -n -t cgroup -o cpuset cgroup /sys/fs/cgroup/cpuset",
			"mount -n -t cgroup -o none,name=systemd cgroup /sys/fs/cgroup/systemd",
			"mount -n -t cgroup2  cgroup2 /sys/fs/cgroup/unified",
			"echo c1-w1 > /proc/sys/kernel/hostname",
			"touch \"$BOOT/booted\"",
			"/var/lib/kubelet | /var/lib/kubelet/*) return 0 ;;",
			"awk '{print $5}' /proc/self/mountinfo | sort -u | while read -r m; do",
			"own \"$m\" && continue",
			"mount -n -o remount,bind,ro \"$m\"",
			"exec /usr/sbin/sshd -D -e -f \"$BOOT/sshd_config\" 2>&3 3>&-",
		}},
		{"teardown", teardownScript(r, parents), []string{
			"ROOT=/var/lib/transit/local",
			"flock \"$ROOT/lock\" true",
			"if [ \"$(sed 's/.*) //' /proc/4242/stat 2>/dev/null | cut -d' ' -f20)\" = 777 ] &&",
			"grep -qzF -- \"$NODE/boot/\" /proc/4242/cmdline 2>/dev/null; then",
			"kill -9 -- -4242 4242 2>/dev/null",
			"p=$(find /sys/fs/cgroup/cpuset/transit/ln-0123456789ab /sys/fs/cgroup/systemd/transit/ln-0123456789ab /sys/fs/cgroup/unified/transit/ln-0123456789ab -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u)",
			"kill -9 $p 2>/dev/null",
			"find \"$d\" -depth -type d -exec rmdir {} \\; 2>/dev/null",
			"ip netns del transit-ln-0123456789ab 2>/dev/null",
			"ip link del tv0123456789ab 2>/dev/null",
			"find \"$NODE\" -mindepth 1 -maxdepth 1 ! -name record.json ! -name teardown.log -exec rm -rf {} +",
			"flock 9",
			"rm -f \"$NODE/record.json\" \"$NODE/teardown.log\"",
			"ip link del " + bridgeName("/var/lib/transit/local", "home") + " 2>/dev/null",
			"rmdir /sys/fs/cgroup/cpuset/transit 2>/dev/null",
		}},
		{"power-off", powerOffScript(r), []string{
			"NODE=" + r.NodeDir,
			"kill -9 -- -4242 4242 2>/dev/null",
			"kill -9 $p 2>/dev/null",
			"find \"$d\" -depth -type d -exec rmdir {} \\; 2>/dev/null",
			"ip netns del transit-ln-0123456789ab 2>/dev/null",
			"ip link del tv0123456789ab 2>/dev/null",
			"rm -f \"$NODE/boot/booted\"",
		}},
		{"gc", gcScript("/r", "home", parents), []string{
			"if [ -z \"$(ls /r/districts/home/nodes 2>/dev/null)\" ] && [ -z \"$(ls /r/districts/home/groups 2>/dev/null)\" ]; then",
			"ip link del " + bridgeName("/r", "home") + " 2>/dev/null",
			"iptables -w -D INPUT -i " + bridgeName("/r", "home") + " -j " + inputChainName("/r", "home") + " 2>/dev/null",
			"rm -rf /r/districts/home",
			"if [ -z \"$(ls -A /r/districts 2>/dev/null)\" ]; then",
			"tac /r/created-dirs | while IFS= read -r d; do",
			"grep -qsF \" $d \" /proc/[0-9]*/mountinfo && continue",
			"rmdir \"$d\" 2>/dev/null",
			"rm -f /r/created-dirs",
			"rmdir /sys/fs/cgroup/cpuset/transit 2>/dev/null",
			"rmdir /sys/fs/cgroup/unified/transit 2>/dev/null",
			"rmdir /r/districts 2>/dev/null",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inOrder(t, tc.name, tc.script, tc.want)
			syntaxOK(t, tc.name, tc.script)
		})
	}
}

func TestInitScriptUnifiedHost(t *testing.T) {
	r := testRecord()
	r.Cgroups = []string{"/sys/fs/cgroup/transit/ln-0123456789ab"}
	hs := []hierarchy{{Mount: "/sys/fs/cgroup", Type: "cgroup2", Options: "nsdelegate"}}
	initSh := initScript(r, hs)
	inOrder(t, "init", initSh, []string{"mount -n -t cgroup2 -o nsdelegate cgroup2 /sys/fs/cgroup"})
	if strings.Contains(initSh, "cgroup_root") {
		t.Errorf("a cgroup v2 host gets no tmpfs over /sys/fs/cgroup:\n%s", initSh)
	}
	boot := bootScript(r, hs)
	inOrder(t, "boot", boot, []string{
		"mkcg /sys/fs/cgroup/transit/ln-0123456789ab",
		"for c in $(cat /sys/fs/cgroup/cgroup.controllers); do",
		"echo $$ > /sys/fs/cgroup/transit/ln-0123456789ab/cgroup.procs",
	})
	syntaxOK(t, "boot", boot)
	// v2: the node's processes in its init leaf, every controller handed
	// down to its cgroup, before the PID namespace starts.
	enter := enterScript(r, hs)
	inOrder(t, "enter", enter, []string{
		"mkdir -p /sys/fs/cgroup/transit/ln-0123456789ab/init",
		"echo $$ > /sys/fs/cgroup/transit/ln-0123456789ab/init/cgroup.procs",
		"for c in $(cat /sys/fs/cgroup/transit/ln-0123456789ab/cgroup.controllers); do",
		"echo \"+$c\" > /sys/fs/cgroup/transit/ln-0123456789ab/cgroup.subtree_control",
		"exec unshare --mount --uts --pid --kill-child --mount-proc --propagation private /bin/bash " + r.NodeDir + "/boot/init.sh",
	})
	syntaxOK(t, "enter", enter)
	if v1 := enterScript(r, testHierarchies); strings.Contains(v1, "subtree_control") {
		t.Errorf("a v1 host's enter script delegates controllers:\n%s", v1)
	}
	syntaxOK(t, "init", initSh)
}

func TestScriptsQuote(t *testing.T) {
	r := testRecord()
	r.Root = "/srv/my transit's root"
	r.NodeDir = r.Root + "/districts/home/nodes/" + r.ProviderID
	script := teardownScript(r, nil)
	inOrder(t, "teardown", script, []string{`ROOT='/srv/my transit'\''s root'`})
	syntaxOK(t, "teardown", script)
	syntaxOK(t, "init", initScript(r, testHierarchies))
}

func TestSSHDConfig(t *testing.T) {
	r := testRecord()
	got := sshdConfig(r)
	for _, want := range []string{
		"ListenAddress 10.240.1.2",
		"HostKey " + r.NodeDir + "/boot/ssh_host_ed25519_key",
		"AuthorizedKeysFile " + r.NodeDir + "/boot/authorized_keys",
		"PermitRootLogin prohibit-password",
		"PasswordAuthentication no",
		"KbdInteractiveAuthentication no",
		"UsePAM no",
		"StrictModes no",
		"PidFile /run/sshd.pid",
	} {
		inOrder(t, "sshd_config", got, []string{want})
	}
	if strings.Contains(got, "0.0.0.0") {
		t.Errorf("sshd listens on every address:\n%s", got)
	}
}

func TestGroupRestore(t *testing.T) {
	for _, tc := range []struct {
		name     string
		meshPort int
		mesh     string
	}{
		{"addresses", 0, ""},
		{"mesh", 51820, "-A TRANSIT-0123456789 -p udp -m udp --dport 51820 -j ACCEPT\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := groupRestore("TRANSIT-0123456789", []string{"10.240.2.2", "192.0.2.0/24"}, tc.meshPort)
			want := `*filter
:TRANSIT-0123456789 - [0:0]
-F TRANSIT-0123456789
-A TRANSIT-0123456789 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A TRANSIT-0123456789 -s 10.240.2.2 -j ACCEPT
-A TRANSIT-0123456789 -s 192.0.2.0/24 -j ACCEPT
` + tc.mesh + `-A TRANSIT-0123456789 -j DROP
COMMIT
`
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("groupRestore (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseChainSources(t *testing.T) {
	dump := `-P INPUT ACCEPT
-P FORWARD ACCEPT
-N TRANSIT-0123456789
-N TRANSIT-AAAAAAAAAA
-A FORWARD -o tb01234567 -j TRANSIT-0123456789
-A TRANSIT-0123456789 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A TRANSIT-0123456789 -s 10.240.2.2/32 -j ACCEPT
-A TRANSIT-0123456789 -s 192.0.2.0/24 -j ACCEPT
-A TRANSIT-0123456789 -p udp -m udp --dport 51820 -j ACCEPT
-A TRANSIT-0123456789 -j DROP
-A TRANSIT-AAAAAAAAAA -s 10.9.9.9/32 -j ACCEPT
-A TRANSIT-AAAAAAAAAA -p udp -m udp --dport 51821 -j ACCEPT
`
	if diff := cmp.Diff([]string{"10.240.2.2", "192.0.2.0/24"}, parseChainSources("TRANSIT-0123456789", dump)); diff != "" {
		t.Errorf("sources (-want +got):\n%s", diff)
	}
	if !chainExists("TRANSIT-0123456789", dump) || chainExists("TRANSIT-BBBBBBBBBB", dump) {
		t.Errorf("chainExists is wrong")
	}
	for chain, want := range map[string]int{"TRANSIT-0123456789": 51820, "TRANSIT-AAAAAAAAAA": 51821, "TRANSIT-BBBBBBBBBB": 0} {
		if got := parseChainMesh(chain, dump); got != want {
			t.Errorf("parseChainMesh(%s) = %d, want %d", chain, got, want)
		}
	}
	// Only a rule of one UDP port from anywhere is the mesh's.
	other := `-A TRANSIT-0123456789 -s 10.0.0.1/32 -p udp -m udp --dport 51820 -j ACCEPT
-A TRANSIT-0123456789 -p udp -m udp --dport 51820:51830 -j ACCEPT
-A TRANSIT-0123456789 -p tcp -m tcp --dport 51820 -j ACCEPT
-A TRANSIT-0123456789 -p udp -m udp --dport 51820 -j DROP
`
	if got := parseChainMesh("TRANSIT-0123456789", other); got != 0 {
		t.Errorf("parseChainMesh of rules not the mesh's = %d, want 0", got)
	}
	if got := parseChainSources("TRANSIT-0123456789", other); len(got) != 0 {
		t.Errorf("parseChainSources of port rules = %v, want none", got)
	}
}

func TestNormalizeSources(t *testing.T) {
	got, err := normalizeSources([]string{"10.0.0.2", "10.0.0.1/32", "192.0.2.7/24", "10.0.0.2", "::ffff:10.0.0.3"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "192.0.2.0/24"}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	for _, bad := range []string{"2001:db8::1", "example.com", "10.0.0.1 -j ACCEPT"} {
		if _, err := normalizeSources([]string{bad}); err == nil {
			t.Errorf("normalizeSources(%q) succeeded", bad)
		}
	}
}

func TestNames(t *testing.T) {
	const r = "/var/lib/transit/local"
	b := bridgeName(r, "aws-europe")
	if len(b) != 10 || !strings.HasPrefix(b, "tb") || b != bridgeName(r, "aws-europe") || b == bridgeName(r, "aws-europe2") ||
		b == bridgeName("/srv/other", "aws-europe") {
		t.Errorf("bridgeName = %q: not scoped by root and district", b)
	}
	c := chainName(r, "c1", "home")
	if len(c) > 28 || !validChain(c) || c == chainName(r, "c2", "home") || c == chainName(r, "c1", "away") ||
		c == chainName("/srv/other", "c1", "home") {
		t.Errorf("chainName = %q: not scoped by root, cluster and district", c)
	}
	id, err := newProviderID()
	if err != nil {
		t.Fatal(err)
	}
	if !validProviderID(id) {
		t.Errorf("newProviderID = %q is not valid", id)
	}
	if v := vethName(id); len(v) > 15 || !strings.HasPrefix(v, "tv") {
		t.Errorf("vethName = %q", v)
	}
	for _, bad := range []string{"", "ln-", "ln-../../etc", "i-0123456789ab", "ln-0123456789abc"} {
		if validProviderID(bad) {
			t.Errorf("validProviderID(%q) = true", bad)
		}
	}
}

func TestParseMountinfo(t *testing.T) {
	in := `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime shared:5 - cgroup cgroup rw,cpuset
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate
99 23 0:29 /sub /mnt/cpu rw,relatime - cgroup cgroup rw,cpu
100 23 0:29 / /mnt/cpu2 rw,relatime - cgroup cgroup rw,cpu
`
	got, err := parseMountinfo(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []hierarchy{
		{Mount: "/sys/fs/cgroup/cpu", Type: "cgroup", Options: "cpu"},
		{Mount: "/sys/fs/cgroup/cpuset", Type: "cgroup", Options: "cpuset"},
		{Mount: "/sys/fs/cgroup/systemd", Type: "cgroup", Options: "none,xattr,name=systemd"},
		{Mount: "/sys/fs/cgroup/unified", Type: "cgroup2", Options: "nsdelegate"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestCheck(t *testing.T) {
	all := func(string) (string, error) { return "/usr/bin/x", nil }
	if err := check(0, all); err != nil {
		t.Errorf("check with everything installed: %v", err)
	}
	if err := check(1000, all); !errors.Is(err, ErrNeedsRoot) || !strings.Contains(err.Error(), "run transit with sudo") {
		t.Errorf("check as a user = %v, want ErrNeedsRoot", err)
	}
	noSSHD := func(name string) (string, error) {
		if name == "sshd" || name == "iptables-restore" {
			return "", exec.ErrNotFound
		}
		return "/usr/bin/" + name, nil
	}
	err := check(0, noSSHD)
	if err == nil {
		t.Fatal("check with sshd missing succeeded")
	}
	for _, want := range []string{"sshd (openssh-server)", "iptables-restore (iptables)", "apt-get install iptables openssh-server"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("check error %q lacks %q", err, want)
		}
	}
}

func TestNewRejects(t *testing.T) {
	for name, d := range map[string]districts.District{
		"provider":  {ID: "x", Provider: "aws", LocalSubnet: "10.240.1.0/24"},
		"no subnet": {ID: "x", Provider: "local"},
		"ipv6":      {ID: "x", Provider: "local", LocalSubnet: "fd00::/64"},
		"host bits": {ID: "x", Provider: "local", LocalSubnet: "10.240.1.1/24"},
		"too small": {ID: "x", Provider: "local", LocalSubnet: "10.240.1.0/31"},
		"bad id":    {ID: "../x", Provider: "local", LocalSubnet: "10.240.1.0/24"},
	} {
		if _, err := New(t.Context(), d, Options{Root: t.TempDir()}); err == nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
}

// A power-off keeps the node's files and record, and waits for no lock
// (its caller holds it).
func TestPowerOffScriptKeepsTheNode(t *testing.T) {
	script := powerOffScript(testRecord())
	for _, bad := range []string{"rm -rf", "record.json", "flock", "$NODE/fs"} {
		if strings.Contains(script, bad) {
			t.Errorf("the power-off script holds %q:\n%s", bad, script)
		}
	}
}

// Local nodes share the host's inotify pool: a limit below the floor is
// raised, one above it is never lowered, and a file that is not a number is
// set to the floor.
func TestRaiseTo(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ had, want string }{
		{"128\n", "8192\n"},
		{"65536\n", "65536\n"},
		{"8192", "8192"},
		{"junk\n", "8192\n"},
	} {
		p := filepath.Join(dir, "max_user_instances")
		if err := os.WriteFile(p, []byte(c.had), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := raiseTo(p, 8192); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(p); string(got) != c.want {
			t.Errorf("had %q: now %q, want %q", c.had, got, c.want)
		}
	}
	if err := raiseTo(filepath.Join(dir, "missing"), 1); err == nil {
		t.Error("a missing limit file: no error")
	}
	for _, l := range hostLimits {
		if !strings.HasPrefix(l.path, "/proc/sys/fs/inotify/") || l.floor < 8192 {
			t.Errorf("limit %s floor %d", l.path, l.floor)
		}
	}
}
