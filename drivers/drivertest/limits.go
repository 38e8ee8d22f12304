package drivertest

import (
	"fmt"

	"github.com/cloudtransit/transit/provider"
)

// LimitEdge is the most node addresses a group fits by l's GroupLimit,
// with the node mesh's rule or without (mesh), and that many distinct
// test addresses and one more: a driver's test makes a group of the first
// (with the mesh's port when mesh) and is refused the second by its
// cloud.
func LimitEdge(l provider.GroupLimiter, mesh bool) (n int, fits, past []string) {
	for g := l.GroupLimit(n+1, mesh); g.Need <= g.Max; g = l.GroupLimit(n+1, mesh) {
		n++
	}
	past = Addresses(n + 1)
	return n, past[:n], past
}

// Addresses are n distinct test addresses (10.0.0.0, 10.0.0.1, …).
func Addresses(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("10.%d.%d.%d", i/65536%256, i/256%256, i%256)
	}
	return out
}

// A cluster across clouds, as the limits tests size it: 300 nodes over
// three clouds, each a cloud node with a public and a private address.
// Without the mesh every district's group lets in all of the cluster's
// AcrossAddresses (the control loop's count); on the mesh none.
const (
	AcrossNodes     = 300
	AcrossAddresses = 2 * AcrossNodes
)

// MeshPort is the node mesh's port the suite and the limits tests use
// (WireGuard's default), and OtherMeshPort the one it changes to.
const (
	MeshPort      = 51820
	OtherMeshPort = 51821
)
