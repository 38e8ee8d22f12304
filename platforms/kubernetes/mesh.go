package kubernetes

import (
	"context"
	"fmt"
	"slices"

	"github.com/cloudtransit/transit/bundle"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/platforms/meshnode"
	"github.com/cloudtransit/transit/provider"
)

// The node side of the mesh is transit-mesh from the bundle (userspace
// WireGuard on a TUN device), run as package meshnode says, shared with
// the Swarm driver.
const (
	meshInterface = meshnode.Interface
	meshBinary    = "bin/transit-mesh" // in the bundle
)

var _ provider.Mesher = (*driver)(nil)

// MeshUp starts n's end of the mesh (the binary sent first when the
// node lacks it) and returns the key and address the node runs with.
func (d *driver) MeshUp(ctx context.Context, n districts.Node, spec provider.MeshSpec) (provider.MeshEnd, error) {
	if spec.Address != "" {
		if err := d.sendMeshBinary(ctx, n); err != nil {
			return provider.MeshEnd{}, err
		}
	}
	out, err := d.r.Run(ctx, n, "start the mesh", meshnode.UpScript(spec), nil)
	if err != nil {
		return provider.MeshEnd{}, err
	}
	return meshnode.ParseEnd(n, out)
}

// sendMeshBinary puts transit-mesh on n from its district's bundle (a
// node installed from the bundle has it already; one installed from
// packages gets only this file).
func (d *driver) sendMeshBinary(ctx context.Context, n districts.Node) error {
	dir, m, err := d.bundleOf(n)
	switch {
	case err != nil:
		return err
	case dir == "":
		return fmt.Errorf("node %s: the mesh runs transit-mesh from transit's bundle, and district %s has no bundle directory: set one (see docs/kubernetes.md, \"The bundle\")", n.ID, n.District)
	}
	for _, f := range m.Files {
		if f.Path == meshBinary {
			return d.sendChanged(ctx, n, dir, []bundle.File{f})
		}
	}
	return fmt.Errorf("node %s: the bundle in %s has no %s: rebuild it with `make bundle`", n.ID, dir, meshBinary)
}

// onMesh says the cluster runs on the mesh: its nodes, as last given to
// Members, have mesh addresses.
func (d *driver) onMesh() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, n := range append(slices.Clone(d.nodes), d.masters...) {
		if n.MeshIP != "" {
			return true
		}
	}
	return false
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
	out, err := d.r.Run(ctx, n, what, meshnode.RotateScript(commit), nil)
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
