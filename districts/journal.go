package districts

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// JournalPath is the journal beside a state file: what a run changed
// since the state file was last written whole, one JSON line per save
// (JournalEntry). Saving one node's change costs one line, not a rewrite
// of every node: an apply stays linear in the cluster's size. A run
// writes the state file whole again when it ends (and when the journal
// has grown to a fair share of it) and removes the journal; a run killed
// before leaves it, and the next reader applies it.
func JournalPath(statePath string) string { return statePath + ".journal" }

// JournalEntry is one save: the state's fields but its nodes and groups
// (Header), the nodes added or changed, and the groups when they changed.
type JournalEntry struct {
	Header Resources        `json:"header"`
	Nodes  []Node           `json:"nodes,omitempty"`
	Groups *[]SecurityGroup `json:"groups,omitempty"`
}

// errJournalGap: the journal's lines do not follow the state file read.
var errJournalGap = errors.New("the journal does not follow the state file")

// applyJournal applies the entries of journal newer than base's serial to
// base. An unfinished last line (a save cut short) is ignored; any other
// line that does not parse is an error naming it.
func applyJournal(base Resources, file string, journal []byte) (Resources, error) {
	lines := bytes.Split(journal, []byte("\n"))
	pos := make(map[string]int, len(base.Nodes))
	for i, n := range base.Nodes {
		pos[n.ID] = i
	}
	changed := false
	for i, line := range lines {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var e JournalEntry
		if err := json.Unmarshal(line, &e); err != nil {
			if i == len(lines)-1 {
				break // the last save was cut short: it never happened
			}
			return base, fmt.Errorf("%s: line %d: %w; %s", file, i+1, err, resourcesRecovery)
		}
		if e.Header.Serial <= base.Serial {
			continue // already in the state file
		}
		if e.Header.Serial != base.Serial+1 {
			// Saves are numbered one after another and a state file
			// written whole starts the journal afresh: a gap is a state
			// file read before a run rewrote it and the journal read
			// after. Reading again gets the newer file.
			return base, fmt.Errorf("%w: line %d has serial %d, the state file %d", errJournalGap, i+1, e.Header.Serial, base.Serial)
		}
		nodes, groups := base.Nodes, base.SecurityGroups
		base = e.Header
		base.Nodes, base.SecurityGroups = nodes, groups
		if e.Groups != nil {
			base.SecurityGroups = *e.Groups
		}
		for _, n := range e.Nodes {
			if j, ok := pos[n.ID]; ok {
				base.Nodes[j] = n
				continue
			}
			pos[n.ID] = len(base.Nodes)
			base.Nodes = append(base.Nodes, n)
		}
		changed = true
	}
	if changed {
		slices.SortFunc(base.Nodes, func(a, b Node) int { return CompareNodeIDs(a.ID, b.ID) })
	}
	return base, nil
}
