package mesh

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"
)

// Impl is the WireGuard a node's device runs on.
type Impl string

const (
	// ImplAuto is the kernel's WireGuard where the kernel makes one,
	// else userspace.
	ImplAuto Impl = "auto"
	// ImplKernel is the kernel's WireGuard (Linux 5.6 and later, or the
	// wireguard module), configured over netlink: no packet crosses into
	// a process, so it is faster than userspace.
	ImplKernel Impl = "kernel"
	// ImplUserspace is wireguard-go on a TUN device: no module needed.
	ImplUserspace Impl = "userspace"
)

// impls make a device of each implementation.
var impls = map[Impl]func(context.Context, Options) (device, error){
	ImplKernel:    newKernel,
	ImplUserspace: newUserspace,
}

// check accepts auto, kernel or userspace (and "" for auto).
func (i Impl) check() error {
	if i != "" && i != ImplAuto && impls[i] == nil {
		return fmt.Errorf("WireGuard implementation %q: want auto, kernel or userspace", string(i))
	}
	return nil
}

// UnmarshalText accepts auto, kernel or userspace (and "" for auto).
func (i *Impl) UnmarshalText(b []byte) error {
	if err := Impl(b).check(); err != nil {
		return err
	}
	*i = Impl(b)
	return nil
}

// MarshalText is the implementation's name.
func (i Impl) MarshalText() ([]byte, error) { return []byte(i), nil }

// device is a running WireGuard device Run keeps configured: the
// kernel's or wireguard-go's.
type device interface {
	// peers are the public keys of the device's peers now, each with its
	// last handshake (zero: none yet).
	peers() (map[Key]time.Time, error)
	// configure gives the device the key and port and turns its peers
	// have into want, keeping the sessions of the peers that stay; the
	// quiet ones get no keepalive.
	configure(private Key, port int, have map[Key]bool, want []Peer, quiet map[Key]bool) error
	// up starts the device (before its link is set up).
	up() error
	// closed is closed when the device stopped by itself.
	closed() <-chan struct{}
	// close takes the device down and away.
	close(ctx context.Context) error
	// String names the implementation, for the log.
	String() string
}

// Options of a node's mesh device.
type Options struct {
	// Dir holds the private key and the peers file.
	Dir string
	// Interface is the device's name (default "transit0").
	Interface string
	// Address is the node's mesh address, with the mesh's prefix length
	// (10.99.0.7/16).
	Address netip.Prefix
	// Port is the UDP port (default DefaultPort); MTU the device's
	// (default 1420: 1500 less WireGuard's IPv4 overhead).
	Port, MTU int
	// Impl is the WireGuard to run (default ImplAuto: the kernel's where
	// it has WireGuard, else userspace).
	Impl Impl
	// Log gets what the device reports (default: discarded).
	Log *log.Logger
	// Reload is how often the key and peers files are looked at
	// (default 1 s); a signal on Changed looks at once.
	Reload  time.Duration
	Changed <-chan os.Signal
}

// Run brings the device up — the kernel's WireGuard or wireguard-go's,
// as o.Impl says, and logs which —, keeps its key that of the key file
// and its peers those of the peers file (both read again whenever they
// change; a file that does not read or parse is reported and the last
// good key or peers stay), writes the public key it runs with to
// RunningKeyFile and, when ctx ends, takes the device down (a kernel
// device's link is deleted). wg(8) can read either.
//
// A new key (CommitKey) takes without a restart: the device's sessions
// end with the old key, and peers that know the new one handshake again.
func Run(ctx context.Context, o Options) (err error) {
	if o.Interface == "" {
		o.Interface = "transit0"
	}
	if o.Port == 0 {
		o.Port = DefaultPort
	}
	if o.MTU == 0 {
		o.MTU = 1420
	}
	if o.Reload <= 0 {
		o.Reload = time.Second
	}
	if err := o.Impl.check(); err != nil {
		return fmt.Errorf("mesh: %w", err)
	}
	logf := func(string, ...any) {}
	if o.Log != nil {
		logf = o.Log.Printf
	}
	if !o.Address.IsValid() {
		return errors.New("mesh: no address for this node")
	}
	if _, err := LoadOrCreateKey(o.Dir); err != nil {
		return fmt.Errorf("mesh: %w", err)
	}
	// Fail closed: without the device, the mesh's range would follow the
	// default route and the platform's traffic to mesh addresses (gossip,
	// VXLAN, the API) would leave the node in plaintext. The route stays
	// when the device goes (a restart, a crash, a stop).
	if err := ip(ctx, FailClosedRoute(o.Address)...); err != nil {
		return fmt.Errorf("mesh: %w", err)
	}
	dev, err := open(ctx, o, logf)
	if err != nil {
		return fmt.Errorf("mesh: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if cerr := dev.close(cctx); cerr != nil {
			err = errors.Join(err, fmt.Errorf("mesh: take %s down: %w", o.Interface, cerr))
		}
	}()

	// applied is what the device was last configured with: a tick that
	// reads the same key and peers leaves it alone. A key or peers file
	// that cannot be read leaves its part as it was, not the other: a
	// broken peers file must not hold back a new key.
	var (
		applied      []byte
		appliedPeers []Peer
		appliedKey   Key
		written      Key               // in RunningKeyFile
		quiet        map[Key]time.Time // peers without keepalive (waits), until when at most
	)
	apply := func() error {
		var errs []error
		key, err := readOwnKey(o.Dir)
		if err != nil {
			if appliedKey == (Key{}) {
				return err
			}
			key, errs = appliedKey, append(errs, fmt.Errorf("the key stays: %w", err))
		}
		data, err := os.ReadFile(filepath.Join(o.Dir, PeersFile))
		if errors.Is(err, fs.ErrNotExist) {
			data = []byte("[]")
		} else if err != nil {
			data, errs = applied, append(errs, fmt.Errorf("the peers stay: %w", err))
		}
		peers := appliedPeers
		if !bytes.Equal(data, applied) {
			if peers, err = ParsePeers(data); err != nil {
				data, peers, errs = applied, appliedPeers, append(errs, fmt.Errorf("the peers stay: %w", err))
			}
		}
		changed := key != appliedKey || !bytes.Equal(data, applied)
		if changed || len(quiet) > 0 {
			handshakes, err := dev.peers()
			if err != nil {
				return err
			}
			was := len(quiet)
			quiet = quieten(key.Public(), appliedPeers, peers, handshakes, quiet, time.Now())
			// Unless the key or peers changed, quiet peers only leave.
			if changed || len(quiet) != was {
				if err := dev.configure(key, o.Port, keySet(handshakes), peers, keySet(quiet)); err != nil {
					return err
				}
			}
			if appliedKey != (Key{}) && key != appliedKey {
				logf("mesh: new key, public key %s", key.Public())
			}
			if applied == nil || !bytes.Equal(data, applied) {
				logf("mesh: %d peers", len(peers))
			}
			applied, appliedPeers, appliedKey = data, peers, key
		}
		if written != key.Public() {
			if err := replaceFile(o.Dir, RunningKeyFile, []byte(key.Public().String()+"\n")); err != nil {
				return err
			}
			written = key.Public()
		}
		return errors.Join(errs...)
	}
	if err := apply(); err != nil {
		return fmt.Errorf("mesh: %w", err)
	}
	if err := dev.up(); err != nil {
		return fmt.Errorf("mesh: %w", err)
	}
	for _, args := range [][]string{
		{"addr", "replace", o.Address.String(), "dev", o.Interface},
		{"link", "set", o.Interface, "up"},
	} {
		if err := ip(ctx, args...); err != nil {
			return fmt.Errorf("mesh: %w", err)
		}
	}
	logf("mesh: %s up at %s, port %d, public key %s, %s", o.Interface, o.Address, o.Port, appliedKey.Public(), dev)
	tick := time.NewTicker(o.Reload)
	defer tick.Stop()
	for {
		var quietEnds <-chan time.Time // a quiet peer's time is up, between ticks
		if len(quiet) > 0 {
			quietEnds = time.After(time.Until(slices.MinFunc(slices.Collect(maps.Values(quiet)), time.Time.Compare)))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-dev.closed():
			return errors.New("mesh: the device closed")
		case <-tick.C:
		case <-o.Changed:
		case <-quietEnds:
		}
		if err := apply(); err != nil {
			logf("mesh: %v", err)
		}
	}
}

// FailClosedMetric is the metric of the mesh range's unreachable route:
// the device's own route (metric 0) wins while the device is up.
const FailClosedMetric = 4242

// FailClosedRoute is the ip(8) command, without "ip", that makes the
// mesh's range (address's prefix) unreachable when no device routes it,
// so that nothing meant for the mesh takes another way.
func FailClosedRoute(address netip.Prefix) []string {
	return []string{"route", "replace", "unreachable", address.Masked().String(), "metric", strconv.Itoa(FailClosedMetric)}
}

// open makes o.Impl's device; ImplAuto tries the kernel's first and runs
// in userspace where the kernel makes no WireGuard device.
func open(ctx context.Context, o Options, logf func(string, ...any)) (device, error) {
	if o.Impl != "" && o.Impl != ImplAuto {
		return impls[o.Impl](ctx, o)
	}
	dev, err := newKernel(ctx, o)
	if errors.Is(err, ErrNoKernelWireGuard) {
		logf("mesh: no kernel WireGuard, so userspace: %v", err)
		return newUserspace(ctx, o)
	}
	return dev, err
}

// WritePeers checks peers and replaces dir's peers file with them in one
// rename, so the device never reads half a file.
func WritePeers(dir string, data []byte) error {
	if _, err := ParsePeers(data); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return replaceFile(dir, PeersFile, data)
}

// RunningKeyFile is where Run writes the public key its device runs
// with (base64, a line), once the device has it: a script that committed
// a new key (CommitKey) waits until it is there.
const RunningKeyFile = "running.key"

// replaceFile replaces dir's file name with data in one rename, so a
// reader never sees half a file.
func replaceFile(dir, name string, data []byte) error {
	tmp, err := os.CreateTemp(dir, "."+name+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), filepath.Join(dir, name))
}
