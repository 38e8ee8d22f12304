// Package state keeps resources.json safe: atomic writes, a journal that
// makes a save cost what it changed (Journal), serials, and the clean-up of
// what an interrupted write left.
//
// Write replaces the file atomically (temp file, fsync, rename, fsync of the
// directory), so a crash at any moment leaves either the old or the new
// content, never a mix. Two runs never interleave because every writer
// holds the state's lock (package filelock: an flock on "<state>.lock")
// while it writes; the lock holder calls RemoveLeftovers once.
package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/cloudtransit/transit/atomicfile"
	"github.com/cloudtransit/transit/districts"
)

// Write saves r to path atomically: it writes indented JSON to a temporary
// file in the same directory (mode 0600), fsyncs it, renames it over path
// and fsyncs the directory. On any failure before the rename the previous
// file is untouched and the temporary file is removed. Write does not change
// r: the caller owns Serial and UpdatedAt (see Journal).
func Write(path string, r districts.Resources) error {
	data, err := Encode(r)
	if err != nil {
		return fmt.Errorf("write %s: encode: %w", path, err)
	}
	return writeData(path, data)
}

// Encode is r as the state file holds it.
func Encode(r districts.Resources) ([]byte, error) {
	// Empty lists are written as [] rather than null, so readers of the
	// report (jq, dashboards) always see the same shape.
	if r.Nodes == nil {
		r.Nodes = []districts.Node{}
	}
	if r.SecurityGroups == nil {
		r.SecurityGroups = []districts.SecurityGroup{}
	}
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}

func writeData(path string, data []byte) error {
	// Mode 0600: the state names every machine and address of the cluster.
	if err := atomicfile.Write(path, data, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// RemoveLeftovers deletes temporary files that a crashed Write left beside
// statePath and returns their paths. Only the holder of the state's lock
// may call it, so that no Write of another run can be in progress.
func RemoveLeftovers(statePath string) ([]string, error) {
	dir := filepath.Dir(statePath)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	prefix := atomicfile.TempPrefix(statePath)
	var removed []string
	for _, e := range entries {
		if !e.Type().IsRegular() || !strings.HasPrefix(e.Name(), prefix) {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return removed, err
		}
		removed = append(removed, p)
	}
	return removed, nil
}
