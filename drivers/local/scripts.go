package local

import (
	"fmt"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/cloudtransit/transit/shellquote"
)

// The shell scripts that make and unmake a node. They are pure functions of
// their inputs, so tests read them as strings; the Go side only runs them.

// scriptPath is the PATH every script runs with, so a node behaves the same
// whatever the caller's environment (sudo, cron).
const scriptPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// privateDirs are the paths each node gets its own copy of, so installers
// use their default paths and nodes never share state.
var privateDirs = []string{
	"/opt/cni",                // CNI plugins; flannel's init container adds its own
	"/opt/containerd",         // containerd makes its bin and lib here at start
	"/opt/transit",            // binaries transit uploads (Kubernetes bundle)
	"/var/lib/etcd",           // kubeadm's stacked etcd
	"/usr/libexec/kubernetes", // the kubelet's volume plugins
	"/usr/lib/modules",        // empty: a node loads no module into the host's kernel
	"/etc/cni/net.d",
	"/etc/containerd",
	"/etc/docker",
	"/etc/kubernetes",
	"/root",
	"/var/lib/cni",
	"/var/lib/containerd",
	"/var/lib/docker",
	"/var/lib/kubelet",
	"/var/lib/transit",
	"/var/log/containers",
	"/var/log/pods",
	"/var/tmp",
}

// kubeletTunables are the global kernel tunables a kubelet sets when they
// differ (and fails to start when it cannot): a node shows it these values
// instead of the host's.
var kubeletTunables = []struct{ key, value string }{
	{"vm/overcommit_memory", "1"},
	{"vm/panic_on_oom", "0"},
	{"kernel/panic", "10"},
	{"kernel/panic_on_oops", "1"},
	{"kernel/keys/root_maxkeys", "1000000"},
	{"kernel/keys/root_maxbytes", "25000000"},
}

// imagesMount is where a node sees the provider's machine image
// (<root>/images), read-only.
const imagesMount = "/var/lib/transit/images"

// hierarchy is one mounted cgroup hierarchy of the host.
type hierarchy struct {
	Mount   string `json:"mount"`   // host mount point, e.g. /sys/fs/cgroup/cpu
	Type    string `json:"type"`    // cgroup (v1) or cgroup2
	Options string `json:"options"` // options to mount it again, e.g. "cpu", "none,name=systemd"
}

// unified reports whether h is a cgroup v2 host's only hierarchy, mounted at
// /sys/fs/cgroup itself.
func (h hierarchy) unified() bool { return h.Type == "cgroup2" && h.Mount == cgroupFS }

const cgroupFS = "/sys/fs/cgroup"

// script starts one of a node's scripts: the shebang, a comment naming the
// node, the shell options and PATH. w appends a formatted line to b.
func script(kind string, r *nodeRecord, set string) (*strings.Builder, func(format string, args ...any)) {
	b := &strings.Builder{}
	w := func(format string, args ...any) { fmt.Fprintf(b, format+"\n", args...) }
	w("#!/bin/bash")
	w("# transit local node %s: %s (node %s)", kind, r.ProviderID, r.NodeID)
	w("set %s", set)
	w("export PATH=%s", scriptPath)
	return b, w
}

// bootScript runs on the host in a new session: it makes the node's network
// namespace, veth pair and cgroups, moves itself into the cgroups and execs
// the node's init in its own mount, UTS and cgroup namespaces. Its pid is
// the node's init pid from the first line to sshd.
func bootScript(r *nodeRecord, hs []hierarchy) string {
	b, w := script("boot", r, "-eu")
	ns := shellquote.Quote(r.Netns)
	w("# sshd's log, opened here on the host's mount so that the node's boot")
	w("# files can turn read-only in its own mount namespace; init passes it on")
	w("exec 3>>%s", shellquote.Quote(path.Join(r.NodeDir, "boot", "sshd.log")))
	w("")
	w("# network: a veth pair from the district bridge to eth0 in the node's netns")
	w("ip netns add %s", ns)
	w("ip link add %s type veth peer name eth0 netns %s", shellquote.Quote(r.HostVeth), ns)
	w("ip link set %s master %s up", shellquote.Quote(r.HostVeth), shellquote.Quote(r.Bridge))
	w("# forget whatever the host knew of an earlier node at this address")
	w("ip neigh flush to %s dev %s 2>/dev/null || true", r.IP, shellquote.Quote(r.Bridge))
	w("ip -n %s addr add %s/%d dev eth0", ns, r.IP, r.Prefix)
	w("ip -n %s link set lo up", ns)
	w("# announce the address (gratuitous ARP) when eth0 comes up, so peers")
	w("# that knew an earlier node at it update their neighbour entries")
	w("nsenter --net=/run/netns/%s sh -c 'echo 1 > /proc/sys/net/ipv4/conf/eth0/arp_notify'", r.Netns)
	w("ip -n %s link set eth0 up", ns)
	w("ip -n %s route add default via %s", ns, r.Gateway)
	w("")
	w("# cgroups: transit/<provider id> in every hierarchy; cpuset needs cpus and mems")
	w("mkcg() {")
	w("  for i in 1 2 3 4 5; do mkdir -p \"$1\" && return 0; sleep 0.1; done")
	w("  return 1")
	w("}")
	w("fillcpuset() { # dir parent")
	w("  for f in cpuset.cpus cpuset.mems; do")
	w("    if [ -z \"$(cat \"$1/$f\")\" ]; then cat \"$2/$f\" > \"$1/$f\"; fi")
	w("  done")
	w("}")
	for i, dir := range r.Cgroups {
		w("mkcg %s", shellquote.Quote(dir))
		if i < len(hs) && hs[i].Type == "cgroup" && strings.Contains(","+hs[i].Options+",", ",cpuset,") {
			parent := path.Dir(dir)
			w("fillcpuset %s %s", shellquote.Quote(parent), shellquote.Quote(path.Dir(parent)))
			w("fillcpuset %s %s", shellquote.Quote(dir), shellquote.Quote(parent))
		}
		if i < len(hs) && hs[i].Type == "cgroup2" {
			// Best effort: hand the controllers down to the node.
			parent := path.Dir(dir)
			w("for c in $(cat %s/cgroup.controllers); do", shellquote.Quote(path.Dir(parent)))
			w("  echo \"+$c\" > %s/cgroup.subtree_control 2>/dev/null || true", shellquote.Quote(path.Dir(parent)))
			w("  echo \"+$c\" > %s/cgroup.subtree_control 2>/dev/null || true", shellquote.Quote(parent))
			w("done")
		}
	}
	for _, dir := range r.Cgroups {
		w("echo $$ > %s/cgroup.procs", shellquote.Quote(dir))
	}
	w("")
	w("exec nsenter --net=/run/netns/%s unshare --cgroup /bin/bash %s", r.Netns, shellquote.Quote(path.Join(r.NodeDir, "boot", "enter.sh")))
	return b.String()
}

// enterScript runs in the node's network and cgroup namespaces, whose root
// is the node's cgroup. On a cgroup v2 host it moves itself into the node's
// init leaf and hands every controller down to the node's cgroup (v2 lets
// no process sit in a cgroup that delegates controllers), so the node can
// make cgroups of its own beside init, as a kubelet does. Then it starts
// the node's init as PID 1 of a new PID namespace, with its own mount and
// UTS namespaces and /proc. It stays as the init's parent; killed, it takes
// the init, and with it every process of the node, along (--kill-child).
func enterScript(r *nodeRecord, hs []hierarchy) string {
	b, w := script("enter", r, "-eu")
	for i, h := range hs {
		if !h.unified() || i >= len(r.Cgroups) {
			continue
		}
		cg := r.Cgroups[i]
		w("")
		w("# cgroup v2: the node's processes in its init leaf; its cgroup delegates")
		w("mkdir -p %s", shellquote.Quote(cg+"/init"))
		w("echo $$ > %s", shellquote.Quote(cg+"/init/cgroup.procs"))
		w("for c in $(cat %s); do", shellquote.Quote(cg+"/cgroup.controllers"))
		w("  echo \"+$c\" > %s", shellquote.Quote(cg+"/cgroup.subtree_control"))
		w("done")
	}
	w("")
	w("exec unshare --mount --uts --pid --kill-child --mount-proc --propagation private /bin/bash %s",
		shellquote.Quote(path.Join(r.NodeDir, "boot", "init.sh")))
	return b.String()
}

// initScript is the node's init: it runs in the node's namespaces, gives the
// node its private directories, /run, /tmp, cgroupfs and hostname, and
// becomes sshd.
func initScript(r *nodeRecord, hs []hierarchy) string {
	b, w := script("init", r, "-eu")
	boot := path.Join(r.NodeDir, "boot")
	stage := path.Join(r.NodeDir, "run")
	w("BOOT=%s", shellquote.Quote(boot))
	w("")
	w("# Drop the host's namespace mounts (ip netns) copied into this mount")
	w("# namespace: they would keep deleted nodes' namespaces alive.")
	w(`awk '{for(i=7;i<=NF;i++)if($i=="-"){if($(i+1)=="nsfs")print $5;break}}' /proc/self/mountinfo | sort -r |`)
	w("  while read -r m; do umount -n -l \"$m\" 2>/dev/null || true; done")
	w("")
	w("# The node's /run, staged while every host path is still visible:")
	w("# its boot files, its disk and the machine image.")
	w("mount -n -t tmpfs -o mode=755,nosuid,nodev tmpfs %s", shellquote.Quote(stage))
	w("mkdir -m 755 %s/sshd %s/.transit-boot %s/.transit-fs", shellquote.Quote(stage), shellquote.Quote(stage), shellquote.Quote(stage))
	w("mount -n --bind \"$BOOT\" %s/.transit-boot", shellquote.Quote(stage))
	w("mount -n --bind %s %s/.transit-fs", shellquote.Quote(path.Join(r.NodeDir, "fs")), shellquote.Quote(stage))
	w("if [ -d %s ]; then", shellquote.Quote(path.Join(r.Root, "images")))
	w("  mkdir %s/.transit-images", shellquote.Quote(stage))
	w("  mount -n --bind %s %s/.transit-images", shellquote.Quote(path.Join(r.Root, "images")), shellquote.Quote(stage))
	w("  mount -n -o remount,bind,ro %s/.transit-images", shellquote.Quote(stage))
	w("fi")
	w("mount -n --move %s /run", shellquote.Quote(stage))
	w("mount -n -t tmpfs -o mode=1777,nosuid,nodev tmpfs /tmp")
	w("")
	w("# private directories")
	for _, p := range privateDirs {
		w("mount -n --bind /run/.transit-fs%s %s", p, p)
	}
	w("if [ -d /run/.transit-images ]; then")
	w("  mkdir -p %s", imagesMount)
	w("  mount -n --move /run/.transit-images %s", imagesMount)
	w("  rmdir /run/.transit-images")
	w("fi")
	w("umount -n /run/.transit-fs")
	w("rmdir /run/.transit-fs")
	w("# the boot files at their host path, where sshd_config names them")
	w("mkdir -p \"$BOOT\"")
	w("mount -n --bind /run/.transit-boot \"$BOOT\"")
	w("umount -n /run/.transit-boot")
	w("rmdir /run/.transit-boot")
	w("cp \"$BOOT/hosts\" /run/hosts; mount -n --bind /run/hosts /etc/hosts")
	w("if [ -f /etc/hostname ]; then mount -n --bind \"$BOOT/hostname\" /etc/hostname; fi")
	w("")
	w("# the node's own sysfs: its network namespace's interfaces only")
	w("mount -n -t sysfs sysfs /sys")
	w("")
	w("# cgroupfs as the node's cgroup namespace sees it: its cgroup is /")
	v1 := false
	for _, h := range hs {
		if h.unified() {
			w("mount -n -t cgroup2 %s cgroup2 %s", mountOpts(h.Options), cgroupFS)
			continue
		}
		if !v1 {
			w("mount -n -t tmpfs -o mode=755 cgroup_root %s", cgroupFS)
			v1 = true
		}
		dir := path.Join(cgroupFS, path.Base(h.Mount))
		w("mkdir -p %s", shellquote.Quote(dir))
		w("mount -n -t %s %s %s %s", h.Type, mountOpts(h.Options), h.Type, shellquote.Quote(dir))
	}
	w("")
	w("echo %s > /proc/sys/kernel/hostname", shellquote.Quote(r.NodeID))
	w("")
	w("# Kernel tunables are the host's: /proc/sys is read-only but for net")
	w("# (per network namespace), and the ones a kubelet insists on read its")
	w("# values from files of the node's own, so it never sets the host's.")
	w("mount -n --bind /proc/sys /proc/sys")
	w("mount -n -o remount,bind,ro /proc/sys")
	w("mount -n --bind /proc/sys/net /proc/sys/net")
	w("mount -n -o remount,bind,rw /proc/sys/net")
	w("mkdir -p /run/.transit-sysctl")
	for _, t := range kubeletTunables {
		f := "/run/.transit-sysctl/" + strings.ReplaceAll(t.key, "/", "_")
		w("echo %s > %s", t.value, f)
		w("mount -n --bind %s /proc/sys/%s", f, t.key)
		w("mount -n -o remount,bind,ro /proc/sys/%s", t.key)
	}
	w("")
	w("# the boot mark, before the boot files turn read-only")
	w("touch \"$BOOT/booted\"")
	w("")
	w("# The host's filesystem, read-only: every mount but the node's own")
	w("# paths, so an installer on the node cannot change the host's /usr.")
	w("# The boot files too: the host key in them is what the provider")
	w("# reports. (A read-only bind in this mount namespace leaves the host's")
	w("# mount as it is.)")
	w("own() {")
	w("  case \"$1\" in")
	w("  \"$BOOT\") return 1 ;; # wherever it is, even in a private path")
	w("  /run | /run/* | /tmp | /tmp/* | /proc | /proc/* | /sys | /sys/* | /dev | /dev/* | /etc/hosts) return 0 ;;")
	for _, p := range privateDirs {
		w("  %s | %s/*) return 0 ;;", p, p)
	}
	w("  esac")
	w("  return 1")
	w("}")
	w("awk '{print $5}' /proc/self/mountinfo | sort -u | while read -r m; do")
	w("  m=$(printf '%%b' \"$m\")")
	w("  own \"$m\" && continue")
	w("  mount -n -o remount,bind,ro \"$m\"")
	w("done")
	w("")
	w("# fd 3 is sshd.log, opened by boot.sh on the host's mount")
	w("exec %s -D -e -f \"$BOOT/sshd_config\" 2>&3 3>&-", shellquote.Quote(r.SSHD))
	return b.String()
}

func mountOpts(o string) string {
	if o == "" {
		return ""
	}
	return "-o " + shellquote.Quote(o)
}

// sshdConfig is the node's sshd configuration: root by key only, on the
// node's address only.
func sshdConfig(r *nodeRecord) string {
	boot := path.Join(r.NodeDir, "boot")
	lines := []string{
		"# transit local node " + r.ProviderID + " (node " + r.NodeID + ")",
		"ListenAddress " + r.IP,
		"Port 22",
		"HostKey " + path.Join(boot, "ssh_host_ed25519_key"),
		"AuthorizedKeysFile " + path.Join(boot, "authorized_keys"),
		"PermitRootLogin prohibit-password",
		"PubkeyAuthentication yes",
		"PasswordAuthentication no",
		"KbdInteractiveAuthentication no",
		"UsePAM no",
		"StrictModes no",
		"UseDNS no",
		"PrintMotd no",
		"PidFile /run/sshd.pid",
		"MaxStartups 100:30:200",
		"MaxSessions 100",
		"Subsystem sftp internal-sftp",
	}
	return strings.Join(lines, "\n") + "\n"
}

// hostsFile is the node's /etc/hosts: its own name resolves to its address.
func hostsFile(r *nodeRecord) string {
	return "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n" + r.IP + "\t" + r.NodeID + "\n"
}

// teardownScript unmakes a node: it kills every process in the node's
// cgroups, removes the cgroups, the network namespace, the host veth and the
// node's files, then, under the root lock, the record and whatever the
// district and root no longer need (gcScript).
func teardownScript(r *nodeRecord, cgroupParents []string) string {
	b, w := script("teardown", r, "-u")
	w("ROOT=%s", shellquote.Quote(r.Root))
	w("NODE=%s", shellquote.Quote(r.NodeDir))
	w("# wait until whoever started this teardown has recorded it")
	w("flock \"$ROOT/lock\" true")
	w("")
	killScript(w, r)
	w("find \"$NODE\" -mindepth 1 -maxdepth 1 ! -name record.json ! -name teardown.log -exec rm -rf {} +")
	w("")
	w("exec 9>>\"$ROOT/lock\"")
	w("flock 9")
	w("rm -f \"$NODE/record.json\" \"$NODE/teardown.log\"")
	w("rmdir \"$NODE\"")
	b.WriteString(gcScript(r.Root, r.District, cgroupParents))
	return b.String()
}

// killScript writes the lines that end every process of a node and
// remove its cgroups, network namespace and host veth: what a teardown and
// a power-off share. $NODE must be the node's directory.
func killScript(w func(format string, args ...any), r *nodeRecord) {
	if r.InitPID > 0 {
		w("# the boot process and its children (its own process group), in case")
		w("# it had not reached its cgroups yet; only if it is still this node's")
		w("if [ \"$(sed 's/.*) //' /proc/%d/stat 2>/dev/null | cut -d' ' -f20)\" = %d ] &&", r.InitPID, r.InitStart)
		w("  grep -qzF -- \"$NODE/boot/\" /proc/%d/cmdline 2>/dev/null; then", r.InitPID)
		w("  kill -9 -- -%d %d 2>/dev/null", r.InitPID, r.InitPID)
		w("fi")
	}
	cgs := make([]string, len(r.Cgroups))
	for i, c := range r.Cgroups {
		cgs[i] = shellquote.Quote(c)
	}
	all := strings.Join(cgs, " ")
	if len(cgs) > 0 {
		w("# every process of the node (sshd, dockerd, containerd, shims, containers);")
		w("# a container's cgroup runc froze to signal it stays frozen if runc is")
		w("# killed meanwhile, and a frozen process cannot die: thawed first")
		w("for i in $(seq 1 400); do")
		w("  p=$(find %s -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u)", all)
		w("  [ -z \"$p\" ] && break")
		w("  for f in $(find %s \\( -name freezer.state -o -name cgroup.freeze \\) 2>/dev/null); do", all)
		w("    case $f in */freezer.state) echo THAWED >\"$f\" ;; *) echo 0 >\"$f\" ;; esac 2>/dev/null")
		w("  done")
		w("  kill -9 $p 2>/dev/null")
		w("  sleep 0.05")
		w("done")
		w("# its cgroups, depth first, in every hierarchy")
		w("for i in $(seq 1 100); do")
		w("  left=")
		w("  for d in %s; do", all)
		w("    [ -d \"$d\" ] || continue")
		w("    find \"$d\" -depth -type d -exec rmdir {} \\; 2>/dev/null")
		w("    [ -d \"$d\" ] && left=\"$left $d\"")
		w("  done")
		w("  [ -z \"$left\" ] && break")
		w("  sleep 0.1")
		w("done")
		w("if [ -n \"$left\" ]; then echo \"transit: cgroups still busy:$left\" >&2; exit 1; fi")
	}
	w("")
	w("ip netns del %s 2>/dev/null", shellquote.Quote(r.Netns))
	w("ip link del %s 2>/dev/null", shellquote.Quote(r.HostVeth))
	w("if [ -e /run/netns/%s ]; then echo \"transit: cannot delete netns %s\" >&2; exit 1; fi", r.Netns, r.Netns)
}

// powerOffScript stops a node as a cloud stops a VM: its processes,
// cgroups, network namespace and veth go; its files (disk, boot files,
// host key) and record stay, so booting it again (PowerOn) brings the same node
// back. It runs under the root lock its caller holds.
func powerOffScript(r *nodeRecord) string {
	b, w := script("power-off", r, "-u")
	w("NODE=%s", shellquote.Quote(r.NodeDir))
	killScript(w, r)
	w("# the next boot's mark goes: booted again means booted anew")
	w("rm -f \"$NODE/boot/booted\"")
	return b.String()
}

// gcScript removes, under the root lock held by its caller, the district's
// bridge and records once it has no nodes and no groups, and the directories
// transit created on the host once root has no districts left. A created
// directory that is still a mount point in some node is left alone.
func gcScript(root, district string, cgroupParents []string) string {
	bridge, inputChain := bridgeName(root, district), inputChainName(root, district)
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	dd := path.Join(root, "districts", district)
	w("# gc: district %s, root %s", district, root)
	w("# a node directory without a record is a teardown that did all but rmdir")
	w("for n in %s/*; do", shellquote.Quote(path.Join(dd, "nodes")))
	w("  [ -d \"$n\" ] && [ ! -e \"$n/record.json\" ] && rm -rf \"$n\" 2>/dev/null")
	w("done")
	// Plain ls skips dot files: the temporary files of record writes a
	// killed transit left. gc runs under the root lock, so no write is in
	// progress, and rm -rf takes them along.
	w("if [ -z \"$(ls %s 2>/dev/null)\" ] && [ -z \"$(ls %s 2>/dev/null)\" ]; then",
		shellquote.Quote(path.Join(dd, "nodes")), shellquote.Quote(path.Join(dd, "groups")))
	w("  ip link del %s 2>/dev/null", shellquote.Quote(bridge))
	w("  iptables -w -D INPUT -i %s -j %s 2>/dev/null", shellquote.Quote(bridge), inputChain)
	w("  iptables -w -F %s 2>/dev/null && iptables -w -X %s", inputChain, inputChain)
	w("  rm -rf %s", shellquote.Quote(dd))
	w("fi")
	w("if [ -z \"$(ls -A %s 2>/dev/null)\" ]; then", shellquote.Quote(path.Join(root, "districts")))
	w("  if [ -f %s ]; then", shellquote.Quote(path.Join(root, "created-dirs")))
	w("    tac %s | while IFS= read -r d; do", shellquote.Quote(path.Join(root, "created-dirs")))
	w("      grep -qsF \" $d \" /proc/[0-9]*/mountinfo && continue")
	w("      rmdir \"$d\" 2>/dev/null")
	w("    done")
	w("    rm -f %s", shellquote.Quote(path.Join(root, "created-dirs")))
	w("  fi")
	parents := append([]string(nil), cgroupParents...)
	sort.Strings(parents)
	for _, p := range parents {
		w("  rmdir %s 2>/dev/null", shellquote.Quote(p))
	}
	w("  rmdir %s 2>/dev/null", shellquote.Quote(path.Join(root, "districts")))
	w("fi")
	w("true")
	return b.String()
}

// groupRestore is the iptables-restore --noflush input that declares the
// group's chain and refills it in one transaction: established traffic, the
// sources, the node mesh's UDP port from anywhere (meshPort, unless 0),
// then DROP. The chain is never open or empty in between. The mesh's rule
// is written as iptables -S prints it (with -m udp), as parseChainMesh
// reads it.
func groupRestore(chain string, sources []string, meshPort int) string {
	var b strings.Builder
	b.WriteString("*filter\n")
	b.WriteString(":" + chain + " - [0:0]\n")
	b.WriteString("-F " + chain + "\n")
	b.WriteString("-A " + chain + " -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n")
	for _, s := range sources {
		b.WriteString("-A " + chain + " -s " + s + " -j ACCEPT\n")
	}
	if meshPort != 0 {
		b.WriteString("-A " + chain + " -p udp -m udp --dport " + strconv.Itoa(meshPort) + " -j ACCEPT\n")
	}
	b.WriteString("-A " + chain + " -j DROP\n")
	b.WriteString("COMMIT\n")
	return b.String()
}

// hostFilterRestore is the iptables-restore --noflush input of a district's
// input chain (ensureHostFilter).
func hostFilterRestore(chain string) string {
	return "*filter\n" +
		":" + chain + " - [0:0]\n" +
		"-F " + chain + "\n" +
		"-A " + chain + " -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n" +
		"-A " + chain + " -p icmp -j ACCEPT\n" +
		"-A " + chain + " -j DROP\n" +
		"COMMIT\n"
}

// parseChainMesh reads the node mesh's port back from `iptables -S`: that
// of the chain's rule accepting one UDP port from anywhere (the lowest,
// should there be two), 0 if none.
func parseChainMesh(chain, out string) int {
	port := 0
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) != 10 || f[0] != "-A" || f[1] != chain || !slices.Equal(f[2:6], []string{"-p", "udp", "-m", "udp"}) ||
			f[6] != "--dport" || f[8] != "-j" || f[9] != "ACCEPT" {
			continue
		}
		if p, err := strconv.Atoi(f[7]); err == nil && p > 0 && (port == 0 || p < port) {
			port = p
		}
	}
	return port
}

// parseChainSources reads the sources back from `iptables -S <chain>`.
func parseChainSources(chain, out string) []string {
	var srcs []string
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) == 6 && f[0] == "-A" && f[1] == chain && f[2] == "-s" && f[4] == "-j" && f[5] == "ACCEPT" {
			srcs = append(srcs, strings.TrimSuffix(f[3], "/32"))
		}
	}
	sort.Strings(srcs)
	return srcs
}
