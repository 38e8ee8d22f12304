package gce

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/cloudtransit/transit/drivers/cloudutil"
	"github.com/cloudtransit/transit/provider"
	"golang.org/x/sync/errgroup"
	"google.golang.org/api/iterator"
	"google.golang.org/protobuf/proto"
)

// A district's group is firewall rules on the district's network, all
// targeting instances with the group's network tag: the nodes' rules
// allow all traffic from every node's address, the SSH rules TCP 22 from
// ssh_cidrs. Compute Engine refuses a rule whose sourceRanges mix IPv4
// and IPv6, and both can come: a node may have an IPv6 address, ssh_cidrs
// may hold IPv6 ranges. So each is one rule per address family: the IPv4
// rule (always there, disabled while it has no source) and an IPv6 rule
// that exists only while it has sources. The mesh's rule allows the node
// mesh's UDP port from 0.0.0.0/0, and exists only while the cluster is
// on the mesh (GroupSpec.MeshPort). Compute Engine firewalls carry no
// labels, so each rule's description holds transit's identity as JSON.
type ruleMeta struct {
	Transit string            `json:"transit"` // the group's name, GroupSpec.Name
	Tags    map[string]string `json:"tags"`
	SSH     bool              `json:"ssh,omitempty"`
	API     bool              `json:"api,omitempty"`
	Mesh    bool              `json:"mesh,omitempty"`
	IPv6    bool              `json:"ipv6,omitempty"`
}

// ruleKind is one of a group's rules: the nodes', SSH's or the API's
// (TCP 6443 from api_cidrs, only while there are some), for IPv4 or IPv6;
// or the mesh's (IPv4 only: the nodes' mesh endpoints are their IPv4
// addresses).
type ruleKind struct{ ssh, api, mesh, v6 bool }

var ruleKinds = []ruleKind{{}, {ssh: true}, {v6: true}, {ssh: true, v6: true}, {api: true}, {api: true, v6: true}, {mesh: true}}

// optional says a rule of kind k exists only while it has something to
// let in; the others are always there (disabled while empty).
func (k ruleKind) optional() bool { return k.v6 || k.api || k.mesh }

// name is the rule's Compute Engine name: the IPv4 rules keep the names
// they had before there were IPv6 ones.
func (k ruleKind) name(group string) string {
	n := ruleName(group)
	switch {
	case k.mesh:
		return n + "-mesh"
	case k.api && k.v6:
		return n + "-api6"
	case k.api:
		return n + "-api"
	case k.ssh && k.v6:
		return n + "-ssh6"
	case k.ssh:
		return n + "-ssh"
	case k.v6:
		return n + "-6"
	}
	return n
}

// ruleName is the Compute Engine name (and network tag) of a group:
// its transit name where that is a valid name, else a valid prefix of it
// and a hash.
func ruleName(group string) string {
	n := strings.Trim(notName.ReplaceAllString(strings.ToLower(group), "-"), "-")
	if n == group && len(n) <= 58 && n != "" && n[0] >= 'a' && n[0] <= 'z' {
		return n
	}
	sum := sha256.Sum256([]byte(group))
	if len(n) > 47 {
		n = strings.TrimRight(n[:47], "-")
	}
	if n == "" || n[0] < 'a' || n[0] > 'z' {
		n = "t" + n
	}
	return n + "-" + hex.EncodeToString(sum[:])[:10]
}

type rule struct {
	fw   *computepb.Firewall
	meta ruleMeta
}

// groupOf is a group's nodes' rules (one per family) as a
// provider.Group: its sources are plain addresses (a /32 or /128 written
// without its length), its id the IPv4 rule's name. (Its mesh port is
// meshPort's.)
func groupOf(nodes []rule) provider.Group {
	var g provider.Group
	for _, r := range nodes {
		if g.Name == "" || !r.meta.IPv6 {
			g.ProviderID, g.Name, g.Tags = r.fw.GetName(), r.meta.Transit, maps.Clone(r.meta.Tags)
			if r.meta.IPv6 {
				g.ProviderID = ruleName(r.meta.Transit)
			}
		}
		if !r.fw.GetDisabled() {
			for _, s := range r.fw.GetSourceRanges() {
				g.Sources = append(g.Sources, plain(s))
			}
		}
	}
	slices.Sort(g.Sources)
	return g
}

// groups are the groups the nodes' rules make up, in the order of their
// first rule, with the port of their mesh's rule.
func groups(rules []rule) []provider.Group {
	var names []string
	nodes := map[string][]rule{}
	mesh := map[string]int{}
	for _, r := range rules {
		switch {
		case r.meta.Mesh:
			mesh[r.meta.Transit] = meshPort(r.fw)
			continue
		case r.meta.SSH || r.meta.API:
			continue
		}
		if nodes[r.meta.Transit] == nil {
			names = append(names, r.meta.Transit)
		}
		nodes[r.meta.Transit] = append(nodes[r.meta.Transit], r)
	}
	var out []provider.Group
	for _, n := range names {
		g := groupOf(nodes[n])
		g.MeshPort = mesh[n]
		out = append(out, g)
	}
	return out
}

// meshPort is the UDP port a mesh rule lets in from 0.0.0.0/0: 0 when
// it is disabled or lets in anything else.
func meshPort(fw *computepb.Firewall) int {
	allowed := fw.GetAllowed()
	if fw.GetDisabled() || !slices.Equal(fw.GetSourceRanges(), []string{anywhere}) || len(allowed) != 1 ||
		!strings.EqualFold(allowed[0].GetIPProtocol(), "udp") || len(allowed[0].GetPorts()) != 1 {
		return 0
	}
	port, err := strconv.Atoi(allowed[0].GetPorts()[0])
	if err != nil {
		return 0
	}
	return port
}

// anywhere is the mesh rule's source: WireGuard answers no packet a
// peer's key did not authenticate.
const anywhere = "0.0.0.0/0"

func plain(s string) string {
	if p, err := netip.ParsePrefix(s); err == nil && p.IsSingleIP() {
		return p.Addr().String()
	}
	return s
}

// listFirewalls pages through the project's firewall rules and returns
// those transit made (a description with its JSON) on the district's
// network.
func (drv *driver) listFirewalls(ctx context.Context) ([]rule, error) {
	it := drv.firewalls.List(ctx, &computepb.ListFirewallsRequest{Project: drv.d.GCEProjectID}, drv.retry())
	var out []rule
	for {
		fw, err := it.Next()
		if errors.Is(err, iterator.Done) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if last(fw.GetNetwork()) != drv.network {
			continue
		}
		var m ruleMeta
		if json.Unmarshal([]byte(fw.GetDescription()), &m) != nil || m.Transit == "" {
			continue
		}
		out = append(out, rule{fw: fw, meta: m})
	}
}

func (drv *driver) getRule(ctx context.Context, name string) (*computepb.Firewall, error) {
	fw, err := drv.firewalls.Get(ctx, &computepb.GetFirewallRequest{Project: drv.d.GCEProjectID, Firewall: name}, drv.retry())
	if isNotFound(err) {
		return nil, nil
	}
	return fw, err
}

// wanted is the rule of kind k of spec, or nil for an optional rule
// with nothing to let in (there must be none).
func (drv *driver) wanted(spec provider.GroupSpec, k ruleKind) (*computepb.Firewall, error) {
	if k.mesh {
		return drv.wantedMesh(spec)
	}
	meta, err := json.Marshal(ruleMeta{Transit: spec.Name, Tags: spec.Tags, SSH: k.ssh, API: k.api, IPv6: k.v6})
	if err != nil {
		return nil, err
	}
	fw := &computepb.Firewall{
		Name:        proto.String(k.name(spec.Name)),
		Description: proto.String(string(meta)),
		Network:     proto.String("global/networks/" + drv.network),
		Direction:   proto.String("INGRESS"),
		Priority:    proto.Int32(1000),
		TargetTags:  []string{ruleName(spec.Name)},
		Allowed:     []*computepb.Allowed{{IPProtocol: proto.String("all")}},
	}
	all := spec.Sources
	switch {
	case k.ssh:
		fw.Allowed = []*computepb.Allowed{{IPProtocol: proto.String("tcp"), Ports: []string{"22"}}}
		all = drv.sshCIDRs
	case k.api:
		fw.Allowed = []*computepb.Allowed{{IPProtocol: proto.String("tcp"), Ports: []string{strconv.Itoa(cloudutil.APIPort)}}}
		all = drv.apiCIDRs
	}
	var sources []string
	for _, s := range all {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return nil, fmt.Errorf("gce district %q: source %q is not an address or a CIDR range", drv.d.ID, s)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if p.Addr().Is4() != k.v6 {
			sources = append(sources, p.String())
		}
	}
	if k.optional() && len(sources) == 0 {
		return nil, nil
	}
	fw.SourceRanges = sources
	// A rule without sources would allow every address: it waits
	// disabled until the first node.
	fw.Disabled = proto.Bool(len(sources) == 0)
	if len(sources) == 0 {
		fw.SourceRanges = []string{"192.0.2.1/32"} // TEST-NET-1: nobody
	}
	return fw, nil
}

// wantedMesh is the group's mesh rule: UDP spec.MeshPort from anywhere
// to the group's instances; nil when the cluster is not on the mesh.
func (drv *driver) wantedMesh(spec provider.GroupSpec) (*computepb.Firewall, error) {
	if spec.MeshPort == 0 {
		return nil, nil
	}
	if spec.MeshPort < 1 || spec.MeshPort > 65535 {
		return nil, fmt.Errorf("gce district %q: the mesh's port %d is not a UDP port (1-65535)", drv.d.ID, spec.MeshPort)
	}
	meta, err := json.Marshal(ruleMeta{Transit: spec.Name, Tags: spec.Tags, Mesh: true})
	if err != nil {
		return nil, err
	}
	return &computepb.Firewall{
		Name:         proto.String(ruleKind{mesh: true}.name(spec.Name)),
		Description:  proto.String(string(meta)),
		Network:      proto.String("global/networks/" + drv.network),
		Direction:    proto.String("INGRESS"),
		Priority:     proto.Int32(1000),
		TargetTags:   []string{ruleName(spec.Name)},
		Allowed:      []*computepb.Allowed{{IPProtocol: proto.String("udp"), Ports: []string{strconv.Itoa(spec.MeshPort)}}},
		SourceRanges: []string{anywhere},
		Disabled:     proto.Bool(false),
	}, nil
}

// same says whether a rule already is what want says.
func same(have, want *computepb.Firewall) bool {
	return have.GetDescription() == want.GetDescription() && have.GetDisabled() == want.GetDisabled() &&
		slices.Equal(sortedCopy(have.GetSourceRanges()), sortedCopy(want.GetSourceRanges())) &&
		slices.Equal(have.GetTargetTags(), want.GetTargetTags()) && sameAllowed(have.GetAllowed(), want.GetAllowed())
}

// sameAllowed says whether two rules allow the same protocols and ports
// (a new mesh port is a patch).
func sameAllowed(have, want []*computepb.Allowed) bool {
	return slices.EqualFunc(have, want, func(a, b *computepb.Allowed) bool {
		return strings.EqualFold(a.GetIPProtocol(), b.GetIPProtocol()) && slices.Equal(a.GetPorts(), b.GetPorts())
	})
}

func sortedCopy(xs []string) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = plain(x)
	}
	slices.Sort(out)
	return out
}

// EnsureGroup creates the group's rules or patches them to the spec:
// all traffic from each source (the nodes' rules), UDP spec.MeshPort
// from 0.0.0.0/0 (the mesh's rule, while MeshPort is not 0; a new port is
// a patch of it), SSH from ssh_cidrs, the API port from api_cidrs. It
// deletes its optional rules that have nothing left to let in (IPv6, the
// API's, the mesh's), and waits until Compute Engine applied every
// change (the next launch's traffic depends on it). Firewalls of other
// names, an operator's too, are not touched.
func (drv *driver) EnsureGroup(ctx context.Context, spec provider.GroupSpec) (provider.Group, error) {
	what := "ensure firewall rules of group " + spec.Name
	var g errgroup.Group
	var nodes []rule
	for _, k := range ruleKinds {
		want, err := drv.wanted(spec, k)
		if err != nil {
			return provider.Group{}, err
		}
		if want == nil {
			g.Go(func() error { return drv.dropRule(ctx, k.name(spec.Name), spec.Name, what) })
			continue
		}
		if !k.ssh && !k.api && !k.mesh {
			nodes = append(nodes, rule{fw: want, meta: ruleMeta{Transit: spec.Name, Tags: spec.Tags, IPv6: k.v6}})
		}
		g.Go(func() error { return drv.ensureRule(ctx, want, what) })
	}
	if err := g.Wait(); err != nil {
		return provider.Group{}, err
	}
	out := groupOf(nodes)
	out.MeshPort = spec.MeshPort
	return out, nil
}

func (drv *driver) ensureRule(ctx context.Context, want *computepb.Firewall, what string) error {
	name := want.GetName()
	have, err := drv.getRule(ctx, name)
	if err != nil {
		return drv.wrap(what, err)
	}
	var haveMeta, wantMeta ruleMeta
	if have != nil && json.Unmarshal([]byte(have.GetDescription()), &haveMeta) == nil &&
		json.Unmarshal([]byte(want.GetDescription()), &wantMeta) == nil && haveMeta.Transit != "" && haveMeta.Transit != wantMeta.Transit {
		return fmt.Errorf("gce district %q: %s: firewall rule %s belongs to transit group %s: rename one of the two districts", drv.d.ID, what, name, haveMeta.Transit)
	}
	var op *computepb.Operation
	switch {
	case have == nil:
		o, err := drv.firewalls.Insert(ctx, &computepb.InsertFirewallRequest{Project: drv.d.GCEProjectID,
			FirewallResource: want, RequestId: proto.String(newRequestID())}, drv.retry())
		if isConflict(err) {
			// Inserted by an earlier attempt whose operation is not done:
			// wait for the rule, then make it what we want.
			if err := drv.waitRule(ctx, name, what); err != nil {
				return err
			}
			return drv.ensureRule(ctx, want, what)
		}
		if err != nil {
			return drv.wrap(what, err)
		}
		op = o.Proto()
	case same(have, want):
		return nil
	default:
		if have.GetDescription() != "" && !strings.HasPrefix(have.GetDescription(), "{") {
			return fmt.Errorf("gce district %q: %s: firewall rule %s exists and is not transit's: rename one of the two", drv.d.ID, what, name)
		}
		o, err := drv.firewalls.Patch(ctx, &computepb.PatchFirewallRequest{Project: drv.d.GCEProjectID, Firewall: name,
			FirewallResource: want, RequestId: proto.String(newRequestID())}, drv.retry())
		if err != nil {
			return drv.wrap(what, err)
		}
		op = o.Proto()
	}
	return drv.waitGlobalOp(ctx, op, what+": "+name)
}

// waitRule polls until a rule exists, up to GroupWait.
func (drv *driver) waitRule(ctx context.Context, name, what string) error {
	deadline := drv.opts.Clock.Now().Add(drv.opts.GroupWait)
	for i := 0; ; i++ {
		fw, err := drv.getRule(ctx, name)
		if err != nil {
			return drv.wrap(what, err)
		}
		if fw != nil {
			return nil
		}
		if drv.opts.Clock.Now().After(deadline) {
			return fmt.Errorf("gce district %q: %s: firewall rule %s still not there after %s", drv.d.ID, what, name, drv.opts.GroupWait)
		}
		if err := drv.wait(ctx, i); err != nil {
			return err
		}
	}
}

// dropRule deletes the group's IPv6, API or mesh rule name if there is
// one, and waits for it. A rule of that name that is not such a rule of
// the group stays.
func (drv *driver) dropRule(ctx context.Context, name, group, what string) error {
	fw, err := drv.getRule(ctx, name)
	if err != nil || fw == nil {
		return drv.wrap(what, err)
	}
	var m ruleMeta
	if json.Unmarshal([]byte(fw.GetDescription()), &m) != nil || !m.IPv6 && !m.API && !m.Mesh || group != "" && m.Transit != group {
		return nil
	}
	return drv.deleteRule(ctx, name, what)
}

// deleteRule deletes the rule name and waits for it; a missing rule is
// not an error.
func (drv *driver) deleteRule(ctx context.Context, name, what string) error {
	o, err := drv.firewalls.Delete(ctx, &computepb.DeleteFirewallRequest{Project: drv.d.GCEProjectID, Firewall: name,
		RequestId: proto.String(newRequestID())}, drv.retry())
	if isNotFound(err) {
		return nil
	}
	if err != nil {
		return drv.wrap(what, err)
	}
	return drv.waitGlobalOp(ctx, o.Proto(), what+": "+name)
}

// DeleteGroup deletes the group's rules and waits for it; missing rules
// are not an error. Compute Engine deletes a rule whose target instances
// still exist.
func (drv *driver) DeleteGroup(ctx context.Context, grp provider.Group) error {
	what := "delete firewall rules of group " + grp.Name
	base := grp.ProviderID
	if base == "" {
		base = ruleName(grp.Name)
	}
	var g errgroup.Group
	for _, name := range []string{base + "-6", base + "-ssh6", base + "-api", base + "-api6", base + "-mesh"} {
		g.Go(func() error { return drv.dropRule(ctx, name, grp.Name, what) })
	}
	for _, name := range []string{base, base + "-ssh"} {
		g.Go(func() error { return drv.deleteRule(ctx, name, what) })
	}
	return g.Wait()
}

// DeletesGroupsInUse says Compute Engine deletes a firewall rule whose
// target instances still exist: the loop need not wait for terminating
// machines before deleting a district's group.
func (drv *driver) DeletesGroupsInUse() bool { return true }
