package control

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cloudtransit/transit/clock/clocktest"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// Table tests of observation's steps, called directly.

func inst(id, node, role string, state provider.InstanceState, created time.Time) provider.Instance {
	return provider.Instance{ProviderID: id, State: state, CreatedAt: created,
		PublicIP: "198.51.100." + id[len(id)-1:], PrivateIP: "10.0.0." + id[len(id)-1:],
		Tags: map[string]string{districts.TagCluster: "paper", districts.TagLineage: "l1", districts.TagNode: node,
			districts.TagRole: role, districts.TagFlavor: "small", districts.TagDistrict: gce}}
}

func TestLineageOf(t *testing.T) {
	t.Parallel()
	tagged := func(lineage string) listing {
		in := inst("i-1", "paper-worker-1", "worker", provider.InstanceRunning, planNow)
		in.Tags[districts.TagLineage] = lineage
		return listing{instances: []provider.Instance{in}}
	}
	tests := []struct {
		name     string
		state    districts.Resources
		listings []listing
		want     string
		wantErr  string
	}{
		{"the state says", districts.Resources{Lineage: "mine"}, []listing{tagged("other")}, "mine", ""},
		{"a new cluster has none", districts.Resources{}, []listing{{}}, "", ""},
		{"a lost state adopts the clouds' only one", districts.Resources{}, []listing{tagged("l1"), {}}, "l1", ""},
		{"two lineages cannot be told apart", districts.Resources{}, []listing{tagged("l1"), tagged("l2")}, "", "2 lineages: l1 (1 resources), l2 (1 resources)"},
	}
	for _, tt := range tests {
		got, err := lineageOf("paper", tt.state, tt.listings)
		switch {
		case tt.wantErr != "" && (!errors.Is(err, ErrForeign) || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%s: err = %v, want ErrForeign with %q", tt.name, err, tt.wantErr)
		case tt.wantErr == "" && (err != nil || got != tt.want):
			t.Errorf("%s: %q, %v; want %q", tt.name, got, err, tt.want)
		}
	}
}

// holdClaims gives a node id to one machine, never by listing order.
func TestHoldClaims(t *testing.T) {
	t.Parallel()
	node := func(id, pid string, created time.Time) districts.Node {
		return districts.Node{ID: id, ProviderID: pid, CreatedAt: created}
	}
	older, newer := planNow.Add(-time.Hour), planNow
	tests := []struct {
		name   string
		claims []claim
		want   map[string]string // provider id → node id (copies: "copy of X")
	}{
		{"one claim each", []claim{{node: node("a", "i-1", newer)}, {node: node("b", "i-2", older)}},
			map[string]string{"i-1": "a", "i-2": "b"}},
		{"resources.json's machine holds, listed last and newer", []claim{{node: node("a", "i-0", older)}, {node: node("a", "i-9", newer), saved: true}},
			map[string]string{"i-0": "copy of a", "i-9": "a"}},
		{"else the oldest, whatever the order", []claim{{node: node("a", "i-9", newer)}, {node: node("a", "i-0", older)}},
			map[string]string{"i-0": "a", "i-9": "copy of a"}},
		{"a copy stays a copy by the id it claims", []claim{{node: districts.Node{ID: "i-5", ProviderID: "i-5", CopyOf: "a", CreatedAt: older}}, {node: node("a", "i-6", newer), saved: true}},
			map[string]string{"i-5": "copy of a", "i-6": "a"}},
	}
	for _, tt := range tests {
		got := map[string]string{}
		for _, n := range holdClaims(tt.claims) {
			got[n.ProviderID] = n.ID
			if n.CopyOf != "" {
				got[n.ProviderID] = "copy of " + n.CopyOf
				if n.ID != n.ProviderID {
					t.Errorf("%s: copy %s tracked as %s, want its provider id", tt.name, n.ProviderID, n.ID)
				}
			}
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.name, diff)
		}
	}
}

// identify gives the node id to the machine the platform knows the member
// by, when exactly one claimant matches.
func TestIdentify(t *testing.T) {
	t.Parallel()
	held := districts.Node{ID: "paper-master-1", ProviderID: "i-1", PublicIP: "198.51.100.1", PrivateIP: "10.0.0.1", Phase: districts.PhaseLaunched}
	cp := districts.Node{ID: "i-2", CopyOf: "paper-master-1", ProviderID: "i-2", PublicIP: "198.51.100.2", PrivateIP: "10.0.0.2", Phase: districts.PhaseLaunched}
	tests := []struct {
		name   string
		member provider.Member
		want   string // the provider id holding paper-master-1
	}{
		{"the platform knows the held one", provider.Member{NodeID: "paper-master-1", Addresses: []string{"10.0.0.1"}}, "i-1"},
		{"the platform knows the copy by address", provider.Member{NodeID: "paper-master-1", Addresses: []string{"10.0.0.2"}}, "i-2"},
		{"the platform knows the copy by provider id", provider.Member{NodeID: "paper-master-1", ProviderID: "gce://p/europe-west1-b/i-2"}, "i-2"},
		{"both match: nothing is known", provider.Member{NodeID: "paper-master-1", Addresses: []string{"10.0.0.1", "10.0.0.2"}}, "i-1"},
		{"none matches: nothing is known", provider.Member{NodeID: "paper-master-1", Addresses: []string{"10.7.7.7"}}, "i-1"},
	}
	for _, tt := range tests {
		w := world{state: districts.Resources{Nodes: []districts.Node{held, cp}}, members: map[string]provider.Member{"paper-master-1": tt.member}}
		identify(&w)
		got := ""
		for _, n := range w.state.Nodes {
			switch {
			case n.ID == "paper-master-1" && n.CopyOf == "":
				got = n.ProviderID
			case n.CopyOf != "paper-master-1" || n.ID != n.ProviderID:
				t.Errorf("%s: %s is %s, copy of %q", tt.name, n.ProviderID, n.ID, n.CopyOf)
			}
		}
		if got != tt.want {
			t.Errorf("%s: paper-master-1 is %s, want %s", tt.name, got, tt.want)
		}
	}
}

// missingFrom: machines this run launched, and every machine resources.json
// has that a listing lacks, unless the cloud said it is gone, must be
// listed.
func TestMissingFrom(t *testing.T) {
	t.Parallel()
	st := districts.Resources{Cluster: "paper", Lineage: "l1", Nodes: []districts.Node{
		{ID: "paper-master-1", District: gce, ProviderID: "i-1", Phase: joined},
		{ID: "paper-worker-1", District: gce, ProviderID: "i-2", Phase: joined},
		{ID: "paper-worker-2", District: aws, ProviderID: "i-3", Phase: joined},
		{ID: "paper-worker-3", District: aws, ProviderID: "i-4", Phase: districts.PhaseTerminating},
	}}
	ds := simDistricts[:2] // aws, gce
	listed := func(ids ...string) listing {
		var l listing
		for _, id := range ids {
			l.instances = append(l.instances, inst(id, "", "worker", provider.InstanceRunning, planNow))
		}
		return l
	}
	otherLineage := func(id string) listing {
		l := listed(id)
		l.instances[0].Tags[districts.TagLineage] = "l2"
		return l
	}
	tests := []struct {
		name     string
		aws, gce listing
		launched map[string]string
		gone     map[string]bool
		unsure   map[string]string
		want     []string
	}{
		{"everything listed", listed("i-3"), listed("i-1", "i-2"), nil, nil, nil, nil},
		{"a machine the cloud says is gone: forgotten", listed("i-3"), listed("i-1"), nil, map[string]bool{gce + "\x00i-2": true}, nil, nil},
		{"a machine a listing lacks, the cloud unsure: missing", listed("i-3"), listed("i-1"), nil, nil, map[string]string{gce + "\x00i-2": "asked directly, the cloud did not answer: timeout"},
			[]string{"paper-worker-1 (i-2) in gce-europe: the district's listing lacks it; asked directly, the cloud did not answer: timeout"}},
		{"a district's listing dropped every machine", listed(), listed("i-1", "i-2"), nil, nil,
			map[string]string{aws + "\x00i-3": "the listing lacks every machine the district had"},
			[]string{"paper-worker-2 (i-3) in aws-europe: the district's listing lacks it; the listing lacks every machine the district had"}},
		{"a listing shows it with another lineage's tags (never asked about)", otherLineage("i-3"), listed("i-1", "i-2"), nil, nil, nil,
			[]string{"paper-worker-2 (i-3) in aws-europe: the district's listing lacks it; its listing shows it without this cluster's tags"}},
		{"a terminating machine may vanish", listed("i-3"), listed("i-1", "i-2"), nil, nil, nil, nil},
		{"a machine this run launched must show", listed("i-3"), listed("i-1"), map[string]string{"i-2": gce}, map[string]bool{gce + "\x00i-2": true}, nil,
			[]string{"paper-worker-1 (i-2) in gce-europe: this run launched it"}},
	}
	for _, tt := range tests {
		var got []string
		for _, m := range missingFrom(st, tt.launched, []listing{tt.aws, tt.gce}, ds, tt.gone, tt.unsure) {
			got = append(got, m.String())
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.name, diff)
		}
	}
}

// merge takes each machine's phase from what the cloud says now, and
// clamps times a clock that ran ahead wrote.
func TestMerge(t *testing.T) {
	t.Parallel()
	ahead := planNow.AddDate(1, 0, 0)
	st := districts.Resources{Cluster: "paper", Lineage: "l1", PlatformFormedAt: ahead,
		Failures: map[string]districts.Failure{"gce-europe/small/worker": {Count: 3, LastAt: ahead}},
		Nodes: []districts.Node{
			{ID: "paper-master-1", District: gce, ProviderID: "i-1", Phase: joined, NotReadySince: ahead},
			{ID: "paper-worker-1", District: gce, ProviderID: "i-2", Phase: districts.PhaseTerminating},
			{ID: "paper-worker-2", District: gce, ProviderID: "i-3", Phase: joined},
			{ID: "paper-worker-3", District: gce, ProviderID: "i-4", Phase: districts.PhaseLaunched, StartingSince: ahead},
		}}
	pending := inst("i-4", "paper-worker-3", "worker", provider.InstancePending, planNow)
	pending.PublicIP, pending.PrivateIP = "", ""
	l := listing{instances: []provider.Instance{
		inst("i-1", "paper-master-1", "master", provider.InstanceRunning, planNow),
		inst("i-2", "paper-worker-1", "worker", provider.InstanceRunning, planNow), // terminated by transit, alive
		inst("i-3", "paper-worker-2", "worker", provider.InstanceStopped, planNow),
		pending,
	}}
	opts := Options{Cluster: paperCluster(1, 3, 0), Districts: simDistricts[1:2], State: st, Clock: clocktest.NewFake(planNow)}
	w := merge(opts, "l1", []listing{l})
	if !w.state.PlatformFormedAt.Equal(planNow) || !w.state.Failures["gce-europe/small/worker"].LastAt.Equal(planNow) {
		t.Errorf("times from a clock that ran ahead: formed %v, failure %v; want now", w.state.PlatformFormedAt, w.state.Failures)
	}
	byID := map[string]districts.Node{}
	for _, n := range w.state.Nodes {
		byID[n.ID] = n
	}
	if n := byID["paper-master-1"]; !n.NotReadySince.Equal(planNow) {
		t.Errorf("NotReadySince %v, want clamped to now", n.NotReadySince)
	}
	if n := byID["paper-worker-1"]; n.Phase == districts.PhaseTerminating || !w.reappeared["i-2"] {
		t.Errorf("a machine transit terminated that runs: phase %s, reappeared %v", n.Phase, w.reappeared)
	}
	if n := byID["paper-worker-2"]; n.Machine != "stopped" || n.Phase == districts.PhaseTerminating {
		t.Errorf("a stopped machine: phase %s, machine %q", n.Phase, n.Machine)
	}
	if n := byID["paper-worker-3"]; !w.starting["paper-worker-3"] || !n.StartingSince.Equal(planNow) {
		t.Errorf("a pending machine: starting %v since %v; want since now (clamped)", w.starting["paper-worker-3"], n.StartingSince)
	}
}

// phases: the platform's answer and the cloud's make each node's phase.
func TestPhases(t *testing.T) {
	t.Parallel()
	master := provider.Member{NodeID: "paper-master-1", Role: districts.RoleMaster, Voter: true, Ready: true}
	tests := []struct {
		name    string
		node    districts.Node
		member  *provider.Member
		start   bool
		want    districts.Phase
		failure bool // counted toward the line's backoff
	}{
		{"a ready voter", districts.Node{ID: "paper-master-1", Role: "master"}, &master, false, districts.PhaseJoined, false},
		{"a learner is no ready master", districts.Node{ID: "paper-master-1", Role: "master"},
			&provider.Member{NodeID: "paper-master-1", Role: "master", Ready: true}, false, districts.PhaseNotReady, false},
		{"a member whose machine stopped", districts.Node{ID: "paper-worker-1", Role: "worker", Machine: "stopped"},
			&provider.Member{NodeID: "paper-worker-1", Role: "worker", Ready: true}, false, districts.PhaseStopped, false},
		{"a stopped machine that never joined failed", districts.Node{ID: "paper-worker-1", Role: "worker", Machine: "stopped", Phase: districts.PhaseLaunched},
			nil, false, districts.PhaseFailed, true},
		{"a machine the cloud gave up on failed", districts.Node{ID: "paper-worker-1", Role: "worker", Machine: "failed", Phase: districts.PhaseLaunched},
			nil, false, districts.PhaseFailed, true},
		{"a machine transit terminated that runs again", districts.Node{ID: "paper-worker-1", Role: "worker", ProviderID: "i-again"},
			nil, false, districts.PhaseFailed, false},
		{"a machine starting within the timeout is waited for", districts.Node{ID: "paper-worker-1", Role: "worker", StartingSince: planNow.Add(-time.Minute)},
			nil, true, districts.PhaseLaunched, false},
		{"a machine that did not start in time failed", districts.Node{ID: "paper-worker-1", Role: "worker", StartingSince: planNow.Add(-startTimeout)},
			nil, true, districts.PhaseFailed, true},
		{"a failed machine stays failed", districts.Node{ID: "paper-worker-1", Role: "worker", Phase: districts.PhaseFailed},
			nil, false, districts.PhaseFailed, false},
	}
	for _, tt := range tests {
		n := tt.node
		n.District, n.Flavor = gce, "small"
		w := world{now: planNow, state: districts.Resources{Nodes: []districts.Node{n}}, members: map[string]provider.Member{}, starting: map[string]bool{},
			reappeared: map[string]bool{"i-again": true}}
		if tt.member != nil {
			w.members[n.ID] = *tt.member
		}
		w.starting[n.ID] = tt.start
		phases(&w)
		got := w.state.Nodes[0]
		if got.Phase != tt.want {
			t.Errorf("%s: phase %s, want %s", tt.name, got.Phase, tt.want)
		}
		if counted := w.state.Failures["gce-europe/small/"+n.Role].Count > 0; counted != tt.failure {
			t.Errorf("%s: counted as a failed launch: %v, want %v", tt.name, counted, tt.failure)
		}
	}
}
