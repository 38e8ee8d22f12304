package mesh

import "golang.zx2c4.com/wireguard/wgctrl"

// Wgctrl is the kernel device's configuration code (wgctrl) on the
// device name, whatever runs it: wgctrl speaks a userspace device's UAPI
// socket too, so tests run the code on wireguard-go where the kernel has
// no WireGuard.
type Wgctrl struct{ k *kernel }

// NewWgctrl opens wgctrl for the device name (made elsewhere).
func NewWgctrl(name string) (*Wgctrl, error) {
	c, err := wgctrl.New()
	if err != nil {
		return nil, err
	}
	return &Wgctrl{&kernel{name: name, wg: c}}, nil
}

// Configure is the kernel device's configure, no peer quiet.
func (w *Wgctrl) Configure(private Key, port int, have map[Key]bool, want []Peer) error {
	return w.k.configure(private, port, have, want, nil)
}

// Peers is the kernel device's peers.
func (w *Wgctrl) Peers() (map[Key]bool, error) {
	have, err := w.k.peers()
	return keySet(have), err
}

// Close closes wgctrl, not the device.
func (w *Wgctrl) Close() error { return w.k.wg.Close() }
