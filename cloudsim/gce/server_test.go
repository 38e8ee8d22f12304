package gce

import (
	"crypto/rsa"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/cloudtransit/transit/cloudsim"
)

// newTest serves an emulator that accepts any bearer token.
func newTest(t *testing.T, lat cloudsim.Latency) (*Server, string) {
	t.Helper()
	s := New(cloudsim.New(cloudsim.Profile{Name: cloudsim.ProfileZero}), Options{})
	s.SetLatency(lat)
	ts := httptest.NewServer(s)
	t.Cleanup(func() { ts.Close(); s.Close() })
	return s, ts.URL + "/compute/v1/projects/transit-test-1/"
}

func do(t *testing.T, method, u, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer test")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%s %s: not JSON: %s", method, u, b)
	}
	return resp.StatusCode, out
}

const instanceBody = `{"name":"n1","machineType":"zones/europe-west1-b/machineTypes/e2-small","labels":{"transit-cluster":"c"},
	"disks":[{"boot":true,"initializeParams":{"sourceImage":"projects/debian-cloud/global/images/family/debian-12"}}],
	"networkInterfaces":[{"network":"global/networks/default","accessConfigs":[{"type":"ONE_TO_ONE_NAT"}]}]}`

func TestUnauthenticated(t *testing.T) {
	s := New(cloudsim.New(cloudsim.Profile{}), Options{Accounts: map[string]*rsa.PublicKey{}})
	ts := httptest.NewServer(s)
	defer ts.Close()
	for _, auth := range []string{"", "Bearer nonsense", "Bearer a.b.c"} {
		req, _ := http.NewRequestWithContext(t.Context(), "GET", ts.URL+"/compute/v1/projects/transit-test-1/global/firewalls", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Errorf("Authorization %q: status %d, want 401", auth, resp.StatusCode)
		}
	}
	resp, err := http.PostForm(ts.URL+TokenPath, url.Values{"grant_type": {jwtBearer}, "assertion": {"a.b.c"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Errorf("a forged assertion got status %d, want 400 invalid_grant", resp.StatusCode)
	}
}

// An insert repeated with its requestId answers the first operation and
// makes nothing new; the operation is done, and the instance RUNNING,
// only after the launch latency; delete keeps it STOPPING for the
// termination latency. The emulator's clock is held, so each latency lasts
// however slowly the steps run, and advanced past it when it must end.
func TestOperations(t *testing.T) {
	s, api := newTest(t, cloudsim.Latency{Launch: 300 * time.Millisecond, Terminate: 300 * time.Millisecond})
	clock := cloudsim.Hold(s.sim)
	const rid = "0f8fad5b-d9cb-469f-a165-70867728950e"
	code, op := do(t, "POST", api+"zones/europe-west1-b/instances?requestId="+rid, instanceBody)
	if code != 200 || op["status"] != "RUNNING" {
		t.Fatalf("insert: %d %v", code, op)
	}
	code, again := do(t, "POST", api+"zones/europe-west1-b/instances?requestId="+rid, instanceBody)
	if code != 200 || again["name"] != op["name"] {
		t.Errorf("repeated insert answered %d %v, want operation %v", code, again["name"], op["name"])
	}
	if code, _ := do(t, "POST", api+"zones/europe-west1-b/instances", instanceBody); code != 409 {
		t.Errorf("insert of an existing name without requestId: %d, want 409", code)
	}
	_, in := do(t, "GET", api+"zones/europe-west1-b/instances/n1", "")
	if in["status"] == "RUNNING" {
		t.Errorf("instance RUNNING before the launch latency")
	}
	clock.Advance(300 * time.Millisecond)
	_, done := do(t, "POST", api+"zones/europe-west1-b/operations/"+op["name"].(string)+"/wait", "")
	if done["status"] != "DONE" {
		t.Errorf("wait answered %v", done["status"])
	}
	_, in = do(t, "GET", api+"zones/europe-west1-b/instances/n1", "")
	if in["status"] != "RUNNING" {
		t.Errorf("instance %v after its insert is done", in["status"])
	}
	_, del := do(t, "DELETE", api+"zones/europe-west1-b/instances/n1", "")
	if _, in = do(t, "GET", api+"zones/europe-west1-b/instances/n1", ""); in["status"] != "STOPPING" {
		t.Errorf("right after delete: %v, want STOPPING", in["status"])
	}
	clock.Advance(300 * time.Millisecond)
	do(t, "POST", api+"zones/europe-west1-b/operations/"+del["name"].(string)+"/wait", "")
	if code, _ := do(t, "GET", api+"zones/europe-west1-b/instances/n1", ""); code != 404 {
		t.Errorf("after the delete operation: %d, want 404", code)
	}
	if r := s.Resources(); len(r) != 0 {
		t.Errorf("left: %v", r)
	}
}

// A firewall exists only once its insert is done; a second insert of the
// name meanwhile conflicts (the emulator's clock is held meanwhile).
// Filters that are not filters are refused.
func TestFirewallCreation(t *testing.T) {
	s, api := newTest(t, cloudsim.Latency{GroupCreate: 300 * time.Millisecond})
	clock := cloudsim.Hold(s.sim)
	body := `{"name":"fw","allowed":[{"IPProtocol":"all"}],"sourceRanges":["10.0.0.1/32"]}`
	_, op := do(t, "POST", api+"global/firewalls", body)
	if code, _ := do(t, "GET", api+"global/firewalls/fw", ""); code != 404 {
		t.Errorf("firewall visible before its insert is done: %d", code)
	}
	if code, _ := do(t, "POST", api+"global/firewalls", body); code != 409 {
		t.Errorf("second insert while the first is pending: %d, want 409", code)
	}
	clock.Advance(300 * time.Millisecond)
	do(t, "POST", api+"global/operations/"+op["name"].(string)+"/wait", "")
	if code, _ := do(t, "GET", api+"global/firewalls/fw", ""); code != 200 {
		t.Errorf("firewall after its insert: %d", code)
	}
	if code, _ := do(t, "GET", api+"aggregated/instances?filter="+url.QueryEscape("labels.a ~ b"), ""); code != 400 {
		t.Errorf("a malformed filter: %d, want 400", code)
	}
}

// Compute Engine refuses a firewall rule whose sourceRanges mix IPv4 and
// IPv6 (400 invalid, naming the first range of the other family), on
// insert and on patch; one family at a time is fine.
func TestFirewallRefusesMixedFamilies(t *testing.T) {
	_, api := newTest(t, cloudsim.Latency{})
	mixed := `{"name":"mixed","allowed":[{"IPProtocol":"all"}],"sourceRanges":["10.0.0.1/32","203.0.113.0/24","2001:db8::1/128"]}`
	code, out := do(t, "POST", api+"global/firewalls", mixed)
	e, _ := out["error"].(map[string]any)
	errs, _ := e["errors"].([]any)
	if code != 400 || len(errs) != 1 || errs[0].(map[string]any)["reason"] != "invalid" ||
		!strings.HasPrefix(e["message"].(string), "Invalid value for field 'resource.sourceRanges[2]': '2001:db8::1/128'. IPv4 and IPv6") {
		t.Errorf("insert of a mixed rule: %d %v, want 400 invalid naming sourceRanges[2]", code, out)
	}
	if code, _ := do(t, "GET", api+"global/firewalls/mixed", ""); code != 404 {
		t.Errorf("a refused rule exists: %d", code)
	}
	for name, ranges := range map[string]string{"v4": `["10.0.0.1/32","203.0.113.0/24"]`, "v6": `["2001:db8::1/128","2001:db8:1::/48"]`} {
		code, op := do(t, "POST", api+"global/firewalls", `{"name":"`+name+`","allowed":[{"IPProtocol":"all"}],"sourceRanges":`+ranges+`}`)
		if code != 200 {
			t.Fatalf("insert of the %s rule: %d %v", name, code, op)
		}
		do(t, "POST", api+"global/operations/"+op["name"].(string)+"/wait", "")
	}
	if code, out := do(t, "PATCH", api+"global/firewalls/v6", `{"sourceRanges":["2001:db8::1/128","198.51.100.7"]}`); code != 400 {
		t.Errorf("patch making a rule mixed: %d %v, want 400", code, out)
	}
	if _, fw := do(t, "GET", api+"global/firewalls/v6", ""); len(fw["sourceRanges"].([]any)) != 2 || fw["sourceRanges"].([]any)[1] != "2001:db8:1::/48" {
		t.Errorf("a refused patch changed the rule: %v", fw["sourceRanges"])
	}
}

// Quotas as Compute Engine keeps them: an insert beyond the region's
// CPUS (the vCPUs of instances not TERMINATED) or the project's
// FIREWALLS (pending inserts count) is refused with 403 QUOTA_EXCEEDED
// naming the quota and its limit; a stopped instance frees its CPUs.
func TestQuotas(t *testing.T) {
	s := New(cloudsim.New(cloudsim.Profile{Name: cloudsim.ProfileZero}), Options{CPUs: 4, Firewalls: 2})
	ts := httptest.NewServer(s)
	t.Cleanup(func() { ts.Close(); s.Close() })
	api := ts.URL + "/compute/v1/projects/transit-test-1/"
	zone := api + "zones/europe-west1-b/instances"
	insert := func(name, mt string) (int, map[string]any) {
		body := strings.NewReplacer(`"n1"`, `"`+name+`"`, "e2-small", mt).Replace(instanceBody)
		return do(t, "POST", zone, body)
	}
	message := func(out map[string]any) string {
		e, _ := out["error"].(map[string]any)
		m, _ := e["message"].(string)
		return m
	}
	if code, out := insert("a", "e2-standard-2"); code != 200 {
		t.Fatalf("first instance: %d %v", code, out)
	}
	if code, out := insert("b", "e2-small"); code != 200 { // shared-core: 2 vCPUs
		t.Fatalf("second instance: %d %v", code, out)
	}
	code, out := insert("c", "f1-micro")
	if want := "Quota 'CPUS' exceeded.  Limit: 4.0 in region europe-west1."; code != 403 || message(out) != want {
		t.Errorf("an instance past the CPUS quota: %d %q, want 403 %q", code, message(out), want)
	}
	if code, out := insert("c", "f1-micro"); code != 403 {
		t.Fatalf("retried: %d %v", code, out)
	}
	_, op := do(t, "POST", zone+"/a/stop", "")
	do(t, "POST", api+"zones/europe-west1-b/operations/"+op["name"].(string)+"/wait", "")
	if code, out := insert("c", "e2-standard-2"); code != 200 {
		t.Errorf("an instance once another stopped: %d %v", code, out)
	}
	// Another region has its own CPUS.
	other := strings.NewReplacer(`"n1"`, `"d"`, "europe-west1-b", "us-east1-b").Replace(instanceBody)
	if code, out := do(t, "POST", api+"zones/us-east1-b/instances", other); code != 200 {
		t.Errorf("an instance in another region: %d %v", code, out)
	}
	for _, name := range []string{"fw1", "fw2"} {
		if code, out := do(t, "POST", api+"global/firewalls", `{"name":"`+name+`","allowed":[{"IPProtocol":"all"}],"sourceRanges":["10.0.0.1/32"]}`); code != 200 {
			t.Fatalf("firewall %s: %d %v", name, code, out)
		}
	}
	code, out = do(t, "POST", api+"global/firewalls", `{"name":"fw3","allowed":[{"IPProtocol":"all"}],"sourceRanges":["10.0.0.1/32"]}`)
	if want := "Quota 'FIREWALLS' exceeded.  Limit: 2.0 globally."; code != 403 || message(out) != want {
		t.Errorf("a firewall past the FIREWALLS quota: %d %q, want 403 %q", code, message(out), want)
	}
}

// machineTypes.get answers a predefined type's shape, shared-core ones
// marked, and 404 for a name Compute Engine does not have.
func TestMachineTypes(t *testing.T) {
	t.Parallel()
	_, base := newTest(t, cloudsim.Latency{})
	for name, want := range map[string]struct {
		cpus, memoryMB float64
		shared         bool
	}{
		"n1-standard-2": {2, 7680, false}, "n1-highmem-4": {4, 26624, false}, "e2-standard-4": {4, 16384, false},
		"n2d-highcpu-8": {8, 8192, false}, "e2-micro": {2, 1024, true}, "g1-small": {1, 1740, true},
	} {
		code, out := do(t, "GET", base+"zones/us-central1-b/machineTypes/"+name, "")
		if code != 200 || out["guestCpus"] != want.cpus || out["memoryMb"] != want.memoryMB || out["isSharedCpu"] != want.shared ||
			out["name"] != name || out["zone"] != "us-central1-b" {
			t.Errorf("GET machineTypes/%s: %d %v, want %v", name, code, out, want)
		}
	}
	for _, name := range []string{"n1-standard-3", "n1-custom-2-4096", "e2-standard-1", "z9-standard-2"} {
		if code, out := do(t, "GET", base+"zones/us-central1-b/machineTypes/"+name, ""); code != 404 {
			t.Errorf("GET machineTypes/%s: %d %v, want 404", name, code, out)
		}
	}
}
