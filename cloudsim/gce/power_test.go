package gce

import (
	"testing"
	"time"

	"github.com/cloudtransit/transit/cloudsim"
)

// instanceState reads the instance's status, internal and external
// address.
func instanceState(t *testing.T, base string) (status, private, public string) {
	t.Helper()
	code, in := do(t, "GET", base+"zones/europe-west1-b/instances/n1", "")
	if code != 200 {
		t.Fatalf("get: %d %v", code, in)
	}
	ni := in["networkInterfaces"].([]any)[0].(map[string]any)
	private, _ = ni["networkIP"].(string)
	if acs, ok := ni["accessConfigs"].([]any); ok && len(acs) > 0 {
		public, _ = acs[0].(map[string]any)["natIP"].(string)
	}
	return in["status"].(string), private, public
}

func waitStatus(t *testing.T, base, want string) (private, public string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, priv, pub := instanceState(t, base)
		if st == want {
			return priv, pub
		}
		if time.Now().After(deadline) {
			t.Fatalf("instance is %s, never %s", st, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func waitOp(t *testing.T, base string, op map[string]any) map[string]any {
	t.Helper()
	code, done := do(t, "POST", base+"zones/europe-west1-b/operations/"+op["name"].(string)+"/wait", "")
	if code != 200 || done["status"] != "DONE" {
		t.Fatalf("wait %s: %d %v", op["name"], code, done)
	}
	return done
}

// Stop and start are zonal operations: RUNNING, STOPPING, TERMINATED
// (the internal address kept, the external one given back), then
// PROVISIONING or STAGING and RUNNING with a new external address. A
// TERMINATED instance can be deleted; operations list by type and status.
// The emulator's clock is held, so each state between lasts however slowly
// the steps run, and advanced past the latency when it must end.
func TestStopStart(t *testing.T) {
	s, base := newTest(t, cloudsim.Latency{})
	clock := cloudsim.Hold(s.sim)
	inst := base + "zones/europe-west1-b/instances/n1"
	if code, op := do(t, "POST", base+"zones/europe-west1-b/instances", instanceBody); code != 200 {
		t.Fatalf("insert: %d %v", code, op)
	}
	priv0, pub0 := waitStatus(t, base, "RUNNING")
	s.SetLatency(cloudsim.Latency{Stop: 300 * time.Millisecond, Start: 300 * time.Millisecond, Terminate: 300 * time.Millisecond})

	code, op := do(t, "POST", inst+"/stop", "")
	if code != 200 || op["operationType"] != "stop" || op["status"] == "DONE" {
		t.Fatalf("stop: %d %v", code, op)
	}
	if st, _, _ := instanceState(t, base); st != "STOPPING" {
		t.Errorf("right after stop: %s", st)
	}
	if code, list := do(t, "GET", base+`zones/europe-west1-b/operations?filter=(operationType+%3D+"stop")+(status+!%3D+"DONE")`, ""); code != 200 || len(list["items"].([]any)) != 1 {
		t.Errorf("pending stop operations: %d %v", code, list)
	}
	code, _ = do(t, "POST", inst+"/start", "")
	if code != 400 {
		t.Errorf("start of a STOPPING instance: %d, want 400 resourceNotReady", code)
	}
	clock.Advance(300 * time.Millisecond)
	waitOp(t, base, op)
	priv, pub := waitStatus(t, base, "TERMINATED")
	if priv != priv0 || pub != "" {
		t.Errorf("TERMINATED: internal %q (was %q), external %q (want none)", priv, priv0, pub)
	}
	code, op = do(t, "POST", inst+"/stop", "")
	if code != 200 {
		t.Fatalf("stop of a TERMINATED instance: %d %v", code, op)
	}
	waitOp(t, base, op)

	code, op = do(t, "POST", inst+"/start", "")
	if code != 200 || op["operationType"] != "start" {
		t.Fatalf("start: %d %v", code, op)
	}
	if st, _, _ := instanceState(t, base); st != "PROVISIONING" && st != "STAGING" {
		t.Errorf("right after start: %s", st)
	}
	clock.Advance(300 * time.Millisecond)
	waitOp(t, base, op)
	priv, pub = waitStatus(t, base, "RUNNING")
	if priv != priv0 || pub == "" || pub == pub0 {
		t.Errorf("started again: internal %q (was %q), external %q (was %q, want a new one)", priv, priv0, pub, pub0)
	}

	code, op = do(t, "POST", inst+"/stop", "")
	if code != 200 {
		t.Fatalf("stop: %d %v", code, op)
	}
	clock.Advance(300 * time.Millisecond)
	waitOp(t, base, op)
	code, op = do(t, "DELETE", inst, "")
	if code != 200 || op["operationType"] != "delete" {
		t.Fatalf("delete of a TERMINATED instance: %d %v", code, op)
	}
	if st, _, _ := instanceState(t, base); st != "STOPPING" {
		t.Errorf("while deleted: %s", st)
	}
	code, _ = do(t, "POST", inst+"/start", "")
	if code != 400 {
		t.Errorf("start of an instance being deleted: %d, want 400", code)
	}
	clock.Advance(300 * time.Millisecond)
	waitOp(t, base, op)
	if code, _ := do(t, "GET", inst, ""); code != 404 {
		t.Errorf("after the delete: %d", code)
	}
}

// An insert hit by FaultFailed succeeds, and its instance is TERMINATED
// (with a statusMessage) right after; Fail does the same to a running one.
// The emulator's clock is held while the insert must be in progress.
func TestFailedInsert(t *testing.T) {
	s, base := newTest(t, cloudsim.Latency{Launch: 200 * time.Millisecond})
	clock := cloudsim.Hold(s.sim)
	s.sim.Faults.Add(cloudsim.Fault{Op: cloudsim.OpLaunch, Kind: cloudsim.FaultFailed})
	code, op := do(t, "POST", base+"zones/europe-west1-b/instances", instanceBody)
	if code != 200 {
		t.Fatalf("insert: %d %v", code, op)
	}
	if st, _, _ := instanceState(t, base); st != "PROVISIONING" {
		t.Errorf("at first: %s", st)
	}
	clock.Resume(200 * time.Millisecond)
	if done := waitOp(t, base, op); done["error"] != nil {
		t.Errorf("the insert operation failed: %v", done)
	}
	waitStatus(t, base, "TERMINATED")
	if _, in := do(t, "GET", base+"zones/europe-west1-b/instances/n1", ""); in["statusMessage"] != hostError {
		t.Errorf("statusMessage %v", in["statusMessage"])
	}
	code, op = do(t, "POST", base+"zones/europe-west1-b/instances/n1/start", "")
	if code != 200 {
		t.Fatalf("start: %d %v", code, op)
	}
	waitStatus(t, base, "RUNNING")
	if err := s.Fail(t.Context(), "transit-test-1", "europe-west1-b/n1", "host maintenance"); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, base, "TERMINATED")
	if err := s.Start(t.Context(), "transit-test-1", "europe-west1-b/n1"); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, base, "RUNNING")
	if err := s.Stop(t.Context(), "transit-test-1", "europe-west1-b/n1"); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, base, "TERMINATED")
}
