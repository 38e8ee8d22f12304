package statestore_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cloudtransit/transit/statestore"
	"github.com/cloudtransit/transit/statestore/seal"
)

var mirrorFiles = []statestore.MirrorFile{
	{File: "resources.json"},
	{File: "transit-c1.key", Sealed: true},
	{File: "transit-c1.known_hosts"},
}

func newMirror(t *testing.T, s statestore.Store, key *seal.Key) *statestore.Mirror {
	t.Helper()
	return &statestore.Mirror{Store: s, Dir: filepath.Join(t.TempDir(), "state"), Files: mirrorFiles, Key: key, KeyHint: "TRANSIT_STATE_KEY"}
}

func writeLocal(t *testing.T, m *statestore.Mirror, file, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(m.Dir, file), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func readLocal(t *testing.T, m *statestore.Mirror, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(m.Dir, file))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestMirrorRoundTrip(t *testing.T) {
	ctx := t.Context()
	s := newMemStore()
	key, _, _ := seal.Generate()
	a := newMirror(t, s, key)
	if err := a.Pull(ctx); err != nil {
		t.Fatal(err)
	}
	writeLocal(t, a, "resources.json", `{"serial":1}`)
	writeLocal(t, a, "transit-c1.key", "PRIVATE KEY")
	if err := a.Push(ctx); err != nil {
		t.Fatal(err)
	}
	stored, err := s.Get(ctx, "transit-c1.key.age")
	if err != nil || bytes.Contains(stored.Data, []byte("PRIVATE")) || !seal.Sealed(stored.Data) {
		t.Fatalf("the key as stored: %q, %v", stored.Data, err)
	}
	if _, err := s.Get(ctx, "transit-c1.key"); !errors.Is(err, statestore.ErrNotFound) {
		t.Fatalf("an unsealed copy of the key is stored: %v", err)
	}

	// Another runner, with nothing local, gets the same files.
	b := newMirror(t, s, key)
	if err := b.Pull(ctx); err != nil {
		t.Fatal(err)
	}
	if got := readLocal(t, b, "transit-c1.key"); got != "PRIVATE KEY" {
		t.Fatalf("pulled key %q", got)
	}
	if fi, err := os.Stat(b.Dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("mirror dir: %v, %v", fi.Mode(), err)
	}
	if fi, err := os.Stat(filepath.Join(b.Dir, "transit-c1.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("pulled key file: %v, %v", fi.Mode(), err)
	}
	if _, err := os.Stat(filepath.Join(b.Dir, "transit-c1.known_hosts")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a file the store lacks exists locally: %v", err)
	}

	// Only what changed is written.
	before := s.Puts.Load()
	writeLocal(t, b, "resources.json", `{"serial":2}`)
	if err := b.Push(ctx); err != nil {
		t.Fatal(err)
	}
	if n := s.Puts.Load() - before; n != 1 {
		t.Fatalf("push wrote %d objects, want 1 (only resources.json changed)", n)
	}
	// A removed file's object goes.
	if err := os.Remove(filepath.Join(b.Dir, "transit-c1.key")); err != nil {
		t.Fatal(err)
	}
	if err := b.Push(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "transit-c1.key.age"); !errors.Is(err, statestore.ErrNotFound) {
		t.Fatalf("removed file's object: %v", err)
	}
	if err := b.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(b.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("Remove left the directory")
	}
}

// A write another run made after this one pulled is never overwritten.
func TestMirrorConflict(t *testing.T) {
	ctx := t.Context()
	s := newMemStore()
	key, _, _ := seal.Generate()
	a, b := newMirror(t, s, key), newMirror(t, s, key)
	if err := a.Pull(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Pull(ctx); err != nil {
		t.Fatal(err)
	}
	writeLocal(t, a, "resources.json", "a")
	writeLocal(t, b, "resources.json", "b")
	if err := a.Push(ctx); err != nil {
		t.Fatal(err)
	}
	err := b.Push(ctx)
	if !errors.Is(err, statestore.ErrConflict) || !strings.Contains(err.Error(), "resources.json") {
		t.Fatalf("second writer: %v, want a conflict naming resources.json", err)
	}
	if got, _ := s.Get(ctx, "resources.json"); string(got.Data) != "a" {
		t.Fatalf("stored %q, want the first writer's", got.Data)
	}
}

// The retry of a write whose response was lost finds the object changed
// — by its own first attempt — and must not stop the run.
func TestMirrorLostResponse(t *testing.T) {
	ctx := t.Context()
	s := newMemStore()
	key, _, _ := seal.Generate()
	m := newMirror(t, s, key)
	if err := m.Pull(ctx); err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{"resources.json", "transit-c1.key"} {
		writeLocal(t, m, file, "v1")
		s.LostResponse.Store(true)
		if err := m.Push(ctx); err != nil {
			t.Fatalf("%s: push after a lost response: %v", file, err)
		}
		// And the next change is written over that version.
		writeLocal(t, m, file, "v2")
		if err := m.Push(ctx); err != nil {
			t.Fatalf("%s: next push: %v", file, err)
		}
	}
}

func TestMirrorKeyErrors(t *testing.T) {
	ctx := t.Context()
	s := newMemStore()
	key, _, _ := seal.Generate()
	other, _, _ := seal.Generate()
	a := newMirror(t, s, key)
	if err := a.Pull(ctx); err != nil {
		t.Fatal(err)
	}
	writeLocal(t, a, "transit-c1.key", "PRIVATE KEY")
	if err := a.Push(ctx); err != nil {
		t.Fatal(err)
	}

	none := newMirror(t, s, nil)
	err := none.Pull(ctx)
	if err == nil || !strings.Contains(err.Error(), "TRANSIT_STATE_KEY") || !strings.Contains(err.Error(), "transit-c1.key.age") {
		t.Fatalf("pull without a key: %v, want an error naming the object and TRANSIT_STATE_KEY", err)
	}
	if _, err := os.Stat(filepath.Join(none.Dir, "transit-c1.key")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a key file exists after a failed pull")
	}
	wrong := newMirror(t, s, other)
	err = wrong.Pull(ctx)
	if err == nil || !strings.Contains(err.Error(), "another key") || !strings.Contains(err.Error(), other.Recipient()) {
		t.Fatalf("pull with another key: %v", err)
	}

	// Without a key a secret is never stored in the clear.
	fresh := newMemStore()
	n := newMirror(t, fresh, nil)
	if err := n.Pull(ctx); err != nil {
		t.Fatal(err)
	}
	writeLocal(t, n, "transit-c1.key", "PRIVATE KEY")
	if err := n.Push(ctx); err == nil || !strings.Contains(err.Error(), "TRANSIT_STATE_KEY") {
		t.Fatalf("push of a secret without a key: %v", err)
	}
	if list, _ := fresh.Get(context.Background(), "transit-c1.key"); list.Data != nil {
		t.Fatal("the secret was stored")
	}
}
