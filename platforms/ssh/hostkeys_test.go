package ssh

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	gossh "golang.org/x/crypto/ssh"

	"github.com/cloudtransit/transit/filelock"
)

func newPublicKey(t *testing.T) gossh.PublicKey {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	k, err := gossh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func openHostKeys(t *testing.T, path string) *HostKeys {
	t.Helper()
	h, err := OpenHostKeys(path)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func sameKey(a, b gossh.PublicKey) bool {
	return a != nil && b != nil && string(a.Marshal()) == string(b.Marshal())
}

func TestHostKeysTrustOnFirstUse(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "transit-c.known_hosts")
	h := openHostKeys(t, path)
	k1, k2 := newPublicKey(t), newPublicKey(t)

	if _, ok := h.Pinned("i-1"); ok {
		t.Fatal("empty store has a pin")
	}
	if err := h.Callback("i-1")("10.0.0.1:22", nil, k1); err != nil {
		t.Fatalf("first contact: %v", err)
	}
	if got, ok := h.Pinned("i-1"); !ok || !sameKey(got, k1) {
		t.Fatal("first contact did not pin the presented key")
	}
	assertMode(t, path, 0o600)
	if err := h.Callback("i-1")("10.0.0.1:22", nil, k1); err != nil {
		t.Fatalf("same key: %v", err)
	}

	err := h.Callback("i-1")("10.0.0.9:22", nil, k2)
	var changed *HostKeyChangedError
	if !errors.As(err, &changed) {
		t.Fatalf("changed key: got %v, want *HostKeyChangedError", err)
	}
	want := &HostKeyChangedError{
		HostID: "i-1", Addr: "10.0.0.9:22", File: path,
		Pinned: gossh.FingerprintSHA256(k1), Presented: gossh.FingerprintSHA256(k2),
	}
	if diff := cmp.Diff(want, changed); diff != "" {
		t.Errorf("HostKeyChangedError (-want +got):\n%s", diff)
	}
	wantMsg := fmt.Sprintf("host key of i-1 (10.0.0.9:22) changed: pinned %s, presented %s; if this machine was really rebuilt, delete its line from %s",
		gossh.FingerprintSHA256(k1), gossh.FingerprintSHA256(k2), path)
	if err.Error() != wantMsg {
		t.Errorf("message:\n got %s\nwant %s", err, wantMsg)
	}
	if !strings.HasPrefix(changed.Pinned, "SHA256:") {
		t.Errorf("Pinned = %q, want a SHA256 fingerprint", changed.Pinned)
	}
	if got, _ := h.Pinned("i-1"); !sameKey(got, k1) {
		t.Error("a refused key replaced the pin")
	}

	// The pins survive a reopen; another host's pin is independent.
	if err := h.Callback("i-2")("10.0.0.1:22", nil, k2); err != nil {
		t.Fatalf("second host: %v", err)
	}
	h2 := openHostKeys(t, path)
	if got, ok := h2.Pinned("i-1"); !ok || !sameKey(got, k1) {
		t.Error("reopened store lost the pin of i-1")
	}
	if got, ok := h2.Pinned("i-2"); !ok || !sameKey(got, k2) {
		t.Error("reopened store lost the pin of i-2")
	}
}

func TestHostKeysFileFormat(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "known_hosts")
	k := newPublicKey(t)
	header := "# pinned by transit\n\n"
	if err := os.WriteFile(path, []byte(header), 0o600); err != nil {
		t.Fatal(err)
	}
	h := openHostKeys(t, path)
	if err := h.Callback("i-abc")("h:22", nil, k); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := header + "i-abc " + strings.TrimSuffix(string(gossh.MarshalAuthorizedKey(k)), "\n") + "\n"
	if diff := cmp.Diff(want, string(got)); diff != "" {
		t.Errorf("file (-want +got):\n%s", diff)
	}
}

func TestHostKeysForget(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "known_hosts")
	h := openHostKeys(t, path)
	k1, k2 := newPublicKey(t), newPublicKey(t)
	for id, k := range map[string]gossh.PublicKey{"i-1": k1, "i-2": k2} {
		if err := h.Callback(id)("h:22", nil, k); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.Forget("i-1"); err != nil {
		t.Fatal(err)
	}
	if err := h.Forget("i-unknown"); err != nil {
		t.Errorf("Forget of an unknown id: %v", err)
	}
	if _, ok := h.Pinned("i-1"); ok {
		t.Error("i-1 still pinned after Forget")
	}
	h2 := openHostKeys(t, path)
	if _, ok := h2.Pinned("i-1"); ok {
		t.Error("i-1 still pinned on disk after Forget")
	}
	if _, ok := h2.Pinned("i-2"); !ok {
		t.Error("Forget(i-1) dropped i-2")
	}
	// A forgotten machine's new key is pinned afresh.
	if err := h.Callback("i-1")("h:22", nil, k2); err != nil {
		t.Errorf("new key after Forget: %v", err)
	}
}

func TestOpenHostKeysMissingFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "none", "known_hosts")
	h := openHostKeys(t, path)
	if _, ok := h.Pinned("x"); ok {
		t.Error("missing file has pins")
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("OpenHostKeys created the file: %v", err)
	}
}

func TestOpenHostKeysMalformed(t *testing.T) {
	t.Parallel()
	good := "i-1 " + strings.TrimSpace(string(gossh.MarshalAuthorizedKey(newPublicKey(t))))
	other := "i-2 " + strings.TrimSpace(string(gossh.MarshalAuthorizedKey(newPublicKey(t))))
	tests := []struct {
		name, bad, want string
	}{
		{"two fields", "i-2 ssh-ed25519", "line 3: want"},
		{"four fields", other + " extra", "line 3: want"},
		{"bad base64", "i-2 ssh-ed25519 !!!", "line 3: key of i-2 is not base64"},
		{"not a key", "i-2 ssh-ed25519 AAAA", "line 3: key of i-2"},
		{"type mismatch", strings.Replace(other, "ssh-ed25519", "ssh-rsa", 1), "line 3: key of i-2 is ssh-ed25519, line says ssh-rsa"},
		{"duplicate", good, "line 3: i-1 is already pinned on line 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "known_hosts")
			if err := os.WriteFile(path, []byte("# comment\n"+good+"\n"+tt.bad+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := OpenHostKeys(path)
			if err == nil {
				t.Fatal("OpenHostKeys accepted a malformed file")
			}
			if !strings.Contains(err.Error(), path+": "+tt.want) {
				t.Errorf("error %q, want it to contain %q", err, path+": "+tt.want)
			}
		})
	}
}

func TestHostKeysBadHostID(t *testing.T) {
	t.Parallel()
	h := openHostKeys(t, filepath.Join(t.TempDir(), "known_hosts"))
	for _, id := range []string{"", "a b", "#x", "a\nb"} {
		if err := h.Callback(id)("h:22", nil, newPublicKey(t)); err == nil {
			t.Errorf("Callback(%q) accepted a host id the file cannot hold", id)
		}
	}
}

// Two stores on the same file, as in two transit processes, keep each
// other's pins.
func TestHostKeysTwoStoresOneFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "known_hosts")
	a, b := openHostKeys(t, path), openHostKeys(t, path)
	keys := map[string]gossh.PublicKey{}
	for i := range 20 {
		keys[fmt.Sprintf("i-%02d", i)] = newPublicKey(t)
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(keys))
	i := 0
	for id, k := range keys {
		store := a
		if i%2 == 1 {
			store = b
		}
		i++
		wg.Go(func() { errs <- store.Callback(id)("h:22", nil, k) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	got := openHostKeys(t, path)
	for id, k := range keys {
		if p, ok := got.Pinned(id); !ok || !sameKey(p, k) {
			t.Errorf("pin of %s lost", id)
		}
	}
	// b learns a's pins when it next touches the file: a different key
	// for a host a pinned is refused by b.
	for id := range keys {
		err := b.Callback(id)("h:22", nil, newPublicKey(t))
		if !errors.As(err, new(*HostKeyChangedError)) {
			t.Errorf("b accepted a changed key for %s: %v", id, err)
		}
	}
}

// authorizedLine is k in authorized_keys format, as a provider reports it.
func authorizedLine(k gossh.PublicKey) string {
	return strings.TrimSpace(string(gossh.MarshalAuthorizedKey(k)))
}

// Checking a pinned key neither waits for the file lock nor parses the
// file again: another process holding the lock (a slow write, a hung
// transit) must not stall every connection.
func TestHostKeysCheckTakesNoLock(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "known_hosts")
	h := openHostKeys(t, path)
	k := newPublicKey(t)
	if err := h.Callback("i-1")("h:22", nil, k); err != nil {
		t.Fatal(err)
	}
	unlock, err := filelock.FlockContext(t.Context(), path+".lock", filelock.FlockOptions{Command: "test holds the pins"})
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	h.Pinned("i-1") // reads the file once after the pin changed it
	h.mu.Lock()
	loads := h.loads
	h.mu.Unlock()

	done := make(chan error, 1)
	go func() {
		for range 100 {
			if err := h.Callback("i-1")("h:22", nil, k); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("checking a pinned key waits for the file lock")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.loads != loads {
		t.Errorf("100 checks parsed the unchanged file %d times", h.loads-loads)
	}
}

// A store sees changes other stores (other processes) made to the file.
func TestHostKeysReloadOnChange(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "known_hosts")
	a, b := openHostKeys(t, path), openHostKeys(t, path)
	k1, k2 := newPublicKey(t), newPublicKey(t)
	if err := a.Callback("i-1")("h:22", nil, k1); err != nil {
		t.Fatal(err)
	}
	if got, ok := b.Pinned("i-1"); !ok || !sameKey(got, k1) {
		t.Error("b does not see a's pin")
	}
	if err := b.Forget("i-1"); err != nil {
		t.Fatal(err)
	}
	if _, ok := a.Pinned("i-1"); ok {
		t.Error("a still has the pin b forgot")
	}
	// A machine rebuilt under the same id is a new host for a too.
	if err := a.Callback("i-1")("h:22", nil, k2); err != nil {
		t.Errorf("a refused the new machine after b forgot the old one: %v", err)
	}
	// A person edits the file in place.
	if err := os.WriteFile(path, []byte("i-1 "+authorizedLine(k1)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := a.Callback("i-1")("h:22", nil, k2); !errors.As(err, new(*HostKeyChangedError)) {
		t.Errorf("a ignored the edited pin: %v", err)
	}
	// And deletes it.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, ok := a.Pinned("i-1"); ok {
		t.Error("a keeps a pin whose file was deleted")
	}
}

func TestHostKeysPin(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "known_hosts")
	h := openHostKeys(t, path)
	ed := newPublicKey(t)
	ecdsaKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ec, err := gossh.NewPublicKey(&ecdsaKey.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	reported := []string{authorizedLine(ec) + " root@node", "", authorizedLine(ed)}

	// Pinned before first contact: the strongest key, and nothing else.
	if err := h.Pin(t.Context(), "i-1", reported); err != nil {
		t.Fatal(err)
	}
	if got, ok := h.Pinned("i-1"); !ok || !sameKey(got, ed) {
		t.Fatalf("pinned %v, want the ed25519 key", got)
	}
	if err := h.Callback("i-1")("h:22", nil, newPublicKey(t)); !errors.As(err, new(*HostKeyChangedError)) {
		t.Errorf("first contact with a key the provider did not report: %v, want *HostKeyChangedError", err)
	}
	if err := h.Callback("i-1")("h:22", nil, ed); err != nil {
		t.Errorf("first contact with the reported key: %v", err)
	}

	// Pinning again what is pinned writes nothing.
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Pin(t.Context(), "i-1", reported); err != nil {
		t.Fatal(err)
	}
	if after, err := os.Stat(path); err != nil || !os.SameFile(before, after) {
		t.Errorf("pinning the same keys rewrote the file (%v)", err)
	}

	// A pin made on first contact that the provider confirms is kept; one
	// it contradicts is replaced.
	if err := h.Callback("i-2")("h:22", nil, ec); err != nil {
		t.Fatal(err)
	}
	if err := h.Pin(t.Context(), "i-2", reported); err != nil {
		t.Fatal(err)
	}
	if got, _ := h.Pinned("i-2"); !sameKey(got, ec) {
		t.Error("a confirmed pin was replaced")
	}
	impostor := newPublicKey(t)
	if err := h.Callback("i-3")("h:22", nil, impostor); err != nil {
		t.Fatal(err)
	}
	if err := h.Pin(t.Context(), "i-3", reported); err != nil {
		t.Fatal(err)
	}
	if got, _ := h.Pinned("i-3"); !sameKey(got, ed) {
		t.Error("a pin the provider contradicts was kept")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(data), "i-3 "); n != 1 {
		t.Errorf("i-3 has %d lines:\n%s", n, data)
	}

	// No keys: nothing to pin. Bad keys: an error naming the machine.
	if err := h.Pin(t.Context(), "i-4", nil); err != nil {
		t.Error(err)
	}
	if _, ok := h.Pinned("i-4"); ok {
		t.Error("pinned without keys")
	}
	if err := h.Pin(t.Context(), "i-4", []string{"ssh-ed25519 notbase64"}); err == nil || !strings.Contains(err.Error(), "i-4") {
		t.Errorf("bad key: %v, want an error naming i-4", err)
	}
}

// A first contact while another process holds the pins' lock stops
// waiting when the caller's context ends, and says who holds it.
func TestHostKeysFirstContactHonoursContext(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "known_hosts")
	h := openHostKeys(t, path)
	unlock, err := filelock.FlockContext(t.Context(), path+".lock", filelock.FlockOptions{Command: "stuck transit"})
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	err = h.callback(ctx, "i-1")("h:22", nil, newPublicKey(t))
	if !errors.Is(err, filelock.ErrLocked) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), `"stuck transit"`) {
		t.Errorf("got %v, want the lock holder and context.DeadlineExceeded", err)
	}
	if err := h.ForgetContext(ctx, "i-1"); err != nil {
		t.Errorf("forgetting an unknown host needs no lock: %v", err)
	}
}
