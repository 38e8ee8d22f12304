package swarm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/platforms/meshnode"
	"github.com/cloudtransit/transit/provider"
)

// Nodes on the mesh, in clouds: private, public and mesh addresses apart.
var (
	meshMaster = districts.Node{ID: "c-master-1", Role: districts.RoleMaster, District: "aws",
		PrivateIP: "172.31.0.5", PublicIP: "203.0.113.5", MeshIP: "10.213.0.1", MeshKey: "k1"}
	meshWorker = districts.Node{ID: "c-worker-1", Role: districts.RoleWorker, District: "gce",
		PrivateIP: "10.132.0.6", PublicIP: "198.51.100.6", MeshIP: "10.213.0.2", MeshKey: "k2"}
)

// TestOnTheMesh: a node on the mesh is its mesh address to Swarm. The
// first manager advertises it and sends its overlay traffic (VXLAN) from
// it; a joining node does the same and joins a manager at its mesh
// address; the swarm's members are matched at their mesh addresses.
func TestOnTheMesh(t *testing.T) {
	t.Parallel()
	var initScripts []string
	s := &swarmAt{list: inspectOf(
		`{"ID":"m","Spec":{"Labels":{"transit-node":"c-master-1"},"Role":"manager","Availability":"active"},"Status":{"State":"ready","Addr":"10.213.0.1"},
		  "ManagerStatus":{"Leader":true,"Reachability":"reachable","Addr":"10.213.0.1:2377"}}`,
		`{"ID":"w","Spec":{"Labels":{"transit-node":"c-worker-1"},"Role":"worker","Availability":"active"},"Status":{"State":"ready","Addr":"10.213.0.2"}}`)}
	f := &fakeNodes{nodes: map[string]func(context.Context, string) (string, error){
		meshMaster.ID: func(ctx context.Context, script string) (string, error) {
			if strings.Contains(script, "docker swarm init") {
				initScripts = append(initScripts, script)
				return "m\n", nil
			}
			return s.manager(ctx, script)
		},
		meshWorker.ID: replies("w\n"),
	}}
	d := testDriver(f)
	if err := d.Init(t.Context(), meshMaster); err != nil {
		t.Fatalf("Init: %v", err)
	}
	want := "docker swarm init --advertise-addr 10.213.0.1 --data-path-addr 10.213.0.1 --listen-addr 0.0.0.0:2377 >/dev/null"
	if len(initScripts) != 1 || !strings.Contains(initScripts[0], want) {
		t.Errorf("init ran %q, want a script with %q", initScripts, want)
	}
	if err := d.Join(t.Context(), meshWorker); err != nil {
		t.Fatalf("Join: %v", err)
	}
	wantStdin := []string{meshWorker.ID + `: docker swarm join: {"ListenAddr":"0.0.0.0:2377","AdvertiseAddr":"10.213.0.2","DataPathAddr":"10.213.0.2","RemoteAddrs":["10.213.0.1:2377"],"JoinToken":"SWMTKN-1-secret"}`}
	if diff := cmp.Diff(wantStdin, f.stdins); diff != "" {
		t.Errorf("the join request (-want +got):\n%s", diff)
	}

	members, _ := membersOf(nodesJSON(t, s.list), []districts.Node{meshMaster, meshWorker})
	for _, m := range members {
		if len(m.Addresses) != 1 || m.Addresses[0] != map[string]string{meshMaster.ID: meshMaster.MeshIP, meshWorker.ID: meshWorker.MeshIP}[m.NodeID] {
			t.Errorf("member %s at %v, want its mesh address only", m.NodeID, m.Addresses)
		}
	}
	// Of two live entries with its identity, the one at its mesh address
	// is the node.
	two := nodesJSON(t, inspectOf(
		`{"ID":"old","Spec":{"Labels":{"transit-node":"c-worker-1"},"Role":"worker"},"Status":{"State":"ready","Addr":"198.51.100.6"}}`,
		`{"ID":"w","Spec":{"Labels":{"transit-node":"c-worker-1"},"Role":"worker"},"Status":{"State":"ready","Addr":"10.213.0.2"}}`))
	if sn, ok := match(two, meshWorker); !ok || sn.ID != "w" {
		t.Errorf("matched %q (%t), want the entry at the mesh address", sn.ID, ok)
	}
}

// meshNode answers like a node whose transit-mesh is sum (empty: none)
// on a machine arch: the probe, the upload (which makes it the one
// sent), and the mesh's start.
type meshNode struct {
	arch, sum string
}

func (m *meshNode) answer(f *fakeNodes) func(context.Context, string) (string, error) {
	return func(_ context.Context, script string) (string, error) {
		switch {
		case script == meshProbeScript:
			out := m.arch + "\n"
			f.mu.Lock()
			if up, ok := f.uploaded[meshWorker.ID+":"+meshnode.Binary]; ok {
				sum := sha256.Sum256([]byte(strings.TrimPrefix(up, "0755 ")))
				m.sum = hex.EncodeToString(sum[:])
			}
			f.mu.Unlock()
			if m.sum != "" {
				out += m.sum + "  " + meshnode.Binary + "\n"
			}
			return out, nil
		case strings.Contains(script, "transit-mesh up"):
			if strings.Contains(script, "want=''") {
				return "none\n", nil
			}
			return "key=K2\naddress=10.213.0.2/16\n", nil
		}
		return "", nil
	}
}

// goMachine is uname -m's word for the machine this test runs on.
func goMachine(t *testing.T) string {
	switch runtime.GOARCH {
	case "amd64":
		return "x86_64"
	case "arm64":
		return "aarch64"
	}
	t.Skipf("no uname -m word known for %s", runtime.GOARCH)
	return ""
}

// TestMeshBinary: starting the mesh sends transit-mesh (a binary on this
// machine) unless the node has that very file, and never to a node of
// another machine; without a usable binary the error says what to set;
// asking a node only sends nothing.
func TestMeshBinary(t *testing.T) {
	t.Parallel()
	exe, err := os.Executable() // a Linux executable for this machine
	if err != nil {
		t.Fatal(err)
	}
	spec := provider.MeshSpec{Address: "10.213.0.2/16", Port: 51820}
	setup := func(opts Options, arch string) (*driver, *fakeNodes) {
		f := &fakeNodes{}
		f.nodes = map[string]func(context.Context, string) (string, error){meshWorker.ID: (&meshNode{arch: arch}).answer(f)}
		return newDriver("c", opts, f), f
	}

	d, f := setup(Options{MeshBinary: exe}, goMachine(t))
	end, err := d.MeshUp(t.Context(), meshWorker, spec)
	if err != nil || end != (provider.MeshEnd{PublicKey: "K2", Address: "10.213.0.2"}) {
		t.Fatalf("MeshUp: %+v, %v", end, err)
	}
	content, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.uploaded[meshWorker.ID+":"+meshnode.Binary]; got != "0755 "+string(content) {
		t.Errorf("uploaded %d bytes to %s, want %s, mode 0755 (uploads: %d)", len(got), meshnode.Binary, exe, len(f.uploaded))
	}
	if _, err := d.MeshUp(t.Context(), meshWorker, spec); err != nil {
		t.Fatal(err)
	}
	want := []string{
		meshWorker.ID + ": look for transit-mesh", meshWorker.ID + ": upload " + meshnode.Binary, meshWorker.ID + ": start the mesh",
		// The node has it now.
		meshWorker.ID + ": look for transit-mesh", meshWorker.ID + ": start the mesh",
	}
	if diff := cmp.Diff(want, f.calls()); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}

	d, f = setup(Options{MeshBinary: exe, MeshHint: "set TRANSIT_MESH_BINARY"}, "s390x")
	if _, err := d.MeshUp(t.Context(), meshWorker, spec); err == nil || !strings.Contains(err.Error(), "node c-worker-1 is a s390x machine, and the transit-mesh in "+exe+" is built for "+goMachine(t)+": set TRANSIT_MESH_BINARY") {
		t.Errorf("a node of another machine: %v", err)
	}
	if len(f.uploaded) != 0 {
		t.Errorf("sent to a node of another machine: %d uploads", len(f.uploaded))
	}

	text := filepath.Join(t.TempDir(), "transit-mesh")
	if err := os.WriteFile(text, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		binary, err string
	}{
		{"", "node c-worker-1: the node mesh runs transit-mesh on every node, and no transit-mesh binary was found: set TRANSIT_MESH_BINARY"},
		{filepath.Join(t.TempDir(), "missing"), "no such file or directory: set TRANSIT_MESH_BINARY"},
		{text, text + " is not a Linux executable (transit-mesh runs on the nodes): set TRANSIT_MESH_BINARY"},
	} {
		d, f := setup(Options{MeshBinary: tc.binary, MeshHint: "set TRANSIT_MESH_BINARY"}, goMachine(t))
		if _, err := d.MeshUp(t.Context(), meshWorker, spec); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("binary %q: %v, want %q", tc.binary, err, tc.err)
		}
		if len(f.calls()) != 0 {
			t.Errorf("binary %q: ran %v", tc.binary, f.calls())
		}
	}

	// Asking only: no binary needed, nothing sent.
	d, f = setup(Options{}, goMachine(t))
	if end, err := d.MeshUp(t.Context(), meshWorker, provider.MeshSpec{Port: 51820}); err != nil || end != (provider.MeshEnd{}) {
		t.Errorf("asking a node without the mesh: %+v, %v", end, err)
	}
	if diff := cmp.Diff([]string{meshWorker.ID + ": start the mesh"}, f.calls()); diff != "" {
		t.Errorf("asking only (-want +got):\n%s", diff)
	}
}

// TestMeshPeers: the peers reach the node on stdin, as transit-mesh reads
// them.
func TestMeshPeers(t *testing.T) {
	t.Parallel()
	f := &fakeNodes{nodes: map[string]func(context.Context, string) (string, error){meshWorker.ID: replies("")}}
	d := testDriver(f)
	peers := []provider.MeshPeer{{Node: meshMaster.ID, PublicKey: "k1", Endpoint: "203.0.113.5:51820", Address: meshMaster.MeshIP}}
	if err := d.MeshPeers(t.Context(), meshWorker, peers); err != nil {
		t.Fatal(err)
	}
	want := []string{meshWorker.ID + `: give the mesh its peers: [{"node":"c-master-1","public_key":"k1","endpoint":"203.0.113.5:51820","address":"10.213.0.1"}]`}
	if diff := cmp.Diff(want, f.stdins); diff != "" {
		t.Errorf("stdin (-want +got):\n%s", diff)
	}
}
