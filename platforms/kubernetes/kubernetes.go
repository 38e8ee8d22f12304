package kubernetes

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cloudtransit/transit/bundle"
	"github.com/cloudtransit/transit/clock"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/platforms/ssh"
	"github.com/cloudtransit/transit/provider"
)

// Options configure the driver.
type Options struct {
	// SSH says how to reach the nodes (key, pinned host keys, waits).
	SSH ssh.Config
	// StateDir is where the admin kubeconfig is kept (AdminConfigPath).
	StateDir string
	// Install is each district's install mode (districts.InstallBundle or
	// districts.InstallPackages), by district id.
	Install map[string]string
	// Bundles is the bundle directory of each district installing from a
	// bundle, by district id.
	Bundles map[string]string
	// Clock paces the waits; default the wall clock.
	Clock clock.Clock
	// Logger gets the progress of long steps; default none.
	Logger *slog.Logger
	// PollInterval paces the waits of a drain; default 1s.
	PollInterval time.Duration
}

// runner reaches nodes: it runs POSIX sh scripts as root (stdin, when not
// nil, is the script's standard input: the way secrets travel), uploads
// files and opens TCP connections from a node. Tests put a fake here.
type runner interface {
	Run(ctx context.Context, n districts.Node, name, script string, stdin []byte) (string, error)
	Upload(ctx context.Context, n districts.Node, path string, mode fs.FileMode, content io.Reader, size int64) error
	DialContext(ctx context.Context, n districts.Node, network, addr string) (net.Conn, error)
}

type driver struct {
	cluster  districts.Cluster
	k8s      districts.Kubernetes // resolved
	endpoint Endpoint
	opts     Options
	r        runner

	mu sync.Mutex
	// masters are the masters known to serve the API server, the one
	// that answered last first.
	masters []districts.Node
	// nodes are the cluster's nodes as last given to Members: whose
	// /etc/hosts name the endpoint.
	nodes []districts.Node
	api   *api
	// manifests are the bundles read, by directory.
	manifests map[string]*bundle.Manifest
	// systemdOn says which machines run systemd, by provider id, as
	// their probe (at install) said.
	systemdOn map[string]bool
	// certs guards the key of the control-plane certificates this run
	// uploaded for joining masters (certKey), and when.
	certs     sync.Mutex
	certKey   string
	certKeyAt time.Time
	// seeds are the nodes that serve the bundle to their district, by
	// district (share.go), with the run's token for their servers.
	seeds      map[string]*districtSeed
	shareToken string
	// masterJoin lets one master join at a time (see Join).
	masterJoin chan struct{}
}

var _ provider.Platform = (*driver)(nil)

// New returns the Kubernetes driver for a cluster. It keeps one SSH
// connection per node; close it (it is an io.Closer) when the run ends.
func New(c districts.Cluster, opts Options) provider.Platform {
	pool := ssh.NewPool(opts.SSH, "the kubernetes driver")
	return newDriver(c, opts, pool)
}

func newDriver(c districts.Cluster, opts Options, r runner) *driver {
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = time.Second
	}
	k := districts.Kubernetes{}
	if c.Kubernetes != nil {
		k = *c.Kubernetes
	}
	return &driver{cluster: c, k8s: k.Resolved(), endpoint: ClusterEndpoint(c), opts: opts, r: r,
		manifests: map[string]*bundle.Manifest{}, systemdOn: map[string]bool{},
		seeds: map[string]*districtSeed{}, shareToken: newShareToken(), masterJoin: make(chan struct{}, 1)}
}

// Close closes the driver's SSH connections.
func (d *driver) Close() error {
	if c, ok := d.r.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

func (d *driver) settings(n districts.Node, systemd bool) kubeadmSettings {
	return kubeadmSettings{
		cluster: d.cluster.ID, endpoint: d.endpoint, k8s: d.k8s, node: n, systemd: systemd,
		bundle: d.opts.Install[n.District] == districts.InstallBundle,
		sans:   n.Addresses(),
	}
}

// rememberMaster puts m first among the known masters.
func (d *driver) rememberMaster(m districts.Node) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.masters = slices.DeleteFunc(d.masters, func(x districts.Node) bool { return x.ID == m.ID })
	d.masters = slices.Insert(d.masters, 0, m)
}

func (d *driver) forgetMaster(id string) {
	d.mu.Lock()
	d.masters = slices.DeleteFunc(d.masters, func(x districts.Node) bool { return x.ID == id })
	d.mu.Unlock()
	d.dropClient(id)
}

// Install puts containerd, the kubelet and kubeadm on n and starts them:
// from the district's bundle, or from packages.
func (d *driver) Install(ctx context.Context, n districts.Node) error {
	if d.k8s.PodNetwork == districts.PodNetworkWireGuard {
		if _, err := d.r.Run(ctx, n, "check the kernel's WireGuard", wireguardScript, nil); err != nil {
			return err
		}
	}
	switch mode := d.opts.Install[n.District]; mode {
	case districts.InstallBundle:
		return d.installBundle(ctx, n)
	case districts.InstallPackages:
		if _, err := d.r.Run(ctx, n, "install kubernetes packages", packagesScript(), nil); err != nil {
			return err
		}
		return d.sideload(ctx, n)
	default:
		return fmt.Errorf("node %s: district %s has no kubernetes install mode", n.ID, n.District)
	}
}

// Init makes n the first master: kubeadm init, unless its API server
// answers already (a run killed after the init).
func (d *driver) Init(ctx context.Context, n districts.Node) error {
	systemd, err := d.systemd(ctx, n)
	if err != nil {
		return err
	}
	if d.endpoint.Managed {
		if _, err := d.r.Run(ctx, n, "pin the control-plane endpoint", hostsScript(d.endpoint.Host, []string{nodeAddress(n)}), nil); err != nil {
			return err
		}
	}
	cfg := d.settings(n, systemd).initConfig()
	if _, err := d.r.Run(ctx, n, "kubeadm init", initScript(), []byte(cfg)); err != nil {
		return err
	}
	d.rememberMaster(n)
	d.dropClient("")
	a, err := d.client(ctx)
	if err != nil {
		return err
	}
	if err := d.releaseNetwork(ctx, a, n); err != nil {
		return err
	}
	// The pod network at once: no node is Ready without it.
	_, err = d.applyAddons(ctx, a, platformAddons)
	return err
}

// systemd says whether n runs systemd: as the probe at its install said,
// else as a probe says now.
func (d *driver) systemd(ctx context.Context, n districts.Node) (bool, error) {
	d.mu.Lock()
	on, known := d.systemdOn[n.ProviderID]
	d.mu.Unlock()
	if known {
		return on, nil
	}
	out, err := d.probe(ctx, n)
	if err != nil {
		return false, err
	}
	return strings.Contains(out, "systemd=yes"), nil
}

// probe runs probeScript for paths on n and records whether n runs
// systemd.
func (d *driver) probe(ctx context.Context, n districts.Node, paths ...string) (string, error) {
	out, err := d.r.Run(ctx, n, "probe the node", probeScript(paths), nil)
	if err != nil {
		return "", err
	}
	d.mu.Lock()
	d.systemdOn[n.ProviderID] = strings.Contains(out, "systemd=yes")
	d.mu.Unlock()
	return out, nil
}
