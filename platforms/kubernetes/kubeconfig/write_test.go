package kubeconfig

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func export(t *testing.T, name string) []byte {
	t.Helper()
	data, err := Export(admin, name, "https://10.240.1.2:6443", "api."+name+".transit.internal")
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func mode(t *testing.T, path string) fs.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

// noLockLeft fails when a writer left kubectl's lock behind: kubectl's
// own writes would then fail.
func noLockLeft(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Stat(path + ".lock"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("lock file left behind: %v", err)
	}
}

func TestMergePath(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		kubeconfig, home string
		want             string
	}{
		{"", "/home/ann", "/home/ann/.kube/config"},
		{"/tmp/a:/tmp/b", "/home/ann", "/tmp/a"},
		{"::/tmp/b", "/home/ann", "/tmp/b"},
		{"/tmp/only", "", "/tmp/only"},
	} {
		env := map[string]string{"KUBECONFIG": tc.kubeconfig, "HOME": tc.home}
		got, err := MergePath(func(k string) string { return env[k] })
		if err != nil || got != tc.want {
			t.Errorf("KUBECONFIG=%q HOME=%q: %q, %v; want %q", tc.kubeconfig, tc.home, got, err, tc.want)
		}
	}
	if _, err := MergePath(func(string) string { return "" }); err == nil {
		t.Error("no $KUBECONFIG and no $HOME: no error")
	}
}

func TestWriteMergedCreates(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "home", ".kube")
	path := filepath.Join(dir, "config")
	if err := WriteMerged(t.Context(), path, export(t, "demo")); err != nil {
		t.Fatal(err)
	}
	if m := mode(t, dir); m != 0o700 {
		t.Errorf("directory mode %04o, want 0700", m)
	}
	if m := mode(t, path); m != 0o600 {
		t.Errorf("file mode %04o, want 0600", m)
	}
	c := mustLoad(t, readFile(t, path))
	if c.CurrentContext != "demo" || c.Clusters["demo"] == nil {
		t.Errorf("written kubeconfig: current %q, clusters %v", c.CurrentContext, c.Clusters)
	}
	noLockLeft(t, path)
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// An existing file readable by others comes out 0600, with its other
// entries kept.
func TestWriteMergedTightensMode(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(path, []byte(existing), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteMerged(t.Context(), path, export(t, "demo")); err != nil {
		t.Fatal(err)
	}
	if m := mode(t, path); m != 0o600 {
		t.Errorf("file mode %04o, want 0600", m)
	}
	c := mustLoad(t, readFile(t, path))
	if d := configDiff(withOut(mustLoad(t, []byte(existing)), "demo"), withOut(c, "demo")); d != "" {
		t.Errorf("other entries changed (-before +after):\n%s", d)
	}
	if c.CurrentContext != "demo" {
		t.Errorf("current context %q, want demo", c.CurrentContext)
	}
}

func TestWriteMergedLeavesBrokenFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "config")
	const broken = "users:\n- name: x\n  user: {token: TOKEN-9}\n{TOKEN-9: 1}: 2\n"
	if err := os.WriteFile(path, []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	err := WriteMerged(t.Context(), path, export(t, "demo"))
	if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "left as it is") {
		t.Fatalf("WriteMerged = %v, want an error naming %s and saying it is left alone", err, path)
	}
	if strings.Contains(err.Error(), "TOKEN-9") {
		t.Errorf("the error shows the file's content: %q", err)
	}
	if got := string(readFile(t, path)); got != broken {
		t.Errorf("broken file changed to %q", got)
	}
	if m := mode(t, path); m != 0o644 {
		t.Errorf("broken file's mode changed to %04o", m)
	}
	noLockLeft(t, path)
}

// Writers of different clusters at once: every one lands.
func TestWriteMergedConcurrent(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(path, []byte(existing), 0o600); err != nil {
		t.Fatal(err)
	}
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { errs[i] = WriteMerged(t.Context(), path, export(t, fmt.Sprintf("c%d", i))) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	c := mustLoad(t, readFile(t, path))
	var got []string
	for name := range c.Contexts {
		got = append(got, name)
	}
	want := []string{"gke", "kind-kind"}
	for i := range n {
		want = append(want, fmt.Sprintf("c%d", i))
	}
	slices.Sort(got)
	slices.Sort(want)
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("contexts after %d concurrent writers (-want +got):\n%s", n, d)
	}
	noLockLeft(t, path)
}

// kubectl's lock held (or left by a crashed writer): WriteMerged waits,
// then says which file to delete, and changes nothing.
func TestWriteMergedLocked(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(path, []byte(existing), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path+".lock", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	err := writeMerged(t.Context(), path, export(t, "demo"), 50*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "delete "+path+".lock") {
		t.Fatalf("WriteMerged with the lock held = %v, want an error naming the lock file", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := writeMerged(ctx, path, export(t, "demo"), time.Minute); !errors.Is(err, context.Canceled) {
		t.Errorf("WriteMerged interrupted = %v, want context.Canceled", err)
	}
	if got := string(readFile(t, path)); got != existing {
		t.Errorf("file changed while locked:\n%s", got)
	}
	// Released: the next writer goes through.
	if err := os.Remove(path + ".lock"); err != nil {
		t.Fatal(err)
	}
	if err := writeMerged(t.Context(), path, export(t, "demo"), time.Minute); err != nil {
		t.Fatal(err)
	}
}

// A kubeconfig that is a link (dotfiles) stays a link; the file it points
// to gets the merge.
func TestWriteMergedFollowsLink(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	target := filepath.Join(dir, "dotfiles", "kubeconfig")
	if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(target, []byte(existing), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "config")
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	if err := WriteMerged(t.Context(), path, export(t, "demo")); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(path); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Fatalf("%s is no longer a link: %v", path, err)
	}
	if c := mustLoad(t, readFile(t, target)); c.Contexts["demo"] == nil || c.Contexts["gke"] == nil {
		t.Errorf("link target's contexts: %v", c.Contexts)
	}
	noLockLeft(t, path)
}

// Root rewriting a user's kubeconfig (sudo keeping $HOME) leaves it the
// user's.
func TestWriteMergedKeepsOwner(t *testing.T) {
	if testing.Short() || os.Geteuid() != 0 {
		t.Skip("needs root to own a file as another user (skipped with -short)")
	}
	t.Parallel()
	path := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(path, []byte(existing), 0o600); err != nil {
		t.Fatal(err)
	}
	const uid, gid = 4242, 4343
	if err := os.Chown(path, uid, gid); err != nil {
		t.Fatal(err)
	}
	if err := WriteMerged(t.Context(), path, export(t, "demo")); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != uid || st.Gid != gid {
		t.Errorf("owner %d:%d after the write, want %d:%d", st.Uid, st.Gid, uid, gid)
	}
}
