package kubernetes

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/platforms/kubernetes/kubeconfig"
)

// ErrNotApplied says the cluster has no control plane to reach yet: no
// master is joined in the state, or kubeadm's admin kubeconfig is not
// beside it.
var ErrNotApplied = errors.New(`run "transit apply" first`)

// ErrNotKubernetes says the cluster's platform is not Kubernetes.
var ErrNotKubernetes = errors.New("only a Kubernetes cluster has a kubeconfig")

// APIServer is where an operator's kubeconfig sends its requests.
type APIServer struct {
	// URL is https://host:port.
	URL string
	// TLSServerName is the name the server's certificate is checked
	// against when URL names a master's address (the managed endpoint).
	TLSServerName string
	// Master is the master whose address URL names; empty for an
	// endpoint cluster.json names.
	Master string
}

// OperatorAPIServer returns where the operator's machine reaches the
// cluster's API server: control_plane_endpoint as cluster.json gives it
// (port 6443 unless given), or, for the managed endpoint, a name only the
// nodes resolve, the address of a master that is a member (ready ones
// first, then the lowest node id; its public address, else its private
// one) on port 6443 with the endpoint's name as TLS server name. Either
// way a master must be a member in res; else the error matches
// ErrNotApplied.
func OperatorAPIServer(c districts.Cluster, res districts.Resources) (APIServer, error) {
	var joined, others []districts.Node
	for _, n := range res.Nodes {
		switch {
		case n.Role != districts.RoleMaster:
		case n.Phase.Member() && len(n.Addresses()) > 0:
			joined = append(joined, n)
		default:
			others = append(others, n)
		}
	}
	// Ready masters first: a master reported not ready may still serve,
	// but one that is ready serves surely.
	slices.SortStableFunc(joined, func(a, b districts.Node) int {
		ra, rb := a.Phase == districts.PhaseJoined, b.Phase == districts.PhaseJoined
		switch {
		case ra && !rb:
			return -1
		case rb && !ra:
			return 1
		}
		return districts.CompareNodeIDs(a.ID, b.ID)
	})
	if len(joined) == 0 {
		return APIServer{}, fmt.Errorf("cluster %q has no joined master in the state%s: %w", c.ID, phases(others), ErrNotApplied)
	}
	ep := ClusterEndpoint(c)
	if !ep.Managed {
		return APIServer{URL: "https://" + ep.String()}, nil
	}
	m := joined[0]
	return APIServer{
		URL:           "https://" + net.JoinHostPort(m.Addresses()[0], strconv.Itoa(APIPort)),
		TLSServerName: ep.Host,
		Master:        m.ID,
	}, nil
}

// phases lists masters that are not (usably) joined: " (c-master-1 is
// launched)".
func phases(masters []districts.Node) string {
	if len(masters) == 0 {
		return ""
	}
	var parts []string
	for _, n := range masters {
		p := string(n.Phase)
		if n.Phase.Member() {
			p = p + " but has no address"
		}
		parts = append(parts, n.ID+" is "+p)
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// KubeconfigOptions say whose kubeconfig ExportKubeconfig makes.
type KubeconfigOptions struct {
	Cluster districts.Cluster
	// State is the current state, read from StateFile; the admin
	// kubeconfig is AdminConfigPath(dir of StateFile, Cluster.ID).
	State     districts.Resources
	StateFile string
}

// ExportKubeconfig returns a kubeconfig for the operator's machine: the
// cluster's admin credentials from AdminConfigPath, pointing at
// OperatorAPIServer, with one cluster and one context named after the
// cluster and the user "<cluster>-admin" (kubeconfig.Export). Without a
// joined master or an admin kubeconfig the error matches ErrNotApplied,
// for a cluster of another platform ErrNotKubernetes.
// An admin kubeconfig that group or others may read is refused. No error
// shows the file's content.
func ExportKubeconfig(opts KubeconfigOptions) ([]byte, APIServer, error) {
	c := opts.Cluster
	if c.Platform != "kubernetes" {
		return nil, APIServer{}, fmt.Errorf("cluster %q has platform %q: %w", c.ID, c.Platform, ErrNotKubernetes)
	}
	srv, err := OperatorAPIServer(c, opts.State)
	if err != nil {
		return nil, APIServer{}, err
	}
	path := AdminConfigPath(filepath.Dir(opts.StateFile), c.ID)
	admin, err := readAdminConfig(path)
	if err != nil {
		return nil, APIServer{}, err
	}
	data, err := kubeconfig.Export(admin, c.ID, srv.URL, srv.TLSServerName)
	if err != nil {
		return nil, APIServer{}, fmt.Errorf("%s: %w", path, err)
	}
	return data, srv, nil
}

// readAdminConfig reads the admin kubeconfig, refusing one that group or
// others may read, as ssh refuses such a private key.
func readAdminConfig(path string) ([]byte, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("no admin kubeconfig at %s yet (kubeadm writes it when it initialises the first master): %w", path, ErrNotApplied)
	}
	if err != nil {
		return nil, fmt.Errorf("admin kubeconfig: %w", err)
	}
	defer func() { _ = f.Close() }() // read-only: nothing to lose
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("admin kubeconfig: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("admin kubeconfig %s: not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("admin kubeconfig %s: mode %04o lets group or others read the cluster's admin credentials; run `chmod 600 %s`", path, perm, path)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("admin kubeconfig: read %s: %w", path, err)
	}
	return data, nil
}
