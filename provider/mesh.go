package provider

import (
	"context"

	"github.com/cloudtransit/transit/districts"
)

// Mesher is a platform that runs the cluster's encrypted node mesh
// (cluster.json's network.mesh "wireguard") on its nodes: the platform
// then uses every node's mesh address for all traffic between nodes.
// Keys are made on the nodes; only public keys travel.
type Mesher interface {
	// MeshUp starts n's end of the mesh, idempotently. A node already
	// running it keeps its own address and key, whatever n.MeshIP says:
	// the node is the truth. It returns the key and the address the node
	// runs with. With no spec.Address it only asks: a node without the
	// mesh answers an empty MeshEnd.
	MeshUp(ctx context.Context, n districts.Node, spec MeshSpec) (MeshEnd, error)
	// MeshPeers makes n's peers exactly peers.
	MeshPeers(ctx context.Context, n districts.Node, peers []MeshPeer) error
	// MeshRotate changes n's key in two steps, each idempotent. With
	// commit empty it makes the node's next key pair, kept beside the
	// current one until committed (asked again, the same one), and
	// returns the key the node runs with and the next one. With commit
	// the next key's public half, the node's device runs with that key
	// before MeshRotate returns (Current is commit, Next empty); a node
	// already running with it answers the same.
	MeshRotate(ctx context.Context, n districts.Node, commit string) (MeshKeys, error)
}

// MeshKeys are a node's public mesh keys during a rotation: the one its
// device runs with, and the next one it made.
type MeshKeys struct {
	Current, Next string
}

// MeshSpec is what a node's end of the mesh is started with.
type MeshSpec struct {
	// Address is the node's mesh address with the mesh's prefix length
	// (10.213.0.7/16).
	Address string
	Port    int
}

// MeshEnd is a node's end of the mesh as the node reports it.
type MeshEnd struct {
	// PublicKey is its WireGuard public key (base64).
	PublicKey string
	// Address is its mesh address, without prefix length.
	Address string
}

// MeshPeer is another node as a node's mesh reaches it; its JSON is the
// peers file transit-mesh reads.
type MeshPeer struct {
	Node      string `json:"node"`
	PublicKey string `json:"public_key"`
	// Endpoint is address:port the peer is reached at from the node: its
	// private address within one cloud network, else its public one.
	Endpoint string `json:"endpoint"`
	Address  string `json:"address"`
}
