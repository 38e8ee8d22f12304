package mesh

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"golang.zx2c4.com/wireguard/conn"
	wgdevice "golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/ipc"
	"golang.zx2c4.com/wireguard/tun"
)

// userspace is wireguard-go on a TUN device, configured through its IPC
// (the UAPI text uapi makes); wg(8) and wgctrl reach it through its UAPI
// socket, /var/run/wireguard/<name>.sock.
type userspace struct {
	name string
	dev  *wgdevice.Device
	sock net.Listener // nil when the socket could not be made
}

var _ device = (*userspace)(nil)

func newUserspace(_ context.Context, o Options) (device, error) {
	tdev, err := tun.CreateTUN(o.Interface, o.MTU)
	if err != nil {
		return nil, fmt.Errorf("create %s (needs /dev/net/tun): %w", o.Interface, err)
	}
	logf := func(string, ...any) {}
	if o.Log != nil {
		logf = o.Log.Printf
	}
	u := &userspace{name: o.Interface,
		dev: wgdevice.NewDevice(tdev, conn.NewDefaultBind(), &wgdevice.Logger{Verbosef: wgdevice.DiscardLogf, Errorf: logf})}
	if f, err := ipc.UAPIOpen(o.Interface); err == nil {
		if l, err := ipc.UAPIListen(o.Interface, f); err == nil {
			u.sock = l
			go func() {
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					go u.dev.IpcHandle(c)
				}
			}()
		}
	}
	return u, nil
}

func (u *userspace) String() string {
	return "userspace WireGuard (wireguard-go on a TUN device)"
}

func (u *userspace) peers() (map[Key]time.Time, error) {
	conf, err := u.dev.IpcGet()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", u.name, err)
	}
	have := map[Key]time.Time{}
	var peer Key
	var sec int64
	sc := bufio.NewScanner(strings.NewReader(conf))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), "=")
		switch k {
		case "public_key":
			if peer, err = parseHexKey(v); err != nil {
				return nil, fmt.Errorf("read %s: %w", u.name, err)
			}
			have[peer] = time.Time{}
		case "last_handshake_time_sec":
			sec, _ = strconv.ParseInt(v, 10, 64)
		case "last_handshake_time_nsec": // follows _sec
			if nsec, _ := strconv.ParseInt(v, 10, 64); sec != 0 || nsec != 0 {
				have[peer] = time.Unix(sec, nsec)
			}
		}
	}
	return have, nil
}

func (u *userspace) configure(private Key, port int, have map[Key]bool, want []Peer, quiet map[Key]bool) error {
	conf, err := uapi(private, port, have, want, quiet)
	if err != nil {
		return err
	}
	if err := u.dev.IpcSet(conf); err != nil {
		return fmt.Errorf("configure %s: %w", u.name, err)
	}
	return nil
}

func (u *userspace) up() error { return u.dev.Up() }

func (u *userspace) closed() <-chan struct{} { return u.dev.Wait() }

func (u *userspace) close(context.Context) error {
	if u.sock != nil {
		_ = u.sock.Close() // the device's end closes it too
	}
	u.dev.Close()
	return nil
}
