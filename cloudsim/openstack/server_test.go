package openstack

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cloudtransit/transit/cloudsim"
)

// client speaks raw HTTP to a Server, as any OpenStack client would.
type client struct {
	t     *testing.T
	base  string
	token string
}

func newClient(t *testing.T, sim *cloudsim.Sim) (*client, *Server) {
	t.Helper()
	return newClientWith(t, sim, Options{})
}

// newClientWith is newClient on a server with opts (and user ann).
func newClientWith(t *testing.T, sim *cloudsim.Sim, opts Options) (*client, *Server) {
	t.Helper()
	opts.Users = []User{{Name: "ann", Password: "pw", Project: "p1"}}
	srv := New(sim, opts)
	ts := httptest.NewServer(srv)
	t.Cleanup(func() {
		ts.Close()
		srv.Close()
	})
	return &client{t: t, base: ts.URL}, srv
}

func (c *client) do(method, path, body string) (int, http.Header, map[string]any) {
	c.t.Helper()
	req, err := http.NewRequestWithContext(c.t.Context(), method, c.base+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if c.token != "" {
		req.Header.Set("X-Auth-Token", c.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	var out map[string]any
	if len(bytes.TrimSpace(data)) > 0 && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(data, &out); err != nil {
			c.t.Fatalf("%s %s: answer is not JSON: %v\n%s", method, path, err, data)
		}
	}
	return resp.StatusCode, resp.Header, out
}

func (c *client) login(password string) int {
	c.t.Helper()
	code, h, _ := c.do("POST", "/identity/v3/auth/tokens", `{"auth":{"identity":{"methods":["password"],"password":{"user":
		{"name":"ann","domain":{"name":"Default"},"password":"`+password+`"}}},"scope":{"project":{"name":"p1","domain":{"name":"Default"}}}}}`)
	c.token = h.Get("X-Subject-Token")
	return code
}

func (c *client) server(name string) string {
	c.t.Helper()
	code, _, out := c.do("POST", "/RegionOne/compute/v2.1/servers", `{"server":{"name":"`+name+`","imageRef":"`+
		DefaultImages()[0].ID+`","flavorRef":"2","networks":[{"uuid":"`+privateNetworkID+`"}]}}`)
	if code != 202 {
		c.t.Fatalf("create server %s: %d %v", name, code, out)
	}
	return out["server"].(map[string]any)["id"].(string)
}

func TestKeystone(t *testing.T) {
	c, _ := newClient(t, cloudsim.New(cloudsim.Profile{}))
	if code, _, out := c.do("GET", "/identity", ""); code != 300 || out["versions"] == nil {
		t.Errorf("version discovery: %d %v", code, out)
	}
	if code := c.login("wrong"); code != 401 || c.token != "" {
		t.Errorf("wrong password: %d, token %q; want 401 and none", code, c.token)
	}
	if code, _, out := c.do("GET", "/RegionOne/compute/v2.1/servers/detail", ""); code != 401 || out["error"] == nil {
		t.Errorf("no token: %d %v; want 401 with Keystone's error", code, out)
	}
	if code := c.login("pw"); code != 201 || c.token == "" {
		t.Fatalf("right password: %d, token %q", code, c.token)
	}
	if code, _, _ := c.do("GET", "/RegionOne/compute/v2.1/servers/detail", ""); code != 200 {
		t.Errorf("with the token: %d", code)
	}
	if code, _, _ := c.do("GET", "/RegionTwo/compute/v2.1/servers/detail", ""); code != 404 {
		t.Errorf("a region not in the catalog: %d, want 404", code)
	}
}

// TestServerLifecycle: BUILD until the launch latency passes, ACTIVE with
// an address, deleting until the termination latency passes, then gone;
// lists page by limit and marker with a next link. The emulator's clock
// is held, so each latency lasts however slowly the steps run, and
// advanced past it when it must end.
func TestServerLifecycle(t *testing.T) {
	sim := cloudsim.New(cloudsim.Profile{})
	clock := cloudsim.Hold(sim)
	c, srv := newClient(t, sim)
	c.login("pw")
	srv.SetLatency(cloudsim.Latency{Launch: 300 * time.Millisecond, Terminate: 300 * time.Millisecond})
	id := c.server("a")
	status := func() (int, map[string]any) {
		code, _, out := c.do("GET", "/RegionOne/compute/v2.1/servers/"+id, "")
		sv, _ := out["server"].(map[string]any)
		return code, sv
	}
	if _, sv := status(); sv["status"] != "BUILD" || sv["OS-EXT-STS:task_state"] != "spawning" {
		t.Errorf("right after create: %v %v, want BUILD spawning", sv["status"], sv["OS-EXT-STS:task_state"])
	}
	if code, _, _ := c.do("POST", "/RegionOne/compute/v2.1/servers/"+id+"/action", `{"os-getConsoleOutput":{}}`); code != 409 {
		t.Errorf("console of a building server: %d, want 409", code)
	}
	clock.Advance(300 * time.Millisecond)
	if _, sv := status(); sv["status"] != "ACTIVE" || len(sv["addresses"].(map[string]any)) == 0 {
		t.Errorf("after the launch latency: %v", sv)
	}
	if code, _, out := c.do("POST", "/RegionOne/compute/v2.1/servers/"+id+"/action", `{"os-getConsoleOutput":{"length":50}}`); code != 200 ||
		!strings.Contains(out["output"].(string), "-----BEGIN SSH HOST KEY KEYS-----\nssh-ed25519 ") {
		t.Errorf("console: %d %v", code, out)
	}

	c.server("b")
	c.server("c")
	srv.SetLatency(cloudsim.Latency{Terminate: 300 * time.Millisecond})
	code, h, page1 := c.do("GET", "/RegionOne/compute/v2.1/servers/detail?limit=2", "")
	if code != 200 || h.Get("Content-Type") != "application/json" {
		t.Fatalf("list: %d, Content-Type %q", code, h.Get("Content-Type"))
	}
	links, _ := page1["servers_links"].([]any)
	if len(page1["servers"].([]any)) != 2 || len(links) != 1 {
		t.Fatalf("first page of 2: %v", page1)
	}
	next := links[0].(map[string]any)["href"].(string)
	_, _, page2 := c.do("GET", strings.TrimPrefix(next, c.base), "")
	if len(page2["servers"].([]any)) != 1 || page2["servers_links"] != nil {
		t.Errorf("second page: %v", page2)
	}
	if _, _, named := c.do("GET", "/RegionOne/compute/v2.1/servers/detail?name=%5Eb%24", ""); len(named["servers"].([]any)) != 1 {
		t.Errorf("name filter ^b$: %v", named)
	}

	if code, _, _ := c.do("DELETE", "/RegionOne/compute/v2.1/servers/"+id, ""); code != 204 {
		t.Errorf("delete: %d", code)
	}
	if _, sv := status(); sv["OS-EXT-STS:task_state"] != "deleting" {
		t.Errorf("right after delete: task_state %v, want deleting", sv["OS-EXT-STS:task_state"])
	}
	clock.Advance(300 * time.Millisecond)
	if code, _ := status(); code != 404 {
		t.Errorf("after the termination latency: %d, want 404", code)
	}
}

// TestSecurityGroups: a group in use cannot go; a rule cannot be added
// twice; Neutron's error shape.
func TestSecurityGroups(t *testing.T) {
	c, _ := newClient(t, cloudsim.New(cloudsim.Profile{}))
	c.login("pw")
	code, _, out := c.do("POST", "/RegionOne/network/v2.0/security-groups", `{"security_group":{"name":"g","description":"d"}}`)
	if code != 201 {
		t.Fatalf("create group: %d %v", code, out)
	}
	g := out["security_group"].(map[string]any)
	gid := g["id"].(string)
	if rules := g["security_group_rules"].([]any); len(rules) != 2 {
		t.Errorf("a new group has %d rules, want Neutron's two egress rules", len(rules))
	}
	rule := `{"security_group_rules":[{"security_group_id":"` + gid + `","direction":"ingress","ethertype":"IPv4","remote_ip_prefix":"10.0.0.1/32"}]}`
	if code, _, out := c.do("POST", "/RegionOne/network/v2.0/security-group-rules", rule); code != 201 {
		t.Fatalf("bulk rule create: %d %v", code, out)
	}
	code, _, out = c.do("POST", "/RegionOne/network/v2.0/security-group-rules", rule)
	if ne, _ := out["NeutronError"].(map[string]any); code != 409 || ne["type"] != "SecurityGroupRuleExists" {
		t.Errorf("the same rule again: %d %v", code, out)
	}
	code, _, out = c.do("POST", "/RegionOne/compute/v2.1/servers", `{"server":{"name":"s","imageRef":"`+DefaultImages()[0].ID+
		`","flavorRef":"2","security_groups":[{"name":"g"}],"networks":[{"uuid":"`+privateNetworkID+`"}]}}`)
	if code != 202 {
		t.Fatalf("server in the group: %d %v", code, out)
	}
	code, _, out = c.do("DELETE", "/RegionOne/network/v2.0/security-groups/"+gid, "")
	if ne, _ := out["NeutronError"].(map[string]any); code != 409 || ne["type"] != "SecurityGroupInUse" {
		t.Errorf("delete a group in use: %d %v", code, out)
	}
}

// TestFaults: each injected fault answers as OpenStack does; a lost
// answer's work is done.
func TestFaults(t *testing.T) {
	sim := cloudsim.New(cloudsim.Profile{})
	c, srv := newClient(t, sim)
	c.login("pw")
	sim.Faults.Add(cloudsim.Fault{Op: cloudsim.OpList, Kind: cloudsim.FaultThrottle})
	code, h, out := c.do("GET", "/RegionOne/compute/v2.1/servers/detail", "")
	if code != 429 || h.Get("Retry-After") == "" || out["overLimit"] == nil {
		t.Errorf("throttle: %d %v %v", code, h, out)
	}
	sim.Faults.Add(cloudsim.Fault{Op: cloudsim.OpLaunch, Kind: cloudsim.FaultQuota, Quota: "cores"})
	code, _, out = c.do("POST", "/RegionOne/compute/v2.1/servers", `{"server":{"name":"q","imageRef":"`+DefaultImages()[0].ID+`","flavorRef":"2"}}`)
	if f, _ := out["forbidden"].(map[string]any); code != 403 || !strings.Contains(f["message"].(string), "Quota exceeded for cores") {
		t.Errorf("quota: %d %v", code, out)
	}
	sim.Faults.Add(cloudsim.Fault{Op: cloudsim.OpLaunch, Kind: cloudsim.FaultQuota})
	code, _, out = c.do("POST", "/RegionOne/network/v2.0/floatingips", `{"floatingip":{"floating_network_id":"`+publicNetworkID+`"}}`)
	wantOverQuota(t, "quota fault on Neutron", code, out, "floatingip")
	sim.Faults.Add(cloudsim.Fault{Op: cloudsim.OpLaunch, Kind: cloudsim.FaultLost})
	code, _, _ = c.do("POST", "/RegionOne/compute/v2.1/servers", `{"server":{"name":"l","imageRef":"`+DefaultImages()[0].ID+`","flavorRef":"2"}}`)
	if code != 500 {
		t.Errorf("lost: %d, want 500", code)
	}
	made := 0
	for _, r := range srv.Resources() {
		if r.Kind == "server" && r.Name == "l" {
			made++
		}
	}
	if made != 1 {
		t.Errorf("a lost answer's server exists %d times, want once", made)
	}
}
