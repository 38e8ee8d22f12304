package openstack

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/groups"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/rules"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/drivers/drivertest"
	"github.com/cloudtransit/transit/provider"
)

// ingressRanges reads a group's ingress rules through gophercloud as
// "proto min-max prefix [description]".
func ingressRanges(t *testing.T, drv *driver, id string) []string {
	t.Helper()
	g, err := groups.Get(t.Context(), drv.netw, id).Extract()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range g.Rules {
		if r.Direction == "ingress" {
			out = append(out, fmt.Sprintf("%s %d-%d %s [%s]", r.Protocol, r.PortRangeMin, r.PortRangeMax, r.RemoteIPPrefix, r.Description))
		}
	}
	slices.Sort(out)
	return out
}

// operatorRule adds an ingress rule of the operator's.
func operatorRule(t *testing.T, drv *driver, group string, o rules.CreateOpts) {
	t.Helper()
	o.Direction, o.EtherType, o.SecGroupID = rules.DirIngress, rules.EtherType4, group
	if _, err := rules.Create(t.Context(), drv.netw, o).Extract(); err != nil {
		t.Fatal(err)
	}
}

// listedGroup is the cluster's one group as List reports it.
func listedGroup(t *testing.T, drv *driver, cluster string) provider.Group {
	t.Helper()
	_, gs, err := drv.List(t.Context(), cluster)
	if err != nil || len(gs) != 1 {
		t.Fatalf("List: %+v %v, want one group", gs, err)
	}
	return gs[0]
}

// TestMeshRule: on the node mesh the group lets in the mesh's UDP port
// from anywhere, described as transit's, and no node address; List and
// EnsureGroup report the port. An operator's rule (the NodePorts from
// anywhere) stays through the mesh's rule coming, its port changing (the
// new port added before the old one goes), the mesh going for node
// addresses, and the group's deletion, which leaves the group to it.
func TestMeshRule(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	drv := w.driver(w.district(func(d *districts.District) { d.SSHCIDRs = []string{"203.0.113.0/24"} }), w.credential(), fast())
	ctx := t.Context()
	spec := groupSpec("mesh", "os-test")
	spec.MeshPort = drivertest.MeshPort
	g, err := drv.EnsureGroup(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if g.MeshPort != drivertest.MeshPort || len(g.Sources) != 0 {
		t.Errorf("EnsureGroup = %+v, want mesh port %d and no source", g, drivertest.MeshPort)
	}
	ssh := "tcp 22-22 203.0.113.0/24 [" + sshRule + "]"
	mesh := func(port int) string { return fmt.Sprintf("udp %d-%d 0.0.0.0/0 [%s]", port, port, meshRule) }
	if diff := cmp.Diff([]string{ssh, mesh(drivertest.MeshPort)}, ingressRanges(t, drv, g.ProviderID)); diff != "" {
		t.Errorf("rules on the mesh (-want +got):\n%s", diff)
	}
	if l := listedGroup(t, drv, "mesh"); l.MeshPort != drivertest.MeshPort || len(l.Sources) != 0 {
		t.Errorf("listed %+v, want mesh port %d and no source", l, drivertest.MeshPort)
	}

	operatorRule(t, drv, g.ProviderID, rules.CreateOpts{Protocol: rules.ProtocolTCP, PortRangeMin: 30000, PortRangeMax: 32767, RemoteIPPrefix: "0.0.0.0/0"})
	nodePorts := "tcp 30000-32767 0.0.0.0/0 []"
	writes := len(w.rec.Sent("POST ")) + len(w.rec.Sent("DELETE "))
	if _, err := drv.EnsureGroup(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if n := len(w.rec.Sent("POST ")) + len(w.rec.Sent("DELETE ")); n != writes {
		t.Errorf("an unchanged group took %d writes", n-writes)
	}
	if diff := cmp.Diff([]string{ssh, nodePorts, mesh(drivertest.MeshPort)}, ingressRanges(t, drv, g.ProviderID)); diff != "" {
		t.Errorf("rules with the operator's (-want +got):\n%s", diff)
	}

	mark := len(w.rec.Sent(""))
	spec.MeshPort = drivertest.OtherMeshPort
	if g, err = drv.EnsureGroup(ctx, spec); err != nil {
		t.Fatal(err)
	}
	var changes []string
	for _, r := range w.rec.Sent("")[mark:] {
		if method, _, _ := strings.Cut(r, " "); method != "GET" {
			changes = append(changes, method)
		}
	}
	if diff := cmp.Diff([]string{"POST", "DELETE"}, changes); diff != "" {
		t.Errorf("the port change sent (-want +got): the new port's rule first, then the old one deleted:\n%s", diff)
	}
	if g.MeshPort != drivertest.OtherMeshPort {
		t.Errorf("EnsureGroup reports mesh port %d, want %d", g.MeshPort, drivertest.OtherMeshPort)
	}
	if diff := cmp.Diff([]string{ssh, nodePorts, mesh(drivertest.OtherMeshPort)}, ingressRanges(t, drv, g.ProviderID)); diff != "" {
		t.Errorf("rules after the port changed (-want +got):\n%s", diff)
	}
	if l := listedGroup(t, drv, "mesh"); l.MeshPort != drivertest.OtherMeshPort {
		t.Errorf("listed mesh port %d, want %d", l.MeshPort, drivertest.OtherMeshPort)
	}

	if g, err = drv.EnsureGroup(ctx, groupSpec("mesh", "os-test", "192.0.2.10")); err != nil {
		t.Fatal(err)
	}
	if g.MeshPort != 0 || !slices.Equal(g.Sources, []string{"192.0.2.10"}) {
		t.Errorf("EnsureGroup off the mesh = %+v, want no mesh port and the node", g)
	}
	want := []string{" 0-0 192.0.2.10/32 [" + nodesRule + "]", ssh, nodePorts}
	if diff := cmp.Diff(want, ingressRanges(t, drv, g.ProviderID)); diff != "" {
		t.Errorf("rules off the mesh (-want +got):\n%s", diff)
	}
	if l := listedGroup(t, drv, "mesh"); l.MeshPort != 0 || !slices.Equal(l.Sources, []string{"192.0.2.10"}) {
		t.Errorf("listed %+v off the mesh, want no mesh port and the node", l)
	}

	spec.MeshPort = drivertest.MeshPort
	if g, err = drv.EnsureGroup(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if err := drv.DeleteGroup(ctx, g); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{nodePorts}, ingressRanges(t, drv, g.ProviderID)); diff != "" {
		t.Errorf("the kept group's rules (-want +got):\n%s", diff)
	}
	if _, gs, _ := drv.List(ctx, "mesh"); len(gs) != 0 {
		t.Errorf("the kept group is still listed as the cluster's: %+v", gs)
	}
}

// TestMeshRuleOfTheOperator: an operator's rule identical to the mesh's
// (Neutron refuses a second) becomes transit's; one for another UDP
// port, or from somewhere else, is the operator's, is not the mesh's,
// and stays with the mesh and without.
func TestMeshRuleOfTheOperator(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	drv := w.driver(w.district(func(d *districts.District) { d.SSHCIDRs = []string{"203.0.113.0/24"} }), w.credential(), fast())
	ctx := t.Context()
	g, err := drv.EnsureGroup(ctx, groupSpec("opmesh", "os-test", "192.0.2.10"))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []rules.CreateOpts{
		{Protocol: rules.ProtocolUDP, PortRangeMin: drivertest.MeshPort, PortRangeMax: drivertest.MeshPort, RemoteIPPrefix: "0.0.0.0/0", Description: "wireguard"},
		{Protocol: rules.ProtocolUDP, PortRangeMin: 4789, PortRangeMax: 4789, RemoteIPPrefix: "0.0.0.0/0", Description: "vxlan"},
		{Protocol: rules.ProtocolUDP, PortRangeMin: drivertest.MeshPort, PortRangeMax: drivertest.MeshPort, RemoteIPPrefix: "198.51.100.0/24", Description: "office"},
	} {
		operatorRule(t, drv, g.ProviderID, o)
	}
	if l := listedGroup(t, drv, "opmesh"); l.MeshPort != 0 {
		t.Errorf("listed mesh port %d: the operator's rules are not transit's", l.MeshPort)
	}
	spec := groupSpec("opmesh", "os-test")
	spec.MeshPort = drivertest.MeshPort
	if g, err = drv.EnsureGroup(ctx, spec); err != nil {
		t.Fatal(err)
	}
	ssh := "tcp 22-22 203.0.113.0/24 [" + sshRule + "]"
	operators := []string{"udp 4789-4789 0.0.0.0/0 [vxlan]", "udp 51820-51820 198.51.100.0/24 [office]"}
	want := slices.Sorted(slices.Values(append([]string{ssh, "udp 51820-51820 0.0.0.0/0 [" + meshRule + "]"}, operators...)))
	if diff := cmp.Diff(want, ingressRanges(t, drv, g.ProviderID)); diff != "" {
		t.Errorf("rules on the mesh (-want +got):\n%s", diff)
	}
	if l := listedGroup(t, drv, "opmesh"); l.MeshPort != drivertest.MeshPort || len(l.Sources) != 0 {
		t.Errorf("listed %+v, want mesh port %d and no source", l, drivertest.MeshPort)
	}
	if g, err = drv.EnsureGroup(ctx, groupSpec("opmesh", "os-test")); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(append([]string{ssh}, operators...), ingressRanges(t, drv, g.ProviderID)); diff != "" {
		t.Errorf("rules off the mesh (-want +got): the rule became transit's, and went:\n%s", diff)
	}
}
