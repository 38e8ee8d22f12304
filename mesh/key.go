// Package mesh is transit's encrypted node mesh: WireGuard between every
// pair of a cluster's nodes, each node at a stable mesh address. A node
// makes its own key pair (only the public key leaves it), runs the
// WireGuard device — the kernel's where it has WireGuard, else in
// userspace (wireguard-go on a TUN device), so it works where the kernel
// has no WireGuard module — and takes its peers from a file transit
// writes over SSH (cmd/transit-mesh).
package mesh

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/crypto/curve25519"
)

// Key is a Curve25519 key, private or public.
type Key [32]byte

// String is the key in base64, as wg(8) writes it.
func (k Key) String() string { return base64.StdEncoding.EncodeToString(k[:]) }

func (k Key) hex() string { return hex.EncodeToString(k[:]) }

// parseHexKey reads a key as the UAPI writes it.
func parseHexKey(s string) (Key, error) {
	var k Key
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(k) {
		return k, errors.New("not a WireGuard key (32 bytes in hex)")
	}
	copy(k[:], b)
	return k, nil
}

// Public is the public key of a private one.
func (k Key) Public() Key {
	var pub Key
	p, err := curve25519.X25519(k[:], curve25519.Basepoint)
	if err != nil {
		panic(err) // only for a low-order point, which Basepoint is not
	}
	copy(pub[:], p)
	return pub
}

// ParseKey reads a base64 key.
func ParseKey(s string) (Key, error) {
	var k Key
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil || len(b) != len(k) {
		return k, fmt.Errorf("not a WireGuard key (32 bytes in base64)")
	}
	copy(k[:], b)
	return k, nil
}

// newPrivateKey is a random Curve25519 private key, clamped.
func newPrivateKey() (Key, error) {
	var k Key
	if _, err := rand.Read(k[:]); err != nil {
		return k, err
	}
	k[0] &= 248
	k[31] = (k[31] & 127) | 64
	return k, nil
}

// KeyFile is where a node keeps its private key, readable by root only.
const KeyFile = "private.key"

// LoadOrCreateKey reads dir's private key, making it first if there is
// none. A key file anyone but root could read is refused: the key would
// no longer be the node's alone.
func LoadOrCreateKey(dir string) (Key, error) {
	path := filepath.Join(dir, KeyFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		k, err := newPrivateKey()
		if err != nil {
			return k, err
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return k, err
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			return LoadOrCreateKey(dir) // made meanwhile
		}
		if err != nil {
			return k, err
		}
		if _, err := f.WriteString(k.String() + "\n"); err != nil {
			f.Close()
			return k, err
		}
		return k, f.Close()
	}
	if err != nil {
		return Key{}, err
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm()&0o077 != 0 {
		return Key{}, fmt.Errorf("%s: readable by others than its owner: run chmod 600 %s", path, path)
	}
	k, err := ParseKey(string(data))
	if err != nil {
		return Key{}, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}
