package state

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/cloudtransit/transit/districts"
)

// readResources decodes path strictly, as a later run would.
func readResources(t *testing.T, path string) districts.Resources {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var r districts.Resources
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("%s does not parse: %v\n%s", path, err, data)
	}
	if dec.More() {
		t.Fatalf("%s has data after the JSON value", path)
	}
	return r
}

// tempFiles lists Write's temporary files in dir.
func tempFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") {
			out = append(out, e.Name())
		}
	}
	return out
}

func TestWrite(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "resources.json")

	for _, serial := range []int64{1, 2} { // create, then replace
		want := sampleResources(serial)
		if err := Write(path, want); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, readResources(t, path)); diff != "" {
			t.Errorf("serial %d: read back (-want +got):\n%s", serial, diff)
		}
	}

	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasSuffix(data, []byte("}\n")) || !bytes.Contains(data, []byte("\n  \"serial\": 2,\n")) {
		t.Errorf("want indented JSON with a trailing newline, got:\n%.200s", data)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Errorf("mode %v, want 0600", perm)
	}
	if tmp := tempFiles(t, dir); len(tmp) > 0 {
		t.Errorf("temporary files left: %v", tmp)
	}
}

func TestWriteEmptyListsAreArrays(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "resources.json")
	if err := Write(path, districts.Resources{Type: "resources", Version: 1, Cluster: "c1"}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"nodes": []`, `"security_groups": []`} {
		if !bytes.Contains(data, []byte(want)) {
			t.Errorf("want %s in:\n%s", want, data)
		}
	}
}

func TestWriteFailureKeepsPrevious(t *testing.T) {
	t.Parallel()
	old := sampleResources(1)
	next := sampleResources(2)
	tests := []struct {
		name  string
		setup func(t *testing.T, dir, path string) // optional
		write func(path string) error
	}{
		{
			name: "encoding fails",
			write: func(path string) error {
				r := next
				r.UpdatedAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) // not RFC 3339
				return Write(path, r)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := filepath.Join(dir, "resources.json")
			if err := Write(path, old); err != nil {
				t.Fatal(err)
			}
			if tt.setup != nil {
				tt.setup(t, dir, path)
			}
			err := tt.write(path)
			if err == nil {
				t.Fatal("write succeeded, want an error")
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name %s", err, path)
			}
			if diff := cmp.Diff(old, readResources(t, path)); diff != "" {
				t.Errorf("previous state changed (-old +now):\n%s", diff)
			}
			if tmp := tempFiles(t, dir); len(tmp) > 0 {
				t.Errorf("temporary files left: %v", tmp)
			}
		})
	}
}

func TestWriteOverDirectoryFails(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "resources.json")
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(path, "keep"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, sampleResources(1)); err == nil {
		t.Fatal("write over a directory succeeded")
	}
	if fi, err := os.Stat(filepath.Join(path, "keep")); err != nil || fi.Size() != 1 {
		t.Errorf("directory content changed: %v", err)
	}
	if tmp := tempFiles(t, dir); len(tmp) > 0 {
		t.Errorf("temporary files left: %v", tmp)
	}
}

func TestWriteMissingDirectory(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "no", "such", "resources.json")
	err := Write(path, sampleResources(1))
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("got %v, want a not-exist error", err)
	}
}

func TestJournalSerials(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "resources.json")
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.FixedZone("CET", 3600))
	j := NewJournal(path, 41, func() time.Time { return now })
	save := func(r districts.Resources) error { return j.Save(r, nil, false, true) }

	if err := save(districts.Resources{Cluster: "c1"}); err != nil {
		t.Fatal(err)
	}
	want := districts.Resources{
		Type: "resources", Version: districts.ResourcesVersion, Cluster: "c1",
		Serial: 42, UpdatedAt: now.UTC(),
		Nodes: []districts.Node{}, SecurityGroups: []districts.SecurityGroup{},
	}
	if diff := cmp.Diff(want, readResources(t, path)); diff != "" {
		t.Errorf("first save (-want +got):\n%s", diff)
	}

	// A serial in the argument larger than the last one saved wins.
	if err := save(districts.Resources{Cluster: "c1", Serial: 100}); err != nil {
		t.Fatal(err)
	}
	if got := readResources(t, path).Serial; got != 101 {
		t.Errorf("serial %d, want 101", got)
	}

	// A failed save does not use up a serial.
	bad := sampleResources(1)
	bad.Nodes[0].CreatedAt = time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := save(bad); err == nil {
		t.Fatal("save of unencodable state succeeded")
	}

	// Concurrent saves are serialized: every one gets its own serial.
	const n = 16
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			r := sampleResources(int64(i))
			r.Serial = 0
			errs <- save(r)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if got := readResources(t, path).Serial; got != 101+n {
		t.Errorf("serial after %d concurrent saves: %d, want %d", n, got, 101+n)
	}
}

// TestWriteSurvivesKill kills a process that writes the state in a loop at
// random moments; after every kill the file must hold one complete state.
func TestWriteSurvivesKill(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "resources.json")
	if err := Write(path, sampleResources(1)); err != nil {
		t.Fatal(err)
	}
	rounds := 200
	if testing.Short() {
		rounds = 40
	}
	last := int64(1)
	for round := range rounds {
		h := startHelper(t, "write", path)
		h.expect(t, "writing")
		time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond) // a random moment
		h.kill(t)

		got := readResources(t, path)
		if diff := cmp.Diff(sampleResources(got.Serial), got); diff != "" {
			t.Fatalf("round %d: torn state at serial %d (-want +got):\n%s", round, got.Serial, diff)
		}
		if got.Serial <= last {
			t.Fatalf("round %d: serial %d, want more than %d", round, got.Serial, last)
		}
		last = got.Serial
	}
	t.Logf("%d kills, %d writes, %d temporary files left by interrupted writes", rounds, last-1, len(tempFiles(t, dir)))

	// The next lock holder clears the temporary files interrupted writes left.
	if _, err := RemoveLeftovers(path); err != nil {
		t.Fatal(err)
	}
	if tmp := tempFiles(t, dir); len(tmp) > 0 {
		t.Errorf("temporary files left after RemoveLeftovers: %v", tmp)
	}
}

func TestRemoveLeftovers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "resources.json")
	leftover := filepath.Join(dir, ".resources.json.tmp-123")
	other := filepath.Join(dir, ".other.json.tmp-123")
	for _, p := range []string{leftover, other} {
		if err := os.WriteFile(p, []byte("{"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := RemoveLeftovers(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{leftover}, removed); diff != "" {
		t.Errorf("leftovers (-want +got):\n%s", diff)
	}
	if _, err := os.Stat(leftover); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("leftover still there: %v", err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("another file's temporary file was touched: %v", err)
	}
}

func ExampleJournal() {
	dir, err := os.MkdirTemp("", "transit")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = os.RemoveAll(dir) }()
	path := filepath.Join(dir, "resources.json")

	j := NewJournal(path, 6, nil) // the loaded state had serial 6
	if err := j.Save(districts.Resources{Cluster: "demo"}, nil, false, true); err != nil {
		fmt.Println(err)
		return
	}
	data, err := os.ReadFile(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	var r districts.Resources
	if err := json.Unmarshal(data, &r); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(r.Type, r.Cluster, r.Serial)
	// Output: resources demo 7
}

// FuzzWrite: whatever a node carries, Write stores exactly what a later run
// reads back.
func FuzzWrite(f *testing.F) {
	f.Add("n-1", "joined", "drain refused: pdb web", "k", "v", int64(7))
	f.Add("", "", "", "", "", int64(-1))
	f.Add("n\"\\\n\u2028", "x", "<>&", "k=v", "\x00", int64(1<<62))
	f.Fuzz(func(t *testing.T, id, phase, msg, tagKey, tagValue string, serial int64) {
		for _, s := range []string{id, phase, msg, tagKey, tagValue} {
			if !utf8.ValidString(s) {
				t.Skip("JSON strings are UTF-8")
			}
		}
		want := sampleResources(1)
		want.Serial = serial
		want.Nodes[0].ID = id
		want.Nodes[0].Phase = districts.Phase(phase)
		want.Nodes[0].Message = msg
		want.Nodes[0].Tags = map[string]string{tagKey: tagValue}
		path := filepath.Join(t.TempDir(), "resources.json")
		if err := Write(path, want); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, readResources(t, path)); diff != "" {
			t.Errorf("read back (-want +got):\n%s", diff)
		}
	})
}

// BenchmarkWrite measures one durable save of a 20-node state (two fsyncs).
func BenchmarkWrite(b *testing.B) {
	path := filepath.Join(b.TempDir(), "resources.json")
	r := sampleResources(1)
	for b.Loop() {
		if err := Write(path, r); err != nil {
			b.Fatal(err)
		}
	}
}
