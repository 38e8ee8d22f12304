package control

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// simMesh is a machine's end of the mesh: made once per machine (a copy
// of the machine copies it, key and all, as an image would), the peers
// the last MeshPeers gave.
type simMesh struct {
	key, addr string
	// next is the key pair a rotation made and has not committed;
	// keys counts the machine's keys, for the next one's name.
	next  string
	keys  int
	peers []provider.MeshPeer
	// stale says the last MeshPeers failed: transit knows the node
	// may lack a peer (a problem of the run, retried).
	stale bool
}

var _ provider.Mesher = (*simPlatform)(nil)

func (p *simPlatform) MeshUp(ctx context.Context, n districts.Node, spec provider.MeshSpec) (provider.MeshEnd, error) {
	s := p.s
	s.mu.Lock()
	defer s.mu.Unlock()
	crash, err := s.step(ctx, "mesh-up "+n.ID)
	if err != nil && !crash {
		return provider.MeshEnd{}, err
	}
	in := p.instanceOf(n)
	if in == nil || s.silent[n.ID] {
		return provider.MeshEnd{}, fmt.Errorf("ssh %s: connection refused", n.PublicIP)
	}
	if !crash && s.rng.Float64() < s.joinFail {
		return provider.MeshEnd{}, errors.New("transit-mesh: create transit0: no such device")
	}
	if in.mesh == nil && spec.Address == "" {
		return provider.MeshEnd{}, err // asked only
	}
	if in.mesh == nil {
		addr, _, ok := strings.Cut(spec.Address, "/")
		if !ok || addr == "" {
			s.violate("mesh-up of %s with address %q", n.ID, spec.Address)
		}
		in.mesh = &simMesh{key: simMeshKey(in.ProviderID), addr: addr}
		if s.diskKey != "" {
			in.mesh.key = s.diskKey // booted from an image of a node's disk
		}
	}
	return provider.MeshEnd{PublicKey: in.mesh.key, Address: in.mesh.addr}, err
}

func (p *simPlatform) MeshPeers(ctx context.Context, n districts.Node, peers []provider.MeshPeer) error {
	s := p.s
	s.mu.Lock()
	defer s.mu.Unlock()
	crash, err := s.step(ctx, "mesh-peers "+n.ID)
	if err != nil && !crash {
		return err
	}
	in := p.instanceOf(n)
	if in == nil || s.silent[n.ID] {
		return fmt.Errorf("ssh %s: connection refused", n.PublicIP)
	}
	if in.mesh == nil {
		s.violate("mesh peers given to %s, whose mesh was never started", n.ID)
		return errors.New("transit-mesh: not running")
	}
	// transit-mesh refuses a list with a key or an address twice, a key
	// that is no WireGuard key, or an endpoint without an address.
	keys, addrs := map[string]bool{}, map[string]bool{}
	for _, pr := range peers {
		host, _, herr := net.SplitHostPort(pr.Endpoint)
		key, kerr := base64.StdEncoding.DecodeString(pr.PublicKey)
		if keys[pr.PublicKey] || addrs[pr.Address] || herr != nil || host == "" || pr.Address == in.mesh.addr || kerr != nil || len(key) != 32 {
			s.violate("mesh peers of %s (at %s, machine %s) are not a valid list: %+v", n.ID, in.mesh.addr, in.ProviderID, peers)
			return errors.New("transit-mesh: peers refused")
		}
		keys[pr.PublicKey], addrs[pr.Address] = true, true
		for _, o := range s.instances {
			if o.mesh != nil && o.mesh.next == pr.PublicKey {
				s.violate("%s is given %s's next mesh key before %s runs it", n.ID, pr.Node, pr.Node)
			}
		}
	}
	if !crash && s.rng.Float64() < s.joinFail {
		in.mesh.stale = true
		return errors.New("ssh: handshake failed: EOF")
	}
	in.mesh.peers, in.mesh.stale = slices.Clone(peers), false
	return err
}

func (p *simPlatform) MeshRotate(ctx context.Context, n districts.Node, commit string) (provider.MeshKeys, error) {
	s := p.s
	s.mu.Lock()
	defer s.mu.Unlock()
	crash, err := s.step(ctx, "mesh-rotate "+n.ID)
	if err != nil && !crash {
		return provider.MeshKeys{}, err
	}
	in := p.instanceOf(n)
	if in == nil || s.silent[n.ID] {
		return provider.MeshKeys{}, fmt.Errorf("ssh %s: connection refused", n.PublicIP)
	}
	if in.mesh == nil {
		s.violate("mesh key of %s rotated, whose mesh was never started", n.ID)
		return provider.MeshKeys{}, errors.New("transit-mesh: not running")
	}
	m := in.mesh
	switch commit {
	case "":
		if m.next == "" {
			m.keys++
			m.next = simMeshKey(fmt.Sprintf("%s#%d", in.ProviderID, m.keys))
		}
		return provider.MeshKeys{Current: m.key, Next: m.next}, err
	case m.key:
	case m.next:
		m.key, m.next = m.next, ""
	default:
		return provider.MeshKeys{}, fmt.Errorf("transit-mesh: no next key %s on this node", commit)
	}
	return provider.MeshKeys{Current: m.key}, err
}

// meshReaches: when n joins, every ready member that answers (its
// machine runs, its mesh is up, it took its last peers) has n among its
// peers, at n's key and address.
func (s *sim) meshReaches(n districts.Node) {
	if !s.meshOn {
		return
	}
	joining := s.instances[n.ProviderID]
	if joining == nil || joining.mesh == nil {
		s.violate("%s joins without its mesh started", n.ID)
		return
	}
	if n.MeshIP != joining.mesh.addr {
		s.violate("%s joins at mesh address %s, but its mesh runs at %s", n.ID, n.MeshIP, joining.mesh.addr)
	}
	for id, m := range s.members {
		in, ok := s.instances[m.machine]
		if m.gen != s.gen || id == n.ID || !ok || in.State != provider.InstanceRunning || in.mesh == nil || in.mesh.stale || s.silent[id] || !m.ready || m.sick {
			continue
		}
		if !slices.ContainsFunc(in.mesh.peers, func(p provider.MeshPeer) bool {
			return p.PublicKey == joining.mesh.key && p.Address == joining.mesh.addr
		}) {
			s.violate("%s joins before member %s's mesh peers include it", n.ID, id)
		}
	}
}

// checkMesh: once converged, every node's mesh runs at the address and
// key the state records, addresses are unique, and each node's peers are
// exactly the others, each at its private address within one cloud and
// its public one across.
func (h *harness) checkMesh() {
	t, s := h.t, h.sim
	t.Helper()
	if !s.meshOn {
		return
	}
	ds := map[string]districts.District{}
	for _, d := range h.districts {
		ds[d.ID] = d
	}
	st := h.load()
	byAddr := map[string]string{}
	type end struct {
		n  districts.Node
		in *simInstance
	}
	var ends []end
	for _, n := range st.Nodes {
		if n.Phase == districts.PhaseTerminating {
			continue
		}
		in := s.instances[n.ProviderID]
		if in == nil || in.mesh == nil {
			t.Errorf("node %s has no mesh running", n.ID)
			continue
		}
		if n.MeshKey != in.mesh.key || n.MeshIP != in.mesh.addr {
			t.Errorf("node %s: the state says mesh %s at %s, the node %s at %s", n.ID, n.MeshKey, n.MeshIP, in.mesh.key, in.mesh.addr)
		}
		if other, dup := byAddr[n.MeshIP]; dup {
			t.Errorf("nodes %s and %s share mesh address %s", other, n.ID, n.MeshIP)
		}
		byAddr[n.MeshIP] = n.ID
		ends = append(ends, end{n, in})
	}
	for _, e := range ends {
		want := map[string]string{}
		for _, o := range ends {
			if o.n.ID == e.n.ID {
				continue
			}
			addr := o.in.PublicIP
			if ds[e.n.District].CloudNetwork() == ds[o.n.District].CloudNetwork() {
				addr = o.in.PrivateIP
			}
			want[o.in.mesh.key] = o.in.mesh.addr + " " + net.JoinHostPort(addr, "51820")
		}
		got := map[string]string{}
		for _, p := range e.in.mesh.peers {
			got[p.PublicKey] = p.Address + " " + p.Endpoint
		}
		if !maps.Equal(got, want) {
			t.Errorf("node %s's mesh peers %v, want %v", e.n.ID, got, want)
		}
	}
}

// simMeshKey is a machine's WireGuard public key: 32 bytes in base64,
// one per machine (a copy of its disk would carry it too).
func simMeshKey(machine string) string {
	sum := sha256.Sum256([]byte(machine))
	return base64.StdEncoding.EncodeToString(sum[:])
}
