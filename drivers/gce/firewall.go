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
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/cloudtransit/transit/provider"
	"golang.org/x/sync/errgroup"
	"google.golang.org/api/iterator"
	"google.golang.org/protobuf/proto"
)

// A district's group is two firewall rules on the district's network,
// both targeting instances with the group's network tag: the nodes' rule
// allows all traffic from every node's address, the SSH rule TCP 22 from
// ssh_cidrs. Compute Engine firewalls carry no labels, so each rule's
// description holds transit's identity as JSON.
type ruleMeta struct {
	Transit string            `json:"transit"` // the group's name, GroupSpec.Name
	Tags    map[string]string `json:"tags"`
	SSH     bool              `json:"ssh,omitempty"`
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

func sshRuleName(group string) string { return ruleName(group) + "-ssh" }

type rule struct {
	fw   *computepb.Firewall
	meta ruleMeta
}

// group is the nodes' rule as a provider.Group: its sources are plain
// addresses (a /32 written without its length).
func (r rule) group() provider.Group {
	g := provider.Group{ProviderID: r.fw.GetName(), Name: r.meta.Transit, Tags: maps.Clone(r.meta.Tags)}
	if !r.fw.GetDisabled() {
		for _, s := range r.fw.GetSourceRanges() {
			g.Sources = append(g.Sources, plain(s))
		}
	}
	slices.Sort(g.Sources)
	return g
}

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

// wanted is the rule of spec: the nodes' one, or the SSH one.
func (drv *driver) wanted(spec provider.GroupSpec, ssh bool) (*computepb.Firewall, error) {
	meta, err := json.Marshal(ruleMeta{Transit: spec.Name, Tags: spec.Tags, SSH: ssh})
	if err != nil {
		return nil, err
	}
	fw := &computepb.Firewall{
		Name:        proto.String(ruleName(spec.Name)),
		Description: proto.String(string(meta)),
		Network:     proto.String("global/networks/" + drv.network),
		Direction:   proto.String("INGRESS"),
		Priority:    proto.Int32(1000),
		TargetTags:  []string{ruleName(spec.Name)},
		Allowed:     []*computepb.Allowed{{IPProtocol: proto.String("all")}},
	}
	sources := make([]string, 0, len(spec.Sources))
	for _, s := range spec.Sources {
		if p, err := netip.ParseAddr(s); err == nil {
			sources = append(sources, netip.PrefixFrom(p, p.BitLen()).String())
		} else {
			sources = append(sources, s)
		}
	}
	if ssh {
		fw.Name = proto.String(sshRuleName(spec.Name))
		fw.Allowed = []*computepb.Allowed{{IPProtocol: proto.String("tcp"), Ports: []string{"22"}}}
		sources = drv.sshCIDRs
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

// same says whether a rule already is what want says.
func same(have, want *computepb.Firewall) bool {
	return have.GetDescription() == want.GetDescription() && have.GetDisabled() == want.GetDisabled() &&
		slices.Equal(sortedCopy(have.GetSourceRanges()), sortedCopy(want.GetSourceRanges())) &&
		slices.Equal(have.GetTargetTags(), want.GetTargetTags())
}

func sortedCopy(xs []string) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = plain(x)
	}
	slices.Sort(out)
	return out
}

// EnsureGroup creates the group's two rules or patches them to the spec,
// and waits until Compute Engine applied every change (the next launch's
// traffic depends on it).
func (drv *driver) EnsureGroup(ctx context.Context, spec provider.GroupSpec) (provider.Group, error) {
	what := "ensure firewall rules of group " + spec.Name
	var g errgroup.Group
	var nodes *computepb.Firewall
	for _, ssh := range []bool{false, true} {
		want, err := drv.wanted(spec, ssh)
		if err != nil {
			return provider.Group{}, err
		}
		if !ssh {
			nodes = want
		}
		g.Go(func() error { return drv.ensureRule(ctx, want, what) })
	}
	if err := g.Wait(); err != nil {
		return provider.Group{}, err
	}
	var meta ruleMeta
	_ = json.Unmarshal([]byte(nodes.GetDescription()), &meta)
	return rule{fw: nodes, meta: meta}.group(), nil
}

func (drv *driver) ensureRule(ctx context.Context, want *computepb.Firewall, what string) error {
	name := want.GetName()
	have, err := drv.getRule(ctx, name)
	if err != nil {
		return drv.wrap(what, err)
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

// DeleteGroup deletes the group's two rules and waits for it; missing
// rules are not an error. Compute Engine deletes a rule whose target
// instances still exist.
func (drv *driver) DeleteGroup(ctx context.Context, grp provider.Group) error {
	what := "delete firewall rules of group " + grp.Name
	base := grp.ProviderID
	if base == "" {
		base = ruleName(grp.Name)
	}
	var g errgroup.Group
	for _, name := range []string{base, base + "-ssh"} {
		g.Go(func() error {
			o, err := drv.firewalls.Delete(ctx, &computepb.DeleteFirewallRequest{Project: drv.d.GCEProjectID, Firewall: name,
				RequestId: proto.String(newRequestID())}, drv.retry())
			if isNotFound(err) {
				return nil
			}
			if err != nil {
				return drv.wrap(what, err)
			}
			return drv.waitGlobalOp(ctx, o.Proto(), what+": "+name)
		})
	}
	return g.Wait()
}

// DeletesGroupsInUse says Compute Engine deletes a firewall rule whose
// target instances still exist: the loop need not wait for terminating
// machines before deleting a district's group.
func (drv *driver) DeletesGroupsInUse() bool { return true }
