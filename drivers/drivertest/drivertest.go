// Package drivertest is the conformance suite every infrastructure driver
// (provider.Infrastructure) passes: groups are idempotent and replace their
// sources, go on the node mesh (its UDP port, with sources or without),
// change its port and leave it, reporting the port in EnsureGroup's group
// and List's, List finds a cluster's groups and instances by tag and
// nothing of other clusters, Launch returns a running, tagged, addressed instance,
// parallel launches spread over the zones, Terminate is asynchronous and
// idempotent and the instance eventually leaves List, DeleteGroup of a
// group on the mesh is idempotent.
//
// Against an emulated cloud (Config.Cloud) it also checks what only the
// cloud's side can set up: List pages through small pages; throttling is
// retried, and throttling that does not stop, refused credentials and an
// exhausted quota are reported as provider.ErrThrottled, ErrCloudAuth and
// ErrQuota, naming the credential or quota and never a secret; a create
// whose answer is lost never leaves two machines for one node; a machine
// planted outside the driver is listed only if it carries the cluster's
// tag, with exactly the tags it has (a crash between create and tag); a
// machine stopped through the cloud's API is listed stopped with its tags
// and private address, started again running with its (maybe new) public
// address, and Terminate deletes it stopped; a machine the cloud gave up
// on is listed as Config.FailedState and Terminate deletes it; a launch
// whose machine fails is an error naming the cloud's reason and leaves no
// machine behind (stopstart.go).
package drivertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/cloudtransit/transit/cloudsim"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// Config describes the district the suite works in.
type Config struct {
	// Cluster is the cluster id everything the suite creates belongs to.
	Cluster string
	// District is the driver's district id.
	District string
	// Flavor and MachineType are what the suite launches (MachineType may
	// be empty where the driver ignores it).
	Flavor      string
	MachineType string
	// Zone is the zone nodes are launched in, if the driver has zones.
	Zone string
	// AuthorizedKey is an SSH public key (authorized_keys format).
	AuthorizedKey string
	// Sources are two different source lists the suite sets on the group
	// in turn (default: two TEST-NET-1 lists).
	Sources [2][]string
	// OtherCluster is a cluster id whose List must show none of Cluster's
	// resources (default Cluster+"-other").
	OtherCluster string
	// SharedDistrict says the driver lets two clusters share a district;
	// the suite then also creates a group of OtherCluster there and checks
	// that each cluster's List sees only its own.
	SharedDistrict bool
	// MissingProviderID is a provider id of no machine, which Terminate
	// must accept; empty skips that check.
	MissingProviderID string
	// CheckSSH, if set, checks that a launched instance accepts
	// AuthorizedKey's private key for root.
	CheckSSH func(t *testing.T, inst provider.Instance)
	// Timeout bounds each wait for an eventual state (an instance leaving
	// List after Terminate); default 2 minutes. It is a bound, not a
	// performance assertion.
	Timeout time.Duration
	// Poll is the interval of those waits; default 200ms.
	Poll time.Duration

	// Cloud is the emulator behind a cloud driver; nil (the local driver)
	// skips the checks only a cloud's side can set up: injected faults,
	// pagination, planted machines.
	Cloud Cloud
	// CredentialID names the credential the driver uses; an auth failure
	// must name it. Secrets are the credential's secret values: no error
	// may contain one.
	CredentialID string
	Secrets      []string
	// Zones are the district's zones; parallel launches without a zone
	// must spread over them (the driver picks when Node.Zone is empty).
	Zones []string
	// FailedState is how the driver lists a machine the cloud gave up on
	// (Cloud.Fail): provider.InstanceFailed where the cloud has such a
	// state (Nova ERROR), else provider.InstanceStopped.
	FailedState provider.InstanceState
	// FailReason is the cloud's reason a failing launch
	// (cloudsim.FaultFailed with this Reason) carries: Launch's error must
	// name it.
	FailReason string
	// StuckLaunch, if set, returns a driver of the district whose launch
	// stops waiting for a machine to run after wait (its LaunchWait):
	// the suite holds a launch pending past it (Cloud.SetLatency) and
	// checks that Launch returns the machine it leaves, for the loop to
	// track.
	StuckLaunch func(t *testing.T) (drv provider.Infrastructure, wait time.Duration)
	// CheckStopped, if set, checks that a machine the cloud stopped is
	// really down: it no longer answers on the address it had. It may
	// wait (bounded) for the cloud to finish stopping it.
	CheckStopped func(t *testing.T, inst provider.Instance)
}

// Cloud is the emulator behind a driver (a cloudsim front end's test
// server), for what only the cloud's side can set up.
type Cloud interface {
	// Faults are the emulator's injectable failures.
	Faults() *cloudsim.Faults
	// Plant creates a machine in the district outside the driver, carrying
	// exactly tags (transit's tags, stored the way the driver stores them),
	// and in no security group; it returns the machine's provider id:
	// another tool's machine, or what a crash between create and tag
	// leaves.
	Plant(ctx context.Context, tags map[string]string) (string, error)
	// Remove deletes a machine outside the driver: what Plant made, or a
	// node someone deleted behind transit's back.
	Remove(ctx context.Context, providerID string) error
	// SetPageSize makes every list answer at most n items per page (0:
	// the provider's default).
	SetPageSize(n int)
	// SetLatency replaces the provider's latencies.
	SetLatency(l cloudsim.Latency)
	// Clock is the emulator's clock, installed before it served anything
	// and running: the suite holds it while a state that lasts a latency
	// must last (a termination in progress), whatever the wall time its
	// steps take, and resumes it when the state must end.
	Clock() *cloudsim.HeldClock
	// Stop and Start stop and start a machine through the cloud's API
	// with its SDK, as someone in the console would (EC2 StopInstances
	// and StartInstances, Compute Engine instances.stop and
	// instances.start, Nova os-stop and os-start), and return once the
	// cloud took the request.
	Stop(ctx context.Context, providerID string) error
	Start(ctx context.Context, providerID string) error
	// Fail makes a running machine end as the cloud leaves one it gave
	// up on (Nova ERROR with a fault, an EC2 instance stopped for
	// capacity, a Compute Engine instance TERMINATED by a host failure).
	Fail(ctx context.Context, providerID string) error
}

func (c Config) withDefaults() Config {
	if c.OtherCluster == "" {
		c.OtherCluster = c.Cluster + "-other"
	}
	if c.Sources[0] == nil {
		c.Sources[0] = []string{"192.0.2.10", "192.0.2.11"}
	}
	if c.Sources[1] == nil {
		c.Sources[1] = []string{"192.0.2.11", "192.0.2.12", "192.0.2.13"}
	}
	if c.Timeout <= 0 {
		c.Timeout = 2 * time.Minute
	}
	if c.Poll <= 0 {
		c.Poll = 200 * time.Millisecond
	}
	if c.Flavor == "" {
		c.Flavor = "small"
	}
	return c
}

// Run runs the suite against the driver newDriver returns (called once).
// The subtests run in order and build on each other; whatever is left when
// one fails is terminated and deleted at cleanup.
func Run(t *testing.T, newDriver func(t *testing.T) provider.Infrastructure, cfg Config) {
	t.Helper()
	cfg = cfg.withDefaults()
	drv := newDriver(t)
	s := &suite{cfg: cfg, drv: drv}
	t.Cleanup(func() { s.cleanup(t) })

	steps := []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"EnsureGroup", s.ensureGroup},
		{"ListGroups", s.listGroups},
		{"MeshGroup", s.meshGroup},
		{"OtherCluster", s.otherCluster},
		{"Launch", s.launch},
		{"ListInstances", s.listInstances},
		{"ParallelLaunch", s.parallelLaunch},
		{"Planted", s.planted},
		{"Faults", s.faults},
		{"StopStart", s.stopStart},
		{"Failed", s.failed},
		{"Terminate", s.terminate},
		{"DeleteGroup", s.deleteGroup},
	}
	for _, st := range steps {
		if !t.Run(st.name, st.fn) {
			t.Fatalf("%s failed; later steps depend on it", st.name)
		}
	}
}

type suite struct {
	cfg   Config
	drv   provider.Infrastructure
	group provider.Group
	other provider.Group
	inst  provider.Instance

	mu     sync.Mutex
	extras []provider.Instance // launched or planted besides inst, terminated at the end
}

func (s *suite) keep(inst provider.Instance) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.extras = append(s.extras, inst)
}

func (s *suite) spec(cluster string, sources []string) provider.GroupSpec {
	return provider.GroupSpec{
		Name:     provider.GroupName(cluster, s.cfg.District),
		Cluster:  cluster,
		District: s.cfg.District,
		Tags:     map[string]string{districts.TagCluster: cluster, districts.TagDistrict: s.cfg.District},
		Sources:  slices.Sorted(slices.Values(sources)),
	}
}

func (s *suite) ensureGroup(t *testing.T) {
	ctx := t.Context()
	spec := s.spec(s.cfg.Cluster, s.cfg.Sources[0])
	g1, err := s.drv.EnsureGroup(ctx, spec)
	if err != nil {
		t.Fatalf("EnsureGroup: %v", err)
	}
	if g1.ProviderID == "" {
		t.Fatalf("EnsureGroup returned no provider id: %+v", g1)
	}
	if g1.Name != spec.Name {
		t.Errorf("EnsureGroup name = %q, want %q", g1.Name, spec.Name)
	}
	if diff := cmp.Diff(spec.Sources, sorted(g1.Sources)); diff != "" {
		t.Errorf("EnsureGroup sources (-want +got):\n%s", diff)
	}
	g2, err := s.drv.EnsureGroup(ctx, spec)
	if err != nil {
		t.Fatalf("EnsureGroup again: %v", err)
	}
	if g2.ProviderID != g1.ProviderID {
		t.Errorf("EnsureGroup is not idempotent: provider id %q, then %q", g1.ProviderID, g2.ProviderID)
	}
	spec2 := s.spec(s.cfg.Cluster, s.cfg.Sources[1])
	g3, err := s.drv.EnsureGroup(ctx, spec2)
	if err != nil {
		t.Fatalf("EnsureGroup with new sources: %v", err)
	}
	if g3.ProviderID != g1.ProviderID {
		t.Errorf("EnsureGroup with new sources made a new group: %q, then %q", g1.ProviderID, g3.ProviderID)
	}
	if diff := cmp.Diff(spec2.Sources, sorted(g3.Sources)); diff != "" {
		t.Errorf("EnsureGroup did not replace the sources (-want +got):\n%s", diff)
	}
	s.group = g3
}

func (s *suite) listGroups(t *testing.T) {
	_, groups, err := s.drv.List(t.Context(), s.cfg.Cluster)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	g := findGroup(groups, s.group.ProviderID)
	if g == nil {
		t.Fatalf("List does not show group %s: %+v", s.group.ProviderID, groups)
	}
	if g.Name != s.group.Name {
		t.Errorf("listed group name = %q, want %q", g.Name, s.group.Name)
	}
	if diff := cmp.Diff(slices.Sorted(slices.Values(s.cfg.Sources[1])), sorted(g.Sources)); diff != "" {
		t.Errorf("listed group sources (-want +got):\n%s", diff)
	}
}

// meshGroup puts the group on the node mesh and takes it off again: each
// EnsureGroup keeps the group's provider id and reports the spec's
// sources and mesh port, and so does List — on the mesh without sources
// (what the control loop asks), twice (idempotent), on another port,
// with sources and the port together, and back to Sources[1] without a
// port, where the later steps want the group.
func (s *suite) meshGroup(t *testing.T) {
	ctx := t.Context()
	for _, step := range []struct {
		sources []string
		port    int
	}{
		{nil, MeshPort},
		{nil, MeshPort},
		{nil, OtherMeshPort},
		{s.cfg.Sources[0], MeshPort},
		{s.cfg.Sources[1], 0},
	} {
		spec := s.spec(s.cfg.Cluster, step.sources)
		spec.MeshPort = step.port
		g, err := s.drv.EnsureGroup(ctx, spec)
		if err != nil {
			t.Fatalf("EnsureGroup with %d sources and mesh port %d: %v", len(step.sources), step.port, err)
		}
		if g.ProviderID != s.group.ProviderID {
			t.Errorf("EnsureGroup with mesh port %d made a new group: %q, then %q", step.port, s.group.ProviderID, g.ProviderID)
		}
		_, groups, err := s.drv.List(ctx, s.cfg.Cluster)
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		listed := findGroup(groups, s.group.ProviderID)
		if listed == nil {
			t.Fatalf("List does not show group %s on the mesh: %+v", s.group.ProviderID, groups)
		}
		for what, got := range map[string]provider.Group{"EnsureGroup": g, "List": *listed} {
			if got.MeshPort != step.port {
				t.Errorf("%s with %d sources and mesh port %d reports mesh port %d", what, len(step.sources), step.port, got.MeshPort)
			}
			if diff := cmp.Diff(spec.Sources, sorted(got.Sources), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s with mesh port %d: sources (-want +got):\n%s", what, step.port, diff)
			}
		}
		s.group = g
	}
}

func (s *suite) otherCluster(t *testing.T) {
	ctx := t.Context()
	if s.cfg.SharedDistrict {
		o, err := s.drv.EnsureGroup(ctx, s.spec(s.cfg.OtherCluster, s.cfg.Sources[0]))
		if err != nil {
			t.Fatalf("EnsureGroup for %s: %v", s.cfg.OtherCluster, err)
		}
		s.other = o
		_, groups, err := s.drv.List(ctx, s.cfg.Cluster)
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		if findGroup(groups, o.ProviderID) != nil {
			t.Errorf("List(%s) shows %s's group %s", s.cfg.Cluster, s.cfg.OtherCluster, o.ProviderID)
		}
	}
	insts, groups, err := s.drv.List(ctx, s.cfg.OtherCluster)
	if err != nil {
		t.Fatalf("List(%s): %v", s.cfg.OtherCluster, err)
	}
	if findGroup(groups, s.group.ProviderID) != nil {
		t.Errorf("List(%s) shows %s's group %s", s.cfg.OtherCluster, s.cfg.Cluster, s.group.ProviderID)
	}
	for _, i := range insts {
		if i.Tags[districts.TagCluster] != s.cfg.OtherCluster {
			t.Errorf("List(%s) shows an instance of cluster %q: %+v", s.cfg.OtherCluster, i.Tags[districts.TagCluster], i)
		}
	}
	if s.cfg.SharedDistrict {
		if findGroup(groups, s.other.ProviderID) == nil {
			t.Errorf("List(%s) does not show its own group %s", s.cfg.OtherCluster, s.other.ProviderID)
		}
		if err := s.drv.DeleteGroup(ctx, s.other); err != nil {
			t.Fatalf("DeleteGroup(%s): %v", s.other.ProviderID, err)
		}
		s.other = provider.Group{}
	}
}

func (s *suite) node() districts.Node { return s.nodeN(1, s.cfg.Zone) }

func (s *suite) nodeN(i int, zone string) districts.Node {
	return districts.Node{
		ID:       fmt.Sprintf("%s-n%d", s.cfg.Cluster, i),
		Cluster:  s.cfg.Cluster,
		District: s.cfg.District,
		Role:     districts.RoleWorker,
		Flavor:   s.cfg.Flavor,
		Zone:     zone,
	}
}

func (s *suite) wantTags() map[string]string { return s.tagsOf(s.node()) }

// tagsOf are a node's identity tags and a user tag whose value no cloud
// takes as it is (GCE labels: capitals, spaces, dots).
func (s *suite) tagsOf(n districts.Node) map[string]string {
	tags := provider.IdentityTags(n, "")
	tags["team"] = "conformance"
	tags["policy"] = "Safe-Harbour v1.2"
	return tags
}

func (s *suite) launchSpec(n districts.Node) provider.LaunchSpec {
	return provider.LaunchSpec{
		Node:          n,
		MachineType:   s.cfg.MachineType,
		GroupID:       s.group.ProviderID,
		Tags:          s.tagsOf(n),
		AuthorizedKey: s.cfg.AuthorizedKey,
	}
}

func (s *suite) launch(t *testing.T) {
	inst, err := s.drv.Launch(t.Context(), s.launchSpec(s.node()))
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	s.inst = inst
	if inst.ProviderID == "" {
		t.Errorf("Launch returned no provider id: %+v", inst)
	}
	if inst.State != provider.InstanceRunning {
		t.Errorf("Launch returned state %q, want %q", inst.State, provider.InstanceRunning)
	}
	if diff := cmp.Diff(s.wantTags(), inst.Tags); diff != "" {
		t.Errorf("Launch tags (-want +got):\n%s", diff)
	}
	if inst.PublicIP == "" && inst.PrivateIP == "" {
		t.Errorf("Launch returned no address: %+v", inst)
	}
	if inst.CreatedAt.IsZero() {
		t.Errorf("Launch returned no creation time: %+v", inst)
	}
	if s.cfg.CheckSSH != nil {
		s.cfg.CheckSSH(t, inst)
	}
}

func (s *suite) listInstances(t *testing.T) {
	insts, _, err := s.drv.List(t.Context(), s.cfg.Cluster)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	got := findInstance(insts, s.inst.ProviderID)
	if got == nil {
		t.Fatalf("List does not show instance %s: %+v", s.inst.ProviderID, insts)
	}
	if got.State != provider.InstanceRunning {
		t.Errorf("listed state = %q, want %q", got.State, provider.InstanceRunning)
	}
	if diff := cmp.Diff(s.wantTags(), got.Tags); diff != "" {
		t.Errorf("listed tags (-want +got):\n%s", diff)
	}
	if got.PublicIP != s.inst.PublicIP || got.PrivateIP != s.inst.PrivateIP {
		t.Errorf("listed addresses %s/%s, launch said %s/%s", got.PublicIP, got.PrivateIP, s.inst.PublicIP, s.inst.PrivateIP)
	}
	// Asked by id, the cloud says the same, tags or not.
	byID, err := s.drv.Describe(t.Context(), provider.Instance{ProviderID: s.inst.ProviderID, Zone: s.inst.Zone})
	if err != nil {
		t.Fatalf("Describe %s: %v", s.inst.ProviderID, err)
	}
	if byID.ProviderID != s.inst.ProviderID || byID.State != provider.InstanceRunning || byID.PublicIP != s.inst.PublicIP || byID.PrivateIP != s.inst.PrivateIP {
		t.Errorf("Describe = %s %s %s/%s; List said %s running %s/%s", byID.ProviderID, byID.State, byID.PublicIP, byID.PrivateIP, s.inst.ProviderID, s.inst.PublicIP, s.inst.PrivateIP)
	}
	if diff := cmp.Diff(s.wantTags(), byID.Tags); diff != "" {
		t.Errorf("described tags (-want +got):\n%s", diff)
	}
	others, _, err := s.drv.List(t.Context(), s.cfg.OtherCluster)
	if err != nil {
		t.Fatalf("List(%s): %v", s.cfg.OtherCluster, err)
	}
	if findInstance(others, s.inst.ProviderID) != nil {
		t.Errorf("List(%s) shows %s's instance %s", s.cfg.OtherCluster, s.cfg.Cluster, s.inst.ProviderID)
	}
}

func (s *suite) terminate(t *testing.T) {
	ctx := t.Context()
	if s.cfg.Cloud != nil {
		s.terminateHeld(t)
	} else {
		if err := s.drv.Terminate(ctx, s.inst); err != nil {
			t.Fatalf("Terminate: %v", err)
		}
		if err := s.drv.Terminate(ctx, s.inst); err != nil {
			t.Fatalf("Terminate again: %v", err)
		}
	}
	s.waitGone(t, s.inst.ProviderID)
	if err := s.drv.Terminate(ctx, s.inst); err != nil {
		t.Errorf("Terminate after the instance is gone: %v", err)
	}
	// Gone is what the loop forgets a machine on: only "not found".
	if _, err := s.drv.Describe(ctx, s.inst); !errors.Is(err, provider.ErrCloudNotFound) {
		t.Errorf("Describe after the instance is gone: %v, want an error matching provider.ErrCloudNotFound", err)
	}
	if s.cfg.MissingProviderID != "" {
		missing := provider.Instance{ProviderID: s.cfg.MissingProviderID, Tags: s.wantTags()}
		if err := s.drv.Terminate(ctx, missing); err != nil {
			t.Errorf("Terminate of a missing instance: %v", err)
		}
		if _, err := s.drv.Describe(ctx, missing); !errors.Is(err, provider.ErrCloudNotFound) {
			t.Errorf("Describe of a missing instance: %v, want an error matching provider.ErrCloudNotFound", err)
		}
	}
	s.inst = provider.Instance{}
	s.terminateExtras(t)
}

// terminateHeld terminates the instance while the cloud's clock stands
// still, so that its termination (2s) cannot end however long the steps
// take: Terminate returns without waiting for it, List shows the machine
// terminating (not gone, not running), and Terminate of a terminating
// machine is fine. Then the clock runs on, past the termination.
func (s *suite) terminateHeld(t *testing.T) {
	ctx := t.Context()
	s.cfg.Cloud.SetLatency(cloudsim.Latency{Terminate: 2 * time.Second})
	defer s.cfg.Cloud.SetLatency(cloudsim.Latency{})
	clock := s.cfg.Cloud.Clock()
	clock.Hold()
	defer clock.Resume(2 * time.Second)
	// A driver that waits for the termination waits until the deadline.
	tctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	if err := s.drv.Terminate(tctx, s.inst); err != nil {
		t.Fatalf("Terminate while the cloud terminates the instance: %v (Terminate must not wait for the cloud to finish)", err)
	}
	insts, _, err := s.drv.List(ctx, s.cfg.Cluster)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	switch got := findInstance(insts, s.inst.ProviderID); {
	case got == nil:
		t.Errorf("instance %s is not listed while the cloud still terminates it: List must show it terminating", s.inst.ProviderID)
	case got.State != provider.InstanceTerminating:
		t.Errorf("instance %s is %q right after Terminate, want %q", s.inst.ProviderID, got.State, provider.InstanceTerminating)
	}
	if err := s.drv.Terminate(tctx, s.inst); err != nil {
		t.Fatalf("Terminate again while the cloud terminates the instance: %v", err)
	}
}

// terminateExtras terminates the other machines the suite made and waits
// until they are gone, so the group is empty when it is deleted.
func (s *suite) terminateExtras(t *testing.T) {
	s.mu.Lock()
	extras := s.extras
	s.extras = nil
	s.mu.Unlock()
	for _, inst := range extras {
		if err := s.drv.Terminate(t.Context(), inst); err != nil {
			t.Errorf("Terminate %s: %v", inst.ProviderID, err)
		}
	}
	for _, inst := range extras {
		if inst.Tags[districts.TagCluster] == s.cfg.Cluster {
			s.waitGone(t, inst.ProviderID)
		}
	}
}

// waitGone polls List until the instance is no longer listed. While it is,
// it must be terminating.
func (s *suite) waitGone(t *testing.T, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), s.cfg.Timeout)
	defer cancel()
	for {
		insts, _, err := s.drv.List(ctx, s.cfg.Cluster)
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		got := findInstance(insts, id)
		if got == nil {
			return
		}
		if got.State != provider.InstanceTerminating {
			t.Errorf("instance %s is %q after Terminate, want %q", id, got.State, provider.InstanceTerminating)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("instance %s still listed %s after Terminate", id, s.cfg.Timeout)
		case <-time.After(s.cfg.Poll):
		}
	}
}

// deleteGroup deletes the group on the node mesh (with the mesh's port
// and sources: every rule the group can have), twice.
func (s *suite) deleteGroup(t *testing.T) {
	ctx := t.Context()
	spec := s.spec(s.cfg.Cluster, s.cfg.Sources[1])
	spec.MeshPort = MeshPort
	if _, err := s.drv.EnsureGroup(ctx, spec); err != nil {
		t.Fatalf("EnsureGroup on the mesh: %v", err)
	}
	if err := s.drv.DeleteGroup(ctx, s.group); err != nil {
		t.Fatalf("DeleteGroup: %v", err)
	}
	_, groups, err := s.drv.List(ctx, s.cfg.Cluster)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if findGroup(groups, s.group.ProviderID) != nil {
		t.Errorf("List still shows deleted group %s", s.group.ProviderID)
	}
	if err := s.drv.DeleteGroup(ctx, s.group); err != nil {
		t.Errorf("DeleteGroup again: %v", err)
	}
	s.group = provider.Group{}
}

// cleanup removes what a failed step left behind.
func (s *suite) cleanup(t *testing.T) {
	ctx := context.WithoutCancel(t.Context())
	var errs []string
	for _, inst := range append(s.extras, s.inst) {
		if inst.ProviderID == "" {
			continue
		}
		if err := s.drv.Terminate(ctx, inst); err != nil {
			errs = append(errs, err.Error())
		}
	}
	for _, g := range []provider.Group{s.other, s.group} {
		if g.ProviderID != "" {
			if err := s.drv.DeleteGroup(ctx, g); err != nil {
				errs = append(errs, err.Error())
			}
		}
	}
	if len(errs) > 0 {
		t.Errorf("drivertest cleanup: %s", strings.Join(errs, "; "))
	}
}

func findGroup(gs []provider.Group, id string) *provider.Group {
	for i := range gs {
		if gs[i].ProviderID == id {
			return &gs[i]
		}
	}
	return nil
}

func findInstance(is []provider.Instance, id string) *provider.Instance {
	for i := range is {
		if is[i].ProviderID == id {
			return &is[i]
		}
	}
	return nil
}

func sorted(xs []string) []string { return slices.Sorted(slices.Values(xs)) }
