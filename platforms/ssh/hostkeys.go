package ssh

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"

	gossh "golang.org/x/crypto/ssh"

	"github.com/cloudtransit/transit/atomicfile"
	"github.com/cloudtransit/transit/filelock"
)

// HostKeysPath is where the cluster's pinned host keys live in stateDir.
func HostKeysPath(stateDir, cluster string) string {
	return filepath.Join(stateDir, "transit-"+cluster+".known_hosts")
}

// HostKeys pins each node's SSH host key in a file of lines
// "<hostID> <key-type> <base64>". Host ids are the machines' provider ids,
// never addresses, which clouds reuse. A key the provider reported is
// pinned before first contact (Pin); a machine without a pin has the first
// key it presents pinned (trust on first use).
//
// A HostKeys is safe for concurrent use, and several processes may share
// the file: every change locks path+".lock" (flock), re-reads the file,
// applies the change and replaces the file atomically (rename). Checking a
// pinned key takes no lock and parses the file only when it changed since
// it was last read.
type HostKeys struct {
	path string

	mu    sync.Mutex
	keys  map[string]gossh.PublicKey // as last read
	stamp fileStamp                  // of the file keys were read from
	loads int                        // parses, for tests
}

// fileStamp tells one version of the file from another. Writers replace
// the file by rename, so a new version is a new inode; an in-place edit
// changes size or mtime. The zero value matches no file.
type fileStamp struct {
	missing  bool // the file did not exist
	dev, ino uint64
	size     int64
	mtime    int64 // ns
}

func stampOf(fi fs.FileInfo) fileStamp {
	st := fileStamp{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.dev, st.ino = sys.Dev, sys.Ino
	}
	return st
}

// OpenHostKeys reads the pins in path. A missing file is an empty store; a
// malformed line is an error naming the file and the line.
func OpenHostKeys(path string) (*HostKeys, error) {
	h := &HostKeys{path: path}
	if _, err := h.current(); err != nil {
		return nil, err
	}
	return h, nil
}

// current returns the pins in the file, reading it again only when it
// changed since the last read. No lock is needed: writers rename a
// complete file into place.
func (h *HostKeys) current() (map[string]gossh.PublicKey, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	missing := fileStamp{missing: true}
	fi, err := os.Stat(h.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if h.stamp != missing {
			h.keys, h.stamp = map[string]gossh.PublicKey{}, missing
		}
		return h.keys, nil
	case err != nil:
		return nil, fmt.Errorf("host keys: %w", err)
	case h.stamp == stampOf(fi):
		return h.keys, nil
	}
	// Stamp and content from the same open file, so a concurrent rename
	// cannot pair a new stamp with old content.
	f, err := os.Open(h.path)
	if errors.Is(err, fs.ErrNotExist) {
		h.keys, h.stamp = map[string]gossh.PublicKey{}, missing
		return h.keys, nil
	}
	if err != nil {
		return nil, fmt.Errorf("host keys: %w", err)
	}
	defer func() { _ = f.Close() }()
	fi, err = f.Stat()
	if err != nil {
		return nil, fmt.Errorf("host keys: %w", err)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("host keys: %w", err)
	}
	h.loads++
	parsed, err := parseHostKeys(data)
	if err != nil {
		return nil, fmt.Errorf("host keys %s: %w", h.path, err)
	}
	h.keys, h.stamp = parsed.keys(), stampOf(fi)
	return h.keys, nil
}

// Pinned returns the key pinned for hostID in the file as it is now.
func (h *HostKeys) Pinned(hostID string) (gossh.PublicKey, bool) {
	keys, err := h.current()
	if err != nil {
		// The file is unreadable now; the last pins read stay the answer.
		h.mu.Lock()
		defer h.mu.Unlock()
		keys = h.keys
	}
	k, ok := keys[hostID]
	return k, ok
}

// Callback returns the host key callback for the machine hostID: an
// unknown machine's key is pinned and accepted, the pinned key is accepted,
// and any other key is refused with a *HostKeyChangedError. Pinning waits
// for other processes' changes as long as it takes; Dial uses a callback
// that stops waiting when its context ends.
func (h *HostKeys) Callback(hostID string) gossh.HostKeyCallback {
	return h.callback(context.Background(), hostID)
}

// callback is Callback with the wait for the file lock bounded by ctx.
func (h *HostKeys) callback(ctx context.Context, hostID string) gossh.HostKeyCallback {
	return func(addr string, _ net.Addr, key gossh.PublicKey) error {
		if err := checkHostID(hostID); err != nil {
			return err
		}
		keys, err := h.current()
		if err != nil {
			return err
		}
		if pinned, ok := keys[hostID]; ok {
			return h.compare(hostID, addr, pinned, key)
		}
		// First contact: pin under the lock, unless another process
		// pinned it meanwhile.
		var changed error
		err = h.update(ctx, func(f *hostKeysFile) bool {
			pinned, ok := f.get(hostID)
			if !ok {
				f.set(hostID, key)
				return true
			}
			changed = h.compare(hostID, addr, pinned, key)
			return false
		})
		if err != nil {
			return err
		}
		return changed
	}
}

// compare accepts key if it is the pinned one.
func (h *HostKeys) compare(hostID, addr string, pinned, key gossh.PublicKey) error {
	if bytes.Equal(pinned.Marshal(), key.Marshal()) {
		return nil
	}
	return &HostKeyChangedError{
		HostID:    hostID,
		Addr:      addr,
		File:      h.path,
		Pinned:    gossh.FingerprintSHA256(pinned),
		Presented: gossh.FingerprintSHA256(key),
	}
}

// Pin pins hostID to one of keys, the host keys its provider reported in
// authorized_keys format, before transit first connects. A pin that is
// already one of keys is kept; otherwise the strongest of keys replaces
// it (the provider knows better than a first contact). Only one key is
// pinned per machine: Dial asks sshd for the pinned key's type.
func (h *HostKeys) Pin(ctx context.Context, hostID string, keys []string) error {
	if err := checkHostID(hostID); err != nil {
		return err
	}
	parsed, err := parseProviderKeys(keys)
	if err != nil {
		return fmt.Errorf("host keys of %s: %w", hostID, err)
	}
	if len(parsed) == 0 {
		return nil
	}
	isReported := func(k gossh.PublicKey) bool {
		return slices.ContainsFunc(parsed, func(p gossh.PublicKey) bool { return bytes.Equal(p.Marshal(), k.Marshal()) })
	}
	current, err := h.current()
	if err != nil {
		return err
	}
	if pinned, ok := current[hostID]; ok && isReported(pinned) {
		return nil
	}
	best := strongest(parsed)
	return h.update(ctx, func(f *hostKeysFile) bool {
		if pinned, ok := f.get(hostID); ok {
			if isReported(pinned) {
				return false
			}
			f.remove(hostID)
		}
		f.set(hostID, best)
		return true
	})
}

// keyPreference orders host key types, strongest first.
var keyPreference = []string{
	gossh.KeyAlgoED25519,
	gossh.KeyAlgoECDSA521, gossh.KeyAlgoECDSA384, gossh.KeyAlgoECDSA256,
	gossh.KeyAlgoRSA,
}

// strongest returns the key whose type comes first in keyPreference; a
// type not listed comes last.
func strongest(keys []gossh.PublicKey) gossh.PublicKey {
	rank := func(k gossh.PublicKey) int {
		if i := slices.Index(keyPreference, k.Type()); i >= 0 {
			return i
		}
		return len(keyPreference)
	}
	return slices.MinFunc(keys, func(a, b gossh.PublicKey) int { return rank(a) - rank(b) })
}

// parseProviderKeys parses authorized_keys lines; blank lines are skipped.
func parseProviderKeys(lines []string) ([]gossh.PublicKey, error) {
	var keys []gossh.PublicKey
	for i, line := range lines {
		if strings.TrimSpace(line) == "" {
			continue
		}
		k, _, _, _, err := gossh.ParseAuthorizedKey([]byte(line))
		if err != nil {
			return nil, fmt.Errorf("key %d: %w", i+1, err)
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// Forget removes hostID's pin, e.g. once its machine is deleted. Forgetting
// an unknown id is not an error. It waits for other processes' changes as
// long as it takes; ForgetContext stops when its context ends.
func (h *HostKeys) Forget(hostID string) error {
	return h.ForgetContext(context.Background(), hostID)
}

// ForgetContext is Forget, waiting for the file lock only until ctx ends.
func (h *HostKeys) ForgetContext(ctx context.Context, hostID string) error {
	keys, err := h.current()
	if err != nil {
		return err
	}
	if _, ok := keys[hostID]; !ok {
		return nil // nothing to forget: no lock, no write
	}
	return h.update(ctx, func(f *hostKeysFile) bool { return f.remove(hostID) })
}

// update runs change on the file's current content under the file lock and
// writes the file back when change reports a modification. The lock is
// per open file, so concurrent updates in this process exclude each other
// too.
func (h *HostKeys) update(ctx context.Context, change func(*hostKeysFile) bool) error {
	unlock, err := lockFile(ctx, h.path+".lock")
	if err != nil {
		return fmt.Errorf("host keys: %w", err)
	}
	defer unlock()
	f, err := readHostKeys(h.path)
	if err != nil {
		return err
	}
	if !change(f) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(h.path), 0o700); err != nil {
		return fmt.Errorf("host keys: %w", err)
	}
	if err := atomicfile.Write(h.path, f.bytes(), 0o600); err != nil {
		return fmt.Errorf("host keys: write %s: %w", h.path, err)
	}
	return nil
}

// lockFile takes the store's inter-process lock, creating its directory.
func lockFile(ctx context.Context, path string) (unlock func(), err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	return filelock.FlockContext(ctx, path, filelock.FlockOptions{Command: "transit (host key pins)"})
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
