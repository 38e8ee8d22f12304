package cli

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
	"github.com/cloudtransit/transit/provider"
	"github.com/cloudtransit/transit/provider/demandtest"
)

// fakeCloud is an in-memory cloud shared by the districts of a test: every
// CLI run of the test builds its drivers on top of the same machines, as
// runs against a real cloud would.
type fakeCloud struct {
	mu        sync.Mutex
	next      int
	instances map[string]map[string]provider.Instance // district → provider id → instance
	groups    map[string]map[string]provider.Group    // district → name → group
	built     atomic.Int32                            // drivers constructed
	// terminateErr, when set, fails every Terminate.
	terminateErr string
}

func (c *fakeCloud) failTerminate(msg string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.terminateErr = msg
}

func newFakeCloud() *fakeCloud {
	return &fakeCloud{instances: map[string]map[string]provider.Instance{}, groups: map[string]map[string]provider.Group{}}
}

// driver is a transit.InfrastructureFunc for any provider.
func (c *fakeCloud) driver(_ context.Context, d districts.District, _ *districts.Credential) (provider.Infrastructure, error) {
	c.built.Add(1)
	return &fakeInfra{cloud: c, district: d.ID}, nil
}

// count returns how many machines and groups the cloud holds.
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

// vanish deletes node's machine behind transit's back, as a person in the
// cloud's console or a spot reclaim would.
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

// vanishDistrict deletes every machine of district behind transit's back,
// as a listing that answers an empty page would show it; it returns the
// node ids.
func (c *fakeCloud) vanishDistrict(district string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ids []string
	for id, in := range c.instances[district] {
		ids = append(ids, in.Tags[districts.TagNode])
		delete(c.instances[district], id)
	}
	slices.Sort(ids)
	return ids
}

type fakeInfra struct {
	cloud    *fakeCloud
	district string
}

var _ provider.Infrastructure = (*fakeInfra)(nil)

func (f *fakeInfra) List(_ context.Context, cluster string) ([]provider.Instance, []provider.Group, error) {
	c := f.cloud
	c.mu.Lock()
	defer c.mu.Unlock()
	var insts []provider.Instance
	for _, id := range slices.Sorted(maps.Keys(c.instances[f.district])) {
		if in := c.instances[f.district][id]; in.Tags[districts.TagCluster] == cluster {
			in.Tags = maps.Clone(in.Tags)
			insts = append(insts, in)
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

func (f *fakeInfra) EnsureGroup(_ context.Context, spec provider.GroupSpec) (provider.Group, error) {
	c := f.cloud
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

func (f *fakeInfra) DeleteGroup(_ context.Context, g provider.Group) error {
	c := f.cloud
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, have := range c.groups[f.district] {
		if have.ProviderID == g.ProviderID || name == g.Name {
			delete(c.groups[f.district], name)
		}
	}
	return nil
}

func (f *fakeInfra) Launch(_ context.Context, spec provider.LaunchSpec) (provider.Instance, error) {
	c := f.cloud
	c.mu.Lock()
	defer c.mu.Unlock()
	c.next++
	in := provider.Instance{
		ProviderID: fmt.Sprintf("i-%d", c.next),
		Tags:       maps.Clone(spec.Tags),
		Zone:       spec.Node.Zone,
		PublicIP:   fmt.Sprintf("203.0.113.%d", c.next),
		PrivateIP:  fmt.Sprintf("10.0.0.%d", c.next),
		State:      provider.InstanceRunning,
		CreatedAt:  time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
	}
	if c.instances[f.district] == nil {
		c.instances[f.district] = map[string]provider.Instance{}
	}
	c.instances[f.district][in.ProviderID] = in
	return in, nil
}

func (f *fakeInfra) Terminate(_ context.Context, in provider.Instance) error {
	c := f.cloud
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.terminateErr != "" {
		return fmt.Errorf("terminate %s: %s", in.ProviderID, c.terminateErr)
	}
	delete(c.instances[f.district], in.ProviderID)
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
	have.Tags = maps.Clone(have.Tags)
	return have, nil
}

// fakePlatform is an in-memory container platform; refuseDrain makes every
// drain fail the way a disruption budget does.
type fakePlatform struct {
	mu          sync.Mutex
	members     map[string]provider.Member
	refuseDrain bool
	// unreachable, when set, is why no master answers: Members fails
	// with an *provider.UnreachableError naming the masters.
	unreachable string
	// onInstall, when set, runs in every Install (a test blocks it until
	// the run is interrupted).
	onInstall func(ctx context.Context, n districts.Node) error
	// workloads are what Demand reports as the platform would: each
	// placed on the first ready member (by id) with room (1000m, 3.75
	// GiB) and the labels it selects, pending when none has; pinned ones
	// run on their node whatever its room.
	workloads []provider.Workload
	pinned    map[string][]provider.Workload
	built     atomic.Int32
	// addonProblem, when set, is why the platform's network addon does
	// not serve.
	addonProblem string
	// addonsErr, when set, is what the addons step fails with.
	addonsErr error
}

func (p *fakePlatform) setAddonProblem(why string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.addonProblem = why
}

// AddonStatus reports the platform's own network addon (serving unless
// addonProblem says otherwise) and cluster.json's addons, serving.
func (p *fakePlatform) AddonStatus(_ context.Context, addons []districts.Addon) ([]provider.AddonStatus, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := []provider.AddonStatus{{Name: "net", Ready: p.addonProblem == "", Message: p.addonProblem}}
	for _, a := range addons {
		out = append(out, provider.AddonStatus{Name: a.Name, Ready: true})
	}
	return out, nil
}

func (p *fakePlatform) setUnreachable(why string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.unreachable = why
}

func (p *fakePlatform) setOnInstall(f func(ctx context.Context, n districts.Node) error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.onInstall = f
}

// setReady makes the platform report a member ready or not.
func (p *fakePlatform) setReady(node string, ready bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if m, ok := p.members[node]; ok {
		m.Ready = ready
		p.members[node] = m
	}
}

// loseMasters drops every master from the platform, as if their machines
// died with the platform's quorum.
func (p *fakePlatform) loseMasters() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, m := range p.members {
		if m.Role == districts.RoleMaster {
			delete(p.members, id)
		}
	}
}

func newFakePlatform() *fakePlatform { return &fakePlatform{members: map[string]provider.Member{}} }

// driver is a transit.PlatformFunc for any platform.
func (p *fakePlatform) driver(context.Context, districts.Cluster, transit.PlatformEnv) (provider.Platform, error) {
	p.built.Add(1)
	return p, nil
}

func (p *fakePlatform) refuse(b bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuseDrain = b
}

var _ provider.Platform = (*fakePlatform)(nil)

func (p *fakePlatform) Install(ctx context.Context, n districts.Node) error {
	p.mu.Lock()
	f := p.onInstall
	p.mu.Unlock()
	if f != nil {
		return f(ctx, n)
	}
	return nil
}

func (p *fakePlatform) Init(_ context.Context, n districts.Node) error {
	return p.add(n)
}

func (p *fakePlatform) Join(_ context.Context, n districts.Node) error {
	return p.add(n)
}

func (p *fakePlatform) add(n districts.Node) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := p.members[n.ID]
	m.NodeID, m.Role, m.Ready, m.Draining = n.ID, n.Role, true, false
	m.Voter = n.Role == districts.RoleMaster
	p.members[n.ID] = m
	return nil
}

// down makes node a member that is not ready, as a platform reports a
// member whose machine is gone once its heartbeats stop.
func (p *fakePlatform) down(node string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if m, ok := p.members[node]; ok {
		m.Ready = false
		p.members[node] = m
	}
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
	if p.refuseDrain {
		return &provider.DrainError{Node: n.ID, Reason: "disruption budget of web allows no eviction", Blocking: []string{"web-7d4f"}}
	}
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
	return nil
}

// Members keeps the Platform contract: no platform only when no node is a
// member; workers without a master are a platform nobody can be asked
// about.
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
	if p.unreachable != "" {
		return nil, &provider.UnreachableError{Masters: masters, Err: errors.New(p.unreachable)}
	}
	var out []provider.Member
	master := false
	for _, id := range slices.Sorted(maps.Keys(p.members)) {
		m := p.members[id]
		m.Labels = maps.Clone(m.Labels)
		out = append(out, m)
		master = master || m.Role == districts.RoleMaster
	}
	switch {
	case len(out) == 0:
		return nil, provider.ErrNoPlatform
	case !master:
		return nil, &provider.UnreachableError{Masters: masters, Err: errors.New("no master serves the platform the workers belong to")}
	}
	return out, nil
}

// Version is what a control plane would report.
func (p *fakePlatform) Version(context.Context) (string, error) { return "v9.9.9-fake", nil }

// EnsureAddons fails with addonsErr when it is set.
func (p *fakePlatform) EnsureAddons(context.Context, []districts.Addon) ([]string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return nil, p.addonsErr
}

func (p *fakePlatform) setAddonsErr(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.addonsErr = err
}

func (p *fakePlatform) MayRemoveMaster(_ context.Context, n districts.Node, _ []districts.Node) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	voters := 0
	for _, m := range p.members {
		if m.Role == districts.RoleMaster {
			voters++
		}
	}
	return provider.RaftQuorum(n.ID, voters, voters, true)
}

// Demand schedules the workloads on the members as a platform's
// scheduler would and reports what runs where and what is left pending.
func (p *fakePlatform) Demand(_ context.Context, _ []districts.Node) (provider.Demand, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return demandtest.OfMembers(p.members, p.pinned, p.workloads), nil
}
