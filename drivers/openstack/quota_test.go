package openstack

import (
	"strings"
	"testing"

	"github.com/cloudtransit/transit/cloudsim/openstack"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// TestNeutronQuotas: Neutron's 409 OverQuota, on a group's rules, on a
// group, on a floating IP, is provider.ErrQuota naming the resource, the
// project and what to do about it.
func TestNeutronQuotas(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		quotas   openstack.Quotas
		resource string
		hint     string
		run      func(t *testing.T, w *world) error
	}{
		{
			// The default group's 4 rules, the group's 2 egress ones,
			// SSH's 1 and 3 nodes' fill 10 of 12; 6 nodes need 13.
			name: "rules", quotas: openstack.Quotas{SecurityGroupRules: 12}, resource: "security_group_rule",
			hint: "--secgroup-rules",
			run: func(t *testing.T, w *world) error {
				drv := w.driver(w.district(), w.credential(), fast())
				if _, err := drv.EnsureGroup(t.Context(), groupSpec("q", "os-test", "10.0.0.1", "10.0.0.2", "10.0.0.3")); err != nil {
					t.Fatalf("EnsureGroup within the quota: %v", err)
				}
				_, err := drv.EnsureGroup(t.Context(), groupSpec("q", "os-test", "10.0.0.1", "10.0.0.2", "10.0.0.3",
					"10.0.0.4", "10.0.0.5", "10.0.0.6"))
				return err
			},
		},
		{
			// The default group and one district's fill 2 of 2.
			name: "groups", quotas: openstack.Quotas{SecurityGroups: 2}, resource: "security_group",
			hint: "--secgroups",
			run: func(t *testing.T, w *world) error {
				drv := w.driver(w.district(), w.credential(), fast())
				if _, err := drv.EnsureGroup(t.Context(), groupSpec("q", "os-test")); err != nil {
					t.Fatalf("EnsureGroup within the quota: %v", err)
				}
				other := w.driver(w.district(func(d *districts.District) { d.ID = "os-other" }), w.credential(), fast())
				_, err := other.EnsureGroup(t.Context(), groupSpec("q", "os-other"))
				return err
			},
		},
		{
			name: "floating IPs", quotas: openstack.Quotas{FloatingIPs: 1}, resource: "floatingip",
			hint: "--floating-ips",
			run: func(t *testing.T, w *world) error {
				drv := w.driver(w.district(func(d *districts.District) { d.OSFloatingNetwork = openstack.PublicNetwork }), w.credential(), fast())
				g, err := drv.EnsureGroup(t.Context(), groupSpec("q", "os-test"))
				if err != nil {
					t.Fatal(err)
				}
				key := newKey(t)
				if _, err := drv.Launch(t.Context(), launchSpec("q", "os-test", "q-1", "", g.ProviderID, key)); err != nil {
					t.Fatalf("Launch within the quota: %v", err)
				}
				_, err = drv.Launch(t.Context(), launchSpec("q", "os-test", "q-2", "", g.ProviderID, key))
				return err
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, func(o *openstack.Options) { o.Quotas = map[string]openstack.Quotas{project: tc.quotas} })
			err := tc.run(t, w)
			w.wantKind(err, provider.ErrQuota)
			for _, want := range []string{"quota " + tc.resource + " ", `project "` + project + `"`, "openstack quota set " + tc.hint} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error does not say %q: %v", want, err)
				}
			}
		})
	}
}
