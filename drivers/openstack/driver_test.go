package openstack

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloudtransit/transit/cloudsim"
	"github.com/cloudtransit/transit/cloudsim/openstack"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// TestCredentialSources authenticates each way a credential can say: a
// password, an application credential, a clouds.yaml entry, the OS_*
// environment; a wrong secret is ErrCloudAuth naming the credential, never
// the secret.
func TestCredentialSources(t *testing.T) {
	w := newWorld(t)
	dir := t.TempDir()
	cloudsYAML := filepath.Join(dir, "clouds.yaml")
	writeFile(t, cloudsYAML, "clouds:\n  sim:\n    auth:\n      auth_url: "+w.url+"/identity/v3\n"+
		"      application_credential_id: "+appID+"\n      application_credential_secret: "+appKey+"\n"+
		"    auth_type: v3applicationcredential\n    region_name: "+region+"\n")
	t.Setenv("OS_CLIENT_CONFIG_FILE", cloudsYAML)
	for _, tc := range []struct {
		name string
		cred *districts.Credential
		env  map[string]string
		ok   bool
	}{
		{"password", w.credential(), nil, true},
		{"application credential", &districts.Credential{ID: "os-cred", Provider: districts.ProviderOpenStack,
			OSApplicationCredentialID: appID, OSApplicationCredentialSecret: appKey}, nil, true},
		{"clouds.yaml", &districts.Credential{ID: "os-cred", Provider: districts.ProviderOpenStack, OSCloud: "sim"}, nil, true},
		{"environment", nil, map[string]string{"OS_USERNAME": user, "OS_PASSWORD": password, "OS_PROJECT_NAME": project,
			"OS_USER_DOMAIN_NAME": "Default", "OS_PROJECT_DOMAIN_NAME": "Default", "OS_AUTH_URL": "http://unused.invalid/v3"}, true},
		{"wrong password", &districts.Credential{ID: "os-cred", Provider: districts.ProviderOpenStack,
			OSUsername: user, OSPassword: "wrong-" + password, OSProjectName: project}, nil, false},
		{"wrong application secret", &districts.Credential{ID: "os-cred", Provider: districts.ProviderOpenStack,
			OSApplicationCredentialID: appID, OSApplicationCredentialSecret: "wrong-" + appKey}, nil, false},
		{"other project", &districts.Credential{ID: "os-cred", Provider: districts.ProviderOpenStack,
			OSUsername: user, OSPassword: password, OSProjectName: "not-" + project}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			drv := w.driver(w.district(), tc.cred, fast())
			_, _, err := drv.List(t.Context(), "c")
			if tc.ok {
				if err != nil {
					t.Fatalf("List: %v", err)
				}
				return
			}
			w.wantKind(err, provider.ErrCloudAuth)
			if !strings.Contains(err.Error(), `credential "os-cred"`) {
				t.Errorf("auth error %q does not name the credential", err)
			}
		})
	}
}

// TestInvalidConfiguration: what the cloud does not have is
// districts.ErrInvalid naming the district key.
func TestInvalidConfiguration(t *testing.T) {
	w := newWorld(t)
	key := newKey(t)
	for _, tc := range []struct {
		name, key string
		mod       func(*districts.District)
		machine   string
	}{
		{"image", "os_image", func(d *districts.District) { d.OSImage = "no-such-image" }, "m1.small"},
		{"network", "os_network", func(d *districts.District) { d.OSNetwork = "no-such-net" }, "m1.small"},
		{"floating network", "os_floating_network", func(d *districts.District) { d.OSFloatingNetwork = "no-such-net" }, "m1.small"},
		{"flavor", "os_flavor", nil, "m9.huge"},
		{"zone", "os_zones", func(d *districts.District) { d.OSZones = []string{"no-such-zone"} }, "m1.small"},
		{"region", "os_region", func(d *districts.District) { d.OSRegion = "RegionNine" }, "m1.small"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mods []func(*districts.District)
			if tc.mod != nil {
				mods = append(mods, tc.mod)
			}
			drv := w.driver(w.district(mods...), w.credential(), fast())
			g, err := drv.EnsureGroup(t.Context(), groupSpec("inv", "os-test"))
			if err == nil {
				spec := launchSpec("inv", "os-test", "inv-"+strings.ReplaceAll(tc.name, " ", "-"), "", g.ProviderID, key)
				spec.MachineType = tc.machine
				var inst provider.Instance
				inst, err = drv.Launch(t.Context(), spec)
				if err == nil {
					t.Cleanup(func() { _ = drv.Terminate(t.Context(), inst) })
				}
			}
			w.wantKind(err, districts.ErrInvalid)
			if !strings.Contains(err.Error(), tc.key) {
				t.Errorf("error %q does not name %s", err, tc.key)
			}
		})
	}
}

// TestFloatingIP: with os_floating_network each node gets a floating IP,
// its public address; a lost create answer does not make a second one,
// and Terminate releases it (Neutron would keep it, and bill it).
func TestFloatingIP(t *testing.T) {
	w := newWorld(t)
	ctx := t.Context()
	drv := w.driver(w.district(func(d *districts.District) { d.OSFloatingNetwork = "public" }), w.credential(), fast())
	g, err := drv.EnsureGroup(ctx, groupSpec("fip", "os-test"))
	if err != nil {
		t.Fatal(err)
	}
	w.sim.Faults.Add(cloudsim.Fault{Op: cloudsim.OpLaunch, Kind: cloudsim.FaultLost, Times: 2}) // the server's, then the IP's
	inst, err := drv.Launch(ctx, launchSpec("fip", "os-test", "fip-1", "", g.ProviderID, newKey(t)))
	if err != nil {
		t.Fatalf("Launch with lost answers: %v", err)
	}
	if inst.PublicIP == inst.PrivateIP || !strings.HasPrefix(inst.PublicIP, "172.24.") {
		t.Errorf("public %s, private %s: want a floating IP from the public network", inst.PublicIP, inst.PrivateIP)
	}
	count := func(kind string) int {
		n := 0
		for _, r := range w.srv.Resources() {
			if r.Kind == kind {
				n++
			}
		}
		return n
	}
	if n := count("floating-ip"); n != 1 {
		t.Errorf("%d floating IPs after one launch with lost answers, want 1", n)
	}
	if n := count("server"); n != 1 {
		t.Errorf("%d servers after one launch with lost answers, want 1", n)
	}
	listed, _, err := drv.List(ctx, "fip")
	if err != nil || len(listed) != 1 || listed[0].PublicIP != inst.PublicIP {
		t.Errorf("List = %+v, %v: want the server with public address %s", listed, err, inst.PublicIP)
	}
	if err := drv.Terminate(ctx, inst); err != nil {
		t.Fatal(err)
	}
	if n := count("floating-ip"); n != 0 {
		t.Errorf("%d floating IPs after Terminate, want 0", n)
	}
}

// TestBuildError: a server Nova could not build is deleted and Launch
// says why.
func TestBuildError(t *testing.T) {
	w := newWorld(t)
	ctx := t.Context()
	w.sim.Backer = failingBacker{}
	drv := w.driver(w.district(), w.credential(), fast())
	g, err := drv.EnsureGroup(ctx, groupSpec("err", "os-test"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = drv.Launch(ctx, launchSpec("err", "os-test", "err-1", "", g.ProviderID, newKey(t)))
	if err == nil || !strings.Contains(err.Error(), "No valid host") {
		t.Fatalf("Launch on a cloud without hosts: %v, want the server's fault", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		insts, _, err := drv.List(ctx, "err")
		if err != nil {
			t.Fatal(err)
		}
		if len(insts) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the failed server is still listed: %+v", insts)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type failingBacker struct{}

func (failingBacker) Start(context.Context, string, string, string) (cloudsim.Machine, error) {
	return cloudsim.Machine{}, errors.New("no host")
}
func (failingBacker) Stop(context.Context, string, string) error           { return nil }
func (failingBacker) Allow(context.Context, string, []cloudsim.Rule) error { return nil }
func (failingBacker) PowerOff(context.Context, string, string, bool) error {
	return nil
}
func (failingBacker) PowerOn(context.Context, string, string) (cloudsim.Machine, error) {
	return cloudsim.Machine{}, errors.New("no valid host")
}

// TestGroupInUse: Neutron refuses to delete a group a deleting server
// still uses; DeleteGroup waits for the server to be gone. The emulator's
// clock is held while the server is deleting, so the deletion lasts until
// DeleteGroup was refused, however slowly the steps run.
func TestGroupInUse(t *testing.T) {
	w := newWorld(t)
	ctx := t.Context()
	drv := w.driver(w.district(), w.credential(), fast())
	g, err := drv.EnsureGroup(ctx, groupSpec("use", "os-test", "10.0.0.9"))
	if err != nil {
		t.Fatal(err)
	}
	inst, err := drv.Launch(ctx, launchSpec("use", "os-test", "use-1", "", g.ProviderID, newKey(t)))
	if err != nil {
		t.Fatal(err)
	}
	w.srv.SetLatency(cloudsim.Latency{Terminate: 300 * time.Millisecond})
	w.clock.Hold()
	if err := drv.Terminate(ctx, inst); err != nil {
		t.Fatal(err)
	}
	// The deletion ends once DeleteGroup was refused: when it tries again
	// (its first request is recorded before the emulator answers it, so
	// that one may still be on its way).
	w.clock.ResumeWhen(ctx, time.Second, func() bool { return len(w.rec.Sent("DELETE /RegionOne/network/v2.0/security-groups/")) >= 2 })
	if err := drv.DeleteGroup(ctx, g); err != nil {
		t.Fatalf("DeleteGroup while its server is deleting: %v", err)
	}
	if len(w.rec.Sent("DELETE /RegionOne/network/v2.0/security-groups/")) < 2 {
		t.Errorf("DeleteGroup sent %v: want it refused while in use, then retried", w.rec.Sent("security-groups/"))
	}
	for _, r := range w.srv.Resources() {
		if r.Kind != "key-pair" {
			t.Errorf("left behind: %+v", r)
		}
	}
}

// TestGroupRules: EnsureGroup adds missing rules in one bulk request and
// deletes only its own extra ones; IPv6 sources get IPv6 rules.
func TestGroupRules(t *testing.T) {
	w := newWorld(t)
	ctx := t.Context()
	drv := w.driver(w.district(func(d *districts.District) { d.SSHCIDRs = []string{"203.0.113.0/24"} }), w.credential(), fast())
	g, err := drv.EnsureGroup(ctx, groupSpec("rules", "os-test", "10.0.0.1", "10.0.0.2", "2001:db8::1"))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"10.0.0.1", "10.0.0.2", "2001:db8::1"}; strings.Join(g.Sources, ",") != strings.Join(want, ",") {
		t.Errorf("sources %v, want %v", g.Sources, want)
	}
	if n := len(w.rec.Sent("POST /RegionOne/network/v2.0/security-group-rules")); n != 1 {
		t.Errorf("%d rule creates, want one bulk request", n)
	}
	before := len(w.rec.Sent("security-group-rules"))
	g2, err := drv.EnsureGroup(ctx, groupSpec("rules", "os-test", "10.0.0.1", "2001:db8::1"))
	if err != nil {
		t.Fatal(err)
	}
	if g2.ProviderID != g.ProviderID || strings.Join(g2.Sources, ",") != "10.0.0.1,2001:db8::1" {
		t.Errorf("after removing a source: %+v", g2)
	}
	if dels := w.rec.Sent("DELETE /RegionOne/network/v2.0/security-group-rules/"); len(dels) != 1 {
		t.Errorf("rule deletes %v, want exactly one", dels)
	}
	if _, err := drv.EnsureGroup(ctx, groupSpec("rules", "os-test", "10.0.0.1", "2001:db8::1")); err != nil {
		t.Fatal(err)
	}
	if after := len(w.rec.Sent("security-group-rules")); after != before+1 {
		t.Errorf("an unchanged EnsureGroup changed rules: %d rule requests", after-before)
	}
	if err := drv.DeleteGroup(ctx, g); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestTokenExpiry: a token that expires mid-run is renewed with the
// credential, and the request it failed is made again. Keystone's clock
// (the emulator's) is held, so a token lasts however slowly a List runs,
// and advanced past the token's life between Lists.
func TestTokenExpiry(t *testing.T) {
	w := newWorld(t, func(o *openstack.Options) { o.TokenLife = 200 * time.Millisecond })
	w.clock.Hold()
	drv := w.driver(w.district(), w.credential(), fast())
	for i := range 3 {
		if _, _, err := drv.List(t.Context(), "c"); err != nil {
			t.Fatalf("List %d: %v", i, err)
		}
		w.clock.Advance(250 * time.Millisecond)
	}
	if n := len(w.rec.Sent("POST /identity/v3/auth/tokens")); n != 3 {
		t.Errorf("%d token requests for three Lists each after the last token expired, want 3", n)
	}
}
