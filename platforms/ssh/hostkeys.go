package ssh

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"

	gossh "golang.org/x/crypto/ssh"

	"github.com/cloudtransit/transit/state"
)

// HostKeysPath is where the cluster's pinned host keys live in stateDir.
func HostKeysPath(stateDir, cluster string) string {
	return filepath.Join(stateDir, "transit-"+cluster+".known_hosts")
}

// HostKeys pins each node's SSH host key on first contact (trust on first
// use) in a file of lines "<hostID> <key-type> <base64>". Host ids are the
// machines' provider ids, never addresses, which clouds reuse.
//
// A HostKeys is safe for concurrent use, and several processes may share
// the file: every change locks path+".lock" (flock), re-reads the file,
// applies the change and replaces the file atomically.
type HostKeys struct {
	path string

	mu   sync.Mutex
	keys map[string]gossh.PublicKey // as last read or written
}

// OpenHostKeys reads the pins in path. A missing file is an empty store; a
// malformed line is an error naming the file and the line.
func OpenHostKeys(path string) (*HostKeys, error) {
	h := &HostKeys{path: path}
	f, err := readHostKeys(path)
	if err != nil {
		return nil, err
	}
	h.keys = f.keys()
	return h, nil
}

// Pinned returns the key pinned for hostID, as of the last time this
// HostKeys read or wrote the file.
func (h *HostKeys) Pinned(hostID string) (gossh.PublicKey, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	k, ok := h.keys[hostID]
	return k, ok
}

// Callback returns the host key callback for the machine hostID: an
// unknown machine's key is pinned and accepted, the pinned key is accepted,
// and any other key is refused with a *HostKeyChangedError.
func (h *HostKeys) Callback(hostID string) gossh.HostKeyCallback {
	return func(addr string, _ net.Addr, key gossh.PublicKey) error {
		if err := checkHostID(hostID); err != nil {
			return err
		}
		var changed *HostKeyChangedError
		err := h.update(func(f *hostKeysFile) bool {
			pinned, ok := f.get(hostID)
			if !ok {
				f.set(hostID, key)
				return true
			}
			if !bytes.Equal(pinned.Marshal(), key.Marshal()) {
				changed = &HostKeyChangedError{
					HostID:    hostID,
					Addr:      addr,
					File:      h.path,
					Pinned:    gossh.FingerprintSHA256(pinned),
					Presented: gossh.FingerprintSHA256(key),
				}
			}
			return false
		})
		if err != nil {
			return err
		}
		if changed != nil {
			return changed
		}
		return nil
	}
}

// Forget removes hostID's pin, e.g. once its machine is deleted. Forgetting
// an unknown id is not an error.
func (h *HostKeys) Forget(hostID string) error {
	return h.update(func(f *hostKeysFile) bool { return f.remove(hostID) })
}

// update runs change on the file's current content under both locks and
// writes the file back when change reports a modification.
func (h *HostKeys) update(change func(*hostKeysFile) bool) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	unlock, err := lockFile(h.path + ".lock")
	if err != nil {
		return fmt.Errorf("host keys: %w", err)
	}
	defer unlock()
	f, err := readHostKeys(h.path)
	if err != nil {
		return err
	}
	if change(f) {
		if err := os.MkdirAll(filepath.Dir(h.path), 0o700); err != nil {
			return fmt.Errorf("host keys: %w", err)
		}
		if err := writeFileAtomic(h.path, f.bytes(), 0o600); err != nil {
			return fmt.Errorf("host keys: write %s: %w", h.path, err)
		}
	}
	h.keys = f.keys()
	return nil
}

// lockFile takes the store's inter-process lock, creating its directory.
func lockFile(path string) (unlock func(), err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	return state.Flock(path)
}

// HostKeyChangedError is a machine presenting a host key other than the one
// pinned for it: either it was rebuilt under the same id, or something is
// impersonating it.
type HostKeyChangedError struct {
	HostID string
	Addr   string
	File   string // the known-hosts file holding the pin
	// Pinned and Presented are SHA256 fingerprints ("SHA256:...").
	Pinned    string
	Presented string
}

// Error names both fingerprints and the line to delete if the machine
// was really rebuilt.
func (e *HostKeyChangedError) Error() string {
	return fmt.Sprintf("host key of %s (%s) changed: pinned %s, presented %s; if this machine was really rebuilt, delete its line from %s",
		e.HostID, e.Addr, e.Pinned, e.Presented, e.File)
}

// checkHostID refuses ids the file format cannot hold.
func checkHostID(id string) error {
	if id == "" {
		return errors.New("host keys: empty host id")
	}
	if strings.HasPrefix(id, "#") || strings.ContainsFunc(id, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return fmt.Errorf("host keys: host id %q cannot be stored (starts with '#' or contains spaces or control characters)", id)
	}
	return nil
}

// hostKeysFile is the parsed file, kept line by line so that comments
// survive rewrites.
type hostKeysFile struct {
	lines []hostKeyLine
}

type hostKeyLine struct {
	raw    string // comment or blank line when id is empty
	id     string
	key    gossh.PublicKey
	remove bool
}

func readHostKeys(path string) (*hostKeysFile, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &hostKeysFile{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("host keys: %w", err)
	}
	f, err := parseHostKeys(data)
	if err != nil {
		return nil, fmt.Errorf("host keys %s: %w", path, err)
	}
	return f, nil
}

// parseHostKeys parses the file format; errors name the line.
func parseHostKeys(data []byte) (*hostKeysFile, error) {
	f := &hostKeysFile{}
	seen := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		raw := sc.Text()
		text := strings.TrimSpace(raw)
		if text == "" || strings.HasPrefix(text, "#") {
			f.lines = append(f.lines, hostKeyLine{raw: raw})
			continue
		}
		fields := strings.Fields(text)
		if len(fields) != 3 {
			return nil, fmt.Errorf("line %d: want \"<host-id> <key-type> <base64>\", got %d fields", n, len(fields))
		}
		blob, err := base64.StdEncoding.DecodeString(fields[2])
		if err != nil {
			return nil, fmt.Errorf("line %d: key of %s is not base64: %w", n, fields[0], err)
		}
		key, err := gossh.ParsePublicKey(blob)
		if err != nil {
			return nil, fmt.Errorf("line %d: key of %s: %w", n, fields[0], err)
		}
		if key.Type() != fields[1] {
			return nil, fmt.Errorf("line %d: key of %s is %s, line says %s", n, fields[0], key.Type(), fields[1])
		}
		if first, dup := seen[fields[0]]; dup {
			return nil, fmt.Errorf("line %d: %s is already pinned on line %d", n, fields[0], first)
		}
		seen[fields[0]] = n
		f.lines = append(f.lines, hostKeyLine{id: fields[0], key: key})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *hostKeysFile) get(id string) (gossh.PublicKey, bool) {
	for _, l := range f.lines {
		if l.id == id && !l.remove {
			return l.key, true
		}
	}
	return nil, false
}

func (f *hostKeysFile) set(id string, key gossh.PublicKey) {
	f.lines = append(f.lines, hostKeyLine{id: id, key: key})
}

func (f *hostKeysFile) remove(id string) bool {
	removed := false
	for i := range f.lines {
		if f.lines[i].id == id && !f.lines[i].remove {
			f.lines[i].remove = true
			removed = true
		}
	}
	return removed
}

func (f *hostKeysFile) keys() map[string]gossh.PublicKey {
	m := map[string]gossh.PublicKey{}
	for _, l := range f.lines {
		if l.id != "" && !l.remove {
			m[l.id] = l.key
		}
	}
	return m
}

func (f *hostKeysFile) bytes() []byte {
	var b bytes.Buffer
	for _, l := range f.lines {
		switch {
		case l.remove:
		case l.id == "":
			b.WriteString(l.raw + "\n")
		default:
			b.WriteString(l.id + " " + l.key.Type() + " " + base64.StdEncoding.EncodeToString(l.key.Marshal()) + "\n")
		}
	}
	return b.Bytes()
}
