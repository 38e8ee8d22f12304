package control

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// The mesh (cluster.json's network.mesh "wireguard"): every node runs
// one end of an encrypted WireGuard mesh at an address of the mesh range,
// kept for its life, and the platform uses those addresses for all
// traffic between nodes. The loop keeps three rules:
//
//   - a node's end is started (its key made on the node, only the public
//     key recorded) before it joins, at the address the node reports:
//     the node is the truth, the state a cache;
//   - every live node's peers include a node before that node joins (a
//     join waits for it), so the platform never sees a member it cannot
//     reach;
//   - once nodes leave, every remaining node's peers are made exactly the
//     live nodes (KindMesh), and whenever the state's digest of what the
//     nodes were last given differs from the live nodes', again.

// meshNodes are the live nodes on the mesh: those with an address and a
// key, copies aside.
func meshNodes(s districts.Resources) []districts.Node {
	var out []districts.Node
	for _, n := range liveNodes(s) {
		if n.CopyOf == "" && n.MeshIP != "" && n.MeshKey != "" {
			out = append(out, *n)
		}
	}
	return out
}

// meshEndpoint is the address a node in district from reaches peer p
// at: its private address within one cloud network, else its public one;
// empty when it has none (a stopped EC2 machine loses its public
// address).
func meshEndpoint(ds map[string]districts.District, from string, p districts.Node) string {
	if ds[from].CloudNetwork() == ds[p.District].CloudNetwork() {
		return p.PrivateIP
	}
	return p.PublicIP
}

// meshPeers are node n's peers among nodes: every other node it has an
// address for.
func meshPeers(ds map[string]districts.District, n districts.Node, nodes []districts.Node, port int) []provider.MeshPeer {
	var out []provider.MeshPeer
	for _, p := range nodes {
		addr := meshEndpoint(ds, n.District, p)
		if p.ID == n.ID || addr == "" {
			continue
		}
		out = append(out, provider.MeshPeer{Node: p.ID, PublicKey: p.MeshKey, Endpoint: net.JoinHostPort(addr, strconv.Itoa(port)), Address: p.MeshIP})
	}
	return out
}

// meshDigest sums up what every node of nodes is given: the same nodes,
// keys, mesh addresses and machine addresses give the same digest.
func meshDigest(ds map[string]districts.District, nodes []districts.Node) string {
	lines := make([]string, 0, len(nodes))
	for _, n := range nodes {
		lines = append(lines, strings.Join([]string{n.ID, n.MeshKey, n.MeshIP, n.PublicIP, n.PrivateIP, ds[n.District].CloudNetwork()}, " "))
	}
	slices.Sort(lines)
	sum := sha256.Sum256([]byte(strings.Join(lines, "\n")))
	return hex.EncodeToString(sum[:8])
}

// meshSettings are the cluster's network settings with the mesh the
// platform was formed with: once recorded, it stays; a setting in
// cluster.json that differs is refused.
func meshSettings(c districts.Cluster, ds []districts.District, s districts.Resources) (districts.Network, error) {
	n := c.Network(ds)
	if s.Mesh == "" || s.Mesh == n.Mesh {
		return n, nil
	}
	if c.NetworkSettings != nil && c.NetworkSettings.Mesh != "" {
		return n, fmt.Errorf("cluster.json says network.mesh %s, but the platform was formed with mesh %s (resources.json): transit does not move a running platform onto or off the mesh; set it back to %s, or destroy and apply anew", n.Mesh, s.Mesh, s.Mesh)
	}
	n.Mesh = s.Mesh // the default changed with the deployments: the platform's stays
	return n, nil
}

// planMesh gives every node its peers again after removals, and whenever
// the nodes were last given another mesh than the live one (a run killed
// between a change and the peers, a member without a recorded key); net
// is meshSettings'.
func planMesh(in planInput, net districts.Network, removals []Action) []Action {
	if net.Mesh != districts.MeshWireGuard {
		return nil
	}
	ds := map[string]districts.District{}
	for _, d := range in.districts {
		ds[d.ID] = d
	}
	nodes := meshNodes(in.world.state)
	digest := meshDigest(ds, nodes)
	reason := ""
	switch {
	case slices.ContainsFunc(removals, func(a Action) bool { return a.Kind == KindTerminate }):
		reason = "drop the removed nodes from every node's mesh peers"
	case slices.ContainsFunc(in.world.live(), func(n *districts.Node) bool { return n.Phase.Member() && n.CopyOf == "" && n.MeshKey == "" }),
		len(garbledEnds(nodes, net.MeshCIDR)) > 0:
		reason = "start the mesh on members without a recorded key (or with one resources.json garbled), and give every node its peers"
	case len(nodes) > 0 && digest != in.world.state.MeshPeers:
		reason = "the nodes were last given another mesh than the live nodes': give every node its peers"
	case slices.ContainsFunc(nodes, func(n districts.Node) bool { return owedPeers(n, digest) }):
		reason = "a node has not taken the live nodes' peers (its machine did not run when they changed): give every node its peers"
	default:
		return nil
	}
	return []Action{{Kind: KindMesh, Reason: reason}}
}

// owedPeers says running node n has not taken the live nodes' peers,
// whose digest is digest.
func owedPeers(n districts.Node, digest string) bool {
	return n.Machine == "" && len(n.Addresses()) > 0 && n.MeshTaken != digest
}

// mesher is the platform's mesh, and the resolved settings; ok is false
// when the cluster has no mesh.
func (r *runner) mesher() (provider.Mesher, districts.Network, bool, error) {
	net, err := meshSettings(r.opts.Cluster, r.opts.Districts, r.st.header())
	if err != nil || net.Mesh != districts.MeshWireGuard {
		return nil, net, false, err
	}
	m, ok := r.opts.Platform.(provider.Mesher)
	if !ok {
		return nil, net, false, fmt.Errorf("network.mesh is %s, but the platform %s does not run the mesh", net.Mesh, r.opts.Cluster.Platform)
	}
	return m, net, true, nil
}

// meshPort is the mesh's UDP port that groups let in, 0 off the mesh.
func (r *runner) meshPort() int {
	net, err := meshSettings(r.opts.Cluster, r.opts.Districts, r.st.header())
	if err != nil || net.Mesh != districts.MeshWireGuard {
		return 0
	}
	return net.MeshPort
}

// meshUp starts n's end of the mesh, at an address of the range kept
// in the state first (so a run killed after it never gives it twice),
// and records the key and address the node reports. An address is only
// given once every node's is known, n's own included (a run killed
// after starting it may have lost the record).
func (r *runner) meshUp(ctx context.Context, m provider.Mesher, net districts.Network, n districts.Node) (districts.Node, error) {
	if n.MeshIP == "" {
		r.meshSync.alloc.Lock()
		defer r.meshSync.alloc.Unlock()
		if err := r.learnMesh(ctx, m, net); err != nil {
			return n, err
		}
		n, _ = r.st.node(n.ID)
	}
	if n.MeshIP == "" {
		var addrErr error
		if err := r.updateNode(n.ID, func(x *districts.Node, s *districts.Resources) {
			if x.MeshIP != "" {
				return
			}
			var used []string
			for _, o := range s.Nodes {
				used = append(used, o.MeshIP)
			}
			for a := range s.MeshRetired {
				used = append(used, a) // a node may still send it to the leaver's key
			}
			x.MeshIP, addrErr = districts.MeshAddress(net.MeshCIDR, used)
		}); err != nil {
			return n, err
		}
		if addrErr != nil {
			return n, addrErr
		}
		n, _ = r.st.node(n.ID)
	}
	bits := netip.MustParsePrefix(net.MeshCIDR).Bits()
	end, err := m.MeshUp(ctx, n, provider.MeshSpec{Address: n.MeshIP + "/" + strconv.Itoa(bits), Port: net.MeshPort})
	if err != nil {
		return n, fmt.Errorf("start the mesh on node %s: %w", n.ID, err)
	}
	if err := r.recordMesh(n.ID, end, net.MeshCIDR); err != nil {
		return n, err
	}
	n.MeshIP, n.MeshKey = end.Address, end.PublicKey
	return n, nil
}

// recordMesh records the end of the mesh node id reports, unless it is
// malformed (a key that is no WireGuard key, an address outside
// mesh_cidr) or another live node has its address or key: two nodes at
// one address would take each other's traffic, and a machine with a live
// node's key is a copy of its disk. Such a node joins nothing (a node
// that failed to join is replaced).
func (r *runner) recordMesh(id string, end provider.MeshEnd, cidr string) error {
	if err := checkMeshEnd(end.PublicKey, end.Address, cidr); err != nil {
		return fmt.Errorf("node %s reports %w: it joins nothing", id, err)
	}
	var clash, original, machine string
	err := r.updateNode(id, func(x *districts.Node, s *districts.Resources) {
		for _, o := range liveNodes(*s) {
			switch {
			case o.ID == id || o.CopyOf != "":
			case o.MeshIP == end.Address:
				clash = fmt.Sprintf("runs the mesh at %s, which is node %s's", end.Address, o.ID)
				return
			case o.MeshKey == end.PublicKey:
				clash, original, machine = fmt.Sprintf("answers with node %s's mesh key: a copy of its disk", o.ID), o.ID, x.ProviderID
				return
			}
		}
		if x.MeshKey != end.PublicKey {
			x.MeshKeyAt = r.opts.Clock.Now()
		}
		x.MeshIP, x.MeshKey = end.Address, end.PublicKey
	})
	if err != nil {
		return err
	}
	if original != "" {
		// Whoever holds the copy could handshake as the node: the
		// node's key rotates, so the copy's is dead.
		if err := r.updateNode(original, func(x *districts.Node, _ *districts.Resources) {
			x.MeshRotate = fmt.Sprintf("node %s (machine %s) answered with this node's mesh key: a copy of its disk holds it", id, machine)
		}); err != nil {
			return err
		}
	}
	if clash != "" {
		return fmt.Errorf("node %s %s: it joins nothing", id, clash)
	}
	return nil
}

// garbledEnds are the mesh nodes whose recorded end is malformed or
// another node's too (wellFormed).
func garbledEnds(nodes []districts.Node, cidr string) map[string]error {
	_, bad := wellFormed(nodes, cidr)
	return bad
}

// checkMeshEnd says what is wrong with a node's mesh key and address.
func checkMeshEnd(key, addr, cidr string) error {
	if b, err := base64.StdEncoding.DecodeString(key); err != nil || len(b) != 32 {
		return fmt.Errorf("mesh key %q, not a WireGuard key (32 bytes in base64)", key)
	}
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return fmt.Errorf("mesh range %q: %w", cidr, err)
	}
	a, err := netip.ParseAddr(addr)
	if err != nil || !p.Contains(a) {
		return fmt.Errorf("mesh address %q, not one of mesh_cidr %s", addr, cidr)
	}
	return nil
}

// wellFormed splits mesh nodes into those every peers file may hold and
// the others, each with why: a malformed key or address, or an address or
// key another node holds too (a resources.json changed by hand; no run
// records such a node). One bad entry must not make every node refuse its
// whole peers file.
func wellFormed(nodes []districts.Node, cidr string) (ok []districts.Node, bad map[string]error) {
	bad = map[string]error{}
	addrs, keys := map[string]int{}, map[string]int{}
	for _, n := range nodes {
		addrs[n.MeshIP]++
		keys[n.MeshKey]++
	}
	for _, n := range nodes {
		err := checkMeshEnd(n.MeshKey, n.MeshIP, cidr)
		switch {
		case err != nil:
		case addrs[n.MeshIP] > 1:
			err = fmt.Errorf("mesh address %s, which another node holds too", n.MeshIP)
		case keys[n.MeshKey] > 1:
			err = fmt.Errorf("mesh key %s, which another node holds too", n.MeshKey)
		}
		if err != nil {
			bad[n.ID] = fmt.Errorf("node %s is left out of every node's mesh peers: resources.json gives it %w", n.ID, err)
			continue
		}
		ok = append(ok, n)
	}
	return ok, bad
}

// meshTries bounds the attempts to give one node its peers in a round.
const meshTries = 3

// learnMesh asks every node whose mesh address the state lacks (a lost
// resources.json, a run killed before it heard back) for its end of the
// mesh, and records it. A member that cannot be asked (its machine
// stopped, no address, no answer) is an error: a new address could be
// its. A node that is no member and does not answer is left out: it
// joins nothing before it answered (its own join asks it first), and an
// address it turns out to hold that another node has fails its join.
func (r *runner) learnMesh(ctx context.Context, m provider.Mesher, net districts.Network) error {
	var ask []districts.Node
	for _, n := range liveNodes(r.st.read()) {
		if n.MeshIP != "" || n.CopyOf != "" {
			continue
		}
		if n.Machine != "" || len(n.Addresses()) == 0 {
			if !n.Phase.Member() {
				continue
			}
			return fmt.Errorf("node %s's mesh address is unknown and its machine cannot be asked now (%s): no new address is given until it runs again or is gone", n.ID, cmp.Or(n.Machine, "no address"))
		}
		ask = append(ask, *n)
	}
	var mu sync.Mutex
	var errs []error
	r.parallel(ctx, ask, func(ctx context.Context, n districts.Node) {
		end, err := m.MeshUp(ctx, n, provider.MeshSpec{Port: net.MeshPort})
		if err == nil && end.Address != "" {
			err = r.recordMesh(n.ID, end, net.MeshCIDR)
		}
		if err != nil && !n.Phase.Member() {
			return
		}
		if err != nil {
			mu.Lock()
			errs = append(errs, fmt.Errorf("node %s does not say its mesh address, so no new one is given (it could be the same): %w", n.ID, err))
			mu.Unlock()
		}
	})
	if err := ctx.Err(); err != nil {
		return err
	}
	return errors.Join(errs...)
}

// meshSync coalesces the rounds that give nodes their peers: joins
// running at once wait for one round that includes them.
type meshSync struct {
	// alloc is held while new mesh addresses are given.
	alloc sync.Mutex
	mu    sync.Mutex
	// given holds the nodes (id → key) the last round gave to everyone.
	given map[string]string
}

// syncMesh gives every mesh node its peers. With need set, it returns as
// soon as a round that included need is done, every ready member and
// need itself having taken their peers; else it runs a round and, when
// every node took its peers, records the digest. Members without a
// recorded key are started first. Other nodes that cannot be given their
// peers are a problem of the run, not an error of the join: a node down
// must not stop the joins that replace it.
func (r *runner) syncMesh(ctx context.Context, need string) error {
	m, net, ok, err := r.mesher()
	if err != nil || !ok {
		return err
	}
	r.meshSync.mu.Lock()
	defer r.meshSync.mu.Unlock()
	return r.syncMeshLocked(ctx, m, net, need)
}

// syncMeshLocked is syncMesh's round, meshSync.mu held.
func (r *runner) syncMeshLocked(ctx context.Context, m provider.Mesher, net districts.Network, need string) error {
	if need != "" {
		if n, ok := r.st.node(need); ok && n.MeshKey != "" && r.meshSync.given[need] == n.MeshKey {
			return nil
		}
	}
	s := r.st.read()
	garbled := garbledEnds(meshNodes(s), net.MeshCIDR)
	var starts []districts.Node
	for _, n := range liveNodes(s) {
		if n.Phase.Member() && n.CopyOf == "" && (n.MeshKey == "" || garbled[n.ID] != nil) {
			if n.MeshKey != "" {
				// Garbled by hand: forget it, so the node is asked
				// what it runs (learnMesh) rather than told.
				if err := r.updateNode(n.ID, func(x *districts.Node, _ *districts.Resources) { x.MeshIP, x.MeshKey = "", "" }); err != nil {
					return err
				}
				n.MeshIP, n.MeshKey = "", ""
			}
			starts = append(starts, *n)
		}
	}
	var mu sync.Mutex
	var errs, failed []error
	r.parallel(ctx, starts, func(ctx context.Context, n districts.Node) {
		if _, err := r.meshUp(ctx, m, net, n); err != nil {
			mu.Lock()
			failed = append(failed, err)
			mu.Unlock()
		}
	})
	s = r.st.read()
	nodes, bad := wellFormed(meshNodes(s), net.MeshCIDR)
	for _, id := range slices.Sorted(maps.Keys(bad)) {
		failed = append(failed, bad[id])
	}
	// Only machines that run can take their peers; a stopped one is
	// owed them once it runs again (owedPeers).
	running := slices.DeleteFunc(slices.Clone(nodes), func(n districts.Node) bool { return n.Machine != "" || len(n.Addresses()) == 0 })
	digest := meshDigest(r.districts, nodes)
	var took []string
	r.parallel(ctx, running, func(ctx context.Context, n districts.Node) {
		var err error
		for try := range meshTries {
			if err = m.MeshPeers(ctx, n, meshPeers(r.districts, n, nodes, net.MeshPort)); err == nil || ctx.Err() != nil {
				break
			}
			if try < meshTries-1 {
				_ = r.opts.Clock.Sleep(ctx, time.Duration(try+1)*time.Second)
			}
		}
		if err == nil {
			mu.Lock()
			took = append(took, n.ID)
			mu.Unlock()
			return
		}
		err = fmt.Errorf("give node %s its mesh peers: %w", n.ID, err)
		mu.Lock()
		defer mu.Unlock()
		// A join waits for every ready member: one that cannot reach
		// the new node would be a member the platform cannot use. A
		// member reported not ready (or not yet one) must not hold
		// back the joins that replace it.
		if n.ID == need || need != "" && n.Phase.Member() && n.Phase != districts.PhaseNotReady && n.Phase != districts.PhaseStopped {
			errs = append(errs, err)
		} else {
			failed = append(failed, err)
		}
	})
	if err := r.tookPeers(took, digest); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	r.meshSync.given = map[string]string{}
	for _, n := range nodes {
		r.meshSync.given[n.ID] = n.MeshKey
	}
	if len(failed) > 0 {
		if need == "" {
			return errors.Join(failed...)
		}
		for _, err := range failed {
			r.problem("%v (the next run tries again)", err)
		}
		return nil
	}
	if err := r.st.update(func(s *districts.Resources) { s.MeshPeers = digest }); err != nil {
		return errFatal{err}
	}
	return nil
}

// tookPeers records that nodes ids took the peers of digest, lists
// without any node that left: they no longer hold a retired address.
func (r *runner) tookPeers(ids []string, digest string) error {
	if len(ids) == 0 {
		return nil
	}
	err := r.st.updateNodes(ids, r.opts.Clock.Now(), func(n *districts.Node, s *districts.Resources) {
		n.MeshTaken = digest
		// A new map: snapshots of the state share the old one.
		var retired map[string][]string
		for addr, holders := range s.MeshRetired {
			if left := slices.DeleteFunc(slices.Clone(holders), func(id string) bool { return id == n.ID }); len(left) > 0 {
				if retired == nil {
					retired = map[string][]string{}
				}
				retired[addr] = left
			}
		}
		s.MeshRetired = retired
	})
	if err != nil {
		return errFatal{err}
	}
	return nil
}

// parallel runs f for each node, --parallel at once.
func (r *runner) parallel(ctx context.Context, nodes []districts.Node, f func(context.Context, districts.Node)) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(r.opts.Parallel, 1))
	for _, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-sem }()
			f(ctx, n)
		}()
	}
	wg.Wait()
}

// joinMesh starts n's end of the mesh and waits until every node's peers
// include it: the platform then joins n at its mesh address.
func (r *runner) joinMesh(ctx context.Context, n districts.Node) (districts.Node, error) {
	m, net, ok, err := r.mesher()
	if err != nil || !ok {
		return n, err
	}
	if n, err = r.meshUp(ctx, m, net, n); err != nil {
		return n, err
	}
	return n, r.syncMesh(ctx, n.ID)
}
