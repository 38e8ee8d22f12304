// Package localnodes backs cloudsim's instances with local nodes
// (drivers/local): each emulated region is a local district with its own
// subnet, a node's address is the instance's private address (and, with a
// PublicPool, the host maps a public one to it as a cloud's 1:1 NAT does;
// see nat.go), and the region's security groups become the district's
// firewall: with Apart, their rules as the clouds enforce them, in the
// region's router (filter.go); without, the addresses of their /32 rules
// in the local driver's group.
package localnodes

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/cloudtransit/transit/cloudsim"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/drivers/local"
	"github.com/cloudtransit/transit/provider"
)

// Cluster is the local cluster id every backing node belongs to.
const Cluster = "cloudsim"

// Backer is a cloudsim.Backer of local nodes.
type Backer struct {
	// Root is the local driver's record directory (keep it apart from
	// transit's own local districts).
	Root string
	// Subnets maps an emulated region ("aws:eu-central-1",
	// "gce:europe-west1", "openstack:RegionOne") to its local subnet.
	Subnets map[string]string
	// PublicPool, an IPv4 CIDR such as 100.127.0.0/16, gives each machine
	// a public address apart from its private one (nat.go); empty: a
	// machine's one address is both.
	PublicPool string
	// Apart keeps each region's network apart from the others' and from
	// the host's, reached only through public addresses (apart.go); it
	// needs a PublicPool. Off, every machine reaches every private
	// address through the host.
	Apart bool

	natMu      sync.Mutex // serializes changes of the nat table (nat.go)
	mu         sync.Mutex
	started    []string // every machine started, for HostNames
	drivers    map[string]*backedRegion
	public     map[string]mapping // machine id → its public address
	lastPublic netip.Addr         // the public address handed out last
}

type backedRegion struct {
	drv   provider.Infrastructure
	group provider.Group
}

// District is the local district id a region is backed by.
func District(region string) string {
	return "sim-" + strings.Trim(invalidName.ReplaceAllString(strings.ToLower(region), "-"), "-")
}

var invalidName = regexp.MustCompile(`[^a-z0-9.-]+`)

func (b *Backer) region(ctx context.Context, region string) (*backedRegion, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if r, ok := b.drivers[region]; ok {
		return r, nil
	}
	subnet, ok := b.Subnets[region]
	if !ok {
		return nil, fmt.Errorf("cloudsim: no local subnet backs region %q", region)
	}
	d := districts.District{ID: District(region), Provider: districts.ProviderLocal, LocalSubnet: subnet}
	opts := local.Options{Root: b.Root}
	if b.Apart {
		var err error
		if opts.Network, err = b.ensureRouter(ctx, region); err != nil {
			return nil, err
		}
	}
	drv, err := local.New(ctx, d, opts)
	if err != nil {
		return nil, fmt.Errorf("cloudsim: back region %s: %w", region, err)
	}
	var sources []string // the local driver lets the host in anyway
	if b.Apart {
		sources = everyone // the router filters (filter.go)
	}
	g, err := drv.EnsureGroup(ctx, groupSpec(d.ID, sources))
	if err != nil {
		return nil, fmt.Errorf("cloudsim: back region %s: %w", region, err)
	}
	if b.Apart {
		// A new region lets in nothing but the host until its groups'
		// rules come; the jump to the router's chain goes before the
		// group's, which lets everything in.
		if err := b.filterIngress(ctx, region, nil); err != nil {
			return nil, err
		}
	}
	r := &backedRegion{drv: drv, group: g}
	if b.drivers == nil {
		b.drivers = map[string]*backedRegion{}
	}
	b.drivers[region] = r
	return r, nil
}

// operator is where the host's own traffic (transit's SSH) comes from
// with Apart: the host's end of the region's uplink, which the region's
// router lets in as a cloud's firewall lets in its operator. (Without
// Apart the local driver allows the host anyway.)
func (b *Backer) operator(region string) netip.Addr {
	host, _ := uplinkAddrs(b.Root, region)
	return host
}

func groupSpec(district string, sources []string) provider.GroupSpec {
	return provider.GroupSpec{
		Name: provider.GroupName(Cluster, district), Cluster: Cluster, District: district,
		Tags:    map[string]string{districts.TagCluster: Cluster, districts.TagDistrict: district},
		Sources: sources,
	}
}

// Start launches a local node.
func (b *Backer) Start(ctx context.Context, region, name, authorizedKey string) (cloudsim.Machine, error) {
	r, err := b.region(ctx, region)
	if err != nil {
		return cloudsim.Machine{}, err
	}
	if strings.TrimSpace(authorizedKey) == "" {
		// A machine launched without a key still runs; no one can log in.
		if authorizedKey, err = lockedOut(); err != nil {
			return cloudsim.Machine{}, err
		}
	}
	district := District(region)
	n := districts.Node{ID: name, Cluster: Cluster, District: district, Role: districts.RoleWorker}
	inst, err := r.drv.Launch(ctx, provider.LaunchSpec{
		Node: n, GroupID: r.group.ProviderID, AuthorizedKey: authorizedKey,
		Tags: map[string]string{districts.TagCluster: Cluster, districts.TagDistrict: district, districts.TagNode: name},
	})
	if err != nil {
		return cloudsim.Machine{}, err
	}
	b.mu.Lock()
	b.started = append(b.started, inst.ProviderID)
	b.mu.Unlock()
	m := cloudsim.Machine{ID: inst.ProviderID, Address: inst.PrivateIP, HostKeys: inst.HostKeys}
	if b.PublicPool != "" {
		if m.Address, err = b.mapPublic(ctx, region, inst.ProviderID, inst.PrivateIP); err != nil {
			_ = r.drv.Terminate(context.WithoutCancel(ctx), inst)
			return cloudsim.Machine{}, err
		}
		m.PrivateAddress = inst.PrivateIP
	}
	return m, nil
}

// lockedOut is the authorized key of a machine launched without one: a
// fresh key whose private half is thrown away.
func lockedOut() (string, error) {
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", err
	}
	pk, err := gossh.NewPublicKey(pub)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(gossh.MarshalAuthorizedKey(pk))), nil
}

// Stop terminates a local node and returns once it is gone.
func (b *Backer) Stop(ctx context.Context, region, id string) error {
	r, err := b.region(ctx, region)
	if err != nil {
		return err
	}
	if err := b.unmapPublic(ctx, id); err != nil {
		return err
	}
	err = r.drv.Terminate(ctx, provider.Instance{ProviderID: id,
		Tags: map[string]string{districts.TagCluster: Cluster, districts.TagDistrict: District(region)}})
	if err != nil {
		return err
	}
	for {
		insts, _, err := r.drv.List(ctx, Cluster)
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(insts, func(in provider.Instance) bool { return in.ProviderID == id }) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// power is the local driver's side that stops and starts a node as a
// cloud stops and starts a VM (drivers/local power.go).
type power interface {
	PowerOff(ctx context.Context, id string) error
	PowerOn(ctx context.Context, id string) (provider.Instance, error)
}

func (r *backedRegion) power() (power, error) {
	p, ok := r.drv.(power)
	if !ok {
		return nil, fmt.Errorf("cloudsim: the local driver cannot stop and start nodes")
	}
	return p, nil
}

// PowerOff stops a local node: its processes end, it keeps its disk,
// private address and host key. With release its public address goes.
func (b *Backer) PowerOff(ctx context.Context, region, id string, release bool) error {
	r, err := b.region(ctx, region)
	if err != nil {
		return err
	}
	p, err := r.power()
	if err != nil {
		return err
	}
	if err := p.PowerOff(ctx, id); err != nil {
		return err
	}
	if release {
		return b.unmapPublic(ctx, id)
	}
	return nil
}

// PowerOn boots a stopped local node again; a public address it gave up
// is a new one (a freed one is handed out last).
func (b *Backer) PowerOn(ctx context.Context, region, id string) (cloudsim.Machine, error) {
	r, err := b.region(ctx, region)
	if err != nil {
		return cloudsim.Machine{}, err
	}
	p, err := r.power()
	if err != nil {
		return cloudsim.Machine{}, err
	}
	inst, err := p.PowerOn(ctx, id)
	if err != nil {
		return cloudsim.Machine{}, err
	}
	m := cloudsim.Machine{ID: inst.ProviderID, Address: inst.PrivateIP, HostKeys: inst.HostKeys}
	if b.PublicPool != "" {
		public, ok := b.publicOf(id)
		if !ok {
			if public, err = b.mapPublic(ctx, region, id, inst.PrivateIP); err != nil {
				return cloudsim.Machine{}, errors.Join(err, p.PowerOff(context.WithoutCancel(ctx), id))
			}
		}
		m.Address, m.PrivateAddress = public, inst.PrivateIP
	}
	return m, nil
}

// Allow makes rules the region's firewall.
//
// With Apart the region's router enforces them as a cloud does (source,
// protocol, destination ports; filter.go): what enters the region from
// outside is let in only by a rule, as a reply, or from this host; IPv6
// rules are skipped (the backing is IPv4). Traffic inside the region and
// leaving it is not filtered.
//
// Without Apart every region shares the host's network and the local
// driver's group (a chain that lets in all traffic from addresses) is the
// firewall: only the addresses of the /32 rules are kept, whatever their
// protocol and ports, mapped to the private addresses their traffic
// comes from, and let in for all traffic. Protocols and ports are not
// enforced without Apart, and a wider source, such as 0.0.0.0/0 for SSH,
// lets nothing in: it is the operator's access, which the local driver
// always allows from this host.
func (b *Backer) Allow(ctx context.Context, region string, rules []cloudsim.Rule) error {
	r, err := b.region(ctx, region)
	if err != nil {
		return err
	}
	if b.Apart {
		return b.filterIngress(ctx, region, rules)
	}
	var addrs []string
	for _, rule := range rules {
		if p := rule.Source; p.Addr().Is4() && p.Bits() == 32 {
			addrs = append(addrs, b.privateOf(p.Addr().String()))
		}
	}
	_, err = r.drv.EnsureGroup(ctx, groupSpec(District(region), addrs))
	return err
}

// Destroy tears down every backing node, firewall and bridge under Root,
// and waits until they are gone.
func (b *Backer) Destroy(ctx context.Context) error {
	b.mu.Lock()
	b.drivers, b.public = nil, nil
	b.mu.Unlock()
	if err := local.Purge(ctx, b.Root); err != nil {
		return fmt.Errorf("cloudsim: destroy backing nodes: %w", err)
	}
	if err := removeNAT(ctx, b.Root); err != nil {
		return fmt.Errorf("cloudsim: remove the public addresses: %w", err)
	}
	if err := b.removeRouters(ctx); err != nil {
		return fmt.Errorf("cloudsim: remove the regions' networks: %w", err)
	}
	return nil
}

// HostNames are the names of everything the backer made on the host
// (local.HostNames, and its nat chains as "nat chain …"; with Apart,
// each region's router and uplink, the forward chain and the machines'
// namespaces and cgroups: the rest lives in the routers), also of what it tore down since: a
// test checks none is left after Destroy.
func (b *Backer) HostNames() []string {
	b.mu.Lock()
	ids := slices.Clone(b.started)
	b.mu.Unlock()
	var ds []string
	for region := range b.Subnets {
		ds = append(ds, District(region))
	}
	slices.Sort(ds)
	dnat, snat := natChains(b.Root)
	names := append(local.HostNames(b.Root, Cluster, ds, ids), "nat chain "+dnat, "nat chain "+snat)
	if b.Apart {
		// The regions' bridges, veths and chains are in their routers.
		names = []string{"chain " + forwardChain(b.Root)}
		for _, id := range ids {
			names = append(names, "netns transit-"+id, "cgroup transit/"+id)
		}
		for region := range b.Subnets {
			names = append(names, "netns "+routerName(b.Root, region), "link "+uplinkName(b.Root, region))
		}
	}
	return names
}

var _ cloudsim.Backer = (*Backer)(nil)
