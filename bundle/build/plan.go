package build

import (
	"fmt"
	"os/exec"
	"strings"

	"github.com/cloudtransit/transit/bundle"
)

// Versions the bundle pins. The image tags are the ones kubeadm v1.32
// asks for (`kubeadm config images list`), so it finds every image in
// containerd and pulls none.
const (
	Kubernetes = "v1.32.4"
	Etcd       = "3.5.16"
	Pause      = "3.10"
)

// flannelVersion is the flannel release built, the tag of its image.
var flannelVersion = bundle.FlannelImage[strings.LastIndex(bundle.FlannelImage, ":")+1:]

// goBuild builds commands of one source module into the work directory.
type goBuild struct {
	// module is the module's directory relative to the repository
	// ("." for transit's own).
	module string
	// pkgs are the import paths; go names each binary after its last
	// path element (without a /vN suffix).
	pkgs    []string
	out     string // subdirectory of the work directory
	ldflags string
	cgo     bool
	tags    string
}

// goBuilds are every binary the bundle builds from source.
func goBuilds() []goBuild {
	k := "k8s.io/kubernetes/cmd/"
	minor := strings.Split(Kubernetes, ".")[1]
	var stamp []string
	for _, pkg := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		stamp = append(stamp, "-X "+pkg+".gitVersion="+Kubernetes, "-X "+pkg+".gitMajor=1", "-X "+pkg+".gitMinor="+minor)
	}
	// kubeadm and kubectl refuse a binary reporting the unstamped
	// v0.0.0-master version.
	stamp = append(stamp, "-X k8s.io/component-base/version.gitTreeState=clean",
		"-X k8s.io/component-base/version.buildDate=1970-01-01T00:00:00Z")
	return []goBuild{
		{module: "bundle/sources/kubernetes", out: "kubernetes", ldflags: strings.Join(stamp, " "),
			pkgs: []string{k + "kube-apiserver", k + "kube-controller-manager", k + "kube-scheduler", k + "kube-proxy", k + "kubelet", k + "kubeadm", k + "kubectl"}},
		{module: "bundle/sources/etcd", out: "etcd", pkgs: []string{"go.etcd.io/etcd/server/v3", "go.etcd.io/etcd/etcdctl/v3"}},
		{module: "bundle/sources/coredns", out: "coredns", pkgs: []string{"github.com/coredns/coredns"}},
		{module: "bundle/sources/flannel-cni", out: "flannel-cni", pkgs: []string{"github.com/containernetworking/plugins/plugins/meta/flannel"}},
		// flanneld needs cgo on amd64 (its UDP backend); linked statically
		// so the image needs no libc for it.
		{module: "bundle/sources/flannel", out: "flannel", cgo: true, tags: "netgo,osusergo",
			ldflags: `-extldflags "-static" -X github.com/flannel-io/flannel/pkg/version.Version=` + flannelVersion,
			pkgs:    []string{"github.com/flannel-io/flannel"}},
		{module: ".", out: "pause", pkgs: []string{"github.com/cloudtransit/transit/bundle/pause"}},
		// The node side of the encrypted mesh (WireGuard in userspace).
		{module: ".", out: "mesh", pkgs: []string{"github.com/cloudtransit/transit/cmd/transit-mesh"}},
		// The in-cluster controllers transit installs as addons.
		{module: ".", out: "controllers", pkgs: []string{
			"github.com/cloudtransit/transit/cmd/transit-relations",
			"github.com/cloudtransit/transit/cmd/streams-controller",
			"github.com/cloudtransit/transit/cmd/streams-sidecar",
			"github.com/cloudtransit/transit/cmd/streams-broker",
			"github.com/cloudtransit/transit/cmd/streams-echo",
		}},
	}
}

// nodeFile is a file copied onto nodes.
type nodeFile struct {
	path string // in the bundle
	src  string // "work:<dir>/<name>" for a built binary, else a host path
	deb  string // the Debian package a host file comes from
	role string
}

// nodeFiles are the binaries a node runs outside containers. The
// container runtime and the CNI plugins come from the build host's Debian
// packages: they are dynamically linked against the same distribution
// (libseccomp for runc), so a bundle serves nodes of that distribution.
func nodeFiles() []nodeFile {
	fs := []nodeFile{
		{path: "bin/kubeadm", src: "work:kubernetes/kubeadm", role: bundle.ForAll},
		{path: "bin/kubelet", src: "work:kubernetes/kubelet", role: bundle.ForAll},
		{path: "bin/kubectl", src: "work:kubernetes/kubectl", role: bundle.ForMasters},
		{path: "bin/etcdctl", src: "work:etcd/etcdctl", role: bundle.ForMasters},
		{path: "bin/transit-mesh", src: "work:mesh/transit-mesh", role: bundle.ForAll},
		{path: "bin/containerd", src: "/usr/bin/containerd", deb: "containerd", role: bundle.ForAll},
		{path: "bin/containerd-shim-runc-v2", src: "/usr/bin/containerd-shim-runc-v2", deb: "containerd", role: bundle.ForAll},
		{path: "bin/ctr", src: "/usr/bin/ctr", deb: "containerd", role: bundle.ForAll},
		{path: "bin/runc", src: "/usr/sbin/runc", deb: "runc", role: bundle.ForAll},
	}
	for _, p := range []string{"bridge", "host-local", "loopback", "portmap"} {
		fs = append(fs, nodeFile{path: "cni/" + p, src: "/usr/lib/cni/" + p, deb: "containernetworking-plugins", role: bundle.ForAll})
	}
	return fs
}

// imageSpec is one image of the bundle.
type imageSpec struct {
	file string // under images/
	// ref is the image's name; with contentTag its repository, whose tag
	// is the digest of what the image is made from.
	ref        string
	contentTag bool
	role       string
	make       func(t *tree, work string) error
	cfg        imageConfig
}

const pathEnv = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// images are every image kubeadm, the pod network and CoreDNS need, plus
// busybox for workloads that need a shell (the demo, the tests).
func images() []imageSpec {
	k8s := func(name string) imageSpec {
		return imageSpec{file: name + ".tar", ref: "registry.k8s.io/" + name + ":" + Kubernetes, role: bundle.ForMasters,
			cfg: imageConfig{Env: []string{pathEnv}},
			make: func(t *tree, work string) error {
				base(t)
				return t.copyAs(work+"/kubernetes/"+name, "/usr/local/bin/"+name)
			}}
	}
	return []imageSpec{
		k8s("kube-apiserver"), k8s("kube-controller-manager"), k8s("kube-scheduler"),
		{file: "kube-proxy.tar", ref: "registry.k8s.io/kube-proxy:" + Kubernetes, role: bundle.ForAll,
			cfg:  imageConfig{Env: []string{pathEnv}},
			make: withIptables("kubernetes/kube-proxy", "/usr/local/bin/kube-proxy")},
		{file: "etcd.tar", ref: "registry.k8s.io/etcd:" + Etcd + "-0", role: bundle.ForMasters,
			cfg: imageConfig{Env: []string{pathEnv}},
			make: func(t *tree, work string) error {
				base(t)
				if err := t.copyAs(work+"/etcd/server", "/usr/local/bin/etcd"); err != nil {
					return err
				}
				return t.copyAs(work+"/etcd/etcdctl", "/usr/local/bin/etcdctl")
			}},
		{file: "pause.tar", ref: "registry.k8s.io/pause:" + Pause, role: bundle.ForAll,
			cfg:  imageConfig{Entrypoint: []string{"/pause"}},
			make: func(t *tree, work string) error { return t.copyAs(work+"/pause/pause", "/pause") }},
		{file: "coredns.tar", ref: bundle.CoreDNSImage, role: bundle.ForAll,
			cfg: imageConfig{Entrypoint: []string{"/coredns"}},
			make: func(t *tree, work string) error {
				base(t)
				return t.copyAs(work+"/coredns/coredns", "/coredns")
			}},
		// The images carry upstream's names, as kubeadm's do, and keep
		// upstream's layout (flanneld in /opt/bin, the plugin at /flannel,
		// cp in the image): one manifest serves nodes installed from the
		// bundle and nodes that pull upstream's images.
		{file: "flannel.tar", ref: bundle.FlannelImage, role: bundle.ForAll,
			cfg:  imageConfig{Entrypoint: []string{"/opt/bin/flanneld"}, Env: []string{pathEnv}},
			make: withIptables("flannel/flannel", "/opt/bin/flanneld")},
		{file: "flannel-cni-plugin.tar", ref: bundle.FlannelCNIPluginImage, role: bundle.ForAll,
			cfg: imageConfig{Env: []string{pathEnv}},
			make: func(t *tree, work string) error {
				if err := busybox(t); err != nil {
					return err
				}
				return t.copyAs(work+"/flannel-cni/flannel", "/flannel")
			}},
		// transit's own controllers: tagged by content, so a node never
		// runs a stale image under a reused tag (nothing pulls them).
		ownImage("relations.tar", bundle.RelationsRepository, "transit-relations"),
		ownImage("streams-controller.tar", bundle.StreamsControllerRepository, "streams-controller"),
		ownImage("streams-sidecar.tar", bundle.StreamsSidecarRepository, "streams-sidecar"),
		ownImage("streams-broker.tar", bundle.StreamsBrokerRepository, "streams-broker"),
		ownImage("streams-echo.tar", bundle.StreamsEchoRepository, "streams-echo"),
		{file: "busybox.tar", ref: bundle.BusyboxImage, role: bundle.ForAll,
			cfg: imageConfig{Cmd: []string{"sh"}, Env: []string{pathEnv}},
			make: func(t *tree, _ string) error {
				base(t)
				return busybox(t)
			}},
	}
}

// ownImage is the image of one of transit's own static binaries (built
// into the work directory's controllers/): the binary as its entrypoint,
// run as the unprivileged user 65532, /tmp its only other directory; every
// node imports it, and its tag is the digest of its content.
func ownImage(file, repository, binary string) imageSpec {
	return imageSpec{file: file, ref: repository, contentTag: true, role: bundle.ForAll,
		cfg: imageConfig{Entrypoint: []string{"/" + binary}, User: "65532:65532"},
		make: func(t *tree, work string) error {
			t.dir("/tmp", 0o1777)
			return t.copyAs(work+"/controllers/"+binary, "/"+binary)
		}}
}

// withIptables makes an image of the built binary src (in the work
// directory) at dst, with a shell and iptables: kube-proxy's and
// flannel's.
func withIptables(src, dst string) func(t *tree, work string) error {
	return func(t *tree, work string) error {
		base(t)
		if err := busybox(t); err != nil {
			return err
		}
		if err := iptables(t); err != nil {
			return err
		}
		return t.copyAs(work+"/"+src, dst)
	}
}

// base is what every image with more than one binary gets: /tmp, /run,
// and an /etc that names root.
func base(t *tree) {
	t.dir("/tmp", 0o1777)
	t.dir("/run", 0o755)
	t.symlink("/var/run", "../run")
	t.file("/etc/passwd", []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"), 0o644)
	t.file("/etc/group", []byte("root:x:0:\nnogroup:x:65534:\n"), 0o644)
	t.file("/etc/nsswitch.conf", []byte("hosts: files dns\n"), 0o644)
}

// busybox adds Debian's static busybox with a link per applet in /bin.
func busybox(t *tree) error {
	const bb = "/usr/bin/busybox"
	if err := t.copyAs(bb, "/bin/busybox"); err != nil {
		return hostFileError(bb, "busybox-static", err)
	}
	out, err := exec.Command(bb, "--list").Output()
	if err != nil {
		return fmt.Errorf("%s --list: %w", bb, err)
	}
	for _, applet := range strings.Fields(string(out)) {
		if applet != "busybox" && !strings.Contains(applet, "/") {
			t.symlink("/bin/"+applet, "busybox")
		}
	}
	return nil
}

// iptables adds both iptables back ends of the build host with their
// libraries and extensions, conntrack, and a wrapper that picks, on first
// use, the back end the node itself uses (as kube-proxy's upstream image
// does): the one holding the kubelet's KUBE-IPTABLES-HINT chain, else the
// one with more rules. Rules written through the wrong back end would be
// invisible to the node's own.
func iptables(t *tree) error {
	for _, p := range []string{"/usr/sbin/xtables-nft-multi", "/usr/sbin/xtables-legacy-multi", "/usr/sbin/conntrack"} {
		if err := t.hostPath(p, true); err != nil {
			return hostFileError(p, "iptables and conntrack", err)
		}
	}
	ext, err := globHost(t, "/usr/lib/x86_64-linux-gnu/xtables/*.so")
	if err != nil {
		return err
	}
	for _, p := range ext {
		if err := t.hostPath(p, true); err != nil {
			return err
		}
	}
	for _, p := range []string{"/etc/protocols", "/etc/ethertypes"} {
		if err := t.hostPath(p, false); err != nil {
			return hostFileError(p, "netbase and iptables", err)
		}
	}
	for _, mode := range []string{"nft", "legacy"} {
		for _, cmd := range iptablesCommands {
			t.symlink("/usr/sbin/"+cmd+"-"+mode, "xtables-"+mode+"-multi")
		}
	}
	t.file("/usr/sbin/iptables-wrapper", []byte(iptablesWrapper), 0o755)
	for _, cmd := range iptablesCommands {
		t.symlink("/usr/sbin/"+cmd, "iptables-wrapper")
	}
	return nil
}

var iptablesCommands = []string{"iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save", "ip6tables-restore"}

const iptablesWrapper = `#!/bin/sh
# Points the iptables commands at the back end the node uses, then runs
# the command asked for. Runs once: it replaces the links to itself.
set -e
hint() { "xtables-$1-multi" iptables-save -t mangle 2>/dev/null | grep -q KUBE-IPTABLES-HINT; }
rules() { { "xtables-$1-multi" iptables-save; "xtables-$1-multi" ip6tables-save; } 2>/dev/null | grep -c '^-' || true; }
if hint nft; then mode=nft
elif hint legacy; then mode=legacy
elif [ "$(rules legacy)" -gt "$(rules nft)" ]; then mode=legacy
else mode=nft
fi
for c in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
	ln -sf "xtables-$mode-multi" "/usr/sbin/$c"
done
exec "$0" "$@"
`
