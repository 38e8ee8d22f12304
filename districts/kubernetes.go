package districts

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
)

// Kubernetes settings of a cluster.json whose platform is "kubernetes".
// Every field is optional; Resolved fills in the defaults.
type Kubernetes struct {
	Type string `json:"type,omitempty"`
	// PodCIDR is the cluster's pod network (each node gets a /24 of it).
	PodCIDR string `json:"pod_cidr,omitempty"`
	// ServiceCIDR is where ClusterIP Services get their addresses.
	ServiceCIDR string `json:"service_cidr,omitempty"`
	// ControlPlaneEndpoint is a DNS name or address (with an optional
	// port) users provide for the API server, e.g. a load balancer in
	// front of the masters. Empty: transit uses a master's address and
	// moves the endpoint when that master leaves.
	ControlPlaneEndpoint string `json:"control_plane_endpoint,omitempty"`
	// PodNetwork is flannel's backend between nodes: "vxlan" (default),
	// or "wireguard" to encrypt pod traffic between nodes (it needs the
	// kernel's WireGuard module on every node).
	PodNetwork string `json:"pod_network,omitempty"`
}

// Pod network backends (Kubernetes.PodNetwork).
const (
	PodNetworkVXLAN     = "vxlan"
	PodNetworkWireGuard = "wireguard"
)

var podNetworks = []string{PodNetworkVXLAN, PodNetworkWireGuard}

// Kubernetes defaults: kubeadm's service range and flannel's pod range.
const (
	DefaultPodCIDR     = "10.244.0.0/16"
	DefaultServiceCIDR = "10.96.0.0/12"
)

// Resolved returns the settings with defaults filled in.
func (k Kubernetes) Resolved() Kubernetes {
	if k.PodCIDR == "" {
		k.PodCIDR = DefaultPodCIDR
	}
	if k.ServiceCIDR == "" {
		k.ServiceCIDR = DefaultServiceCIDR
	}
	if k.PodNetwork == "" {
		k.PodNetwork = PodNetworkVXLAN
	}
	return k
}

// How software gets onto a Kubernetes node (District.KubernetesInstall).
const (
	// InstallPackages: the distribution's containerd and the upstream
	// Kubernetes package repository; images from the registry.
	InstallPackages = "packages"
	// InstallBundle: binaries and images uploaded over SSH from a local
	// bundle; for air-gapped sites and the local provider.
	InstallBundle = "bundle"
)

var installModes = []string{InstallBundle, InstallPackages}

// Install returns how Kubernetes gets onto the district's nodes: the
// district's kubernetes_install, else bundle for local districts (they
// have no registry) and packages for clouds.
func (d District) Install() string {
	switch {
	case d.KubernetesInstall != "":
		return d.KubernetesInstall
	case d.Provider == ProviderLocal:
		return InstallBundle
	default:
		return InstallPackages
	}
}

// Pod and service ranges: a pod range must hold a /24 for at least four
// nodes; Kubernetes refuses service ranges wider than /12.
const (
	maxPodPrefix     = 22
	minServicePrefix = 12
	maxServicePrefix = 28
)

// validateKubernetes checks cluster.json's kubernetes settings against each
// other and against the local districts' subnets (when districtsOK).
func validateKubernetes(c *problems, cl Cluster, ds []District, districtsOK bool, districtsFile string) {
	if cl.Kubernetes == nil {
		return
	}
	if cl.Platform != "" && cl.Platform != "kubernetes" {
		c.add("kubernetes", fmt.Sprintf("only for platform kubernetes, not %q", cl.Platform), "remove it")
		return
	}
	k := *cl.Kubernetes
	checkType(c, "kubernetes.type", k.Type, "kubernetes", false)
	r := k.Resolved()
	pod, podOK := checkCIDR(c, "kubernetes.pod_cidr", r.PodCIDR, 8, maxPodPrefix, "")
	svc, svcOK := checkCIDR(c, "kubernetes.service_cidr", r.ServiceCIDR, minServicePrefix, maxServicePrefix, "")
	if podOK && svcOK && pod.Overlaps(svc) {
		c.add("kubernetes.service_cidr", fmt.Sprintf("%s overlaps pod_cidr %s", svc, pod), "")
	}
	if districtsOK {
		for _, d := range ds {
			sub, err := netip.ParsePrefix(d.LocalSubnet)
			if d.Provider != ProviderLocal || err != nil {
				continue
			}
			for _, x := range []struct {
				key string
				p   netip.Prefix
				ok  bool
			}{{"pod_cidr", pod, podOK}, {"service_cidr", svc, svcOK}} {
				if x.ok && x.p.Overlaps(sub) {
					c.add("kubernetes."+x.key, fmt.Sprintf("%s overlaps local_subnet %s of district %q in %s", x.p, sub, d.ID, districtsFile),
						"pick ranges the nodes' own addresses are not in")
				}
			}
		}
	}
	if k.PodNetwork != "" && !slices.Contains(podNetworks, k.PodNetwork) {
		c.add("kubernetes.pod_network", fmt.Sprintf("%q is not a pod network %s", k.PodNetwork, known(podNetworks)), didYouMean(k.PodNetwork, podNetworks))
	}
	if e := k.ControlPlaneEndpoint; e != "" && (strings.ContainsAny(e, " /\t\n") || strings.Contains(e, "://")) {
		c.add("kubernetes.control_plane_endpoint", fmt.Sprintf("%q is not a host or host:port", e), `e.g. "k8s.example.com:6443"`)
	}
}

// checkInstall checks a district's kubernetes_install.
func checkInstall(c *problems, path, mode string) {
	if mode != "" && !slices.Contains(installModes, mode) {
		c.add(path, fmt.Sprintf("%q is not an install mode %s", mode, known(installModes)), didYouMean(mode, installModes))
	}
}

// checkLabels checks that tags can be Kubernetes node labels as they are:
// transit does not rewrite them, so one that is not a valid label is an
// error here, naming the tag, not a failure later on a node.
func checkLabels(c *problems, path string, tags map[string]string) {
	const valueHint = `use up to 63 letters, digits, "-", "_" or ".", starting and ending with a letter or digit (or an empty value)`
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		p := joinKey(path, k)
		if why := labelKeyProblem(k); why != "" {
			c.add(p, fmt.Sprintf("%q is not a valid Kubernetes label key: %s", k, why), "")
		}
		if v := tags[k]; !validLabelName(v, true) {
			c.add(p, fmt.Sprintf("value %q is not a valid Kubernetes label value", v), valueHint)
		}
	}
}

// labelKeyProblem says why k is not a label key transit may set, or "".
func labelKeyProblem(k string) string {
	prefix, name, hasPrefix := strings.Cut(k, "/")
	if !hasPrefix {
		prefix, name = "", k
	}
	switch {
	case strings.Contains(name, "/"):
		return `at most one "/" (prefix/name)`
	case !validLabelName(name, false):
		return `the name must be up to 63 letters, digits, "-", "_" or ".", starting and ending with a letter or digit`
	case hasPrefix && !validDNSSubdomain(prefix):
		return "the prefix must be a DNS subdomain (lower-case letters, digits, \"-\" and \".\", up to 253 characters)"
	}
	for _, reserved := range []string{"kubernetes.io", "k8s.io"} {
		if prefix == reserved || strings.HasSuffix(prefix, "."+reserved) {
			return "the " + reserved + " prefix belongs to Kubernetes (transit sets node-role.kubernetes.io/<role> itself)"
		}
	}
	return ""
}

// validLabelName: up to 63 of [A-Za-z0-9-_.], starting and ending
// alphanumeric; empty only where allowed (label values).
func validLabelName(s string, emptyOK bool) bool {
	if s == "" {
		return emptyOK
	}
	alnum := func(b byte) bool { return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' }
	if len(s) > 63 || !alnum(s[0]) || !alnum(s[len(s)-1]) {
		return false
	}
	for i := range len(s) {
		if b := s[i]; !alnum(b) && b != '-' && b != '_' && b != '.' {
			return false
		}
	}
	return true
}

// validDNSSubdomain: RFC 1123 labels joined by dots, up to 253 characters.
func validDNSSubdomain(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, l := range strings.Split(s, ".") {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for i := range len(l) {
			if b := l[i]; !(b >= 'a' && b <= 'z' || b >= '0' && b <= '9' || b == '-') {
				return false
			}
		}
	}
	return true
}
