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

	"github.com/cloudtransit/transit/atomicfile"
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
	// If another process wrote its key first, keep that one.
	if err := atomicfile.WriteNew(path, pem.EncodeToMemory(block), 0o600); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("ssh key: install %s: %w", path, err)
	}
	return nil
}

// ensurePublicKey writes line to path unless the file already holds it.
func ensurePublicKey(path, line string) error {
	want := line + "\n"
	if got, err := os.ReadFile(path); err == nil && string(got) == want {
		return nil
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("ssh key: %w", err)
	}
	if err := atomicfile.Write(path, []byte(want), 0o644); err != nil {
		return fmt.Errorf("ssh key: %w", err)
	}
	return nil
}
