package ssh

import (
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	gossh "golang.org/x/crypto/ssh"
)

func TestEnsureKeyCreates(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	k, err := EnsureKey(dir, "prod")
	if err != nil {
		t.Fatal(err)
	}
	if want := KeyPath(dir, "prod"); k.Path != want {
		t.Errorf("Path = %q, want %q", k.Path, want)
	}
	assertMode(t, k.Path, 0o600)
	assertMode(t, k.Path+".pub", 0o644)

	if !strings.HasPrefix(k.AuthorizedKey, "ssh-ed25519 AAAA") || !strings.HasSuffix(k.AuthorizedKey, " transit-prod") ||
		strings.Contains(k.AuthorizedKey, "\n") {
		t.Errorf("AuthorizedKey = %q, want one line \"ssh-ed25519 AAAA... transit-prod\"", k.AuthorizedKey)
	}
	pub, comment, _, _, err := gossh.ParseAuthorizedKey([]byte(k.AuthorizedKey))
	if err != nil {
		t.Fatalf("AuthorizedKey does not parse: %v", err)
	}
	if comment != "transit-prod" {
		t.Errorf("comment = %q, want transit-prod", comment)
	}
	if string(pub.Marshal()) != string(k.Signer.PublicKey().Marshal()) {
		t.Error("AuthorizedKey is not the signer's public key")
	}
	pubFile, err := os.ReadFile(k.Path + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(k.AuthorizedKey+"\n", string(pubFile)); diff != "" {
		t.Errorf(".pub file (-want +got):\n%s", diff)
	}
	// The file is in OpenSSH format.
	data, err := os.ReadFile(k.Path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(data), "-----BEGIN OPENSSH PRIVATE KEY-----\n") {
		t.Errorf("private key file starts %q, want an OpenSSH private key", strings.SplitN(string(data), "\n", 2)[0])
	}
	// No temporary files are left behind.
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if diff := cmp.Diff([]string{"transit-prod.key", "transit-prod.key.pub"}, names); diff != "" {
		t.Errorf("state dir (-want +got):\n%s", diff)
	}
}

func TestEnsureKeyIdempotent(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first, err := EnsureKey(dir, "c")
	if err != nil {
		t.Fatal(err)
	}
	// A lost .pub file is written again.
	if err := os.Remove(first.Path + ".pub"); err != nil {
		t.Fatal(err)
	}
	second, err := EnsureKey(dir, "c")
	if err != nil {
		t.Fatal(err)
	}
	if first.AuthorizedKey != second.AuthorizedKey {
		t.Errorf("second EnsureKey returned another key:\n%s\n%s", first.AuthorizedKey, second.AuthorizedKey)
	}
	assertMode(t, second.Path+".pub", 0o644)
}

func TestEnsureKeyConcurrent(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const n = 16
	keys := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			k, err := EnsureKey(dir, "race")
			errs[i] = err
			if err == nil {
				keys[i] = k.AuthorizedKey
			}
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("EnsureKey #%d: %v", i, errs[i])
		}
		if keys[i] != keys[0] {
			t.Errorf("EnsureKey #%d returned %q, #0 returned %q", i, keys[i], keys[0])
		}
	}
}

func TestEnsureKeyRefusesOpenPermissions(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	k, err := EnsureKey(dir, "c")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(k.Path, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = EnsureKey(dir, "c")
	if err == nil {
		t.Fatal("EnsureKey accepted a private key readable by others")
	}
	if want := "chmod 600 " + k.Path; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not say %q", err, want)
	}
}

func TestEnsureKeyCorrupt(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := KeyPath(dir, "c")
	if err := os.WriteFile(path, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := EnsureKey(dir, "c")
	if err == nil {
		t.Fatal("EnsureKey accepted a corrupt key file")
	}
	if !strings.Contains(err.Error(), path) {
		t.Errorf("error %q does not name %s", err, path)
	}
	// The corrupt file is left for the user to look at.
	data, err := os.ReadFile(path)
	if err != nil || string(data) != "not a key\n" {
		t.Errorf("key file now %q, %v; want it untouched", data, err)
	}
}

func TestEnsureKeyInvalidCluster(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"", "a/b", ".."} {
		if _, err := EnsureKey(t.TempDir(), name); err == nil {
			t.Errorf("EnsureKey(%q) succeeded, want an error", name)
		}
	}
}

func assertMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Mode().Perm(); got != want {
		t.Errorf("%s: mode %04o, want %04o", path, got, want)
	}
}
