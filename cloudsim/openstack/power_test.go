package openstack

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/cloudtransit/transit/cloudsim"
)

func (c *client) show(id string) (int, map[string]any) {
	c.t.Helper()
	code, _, out := c.do("GET", "/RegionOne/compute/v2.1/servers/"+id, "")
	if code != 200 {
		return code, nil
	}
	return code, out["server"].(map[string]any)
}

func (c *client) action(id, body string) (int, map[string]any) {
	c.t.Helper()
	code, _, out := c.do("POST", "/RegionOne/compute/v2.1/servers/"+id+"/action", body)
	return code, out
}

// waitStatus polls the server until its status is want and it has no task.
func (c *client) waitStatus(id, want string) map[string]any {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, sv := c.show(id)
		if code == 200 && sv["status"] == want && sv["OS-EXT-STS:task_state"] == nil {
			return sv
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("server %s: %d %v, never %s", id, code, sv, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// os-stop and os-start as Nova does them: ACTIVE with task_state
// powering-off, SHUTOFF (vm_state stopped, power_state 4), SHUTOFF with
// powering-on, ACTIVE; the fixed address and the floating IP stay; a
// wrong state answers 409; a SHUTOFF server can be deleted. The
// emulator's clock is held, so each task lasts however slowly the steps
// run, and advanced past its latency when it must end.
func TestStopStart(t *testing.T) {
	sim := cloudsim.New(cloudsim.Profile{})
	clock := cloudsim.Hold(sim)
	c, srv := newClient(t, sim)
	c.login("pw")
	id := c.server("a")
	c.waitStatus(id, "ACTIVE")
	_, sv := c.show(id)
	port := ""
	if code, _, out := c.do("GET", "/RegionOne/network/v2.0/ports?device_id="+id, ""); code == 200 {
		port = out["ports"].([]any)[0].(map[string]any)["id"].(string)
	}
	code, _, fip := c.do("POST", "/RegionOne/network/v2.0/floatingips", `{"floatingip":{"floating_network_id":"`+publicNetworkID+`","port_id":"`+port+`"}}`)
	if code != 201 {
		t.Fatalf("floating IP: %d %v", code, fip)
	}
	fixed := fixedOf(sv)
	srv.SetLatency(cloudsim.Latency{Stop: 300 * time.Millisecond, Start: 300 * time.Millisecond, Terminate: 300 * time.Millisecond})

	if code, out := c.action(id, `{"os-start":null}`); code != 409 {
		t.Errorf("os-start of an ACTIVE server: %d %v, want 409", code, out)
	}
	if code, out := c.action(id, `{"os-stop":null}`); code != 202 {
		t.Fatalf("os-stop: %d %v", code, out)
	}
	if _, sv := c.show(id); sv["status"] != "ACTIVE" || sv["OS-EXT-STS:task_state"] != "powering-off" {
		t.Errorf("right after os-stop: %v %v", sv["status"], sv["OS-EXT-STS:task_state"])
	}
	if code, out := c.action(id, `{"os-stop":null}`); code != 409 {
		t.Errorf("os-stop while powering off: %d %v, want 409", code, out)
	}
	clock.Advance(300 * time.Millisecond)
	sv = c.waitStatus(id, "SHUTOFF")
	if sv["OS-EXT-STS:vm_state"] != "stopped" || sv["OS-EXT-STS:power_state"] != float64(4) {
		t.Errorf("SHUTOFF: vm_state %v, power_state %v", sv["OS-EXT-STS:vm_state"], sv["OS-EXT-STS:power_state"])
	}
	if fixedOf(sv) != fixed || floatingOf(sv) != fip["floatingip"].(map[string]any)["floating_ip_address"] {
		t.Errorf("SHUTOFF: addresses %v, want fixed %s and the floating IP kept", sv["addresses"], fixed)
	}
	if code, out := c.action(id, `{"os-stop":null}`); code != 409 {
		t.Errorf("os-stop of a SHUTOFF server: %d %v, want 409", code, out)
	}
	if code, out := c.action(id, `{"os-start":null}`); code != 202 {
		t.Fatalf("os-start: %d %v", code, out)
	}
	if _, sv := c.show(id); sv["status"] != "SHUTOFF" || sv["OS-EXT-STS:task_state"] != "powering-on" {
		t.Errorf("right after os-start: %v %v", sv["status"], sv["OS-EXT-STS:task_state"])
	}
	clock.Advance(300 * time.Millisecond)
	sv = c.waitStatus(id, "ACTIVE")
	if fixedOf(sv) != fixed || floatingOf(sv) == "" {
		t.Errorf("ACTIVE again: addresses %v", sv["addresses"])
	}
	if code, out := c.action(id, `{"os-stop":null}`); code != 202 {
		t.Fatalf("os-stop: %d %v", code, out)
	}
	clock.Advance(300 * time.Millisecond)
	c.waitStatus(id, "SHUTOFF")
	if code, _, _ := c.do("DELETE", "/RegionOne/compute/v2.1/servers/"+id, ""); code != 204 {
		t.Fatalf("delete of a SHUTOFF server: %d", code)
	}
	if _, sv := c.show(id); sv["OS-EXT-STS:task_state"] != "deleting" {
		t.Errorf("while deleted: %v", sv["OS-EXT-STS:task_state"])
	}
	clock.Advance(300 * time.Millisecond)
	if code, _ := c.show(id); code != 404 {
		t.Errorf("a deleted SHUTOFF server once the termination latency passed: %d, want 404", code)
	}
}

func fixedOf(sv map[string]any) string { return addrOf(sv, "fixed") }
func floatingOf(sv map[string]any) any { return addrOf(sv, "floating") }

func addrOf(sv map[string]any, kind string) string {
	for _, list := range sv["addresses"].(map[string]any) {
		for _, a := range list.([]any) {
			if m := a.(map[string]any); m["OS-EXT-IPS:type"] == kind {
				return m["addr"].(string)
			}
		}
	}
	return ""
}

// A create hit by FaultFailed is accepted, BUILD, then ERROR with the
// scheduler's fault; such a server has no host, so it cannot be stopped,
// and a DELETE removes it. Fail makes an ACTIVE server ERROR; os-stop
// takes an ERROR server on a host. The emulator's clock is held while the
// server must be building.
func TestFailedServer(t *testing.T) {
	sim := cloudsim.New(cloudsim.Profile{})
	clock := cloudsim.Hold(sim)
	c, srv := newClient(t, sim)
	c.login("pw")
	srv.SetLatency(cloudsim.Latency{Launch: 200 * time.Millisecond})
	sim.Faults.Add(cloudsim.Fault{Op: cloudsim.OpLaunch, Kind: cloudsim.FaultFailed})
	id := c.server("doomed")
	if _, sv := c.show(id); sv["status"] != "BUILD" {
		t.Errorf("at first: %v", sv["status"])
	}
	clock.Resume(200 * time.Millisecond)
	sv := c.waitStatus(id, "ERROR")
	if f, _ := sv["fault"].(map[string]any); f == nil || f["message"] != noValidHost {
		t.Errorf("fault %v", sv["fault"])
	}
	if code, out := c.action(id, `{"os-stop":null}`); code != 409 {
		t.Errorf("os-stop of a server without a host: %d %v", code, out)
	}
	if code, _, _ := c.do("DELETE", "/RegionOne/compute/v2.1/servers/"+id, ""); code != 204 {
		t.Errorf("delete of an ERROR server: %d", code)
	}

	ok := c.server("ok")
	c.waitStatus(ok, "ACTIVE")
	if err := srv.Fail(t.Context(), "RegionOne", "p1", ok, "hypervisor lost"); err != nil {
		t.Fatal(err)
	}
	if sv := c.waitStatus(ok, "ERROR"); sv["fault"].(map[string]any)["message"] != "hypervisor lost" {
		t.Errorf("fault %v", sv["fault"])
	}
	if code, out := c.action(ok, `{"os-stop":null}`); code != 202 {
		t.Errorf("os-stop of an ERROR server: %d %v", code, out)
	}
	c.waitStatus(ok, "SHUTOFF")
	if err := srv.Start(t.Context(), "RegionOne", "p1", ok); err != nil {
		t.Fatal(err)
	}
	c.waitStatus(ok, "ACTIVE")
	if err := srv.Stop(t.Context(), "RegionOne", "p1", ok); err != nil {
		t.Fatal(err)
	}
	c.waitStatus(ok, "SHUTOFF")
}

// With a reclaim interval a DELETE soft-deletes: SOFT_DELETED, and a
// DELETE of a SOFT_DELETED server leaves it so (as Nova's soft_delete of
// it does); forceDelete deletes it; restore brings one back; the interval
// reclaims one. The emulator's clock is held while a server must stay
// soft-deleting, SOFT_DELETED or deleting, so neither the termination
// latency nor the reclaim interval ends early on a slow run.
func TestSoftDelete(t *testing.T) {
	sim := cloudsim.New(cloudsim.Profile{})
	clock := cloudsim.Hold(sim)
	srv := New(sim, Options{Users: []User{{Name: "ann", Password: "pw", Project: "p1"}}, ReclaimInterval: 400 * time.Millisecond})
	ts := httptest.NewServer(srv)
	t.Cleanup(func() { ts.Close(); srv.Close() })
	c := &client{t: t, base: ts.URL}
	c.login("pw")
	del := func(id string) {
		t.Helper()
		if code, _, _ := c.do("DELETE", "/RegionOne/compute/v2.1/servers/"+id, ""); code != 204 {
			t.Fatalf("delete: %d", code)
		}
	}
	a, b := c.server("a"), c.server("b")
	c.waitStatus(a, "ACTIVE")
	c.waitStatus(b, "ACTIVE")
	srv.SetLatency(cloudsim.Latency{Terminate: 200 * time.Millisecond})
	del(a)
	clock.Advance(200 * time.Millisecond)
	sv := c.waitStatus(a, "SOFT_DELETED")
	if sv["OS-EXT-STS:vm_state"] != "soft-delete" || sv["OS-EXT-STS:power_state"] != float64(4) {
		t.Errorf("SOFT_DELETED: %v %v", sv["OS-EXT-STS:vm_state"], sv["OS-EXT-STS:power_state"])
	}
	del(a)
	if _, sv := c.show(a); sv["status"] != "SOFT_DELETED" || sv["OS-EXT-STS:task_state"] == "deleting" {
		t.Errorf("a DELETE of a SOFT_DELETED server: %v %v, want it still SOFT_DELETED", sv["status"], sv["OS-EXT-STS:task_state"])
	}
	if code, out := c.action(a, `{"forceDelete":null}`); code != 202 {
		t.Fatalf("forceDelete: %d %v", code, out)
	}
	if _, sv := c.show(a); sv["OS-EXT-STS:task_state"] != "deleting" {
		t.Errorf("after forceDelete: %v", sv["OS-EXT-STS:task_state"])
	}
	del(b)
	clock.Advance(200 * time.Millisecond)
	c.waitStatus(b, "SOFT_DELETED")
	if code, out := c.action(b, `{"restore":null}`); code != 202 {
		t.Fatalf("restore: %d %v", code, out)
	}
	c.waitStatus(b, "ACTIVE")
	// The rest only has to happen in time: the reclaim interval and the
	// deletions run.
	clock.Resume(0)
	del(b)
	deadline := time.Now().Add(10 * time.Second)
	for code, _ := c.show(b); code != 404; code, _ = c.show(b) {
		if time.Now().After(deadline) {
			t.Fatal("a SOFT_DELETED server was never reclaimed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for code, _ := c.show(a); code != 404; code, _ = c.show(a) {
		if time.Now().After(deadline) {
			t.Fatal("a force-deleted server never went")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
