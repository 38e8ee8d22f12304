package local

import (
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/drivers/drivertest"
	"github.com/cloudtransit/transit/netns"
	"github.com/cloudtransit/transit/provider"
)

// meshGroup ensures cluster's group in drv's district on the node mesh's
// port (0: off the mesh), with sources.
func (e *env) meshGroup(drv *driver, cluster string, port int, sources ...string) provider.Group {
	e.t.Helper()
	g, err := drv.EnsureGroup(e.t.Context(), provider.GroupSpec{
		Name: provider.GroupName(cluster, drv.district), Cluster: cluster, District: drv.district,
		Tags: map[string]string{districts.TagCluster: cluster}, Sources: sources, MeshPort: port,
	})
	if err != nil {
		e.t.Fatalf("EnsureGroup: %v", err)
	}
	e.mu.Lock()
	e.chains = append(e.chains, g.ProviderID)
	e.mu.Unlock()
	return g
}

// udpListen opens a UDP socket on inst's address and port, in its network
// namespace.
func udpListen(t *testing.T, inst provider.Instance, port int) net.PacketConn {
	t.Helper()
	var pc net.PacketConn
	err := netns.Do("/run/netns/"+netnsName(inst.ProviderID), func() error {
		var err error
		pc, err = net.ListenPacket("udp4", net.JoinHostPort(inst.PrivateIP, fmt.Sprint(port)))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Close() })
	return pc
}

// udpReaches says whether a datagram from inside from's network namespace
// reaches pc (listening at to) within a second: ten tries, each waiting
// 100ms for it. Each call is a new flow (a new source port), so no
// conntrack entry of an earlier one lets it in.
func udpReaches(t *testing.T, from provider.Instance, to string, pc net.PacketConn) bool {
	t.Helper()
	var c net.Conn
	err := netns.Do("/run/netns/"+netnsName(from.ProviderID), func() error {
		var err error
		c, err = net.Dial("udp4", to)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 64)
	for range 10 {
		if _, err := c.Write([]byte("mesh")); err != nil {
			continue // an ICMP error of an earlier datagram; try again
		}
		if err := pc.SetReadDeadline(time.Now().Add(100 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		if n, _, err := pc.ReadFrom(buf); err == nil && string(buf[:n]) == "mesh" {
			return true
		}
	}
	return false
}

// TestMeshGroup: on the node mesh a group's chain accepts the mesh's UDP
// port from anywhere — a node of another district, in no source of the
// group, reaches that port and nothing else — and EnsureGroup and List
// read the port back from the chain. A new port replaces the rule; no
// port removes it. A flushed FORWARD jump lists the group without its
// port, so the loop ensures it again and the jump comes back.
func TestMeshGroup(t *testing.T) {
	e := newEnv(t)
	a := e.driver(e.district())
	b := e.driver(e.district())
	const cluster = "mesh"
	ga := e.meshGroup(a, cluster, drivertest.MeshPort)
	gb := e.meshGroup(b, cluster, drivertest.MeshPort)
	if ga.MeshPort != drivertest.MeshPort || len(ga.Sources) != 0 {
		t.Errorf("EnsureGroup = %+v, want mesh port %d and no source", ga, drivertest.MeshPort)
	}
	a1 := e.launch(a, ga, cluster, "mesh-a1")
	b1 := e.launch(b, gb, cluster, "mesh-b1")
	chain := ga.ProviderID
	rules := func() []string {
		t.Helper()
		out, err := exec.Command("iptables", "-w", "-S", chain).Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.Split(strings.TrimSpace(string(out)), "\n")
	}
	meshRule := func(port int) string { return fmt.Sprintf("-A %s -p udp -m udp --dport %d -j ACCEPT", chain, port) }
	listed := func() provider.Group {
		t.Helper()
		_, groups, err := a.List(t.Context(), cluster)
		if err != nil || len(groups) != 1 {
			t.Fatalf("List: %+v %v", groups, err)
		}
		return groups[0]
	}
	want := []string{"-N " + chain, "-A " + chain + " -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT", meshRule(drivertest.MeshPort), "-A " + chain + " -j DROP"}
	if got := rules(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("chain on the mesh:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if l := listed(); l.MeshPort != drivertest.MeshPort || len(l.Sources) != 0 {
		t.Errorf("listed %+v, want mesh port %d and no source", l, drivertest.MeshPort)
	}
	mesh := net.JoinHostPort(a1.PrivateIP, fmt.Sprint(drivertest.MeshPort))
	other := net.JoinHostPort(a1.PrivateIP, fmt.Sprint(drivertest.OtherMeshPort))
	onMesh, onOther := udpListen(t, a1, drivertest.MeshPort), udpListen(t, a1, drivertest.OtherMeshPort)
	if !udpReaches(t, b1, mesh, onMesh) {
		t.Errorf("b1 does not reach a1's mesh port %d", drivertest.MeshPort)
	}
	if udpReaches(t, b1, other, onOther) {
		t.Errorf("b1 reaches a1's UDP port %d, which is not the mesh's", drivertest.OtherMeshPort)
	}
	if connects(t, b1, a1.PrivateIP) {
		t.Errorf("b1 reaches a1:22 on the mesh: the group lets in the mesh's port only")
	}

	if g := e.meshGroup(a, cluster, drivertest.OtherMeshPort); g.MeshPort != drivertest.OtherMeshPort {
		t.Errorf("EnsureGroup reports mesh port %d, want %d", g.MeshPort, drivertest.OtherMeshPort)
	}
	if got := rules(); !slices.Contains(got, meshRule(drivertest.OtherMeshPort)) || slices.Contains(got, meshRule(drivertest.MeshPort)) {
		t.Errorf("chain after the port changed:\n%s", strings.Join(got, "\n"))
	}
	if l := listed(); l.MeshPort != drivertest.OtherMeshPort {
		t.Errorf("listed mesh port %d, want %d", l.MeshPort, drivertest.OtherMeshPort)
	}
	if !udpReaches(t, b1, other, onOther) || udpReaches(t, b1, mesh, onMesh) {
		t.Errorf("after the port changed b1 does not reach %d only", drivertest.OtherMeshPort)
	}

	// A flushed jump: listed without the port, repaired by EnsureGroup.
	if out, err := exec.Command("iptables", "-w", "-D", "FORWARD", "-o", a.bridge, "-j", chain).CombinedOutput(); err != nil {
		t.Fatalf("delete the jump: %v\n%s", err, out)
	}
	if l := listed(); l.MeshPort != 0 {
		t.Errorf("listed mesh port %d while the chain's jump is missing, want 0 (the loop then ensures the group)", l.MeshPort)
	}
	e.meshGroup(a, cluster, drivertest.OtherMeshPort)
	if l := listed(); l.MeshPort != drivertest.OtherMeshPort {
		t.Errorf("listed mesh port %d after EnsureGroup, want the jump back and %d", l.MeshPort, drivertest.OtherMeshPort)
	}

	if g := e.meshGroup(a, cluster, 0, b1.PrivateIP); g.MeshPort != 0 || len(g.Sources) != 1 {
		t.Errorf("EnsureGroup off the mesh = %+v, want no mesh port and b1", g)
	}
	for _, r := range rules() {
		if strings.Contains(r, "udp") {
			t.Errorf("the mesh's rule outlived the mesh: %s", r)
		}
	}
	if l := listed(); l.MeshPort != 0 {
		t.Errorf("listed mesh port %d off the mesh", l.MeshPort)
	}
	if !connects(t, b1, a1.PrivateIP) {
		t.Errorf("b1 does not reach a1:22 with its address in the group")
	}
}
