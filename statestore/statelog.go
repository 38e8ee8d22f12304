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
// whole write), created only if absent after checking that the state
// object is still the version this writer wrote or read. The state
// written whole replaces the state object (If-Match) and then removes the
// lines. Another writer — a broken lock — is a *ConflictError at the next
// save, either way.
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
		buf.Write(obj.Data)
		if !bytes.HasSuffix(obj.Data, []byte("\n")) {
			buf.WriteByte('\n')
		}
		e.Version = obj.Version
		lines = append(lines, e)
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

// Whole stores the state written whole and removes the lines.
func (l *StateLog) Whole(_ int64, data []byte) error {
	ctx, cancel := l.ctx()
	defer cancel()
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

// Line stores one save's line.
func (l *StateLog) Line(_ int64, line []byte) error {
	ctx, cancel := l.ctx()
	defer cancel()
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
	name := fmt.Sprintf("%s%09d", journalPrefix(l.Name), len(l.Lines)+1)
	v, err := l.Store.Put(ctx, name, line, NoVersion)
	if err != nil {
		return l.conflict(err)
	}
	l.Lines = append(l.Lines, Entry{Name: name, Version: v})
	return nil
}
