package openstack

import (
	"context"
	"sync"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/cloudtransit/transit/cloudsim"
)

// rulesBacker is a Backer whose machines start at once and that records
// the rules each region's last Allow passed (Rule.String).
type rulesBacker struct {
	mu      sync.Mutex
	allowed map[string][]string
}

func (b *rulesBacker) Start(_ context.Context, region, name, _ string) (cloudsim.Machine, error) {
	return cloudsim.Machine{ID: region + "/" + name, Address: "198.18.0.7", PrivateAddress: "10.241.3.7"}, nil
}

func (b *rulesBacker) Stop(context.Context, string, string) error { return nil }

func (b *rulesBacker) PowerOff(context.Context, string, string, bool) error { return nil }

func (b *rulesBacker) PowerOn(_ context.Context, region, id string) (cloudsim.Machine, error) {
	return cloudsim.Machine{ID: id, Address: "198.18.0.7", PrivateAddress: "10.241.3.7"}, nil
}

func (b *rulesBacker) Allow(_ context.Context, region string, rules []cloudsim.Rule) error {
	var got []string
	for _, r := range rules {
		got = append(got, r.String())
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.allowed == nil {
		b.allowed = map[string][]string{}
	}
	b.allowed[region] = got
	return nil
}

// waitAllowed waits (a few seconds at most) until region's last Allow
// passed want.
func (b *rulesBacker) waitAllowed(t *testing.T, region string, want []string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		b.mu.Lock()
		got, ok := b.allowed[region]
		b.mu.Unlock()
		diff := gocmp.Diff(want, got)
		if ok && diff == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("rules allowed in %s (-want +got):\n%s", region, diff)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestBackedRules: a backed region is handed its groups' IPv4 ingress
// rules: no protocol (or "any") is every protocol, tcp and udp keep their
// port range, icmp has none; a rule without a remote lets in every
// address, as in Neutron. Egress rules, IPv6 rules and rules whose remote
// is a group (the default group's) are left out. A deleted rule goes.
// Neutron's port range checks hold.
func TestBackedRules(t *testing.T) {
	sim := cloudsim.New(cloudsim.Profile{})
	b := &rulesBacker{}
	sim.Backer = b
	c, _ := newClient(t, sim)
	c.login("pw")
	c.server("s1")
	code, _, out := c.do("POST", "/RegionOne/network/v2.0/security-groups", `{"security_group":{"name":"g","description":"d"}}`)
	if code != 201 {
		t.Fatalf("create group: %d %v", code, out)
	}
	gid := out["security_group"].(map[string]any)["id"].(string)
	rule := func(body string) string {
		t.Helper()
		code, _, out := c.do("POST", "/RegionOne/network/v2.0/security-group-rules",
			`{"security_group_rule":{"security_group_id":"`+gid+`",`+body+`}}`)
		if code != 201 {
			t.Fatalf("create rule %s: %d %v", body, code, out)
		}
		return out["security_group_rule"].(map[string]any)["id"].(string)
	}
	rule(`"direction":"ingress","ethertype":"IPv4","remote_ip_prefix":"192.0.2.1/32"`)
	rule(`"direction":"ingress","ethertype":"IPv4","protocol":"tcp","port_range_min":22,"port_range_max":22,"remote_ip_prefix":"0.0.0.0/0"`)
	rule(`"direction":"ingress","ethertype":"IPv4","protocol":"udp","port_range_min":51820,"port_range_max":51820,"remote_ip_prefix":"0.0.0.0/0"`)
	nodePorts := rule(`"direction":"ingress","ethertype":"IPv4","protocol":"tcp","port_range_min":30000,"port_range_max":32767,"remote_ip_prefix":"10.0.0.0/8"`)
	rule(`"direction":"ingress","ethertype":"IPv6","protocol":"tcp","port_range_min":22,"port_range_max":22,"remote_ip_prefix":"::/0"`)
	rule(`"direction":"ingress","ethertype":"IPv4","protocol":"icmp","remote_ip_prefix":"198.51.100.0/24"`)
	rule(`"direction":"ingress","ethertype":"IPv4","protocol":"any"`)
	rule(`"direction":"egress","ethertype":"IPv4","protocol":"tcp","port_range_min":443,"port_range_max":443,"remote_ip_prefix":"203.0.113.0/24"`)
	want := []string{"all from 0.0.0.0/0", "tcp 22 from 0.0.0.0/0", "udp 51820 from 0.0.0.0/0",
		"tcp 30000-32767 from 10.0.0.0/8", "all from 192.0.2.1/32", "icmp from 198.51.100.0/24"}
	b.waitAllowed(t, "openstack:RegionOne", want)

	if code, _, out := c.do("DELETE", "/RegionOne/network/v2.0/security-group-rules/"+nodePorts, ""); code != 204 {
		t.Fatalf("delete rule: %d %v", code, out)
	}
	b.waitAllowed(t, "openstack:RegionOne", []string{"all from 0.0.0.0/0", "tcp 22 from 0.0.0.0/0", "udp 51820 from 0.0.0.0/0",
		"all from 192.0.2.1/32", "icmp from 198.51.100.0/24"})

	for body, want := range map[string]string{
		`"protocol":"tcp","port_range_min":22`:                        "SecurityGroupInvalidPortRange",
		`"protocol":"udp","port_range_min":9,"port_range_max":8`:      "SecurityGroupInvalidPortRange",
		`"protocol":"tcp","port_range_min":0,"port_range_max":22`:     "SecurityGroupInvalidPortValue",
		`"protocol":"tcp","port_range_min":22,"port_range_max":70000`: "HTTPBadRequest",
	} {
		code, _, out := c.do("POST", "/RegionOne/network/v2.0/security-group-rules",
			`{"security_group_rule":{"security_group_id":"`+gid+`","direction":"ingress","remote_ip_prefix":"0.0.0.0/0",`+body+`}}`)
		if ne, _ := out["NeutronError"].(map[string]any); code != 400 || ne["type"] != want {
			t.Errorf("rule %s: %d %v, want 400 %s", body, code, out, want)
		}
	}
}
