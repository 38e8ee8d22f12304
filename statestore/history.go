package statestore

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
)

// DefaultKeep is how many past states a store keeps.
const DefaultKeep = 20

// historyPrefix is where the past states of the object name are kept:
// "resources.json.history/" — one object per kept state, named by its
// serial, zero-padded so that names sort as serials do.
func historyPrefix(name string) string { return name + ".history/" }

func historyName(name string, serial int64) string {
	return fmt.Sprintf("%s%012d", historyPrefix(name), serial)
}

// Past is one kept state.
type Past struct {
	Serial int64
	Entry
}

// Keep stores data as the state name had it at serial and removes the
// oldest kept states beyond keep (DefaultKeep when 0). Keeping a serial
// already kept is not an error: the first copy stays.
func Keep(ctx context.Context, s Store, name string, serial int64, data []byte, keep int) error {
	if keep <= 0 {
		keep = DefaultKeep
	}
	if _, err := s.Put(ctx, historyName(name, serial), data, NoVersion); err != nil && !errors.Is(err, ErrConflict) {
		return fmt.Errorf("keep state %d in %s: %w", serial, s.Location(), err)
	}
	past, err := History(ctx, s, name)
	if err != nil {
		return err
	}
	for len(past) > keep {
		old := past[len(past)-1]
		if err := s.Delete(ctx, old.Name, old.Version); err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrConflict) {
			return fmt.Errorf("drop state %d from %s: %w", old.Serial, s.Location(), err)
		}
		past = past[:len(past)-1]
	}
	return nil
}

// History lists the kept states of name, newest first.
func History(ctx context.Context, s Store, name string) ([]Past, error) {
	entries, err := s.List(ctx, historyPrefix(name))
	if err != nil {
		return nil, fmt.Errorf("list the kept states in %s: %w", s.Location(), err)
	}
	var past []Past
	for _, e := range entries {
		serial, err := strconv.ParseInt(strings.TrimPrefix(e.Name, historyPrefix(name)), 10, 64)
		if err != nil || path.Dir(e.Name)+"/" != historyPrefix(name) {
			continue // not one of ours
		}
		past = append(past, Past{Serial: serial, Entry: e})
	}
	// List sorts by name, and zero-padded names sort as serials.
	for i, j := 0, len(past)-1; i < j; i, j = i+1, j-1 {
		past[i], past[j] = past[j], past[i]
	}
	return past, nil
}

// GetPast reads the kept state of name at serial.
func GetPast(ctx context.Context, s Store, name string, serial int64) ([]byte, error) {
	obj, err := s.Get(ctx, historyName(name, serial))
	if errors.Is(err, ErrNotFound) {
		return nil, fmt.Errorf("%s keeps no state with serial %d: `transit state list` shows those it keeps: %w", s.Location(), serial, err)
	}
	if err != nil {
		return nil, err
	}
	return obj.Data, nil
}
