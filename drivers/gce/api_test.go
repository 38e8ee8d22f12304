package gce

import (
	"slices"
	"testing"

	"cloud.google.com/go/compute/apiv1/computepb"

	"github.com/cloudtransit/transit/districts"
)

// TestAPICIDRs: api_cidrs open the Kubernetes API port in a rule of its
// own, per address family, only while there are some; the group's
// sources stay the nodes'; DeleteGroup takes the API rules along.
func TestAPICIDRs(t *testing.T) {
	w := newWorld(t)
	ctx := t.Context()
	spec := groupSpec("api", "gce-test", "198.51.100.7")
	get := func(drv *driver, name string) (*computepb.Firewall, bool) {
		t.Helper()
		fw, err := drv.firewalls.Get(ctx, &computepb.GetFirewallRequest{Project: project, Firewall: name})
		if isNotFound(err) {
			return nil, false
		}
		if err != nil {
			t.Fatal(err)
		}
		return fw, true
	}
	drv := w.driver(w.district(func(d *districts.District) { d.APICIDRs = []string{"203.0.113.0/24", "2001:db8::/32"} }), w.credential(), fast())
	g, err := drv.EnsureGroup(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(g.Sources, []string{"198.51.100.7"}) {
		t.Errorf("sources %v: the API's blocks are no nodes", g.Sources)
	}
	for name, want := range map[string]string{g.ProviderID + "-api": "203.0.113.0/24", g.ProviderID + "-api6": "2001:db8::/32"} {
		fw, ok := get(drv, name)
		if !ok || fw.GetDisabled() || !slices.Equal(fw.GetSourceRanges(), []string{want}) ||
			fw.GetAllowed()[0].GetIPProtocol() != "tcp" || !slices.Equal(fw.GetAllowed()[0].GetPorts(), []string{"6443"}) {
			t.Errorf("rule %s: %v, want TCP 6443 from %s", name, fw, want)
		}
	}
	_, groups, err := drv.List(ctx, "api")
	if err != nil || len(groups) != 1 || !slices.Equal(groups[0].Sources, []string{"198.51.100.7"}) {
		t.Errorf("List: %+v %v: want one group of the node's address", groups, err)
	}

	drv = w.driver(w.district(), w.credential(), fast())
	if _, err := drv.EnsureGroup(ctx, spec); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{g.ProviderID + "-api", g.ProviderID + "-api6"} {
		if _, ok := get(drv, name); ok {
			t.Errorf("rule %s outlived api_cidrs", name)
		}
	}
	drv = w.driver(w.district(func(d *districts.District) { d.APICIDRs = []string{"203.0.113.0/24"} }), w.credential(), fast())
	if _, err := drv.EnsureGroup(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if err := drv.DeleteGroup(ctx, g); err != nil {
		t.Fatal(err)
	}
	if _, ok := get(drv, g.ProviderID+"-api"); ok {
		t.Errorf("the API rule outlived its group")
	}
}
