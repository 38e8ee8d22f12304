package openstack

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/cloudtransit/transit/drivers/cloudutil"
	"github.com/cloudtransit/transit/provider"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/groups"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/rules"
	"golang.org/x/sync/errgroup"
)

// groupMeta is transit's identity of a security group, as JSON in its
// description (Neutron's tags are plain strings, not key and value).
type groupMeta struct {
	Transit string            `json:"transit"` // GroupSpec.Name
	Tags    map[string]string `json:"tags"`
}

// The descriptions of transit's ingress rules: the nodes' (all traffic
// from a node's address), the mesh's (UDP GroupSpec.MeshPort from
// 0.0.0.0/0), SSH's (TCP 22 from ssh_cidrs) and the API's (TCP 6443 from
// api_cidrs).
const (
	nodesRule = "transit: a node of the cluster"
	meshRule  = "transit: node mesh"
	sshRule   = "transit: ssh"
	apiRule   = "transit: api"
)

// anywhere is the mesh rule's source: WireGuard answers no packet a
// peer's key did not authenticate.
const anywhere = "0.0.0.0/0"

// wantRule is an ingress rule as transit compares them.
type wantRule struct {
	udp    bool   // the mesh's port
	port   int    // 0: all traffic (a node); 22: SSH; the API port; the mesh's port
	prefix string // masked CIDR
}

func (w wantRule) description() string {
	switch {
	case w.udp:
		return meshRule
	case w.port == 0:
		return nodesRule
	case w.port == 22:
		return sshRule
	}
	return apiRule
}

// mine is ruleOf for the rules transit made (its descriptions): any
// other rule, even of the same shape, is an operator's and stays.
func mine(r rules.SecGroupRule) (wantRule, bool) {
	w, ok := ruleOf(r)
	return w, ok && r.Description == w.description()
}

func ruleOf(r rules.SecGroupRule) (wantRule, bool) {
	if r.Direction != "ingress" || r.RemoteIPPrefix == "" || r.RemoteGroupID != "" {
		return wantRule{}, false
	}
	p, err := netip.ParsePrefix(r.RemoteIPPrefix)
	if err != nil {
		return wantRule{}, false
	}
	p = p.Masked()
	switch {
	case r.Protocol == "" && r.PortRangeMin == 0 && r.PortRangeMax == 0:
		return wantRule{prefix: p.String()}, true
	case r.Protocol == "tcp" && r.PortRangeMin == r.PortRangeMax && (r.PortRangeMin == 22 || r.PortRangeMin == cloudutil.APIPort):
		return wantRule{port: r.PortRangeMin, prefix: p.String()}, true
	case r.Protocol == "udp" && r.PortRangeMin == r.PortRangeMax && r.PortRangeMin != 0:
		return wantRule{udp: true, port: r.PortRangeMin, prefix: p.String()}, true
	}
	return wantRule{}, false
}

// wanted are the ingress rules of a group with sources and the mesh's
// port (0: none).
func (drv *driver) wanted(sources []string, meshPort int) (map[wantRule]bool, error) {
	want := map[wantRule]bool{}
	if meshPort != 0 {
		if meshPort < 1 || meshPort > 65535 {
			return nil, fmt.Errorf("openstack district %q: the mesh's port %d is not a UDP port (1-65535)", drv.d.ID, meshPort)
		}
		want[wantRule{udp: true, port: meshPort, prefix: anywhere}] = true
	}
	for _, s := range sources {
		a, err := netip.ParseAddr(s)
		if err != nil {
			p, perr := netip.ParsePrefix(s)
			if perr != nil {
				return nil, fmt.Errorf("openstack district %q: source %q is not an address", drv.d.ID, s)
			}
			want[wantRule{prefix: p.Masked().String()}] = true
			continue
		}
		want[wantRule{prefix: netip.PrefixFrom(a, a.BitLen()).String()}] = true
	}
	for _, c := range drv.sshCIDRs {
		want[wantRule{port: 22, prefix: c}] = true
	}
	for _, c := range drv.apiCIDRs {
		want[wantRule{port: cloudutil.APIPort, prefix: c}] = true
	}
	return want, nil
}

// transitGroup is a security group transit made, with its identity.
type transitGroup struct {
	g    groups.SecGroup
	meta groupMeta
}

// group is the group as provider.Group: its sources are the nodes'
// rules' addresses, its mesh port that of transit's UDP rule from
// 0.0.0.0/0 (the lowest, should there be two).
func (tg transitGroup) group() provider.Group {
	out := provider.Group{ProviderID: tg.g.ID, Name: tg.meta.Transit, Tags: maps.Clone(tg.meta.Tags)}
	for _, r := range tg.g.Rules {
		w, ok := mine(r)
		if ok && w.udp && w.prefix == anywhere && (out.MeshPort == 0 || w.port < out.MeshPort) {
			out.MeshPort = w.port
		}
		if ok && !w.udp && w.port == 0 {
			p := netip.MustParsePrefix(w.prefix)
			if p.IsSingleIP() {
				out.Sources = append(out.Sources, p.Addr().String())
			} else {
				out.Sources = append(out.Sources, w.prefix)
			}
		}
	}
	slices.Sort(out.Sources)
	return out
}

// listGroups pages through the project's security groups (name: only
// those of that name) and returns transit's.
func (drv *driver) listGroups(ctx context.Context, name string) ([]transitGroup, error) {
	var all []groups.SecGroup
	err := drv.retry(ctx, func() error {
		pages, err := groups.List(drv.netw, groups.ListOpts{Name: name}).AllPages(ctx)
		if err != nil {
			return err
		}
		all, err = groups.ExtractGroups(pages)
		return err
	})
	if err != nil {
		return nil, err
	}
	var out []transitGroup
	for _, g := range all {
		var m groupMeta
		if json.Unmarshal([]byte(g.Description), &m) != nil || m.Transit == "" {
			continue
		}
		out = append(out, transitGroup{g: g, meta: m})
	}
	return out, nil
}

// findGroup is transit's group named name, the oldest if two creates
// raced.
func (drv *driver) findGroup(ctx context.Context, name string) (*transitGroup, error) {
	gs, err := drv.listGroups(ctx, name)
	if err != nil {
		return nil, err
	}
	var found *transitGroup
	for i := range gs {
		if gs[i].meta.Transit != name {
			continue
		}
		if found == nil || gs[i].g.CreatedAt.Before(found.g.CreatedAt) {
			found = &gs[i]
		}
	}
	return found, nil
}

// EnsureGroup creates the group or makes transit's ingress rules exactly
// the spec's: all traffic from each source, UDP spec.MeshPort from
// 0.0.0.0/0 (the node mesh, when not 0), TCP 22 from ssh_cidrs and the
// API port from api_cidrs. Missing rules are added in one bulk request,
// then extra ones deleted in parallel (a new mesh port opens before the
// old one closes). An operator's rules stay; one identical to a rule
// transit needs becomes transit's.
func (drv *driver) EnsureGroup(ctx context.Context, spec provider.GroupSpec) (provider.Group, error) {
	what := "ensure security group " + spec.Name
	if err := drv.clients(ctx); err != nil {
		return provider.Group{}, err
	}
	want, err := drv.wanted(spec.Sources, spec.MeshPort)
	if err != nil {
		return provider.Group{}, err
	}
	tg, err := drv.findGroup(ctx, spec.Name)
	if err != nil {
		return provider.Group{}, drv.wrap(what, err)
	}
	if tg == nil {
		meta, err := json.Marshal(groupMeta{Transit: spec.Name, Tags: spec.Tags})
		if err != nil {
			return provider.Group{}, err
		}
		if len(meta) > 255 {
			return provider.Group{}, fmt.Errorf("openstack district %q: %s: its tags do not fit a security group's description (%d of 255 bytes)", drv.d.ID, what, len(meta))
		}
		// A lost answer's group is found by its name.
		tg, err = createOnce(ctx, drv, func() (*transitGroup, error) { return drv.findGroup(ctx, spec.Name) },
			func() (*transitGroup, error) {
				g, err := groups.Create(ctx, drv.netw, groups.CreateOpts{Name: spec.Name, Description: string(meta)}).Extract()
				if err != nil {
					return nil, err
				}
				return &transitGroup{g: *g, meta: groupMeta{Transit: spec.Name, Tags: spec.Tags}}, nil
			})
		if err != nil {
			return provider.Group{}, drv.wrap(what, err)
		}
	}
	for round := 0; ; round++ {
		changed, err := drv.reconcile(ctx, tg, want)
		if err == nil && !changed {
			return tg.group(), nil
		}
		if err != nil && (neutronType(err) != "SecurityGroupRuleExists" || round >= 3) {
			return provider.Group{}, drv.wrap(what, err)
		}
		// Re-read what the group holds now: another run's change, or a
		// lost answer's.
		var g *groups.SecGroup
		err = drv.retry(ctx, func() error {
			var err error
			g, err = groups.Get(ctx, drv.netw, tg.g.ID).Extract()
			return err
		})
		if err != nil {
			return provider.Group{}, drv.wrap(what, err)
		}
		tg.g = *g
		if round >= 3 {
			return tg.group(), nil
		}
	}
}

// reconcile adds the missing rules and deletes the extra ones, and says
// whether it changed anything.
func (drv *driver) reconcile(ctx context.Context, tg *transitGroup, want map[wantRule]bool) (bool, error) {
	have := map[wantRule]bool{}
	var extra, takeOver []string
	for _, r := range tg.g.Rules {
		w, shaped := ruleOf(r)
		_, ours := mine(r)
		switch {
		case !shaped:
		case !ours && want[w]:
			// An operator's rule identical to one transit needs: Neutron
			// refuses a second, so it becomes transit's (else the group's
			// sources would never match the nodes).
			takeOver = append(takeOver, r.ID)
		case !ours:
		case want[w] && !have[w]:
			have[w] = true
		default:
			extra = append(extra, r.ID)
		}
	}
	if err := drv.deleteRules(ctx, takeOver); err != nil {
		return true, err
	}
	var add []rules.CreateOpts
	for _, w := range slices.SortedFunc(maps.Keys(want), func(a, b wantRule) int {
		return cmp.Or(compareBool(a.udp, b.udp), cmp.Compare(a.port, b.port), cmp.Compare(a.prefix, b.prefix))
	}) {
		if have[w] {
			continue
		}
		et := rules.EtherType4
		if netip.MustParsePrefix(w.prefix).Addr().Is6() {
			et = rules.EtherType6
		}
		o := rules.CreateOpts{Direction: rules.DirIngress, EtherType: et, SecGroupID: tg.g.ID, RemoteIPPrefix: w.prefix, Description: w.description()}
		switch {
		case w.udp:
			o.Protocol, o.PortRangeMin, o.PortRangeMax = rules.ProtocolUDP, w.port, w.port
		case w.port != 0:
			o.Protocol, o.PortRangeMin, o.PortRangeMax = rules.ProtocolTCP, w.port, w.port
		}
		add = append(add, o)
	}
	if len(add) > 0 {
		err := drv.retry(ctx, func() error {
			_, err := rules.CreateBulk(ctx, drv.netw, add).Extract()
			return err
		})
		if err != nil {
			return true, err
		}
	}
	if err := drv.deleteRules(ctx, extra); err != nil {
		return true, err
	}
	return len(add) > 0 || len(extra) > 0 || len(takeOver) > 0, nil
}

// compareBool orders false before true.
func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// deleteRules deletes rules, eight at a time; a missing one is fine.
func (drv *driver) deleteRules(ctx context.Context, ids []string) error {
	var g errgroup.Group
	g.SetLimit(8)
	for _, id := range ids {
		g.Go(func() error {
			err := drv.retry(ctx, func() error { return rules.Delete(ctx, drv.netw, id).ExtractErr() })
			if isNotFound(err) {
				return nil
			}
			return err
		})
	}
	return g.Wait()
}

// DeleteGroup deletes the group. While servers that used it are still
// deleting Neutron refuses (409 SecurityGroupInUse): it retries with
// backoff for up to GroupWait. A missing group is fine. A group
// holding an operator's ingress rules is not deleted: transit's rules
// and identity leave it.
func (drv *driver) DeleteGroup(ctx context.Context, g provider.Group) error {
	what := "delete security group " + g.Name
	if err := drv.clients(ctx); err != nil {
		return err
	}
	id := g.ProviderID
	if id == "" {
		tg, err := drv.findGroup(ctx, g.Name)
		if err != nil || tg == nil {
			return drv.wrap(what, err)
		}
		id = tg.g.ID
	}
	if kept, err := drv.keepOperatorRules(ctx, id, what); kept || err != nil {
		return err
	}
	deadline := drv.opts.Clock.Now().Add(drv.opts.GroupWait)
	for i := 0; ; i++ {
		err := drv.retry(ctx, func() error { return groups.Delete(ctx, drv.netw, id).ExtractErr() })
		switch {
		case err == nil || isNotFound(err):
			return nil
		case neutronType(err) == "SecurityGroupInUse":
			if drv.opts.Clock.Now().After(deadline) {
				return drv.wrap(fmt.Sprintf("%s (%s): still in use after %s", what, id, drv.opts.GroupWait), err)
			}
			if werr := drv.wait(ctx, i); werr != nil {
				return drv.wrap(what, werr)
			}
			continue
		}
		return drv.wrap(what, err)
	}
}

// keepOperatorRules leaves a group holding ingress rules transit did not
// make to its operator: transit deletes its own rules and its identity
// (the JSON description: the group is no longer the cluster's), and says
// it kept the group.
func (drv *driver) keepOperatorRules(ctx context.Context, id, what string) (bool, error) {
	var g *groups.SecGroup
	err := drv.retry(ctx, func() error {
		var err error
		g, err = groups.Get(ctx, drv.netw, id).Extract()
		return err
	})
	switch {
	case isNotFound(err):
		return true, nil
	case err != nil:
		return false, drv.wrap(what, err)
	}
	var ours []string
	foreign := false
	for _, r := range g.Rules {
		switch _, ok := mine(r); {
		case ok:
			ours = append(ours, r.ID)
		case r.Direction == "ingress":
			foreign = true
		}
	}
	if !foreign {
		return false, nil
	}
	if err := drv.deleteRules(ctx, ours); err != nil {
		return false, drv.wrap(what, err)
	}
	desc := "kept for its operator's rules after transit removed its own (was " + g.Name + ")"
	err = drv.retry(ctx, func() error {
		_, err := groups.Update(ctx, drv.netw, id, groups.UpdateOpts{Description: &desc}).Extract()
		return err
	})
	if err != nil {
		return false, drv.wrap(what, err)
	}
	return true, nil
}
