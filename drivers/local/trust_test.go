package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cloudtransit/transit/provider"
)

// What the driver trusts: records are data, never names of things to kill
// or remove; the root must be root's; addresses are not reused at once.

func TestCheckRoot(t *testing.T) {
	requireRoot(t)
	base := t.TempDir()
	mk := func(name string, mode os.FileMode, uid int) string {
		t.Helper()
		p := filepath.Join(base, name)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, 0); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ok := mk("ok", 0o755, 0)
	if err := checkRoot(ok); err != nil {
		t.Errorf("checkRoot(%s, 0755 root): %v", ok, err)
	}
	sticky := mk("sticky", os.ModeSticky|0o777, 0)
	inSticky := filepath.Join(sticky, "root")
	if err := os.Mkdir(inSticky, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := checkRoot(inSticky); err != nil {
		t.Errorf("checkRoot under a sticky world-writable dir (like /tmp): %v", err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(ok, link); err != nil {
		t.Fatal(err)
	}
	if err := checkRoot(link); err != nil {
		t.Errorf("checkRoot through a symlink to a good root: %v", err)
	}

	for _, tc := range []struct {
		name, root, want string
	}{
		{"group-writable", mk("gw", 0o775, 0), "writable by group or others (mode 0775): run chmod go-w"},
		{"world-writable sticky root", mk("ws", os.ModeSticky|0o777, 0), "writable by group or others"},
		{"not root's", mk("nobody", 0o755, 65534), "owned by uid 65534, not root: run chown root"},
		{"parent writable", filepath.Join(mk("pw", 0o777, 0), "root"), "pw is writable by group or others"},
		{"parent not root's", filepath.Join(mk("po", 0o755, 65534), "root"), "po is owned by uid 65534"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.MkdirAll(tc.root, 0o755); err != nil {
				t.Fatal(err)
			}
			err := checkRoot(tc.root)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("checkRoot(%s) = %v, want an error containing %q", tc.root, err, tc.want)
			}
		})
	}
}

func TestReadNodeRefusesForeignRecord(t *testing.T) {
	root := t.TempDir()
	const id, other = "ln-0123456789ab", "ln-ba9876543210"
	write := func(rec map[string]any) {
		t.Helper()
		data, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		if err := writeFile(filepath.Join(nodeDir(root, "home", id), "record.json"), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, rec := range []map[string]any{
		{"provider_id": other, "district": "home"},
		{"provider_id": id, "district": "away"},
		{"provider_id": "", "district": "home"},
	} {
		write(rec)
		if _, err := readNode(root, "home", id, testHierarchies); err == nil || !strings.Contains(err.Error(), "refused") {
			t.Errorf("readNode of %v = %v, want it refused", rec, err)
		}
		if _, err := readNodes(root, "home", testHierarchies); err == nil {
			t.Errorf("readNodes with %v succeeded", rec)
		}
	}
	// Names a record carries are ignored: they derive from the directory.
	write(map[string]any{
		"provider_id": id, "district": "home",
		"root": "/", "node_dir": "/etc", "netns": "host", "host_veth": "eth0", "bridge": "docker0",
		"cgroups": []string{"/sys/fs/cgroup/cpu"}, "sshd": "/bin/rm",
	})
	r, err := readNode(root, "home", id, testHierarchies)
	if err != nil {
		t.Fatal(err)
	}
	want := nodeRecord{
		Root: root, NodeDir: nodeDir(root, "home", id), Netns: "transit-" + id, HostVeth: "tv0123456789ab",
		Bridge: bridgeName(root, "home"),
	}
	if r.Root != want.Root || r.NodeDir != want.NodeDir || r.Netns != want.Netns || r.HostVeth != want.HostVeth ||
		r.Bridge != want.Bridge || r.SSHD != "" {
		t.Errorf("derived names = %+v, want %+v", r, want)
	}
	for _, c := range r.Cgroups {
		if !strings.HasSuffix(c, "/transit/"+id) {
			t.Errorf("cgroup %s is not the node's", c)
		}
	}
}

// A record doctored to name a host process, directory and cgroup: the
// teardown touches none of them, and the node still goes.
func TestDoctoredRecordTouchesNothingElse(t *testing.T) {
	e := newEnv(t)
	drv := e.driver(e.district())
	g := e.group(drv, "doctor")
	inst := e.launch(drv, g, "doctor", "doctor-n1")

	victimDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(victimDir, "precious"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	victim := exec.Command("sleep", "300")
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = victim.Process.Kill(); _ = victim.Wait() })
	victimStart := procStart(victim.Process.Pid)

	path := filepath.Join(nodeDir(e.root, drv.district, inst.ProviderID), "record.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(data, &rec); err != nil {
		t.Fatal(err)
	}
	rec["node_dir"] = victimDir
	rec["root"] = victimDir
	rec["netns"] = "x; touch " + victimDir + "/pwned"
	rec["cgroups"] = []string{"/sys/fs/cgroup/pids"}
	rec["init_pid"], rec["init_start"] = victim.Process.Pid, victimStart
	if data, err = json.Marshal(rec); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}

	// The recorded init (the victim) runs, but is not the node's: List
	// sees a dead node and tears it down, by its own names.
	insts, _, err := drv.List(t.Context(), "doctor")
	if err != nil {
		t.Fatal(err)
	}
	if len(insts) != 1 || insts[0].State != provider.InstanceTerminating {
		t.Errorf("List = %+v, want the node terminating (its recorded init is not its own)", insts)
	}
	waitGone(t, drv, "doctor", inst.ProviderID)
	if err := syscall.Kill(victim.Process.Pid, 0); err != nil || procStart(victim.Process.Pid) != victimStart {
		t.Errorf("the teardown killed the process a doctored record named: %v", err)
	}
	if _, err := os.Stat(filepath.Join(victimDir, "precious")); err != nil {
		t.Errorf("the teardown removed a file a doctored record named: %v", err)
	}
	if _, err := os.Stat(filepath.Join(victimDir, "pwned")); err == nil {
		t.Errorf("a doctored record ran a command")
	}
	if netnsExists(netnsName(inst.ProviderID)) {
		t.Errorf("the node's own netns survived")
	}
}

func TestAllocateIP(t *testing.T) {
	subnet := netip.MustParsePrefix("10.240.1.0/29") // .1 gateway, .2-.6 nodes, .7 broadcast
	var nodes []*nodeRecord
	var got []string
	var last netip.Addr
	for range 5 {
		ip, err := allocateIP(subnet, nodes, last)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ip.String())
		nodes = append(nodes, &nodeRecord{IP: ip.String()})
		last = ip
	}
	if want := []string{"10.240.1.2", "10.240.1.3", "10.240.1.4", "10.240.1.5", "10.240.1.6"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("addresses = %v, want %v", got, want)
	}
	if _, err := allocateIP(subnet, nodes, last); err == nil {
		t.Errorf("a full subnet handed out an address")
	}
	// .3 and .4 freed: after .6 the allocation wraps to .3, then .4.
	nodes = append(nodes[:1], nodes[3:]...)
	ip, err := allocateIP(subnet, nodes, last)
	if err != nil || ip.String() != "10.240.1.3" {
		t.Errorf("after .6 with .3 free: %s, %v; want 10.240.1.3", ip, err)
	}
	// .2 freed right after being handed out: .3 comes first.
	nodes = []*nodeRecord{{IP: "10.240.1.5"}}
	if ip, _ := allocateIP(subnet, nodes, netip.MustParseAddr("10.240.1.2")); ip.String() != "10.240.1.3" {
		t.Errorf("the address freed last was handed out again at once: %s", ip)
	}
	// A last address outside the subnet starts from the beginning.
	if ip, _ := allocateIP(subnet, nil, netip.MustParseAddr("192.0.2.1")); ip.String() != "10.240.1.2" {
		t.Errorf("with a foreign last address: %s, want 10.240.1.2", ip)
	}
	if ip, _ := allocateIP(netip.MustParsePrefix("10.0.0.0/30"), nil, netip.MustParseAddr("10.0.0.2")); ip.String() != "10.0.0.2" {
		t.Errorf("a /30 has one address to hand out again: %s", ip)
	}
}

// A node launched right after another was torn down gets another address.
func TestFreedAddressNotReusedAtOnce(t *testing.T) {
	e := newEnv(t)
	drv := e.driver(e.district())
	g := e.group(drv, "reuse")
	a := e.launch(drv, g, "reuse", "reuse-a")
	if err := drv.Terminate(t.Context(), a); err != nil {
		t.Fatal(err)
	}
	waitGone(t, drv, "reuse", a.ProviderID)
	b := e.launch(drv, g, "reuse", "reuse-b")
	if a.PublicIP == b.PublicIP {
		t.Errorf("the new node got the address freed a moment ago (%s)", a.PublicIP)
	}
}

// Where an address must be reused (a /30 has one), the host's neighbour
// entry for the old node must not keep the new one unreachable.
func TestReusedAddressIsReachable(t *testing.T) {
	e := newEnv(t)
	d := e.district()
	d.LocalSubnet = strings.Replace(d.LocalSubnet, "/24", "/30", 1)
	drv := e.driver(d)
	g := e.group(drv, "arp")
	// Another port keeps the bridge's carrier up when the node goes, as
	// other nodes do in a real district; a bridge without carrier would
	// drop its neighbour entries by itself.
	peer := "tk" + randHex(4)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", peer).Run() })
	mustIP(t,
		[]string{"link", "add", peer, "type", "veth", "peer", "name", peer + "p"},
		[]string{"link", "set", peer, "master", drv.bridge, "up"},
		[]string{"link", "set", peer + "p", "up"})
	a := e.launch(drv, g, "arp", "arp-a")
	if out, err := e.ssh(a.PublicIP, "true"); err != nil {
		t.Fatalf("ssh %s: %v\n%s", a.PublicIP, err, out)
	}
	if err := drv.Terminate(t.Context(), a); err != nil {
		t.Fatal(err)
	}
	waitGone(t, drv, "arp", a.ProviderID)
	start := time.Now()
	b := e.launch(drv, g, "arp", "arp-b")
	if b.PublicIP != a.PublicIP {
		t.Fatalf("a /30 has one node address; got %s then %s", a.PublicIP, b.PublicIP)
	}
	t.Logf("the second node answered after %s", time.Since(start))
}

// Launch and List report the host key the node's sshd presents, so it is
// pinned before first contact.
func TestHostKeyIsReported(t *testing.T) {
	e := newEnv(t)
	drv := e.driver(e.district())
	g := e.group(drv, "hk")
	inst := e.launch(drv, g, "hk", "hk-n1")
	out, err := exec.CommandContext(t.Context(), "ssh-keyscan", "-t", "ed25519", inst.PublicIP).Output()
	if err != nil {
		t.Fatalf("ssh-keyscan %s: %v", inst.PublicIP, err)
	}
	f := strings.Fields(string(out))
	if len(f) < 3 {
		t.Fatalf("ssh-keyscan said %q", out)
	}
	presented := f[1] + " " + f[2]
	if len(inst.HostKeys) != 1 || inst.HostKeys[0] != presented {
		t.Errorf("Launch reported host keys %q; the node presents %q", inst.HostKeys, presented)
	}
	insts, _, err := drv.List(t.Context(), "hk")
	if err != nil {
		t.Fatal(err)
	}
	if len(insts) != 1 || len(insts[0].HostKeys) != 1 || insts[0].HostKeys[0] != presented {
		t.Errorf("List reported %+v; the node presents %q", insts, presented)
	}
}

func TestOverlappingRoute(t *testing.T) {
	routes := `default via 192.0.2.1 dev eth0
192.0.2.0/24 dev eth0 proto kernel scope link src 192.0.2.2
10.241.1.0/24 dev tbaaaaaaaa proto kernel scope link src 10.241.1.1
10.8.0.0/16 dev tun0 scope link
blackhole 172.16.5.0/24
local 10.241.1.1 dev tbaaaaaaaa table local proto kernel scope host src 10.241.1.1
broadcast 10.241.1.255 dev tbaaaaaaaa table local proto kernel scope link src 10.241.1.1
local 127.0.0.0/8 dev lo table local proto kernel scope host src 127.0.0.1
`
	for _, tc := range []struct {
		subnet, own, want string
	}{
		{"10.241.1.0/24", "tbaaaaaaaa", ""}, // its own bridge
		{"10.241.2.0/24", "tbbbbbbbbb", ""}, // next door
		{"10.241.0.0/16", "tbbbbbbbbb", "10.241.1.0/24 dev tbaaaaaaaa proto kernel scope link src 10.241.1.1"}, // another district inside
		{"10.241.1.128/25", "tbbbbbbbbb", "10.241.1.0/24 dev tbaaaaaaaa proto kernel scope link src 10.241.1.1"},
		{"10.8.3.0/24", "tbbbbbbbbb", "10.8.0.0/16 dev tun0 scope link"}, // a VPN
		{"172.16.5.0/28", "tbbbbbbbbb", "blackhole 172.16.5.0/24"},
		{"192.0.2.0/25", "tbbbbbbbbb", "192.0.2.0/24 dev eth0 proto kernel scope link src 192.0.2.2"},
		{"10.9.0.0/16", "tbbbbbbbbb", ""}, // only the default route covers it
	} {
		if got := overlappingRoute(routes, netip.MustParsePrefix(tc.subnet), tc.own); got != tc.want {
			t.Errorf("overlappingRoute(%s, own %s) = %q, want %q", tc.subnet, tc.own, got, tc.want)
		}
	}
}

// A district whose subnet overlaps a host network is refused, and a
// district whose subnet changed under its bridge gets no second address.
func TestSubnetConflicts(t *testing.T) {
	e := newEnv(t)
	d := e.district()
	subnet := netip.MustParsePrefix(d.LocalSubnet)

	// A host interface on part of the district's subnet (its .64/26).
	dummy := "tk" + randHex(4)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", dummy).Run() })
	a := subnet.Addr().As4()
	a[3] = 65
	hostNet := netip.PrefixFrom(netip.AddrFrom4(a), 26)
	mustIP(t,
		[]string{"link", "add", dummy, "type", "veth", "peer", "name", dummy + "p"},
		[]string{"addr", "add", hostNet.String(), "dev", dummy},
		[]string{"link", "set", dummy, "up"})
	drv := e.driver(d)
	_, err := drv.EnsureGroup(t.Context(), provider.GroupSpec{
		Name: provider.GroupName("clash", d.ID), Cluster: "clash", District: d.ID,
	})
	if err == nil || !strings.Contains(err.Error(), "overlaps the host route") || !strings.Contains(err.Error(), dummy) {
		t.Errorf("EnsureGroup in a subnet overlapping %s on %s = %v, want a refusal naming the route", hostNet, dummy, err)
	}
	mustIP(t, []string{"link", "del", dummy})

	e.group(drv, "clash")
	moved := d
	moved.LocalSubnet = strings.Replace(d.LocalSubnet, "10.250.", "10.251.", 1)
	_, err = e.driver(moved).EnsureGroup(t.Context(), provider.GroupSpec{
		Name: provider.GroupName("clash", d.ID), Cluster: "clash", District: d.ID,
	})
	if err == nil || !strings.Contains(err.Error(), "local_subnet changed") {
		t.Errorf("EnsureGroup with the subnet changed = %v, want a refusal", err)
	}
	out, err := exec.Command("ip", "-4", "-o", "addr", "show", "dev", drv.bridge).Output()
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(out), " inet "); n != 1 {
		t.Errorf("the bridge has %d IPv4 addresses, want 1:\n%s", n, out)
	}
}

// A node reaches no service of the host's; the host still reaches the node.
func TestNodesDoNotReachTheHost(t *testing.T) {
	e := newEnv(t)
	drv := e.driver(e.district())
	g := e.group(drv, "hostfw")
	inst := e.launch(drv, g, "hostfw", "hostfw-n1")
	l, err := net.Listen("tcp", net.JoinHostPort(drv.gateway.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	probe := fmt.Sprintf("timeout 2 bash -c 'echo > /dev/tcp/%s' && echo reached || echo blocked",
		strings.Replace(l.Addr().String(), ":", "/", 1))
	if out, err := e.ssh(inst.PublicIP, probe); err != nil || strings.TrimSpace(out) != "blocked" {
		t.Errorf("a node connecting to a host service on the gateway: %q, %v; want blocked", out, err)
	}

	// Nor over IPv6: the bridge has no IPv6 address for a node to use.
	if out, err := exec.Command("ip", "-6", "-o", "addr", "show", "dev", drv.bridge).CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "" {
		t.Errorf("the bridge has IPv6 addresses a node could reach the host at: %s %v", out, err)
	}

	// A flushed INPUT jump lists the group as allowing nothing, and
	// EnsureGroup puts the jump back.
	chain := inputChainName(e.root, drv.district)
	if out, err := exec.Command("iptables", "-w", "-D", "INPUT", "-i", drv.bridge, "-j", chain).CombinedOutput(); err != nil {
		t.Fatalf("delete the INPUT jump: %v\n%s", err, out)
	}
	if _, groups, err := drv.List(t.Context(), "hostfw"); err != nil || len(groups) != 1 || groups[0].Sources != nil {
		t.Errorf("List without the INPUT jump = %+v, %v; want the group allowing nothing", groups, err)
	}
	e.group(drv, "hostfw")
	if out, err := e.ssh(inst.PublicIP, probe); err != nil || strings.TrimSpace(out) != "blocked" {
		t.Errorf("after EnsureGroup: %q, %v; want blocked", out, err)
	}
}

// A group machines still use cannot be deleted; once they are gone it can.
func TestDeleteGroupInUse(t *testing.T) {
	e := newEnv(t)
	drv := e.driver(e.district())
	g := e.group(drv, "inuse")
	inst := e.launch(drv, g, "inuse", "inuse-n1")
	err := drv.DeleteGroup(t.Context(), g)
	if err == nil || !strings.Contains(err.Error(), "inuse-n1") {
		t.Fatalf("DeleteGroup of a group a running node uses = %v, want an error naming the node", err)
	}
	if _, groups, _ := drv.List(t.Context(), "inuse"); len(groups) != 1 {
		t.Errorf("the refused DeleteGroup removed the group: %+v", groups)
	}
	if err := drv.Terminate(t.Context(), inst); err != nil {
		t.Fatal(err)
	}
	waitGone(t, drv, "inuse", inst.ProviderID)
	if err := drv.DeleteGroup(t.Context(), g); err != nil {
		t.Errorf("DeleteGroup once the node is gone: %v", err)
	}
}

// Every wait for the root lock ends with the caller's context, so Ctrl-C
// works while a hung transit or teardown holds it.
func TestRootLockHonoursContext(t *testing.T) {
	e := newEnv(t)
	drv := e.driver(e.district())
	g := e.group(drv, "lock")
	inst := e.launch(drv, g, "lock", "lock-n1")
	unlock, err := lockRoot(t.Context(), e.root)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	for name, call := range map[string]func(ctx context.Context) error{
		"EnsureGroup": func(ctx context.Context) error {
			_, err := drv.EnsureGroup(ctx, provider.GroupSpec{Name: g.Name, Cluster: "lock", District: drv.district})
			return err
		},
		"DeleteGroup": func(ctx context.Context) error { return drv.DeleteGroup(ctx, g) },
		"Launch": func(ctx context.Context) error {
			_, err := drv.Launch(ctx, e.launchSpec(drv, g, "lock", "lock-n2"))
			return err
		},
		"Terminate": func(ctx context.Context) error { return drv.Terminate(ctx, inst) },
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		start := time.Now()
		err := call(ctx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
			t.Errorf("%s while the root lock is held: %v after %s; want the context's deadline at once", name, err, time.Since(start))
		}
	}
}
