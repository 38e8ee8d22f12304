package main

import (
	"bufio"
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
