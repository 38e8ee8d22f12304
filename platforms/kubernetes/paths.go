package kubernetes

import (
	"net"
	"path/filepath"
	"strconv"

	"github.com/cloudtransit/transit/districts"
)

// AdminConfigPath is where the cluster's admin kubeconfig (kubeadm's
// admin.conf, as the first master wrote it) lives in stateDir, mode 0600,
// beside the cluster's SSH key: never in resources.json.
func AdminConfigPath(stateDir, cluster string) string {
	return filepath.Join(stateDir, "transit-"+cluster+".kubeconfig")
}

// APIPort is the port every master's API server listens on.
const APIPort = 6443

// Endpoint is the control-plane endpoint kubeadm writes into every
// kubeconfig of the cluster: the one cluster.json names, or else a name
// transit keeps pointing at the masters, in each node's /etc/hosts
// (ManagedEndpoint).
type Endpoint struct {
	Host string
	Port int
	// Managed says transit owns the name: it lists every master under it
	// in each node's /etc/hosts, and the name resolves nowhere else.
	Managed bool
}

// String is host:port, as kubeadm's controlPlaneEndpoint.
func (e Endpoint) String() string { return net.JoinHostPort(e.Host, strconv.Itoa(e.Port)) }

// ClusterEndpoint returns the cluster's endpoint: control_plane_endpoint
// (port 6443 unless it names one), else the managed name
// api.<cluster>.transit.internal.
func ClusterEndpoint(c districts.Cluster) Endpoint {
	if c.Kubernetes != nil && c.Kubernetes.ControlPlaneEndpoint != "" {
		ep := c.Kubernetes.ControlPlaneEndpoint
		if host, port, err := net.SplitHostPort(ep); err == nil {
			if p, err := strconv.Atoi(port); err == nil {
				return Endpoint{Host: host, Port: p}
			}
		}
		return Endpoint{Host: ep, Port: APIPort}
	}
	return Endpoint{Host: "api." + c.ID + ".transit.internal", Port: APIPort, Managed: true}
}
