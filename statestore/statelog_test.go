package statestore_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/cloudtransit/transit/statestore"
)

// Lines go to objects of their own; a state written whole by another
// writer stops the next line; a whole write removes the lines.
func TestStateLog(t *testing.T) {
	ctx := t.Context()
	s := newMemStore()
	l := &statestore.StateLog{Store: s, Name: "resources.json"}
	if err := l.Whole(1, []byte(`{"serial":1}`)); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"a\n", "b\n"} {
		if err := l.Line(2, []byte(line)); err != nil {
			t.Fatal(err)
		}
	}
	base, journal, lines, err := statestore.ReadState(ctx, s, "resources.json")
	if err != nil || string(base.Data) != `{"serial":1}` || string(journal) != "a\nb\n" || len(lines) != 2 {
		t.Fatalf("read: %q %q %d %v", base.Data, journal, len(lines), err)
	}
	// Another writer replaces the state object: the next line conflicts.
	if _, err := s.Put(ctx, "resources.json", []byte("other"), base.Version); err != nil {
		t.Fatal(err)
	}
	if err := l.Line(3, []byte("c\n")); !errors.Is(err, statestore.ErrConflict) {
		t.Fatalf("a line after another writer's state: %v, want a conflict", err)
	}
	if err := l.Whole(3, []byte("mine")); !errors.Is(err, statestore.ErrConflict) {
		t.Fatalf("a whole write after another writer's: %v, want a conflict", err)
	}
	// A fresh log from what is read: its whole write removes the lines.
	base, _, lines, _ = statestore.ReadState(ctx, s, "resources.json")
	fresh := &statestore.StateLog{Store: s, Name: "resources.json", Base: base.Version, Lines: lines}
	if err := fresh.Whole(4, []byte("folded")); err != nil {
		t.Fatal(err)
	}
	if left, _ := s.List(ctx, "resources.json.journal/"); len(left) != 0 {
		t.Fatalf("lines left after a whole write: %v", left)
	}
	got, _ := s.Get(ctx, "resources.json")
	if !strings.Contains(string(got.Data), "folded") {
		t.Fatalf("state %q", got.Data)
	}
}
