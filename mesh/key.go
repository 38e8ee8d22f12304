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
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

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

// NextKeyFile is where a node keeps the key pair it rotates to, beside
// KeyFile, until CommitKey makes it the node's key.
const NextKeyFile = "private.key.next"

// LoadOrCreateKey reads dir's private key, making it first if there is
// none. The key must be the node's alone: a key file that is a symlink,
// that anyone but this process's user owns or could read, or in a
// directory that is a symlink, someone else's, or writable by others, is
// refused (whoever could change it could make the node trust their key).
func LoadOrCreateKey(dir string) (Key, error) { return loadOrCreate(dir, KeyFile) }

// NextKey reads dir's next private key, making it first if there is
// none: asked again before CommitKey, it is the same key. It is kept as
// safely as the key (LoadOrCreateKey).
func NextKey(dir string) (Key, error) { return loadOrCreate(dir, NextKeyFile) }

// CommitKey makes the next key whose public half is pub dir's key, in
// one rename: a device (Run) reads either key whole. Done already (the
// key's public half is pub), it does nothing.
func CommitKey(dir string, pub Key) error {
	noNext := fmt.Errorf("%s: no next key with public key %s: ask for one first (transit-mesh rotate -dir %s) and commit the key it prints as next", dir, pub, dir)
	if err := checkOwned(dir, true); errors.Is(err, fs.ErrNotExist) {
		return noNext
	} else if err != nil {
		return err
	}
	cur, err := readKey(dir, KeyFile)
	switch {
	case err == nil && cur.Public() == pub:
		return nil
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return err
	}
	next, err := readKey(dir, NextKeyFile)
	switch {
	case errors.Is(err, fs.ErrNotExist), err == nil && next.Public() != pub:
		return noNext
	case err != nil:
		return err
	}
	if err := os.Rename(filepath.Join(dir, NextKeyFile), filepath.Join(dir, KeyFile)); err != nil {
		return err
	}
	return syncDir(dir)
}

// readOwnKey reads dir's key without making one: a device running with
// a key keeps it rather than take a new one no peer knows.
func readOwnKey(dir string) (Key, error) {
	if err := checkOwned(dir, true); err != nil {
		return Key{}, err
	}
	return readKey(dir, KeyFile)
}

// loadOrCreate reads the key file name in dir, making it first if there
// is none, as LoadOrCreateKey says.
func loadOrCreate(dir, name string) (Key, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Key{}, err
	}
	if err := checkOwned(dir, true); err != nil {
		return Key{}, err
	}
	k, err := readKey(dir, name)
	if !errors.Is(err, fs.ErrNotExist) {
		return k, err
	}
	if k, err = newPrivateKey(); err != nil {
		return k, err
	}
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return loadOrCreate(dir, name) // made meanwhile
	}
	if err != nil {
		return k, err
	}
	// Synced before it is used: a key lost in a crash after its public
	// half left the node would cut the node off its peers.
	if _, err := f.WriteString(k.String() + "\n"); err != nil {
		f.Close()
		return k, err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return k, err
	}
	return k, f.Close()
}

// readKey reads the key file name in dir (a directory checkOwned
// accepted), refusing a file that is not the node's alone; a missing
// file is fs.ErrNotExist.
func readKey(dir, name string) (Key, error) {
	path := filepath.Join(dir, name)
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, syscall.ELOOP) {
		return Key{}, fmt.Errorf("%s: a symlink: the key file must be a file of its own; remove the link", path)
	}
	if err != nil {
		return Key{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return Key{}, err
	}
	if err := ownedBy(path, fi, false); err != nil {
		return Key{}, err
	}
	data, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return Key{}, err
	}
	k, err := ParseKey(string(data))
	if err != nil {
		return Key{}, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// checkOwned checks a path without following a symlink (ownedBy).
func checkOwned(path string, dir bool) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	return ownedBy(path, fi, dir)
}

// ownedBy says what is wrong with fi, the file or directory at path, for
// holding a private key: not a plain file (or directory), another owner,
// a file others can read, a directory others can write.
func ownedBy(path string, fi fs.FileInfo, dir bool) error {
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("%s: a symlink: the key's place must be its own; remove the link", path)
	case dir && !fi.IsDir(), !dir && !fi.Mode().IsRegular():
		return fmt.Errorf("%s: not a plain %s", path, map[bool]string{true: "directory", false: "file"}[dir])
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%s: owned by uid %d, not this user (%d): run chown %d %s", path, st.Uid, os.Geteuid(), os.Geteuid(), path)
	}
	if dir && fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%s: writable by others than its owner: run chmod go-w %s", path, path)
	}
	if !dir && fi.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("%s: readable by others than its owner: run chmod 600 %s", path, path)
	}
	return nil
}
