package gce

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/google/go-cmp/cmp"

	"github.com/cloudtransit/transit/cloudsim"
	"github.com/cloudtransit/transit/cloudsim/gce"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// The driver authenticates with the key file's service account through
// the token endpoint its token_uri names; a key the cloud does not know is
// ErrCloudAuth naming the credential, without the key.
func TestKeyFileAuth(t *testing.T) {
	w := newWorld(t)
	drv := w.driver(w.district(), w.credential(), fast())
	if _, _, err := drv.List(t.Context(), "c"); err != nil {
		t.Fatal(err)
	}
	if len(w.rec.Sent("POST /token")) == 0 {
		t.Errorf("no token request: the key file's token_uri was not used")
	}

	other, err := gce.NewKey(project, "intruder@transit-test-1.iam.gserviceaccount.com", w.url+gce.TokenPath)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "other.json")
	writeFile(t, file, other)
	cred := &districts.Credential{Type: "credential", ID: "gce-other", Provider: districts.ProviderGCE, GCEKeyFile: file}
	_, _, err = w.driver(w.district(), cred, fast()).List(t.Context(), "c")
	w.wantKind(err, provider.ErrCloudAuth)
	if !strings.Contains(err.Error(), `"gce-other"`) {
		t.Errorf("auth error does not name the credential: %v", err)
	}
	for _, l := range strings.Split(string(other), `\n`) {
		if len(l) > 40 && strings.Contains(err.Error(), l) {
			t.Errorf("auth error shows the key: %v", err)
		}
	}

	missing := &districts.Credential{Type: "credential", ID: "gce-gone", Provider: districts.ProviderGCE, GCEKeyFile: filepath.Join(t.TempDir(), "nope.json")}
	_, err = New(t.Context(), w.district(), missing, fast())
	if !errors.Is(err, provider.ErrCloudAuth) || !strings.Contains(err.Error(), "gce-gone") {
		t.Errorf("missing key file: err = %v, want ErrCloudAuth naming the credential", err)
	}
}

// A group is created with its sources in one insert per rule (Compute
// Engine's firewall creation is slow: no create-then-patch), its nodes'
// rule is disabled while it has no source (an empty sourceRanges would
// allow everyone), and the SSH rule allows only ssh_cidrs.
func TestFirewallRules(t *testing.T) {
	w := newWorld(t)
	drv := w.driver(w.district(func(d *districts.District) { d.SSHCIDRs = []string{"203.0.113.0/24"} }), w.credential(), fast())
	ctx := t.Context()
	spec := groupSpec("fw", "gce-test")
	g, err := drv.EnsureGroup(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	rule := func(name string) *computepb.Firewall {
		t.Helper()
		fw, err := drv.firewalls.Get(ctx, &computepb.GetFirewallRequest{Project: project, Firewall: name})
		if err != nil {
			t.Fatal(err)
		}
		return fw
	}
	nodes, ssh := rule(g.ProviderID), rule(g.ProviderID+"-ssh")
	if !nodes.GetDisabled() || len(g.Sources) != 0 {
		t.Errorf("a group without sources: rule disabled=%v, sources %v; want it disabled and none reported", nodes.GetDisabled(), g.Sources)
	}
	if ssh.GetDisabled() || !slices.Equal(ssh.GetSourceRanges(), []string{"203.0.113.0/24"}) ||
		ssh.GetAllowed()[0].GetIPProtocol() != "tcp" || !slices.Equal(ssh.GetAllowed()[0].GetPorts(), []string{"22"}) {
		t.Errorf("SSH rule: %v", ssh)
	}
	if !slices.Equal(nodes.GetTargetTags(), []string{g.ProviderID}) {
		t.Errorf("nodes' rule targets %v, want the group's tag %s", nodes.GetTargetTags(), g.ProviderID)
	}

	spec.Sources = []string{"198.51.100.7", "198.51.100.9"}
	if g, err = drv.EnsureGroup(ctx, spec); err != nil {
		t.Fatal(err)
	}
	nodes = rule(g.ProviderID)
	if nodes.GetDisabled() || !slices.Equal(nodes.GetSourceRanges(), []string{"198.51.100.7/32", "198.51.100.9/32"}) {
		t.Errorf("nodes' rule after adding sources: disabled=%v ranges=%v", nodes.GetDisabled(), nodes.GetSourceRanges())
	}
	if !slices.Equal(g.Sources, spec.Sources) {
		t.Errorf("Group.Sources %v, want %v", g.Sources, spec.Sources)
	}
	patches := len(w.rec.Sent("PATCH "))
	if _, err := drv.EnsureGroup(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if n := len(w.rec.Sent("PATCH ")); n != patches {
		t.Errorf("an unchanged group was patched again")
	}

	// A fresh group created with its sources: one insert per rule, no patch.
	other := groupSpec("fw2", "gce-test", "198.51.100.1")
	before, beforePatch := len(w.rec.Sent("POST /compute/v1/projects/"+project+"/global/firewalls?")), len(w.rec.Sent("PATCH "))
	if _, err := drv.EnsureGroup(ctx, other); err != nil {
		t.Fatal(err)
	}
	if ins := len(w.rec.Sent("POST /compute/v1/projects/"+project+"/global/firewalls?")) - before; ins != 2 || len(w.rec.Sent("PATCH ")) != beforePatch {
		t.Errorf("creating a group with sources took %d inserts and %d patches, want 2 and 0", ins, len(w.rec.Sent("PATCH "))-beforePatch)
	}
	for _, gr := range []provider.Group{g, {ProviderID: ruleName(other.Name), Name: other.Name}} {
		if err := drv.DeleteGroup(ctx, gr); err != nil {
			t.Fatal(err)
		}
		if err := drv.DeleteGroup(ctx, gr); err != nil {
			t.Errorf("deleting a deleted group: %v", err)
		}
	}
	if r := w.srv.Resources(); len(r) != 0 {
		t.Errorf("left behind: %v", r)
	}
}

// A create whose answer is lost, given up by the client, is found by the
// next run's Launch of the same node: never a second machine.
func TestLaunchFindsTheMachineALostCreateMade(t *testing.T) {
	w := newWorld(t)
	ctx := t.Context()
	once := fast()
	once.RetryMaxAttempts = 1
	drv := w.driver(w.district(), w.credential(), once)
	g, err := drv.EnsureGroup(ctx, groupSpec("lost", "gce-test"))
	if err != nil {
		t.Fatal(err)
	}
	w.sim.Faults.Add(cloudsim.Fault{Op: cloudsim.OpLaunch, Kind: cloudsim.FaultLost})
	spec := launchSpec("lost", "gce-test", "lost-1", "", g.ProviderID, newKey(t))
	if _, err := drv.Launch(ctx, spec); err == nil {
		t.Fatal("Launch whose only answer was lost succeeded")
	}
	next := w.driver(w.district(), w.credential(), fast())
	inst, err := next.Launch(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	insts, _, err := next.List(ctx, "lost")
	if err != nil {
		t.Fatal(err)
	}
	if len(insts) != 1 || insts[0].ProviderID != inst.ProviderID {
		t.Errorf("after a lost create and a second Launch the cloud holds %v, want only %s", insts, inst.ProviderID)
	}
	if len(inst.HostKeys) == 0 {
		t.Errorf("no host keys from the guest attributes")
	}
}

// An aggregated list that could not reach a zone of the district's region
// is an error, never a listing without that zone's machines (they would
// look gone); a zone of another region is not the district's concern.
func TestUnreachableZoneFailsTheListing(t *testing.T) {
	w := newWorld(t)
	ctx := t.Context()
	drv := w.driver(w.district(), w.credential(), fast())
	labels, err := encodeLabels(map[string]string{districts.TagCluster: "unr"})
	if err != nil {
		t.Fatal(err)
	}
	id, err := w.srv.Plant(ctx, project, zones[0], labels)
	if err != nil {
		t.Fatal(err)
	}
	w.sim.Faults.Add(cloudsim.Fault{Op: cloudsim.OpList, Kind: cloudsim.FaultUnreachable, Reason: zones[0]})
	if _, _, err := drv.List(ctx, "unr"); err == nil || !strings.Contains(err.Error(), "zones/"+zones[0]+" unreachable") {
		t.Errorf("List with %s unreachable: %v, want an error naming it", zones[0], err)
	}
	w.sim.Faults.Add(cloudsim.Fault{Op: cloudsim.OpList, Kind: cloudsim.FaultUnreachable, Reason: "us-central1-a"})
	insts, _, err := drv.List(ctx, "unr")
	if err != nil || len(insts) != 1 || insts[0].ProviderID != id {
		t.Errorf("List with another region's zone unreachable = %v, %v; want %s", insts, err, id)
	}
	if inst, err := drv.Describe(ctx, provider.Instance{ProviderID: id}); err != nil || inst.ProviderID != id {
		t.Errorf("Describe %s = %v, %v", id, inst, err)
	}
}

// Terminate looks before it deletes: a machine without transit's cluster
// label is refused, and a machine being deleted slowly is reported
// terminating at once.
func TestTerminate(t *testing.T) {
	w := newWorld(t)
	ctx := t.Context()
	drv := w.driver(w.district(), w.credential(), fast())
	foreign, err := w.srv.Plant(ctx, project, zones[0], map[string]string{"team": "other"})
	if err != nil {
		t.Fatal(err)
	}
	if err := drv.Terminate(ctx, provider.Instance{ProviderID: foreign, Tags: map[string]string{districts.TagCluster: "c"}}); err == nil {
		t.Errorf("Terminate deleted %s, which has no transit label", foreign)
	}
	w.srv.SetLatency(cloudsim.Latency{Terminate: time.Hour})
	g, err := drv.EnsureGroup(ctx, groupSpec("c", "gce-test"))
	if err != nil {
		t.Fatal(err)
	}
	inst, err := drv.Launch(ctx, launchSpec("c", "gce-test", "c-1", zones[1], g.ProviderID, newKey(t)))
	if err != nil {
		t.Fatal(err)
	}
	if inst.Zone != zones[1] {
		t.Errorf("Node.Zone %s: launched in %s", zones[1], inst.Zone)
	}
	// The delete operation takes an hour: a Terminate that waited for it
	// would run into the deadline.
	tctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := drv.Terminate(tctx, inst); err != nil {
		t.Fatalf("Terminate while the delete operation runs: %v (does Terminate wait for the operation? It must not)", err)
	}
	insts, _, err := drv.List(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	if len(insts) != 1 || insts[0].State != provider.InstanceTerminating {
		t.Errorf("right after Terminate: %+v, want the instance terminating", insts)
	}
}

// Configuration Compute Engine refuses names the district key.
func TestInvalidConfiguration(t *testing.T) {
	w := newWorld(t)
	ctx := t.Context()
	for _, tc := range []struct {
		key string
		mod func(*districts.District)
		mt  string
	}{
		{"gce_image_family", func(d *districts.District) { d.GCEImageFamily = "no-such-family" }, "e2-small"},
		{"gce_image", func(d *districts.District) { d.GCEImage = "no-such-image" }, "e2-small"},
		{"gce_network", func(d *districts.District) { d.GCENetwork = "no-such-net" }, "e2-small"},
		{"machine_type", nil, "z9-giant"},
		{"gce_zones", func(d *districts.District) { d.GCEZones = []string{"europe-west1-zz9"} }, "e2-small"},
	} {
		t.Run(tc.key, func(t *testing.T) {
			d := w.district()
			if tc.mod != nil {
				tc.mod(&d)
			}
			drv := w.driver(d, w.credential(), fast())
			spec := launchSpec("bad", "gce-test", "bad-1", "", "transit-bad-gce-test", newKey(t))
			spec.MachineType = tc.mt
			_, err := drv.Launch(ctx, spec)
			if !errors.Is(err, districts.ErrInvalid) || !strings.Contains(err.Error(), tc.key) {
				t.Errorf("err = %v, want districts.ErrInvalid naming %s", err, tc.key)
			}
		})
	}
}

// A group whose sources or ssh_cidrs hold IPv4 and IPv6 ranges is one
// rule per family (Compute Engine refuses a rule that mixes them): the
// IPv6 rules exist only while they have sources, List reports one group
// with every source, and DeleteGroup deletes them all.
func TestFirewallRulesPerFamily(t *testing.T) {
	w := newWorld(t)
	drv := w.driver(w.district(func(d *districts.District) { d.SSHCIDRs = []string{"203.0.113.0/24", "2001:db8:ff::/48"} }), w.credential(), fast())
	ctx := t.Context()
	spec := groupSpec("fam", "gce-test", "198.51.100.7", "198.51.100.9", "2001:db8::7", "2001:db8::9")
	g, err := drv.EnsureGroup(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(spec.Sources, g.Sources); d != "" {
		t.Errorf("Group.Sources (-want +got):\n%s", d)
	}
	ranges := func() map[string][]string {
		t.Helper()
		out := map[string][]string{}
		for fw, err := range drv.firewalls.List(ctx, &computepb.ListFirewallsRequest{Project: project}).All() {
			if err != nil {
				t.Fatal(err)
			}
			if !fw.GetDisabled() {
				out[fw.GetName()] = fw.GetSourceRanges()
			}
		}
		return out
	}
	base := g.ProviderID
	want := map[string][]string{
		base:          {"198.51.100.7/32", "198.51.100.9/32"},
		base + "-6":   {"2001:db8::7/128", "2001:db8::9/128"},
		base + "-ssh": {"203.0.113.0/24"}, base + "-ssh6": {"2001:db8:ff::/48"},
	}
	if d := cmp.Diff(want, ranges()); d != "" {
		t.Errorf("rules and their source ranges (-want +got):\n%s", d)
	}
	_, groups, err := drv.List(ctx, "fam")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]provider.Group{g}, groups); d != "" {
		t.Errorf("List's groups (-want +got):\n%s", d)
	}
	writes := len(w.rec.Sent("PATCH ")) + len(w.rec.Sent("POST ")) + len(w.rec.Sent("DELETE "))
	if _, err := drv.EnsureGroup(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if n := len(w.rec.Sent("PATCH ")) + len(w.rec.Sent("POST ")) + len(w.rec.Sent("DELETE ")); n != writes {
		t.Errorf("an unchanged group took %d writes", n-writes)
	}

	spec.Sources = []string{"198.51.100.7"}
	if g, err = drv.EnsureGroup(ctx, spec); err != nil {
		t.Fatal(err)
	}
	delete(want, base+"-6")
	want[base] = []string{"198.51.100.7/32"}
	if d := cmp.Diff(want, ranges()); d != "" {
		t.Errorf("after the IPv6 nodes left (-want +got):\n%s", d)
	}
	if !slices.Equal(g.Sources, spec.Sources) {
		t.Errorf("Group.Sources %v, want %v", g.Sources, spec.Sources)
	}
	if err := drv.DeleteGroup(ctx, g); err != nil {
		t.Fatal(err)
	}
	if r := w.srv.Resources(); len(r) != 0 {
		t.Errorf("left behind: %v", r)
	}
}
