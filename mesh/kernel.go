package mesh

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl"
)

// ErrNoKernelWireGuard is why Run with ImplKernel fails where the kernel
// cannot make a WireGuard device (no wireguard module); with ImplAuto
// Run then runs in userspace instead.
var ErrNoKernelWireGuard = errors.New("the kernel made no WireGuard device")

// kernel is the kernel's WireGuard device, a link of type wireguard,
// configured over netlink with wgctrl.
type kernel struct {
	name string
	wg   *wgctrl.Client
}

var _ device = (*kernel)(nil)

// newKernel makes the link (ip link add NAME type wireguard) or reuses
// one a previous run left; a link of that name of another type is an
// error naming its type.
func newKernel(ctx context.Context, o Options) (device, error) {
	kind, exists, err := linkKind(ctx, o.Interface)
	if err != nil {
		return nil, err
	}
	if exists && kind != "wireguard" {
		return nil, fmt.Errorf("%s exists and is a %s link, not WireGuard: delete it (ip link del %s) or choose another interface", o.Interface, kind, o.Interface)
	}
	if !exists {
		args := []string{"link", "add", o.Interface, "type", "wireguard"}
		if out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("%w: ip %s: %w: %s%s", ErrNoKernelWireGuard, strings.Join(args, " "), err, bytes.TrimSpace(out), noModule(out))
		}
	}
	k := &kernel{name: o.Interface}
	fail := func(err error) (device, error) {
		return nil, errors.Join(err, k.close(context.WithoutCancel(ctx)))
	}
	if k.wg, err = wgctrl.New(); err != nil {
		return fail(fmt.Errorf("wgctrl: %w", err))
	}
	if err := ip(ctx, "link", "set", o.Interface, "mtu", strconv.Itoa(o.MTU)); err != nil {
		return fail(err)
	}
	return k, nil
}

// noModule is what to do when ip's output says the kernel lacks
// WireGuard.
func noModule(out []byte) string {
	for _, s := range []string{"Unknown device type", "not supported"} {
		if bytes.Contains(out, []byte(s)) {
			return " (the kernel has no wireguard module: load it, modprobe wireguard; Linux 5.6 and later have it)"
		}
	}
	return ""
}

// linkKind is the type of the link name (ip -d link's kind: wireguard,
// tun, veth; its link type for one without, such as ether), if it
// exists.
func linkKind(ctx context.Context, name string) (kind string, exists bool, err error) {
	if _, missing := net.InterfaceByName(name); missing != nil {
		return "", false, nil // ip link add says more if it is something else
	}
	out, err := exec.CommandContext(ctx, "ip", "-d", "-j", "link", "show", "dev", name).Output()
	if err != nil {
		return "", true, fmt.Errorf("ip -d -j link show dev %s: %w", name, runError(err))
	}
	var links []struct {
		LinkType string `json:"link_type"`
		LinkInfo struct {
			Kind string `json:"info_kind"`
		} `json:"linkinfo"`
	}
	if err := json.Unmarshal(out, &links); err != nil || len(links) != 1 {
		return "", true, fmt.Errorf("ip -d -j link show dev %s: unexpected output %q", name, out)
	}
	if links[0].LinkInfo.Kind != "" {
		return links[0].LinkInfo.Kind, true, nil
	}
	return links[0].LinkType, true, nil
}

func (k *kernel) String() string { return "kernel WireGuard" }

func (k *kernel) peers() (map[Key]time.Time, error) {
	d, err := k.wg.Device(k.name)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", k.name, err)
	}
	have := map[Key]time.Time{}
	for _, p := range d.Peers {
		var last time.Time // the epoch before any
		if p.LastHandshakeTime.UnixNano() > 0 {
			last = p.LastHandshakeTime
		}
		have[Key(p.PublicKey)] = last
	}
	return have, nil
}

func (k *kernel) configure(private Key, port int, have map[Key]bool, want []Peer, quiet map[Key]bool) error {
	conf, err := wgConfig(private, port, have, want, quiet)
	if err != nil {
		return err
	}
	if err := k.wg.ConfigureDevice(k.name, conf); err != nil {
		return fmt.Errorf("configure %s: %w", k.name, err)
	}
	return nil
}

func (k *kernel) up() error { return nil } // the link is set up with its address

// closed: the kernel's device does not stop by itself.
func (k *kernel) closed() <-chan struct{} { return nil }

// close deletes the link, peers, keys and sessions with it.
func (k *kernel) close(ctx context.Context) error {
	var errs []error
	if k.wg != nil {
		errs = append(errs, k.wg.Close())
	}
	errs = append(errs, ip(ctx, "link", "del", k.name))
	return errors.Join(errs...)
}

// ip runs ip(8), its output in the error.
func ip(ctx context.Context, args ...string) error {
	if out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// runError keeps a failed command's stderr in its error.
func runError(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return fmt.Errorf("%w: %s", err, bytes.TrimSpace(ee.Stderr))
	}
	return err
}
