package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cloudtransit/transit/statestore"
)

// beforePut runs hook once, just before the first Put of a name starting
// with prefix reaches the store: another writer's requests landing
// between two of this writer's.
type beforePut struct {
	statestore.Store
	prefix string
	once   sync.Once
	hook   func()
}

func (b *beforePut) Put(ctx context.Context, name string, data []byte, ifVersion string) (string, error) {
	if strings.HasPrefix(name, b.prefix) {
		b.once.Do(b.hook)
	}
	return b.Store.Put(ctx, name, data, ifVersion)
}

// readState reads the state a StateLog keeps as name, as a reader does.
func readState(t *testing.T, s statestore.Store, name string) (base statestore.Object, journal string, lines []statestore.Entry) {
	t.Helper()
	base, j, lines, err := statestore.ReadState(t.Context(), s, name)
	if err != nil {
		t.Fatalf("ReadState: %v", err)
	}
	return base, string(j), lines
}

// twoWriters are two StateLogs of the state name from one read of it,
// written whole first: two runs holding one lock (a broken lock).
func twoWriters(t *testing.T, s statestore.Store, name string) (a, b *statestore.StateLog) {
	t.Helper()
	if err := (&statestore.StateLog{Store: s, Name: name}).Whole(1, []byte("whole 1\n")); err != nil {
		t.Fatalf("the first whole write: %v", err)
	}
	base, _, lines := readState(t, s, name)
	a = &statestore.StateLog{Store: s, Name: name, Base: base.Version, Lines: lines}
	b = &statestore.StateLog{Store: s, Name: name, Base: base.Version, Lines: slices.Clone(lines)}
	return a, b
}

// wantState checks what a reader sees: the state object's content and
// the journal's lines.
func wantState(t *testing.T, s statestore.Store, name, whole, journal, what string) {
	t.Helper()
	base, got, _ := readState(t, s, name)
	if string(base.Data) != whole || got != journal {
		t.Fatalf("%s: a reader sees %q with the journal %q, want %q with %q", what, base.Data, got, whole, journal)
	}
}

// A journal line and another writer's whole write of the state, racing: a
// save either lands where readers see it or fails with a conflict, and
// the winner's next saves land too. The journal's line is a check of the
// state object and a create of the line, two requests; a whole write
// between them must not leave a line that readers skip while its writer
// was told it was saved.
func lineRacingWhole(t *testing.T, s statestore.Store) {
	t.Run("WholeBetweenCheckAndCreate", func(t *testing.T) {
		const name = "between.json"
		a, b := twoWriters(t, s, name)
		var wholeErr error
		a.Store = &beforePut{Store: s, prefix: name + ".journal/", hook: func() {
			wholeErr = b.Whole(3, []byte("whole 3\n"))
		}}
		lineErr := a.Line(2, []byte("line 2\n"))
		if wholeErr != nil {
			t.Fatalf("the whole write that came first: %v", wholeErr)
		}
		if lineErr == nil {
			t.Fatal("the line written after another writer's whole write was reported saved; readers skip it")
		}
		wantConflict(t, s, lineErr, name, a.Base, "the line that came second")
		wantState(t, s, name, "whole 3\n", "", "after the race")
		// The winner's next line is not in the loser's way.
		if err := b.Line(4, []byte("line 4\n")); err != nil {
			t.Fatalf("the winner's next line: %v", err)
		}
		wantState(t, s, name, "whole 3\n", "line 4\n", "after the winner's next line")
	})
	t.Run("WholeAfterUnseenLine", func(t *testing.T) {
		const name = "unseen.json"
		a, b := twoWriters(t, s, name)
		if err := a.Line(2, []byte("line 2\n")); err != nil {
			t.Fatal(err)
		}
		wantState(t, s, name, "whole 1\n", "line 2\n", "after the line")
		// b never read the line: writing the state whole would lose it.
		err := b.Whole(3, []byte("whole 3\n"))
		if err == nil {
			t.Fatal("a whole write by a writer that did not read the journal's last line succeeded: the line is lost")
		}
		if !errors.Is(err, statestore.ErrConflict) {
			t.Fatalf("the whole write that did not read the last line: %v, want a conflict", err)
		}
		wantState(t, s, name, "whole 1\n", "line 2\n", "after the refused whole write")
		if err := a.Line(4, []byte("line 4\n")); err != nil {
			t.Fatalf("the winner's next line: %v", err)
		}
		if err := a.Whole(5, []byte("whole 5\n")); err != nil {
			t.Fatalf("the winner's whole write: %v", err)
		}
		wantState(t, s, name, "whole 5\n", "", "after the winner's whole write")
		if left, err := s.List(t.Context(), name+".journal/"); err != nil || len(left) != 0 {
			t.Fatalf("lines left after a whole write: %v (%v)", entryNames(left), err)
		}
	})
	t.Run("AtOnce", func(t *testing.T) {
		const name, rounds = "at-once.json", 6
		for round := range rounds {
			a, b := twoWriters(t, s, name)
			if round > 0 {
				// Start from a journal that has lines.
				if err := a.Line(2, []byte("line 2\n")); err != nil {
					t.Fatal(err)
				}
				b.Lines = slices.Clone(a.Lines)
			}
			var lineErr, wholeErr error
			var wg sync.WaitGroup
			start := make(chan struct{})
			line := fmt.Sprintf("line of round %d\n", round)
			wg.Go(func() {
				<-start
				lineErr = a.Line(3, []byte(line))
			})
			wg.Go(func() {
				<-start
				wholeErr = b.Whole(4, []byte("whole 4\n"))
			})
			close(start)
			wg.Wait()
			_, journal, _ := readState(t, s, name)
			switch {
			case lineErr == nil && wholeErr == nil:
				t.Fatalf("round %d: both the line and the whole write were saved; the reader sees the journal %q", round, journal)
			case lineErr == nil:
				if !errors.Is(wholeErr, statestore.ErrConflict) || !strings.HasSuffix(journal, line) {
					t.Fatalf("round %d: the line won, the whole write says %v, the reader sees the journal %q", round, wholeErr, journal)
				}
			case wholeErr == nil:
				if !errors.Is(lineErr, statestore.ErrConflict) {
					t.Fatalf("round %d: the whole write won, the line says %v, want a conflict", round, lineErr)
				}
				wantState(t, s, name, "whole 4\n", "", fmt.Sprintf("round %d, the whole write won", round))
			default:
				t.Fatalf("round %d: neither won: line %v, whole write %v", round, lineErr, wholeErr)
			}
			// The next round starts afresh.
			base, _, lines := readState(t, s, name)
			fresh := &statestore.StateLog{Store: s, Name: name, Base: base.Version, Lines: lines}
			if err := fresh.Whole(5, nil); err != nil {
				t.Fatal(err)
			}
			if err := s.Delete(t.Context(), name, fresh.Base); err != nil {
				t.Fatal(err)
			}
		}
	})
}
