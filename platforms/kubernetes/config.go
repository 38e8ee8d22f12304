package kubernetes

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/cloudtransit/transit/districts"
)

// Version is the Kubernetes release transit installs: the bundle's, and
// the package repository's minor line.
const Version = "v1.32.4"

// criSocket is containerd's socket, where kubeadm and the kubelet find it.
const criSocket = "unix:///run/containerd/containerd.sock"

// nodeAddress is the address n's kubelet, API server and etcd bind and
// advertise, and other nodes reach it at: its mesh address on a cluster
// on the mesh, else one on the machine's own interface (its private
// address; public only when it has no other, as local nodes).
func nodeAddress(n districts.Node) string {
	if n.MeshIP != "" {
		return n.MeshIP
	}
	if n.PrivateIP != "" {
		return n.PrivateIP
	}
	return n.PublicIP
}

// kubeadmSettings is what the kubeadm configuration of a node depends on.
type kubeadmSettings struct {
	cluster  string
	endpoint Endpoint
	k8s      districts.Kubernetes // resolved
	node     districts.Node
	// systemd says the node runs systemd: the kubelet then uses the
	// systemd cgroup driver, else cgroupfs (a local node).
	systemd bool
	// bundle says images come from the bundle: the kubelet must never
	// garbage-collect them, as nothing could pull them again.
	bundle bool
	// sans are extra names and addresses of the API server's certificate.
	sans []string
}

// q quotes a string for YAML: a JSON string is a YAML double-quoted
// scalar.
func q(s string) string { return strconv.Quote(s) }

// nodeRegistration is kubeadm's nodeRegistration of s.node: its name is
// transit's node id (so the Node object names it), the kubelet binds its
// address and registers the Node with labelNetworkPending (the pod
// network waits until transit released it: members.go), and kubeadm's
// preflight checks all run, but those preflightIgnored names.
func (s kubeadmSettings) nodeRegistration(master bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "nodeRegistration:\n  name: %s\n  criSocket: %s\n", q(s.node.ID), q(criSocket))
	fmt.Fprintf(&b, "  kubeletExtraArgs:\n  - name: node-ip\n    value: %s\n", q(nodeAddress(s.node)))
	fmt.Fprintf(&b, "  - name: node-labels\n    value: %s\n", q(labelNetworkPending+"=true"))
	if ignored := s.preflightIgnored(master); len(ignored) > 0 {
		b.WriteString("  ignorePreflightErrors:\n")
		for _, name := range ignored {
			fmt.Fprintf(&b, "  - %s\n", q(name))
		}
	}
	if master {
		// Masters take workloads: transit's clusters are elastic, and the
		// smallest is one master.
		b.WriteString("  taints: []\n")
	}
	return b.String()
}

// preflightIgnored names the kubeadm preflight checks whose errors only
// warn on s.node; every other check refuses the init or join.
//
// Measured with kubeadm v1.32.4 on local nodes (namespaces sharing a
// 2-core cgroup v1 host's kernel; init, control-plane join and worker
// join, nothing ignored): the only check that fails is HTTPProxyCIDR,
// and not because the node is local. It takes the 16-byte form of a
// range's first IPv4 address for IPv6 and brackets it
// ("https://[10.96.0.1]:1234/"), which the net/url of the Go the bundle's
// kubeadm is built with (transit's, 1.26) refuses to parse: it fails for
// every IPv4 range on any machine running that kubeadm, whatever the
// provider (the packages' kubeadm is built with an older Go). Otherwise
// it only ever warns (a proxy in front of the ranges), so nothing is
// lost, and it runs where the control plane does: init and
// control-plane joins. The checks a local node was thought to
// fail pass or only warn there: Swap and SystemVerification (cgroup v1)
// only warn in 1.32, Port-10250 is free in the node's own network
// namespace, NumCPU and Mem see the host's, and 1.32 checks no bridge
// netfilter sysctl, only ip_forward (which setupScript turns on).
func (s kubeadmSettings) preflightIgnored(master bool) []string {
	if s.bundle && master {
		return []string{"HTTPProxyCIDR"}
	}
	return nil
}

// initConfig is the configuration of `kubeadm init` on the first master.
func (s kubeadmSettings) initConfig() string {
	var b strings.Builder
	b.WriteString("apiVersion: kubeadm.k8s.io/v1beta4\nkind: InitConfiguration\n")
	fmt.Fprintf(&b, "localAPIEndpoint:\n  advertiseAddress: %s\n  bindPort: %d\n", q(nodeAddress(s.node)), APIPort)
	b.WriteString(s.nodeRegistration(true))
	// CoreDNS is one of transit's addons (Addons installs it), so that
	// the addons step installs, upgrades and removes it like the others.
	b.WriteString("skipPhases:\n- addon/coredns\n")
	b.WriteString("---\n")
	b.WriteString(s.clusterConfig())
	b.WriteString("---\n")
	b.WriteString(s.kubeletConfig())
	b.WriteString("---\n")
	b.WriteString(s.proxyConfig())
	return b.String()
}

// clusterConfig is kubeadm's ClusterConfiguration, stored in the cluster
// (ConfigMap kubeadm-config) for every later join.
func (s kubeadmSettings) clusterConfig() string {
	var b strings.Builder
	b.WriteString("apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\n")
	fmt.Fprintf(&b, "clusterName: %s\nkubernetesVersion: %s\ncontrolPlaneEndpoint: %s\n", q(s.cluster), q(Version), q(s.endpoint.String()))
	fmt.Fprintf(&b, "networking:\n  podSubnet: %s\n  serviceSubnet: %s\n  dnsDomain: %s\n", q(s.k8s.PodCIDR), q(s.k8s.ServiceCIDR), clusterDomain)
	// The cluster's keys are ECDSA P-256, not kubeadm's default RSA 2048:
	// every TLS handshake the API server serves signs with its key, and the
	// kubelet's readiness probe alone opens one a second; RSA signing was
	// a quarter of an idle master's API server CPU, and its keys cost
	// seconds of a master's start. Clients of any kind take either.
	b.WriteString("encryptionAlgorithm: ECDSA-P256\n")
	b.WriteString("apiServer:\n")
	sans := slices.Compact(slices.Sorted(slices.Values(append([]string{s.endpoint.Host, "127.0.0.1", "localhost"}, s.sans...))))
	b.WriteString("  certSANs:\n")
	for _, san := range sans {
		fmt.Fprintf(&b, "  - %s\n", q(san))
	}
	// Node names are transit's ids, which resolve nowhere: the API
	// server reaches kubelets (logs, exec) at their addresses.
	b.WriteString("  extraArgs:\n  - name: kubelet-preferred-address-types\n    value: InternalIP,ExternalIP,Hostname\n")
	b.WriteString("controllerManager:\n  extraArgs:\n  - name: node-monitor-grace-period\n    value: 20s\n")
	b.WriteString("etcd:\n  local:\n    dataDir: /var/lib/etcd\n")
	fmt.Fprintf(&b, "    extraArgs:\n    - name: heartbeat-interval\n      value: \"%d\"\n    - name: election-timeout\n      value: \"%d\"\n",
		etcdHeartbeatMillis, etcdElectionMillis)
	return b.String()
}

// etcd's heartbeat interval and election timeout, in milliseconds, for
// masters in different clouds: etcd's defaults (100 ms, 1 s) suit members
// on one LAN, and etcd asks for a heartbeat near the members' round trip
// and an election timeout of ten. Between continents that round trip is
// 150-250 ms; a master sharing its machine (local nodes, small VMs) adds
// the pauses of a busy CPU and disk. With the defaults, a member that
// joins a loaded cluster missed a second of heartbeats and cost an
// election while the API server served ("etcdserver: leader changed"
// in CI, masters 1 → 3). The price: a dead leader is replaced after
// 2.5 s, not 1 s.
const (
	etcdHeartbeatMillis = 250
	etcdElectionMillis  = 2500
)

// kubeletConfig is the kubelets' configuration (kubeadm stores it in the
// cluster; joins fetch it).
func (s kubeadmSettings) kubeletConfig() string {
	var b strings.Builder
	b.WriteString("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n")
	driver := "cgroupfs"
	if s.systemd {
		driver = "systemd"
	}
	fmt.Fprintf(&b, "cgroupDriver: %s\n", driver)
	// Cloud images often have swap, local nodes share the host's.
	b.WriteString("failSwapOn: false\n")
	// Nodes share a disk with the host (local) or have small ones; the
	// defaults would evict at 15% free and taint the node.
	b.WriteString("evictionHard:\n  memory.available: 100Mi\n  nodefs.available: 1%\n  imagefs.available: 1%\n  nodefs.inodesFree: 1%\n")
	if s.bundle {
		b.WriteString("imageGCHighThresholdPercent: 100\nimageGCLowThresholdPercent: 99\n")
	}
	return b.String()
}

// proxyConfig is kube-proxy's: iptables mode (no IPVS needed), and no
// conntrack tuning, whose sysctls are global to the kernel, so a node
// sharing a kernel (local) must not set them; on a VM the distribution's
// values serve.
func (s kubeadmSettings) proxyConfig() string {
	return "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: iptables\n" +
		"conntrack:\n  maxPerCore: 0\n  tcpEstablishedTimeout: 0s\n  tcpCloseWaitTimeout: 0s\n"
}

// joinSecrets are what a join needs from the masters; they reach the node
// only in the configuration file, over the script's stdin.
type joinSecrets struct {
	token  string // bootstrap token id.secret
	caHash string // sha256:<hex> of the cluster CA's public key
	// certificateKey decrypts the control-plane certificates kubeadm
	// uploaded (masters only).
	certificateKey string
}

// joinConfig is the configuration of `kubeadm join` on s.node.
func (s kubeadmSettings) joinConfig(sec joinSecrets, master bool) string {
	var b strings.Builder
	b.WriteString("apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\n")
	fmt.Fprintf(&b, "discovery:\n  bootstrapToken:\n    apiServerEndpoint: %s\n    token: %s\n    caCertHashes:\n    - %s\n",
		q(s.endpoint.String()), q(sec.token), q(sec.caHash))
	b.WriteString(s.nodeRegistration(master))
	if master {
		fmt.Fprintf(&b, "controlPlane:\n  localAPIEndpoint:\n    advertiseAddress: %s\n    bindPort: %d\n  certificateKey: %s\n",
			q(nodeAddress(s.node)), APIPort, q(sec.certificateKey))
	}
	return b.String()
}
