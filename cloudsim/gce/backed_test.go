package gce

import (
	"context"
	"net/http/httptest"
	"strings"
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
	return cloudsim.Machine{ID: region + "/" + name, Address: "198.18.0.7", PrivateAddress: "10.241.2.7"}, nil
}

func (b *rulesBacker) Stop(context.Context, string, string) error { return nil }

func (b *rulesBacker) PowerOff(context.Context, string, string, bool) error { return nil }

func (b *rulesBacker) PowerOn(_ context.Context, region, id string) (cloudsim.Machine, error) {
	return cloudsim.Machine{ID: id, Address: "198.18.0.8", PrivateAddress: "10.241.2.7"}, nil
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

// TestBackedRules: every backed region is handed the enabled firewalls'
// IPv4 rules: each allowed protocol (all, tcp and udp with each port or
// range, or every port, icmp) from each source range (a bare address is
// a /32; none is every address, as Compute Engine reads it); disabled
// firewalls, IPv6 ranges and protocols the backing does not filter are
// left out. A patch that disables a firewall takes its rules away.
// Ports on a protocol without ports, and ports that are no ports, are
// refused.
func TestBackedRules(t *testing.T) {
	sim := cloudsim.New(cloudsim.Profile{Name: cloudsim.ProfileZero})
	b := &rulesBacker{}
	sim.Backer = b
	s := New(sim, Options{})
	ts := httptest.NewServer(s)
	t.Cleanup(func() { ts.Close(); s.Close() })
	api := ts.URL + "/compute/v1/projects/transit-test-1/"

	for _, zone := range []string{"europe-west1-b", "us-central1-a"} {
		if code, op := do(t, "POST", api+"zones/"+zone+"/instances", strings.ReplaceAll(instanceBody, "europe-west1-b", zone)); code != 200 {
			t.Fatalf("insert in %s: %d %v", zone, code, op)
		}
	}
	insert := func(body string) {
		t.Helper()
		code, op := do(t, "POST", api+"global/firewalls", body)
		if code != 200 {
			t.Fatalf("insert %s: %d %v", body, code, op)
		}
		do(t, "POST", api+"global/operations/"+op["name"].(string)+"/wait", "")
	}
	for _, fw := range []string{
		`{"name":"nodes","allowed":[{"IPProtocol":"all"}],"sourceRanges":["192.0.2.1/32","192.0.2.2"]}`,
		`{"name":"ssh","allowed":[{"IPProtocol":"tcp","ports":["22"]}],"sourceRanges":["0.0.0.0/0"]}`,
		`{"name":"mesh","allowed":[{"IPProtocol":"UDP","ports":["51820"]}],"sourceRanges":["0.0.0.0/0"]}`,
		`{"name":"nodeports","allowed":[{"IPProtocol":"tcp","ports":["30000-32767"]},{"IPProtocol":"udp"}],"sourceRanges":["10.0.0.0/8"]}`,
		`{"name":"ssh-v6","allowed":[{"IPProtocol":"tcp","ports":["22"]}],"sourceRanges":["::/0"]}`,
		`{"name":"off","allowed":[{"IPProtocol":"all"}],"sourceRanges":["203.0.113.0/24"],"disabled":true}`,
		`{"name":"ping","allowed":[{"IPProtocol":"icmp"}]}`,
		`{"name":"esp","allowed":[{"IPProtocol":"esp"}],"sourceRanges":["0.0.0.0/0"]}`,
	} {
		insert(fw)
	}
	want := []string{"icmp from 0.0.0.0/0", "tcp 22 from 0.0.0.0/0", "udp 51820 from 0.0.0.0/0",
		"tcp 30000-32767 from 10.0.0.0/8", "udp from 10.0.0.0/8", "all from 192.0.2.1/32", "all from 192.0.2.2/32"}
	for _, region := range []string{"gce:europe-west1", "gce:us-central1"} {
		b.waitAllowed(t, region, want)
	}

	code, op := do(t, "PATCH", api+"global/firewalls/nodeports", `{"disabled":true}`)
	if code != 200 {
		t.Fatalf("patch: %d %v", code, op)
	}
	do(t, "POST", api+"global/operations/"+op["name"].(string)+"/wait", "")
	b.waitAllowed(t, "gce:europe-west1", []string{"icmp from 0.0.0.0/0", "tcp 22 from 0.0.0.0/0", "udp 51820 from 0.0.0.0/0",
		"all from 192.0.2.1/32", "all from 192.0.2.2/32"})

	for _, bad := range []string{
		`{"name":"bad1","allowed":[{"IPProtocol":"all","ports":["22"]}],"sourceRanges":["0.0.0.0/0"]}`,
		`{"name":"bad2","allowed":[{"IPProtocol":"tcp","ports":["22-x"]}],"sourceRanges":["0.0.0.0/0"]}`,
		`{"name":"bad3","allowed":[{"IPProtocol":"udp","ports":["70000"]}],"sourceRanges":["0.0.0.0/0"]}`,
		`{"name":"bad4","allowed":[{"IPProtocol":"tcp","ports":["9-8"]}],"sourceRanges":["0.0.0.0/0"]}`,
	} {
		if code, out := do(t, "POST", api+"global/firewalls", bad); code != 400 {
			t.Errorf("insert %s: %d %v, want 400", bad, code, out)
		}
	}
}
