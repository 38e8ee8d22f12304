package drivertest

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloudtransit/transit/provider"
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

// BackedFirewall checks, on a cloud whose machines are real, that the
// group's sources are the machines' firewall: one node reaches another
// only once both addresses are sources. spec is the group's spec with
// those sources; launch the LaunchSpec of a node in the group.
func BackedFirewall(t *testing.T, drv provider.Infrastructure, spec func(sources ...string) provider.GroupSpec,
	launch func(node, group, key string) provider.LaunchSpec) {
	ctx := t.Context()
	key, keyFile := NewKeyFile(t)
	g, err := drv.EnsureGroup(ctx, spec())
	if err != nil {
		t.Fatal(err)
	}
	a, err := drv.Launch(ctx, launch("fw-a", g.ProviderID, key))
	if err != nil {
		t.Fatal(err)
	}
	b, err := drv.Launch(ctx, launch("fw-b", g.ProviderID, key))
	if err != nil {
		t.Fatal(err)
	}
	probe := fmt.Sprintf("timeout 3 bash -c '</dev/tcp/%s/22' && echo open || echo closed", b.PrivateIP)
	reach := func() string {
		t.Helper()
		out, err := SSHRun(t, a.PublicIP, keyFile, a.HostKeys, probe)
		if err != nil {
			t.Fatalf("ssh to %s: %v\n%s", a.PublicIP, err, out)
		}
		return strings.TrimSpace(out)
	}
	if got := reach(); got != "closed" {
		t.Errorf("a reaches b with no sources in the group: %s", got)
	}
	if _, err := drv.EnsureGroup(ctx, spec(a.PublicIP, b.PublicIP)); err != nil {
		t.Fatal(err)
	}
	if got := reach(); got != "open" {
		t.Errorf("a does not reach b once both are sources: %s", got)
	}
	for _, inst := range []provider.Instance{a, b} {
		if err := drv.Terminate(ctx, inst); err != nil {
			t.Fatal(err)
		}
	}
	if err := drv.DeleteGroup(ctx, g); err != nil {
		t.Fatal(err)
	}
}

// CheckDown waits (up to a minute) until nothing answers on port 22 of
// the machine's public address, as for a stopped VM: a backed machine's
// CheckStopped.
func CheckDown(t *testing.T, inst provider.Instance) {
	t.Helper()
	addr := net.JoinHostPort(inst.PublicIP, "22")
	deadline := time.Now().Add(time.Minute)
	for {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			return
		}
		_ = c.Close()
		if time.Now().After(deadline) {
			t.Fatalf("machine %s still answers on %s a minute after it was stopped", inst.ProviderID, addr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
