package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cloudtransit/transit/mesh"
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

// TestMain runs the command itself when a test starts this binary with
// TRANSIT_MESH_ARGS (its arguments, space-separated).
func TestMain(m *testing.M) {
	if args := os.Getenv("TRANSIT_MESH_ARGS"); args != "" {
		if err := run(strings.Fields(args)); err != nil {
			fmt.Fprintln(os.Stderr, "transit-mesh:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestShareOutlivesSIGHUP: giving a node's mesh its peers signals every
// transit-mesh process of the node (pkill -HUP -x transit-mesh); a share
// serving the bundle to the district keeps serving. (It ended, cutting
// every fetch from the seed short, whenever peers were given meanwhile.)
func TestShareOutlivesSIGHUP(t *testing.T) {
	file := filepath.Join(t.TempDir(), "kubeadm")
	content := strings.Repeat("kubeadm ", 100_000)
	if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	const token = "0123456789abcdef0123456789abcdef"
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "TRANSIT_MESH_ARGS=share -listen 127.0.0.1:0 -idle 1m -max 1m")
	cmd.Stdin = strings.NewReader(token + "\n" + file + "\n")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if err != nil || !ok {
		t.Fatalf("share printed %q: %v", line, err)
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("after SIGHUP the share does not answer: %v", err)
	}
	defer func() { _ = c.Close() }()
	if _, err := fmt.Fprintf(c, "%s %s\n", token, file); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil || string(got) != content {
		t.Errorf("after SIGHUP the share sent %d bytes (%v), want the file's %d", len(got), err, len(content))
	}
}

// TestSHA256OutlivesSIGHUP: a node's fetch checks each file with
// transit-mesh sha256 while peers may be given (pkill -HUP -x
// transit-mesh): the check goes on. The file is a FIFO, so the signal
// comes while the hash reads it.
func TestSHA256OutlivesSIGHUP(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "kubelet")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "TRANSIT_MESH_ARGS=sha256 "+fifo)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0) // returns once sha256 opened it
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	content := strings.Repeat("kubelet ", 100_000)
	_, werr := io.WriteString(w, content)
	_ = w.Close()
	if err := cmd.Wait(); err != nil || werr != nil {
		t.Fatalf("sha256 with a SIGHUP while it read: %v (write: %v)\n%s", err, werr, out.String())
	}
	if want := fmt.Sprintf("%x  %s\n", sha256.Sum256([]byte(content)), fifo); out.String() != want {
		t.Errorf("sha256 printed %q, want %q", out.String(), want)
	}
}

// TestRotate: rotate prints the node's public key and its next one, the
// same when asked again; -commit makes the next one the node's key and
// prints it, again the same; a key never made next, or no key at all, is
// refused. No private key is printed.
func TestRotate(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "mesh")
	rotate := func(args ...string) (string, error) {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), os.Args[0])
		cmd.Env = append(os.Environ(), "TRANSIT_MESH_ARGS="+strings.Join(append([]string{"rotate", "-dir", dir}, args...), " "))
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return string(out), fmt.Errorf("%w: %s", err, stderr.String())
		}
		return string(out), nil
	}
	asked, err := rotate()
	if err != nil {
		t.Fatal(err)
	}
	cur, err := mesh.LoadOrCreateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	next, err := mesh.NextKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := "key=" + cur.Public().String() + "\nnext=" + next.Public().String() + "\n"; asked != want {
		t.Fatalf("rotate printed %q, want %q", asked, want)
	}
	if again, err := rotate(); err != nil || again != asked {
		t.Fatalf("asked again: %q, %v; want %q", again, err, asked)
	}
	for i := range 2 {
		got, err := rotate("-commit", next.Public().String())
		if want := "key=" + next.Public().String() + "\n"; err != nil || got != want {
			t.Fatalf("commit %d: %q, %v; want %q", i+1, got, err, want)
		}
	}
	if k, err := mesh.LoadOrCreateKey(dir); err != nil || k != next {
		t.Errorf("after the commit the key is not the next one (%v)", err)
	}
	if _, err := rotate("-commit", cur.Public().String()); err == nil || !strings.Contains(err.Error(), "no next key with public key "+cur.Public().String()) {
		t.Errorf("commit of a key never made next: %v", err)
	}
	if _, err := rotate("-commit", "nokey"); err == nil || !strings.Contains(err.Error(), `-commit "nokey": not a WireGuard key`) {
		t.Errorf("commit of no key: %v", err)
	}
	for _, k := range []mesh.Key{cur, next} {
		if strings.Contains(asked, k.String()) {
			t.Error("rotate printed a private key")
		}
	}
}

// TestSHA256 prints what sha256sum prints, so that a node's fetch checks
// the bundle's files with either; a file it cannot read fails it.
func TestSHA256(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "kubelet"), filepath.Join(dir, "pause.tar")
	for name, content := range map[string]string{a: "the kubelet", b: ""} {
		if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var out strings.Builder
	if err := sha256sum(&out, []string{a, b}); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%x  %s\n%x  %s\n", sha256.Sum256([]byte("the kubelet")), a, sha256.Sum256(nil), b)
	if out.String() != want {
		t.Errorf("got %q, want %q", out.String(), want)
	}
	if sum, err := exec.LookPath("sha256sum"); err == nil {
		if got, err := exec.Command(sum, a, b).Output(); err != nil || string(got) != want {
			t.Errorf("sha256sum printed %q (%v), transit-mesh %q", got, err, want)
		}
	}
	if err := sha256sum(io.Discard, []string{a, filepath.Join(dir, "absent")}); err == nil {
		t.Error("a missing file did not fail the command")
	}
	if err := run([]string{"sha256"}); err == nil {
		t.Error("no file to hash did not fail the command")
	}
}
