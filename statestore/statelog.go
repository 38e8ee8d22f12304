package statestore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// StateLog keeps a state in a store at the cost of what changed, as
// package state's Journal keeps a file (it is that Journal's Sink): the
// state object (Name) written whole now and then, and one line object per
// save in between ("<Name>.journal/000000001", numbered anew after each
// whole write), created only if absent, and kept only if the state object
// is still the version this writer wrote or read both before and after
// the create. The state written whole first claims the next line's name
// (an empty line object), then replaces the state object (If-Match) and
// removes the lines. So every line name is taken once, by one writer,
// and another writer — a broken lock — is a *ConflictError at the next
// save, whichever of a line and a whole write lands first: a save either
// lands where readers see it or fails.
type StateLog struct {
	Store Store
	Name  string
	// Base is the state object's version (NoVersion: none) and Lines the
	// line objects of its generation, in order, as ReadState returned
	// them or this log wrote them.
	Base  string
	Lines []Entry
	// OnConflict, when set, words a conflict for the caller.
	OnConflict func(error) error
	// Timeout bounds one save's requests; 0 is 2 minutes. They run even
	// when the caller's work was cancelled: the last state is stored.
	Timeout time.Duration
	// Fence, when set, is asked before every save: an error (the
	// writer's lock is no longer its own) writes nothing.
	Fence func() error
}

// fenced is Fence's answer, nil without one.
func (l *StateLog) fenced() error {
	if l.Fence == nil {
		return nil
	}
	return l.Fence()
}

func journalPrefix(name string) string { return name + ".journal/" }

// ReadState reads a state kept by a StateLog: the state object (nil Data
// when none), its lines concatenated in order as a journal file, and the
// line objects. A state written whole between the reads is read again.
func ReadState(ctx context.Context, s Store, name string) (base Object, journal []byte, lines []Entry, err error) {
	for range 5 {
		if base, journal, lines, err = readStateOnce(ctx, s, name); err != nil {
			return base, journal, lines, err
		}
		e, err := s.Stat(ctx, name)
		if errors.Is(err, ErrNotFound) {
			e.Version, err = NoVersion, nil
		}
		if err != nil {
			return base, journal, lines, err
		}
		if e.Version == base.Version {
			return base, journal, lines, nil
		}
	}
	return base, journal, lines, fmt.Errorf("read the state from %s: it kept changing while read; try again", s.Location())
}

func readStateOnce(ctx context.Context, s Store, name string) (base Object, journal []byte, lines []Entry, err error) {
	base, err = s.Get(ctx, name)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return base, nil, nil, err
	}
	entries, err := s.List(ctx, journalPrefix(name))
	if err != nil {
		return base, nil, nil, err
	}
	var buf bytes.Buffer
	for _, e := range entries {
		if strings.Contains(strings.TrimPrefix(e.Name, journalPrefix(name)), "/") {
			continue
		}
		obj, err := s.Get(ctx, e.Name)
		if errors.Is(err, ErrNotFound) {
			continue // removed since the listing: a newer state object holds it
		}
		if err != nil {
			return base, nil, nil, err
		}
		e.Version = obj.Version
		lines = append(lines, e)
		if len(obj.Data) == 0 {
			continue // a whole write's claim: no save
		}
		buf.Write(obj.Data)
		if !bytes.HasSuffix(obj.Data, []byte("\n")) {
			buf.WriteByte('\n')
		}
	}
	return base, buf.Bytes(), lines, nil
}

func (l *StateLog) ctx() (context.Context, context.CancelFunc) {
	if l.Timeout <= 0 {
		l.Timeout = 2 * time.Minute
	}
	return context.WithTimeout(context.Background(), l.Timeout)
}

func (l *StateLog) conflict(err error) error {
	if errors.Is(err, ErrConflict) && l.OnConflict != nil {
		return l.OnConflict(err)
	}
	return err
}

// Whole stores the state written whole and removes the lines. It claims
// the next line's name before it replaces the state object: a line that
// another writer added unseen holds that name already (a conflict, and
// nothing is replaced), and a line that comes after the claim is refused.
func (l *StateLog) Whole(_ int64, data []byte) error {
	if err := l.fenced(); err != nil {
		return err
	}
	ctx, cancel := l.ctx()
	defer cancel()
	claim := l.lineName(len(l.Lines) + 1)
	cv, err := l.Store.Put(ctx, claim, nil, NoVersion)
	if err != nil {
		return l.conflict(err)
	}
	// The claim is one of the generation's lines now: removed with them,
	// and a retry after a failed write claims the name after it.
	l.Lines = append(l.Lines, Entry{Name: claim, Version: cv})
	v, err := l.Store.Put(ctx, l.Name, data, l.Base)
	if err != nil {
		return l.conflict(err)
	}
	l.Base = v
	for _, e := range l.Lines {
		if err := l.Store.Delete(ctx, e.Name, e.Version); err != nil && !errors.Is(err, ErrNotFound) {
			return l.conflict(err)
		}
	}
	l.Lines = nil
	return nil
}

func (l *StateLog) lineName(n int) string { return fmt.Sprintf("%s%09d", journalPrefix(l.Name), n) }

// checkBase says the state object is still the version this log wrote or
// read (a *ConflictError otherwise).
func (l *StateLog) checkBase(ctx context.Context) error {
	e, err := l.Store.Stat(ctx, l.Name)
	have := e.Version
	if errors.Is(err, ErrNotFound) {
		have, err = NoVersion, nil
	}
	if err != nil {
		return err
	}
	if have != l.Base {
		return l.conflict(&ConflictError{Store: l.Store.Location(), Name: l.Name, Want: l.Base, Have: have})
	}
	return nil
}

// Line stores one save's line. The state object is checked before the
// line is created and again after: another writer's whole write that came
// between the two requests leaves the line beside a state it does not
// belong to, which readers would skip (its serial is older) or apply to
// the wrong state, the save reported done. That line is removed again and
// the save is a conflict.
func (l *StateLog) Line(_ int64, line []byte) error {
	if err := l.fenced(); err != nil {
		return err
	}
	ctx, cancel := l.ctx()
	defer cancel()
	if err := l.checkBase(ctx); err != nil {
		return err
	}
	name := l.lineName(len(l.Lines) + 1)
	v, err := l.Store.Put(ctx, name, line, NoVersion)
	if err != nil {
		return l.conflict(err)
	}
	if err := l.checkBase(ctx); err != nil {
		if derr := l.Store.Delete(ctx, name, v); derr != nil && !errors.Is(derr, ErrNotFound) {
			return fmt.Errorf("%w; the line %s/%s it wrote stays (%w): the next run that takes the lock folds or removes it", err, l.Store.Location(), name, derr)
		}
		return err
	}
	l.Lines = append(l.Lines, Entry{Name: name, Version: v})
	return nil
}
