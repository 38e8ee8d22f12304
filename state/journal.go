package state

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/cloudtransit/transit/districts"
)

// Journal saves a run's state at the cost of what changed: a save of one
// node's change appends one line to the journal beside the state file
// (districts.JournalPath) and fsyncs it, where Write rewrites every node.
// The state file is written whole when a save changes everything, when the
// journal has grown to a quarter of the nodes (so the rewrites cost a
// constant per save: an apply stays linear in the cluster's size), and by
// Compact when the run ends. A crash leaves the state file and the journal
// (its last line possibly cut short, which readers ignore):
// districts.LoadResources applies it, and the next lock holder compacts.
type Journal struct {
	path string
	now  func() time.Time
	// Sink, when set, gets every save after the local one: a remote
	// store keeping the same state.
	Sink Sink

	mu      sync.Mutex
	last    int64 // the last serial saved
	f       *os.File
	entries int // lines in the journal
}

// Sink keeps a copy of what a Journal writes: the state written whole, or
// one line of the journal. An error fails the save.
type Sink interface {
	Whole(serial int64, data []byte) error
	Line(serial int64, line []byte) error
}

// minEntries is how many lines the journal may hold whatever the size of
// the state: rewriting a small state on every few saves would cost more
// than the lines.
const minEntries = 64

// NewJournal saves to path's journal, starting after serial (the loaded
// state's). now nil means time.Now.
func NewJournal(path string, serial int64, now func() time.Time) *Journal {
	if now == nil {
		now = time.Now
	}
	return &Journal{path: path, now: now, last: serial}
}

// Save persists r, whose changes since the last save are the nodes with
// the ids in nodes, its groups when groups is set, and its other fields;
// all says anything may have changed. It sets Serial, UpdatedAt,
// Type and Version on what it writes; r's nodes are sorted by id (as the
// loop keeps them). A failed save does not use up a serial.
func (j *Journal) Save(r districts.Resources, nodes []string, groups, all bool) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	next := max(j.last, r.Serial) + 1
	r.Serial = next
	r.UpdatedAt = j.now().UTC()
	if r.Type == "" {
		r.Type = "resources"
	}
	if r.Version == 0 {
		r.Version = districts.ResourcesVersion
	}
	if all || j.entries >= max(minEntries, len(r.Nodes)/4) {
		if err := j.rewrite(r); err != nil {
			return err
		}
		j.last = next
		return nil
	}
	e := districts.JournalEntry{Header: r}
	e.Header.Nodes, e.Header.SecurityGroups = nil, nil
	for _, id := range nodes {
		if i, ok := slices.BinarySearchFunc(r.Nodes, id, func(n districts.Node, id string) int { return districts.CompareNodeIDs(n.ID, id) }); ok {
			e.Nodes = append(e.Nodes, r.Nodes[i])
		}
	}
	if groups {
		gs := r.SecurityGroups
		if gs == nil {
			gs = []districts.SecurityGroup{}
		}
		e.Groups = &gs
	}
	line, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("write %s: encode: %w", districts.JournalPath(j.path), err)
	}
	line = append(line, '\n')
	if err := j.append(line); err != nil {
		return err
	}
	if j.Sink != nil {
		if err := j.Sink.Line(next, line); err != nil {
			return err
		}
	}
	j.entries++
	j.last = next
	return nil
}

func (j *Journal) append(line []byte) error {
	path := districts.JournalPath(j.path)
	if j.f == nil {
		// A run killed mid-save left its last line cut short: cut it off
		// before appending, or it would be a broken line in the middle.
		if err := dropTornLine(path); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		j.f = f
	}
	if _, err := j.f.Write(line); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := j.f.Sync(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// dropTornLine truncates a journal whose last line has no newline (a save
// cut short, which never happened) to its last whole line.
func dropTornLine(path string) error {
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case len(data) == 0 || data[len(data)-1] == '\n':
		return nil
	}
	return os.Truncate(path, int64(bytes.LastIndexByte(data, '\n')+1))
}

// rewrite writes r whole, then removes the journal: a crash between the
// two leaves lines whose serials the state file already has, which
// readers skip.
func (j *Journal) rewrite(r districts.Resources) error {
	data, err := Encode(r)
	if err != nil {
		return fmt.Errorf("write %s: %w", j.path, err)
	}
	if err := writeData(j.path, data); err != nil {
		return err
	}
	if err := j.dropJournal(); err != nil {
		return err
	}
	if j.Sink != nil {
		return j.Sink.Whole(r.Serial, data)
	}
	return nil
}

func (j *Journal) dropJournal() error {
	if j.f != nil {
		_ = j.f.Close()
		j.f = nil
	}
	j.entries = 0
	if err := os.Remove(districts.JournalPath(j.path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", districts.JournalPath(j.path), err)
	}
	return nil
}

// Close writes the state whole if the journal holds lines (as Compact,
// and to the Sink), and closes the journal.
func (j *Journal) Close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f != nil {
		_ = j.f.Close()
		j.f = nil
	}
	if _, err := os.Stat(districts.JournalPath(j.path)); errors.Is(err, fs.ErrNotExist) {
		j.entries = 0
		return nil
	}
	r, err := districts.LoadResources(j.path)
	if err != nil {
		return err
	}
	return j.rewrite(r)
}

// Compact writes the state at path whole, with its journal applied, and
// removes the journal; without a journal it does nothing. Only the holder
// of the state's lock may call it.
func Compact(path string) error {
	return NewJournal(path, 0, nil).Close()
}
