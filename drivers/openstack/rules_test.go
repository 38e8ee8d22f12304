package openstack

import (
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/groups"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/rules"

	"github.com/cloudtransit/transit/districts"
)

// ingressOf reads a group's ingress rules as "proto port prefix [description]".
func ingressOf(t *testing.T, drv *driver, id string) []string {
	t.Helper()
	g, err := groups.Get(t.Context(), drv.netw, id).Extract()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range g.Rules {
		if r.Direction == "ingress" {
			out = append(out, fmt.Sprintf("%s %d %s [%s]", r.Protocol, r.PortRangeMin, r.RemoteIPPrefix, r.Description))
		}
	}
	slices.Sort(out)
	return out
}

// TestOperatorRulesSurvive: rules an operator adds to the cluster's group
// — HTTPS from anywhere, all traffic or SSH from an office (shaped like
// transit's, but not described as its) — stay through every change of the
// nodes, are no sources of the group, and keep the group when the
// cluster goes, without transit's rules or identity. One identical to a
// rule transit needs becomes transit's.
func TestOperatorRulesSurvive(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	drv := w.driver(w.district(func(d *districts.District) { d.SSHCIDRs = []string{"203.0.113.0/24"} }), w.credential(), fast())
	ctx := t.Context()
	g, err := drv.EnsureGroup(ctx, groupSpec("ops", "os-test", "192.0.2.10", "192.0.2.11"))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []rules.CreateOpts{
		{Protocol: rules.ProtocolTCP, PortRangeMin: 443, PortRangeMax: 443, RemoteIPPrefix: "0.0.0.0/0"},
		{RemoteIPPrefix: "198.51.100.7/32", Description: "office"},
		{Protocol: rules.ProtocolTCP, PortRangeMin: 22, PortRangeMax: 22, RemoteIPPrefix: "198.51.100.0/24"},
		{RemoteIPPrefix: "192.0.2.20/32"}, // a node's-to-be, the operator's first
	} {
		o.Direction, o.EtherType, o.SecGroupID = rules.DirIngress, rules.EtherType4, g.ProviderID
		if _, err := rules.Create(ctx, drv.netw, o).Extract(); err != nil {
			t.Fatal(err)
		}
	}
	if g, err = drv.EnsureGroup(ctx, groupSpec("ops", "os-test", "192.0.2.11", "192.0.2.12", "192.0.2.20")); err != nil {
		t.Fatal(err)
	}
	want := []string{
		" 0 192.0.2.11/32 [" + nodesRule + "]",
		" 0 192.0.2.12/32 [" + nodesRule + "]",
		" 0 192.0.2.20/32 [" + nodesRule + "]",
		" 0 198.51.100.7/32 [office]",
		"tcp 22 198.51.100.0/24 []",
		"tcp 22 203.0.113.0/24 [" + sshRule + "]",
		"tcp 443 0.0.0.0/0 []",
	}
	if diff := cmp.Diff(want, ingressOf(t, drv, g.ProviderID)); diff != "" {
		t.Errorf("rules after the nodes changed (-want +got):\n%s", diff)
	}
	_, gs, err := drv.List(ctx, "ops")
	if err != nil || len(gs) != 1 {
		t.Fatalf("List: %v %v", gs, err)
	}
	if diff := cmp.Diff([]string{"192.0.2.11", "192.0.2.12", "192.0.2.20"}, gs[0].Sources); diff != "" {
		t.Errorf("listed sources (-want +got): an operator's rule is no node:\n%s", diff)
	}

	if err := drv.DeleteGroup(ctx, g); err != nil {
		t.Fatal(err)
	}
	want = []string{" 0 198.51.100.7/32 [office]", "tcp 22 198.51.100.0/24 []", "tcp 443 0.0.0.0/0 []"}
	if diff := cmp.Diff(want, ingressOf(t, drv, g.ProviderID)); diff != "" {
		t.Errorf("the kept group's rules (-want +got):\n%s", diff)
	}
	if _, gs, _ := drv.List(ctx, "ops"); len(gs) != 0 {
		t.Errorf("the kept group is still listed as the cluster's: %+v", gs)
	}
}

// TestAPICIDRs: api_cidrs open the Kubernetes API port to those blocks,
// described as transit's; a block no longer listed is deleted.
func TestAPICIDRs(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := t.Context()
	for i, cidrs := range [][]string{{"198.51.100.0/24", "203.0.113.9/32"}, {"203.0.113.9/32"}} {
		drv := w.driver(w.district(func(d *districts.District) {
			d.SSHCIDRs = []string{"203.0.113.0/24"}
			d.APICIDRs = cidrs
		}), w.credential(), fast())
		g, err := drv.EnsureGroup(ctx, groupSpec("api", "os-test", "192.0.2.10"))
		if err != nil {
			t.Fatal(err)
		}
		want := []string{" 0 192.0.2.10/32 [" + nodesRule + "]", "tcp 22 203.0.113.0/24 [" + sshRule + "]"}
		for _, c := range cidrs {
			want = append(want, "tcp 6443 "+c+" ["+apiRule+"]")
		}
		slices.Sort(want)
		if diff := cmp.Diff(want, ingressOf(t, drv, g.ProviderID)); diff != "" {
			t.Errorf("apply %d: rules (-want +got):\n%s", i+1, diff)
		}
	}
}
