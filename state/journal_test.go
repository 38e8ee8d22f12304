package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cloudtransit/transit/districts"
)

func journalLines(t *testing.T, path string) int {
	t.Helper()
	data, err := os.ReadFile(districts.JournalPath(path))
	if errors.Is(err, fs.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(data), "\n")
}

func load(t *testing.T, path string) districts.Resources {
	t.Helper()
	r, err := districts.LoadResources(path)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// What the journal holds and the state file together is the state as last
// saved: changed nodes, added nodes, groups and the header.
func TestJournalReplays(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "resources.json")
	now := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	j := NewJournal(path, 0, func() time.Time { return now })
	r := sampleResources(3)
	if err := j.Save(r, nil, false, true); err != nil { // whole
		t.Fatal(err)
	}
	r.Nodes[4].Phase = districts.PhaseDraining
	r.NodeNumbers = map[string]int{"worker": 77}
	if err := j.Save(r, []string{r.Nodes[4].ID}, false, false); err != nil {
		t.Fatal(err)
	}
	added := r.Nodes[0]
	added.ID = "n-3-99"
	r.Nodes = append(r.Nodes, added)
	slices.SortFunc(r.Nodes, func(a, b districts.Node) int { return districts.CompareNodeIDs(a.ID, b.ID) })
	r.SecurityGroups[0].Sources = append(r.SecurityGroups[0].Sources, "10.0.0.2/32")
	if err := j.Save(r, []string{"n-3-99"}, true, false); err != nil {
		t.Fatal(err)
	}
	if n := journalLines(t, path); n != 2 {
		t.Fatalf("journal lines %d, want 2", n)
	}
	want := r
	want.Serial, want.UpdatedAt = 6, now // after the sample's 3
	if diff := cmp.Diff(want, load(t, path)); diff != "" {
		t.Fatalf("state and journal (-want +got):\n%s", diff)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(districts.JournalPath(path)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("journal after Close: %v", err)
	}
	if diff := cmp.Diff(want, readResources(t, path)); diff != "" {
		t.Fatalf("state file after Close (-want +got):\n%s", diff)
	}
}

// A save cut short leaves half a line: it never happened. A damaged line
// before the last is an error naming the journal and the line.
func TestJournalTornAndDamaged(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "resources.json")
	j := NewJournal(path, 0, nil)
	r := sampleResources(1)
	if err := j.Save(r, nil, false, true); err != nil {
		t.Fatal(err)
	}
	r.Nodes[0].Phase = districts.PhaseLeft
	if err := j.Save(r, []string{r.Nodes[0].ID}, false, false); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(districts.JournalPath(path), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`{"header":{"type":"resources","serial":4,"nod`); err != nil {
		t.Fatal(err)
	}
	f.Close()
	got := load(t, path)
	if got.Serial != 3 || got.Nodes[0].Phase != districts.PhaseLeft {
		t.Fatalf("after a torn line: serial %d, phase %s; want 3, left", got.Serial, got.Nodes[0].Phase)
	}

	data, _ := os.ReadFile(districts.JournalPath(path))
	damaged := strings.Replace(string(data), `"header"`, `"header`, 1)
	if err := os.WriteFile(districts.JournalPath(path), []byte(damaged), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = districts.LoadResources(path)
	if err == nil || !strings.Contains(err.Error(), "resources.json.journal: line 1") {
		t.Fatalf("damaged journal: %v, want an error naming it and the line", err)
	}
}

// A crash after the state file was written whole but before the journal
// went leaves lines the file already holds: they are skipped.
func TestJournalOlderLinesSkipped(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "resources.json")
	j := NewJournal(path, 0, nil)
	r := sampleResources(2)
	if err := j.Save(r, nil, false, true); err != nil {
		t.Fatal(err)
	}
	r.Nodes[1].Message = "from the journal"
	if err := j.Save(r, []string{r.Nodes[1].ID}, false, false); err != nil {
		t.Fatal(err)
	}
	stale, _ := os.ReadFile(districts.JournalPath(path))
	r.Nodes[1].Message = "written whole"
	if err := j.Save(r, nil, false, true); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(districts.JournalPath(path), stale, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := load(t, path); got.Nodes[1].Message != "written whole" || got.Serial != 5 {
		t.Fatalf("message %q serial %d: an old journal line was applied over the state file", got.Nodes[1].Message, got.Serial)
	}
}

// The state file is written whole once the journal holds a quarter of the
// nodes' worth of lines (at least 64): the saves cost a constant each.
func TestJournalCompactsAsItGrows(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "resources.json")
	j := NewJournal(path, 0, nil)
	r := sampleResources(0)
	for i := range 400 {
		r.Nodes = append(r.Nodes, districts.Node{Type: "node", ID: fmt.Sprintf("w-%04d", i), Cluster: "c1", District: "local-a", Role: "worker", Flavor: "small", Phase: districts.PhaseJoined})
	}
	slices.SortFunc(r.Nodes, func(a, b districts.Node) int { return districts.CompareNodeIDs(a.ID, b.ID) })
	if err := j.Save(r, nil, false, true); err != nil {
		t.Fatal(err)
	}
	most := 0
	for k := range 1000 {
		i := k % len(r.Nodes)
		r.Nodes[i].Message = strconv.Itoa(k)
		if err := j.Save(r, []string{r.Nodes[i].ID}, false, false); err != nil {
			t.Fatal(err)
		}
		most = max(most, journalLines(t, path))
	}
	if limit := len(r.Nodes) / 4; most > limit {
		t.Fatalf("the journal reached %d lines, more than a quarter of %d nodes", most, len(r.Nodes))
	}
	want := r
	want.Serial = 1001
	got := load(t, path)
	want.UpdatedAt = got.UpdatedAt
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
}

// TestJournalSurvivesKill kills a process that saves through the journal
// at random moments: after every kill the state loads, the node and the
// header of the last save agree, and the serial never goes back.
func TestJournalSurvivesKill(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "resources.json")
	if err := Write(path, sampleResources(1)); err != nil {
		t.Fatal(err)
	}
	rounds := 100
	if testing.Short() {
		rounds = 30
	}
	last := int64(1)
	for round := range rounds {
		h := startHelper(t, "journal", path)
		h.expect(t, "saving")
		time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
		h.kill(t)
		got, err := districts.LoadResources(path)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		k := got.NodeNumbers["worker"]
		if tag := got.Nodes[k%len(got.Nodes)].Tags["k"]; tag != strconv.Itoa(k) {
			b, _ := json.Marshal(got.Nodes[k%len(got.Nodes)])
			t.Fatalf("round %d: header says save %d, its node says %q: %s", round, k, tag, b)
		}
		if got.Serial < last {
			t.Fatalf("round %d: serial %d went back from %d", round, got.Serial, last)
		}
		last = got.Serial
		if round%10 == 9 { // the next lock holder compacts now and then
			if err := Compact(path); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("%d kills, serial %d", rounds, last)
}

// A run killed mid-save left half a line; the next writer's lines go after
// the last whole one, not after the half (which would break the journal).
func TestJournalAppendsAfterATornLine(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "resources.json")
	j := NewJournal(path, 0, nil)
	r := sampleResources(1)
	if err := j.Save(r, nil, false, true); err != nil {
		t.Fatal(err)
	}
	r.Nodes[0].Message = "before the kill"
	if err := j.Save(r, []string{r.Nodes[0].ID}, false, false); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(districts.JournalPath(path), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString(`{"header":{"serial":9,"cut`)
	_ = f.Close()

	next := NewJournal(path, 3, nil)
	r.Serial = 3
	r.Nodes[1].Message = "after the kill"
	if err := next.Save(r, []string{r.Nodes[1].ID}, false, false); err != nil {
		t.Fatal(err)
	}
	got := load(t, path)
	if got.Nodes[0].Message != "before the kill" || got.Nodes[1].Message != "after the kill" || got.Serial != 4 {
		t.Fatalf("serial %d, messages %q, %q", got.Serial, got.Nodes[0].Message, got.Nodes[1].Message)
	}
}

// A reader (status, kubeconfig) loading while a run saves and compacts
// sees a state some save wrote, never an older state file with a newer
// run of lines applied on top (the lines in between lost): each save
// changes one node's Message to its serial, so in a state of serial S node
// k%n holds the last serial ≤ S that changed it.
func TestJournalReadWhileCompacting(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "resources.json")
	j := NewJournal(path, 0, nil)
	r := sampleResources(0)
	if err := j.Save(r, nil, false, true); err != nil {
		t.Fatal(err)
	}
	n := int64(len(r.Nodes))
	done, stop := make(chan error, 1), make(chan struct{})
	// A failed read ends the test: the saves stop before its directory goes.
	t.Cleanup(func() {
		close(stop)
		for range done {
		}
	})
	go func() {
		defer close(done)
		for k := int64(2); k < 3000; k++ {
			select {
			case <-stop:
				return
			default:
			}
			i := k % n
			r.Nodes[i].Message = strconv.FormatInt(k, 10)
			if err := j.Save(r, []string{r.Nodes[i].ID}, false, false); err != nil {
				done <- err
				return
			}
		}
	}()
	reads, last := 0, int64(0)
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			if reads < 10 {
				t.Fatalf("only %d reads while the run saved", reads)
			}
			return
		default:
		}
		got, err := districts.LoadResources(path)
		if err != nil {
			t.Fatalf("read %d: %v", reads, err)
		}
		reads++
		// One reader's reads never go back: a file rewritten between its
		// read and the journal's (compacted: a new, empty journal) is no
		// older state.
		if got.Serial < last {
			t.Fatalf("read %d: serial %d after %d: an older state file was read with a newer (empty) journal", reads, got.Serial, last)
		}
		last = got.Serial
		for i, node := range got.Nodes {
			want := got.Serial - (got.Serial-int64(i)+n)%n // the last serial ≤ S with serial%n == i
			if want < 2 {
				want = -1 // never changed: the sample's message
			}
			if m := node.Message; want >= 2 && m != strconv.FormatInt(want, 10) {
				t.Fatalf("read %d: state of serial %d has node %d changed at %s, want %d: lines were applied to an older state file", reads, got.Serial, i, m, want)
			}
		}
	}
}

// A journal that skips ahead of its state file (the file replaced by an
// older copy) is an error naming both serials, never a state with the
// saves in between lost.
func TestJournalGapRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "resources.json")
	j := NewJournal(path, 0, nil)
	r := sampleResources(0)
	if err := j.Save(r, nil, false, true); err != nil {
		t.Fatal(err)
	}
	old, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for k := range 3 {
		r.Nodes[k].Message = "changed"
		if err := j.Save(r, []string{r.Nodes[k].ID}, false, k == 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(path, old, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = districts.LoadResources(path)
	if err == nil || !strings.Contains(err.Error(), "line 1 has serial 4, the state file 1") || !strings.Contains(err.Error(), "resources.json.journal") {
		t.Fatalf("got %v, want the gap named", err)
	}
}
