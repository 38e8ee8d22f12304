package transit_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudtransit/transit"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/filelock"
	"github.com/cloudtransit/transit/provider"
	"github.com/cloudtransit/transit/provider/demandtest"
)

// fakeCloud is an in-memory cloud shared by every district of a test, and
// by every session the test opens, as a real cloud is. It is harsher than
// a cloud where transit's rules matter:
//
//   - with guard set, every call that changes the cloud fails unless
//     another process or session holds the lock on guard (the state file):
//     nothing changes a cluster without the state lock;
//   - a machine launches only into its district's existing group, with the
//     cluster's SSH key and its identity tags;
//   - termination is asynchronous: a terminated machine is listed as
//     terminating for two more listings, and its group cannot be deleted
//     before it is gone (EC2's DependencyViolation).
type fakeCloud struct {
	guard string // the state file whose lock mutations need; "" checks nothing

	mu        sync.Mutex
	next      int
	instances map[string]map[string]*fakeInstance  // district → provider id → machine
	groups    map[string]map[string]provider.Group // district → name → group
	built     atomic.Int32                         // drivers constructed
	calls     atomic.Int32                         // calls that change the cloud
	keys      map[string]bool                      // the SSH keys machines were launched with
	// onList, when set, runs at the start of every List, as a slow
	// cloud's listing takes its time.
	onList func(ctx context.Context)
}

type fakeInstance struct {
	provider.Instance
	listsLeft int // terminating: listings until it is gone
}

func newFakeCloud(guard string) *fakeCloud {
	return &fakeCloud{guard: guard, instances: map[string]map[string]*fakeInstance{}, groups: map[string]map[string]provider.Group{}}
}

// driver is a transit.InfrastructureFunc for any provider.
func (c *fakeCloud) driver(_ context.Context, d districts.District, _ *districts.Credential) (provider.Infrastructure, error) {
	c.built.Add(1)
	return &fakeInfra{cloud: c, district: d.ID}, nil
}

// count returns how many machines (terminating ones too) and groups the
// cloud holds.
func (c *fakeCloud) count() (instances, groups int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.instances {
		instances += len(m)
	}
	for _, m := range c.groups {
		groups += len(m)
	}
	return instances, groups
}

// authorizedKeys are the SSH keys machines were launched with.
func (c *fakeCloud) authorizedKeys() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Sorted(maps.Keys(c.keys))
}

// vanish deletes node's machine behind transit's back.
func (c *fakeCloud) vanish(node string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.instances {
		for id, in := range m {
			if in.Tags[districts.TagNode] == node {
				delete(m, id)
				return true
			}
		}
	}
	return false
}

// mutate checks that the state lock is held before a call changes the
// cloud.
func (c *fakeCloud) mutate(ctx context.Context, what string) error {
	c.calls.Add(1)
	if c.guard == "" {
		return nil
	}
	l, err := filelock.Acquire(ctx, c.guard, filelock.Options{Command: "fake cloud's check"})
	if errors.Is(err, filelock.ErrLocked) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: check the state lock: %w", what, err)
	}
	return errors.Join(fmt.Errorf("%s while nobody holds the lock of %s", what, c.guard), l.Release())
}

type fakeInfra struct {
	cloud    *fakeCloud
	district string
}

var _ provider.Infrastructure = (*fakeInfra)(nil)

func (f *fakeInfra) List(ctx context.Context, cluster string) ([]provider.Instance, []provider.Group, error) {
	c := f.cloud
	if c.onList != nil {
		c.onList(ctx)
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var insts []provider.Instance
	m := c.instances[f.district]
	for _, id := range slices.Sorted(maps.Keys(m)) {
		in := m[id]
		if in.State == provider.InstanceTerminating {
			if in.listsLeft == 0 {
				delete(m, id)
				continue
			}
			in.listsLeft--
		}
		if in.Tags[districts.TagCluster] == cluster {
			out := in.Instance
			out.Tags = maps.Clone(out.Tags)
			insts = append(insts, out)
		}
	}
	var groups []provider.Group
	for _, name := range slices.Sorted(maps.Keys(c.groups[f.district])) {
		if g := c.groups[f.district][name]; g.Tags[districts.TagCluster] == cluster {
			g.Tags = maps.Clone(g.Tags)
			g.Sources = slices.Clone(g.Sources)
			groups = append(groups, g)
		}
	}
	return insts, groups, nil
}

func (f *fakeInfra) EnsureGroup(ctx context.Context, spec provider.GroupSpec) (provider.Group, error) {
	c := f.cloud
	if err := c.mutate(ctx, "ensure group "+spec.Name); err != nil {
		return provider.Group{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.groups[f.district] == nil {
		c.groups[f.district] = map[string]provider.Group{}
	}
	g, ok := c.groups[f.district][spec.Name]
	if !ok {
		c.next++
		g = provider.Group{ProviderID: fmt.Sprintf("sg-%d", c.next), Name: spec.Name}
	}
	g.Tags = maps.Clone(spec.Tags)
	if g.Tags == nil {
		g.Tags = map[string]string{}
	}
	g.Tags[districts.TagCluster] = spec.Cluster
	g.Sources = slices.Clone(spec.Sources)
	c.groups[f.district][spec.Name] = g
	return g, nil
}

func (f *fakeInfra) DeleteGroup(ctx context.Context, g provider.Group) error {
	c := f.cloud
	if err := c.mutate(ctx, "delete group "+g.Name); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := len(c.instances[f.district]); n > 0 {
		return fmt.Errorf("DependencyViolation: group %s is used by %d machines", g.Name, n)
	}
	for name, have := range c.groups[f.district] {
		if have.ProviderID == g.ProviderID || name == g.Name {
			delete(c.groups[f.district], name)
		}
	}
	return nil
}

func (f *fakeInfra) Launch(ctx context.Context, spec provider.LaunchSpec) (provider.Instance, error) {
	c := f.cloud
	if err := c.mutate(ctx, "launch "+spec.Node.ID); err != nil {
		return provider.Instance{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	inGroup := false
	for _, g := range c.groups[f.district] {
		inGroup = inGroup || g.ProviderID == spec.GroupID
	}
	switch {
	case !inGroup:
		return provider.Instance{}, fmt.Errorf("launch %s: no group %q in district %s", spec.Node.ID, spec.GroupID, f.district)
	case spec.AuthorizedKey == "":
		return provider.Instance{}, fmt.Errorf("launch %s: no SSH key for root", spec.Node.ID)
	case spec.Tags[districts.TagNode] != spec.Node.ID || spec.Tags[districts.TagCluster] != spec.Node.Cluster || spec.Tags[districts.TagLineage] == "":
		return provider.Instance{}, fmt.Errorf("launch %s: identity tags missing: %v", spec.Node.ID, spec.Tags)
	}
	if c.keys == nil {
		c.keys = map[string]bool{}
	}
	c.keys[spec.AuthorizedKey] = true
	c.next++
	in := &fakeInstance{Instance: provider.Instance{
		ProviderID: fmt.Sprintf("i-%d", c.next),
		Tags:       maps.Clone(spec.Tags),
		Zone:       spec.Node.Zone,
		PublicIP:   fmt.Sprintf("203.0.113.%d", c.next),
		PrivateIP:  fmt.Sprintf("10.0.0.%d", c.next),
		State:      provider.InstanceRunning,
		CreatedAt:  time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
	}}
	if c.instances[f.district] == nil {
		c.instances[f.district] = map[string]*fakeInstance{}
	}
	c.instances[f.district][in.ProviderID] = in
	out := in.Instance
	out.Tags = maps.Clone(out.Tags)
	return out, nil
}

func (f *fakeInfra) Terminate(ctx context.Context, in provider.Instance) error {
	c := f.cloud
	if err := c.mutate(ctx, "terminate "+in.ProviderID); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if have, ok := c.instances[f.district][in.ProviderID]; ok && have.State != provider.InstanceTerminating {
		have.State = provider.InstanceTerminating
		have.listsLeft = 2
	}
	return nil
}

func (f *fakeInfra) Describe(_ context.Context, in provider.Instance) (provider.Instance, error) {
	c := f.cloud
	c.mu.Lock()
	defer c.mu.Unlock()
	have, ok := c.instances[f.district][in.ProviderID]
	if !ok {
		return provider.Instance{}, fmt.Errorf("describe %s: %w", in.ProviderID, provider.ErrCloudNotFound)
	}
	out := have.Instance
	out.Tags = maps.Clone(out.Tags)
	return out, nil
}

// fakePlatform is an in-memory container platform that keeps the Platform
// contract: Members says ErrNoPlatform only when no node is a member, a
// platform without a master is unreachable, a node joins only once it is
// installed and a platform exists, and masters vote.
type fakePlatform struct {
	mu        sync.Mutex
	members   map[string]provider.Member
	installed map[string]bool
	built     atomic.Int32
	// onInstall, when set, runs in every Install.
	onInstall func(ctx context.Context, n districts.Node) error
	// workloads are what Demand reports as the platform would: each
	// placed on the first ready member (by id) with room (1000m, 3.75
	// GiB) and the labels it selects, pending when none has; pinned ones
	// run on their node whatever its room.
	workloads []provider.Workload
	pinned    map[string][]provider.Workload
	// onDemand, when set, runs at the start of every Demand.
	onDemand func()
}

func newFakePlatform() *fakePlatform {
	return &fakePlatform{members: map[string]provider.Member{}, installed: map[string]bool{}}
}

// driver is a transit.PlatformFunc for any platform.
func (p *fakePlatform) driver(_ context.Context, _ districts.Cluster, env transit.PlatformEnv) (provider.Platform, error) {
	if env.Key == nil || env.HostKeys == nil {
		return nil, errors.New("no SSH key or host keys to reach the nodes with")
	}
	p.built.Add(1)
	return p, nil
}

var _ provider.Platform = (*fakePlatform)(nil)

func (p *fakePlatform) Install(ctx context.Context, n districts.Node) error {
	if n.PublicIP == "" && n.PrivateIP == "" {
		return fmt.Errorf("install %s: no address to reach it at", n.ID)
	}
	p.mu.Lock()
	hook := p.onInstall
	p.mu.Unlock()
	if hook != nil {
		if err := hook(ctx, n); err != nil {
			return err
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.installed[n.ID] = true
	return nil
}

func (p *fakePlatform) Init(_ context.Context, n districts.Node) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.members) > 0 {
		return fmt.Errorf("init %s: a platform exists already", n.ID)
	}
	return p.add(n)
}

func (p *fakePlatform) Join(_ context.Context, n districts.Node) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.hasMaster() {
		return fmt.Errorf("join %s: no platform to join", n.ID)
	}
	return p.add(n)
}

func (p *fakePlatform) hasMaster() bool {
	for _, m := range p.members {
		if m.Role == districts.RoleMaster {
			return true
		}
	}
	return false
}

// add makes n a ready member; the caller holds p.mu.
func (p *fakePlatform) add(n districts.Node) error {
	if !p.installed[n.ID] {
		return fmt.Errorf("%s: not installed", n.ID)
	}
	m := p.members[n.ID]
	m.NodeID, m.Role, m.Ready, m.Draining = n.ID, n.Role, true, false
	m.Voter = n.Role == districts.RoleMaster
	m.ProviderID = n.ProviderID
	m.Addresses = []string{n.PublicIP}
	p.members[n.ID] = m
	return nil
}

func (p *fakePlatform) Label(_ context.Context, n districts.Node, labels map[string]string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	m, ok := p.members[n.ID]
	if !ok {
		return fmt.Errorf("label %s: not a member", n.ID)
	}
	m.Labels = maps.Clone(labels)
	p.members[n.ID] = m
	return nil
}

func (p *fakePlatform) Drain(_ context.Context, n districts.Node, _ time.Duration) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if m, ok := p.members[n.ID]; ok {
		m.Draining = true
		p.members[n.ID] = m
	}
	return nil
}

func (p *fakePlatform) Uncordon(_ context.Context, n districts.Node) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if m, ok := p.members[n.ID]; ok {
		m.Draining = false
		p.members[n.ID] = m
	}
	return nil
}

func (p *fakePlatform) Remove(_ context.Context, n districts.Node) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.members, n.ID)
	delete(p.installed, n.ID)
	return nil
}

func (p *fakePlatform) Members(_ context.Context, nodes []districts.Node) ([]provider.Member, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var masters []string
	for _, n := range nodes {
		if n.Role == districts.RoleMaster {
			masters = append(masters, n.ID)
		}
	}
	slices.SortFunc(masters, districts.CompareNodeIDs)
	var out []provider.Member
	for _, id := range slices.Sorted(maps.Keys(p.members)) {
		m := p.members[id]
		m.Labels = maps.Clone(m.Labels)
		m.Addresses = slices.Clone(m.Addresses)
		out = append(out, m)
	}
	switch {
	case len(out) == 0:
		return nil, provider.ErrNoPlatform
	case !p.hasMaster():
		return nil, &provider.UnreachableError{Masters: masters, Err: errors.New("no master serves the platform the workers belong to")}
	}
	return out, nil
}

func (p *fakePlatform) EnsureAddons(context.Context, []districts.Addon) ([]string, error) {
	return nil, nil
}

func (p *fakePlatform) MayRemoveMaster(_ context.Context, n districts.Node, _ []districts.Node) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	voters := 0
	for _, m := range p.members {
		if m.Voter {
			voters++
		}
	}
	return provider.RaftQuorum(n.ID, voters, voters, true)
}

// registry registers the fakes under the paper's providers and platform.
func registry(cloud *fakeCloud, platform *fakePlatform) transit.Drivers {
	return transit.Drivers{
		Infrastructures: map[string]transit.InfrastructureFunc{"gce": cloud.driver, "aws": cloud.driver},
		Platforms:       map[string]transit.PlatformFunc{"swarm": platform.driver},
	}
}

var _ provider.Demander = (*fakePlatform)(nil)

// Demand schedules the workloads on the members as a platform's
// scheduler would and reports what runs where and what is left pending.
func (p *fakePlatform) Demand(_ context.Context, _ []districts.Node) (provider.Demand, error) {
	p.mu.Lock()
	hook := p.onDemand
	p.mu.Unlock()
	if hook != nil {
		hook()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return demandtest.OfMembers(p.members, p.pinned, p.workloads), nil
}
