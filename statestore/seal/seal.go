// Package seal encrypts the secrets a state store holds (the cluster's SSH
// private key, the admin kubeconfig) on the client, with age (X25519), so
// that read access to a bucket is not root on every node.
//
// The key is an age identity ("AGE-SECRET-KEY-1…"), which the user keeps
// in TRANSIT_STATE_KEY or a credential: `transit state keygen` or
// `age-keygen` makes one. A random key rather than a passphrase: a
// passphrase would need scrypt on every run (about a second per object) and
// would be as weak as people make passphrases.
package seal

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"filippo.io/age"
)

// ErrWrongKey says the data was sealed with another key.
var ErrWrongKey = errors.New("sealed with another state key")

// Key seals and opens data.
type Key struct {
	id *age.X25519Identity
}

// Generate makes a new key and returns it with its text form.
func Generate() (*Key, string, error) {
	id, err := age.GenerateX25519Identity()
	if err != nil {
		return nil, "", fmt.Errorf("generate a state key: %w", err)
	}
	return &Key{id: id}, id.String(), nil
}

// Parse reads a key in its text form. The error never repeats the text.
func Parse(text string) (*Key, error) {
	text = strings.TrimSpace(text)
	if !strings.HasPrefix(text, "AGE-SECRET-KEY-1") {
		return nil, errors.New("a state key is an age identity starting AGE-SECRET-KEY-1 (make one with `transit state keygen`)")
	}
	id, err := age.ParseX25519Identity(text)
	if err != nil {
		return nil, errors.New("the state key is not a valid age identity (a character lost when it was copied?)")
	}
	return &Key{id: id}, nil
}

// Recipient is the key's public half, safe to print: it tells which key
// sealed an object.
func (k *Key) Recipient() string { return k.id.Recipient().String() }

// Seal encrypts data.
func (k *Key) Seal(data []byte) ([]byte, error) {
	var out bytes.Buffer
	w, err := age.Encrypt(&out, k.id.Recipient())
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(data); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// Open decrypts what Seal made with the same key. Data sealed with another
// key is an error matching ErrWrongKey; data not sealed at all, or
// changed, is an error of its own.
func (k *Key) Open(sealed []byte) ([]byte, error) {
	r, err := age.Decrypt(bytes.NewReader(sealed), k.id)
	if err != nil {
		var noMatch *age.NoIdentityMatchError
		if errors.As(err, &noMatch) {
			return nil, ErrWrongKey
		}
		return nil, fmt.Errorf("not sealed data, or damaged: %w", err)
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("sealed data damaged: %w", err)
	}
	return data, nil
}

// Sealed says data looks sealed (an age file), so a reader can tell a
// sealed object from a plain one without a key.
func Sealed(data []byte) bool {
	return bytes.HasPrefix(data, []byte("age-encryption.org/v1\n"))
}
