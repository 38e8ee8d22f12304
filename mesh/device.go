package mesh

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/ipc"
	"golang.zx2c4.com/wireguard/tun"
)

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
	// Log gets what the device reports (default: discarded).
	Log *log.Logger
	// Reload is how often the peers file is looked at (default 1 s);
	// a signal on Changed looks at once.
	Reload  time.Duration
	Changed <-chan os.Signal
}

// Run brings the device up, keeps its peers those of the peers file
// (read again whenever it changes; a file that does not parse is
// reported and the last good peers stay) and, when ctx ends, takes the
// device down. wg(8) can read it through its UAPI socket.
func Run(ctx context.Context, o Options) error {
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
	logf := func(string, ...any) {}
	if o.Log != nil {
		logf = o.Log.Printf
	}
	if !o.Address.IsValid() {
		return errors.New("mesh: no address for this node")
	}
	key, err := LoadOrCreateKey(o.Dir)
	if err != nil {
		return fmt.Errorf("mesh: %w", err)
	}
	tdev, err := tun.CreateTUN(o.Interface, o.MTU)
	if err != nil {
		return fmt.Errorf("mesh: create %s (needs /dev/net/tun): %w", o.Interface, err)
	}
	dev := device.NewDevice(tdev, conn.NewDefaultBind(), &device.Logger{Verbosef: device.DiscardLogf, Errorf: logf})
	defer dev.Close()
	if uapi, err := ipc.UAPIOpen(o.Interface); err == nil {
		if l, err := ipc.UAPIListen(o.Interface, uapi); err == nil {
			defer l.Close()
			go func() {
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					go dev.IpcHandle(c)
				}
			}()
		}
	}

	have := map[Key]bool{}
	var applied []byte
	apply := func() error {
		data, err := os.ReadFile(filepath.Join(o.Dir, PeersFile))
		if errors.Is(err, fs.ErrNotExist) {
			data = []byte("[]")
		} else if err != nil {
			return err
		}
		if bytes.Equal(data, applied) {
			return nil
		}
		peers, err := ParsePeers(data)
		if err != nil {
			return err
		}
		conf, err := uapi(key, o.Port, have, peers)
		if err != nil {
			return err
		}
		if err := dev.IpcSet(conf); err != nil {
			return fmt.Errorf("configure %s: %w", o.Interface, err)
		}
		have = map[Key]bool{}
		for _, p := range peers {
			k, _ := ParseKey(p.PublicKey)
			have[k] = true
		}
		applied = data
		logf("mesh: %d peers", len(peers))
		return nil
	}
	if err := apply(); err != nil {
		return fmt.Errorf("mesh: %w", err)
	}
	if err := dev.Up(); err != nil {
		return fmt.Errorf("mesh: %w", err)
	}
	for _, args := range [][]string{
		{"addr", "replace", o.Address.String(), "dev", o.Interface},
		{"link", "set", o.Interface, "up"},
	} {
		if out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("mesh: ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
		}
	}
	logf("mesh: %s up at %s, port %d, public key %s", o.Interface, o.Address, o.Port, key.Public())
	tick := time.NewTicker(o.Reload)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-dev.Wait():
			return errors.New("mesh: the device closed")
		case <-tick.C:
		case <-o.Changed:
		}
		if err := apply(); err != nil {
			logf("mesh: peers not changed: %v", err)
		}
	}
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
	tmp, err := os.CreateTemp(dir, ".peers-*")
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
	return os.Rename(tmp.Name(), filepath.Join(dir, PeersFile))
}
