package gce

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/api/option"
	"google.golang.org/protobuf/proto"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/drivers/drivertest"
	"github.com/cloudtransit/transit/provider"
)

// sdkFirewalls is a Compute Engine firewalls client of the SDK's on the
// emulator, with the world's key: how an operator reaches it.
func (w *world) sdkFirewalls() *compute.FirewallsClient {
	w.t.Helper()
	c, err := compute.NewFirewallsRESTClient(w.t.Context(), option.WithEndpoint(w.url),
		option.WithAuthCredentialsJSON(option.ServiceAccount, w.key))
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { _ = c.Close() })
	return c
}

// firewallLines reads every firewall rule of the project through the SDK
// as "name proto:ports sources -> targets [off] whose", whose being
// transit's kind of rule (from its description's JSON) or the
// description of someone else's.
func firewallLines(t *testing.T, c *compute.FirewallsClient) []string {
	t.Helper()
	var out []string
	for fw, err := range c.List(t.Context(), &computepb.ListFirewallsRequest{Project: project}).All() {
		if err != nil {
			t.Fatal(err)
		}
		var allowed []string
		for _, a := range fw.GetAllowed() {
			allowed = append(allowed, a.GetIPProtocol()+":"+strings.Join(a.GetPorts(), ","))
		}
		line := fmt.Sprintf("%s %s %s -> %s", fw.GetName(), strings.Join(allowed, " "), strings.Join(fw.GetSourceRanges(), ","), strings.Join(fw.GetTargetTags(), ","))
		if fw.GetDisabled() {
			line += " off"
		}
		var m ruleMeta
		switch {
		case json.Unmarshal([]byte(fw.GetDescription()), &m) != nil || m.Transit == "":
			line += " [" + fw.GetDescription() + "]"
		case m.Mesh:
			line += " [transit " + m.Transit + " mesh]"
		case m.SSH:
			line += " [transit " + m.Transit + " ssh]"
		default:
			line += " [transit " + m.Transit + " nodes]"
		}
		out = append(out, line)
	}
	slices.Sort(out)
	return out
}

// operatorFirewall inserts a firewall of the operator's targeting tag.
func operatorFirewall(t *testing.T, c *compute.FirewallsClient, name, protocol, ports, tag string) {
	t.Helper()
	op, err := c.Insert(t.Context(), &computepb.InsertFirewallRequest{Project: project, FirewallResource: &computepb.Firewall{
		Name: proto.String(name), Description: proto.String("the operator's"), Network: proto.String("global/networks/default"),
		Direction: proto.String("INGRESS"), Priority: proto.Int32(1000), TargetTags: []string{tag}, SourceRanges: []string{"0.0.0.0/0"},
		Allowed: []*computepb.Allowed{{IPProtocol: proto.String(protocol), Ports: []string{ports}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := op.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// listedGroup is the cluster's one group as List reports it.
func listedGroup(t *testing.T, drv *driver, cluster string) provider.Group {
	t.Helper()
	_, groups, err := drv.List(t.Context(), cluster)
	if err != nil || len(groups) != 1 {
		t.Fatalf("List: %+v %v, want one group", groups, err)
	}
	return groups[0]
}

// TestMeshRule: on the node mesh the group has a rule of its own, NAME-
// mesh, letting in the mesh's UDP port from anywhere to the group's
// instances, and its nodes' rule waits disabled; EnsureGroup and List
// report the port. A new port patches the rule, no port deletes it, and
// DeleteGroup deletes it with the others. An operator's firewalls on the
// group's tag — the NodePorts, a WireGuard rule like the mesh's — are
// never the mesh's, and stay through all of it.
func TestMeshRule(t *testing.T) {
	w := newWorld(t)
	drv := w.driver(w.district(func(d *districts.District) { d.SSHCIDRs = []string{"203.0.113.0/24"} }), w.credential(), fast())
	api := w.sdkFirewalls()
	ctx := t.Context()
	spec := groupSpec("mesh", "gce-test")
	spec.MeshPort = drivertest.MeshPort
	g, err := drv.EnsureGroup(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if g.MeshPort != drivertest.MeshPort || len(g.Sources) != 0 {
		t.Errorf("EnsureGroup = %+v, want mesh port %d and no source", g, drivertest.MeshPort)
	}
	tag := g.ProviderID
	nodesOff := tag + " all: 192.0.2.1/32 -> " + tag + " off [transit " + spec.Name + " nodes]"
	ssh := tag + "-ssh tcp:22 203.0.113.0/24 -> " + tag + " [transit " + spec.Name + " ssh]"
	mesh := func(port int) string {
		return fmt.Sprintf("%s-mesh udp:%d 0.0.0.0/0 -> %s [transit %s mesh]", tag, port, tag, spec.Name)
	}
	if diff := cmp.Diff([]string{nodesOff, mesh(drivertest.MeshPort), ssh}, firewallLines(t, api)); diff != "" {
		t.Errorf("firewalls on the mesh (-want +got):\n%s", diff)
	}
	if l := listedGroup(t, drv, "mesh"); l.MeshPort != drivertest.MeshPort || len(l.Sources) != 0 {
		t.Errorf("listed %+v, want mesh port %d and no source", l, drivertest.MeshPort)
	}

	operatorFirewall(t, api, "ops-nodeports", "tcp", "30000-32767", tag)
	operatorFirewall(t, api, "ops-wireguard", "udp", "51820", tag)
	operators := []string{
		"ops-nodeports tcp:30000-32767 0.0.0.0/0 -> " + tag + " [the operator's]",
		"ops-wireguard udp:51820 0.0.0.0/0 -> " + tag + " [the operator's]",
	}
	with := func(lines ...string) []string { return slices.Sorted(slices.Values(append(lines, operators...))) }
	writes := len(w.rec.Sent("PATCH ")) + len(w.rec.Sent("POST ")) + len(w.rec.Sent("DELETE "))
	if _, err := drv.EnsureGroup(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if n := len(w.rec.Sent("PATCH ")) + len(w.rec.Sent("POST ")) + len(w.rec.Sent("DELETE ")); n != writes {
		t.Errorf("an unchanged group took %d writes", n-writes)
	}
	if diff := cmp.Diff(with(nodesOff, mesh(drivertest.MeshPort), ssh), firewallLines(t, api)); diff != "" {
		t.Errorf("firewalls with the operator's (-want +got):\n%s", diff)
	}

	before, err := api.Get(ctx, &computepb.GetFirewallRequest{Project: project, Firewall: tag + "-mesh"})
	if err != nil {
		t.Fatal(err)
	}
	spec.MeshPort = drivertest.OtherMeshPort
	if g, err = drv.EnsureGroup(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if g.MeshPort != drivertest.OtherMeshPort {
		t.Errorf("EnsureGroup reports mesh port %d, want %d", g.MeshPort, drivertest.OtherMeshPort)
	}
	if diff := cmp.Diff(with(nodesOff, mesh(drivertest.OtherMeshPort), ssh), firewallLines(t, api)); diff != "" {
		t.Errorf("firewalls after the port changed (-want +got):\n%s", diff)
	}
	after, err := api.Get(ctx, &computepb.GetFirewallRequest{Project: project, Firewall: tag + "-mesh"})
	if err != nil {
		t.Fatal(err)
	}
	if after.GetId() != before.GetId() {
		t.Errorf("the port change made a new rule (id %d, was %d), want the rule patched: no moment without one", after.GetId(), before.GetId())
	}
	if l := listedGroup(t, drv, "mesh"); l.MeshPort != drivertest.OtherMeshPort {
		t.Errorf("listed mesh port %d, want %d", l.MeshPort, drivertest.OtherMeshPort)
	}

	off := groupSpec("mesh", "gce-test", "192.0.2.10")
	if g, err = drv.EnsureGroup(ctx, off); err != nil {
		t.Fatal(err)
	}
	if g.MeshPort != 0 || !slices.Equal(g.Sources, []string{"192.0.2.10"}) {
		t.Errorf("EnsureGroup off the mesh = %+v, want no mesh port and the node", g)
	}
	nodes := tag + " all: 192.0.2.10/32 -> " + tag + " [transit " + spec.Name + " nodes]"
	if diff := cmp.Diff(with(nodes, ssh), firewallLines(t, api)); diff != "" {
		t.Errorf("firewalls off the mesh (-want +got):\n%s", diff)
	}
	if l := listedGroup(t, drv, "mesh"); l.MeshPort != 0 || !slices.Equal(l.Sources, []string{"192.0.2.10"}) {
		t.Errorf("listed %+v off the mesh, want no mesh port (the operator's rule is not the mesh's) and the node", l)
	}

	spec.MeshPort = drivertest.MeshPort
	if g, err = drv.EnsureGroup(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if err := drv.DeleteGroup(ctx, g); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(operators, firewallLines(t, api)); diff != "" {
		t.Errorf("after DeleteGroup (-want +got): transit's rules go, the operator's stay:\n%s", diff)
	}
	if _, groups, _ := drv.List(ctx, "mesh"); len(groups) != 0 {
		t.Errorf("a deleted group is listed: %+v", groups)
	}
}
