package swarm

import (
	"bufio"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/platforms/meshnode"
	"github.com/cloudtransit/transit/provider"
)

// A swarm on the node mesh runs transit-mesh on every node as package
// meshnode says (the Kubernetes driver runs it the same way). A swarm node
// has no bundle: the binary is Options.MeshBinary, a file on the machine
// transit runs on, sent to a node whose copy differs. Swarm then uses the
// node's mesh address for everything between nodes (advertiseAddr): the
// managers' Raft and the nodes' control traffic (2377), gossip (7946) and
// the overlay networks' VXLAN (4789) travel inside the mesh.

var _ provider.Mesher = (*driver)(nil)

// MeshUp starts n's end of the mesh (transit-mesh sent first when the
// node lacks it) and returns the key and address the node runs with.
func (d *driver) MeshUp(ctx context.Context, n districts.Node, spec provider.MeshSpec) (provider.MeshEnd, error) {
	if spec.Address != "" {
		if err := d.sendMeshBinary(ctx, n); err != nil {
			return provider.MeshEnd{}, err
		}
	}
	out, err := d.run(ctx, n, "start the mesh", meshnode.UpScript(spec))
	if err != nil {
		return provider.MeshEnd{}, err
	}
	return meshnode.ParseEnd(n, out)
}

// MeshRotate makes n's next key, or commits it (commit, its public
// half): transit-mesh is sent first, as an older one has no rotate.
func (d *driver) MeshRotate(ctx context.Context, n districts.Node, commit string) (provider.MeshKeys, error) {
	if err := d.sendMeshBinary(ctx, n); err != nil {
		return provider.MeshKeys{}, err
	}
	what := "make the mesh's next key"
	if commit != "" {
		what = "commit the mesh's next key"
	}
	out, err := d.run(ctx, n, what, meshnode.RotateScript(commit))
	if err != nil {
		return provider.MeshKeys{}, err
	}
	return meshnode.ParseKeys(n, out)
}

// MeshPeers replaces n's peers; the device reads them at once.
func (d *driver) MeshPeers(ctx context.Context, n districts.Node, peers []provider.MeshPeer) error {
	data, err := meshnode.Peers(peers)
	if err != nil {
		return err
	}
	_, err = d.r.Run(ctx, n, "give the mesh its peers", meshnode.PeersScript, data)
	return err
}

// meshBinary is the transit-mesh this driver sends: its file, digest,
// size and the machine it runs on (uname -m's word; empty when transit
// does not know the ELF machine).
type meshBinary struct {
	path, sum, arch string
	size            int64
}

// readMeshBinary reads and checks the transit-mesh at path: a Linux
// executable. Every error ends with hint, which says what to set.
func readMeshBinary(path, hint string) (meshBinary, error) {
	if path == "" {
		return meshBinary{}, fmt.Errorf("the node mesh runs transit-mesh on every node, and no transit-mesh binary was found: %s", hint)
	}
	f, err := os.Open(path)
	if err != nil {
		return meshBinary{}, fmt.Errorf("the node mesh runs transit-mesh on every node: %w: %s", err, hint)
	}
	defer func() { _ = f.Close() }()
	ef, err := elf.NewFile(f)
	if err != nil {
		return meshBinary{}, fmt.Errorf("%s is not a Linux executable (transit-mesh runs on the nodes): %s", path, hint)
	}
	b := meshBinary{path: path, arch: unameMachine[ef.Machine]}
	h := sha256.New()
	if b.size, err = io.Copy(h, io.NewSectionReader(f, 0, 1<<40)); err != nil {
		return meshBinary{}, fmt.Errorf("read %s: %w", path, err)
	}
	b.sum = hex.EncodeToString(h.Sum(nil))
	return b, nil
}

// unameMachine is the word uname -m prints on a machine of each ELF
// machine transit-mesh is built for.
var unameMachine = map[elf.Machine]string{
	elf.EM_X86_64:  "x86_64",
	elf.EM_AARCH64: "aarch64",
}

// sameMachine says a binary for arch runs on a node whose uname -m says
// node (arm64 is what some systems call aarch64).
func sameMachine(arch, node string) bool {
	if node == "arm64" {
		node = "aarch64"
	}
	return arch == "" || arch == node
}

// meshProbeScript prints the node's machine (uname -m) and the SHA-256 of
// its transit-mesh, if it has one.
const meshProbeScript = `set -eu
uname -m
if [ -f ` + meshnode.Binary + ` ]; then sha256sum ` + meshnode.Binary + `; fi
`

// parseMeshProbe reads meshProbeScript's answer.
func parseMeshProbe(out string) (machine, sum string) {
	sc := bufio.NewScanner(strings.NewReader(out))
	if sc.Scan() {
		machine = strings.TrimSpace(sc.Text())
	}
	if sc.Scan() {
		if s, p, ok := strings.Cut(sc.Text(), "  "); ok && p == meshnode.Binary && len(s) == 64 {
			sum = s
		}
	}
	return machine, sum
}

// sendMeshBinary puts transit-mesh on n unless the node has this very
// binary; a binary for another machine than the node's is refused before
// it is sent.
func (d *driver) sendMeshBinary(ctx context.Context, n districts.Node) error {
	b, err := d.meshBin()
	if err != nil {
		return fmt.Errorf("node %s: %w", n.ID, err)
	}
	out, err := d.run(ctx, n, "look for transit-mesh", meshProbeScript)
	if err != nil {
		return err
	}
	machine, sum := parseMeshProbe(out)
	switch {
	case !sameMachine(b.arch, machine):
		return fmt.Errorf("node %s is a %s machine, and the transit-mesh in %s is built for %s: %s", n.ID, machine, b.path, b.arch, d.meshHint())
	case sum == b.sum:
		return nil
	}
	f, err := os.Open(b.path)
	if err != nil {
		return fmt.Errorf("node %s: %w", n.ID, err)
	}
	defer func() { _ = f.Close() }()
	if err := d.r.Upload(ctx, n, meshnode.Binary, 0o755, f, b.size); err != nil {
		return fmt.Errorf("node %s: send transit-mesh: %w", n.ID, err)
	}
	return nil
}

// meshHint is what to set to give the driver another transit-mesh.
func (d *driver) meshHint() string {
	if d.opts.MeshHint != "" {
		return d.opts.MeshHint
	}
	return "set the swarm driver's Options.MeshBinary"
}
