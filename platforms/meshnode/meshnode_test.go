package meshnode

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// TestParseEnd: the node's answer is its key and address (the prefix
// length dropped), "none" when asked only and it has no mesh; anything
// else is an error that says what came back.
func TestParseEnd(t *testing.T) {
	t.Parallel()
	n := districts.Node{ID: "w1"}
	for _, tc := range []struct {
		out  string
		want provider.MeshEnd
		err  string
	}{
		{"key=AAAA\naddress=10.213.0.7/16\n", provider.MeshEnd{PublicKey: "AAAA", Address: "10.213.0.7"}, ""},
		{"none\n", provider.MeshEnd{}, ""},
		{"key=AAAA\n", provider.MeshEnd{}, `node w1: the mesh did not say its key and address (it printed "key=AAAA")`},
		{"", provider.MeshEnd{}, "node w1: the mesh did not say"},
	} {
		got, err := ParseEnd(n, tc.out)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want %q", tc.out, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: %+v, %v; want %+v", tc.out, got, err, tc.want)
		}
	}
}

// TestUpScript: the node keeps an address it has; transit-mesh runs from
// BinDir at the address with the port, as a systemd unit or under
// transit-supervise, which a node without it (a Swarm node) gets first;
// the script waits for the address on the interface.
func TestUpScript(t *testing.T) {
	t.Parallel()
	s := UpScript(provider.MeshSpec{Address: "10.213.0.7/16", Port: 51820})
	for _, want := range []string{
		"set -eu",
		"want=10.213.0.7/16",
		"if [ -f /var/lib/transit/mesh/address ]; then",
		"key=$(transit-mesh key -dir /var/lib/transit/mesh)",
		"systemctl start transit-mesh",
		`setsid /opt/transit/bin/transit-supervise transit-mesh /opt/transit/bin/transit-mesh up -dir /var/lib/transit/mesh -interface transit0 -address "$addr" -port 51820 </dev/null >/dev/null 2>&1 &`,
		"mv /opt/transit/bin/transit-supervise.new /opt/transit/bin/transit-supervise",
		`until ip -o addr show dev transit0 2>/dev/null | grep -q " ${addr%/*}/"; do`,
		`echo "key=$key"`,
	} {
		if !hasLine(s, want) {
			t.Errorf("the up script lacks the line %q:\n%s", want, s)
		}
	}
	if !strings.Contains(s, "ExecStart=/opt/transit/bin/transit-mesh up -dir /var/lib/transit/mesh -interface transit0 -address ADDR -port 51820") {
		t.Errorf("the unit does not run transit-mesh at the node's address:\n%s", s)
	}
	if asked := UpScript(provider.MeshSpec{Port: 51820}); !hasLine(asked, "want=''") {
		t.Errorf("asking only carries an address:\n%s", asked)
	}
}

// TestEnsureSupervise runs the part of the up script that writes
// transit-supervise, in a scratch directory: a node without it gets it,
// executable; one that has it as it should be is not written again.
func TestEnsureSupervise(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script := strings.ReplaceAll(ensureSupervise, BinDir, dir)
	run := func() {
		t.Helper()
		if out, err := exec.CommandContext(t.Context(), "sh", "-euc", script).CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	run()
	f := filepath.Join(dir, "transit-supervise")
	data, err := os.ReadFile(f)
	if err != nil || string(data) != SuperviseScript {
		t.Fatalf("transit-supervise is %q (%v), want SuperviseScript", data, err)
	}
	if fi, _ := os.Stat(f); fi.Mode().Perm() != 0o755 {
		t.Errorf("transit-supervise has mode %v", fi.Mode())
	}
	before, _ := os.Stat(f)
	run()
	if after, _ := os.Stat(f); !os.SameFile(before, after) {
		t.Error("an unchanged transit-supervise was written again")
	}
	if err := os.WriteFile(f, []byte("#!/bin/sh\nold\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	run()
	if data, _ := os.ReadFile(f); string(data) != SuperviseScript {
		t.Errorf("a stale transit-supervise stays: %q", data)
	}
}

// TestPeers: no peers is an empty list, never null (transit-mesh would
// refuse it).
func TestPeers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		peers []provider.MeshPeer
		want  string
	}{
		{nil, "[]"},
		{[]provider.MeshPeer{{Node: "m1", PublicKey: "k", Endpoint: "203.0.113.5:51820", Address: "10.213.0.1"}},
			`[{"node":"m1","public_key":"k","endpoint":"203.0.113.5:51820","address":"10.213.0.1"}]`},
	} {
		got, err := Peers(tc.peers)
		if err != nil || string(got) != tc.want {
			t.Errorf("Peers(%v) = %s, %v; want %s", tc.peers, got, err, tc.want)
		}
	}
	if !hasLine(PeersScript, "transit-mesh peers -dir /var/lib/transit/mesh") || !hasLine(PeersScript, "pkill -HUP -x transit-mesh 2>/dev/null || true") {
		t.Errorf("the peers script:\n%s", PeersScript)
	}
}

func hasLine(script, want string) bool {
	for l := range strings.Lines(script) {
		if strings.TrimSpace(l) == want {
			return true
		}
	}
	return false
}
