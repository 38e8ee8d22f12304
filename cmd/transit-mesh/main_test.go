package main

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUpImpl: -impl takes auto, kernel or userspace; anything else is
// refused before the key is made or a device touched.
func TestUpImpl(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "mesh")
	err := run([]string{"up", "-dir", dir, "-address", "10.98.0.1/24", "-impl", "kernal"})
	if err == nil || !strings.Contains(err.Error(), `"kernal": want auto, kernel or userspace`) {
		t.Errorf("-impl kernal: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s made before -impl was checked: %v", dir, err)
	}
}
