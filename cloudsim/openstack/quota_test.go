package openstack

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cloudtransit/transit/cloudsim"
)

// ingressRules is a bulk rule create of n ingress rules into group, from
// 10.1.0.1, 10.1.0.2, ... (first from 10.1.0.from).
func ingressRules(group string, from, n int) string {
	var rs []string
	for i := range n {
		rs = append(rs, fmt.Sprintf(`{"security_group_id":%q,"direction":"ingress","ethertype":"IPv4","remote_ip_prefix":"10.1.%d.%d/32"}`,
			group, (from+i)/250, 1+(from+i)%250))
	}
	return `{"security_group_rules":[` + strings.Join(rs, ",") + `]}`
}

func (c *client) group(name string) (int, map[string]any) {
	c.t.Helper()
	code, _, out := c.do("POST", "/RegionOne/network/v2.0/security-groups", `{"security_group":{"name":"`+name+`"}}`)
	return code, out
}

func (c *client) ruleCount() int {
	c.t.Helper()
	code, _, out := c.do("GET", "/RegionOne/network/v2.0/security-group-rules", "")
	if code != 200 {
		c.t.Fatalf("list rules: %d %v", code, out)
	}
	return len(out["security_group_rules"].([]any))
}

// wantOverQuota checks Neutron's answer to a create past a quota.
func wantOverQuota(t *testing.T, what string, code int, out map[string]any, resource string) {
	t.Helper()
	want := map[string]any{"NeutronError": map[string]any{"type": "OverQuota",
		"message": "Quota exceeded for resources: ['" + resource + "'].", "detail": ""}}
	if code != 409 {
		t.Errorf("%s: status %d, want 409", what, code)
	}
	if d := cmp.Diff(want, out); d != "" {
		t.Errorf("%s: answer (-want +got):\n%s", what, d)
	}
}

// TestNeutronDefaultQuotas: Neutron's defaults, 10 security groups and
// 100 rules per project, count the default group (made at the project's
// first list) and its four rules, and every group's two egress rules.
func TestNeutronDefaultQuotas(t *testing.T) {
	c, _ := newClient(t, cloudsim.New(cloudsim.Profile{}))
	c.login("pw")
	code, _, out := c.do("GET", "/RegionOne/network/v2.0/security-groups", "")
	gs, _ := out["security_groups"].([]any)
	if code != 200 || len(gs) != 1 || gs[0].(map[string]any)["name"] != "default" {
		t.Fatalf("a new project's groups: %d %v, want only the default one", code, out)
	}
	def := gs[0].(map[string]any)
	var rules []string
	for _, r := range def["security_group_rules"].([]any) {
		r := r.(map[string]any)
		remote := "-"
		if r["remote_group_id"] == def["id"] {
			remote = "self"
		}
		rules = append(rules, fmt.Sprintf("%v %v %s", r["direction"], r["ethertype"], remote))
	}
	if d := cmp.Diff([]string{"ingress IPv4 self", "ingress IPv6 self", "egress IPv4 -", "egress IPv6 -"}, rules); d != "" {
		t.Errorf("the default group's rules (-want +got):\n%s", d)
	}

	var last string
	for i := range 9 {
		code, out := c.group(fmt.Sprintf("g%d", i))
		if code != 201 {
			t.Fatalf("group %d of the 9 the default one leaves: %d %v", i, code, out)
		}
		last = out["security_group"].(map[string]any)["id"].(string)
	}
	code, out = c.group("g9")
	wantOverQuota(t, "an 11th group", code, out, "security_group")

	// 4 (default) + 9×2 (egress) = 22 rules held: 78 more fit, not 79.
	if n := c.ruleCount(); n != 22 {
		t.Fatalf("%d rules held, want 22", n)
	}
	code, _, out = c.do("POST", "/RegionOne/network/v2.0/security-group-rules", ingressRules(last, 0, 79))
	wantOverQuota(t, "79 rules past 22 held", code, out, "security_group_rule")
	if n := c.ruleCount(); n != 22 {
		t.Errorf("a refused bulk create left %d rules, want 22: all or none", n)
	}
	if code, _, out := c.do("POST", "/RegionOne/network/v2.0/security-group-rules", ingressRules(last, 0, 78)); code != 201 {
		t.Fatalf("78 rules past 22 held: %d %v", code, out)
	}
	code, _, out = c.do("POST", "/RegionOne/network/v2.0/security-group-rules", `{"security_group_rule":{"security_group_id":"`+last+
		`","direction":"ingress","ethertype":"IPv4","remote_ip_prefix":"192.0.2.1/32"}}`)
	wantOverQuota(t, "the 101st rule", code, out, "security_group_rule")
}

// TestNeutronQuotas: a project's own quotas; a group needs room for its
// two egress rules; deleting makes room; floating IPs have theirs.
func TestNeutronQuotas(t *testing.T) {
	c, srv := newClient(t, cloudsim.New(cloudsim.Profile{}))
	c.login("pw")
	srv.SetQuotas("p1", Quotas{SecurityGroups: 3, SecurityGroupRules: 9, FloatingIPs: 1})
	code, out := c.group("a") // the default group (4 rules) first, then a (2)
	if code != 201 {
		t.Fatalf("group a: %d %v", code, out)
	}
	a := out["security_group"].(map[string]any)["id"].(string)
	code, _, out = c.do("POST", "/RegionOne/network/v2.0/security-group-rules", ingressRules(a, 0, 2))
	if code != 201 {
		t.Fatalf("2 rules: %d %v", code, out)
	}
	rule := out["security_group_rules"].([]any)[0].(map[string]any)["id"].(string)
	// 8 of 9 rules held: a group's two egress rules do not fit.
	code, out = c.group("b")
	wantOverQuota(t, "a group without room for its egress rules", code, out, "security_group_rule")
	if code, _, _ := c.do("DELETE", "/RegionOne/network/v2.0/security-group-rules/"+rule, ""); code != 204 {
		t.Fatalf("delete rule: %d", code)
	}
	if code, out := c.group("b"); code != 201 {
		t.Errorf("group b with 7 of 9 rules held: %d %v", code, out)
	}
	code, out = c.group("c")
	wantOverQuota(t, "a 4th group of 3", code, out, "security_group")

	fip := `{"floatingip":{"floating_network_id":"` + publicNetworkID + `"}}`
	if code, _, out := c.do("POST", "/RegionOne/network/v2.0/floatingips", fip); code != 201 {
		t.Fatalf("first floating IP: %d %v", code, out)
	}
	code, _, out = c.do("POST", "/RegionOne/network/v2.0/floatingips", fip)
	wantOverQuota(t, "a second floating IP of 1", code, out, "floatingip")
}

// Options.ProjectQuotas are every project's quotas but those set apart
// (cloudsim's --openstack-* flags).
func TestProjectQuotas(t *testing.T) {
	c, _ := newClientWith(t, cloudsim.New(cloudsim.Profile{}), Options{ProjectQuotas: Quotas{SecurityGroups: 2}})
	c.login("pw")
	if code, out := c.group("a"); code != 201 { // beside the default group
		t.Fatalf("group a: %d %v", code, out)
	}
	code, out := c.group("b")
	wantOverQuota(t, "a third group of two", code, out, "security_group")
}
