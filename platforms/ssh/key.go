package ssh

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	gossh "golang.org/x/crypto/ssh"
)

// KeyPath is where the cluster's private key lives in stateDir; the public
// key is KeyPath(...)+".pub".
func KeyPath(stateDir, cluster string) string {
	return filepath.Join(stateDir, "transit-"+cluster+".key")
}

// Key is a cluster's SSH identity.
type Key struct {
	Signer gossh.Signer
	// AuthorizedKey is one authorized_keys line,
	// "ssh-ed25519 AAAA... transit-<cluster>", without a trailing newline.
	AuthorizedKey string
	// Path is the private key file.
	Path string
}

// EnsureKey loads the cluster's key from stateDir, generating an ed25519 key
// on first use. The private key is stored in OpenSSH format with mode 0600
// and the public key beside it (Path+".pub", 0644). A private key file that
// group or others can read is refused, as is a file that does not parse.
//
// EnsureKey is idempotent and safe to call from several processes at once:
// a new key is written to a temporary file and hard-linked into place, which
// fails rather than replace a key another process wrote first; whatever key
// is in place is then loaded.
func EnsureKey(stateDir, cluster string) (*Key, error) {
	if cluster == "" || strings.ContainsAny(cluster, `/\`) || cluster == "." || cluster == ".." {
		return nil, fmt.Errorf("ssh key: invalid cluster name %q", cluster)
	}
	path := KeyPath(stateDir, cluster)
	comment := "transit-" + cluster

	signer, err := loadKey(path)
	if errors.Is(err, fs.ErrNotExist) {
		if err := generateKey(stateDir, path, comment); err != nil {
			return nil, err
		}
		signer, err = loadKey(path)
	}
	if err != nil {
		return nil, err
	}

	line := strings.TrimSuffix(string(gossh.MarshalAuthorizedKey(signer.PublicKey())), "\n") + " " + comment
	if err := ensurePublicKey(path+".pub", line); err != nil {
		return nil, err
	}
	return &Key{Signer: signer, AuthorizedKey: line, Path: path}, nil
}

// loadKey reads and parses the private key at path, refusing a file that
// group or others can read. A missing file is an error matching
// fs.ErrNotExist.
func loadKey(path string) (gossh.Signer, error) {
	data, err := readPrivate(path)
	if err != nil {
		return nil, err
	}
	signer, err := gossh.ParsePrivateKey(data)
	if err != nil {
		return nil, fmt.Errorf("ssh key %s is corrupt or not an unencrypted OpenSSH private key (%w); move it away to generate a new key, which every existing machine will then refuse", path, err)
	}
	return signer, nil
}

// readPrivate reads the file at path after checking, on the open file, that
// it is a regular file only its owner can read.
func readPrivate(path string) (data []byte, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("ssh key: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("ssh key: %w", cerr)
		}
	}()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("ssh key: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("ssh key %s: not a regular file", path)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("ssh key %s: mode %04o lets group or others read the private key; run `chmod 600 %s`", path, perm, path)
	}
	data, err = io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("ssh key: read %s: %w", path, err)
	}
	return data, nil
}

// generateKey writes a new ed25519 key to path unless a file is already
// there; losing that race is not an error.
func generateKey(dir, path, comment string) error {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return fmt.Errorf("ssh key: generate: %w", err)
	}
	block, err := gossh.MarshalPrivateKey(priv, comment)
	if err != nil {
		return fmt.Errorf("ssh key: encode: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("ssh key: %w", err)
	}
	tmp, err := writeTemp(dir, filepath.Base(path), pem.EncodeToMemory(block), 0o600)
	if err != nil {
		return fmt.Errorf("ssh key: %w", err)
	}
	// Link, unlike rename, never replaces an existing file: if another
	// process wrote its key first, keep that one.
	lerr := os.Link(tmp, path)
	if errors.Is(lerr, fs.ErrExist) {
		lerr = nil
	}
	if err := os.Remove(tmp); err != nil && lerr == nil {
		lerr = err
	}
	if lerr != nil {
		return fmt.Errorf("ssh key: install %s: %w", path, lerr)
	}
	return syncDir(dir)
}

// ensurePublicKey writes line to path unless the file already holds it.
func ensurePublicKey(path, line string) error {
	want := line + "\n"
	if got, err := os.ReadFile(path); err == nil && string(got) == want {
		return nil
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("ssh key: %w", err)
	}
	if err := writeFileAtomic(path, []byte(want), 0o644); err != nil {
		return fmt.Errorf("ssh key: %w", err)
	}
	return nil
}

// writeTemp writes data to a new temporary file in dir, synced to disk
// with mode perm, and returns its name.
func writeTemp(dir, base string, data []byte, perm fs.FileMode) (name string, err error) {
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return "", err
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	if err := f.Chmod(perm); err != nil {
		return "", err
	}
	if _, err := f.Write(data); err != nil {
		return "", err
	}
	if err := f.Sync(); err != nil {
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	return f.Name(), nil
}

// writeFileAtomic replaces path with data: temporary file, fsync, rename,
// fsync of the directory.
func writeFileAtomic(path string, data []byte, perm fs.FileMode) error {
	dir := filepath.Dir(path)
	tmp, err := writeTemp(dir, filepath.Base(path), data, perm)
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return syncDir(dir)
}

// syncDir makes a rename or link in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
