package local

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// TestDistrictsInNetworkNamespaces: two districts on the same subnet, each
// in a network namespace of its own (as cloudsim's emulated networks
// are), launch nodes that get the same address; each answers SSH in its
// own namespace only, the host holds neither bridge, and a purge leaves
// each namespace as it found it.
func TestDistrictsInNetworkNamespaces(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	subnet := e.district().LocalSubnet
	type net struct {
		ns   string
		d    districts.District
		drv  provider.Infrastructure
		inst provider.Instance
	}
	var nets []*net
	for range 2 {
		n := &net{ns: "tnet-" + randHex(4), d: e.district()}
		n.d.LocalSubnet = subnet
		mustIP(t, []string{"netns", "add", n.ns}, []string{"-n", n.ns, "link", "set", "lo", "up"})
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", n.ns).Run() })
		drv, err := New(ctx, n.d, Options{Root: e.root, SSHWait: 2 * DefaultSSHWait, Network: "/run/netns/" + n.ns})
		if err != nil {
			t.Fatal(err)
		}
		n.drv = drv
		g, err := drv.EnsureGroup(ctx, provider.GroupSpec{Name: provider.GroupName("c", n.d.ID), Cluster: "c", District: n.d.ID,
			Tags: map[string]string{districts.TagCluster: "c"}})
		if err != nil {
			t.Fatal(err)
		}
		e.chains = append(e.chains, g.ProviderID)
		node := districts.Node{ID: "n-" + n.d.ID, Cluster: "c", District: n.d.ID, Role: districts.RoleWorker, Flavor: "small"}
		if n.inst, err = drv.Launch(ctx, provider.LaunchSpec{Node: node, GroupID: g.ProviderID, Tags: provider.IdentityTags(node, ""), AuthorizedKey: e.pubKey}); err != nil {
			t.Fatalf("launch in %s: %v", n.ns, err)
		}
		e.track(n.inst.ProviderID)
		nets = append(nets, n)
	}
	if nets[0].inst.PrivateIP != nets[1].inst.PrivateIP {
		t.Errorf("the first nodes of one subnet in two namespaces got %s and %s, want one address", nets[0].inst.PrivateIP, nets[1].inst.PrivateIP)
	}
	links, _ := exec.Command("ip", "-o", "link", "show").Output()
	for _, n := range nets {
		out, err := exec.CommandContext(ctx, "nsenter", "--net=/run/netns/"+n.ns, "ssh", "-i", e.keyFile, "-o", "StrictHostKeyChecking=no",
			"-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o", "LogLevel=ERROR", "root@"+n.inst.PrivateIP, "hostname").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "n-"+n.d.ID {
			t.Errorf("ssh %s in %s: %v %q, want the node n-%s", n.inst.PrivateIP, n.ns, err, out, n.d.ID)
		}
		if b := bridgeName(e.root, n.d.ID); strings.Contains(string(links), " "+b+":") {
			t.Errorf("the host holds bridge %s of %s, which lives in %s", b, n.d.ID, n.ns)
		}
		is, _, err := n.drv.List(ctx, "c")
		if err != nil || len(is) != 1 || is[0].ProviderID != n.inst.ProviderID {
			t.Errorf("List in %s: %v %v", n.ns, is, err)
		}
	}

	if err := Purge(context.WithoutCancel(ctx), e.root); err != nil {
		t.Fatalf("Purge: %v", err)
	}
	for _, n := range nets {
		out, _ := exec.Command("ip", "-n", n.ns, "-o", "link", "show").Output()
		if lines := strings.Split(strings.TrimSpace(string(out)), "\n"); len(lines) != 1 || !strings.Contains(lines[0], " lo:") {
			t.Errorf("after Purge, %s holds links:\n%s", n.ns, out)
		}
		ipt, _ := exec.Command("nsenter", "--net=/run/netns/"+n.ns, "iptables", "-S").Output()
		if strings.Contains(string(ipt), "TRANSIT") {
			t.Errorf("after Purge, %s holds chains:\n%s", n.ns, ipt)
		}
	}
}
