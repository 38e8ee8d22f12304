package drivertest

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// SSHRun runs cmd as root on addr with the ssh client, accepting only the
// pinned host keys: what a backed machine's CheckSSH uses.
func SSHRun(t *testing.T, addr, keyFile string, hostKeys []string, cmd string) (string, error) {
	t.Helper()
	known := filepath.Join(t.TempDir(), "known_hosts")
	var lines []string
	for _, k := range hostKeys {
		lines = append(lines, addr+" "+k)
	}
	if err := os.WriteFile(known, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ssh", "-i", keyFile, "-o", "StrictHostKeyChecking=yes",
		"-o", "UserKnownHostsFile="+known, "-o", "BatchMode=yes", "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=10",
		"root@"+addr, cmd).CombinedOutput()
	return string(out), err
}

// NewKeyFile makes a cluster key: its authorized_keys line and the file
// of its private key.
func NewKeyFile(t *testing.T) (authorized, file string) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "transit test")
	if err != nil {
		t.Fatal(err)
	}
	file = filepath.Join(t.TempDir(), "id_ed25519")
	if err := os.WriteFile(file, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	pk, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pk))) + " transit-test", file
}
