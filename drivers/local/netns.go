package local

import (
	"context"
	"os"
	"path/filepath"
	"strings"

	"github.com/cloudtransit/transit/netns"
	"github.com/cloudtransit/transit/provider"
)

// A district may live in a network namespace of its own (Options.Network)
// instead of the host's: its bridge, firewall chains and nodes' host-side
// veths are made there, and that namespace is the nodes' gateway. cloudsim
// gives each emulated cloud network such a namespace, so networks are
// apart as clouds' are (cloudsim/localnodes). Every driver call runs on
// an OS thread moved into the namespace: the commands it runs (iproute2,
// iptables, the detached boot and teardown scripts) inherit it, the
// sockets it opens (the SSH banner check) are made in it, and
// /proc/sys/net is that namespace's.

// networkFile records a district's namespace, for Purge.
func networkFile(root, district string) string {
	return filepath.Join(districtDir(root, district), "network")
}

// netnsDriver is a driver whose district lives in the network namespace
// at path.
type netnsDriver struct {
	d    *driver
	path string
}

var _ provider.Infrastructure = netnsDriver{}

func (n netnsDriver) do(fn func() error) error { return netns.Do(n.path, fn) }

func (n netnsDriver) List(ctx context.Context, cluster string) (is []provider.Instance, gs []provider.Group, err error) {
	err = n.do(func() (err error) {
		is, gs, err = n.d.List(ctx, cluster)
		return err
	})
	return is, gs, err
}

func (n netnsDriver) EnsureGroup(ctx context.Context, spec provider.GroupSpec) (g provider.Group, err error) {
	if err := n.record(); err != nil {
		return provider.Group{}, err
	}
	err = n.do(func() (err error) {
		g, err = n.d.EnsureGroup(ctx, spec)
		return err
	})
	return g, err
}

func (n netnsDriver) DeleteGroup(ctx context.Context, g provider.Group) error {
	return n.do(func() error { return n.d.DeleteGroup(ctx, g) })
}

func (n netnsDriver) Launch(ctx context.Context, spec provider.LaunchSpec) (inst provider.Instance, err error) {
	if err := n.record(); err != nil {
		return provider.Instance{}, err
	}
	err = n.do(func() (err error) {
		inst, err = n.d.Launch(ctx, spec)
		return err
	})
	return inst, err
}

func (n netnsDriver) Terminate(ctx context.Context, inst provider.Instance) error {
	return n.do(func() error { return n.d.Terminate(ctx, inst) })
}

func (n netnsDriver) Describe(ctx context.Context, inst provider.Instance) (out provider.Instance, err error) {
	err = n.do(func() (err error) {
		out, err = n.d.Describe(ctx, inst)
		return err
	})
	return out, err
}

// PowerOff and PowerOn are the driver's (power.go), in the namespace.
func (n netnsDriver) PowerOff(ctx context.Context, id string) error {
	return n.do(func() error { return n.d.PowerOff(ctx, id) })
}

func (n netnsDriver) PowerOn(ctx context.Context, id string) (inst provider.Instance, err error) {
	err = n.do(func() (err error) {
		inst, err = n.d.PowerOn(ctx, id)
		return err
	})
	return inst, err
}

// record notes the district's namespace before anything is made in it.
func (n netnsDriver) record() error {
	path := networkFile(n.d.root, n.d.district)
	if b, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(b)) == n.path {
		return nil
	}
	return writeFile(path, []byte(n.path+"\n"), 0o644)
}

// districtNetwork is the namespace a district was made in, or "" for the
// host's — also when it is gone, and with it all the district made there.
func districtNetwork(root, district string) string {
	b, err := os.ReadFile(networkFile(root, district))
	if err != nil {
		return ""
	}
	path := strings.TrimSpace(string(b))
	if _, err := os.Stat(path); path == "" || err != nil {
		return ""
	}
	return path
}
