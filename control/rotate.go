package control

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cloudtransit/transit/districts"
)

// Mesh keys rotate: a node's key lives on its disk, and an image or a
// snapshot of that disk carries it. A key older than network.key_max_age,
// a key a copy of the disk answered with, and a key transit mesh rotate
// names are replaced, one node at a time, in two steps that never leave
// a peer holding a key the node does not run:
//
//  1. the node makes its next key pair beside the current one and
//     reports the public half, which is recorded (mesh_key_next) before
//     anything else changes;
//  2. the node's device takes the next key (its sessions end), the key
//     is recorded as the node's, and every node is given its peers: each
//     peer adds the new key as a new peer and handshakes at once, so the
//     node's traffic pauses for about as long as giving the peers takes.
//
// A run killed between the two finds the node running its next key
// (mesh_key_next) and records it; one killed before finds the node
// running its old key and starts again.

// planRotations rotates the keys of the running members that are due:
// asked (in.rotate), a copy answered with it (mesh_rotate), older than
// network.key_max_age, or a rotation a killed run began. A node due that
// cannot be rotated now (its machine stopped, not ready) waits: asked,
// it blocks the run; due by age, it is a warning.
func planRotations(in planInput, net districts.Network, removals []Action, p *Plan) []Action {
	if net.Mesh != districts.MeshWireGuard {
		return nil
	}
	leaving := map[string]bool{}
	for _, a := range removals {
		leaving[a.Node] = true
	}
	nodes, _ := wellFormed(meshNodes(in.world.state), net.MeshCIDR)
	maxAge, now := net.KeyAge(), in.world.now
	var out []Action
	for _, n := range nodes {
		reason := ""
		asked := in.rotate[n.ID] || n.MeshRotate != ""
		age := now.Sub(cmp.Or(n.MeshKeyAt, n.CreatedAt))
		switch {
		case n.MeshKeyNext != "":
			reason = "finish the rotation of its mesh key a killed run began"
		case n.MeshRotate != "":
			reason = n.MeshRotate
		case in.rotate[n.ID]:
			reason = "asked to rotate its mesh key (transit mesh rotate)"
		case maxAge > 0 && age >= maxAge:
			reason = fmt.Sprintf("its mesh key is %s old (network.key_max_age %s)", roundAge(age), net.KeyMaxAge)
		default:
			continue
		}
		why := ""
		switch {
		case leaving[n.ID]:
			continue // its key leaves with it
		case n.Machine != "" || len(n.Addresses()) == 0:
			why = "its machine does not run"
		case n.Phase != districts.PhaseJoined && n.Phase != districts.PhaseCordoned && n.MeshKeyNext == "":
			why = "it is " + string(n.Phase)
		}
		if why != "" {
			msg := fmt.Sprintf("node %s's mesh key is not rotated now (%s): %s; it rotates once the node runs as a member", n.ID, reason, why)
			if asked {
				p.Blocked = append(p.Blocked, msg)
			} else {
				p.Warnings = append(p.Warnings, msg)
			}
			continue
		}
		out = append(out, Action{Kind: KindRotateKey, District: n.District, Node: n.ID, Role: n.Role, Reason: reason})
	}
	return out
}

// roundAge is an age as days, or hours below two days.
func roundAge(d time.Duration) string {
	if d >= 48*time.Hour {
		return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
	}
	return d.Round(time.Minute).String()
}

// askedRotations are the nodes whose keys opts.RotateKeys (or
// RotateAllKeys) asks to rotate: every named node must be one of the
// cluster's live nodes on the mesh, s being the observed state.
func askedRotations(opts Options, s districts.Resources) (map[string]bool, error) {
	asked := map[string]bool{}
	if len(opts.RotateKeys) == 0 && !opts.RotateAllKeys {
		return asked, nil
	}
	if net, err := meshSettings(opts.Cluster, opts.Districts, s); err != nil || net.Mesh != districts.MeshWireGuard {
		return nil, cmp.Or(err, fmt.Errorf("%w: cluster %s runs none (network.mesh is %s), so it has no mesh key to rotate", ErrNoMesh, opts.Cluster.ID, net.Mesh))
	}
	var ids []string
	for _, n := range meshNodes(s) {
		ids = append(ids, n.ID)
	}
	slices.Sort(ids)
	if opts.RotateAllKeys {
		for _, id := range ids {
			asked[id] = true
		}
		return asked, nil
	}
	for _, id := range opts.RotateKeys {
		if !slices.Contains(ids, id) {
			return nil, fmt.Errorf("%w: no node %q with a mesh key in cluster %s (its nodes on the mesh: %s)", ErrUnknownNode, id, opts.Cluster.ID, cmp.Or(strings.Join(ids, ", "), "none"))
		}
		asked[id] = true
	}
	return asked, nil
}

// rotateKey gives node a.Node a new mesh key and every node its peers
// with it.
func (r *runner) rotateKey(ctx context.Context, a Action) error {
	m, net, ok, err := r.mesher()
	if err != nil || !ok {
		return cmp.Or(err, errNoChange)
	}
	r.meshSync.mu.Lock()
	defer r.meshSync.mu.Unlock()
	n, ok := r.st.node(a.Node)
	if !ok || n.MeshKey == "" {
		return errSkip{fmt.Sprintf("node %s has no mesh key any more", a.Node)}
	}
	keys, err := m.MeshRotate(ctx, n, "")
	if err != nil {
		return fmt.Errorf("ask node %s for its next mesh key: %w", n.ID, err)
	}
	next := keys.Current
	switch {
	case n.MeshKeyNext != "" && keys.Current == n.MeshKeyNext:
		// A killed run's commit: the node runs its next key.
	case keys.Current != n.MeshKey:
		return fmt.Errorf("node %s runs the mesh with key %s, not %s as resources.json records: its key is not rotated; give every node its peers first (the next run does)", n.ID, keys.Current, n.MeshKey)
	default:
		next = keys.Next
		if err := checkMeshEnd(next, n.MeshIP, net.MeshCIDR); err != nil || next == n.MeshKey {
			return fmt.Errorf("node %s's next mesh key %q is no new WireGuard key: its key is not rotated", n.ID, next)
		}
		if holder := keyHolder(r.st.read(), next, n.ID); holder != "" {
			return fmt.Errorf("node %s's next mesh key is node %s's: its key is not rotated", n.ID, holder)
		}
		if err := r.updateNode(n.ID, func(x *districts.Node, _ *districts.Resources) { x.MeshKeyNext = next }); err != nil {
			return err
		}
		if _, err := m.MeshRotate(ctx, n, next); err != nil {
			return fmt.Errorf("node %s: take its next mesh key: %w", n.ID, err)
		}
	}
	if err := r.updateNode(n.ID, func(x *districts.Node, _ *districts.Resources) {
		x.MeshKey, x.MeshKeyNext, x.MeshKeyAt, x.MeshRotate = next, "", r.opts.Clock.Now(), ""
	}); err != nil {
		return err
	}
	r.mu.Lock()
	delete(r.rotate, n.ID)
	r.mu.Unlock()
	return r.syncMeshLocked(ctx, m, net, "")
}

// keyHolder is the live node other than id whose mesh key is key.
func keyHolder(s districts.Resources, key, id string) string {
	for _, o := range liveNodes(s) {
		if o.ID != id && o.CopyOf == "" && o.MeshKey == key {
			return o.ID
		}
	}
	return ""
}
