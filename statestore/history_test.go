package statestore_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cloudtransit/transit/statestore"
)

func TestHistoryKeepsTheLastN(t *testing.T) {
	ctx := t.Context()
	s := newMemStore()
	// Serials across a power of ten sort as numbers, not as text.
	for serial := int64(5); serial <= 12; serial++ {
		if err := statestore.Keep(ctx, s, "resources.json", serial, fmt.Appendf(nil, `{"serial":%d}`, serial), 3); err != nil {
			t.Fatal(err)
		}
	}
	// Keeping a serial again keeps the first copy.
	if err := statestore.Keep(ctx, s, "resources.json", 12, []byte("again"), 3); err != nil {
		t.Fatal(err)
	}
	// Objects of another name, or nested deeper, are not its history.
	if _, err := s.Put(ctx, "other.json.history/000000000099", []byte("x"), statestore.NoVersion); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "resources.json.history/notes", []byte("x"), statestore.NoVersion); err != nil {
		t.Fatal(err)
	}
	past, err := statestore.History(ctx, s, "resources.json")
	if err != nil {
		t.Fatal(err)
	}
	var serials []int64
	for _, p := range past {
		serials = append(serials, p.Serial)
	}
	if fmt.Sprint(serials) != "[12 11 10]" {
		t.Fatalf("kept %v, want [12 11 10] (newest first)", serials)
	}
	data, err := statestore.GetPast(ctx, s, "resources.json", 12)
	if err != nil || string(data) != `{"serial":12}` {
		t.Fatalf("state 12: %q, %v", data, err)
	}
	_, err = statestore.GetPast(ctx, s, "resources.json", 5)
	if !errors.Is(err, statestore.ErrNotFound) || !strings.Contains(err.Error(), "transit state list") {
		t.Fatalf("a dropped state: %v", err)
	}
}
