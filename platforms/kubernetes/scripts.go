package kubernetes

import (
	"fmt"
	"strings"

	"github.com/cloudtransit/transit/platforms/meshnode"
	"github.com/cloudtransit/transit/shellquote"
)

// Where transit puts what it installs on a node.
const (
	binDir    = meshnode.BinDir       // bundle binaries and transit's helpers
	imageDir  = "/opt/transit/images" // bundle image archives
	cniBinDir = "/opt/cni/bin"
	// logDir keeps the logs of the daemons transit supervises and of
	// kubeadm (whose output holds join commands: never sent back).
	logDir = meshnode.LogDir
	// configFile is where kubeadm's configuration waits for init and join.
	configFile = "/etc/kubernetes/transit-kubeadm.yaml"
)

// shPath puts the bundle's binaries first.
const shPath = meshnode.ShPath

// probeScript reports whether the node runs systemd and the SHA-256 of
// each of paths the node has: only those (a bundle's images are hundreds
// of megabytes; what is not about to be sent is not read).
func probeScript(paths []string) string {
	var b strings.Builder
	b.WriteString("if [ -d /run/systemd/system ]; then echo systemd=yes; else echo systemd=no; fi\n")
	for _, p := range paths {
		fmt.Fprintf(&b, "[ -f %[1]s ] && sha256sum %[1]s\n", shellquote.Quote(p))
	}
	b.WriteString("exit 0\n")
	return b.String()
}

// containerdConfig is containerd's configuration on a node. On a host
// without CAP_SYS_RESOURCE (a local node shares the host's bounding set)
// runc cannot lower a pod's oom_score_adj: every sandbox would fail, so
// pods may only raise it there.
func containerdConfig(systemd, bundle bool) string {
	runtime := ""
	if bundle {
		runtime = "\n      BinaryName = \"" + binDir + "/runc\""
	}
	return fmt.Sprintf(`version = 2
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
  restrict_oom_score_adj = RESTRICT_OOM
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      SystemdCgroup = %t%s
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "%s"
    conf_dir = "/etc/cni/net.d"
`, systemd, runtime, cniBinDir)
}

// superviseScript is the stand-in for systemd on nodes without it (local
// nodes), shared with the mesh (package meshnode).
const superviseScript = meshnode.SuperviseScript

// kubeletScript is what kubeadm's kubelet.service drop-in does: wait until
// kubeadm wrote the kubelet's configuration (init, join), then run it with
// kubeadm's flags. After kubeadm reset removed the configuration it waits
// again. kubeadm writes the flags (the node's name among them) after the
// configuration, and on a node without systemd it cannot restart the
// kubelet once they are there: a kubelet started between the two
// registered under the machine's hostname, a member transit never made
// (CI: an emulated EC2 master joined as its instance id). So it waits
// for the flags too, their line complete.
const kubeletScript = `#!/bin/sh
` + shPath + `
until [ -f /var/lib/kubelet/config.yaml ] && grep -qx 'KUBELET_KUBEADM_ARGS=".*"' /var/lib/kubelet/kubeadm-flags.env 2>/dev/null; do
	sleep 0.2
done
. /var/lib/kubelet/kubeadm-flags.env
# shellcheck disable=SC2086 # kubeadm's flags are words
exec kubelet --bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf \
	--kubeconfig=/etc/kubernetes/kubelet.conf --config=/var/lib/kubelet/config.yaml $KUBELET_KUBEADM_ARGS
`

// unit is a systemd unit for a bundle daemon on a node with systemd.
func unit(desc, exec string) string { return meshnode.Unit(desc, exec) }

// bundleImage is an archive to import into containerd.
type bundleImage struct {
	file, ref, sha string
}

// setupScript configures and starts containerd and the kubelet of a node
// installed from a bundle (the files are in place), then imports the
// images whose archives changed since their last import. Idempotent.
func setupScript(images []bundleImage) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("set -eu")
	w(shPath)
	w("mkdir -p %s /etc/containerd /etc/cni/net.d %s /var/lib/kubelet /etc/kubernetes/manifests /run/transit", logDir, cniBinDir)
	w("systemd=no; [ -d /run/systemd/system ] && systemd=yes")
	w("# runc cannot lower oom_score_adj without CAP_SYS_RESOURCE (bit 24)")
	w(`capeff=$(awk '/^CapEff/ {print $2}' /proc/self/status)`)
	w(`if [ $(( 0x$capeff >> 24 & 1 )) = 1 ]; then restrict=false; else restrict=true; fi`)
	w(`if [ $systemd = yes ]; then cfg=%s; else cfg=%s; fi`, shellquote.Quote(containerdConfig(true, true)), shellquote.Quote(containerdConfig(false, true)))
	w(`printf '%%s' "$cfg" | sed "s/RESTRICT_OOM/$restrict/" > /etc/containerd/config.toml.transit`)
	w("changed=no")
	w("if ! cmp -s /etc/containerd/config.toml.transit /etc/containerd/config.toml; then")
	w("  mv /etc/containerd/config.toml.transit /etc/containerd/config.toml; changed=yes")
	w("else rm -f /etc/containerd/config.toml.transit; fi")
	w("cat > %s/transit-kubelet <<'TRANSIT_EOF'\n%sTRANSIT_EOF", binDir, kubeletScript)
	w("chmod 755 %s/transit-kubelet", binDir)
	w("if [ $systemd = yes ]; then")
	w("  printf '%%s' %s > /etc/systemd/system/containerd.service", shellquote.Quote(unit("containerd", binDir+"/containerd")))
	w("  printf '%%s' %s > /etc/systemd/system/kubelet.service", shellquote.Quote(unit("kubelet", binDir+"/transit-kubelet")))
	w("  systemctl daemon-reload")
	w("  systemctl enable containerd kubelet >/dev/null 2>&1")
	w("  if [ $changed = yes ]; then systemctl restart containerd; else systemctl start containerd; fi")
	w("  systemctl start kubelet")
	w("else")
	w("  cat > %s/transit-supervise <<'TRANSIT_EOF'\n%sTRANSIT_EOF", binDir, superviseScript)
	w("  chmod 755 %s/transit-supervise", binDir)
	w("  for d in containerd kubelet; do")
	w("    pid=$(cat /run/transit/$d.pid 2>/dev/null || true)")
	w(`    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then`)
	w(`      [ $d = containerd ] && [ $changed = yes ] && pkill -x containerd || true`)
	w("      continue")
	w("    fi")
	w("    cmd=containerd; [ $d = kubelet ] && cmd=transit-kubelet")
	w("    setsid %s/transit-supervise $d $cmd </dev/null >/dev/null 2>&1 &", binDir)
	w("    echo $! > /run/transit/$d.pid")
	w("  done")
	w("fi")
	w("# pods' traffic is routed through the node: kubeadm's preflight refuses it")
	w("# without forwarding (packages mode sets it with the distribution's sysctl)")
	w("[ \"$(cat /proc/sys/net/ipv4/ip_forward)\" = 1 ] || echo 1 > /proc/sys/net/ipv4/ip_forward")
	w("# kept over a reboot on a machine of its own (a local node shares the host's /etc)")
	w("[ $systemd = no ] || printf 'net.ipv4.ip_forward = 1\\n' > /etc/sysctl.d/90-transit-kubernetes.conf")
	w("i=0; until ctr --address /run/containerd/containerd.sock version >/dev/null 2>&1; do")
	w("  i=$((i+1)); if [ $i -gt 300 ]; then echo 'containerd did not start (see %s/containerd.log)' >&2; exit 1; fi; sleep 0.1", logDir)
	w("done")
	b.WriteString(imports(images))
	return b.String()
}

// imports imports the images whose archives changed since their last
// import into containerd's k8s.io namespace. They are not unpacked: the
// CRI unpacks an image when it first makes a container of it, so a node
// pays the decompression only for what it runs (about 6.7 s of CPU for
// the whole set, two thirds of the import; a worker runs a third of its
// images).
func imports(images []bundleImage) string {
	var b strings.Builder
	for _, im := range images {
		// The mark holds the archive's digest: a changed bundle imports
		// again, an unchanged one is not read at all.
		mark := imageDir + "/" + im.file + ".imported"
		fmt.Fprintf(&b, "if [ \"$(cat %s 2>/dev/null)\" != %s ]; then\n", shellquote.Quote(mark), shellquote.Quote(im.sha))
		fmt.Fprintf(&b, "  ctr -n k8s.io images import --no-unpack %s >/dev/null\n", shellquote.Quote(imageDir+"/"+im.file))
		fmt.Fprintf(&b, "  echo %s > %s\n", shellquote.Quote(im.sha), shellquote.Quote(mark))
		b.WriteString("fi\n")
	}
	return b.String()
}

// importScript imports images on a node whose containerd came from
// packages (already running).
func importScript(images []bundleImage) string {
	return "set -eu\n" + shPath + "\n" + imports(images)
}

// stopKubeletScript stops the kubelet (kubeadm cannot without systemd).
const stopKubeletScript = `if [ -d /run/systemd/system ]; then systemctl stop kubelet 2>/dev/null || true; else pkill -x kubelet || true; fi`

// initScript initialises the cluster on the first master from the
// configuration on stdin, unless an API server already answers there (a
// run killed after the init). A half-done init is reset first. kubeadm's
// output, which holds join commands, stays in logDir.
func initScript() string {
	return `set -eu
` + shPath + `
umask 077
mkdir -p ` + logDir + `
cat > ` + configFile + `
if [ -f /etc/kubernetes/admin.conf ] && kubectl --kubeconfig /etc/kubernetes/admin.conf get --raw /readyz >/dev/null 2>&1; then
	echo initialised-before
	exit 0
fi
` + resetLeftovers + kubeadmLogged("init", "--config "+configFile+" --skip-token-print") + `echo initialised
`
}

// joinScript joins the node with the configuration on stdin (it holds
// the bootstrap token and, for masters, the certificate key: it lives in
// a 0600 file for the join's duration only). A node holding another
// join's leftovers is reset first.
func joinScript() string {
	return `set -eu
` + shPath + `
umask 077
mkdir -p ` + logDir + `
trap 'rm -f ` + configFile + `' EXIT
cat > ` + configFile + `
` + resetLeftovers + kubeadmLogged("join", "--config "+configFile)
}

// resetLeftovers resets a node holding the leftovers of an earlier init
// or join (see hasLeftovers).
var resetLeftovers = `if ` + hasLeftovers("") + `; then
	kubeadm reset -f >>` + logDir + `/kubeadm.log 2>&1 || true
	` + stopKubeletScript + `
fi
`

// hasLeftovers is a shell test that holds when the node under root ("":
// the node's own) has what an earlier init or join left and kubeadm's
// preflight refuses to find: kubelet credentials, the bootstrap
// kubeconfig and CA of a join cut short, a control plane's manifests,
// etcd's data, or a kubelet configuration (a kubelet runs, holding its
// port).
func hasLeftovers(root string) string {
	var tests []string
	for _, f := range []string{"/etc/kubernetes/kubelet.conf", "/etc/kubernetes/bootstrap-kubelet.conf", "/etc/kubernetes/pki/ca.crt", "/var/lib/kubelet/config.yaml"} {
		tests = append(tests, "[ -e "+shellquote.Quote(root+f)+" ]")
	}
	for _, dir := range []string{"/etc/kubernetes/manifests", "/var/lib/etcd"} {
		tests = append(tests, `[ -n "$(ls -A `+shellquote.Quote(root+dir)+` 2>/dev/null)" ]`)
	}
	return strings.Join(tests, " || ")
}

// resetHalfJoinedMasterScript resets a node that holds a control plane's
// manifests (a `kubeadm join --control-plane` got that far) and prints
// "reset"; on any other node it does nothing.
var resetHalfJoinedMasterScript = `set -eu
` + shPath + `
if [ -e /etc/kubernetes/manifests/kube-apiserver.yaml ]; then
	mkdir -p ` + logDir + `
	kubeadm reset -f >>` + logDir + `/kubeadm.log 2>&1 || true
	` + stopKubeletScript + `
	echo reset
fi
`

// kubeadmLogged runs `kubeadm <phase> <args>` with its output in logDir
// (it repeats join commands); on failure it shows the log's last lines,
// tokens and certificate keys redacted.
func kubeadmLogged(phase, args string) string {
	return `if ! kubeadm ` + phase + ` ` + args + ` >>` + logDir + `/kubeadm.log 2>&1; then
	echo "kubeadm ` + phase + ` failed; its last lines (the rest is in ` + logDir + `/kubeadm.log on the node):" >&2
	tail -n 15 ` + logDir + `/kubeadm.log | sed 's/--token [^ ]*/--token <redacted>/; s/--certificate-key [^ ]*/--certificate-key <redacted>/' >&2
	exit 1
fi
`
}

// resetScript takes the node out of the cluster on the node's side:
// kubeadm reset (which also removes a master's etcd member while etcd
// answers), the kubelet stopped, the pod network's leftovers removed.
func resetScript() string {
	return `set -u
` + shPath + `
mkdir -p ` + logDir + `
if command -v kubeadm >/dev/null 2>&1; then
	kubeadm reset -f >>` + logDir + `/kubeadm.log 2>&1 || echo "kubeadm reset failed (see ` + logDir + `/kubeadm.log)" >&2
fi
` + stopKubeletScript + `
rm -f /etc/cni/net.d/*
for l in cni0 flannel.1; do ip link del "$l" 2>/dev/null || true; done
exit 0
`
}

// adminConfigScript prints the admin kubeconfig of a master.
const adminConfigScript = "cat /etc/kubernetes/admin.conf"

// wireguardScript checks that the node's kernel can make a WireGuard
// interface, which flannel's wireguard backend needs.
const wireguardScript = `modprobe wireguard 2>/dev/null || true
if ip link add transit-wgprobe type wireguard 2>/dev/null; then
	ip link del transit-wgprobe
	exit 0
fi
echo "kubernetes.pod_network wireguard needs the kernel's WireGuard module on every node, and this node's kernel has none: use pod_network vxlan, or a kernel with WireGuard" >&2
exit 1
`

// hostsMark ends the /etc/hosts lines transit keeps.
const hostsMark = "# transit control-plane endpoint"

// hostsScript makes the endpoint name resolve to addrs (the masters, the
// node's own district first) in the node's /etc/hosts, keeping every other
// line.
func hostsScript(name string, addrs []string) string { return hostsScriptAt("/etc/hosts", name, addrs) }

// hostsScriptAt is hostsScript for the hosts file at path. The file is
// rewritten in place: on some nodes it is a mount point that a rename
// cannot replace.
func hostsScriptAt(path, name string, addrs []string) string {
	var lines strings.Builder
	for _, a := range addrs {
		fmt.Fprintf(&lines, "%s %s %s\n", a, name, hostsMark)
	}
	f := shellquote.Quote(path)
	return `set -eu
t=$(mktemp)
trap 'rm -f "$t"' EXIT
grep -v -F ` + shellquote.Quote(hostsMark) + ` ` + f + ` > "$t" || true
printf '%s' ` + shellquote.Quote(lines.String()) + ` >> "$t"
if ! cmp -s "$t" ` + f + `; then cat "$t" > ` + f + `; fi
`
}
