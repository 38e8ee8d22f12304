package districts

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Network says how a cluster's nodes reach each other (cluster.json's
// "network"). Every field is optional; Resolved fills in the defaults.
type Network struct {
	Type string `json:"type,omitempty"`
	// Mesh is "wireguard" (every node in an encrypted WireGuard mesh, the
	// platform on the mesh addresses) or "none" (the nodes' own
	// addresses). Empty: wireguard for a Kubernetes cluster whose
	// districts are in more than one cloud network (another provider,
	// region or project), none otherwise: a swarm runs on the mesh only
	// when asked to (an existing swarm never moves onto it by itself).
	Mesh string `json:"mesh,omitempty"`
	// MeshCIDR holds the nodes' mesh addresses, one each, kept for the
	// node's life.
	MeshCIDR string `json:"mesh_cidr,omitempty"`
	// MeshPort is the mesh's UDP port on every node.
	MeshPort int `json:"mesh_port,omitempty"`
	// KeyMaxAge is how old a node's mesh key may grow before an apply
	// rotates it: "30d", "12h" (default DefaultKeyMaxAge), "0" never.
	KeyMaxAge string `json:"key_max_age,omitempty"`
}

// Mesh kinds (Network.Mesh).
const (
	MeshWireGuard = "wireguard"
	MeshNone      = "none"
)

var meshes = []string{MeshWireGuard, MeshNone}

// Mesh defaults: a range no default pod, service, VPC or Docker network
// uses, and WireGuard's usual port.
const (
	DefaultMeshCIDR = "10.213.0.0/16"
	DefaultMeshPort = 51820
)

// Resolved returns the settings with defaults filled in, the mesh decided
// for the platform and the districts ds the cluster's deployments use.
func (n Network) Resolved(platform string, ds []District) Network {
	if n.Mesh == "" {
		n.Mesh = MeshNone
		if platform == "kubernetes" && len(cloudNetworks(ds)) > 1 {
			n.Mesh = MeshWireGuard
		}
	}
	if n.MeshCIDR == "" {
		n.MeshCIDR = DefaultMeshCIDR
	}
	if n.MeshPort == 0 {
		n.MeshPort = DefaultMeshPort
	}
	if n.KeyMaxAge == "" {
		n.KeyMaxAge = DefaultKeyMaxAge
	}
	return n
}

// DefaultKeyMaxAge is how old a mesh key grows before it rotates.
const DefaultKeyMaxAge = "30d"

// minKeyMaxAge keeps rotations from running all the time.
const minKeyMaxAge = time.Hour

// KeyAge is network.key_max_age as a duration (resolved first: a
// checked or default value); 0 means keys never rotate by age.
func (n Network) KeyAge() time.Duration {
	d, _ := parseKeyAge(n.KeyMaxAge)
	return d
}

// parseKeyAge reads "30d", a Go duration ("720h") or "0".
func parseKeyAge(s string) (time.Duration, error) {
	if s == "0" {
		return 0, nil
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 || n > 3650 {
			return 0, fmt.Errorf("%q is not a number of days (0–3650)", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q is not an age: write days (\"30d\") or a duration (\"12h\"), or \"0\" for never", s)
	}
	return d, nil
}

// Network resolves the cluster's network settings for its districts
// (those of ds its deployments name).
func (c Cluster) Network(ds []District) Network {
	var used []District
	for _, d := range ds {
		if slices.ContainsFunc(c.Deployments, func(dep Deployment) bool { return dep.District == d.ID }) {
			used = append(used, d)
		}
	}
	var n Network
	if c.NetworkSettings != nil {
		n = *c.NetworkSettings
	}
	return n.Resolved(c.Platform, used)
}

// CloudNetwork names the private network a district's machines are in:
// machines of two districts with one name reach each other's private
// addresses, others only public ones. Local districts all share the
// host's.
func (d District) CloudNetwork() string {
	switch d.Provider {
	case ProviderAWS:
		return "aws:" + d.AWSRegion + ":" + d.AWSVPCID
	case ProviderGCE:
		return "gce:" + d.GCEProjectID
	case ProviderOpenStack:
		return "openstack:" + d.OSAuthURL + ":" + d.OSRegion + ":" + d.OSNetwork
	}
	return d.Provider
}

func cloudNetworks(ds []District) []string {
	var ns []string
	for _, d := range ds {
		if n := d.CloudNetwork(); !slices.Contains(ns, n) {
			ns = append(ns, n)
		}
	}
	return ns
}

// swarmOverlays holds the subnets of a swarm's first 256 overlay
// networks (ingress is 10.0.0.0/24): Swarm hands out /24s of its default
// address pool, 10.0.0.0/8, in order.
const swarmOverlays = "10.0.0.0/16"

// Mesh port and range bounds: a /24 holds 254 nodes, a /8 is plenty.
const (
	minMeshPrefix = 8
	maxMeshPrefix = 24
)

// validateNetwork checks cluster.json's network settings, and the mesh
// range against the pod and service ranges and the local districts'
// subnets (when districtsOK).
func validateNetwork(c *problems, cl Cluster, ds []District, districtsOK bool, districtsFile string) {
	if cl.NetworkSettings == nil {
		return
	}
	n := *cl.NetworkSettings
	checkType(c, "network.type", n.Type, "network", false)
	if n.Mesh != "" && !slices.Contains(meshes, n.Mesh) {
		c.add("network.mesh", fmt.Sprintf("%q is not a mesh %s", n.Mesh, known(meshes)), didYouMean(n.Mesh, meshes))
	}
	if n.MeshPort < 0 || n.MeshPort > 65535 {
		c.add("network.mesh_port", fmt.Sprintf("%d is not a UDP port (1–65535)", n.MeshPort), "")
	}
	if n.KeyMaxAge != "" {
		if d, err := parseKeyAge(n.KeyMaxAge); err != nil {
			c.add("network.key_max_age", err.Error(), "")
		} else if d != 0 && d < minKeyMaxAge {
			c.add("network.key_max_age", fmt.Sprintf("%s rotates keys too often (at least 1h; \"0\" never rotates by age)", n.KeyMaxAge), "")
		}
	}
	r := n.Resolved(cl.Platform, nil)
	mesh, ok := checkCIDR(c, "network.mesh_cidr", r.MeshCIDR, minMeshPrefix, maxMeshPrefix, "")
	if !ok {
		return
	}
	overlaps := func(cidr, what string) {
		if p, err := netip.ParsePrefix(cidr); err == nil && p.Overlaps(mesh) {
			c.add("network.mesh_cidr", fmt.Sprintf("%s overlaps %s", mesh, fmt.Sprintf(what, p)), "pick a range no other network of the cluster uses")
		}
	}
	if cl.Platform == "swarm" {
		overlaps(swarmOverlays, "%s, where Swarm's overlay networks take their first subnets (its default address pool is 10.0.0.0/8)")
	}
	if cl.Platform == "kubernetes" {
		var k Kubernetes
		if cl.Kubernetes != nil {
			k = *cl.Kubernetes
		}
		k = k.Resolved()
		overlaps(k.PodCIDR, "kubernetes.pod_cidr %s")
		overlaps(k.ServiceCIDR, "kubernetes.service_cidr %s")
	}
	if districtsOK {
		for _, d := range ds {
			if d.Provider == ProviderLocal {
				overlaps(d.LocalSubnet, fmt.Sprintf("local_subnet %%s of district %q in %s", d.ID, districtsFile))
			}
		}
	}
}

// MeshAddress is the first free address of the mesh range, not the
// range's first (kept unused, like a subnet's gateway) or last, and none
// of used: a node keeps the one it got for its life.
func MeshAddress(cidr string, used []string) (string, error) {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return "", fmt.Errorf("mesh range %q: %w", cidr, err)
	}
	taken := map[string]bool{}
	for _, u := range used {
		taken[u] = true
	}
	last := netip.Addr{}
	for a := p.Masked().Addr(); p.Contains(a); a = a.Next() {
		last = a
	}
	for a := p.Masked().Addr().Next(); p.Contains(a) && a != last; a = a.Next() {
		if !taken[a.String()] {
			return a.String(), nil
		}
	}
	return "", fmt.Errorf("the mesh range %s is full: widen network.mesh_cidr", cidr)
}
