// Package cloudsim is the core of transit's cloud emulator: what its three
// front ends share. cloudsim/ec2 speaks the EC2 Query API, cloudsim/gce the
// Compute Engine REST API, cloudsim/openstack Keystone v3, Nova and Neutron;
// each in the real wire format, so the official SDKs are what gets tested.
//
// A Sim holds what makes the emulator behave like a cloud rather than a
// table: a latency profile (how long a launch, a termination, a security
// group change takes, scaled), injectable faults (throttling, quota, server
// errors, lost responses, slow requests) and, optionally, a Backer that
// gives each instance a real machine (a local node: network namespace plus
// sshd) so that what the API launched answers SSH and joins a platform.
package cloudsim

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Latency is how long one provider takes for the steps the paper measured.
// Durations are in the cloud's time; a Profile's Scale turns them into
// wall time.
type Latency struct {
	// Launch is an instance's pending time, from the create request
	// until the cloud reports it running with its addresses.
	Launch time.Duration
	// Terminate is an instance's shutting-down time, from the delete
	// request until the cloud no longer lists it (GCE: the delete
	// operation's duration).
	Terminate time.Duration
	// GroupCreate, GroupUpdate and GroupDelete are a security group's (a
	// firewall rule's) creation, one change of its rules, and deletion.
	GroupCreate, GroupUpdate, GroupDelete time.Duration
	// Stop is an instance's stopping time, from the stop request until
	// the cloud reports it stopped (EC2 stopping, Compute Engine
	// STOPPING, Nova powering-off); Start its booting time from the
	// start request until it runs again.
	Stop, Start time.Duration
}

// Profile is a named set of latencies, one per provider, and the factor
// that scales them to wall time.
type Profile struct {
	Name      string
	AWS       Latency
	GCE       Latency
	OpenStack Latency
	// Scale multiplies every latency (0.05 runs a 260 s launch in 13 s);
	// 0 means 1.
	Scale float64
}

// Profile names.
const (
	ProfileZero        = "zero"
	ProfileKratzke2017 = "kratzke2017"
)

// Kratzke2017 holds the paper's medians (Kratzke, CLOSER 2017; see
// testdata/kratzke2017 in the shared notes): security group creation
// ~10 s on AWS and ~120 s on GCE, adjustment ~10 s and ~25 s per change,
// node termination ~60 s on both. VM launch is the part of E1 (260 s on AWS,
// 450 s on GCE) that is neither group creation nor the platform's install
// and join, which the paper's Swarm 1.12 setup spent about 110 s on. The
// paper measured no stop or start: the profile takes a termination's time
// for a stop (both shut the machine down) and a launch's for a start
// (both boot it).
var Kratzke2017 = Profile{
	Name: ProfileKratzke2017,
	AWS: Latency{Launch: 140 * time.Second, Terminate: 60 * time.Second,
		GroupCreate: 10 * time.Second, GroupUpdate: 10 * time.Second, GroupDelete: 10 * time.Second,
		Stop: 60 * time.Second, Start: 140 * time.Second},
	GCE: Latency{Launch: 220 * time.Second, Terminate: 60 * time.Second,
		GroupCreate: 120 * time.Second, GroupUpdate: 25 * time.Second, GroupDelete: 25 * time.Second,
		Stop: 60 * time.Second, Start: 220 * time.Second},
	OpenStack: Latency{Launch: 60 * time.Second, Terminate: 20 * time.Second,
		GroupCreate: 5 * time.Second, GroupUpdate: 5 * time.Second, GroupDelete: 5 * time.Second,
		Stop: 20 * time.Second, Start: 60 * time.Second},
	Scale: 1,
}

// LookupProfile returns the profile of that name with its scale set.
func LookupProfile(name string, scale float64) (Profile, error) {
	if scale < 0 || math.IsNaN(scale) || math.IsInf(scale, 0) {
		return Profile{}, fmt.Errorf("time scale %v: want a number >= 0", scale)
	}
	var p Profile
	switch name {
	case ProfileZero, "":
		p = Profile{Name: ProfileZero}
	case ProfileKratzke2017:
		p = Kratzke2017
	default:
		return Profile{}, fmt.Errorf("unknown latency profile %q (known: %s, %s)", name, ProfileZero, ProfileKratzke2017)
	}
	p.Scale = scale
	return p, nil
}

// Wall turns a cloud duration into wall time.
func (p Profile) Wall(d time.Duration) time.Duration {
	if p.Scale == 0 {
		return d
	}
	return time.Duration(float64(d) * p.Scale)
}

// Sleep waits the wall time of cloud duration d, or until ctx ends.
func (p Profile) Sleep(ctx context.Context, d time.Duration) error {
	return SleepWall(ctx, p.Wall(d))
}

// SleepWall waits wall time d, or until ctx ends (its error then).
func SleepWall(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Op classifies API requests for fault injection; each front end maps
// its actions onto these.
type Op string

// Request classes.
const (
	OpAny       Op = ""          // every request
	OpLaunch    Op = "launch"    // create an instance (RunInstances, instances.insert, servers create)
	OpTerminate Op = "terminate" // delete an instance
	OpPower     Op = "power"     // stop or start an instance (StopInstances, instances.stop, os-stop, ...)
	OpList      Op = "list"      // read instances, groups, images, zones
	OpGroup     Op = "group"     // create, change or delete a security group or its rules
	OpKeys      Op = "keys"      // import or read SSH key pairs
	OpAuth      Op = "auth"      // obtain a token (Keystone); every request checks credentials
)

// FaultKind is what an injected fault does.
type FaultKind string

// Fault kinds. Each front end answers them the way its provider does:
// the error code, the HTTP status and the message a real cloud sends.
const (
	// FaultThrottle refuses the request for its rate (EC2
	// RequestLimitExceeded, GCE 429 rateLimitExceeded, OpenStack 429).
	FaultThrottle FaultKind = "throttle"
	// FaultQuota refuses a create for a quota; Fault.Quota names it.
	FaultQuota FaultKind = "quota"
	// FaultServer answers 500 without doing anything.
	FaultServer FaultKind = "server"
	// FaultLost does the request and then answers 500, as when the
	// response is lost: a failure after partial success. A driver that
	// retries must not create a second machine.
	FaultLost FaultKind = "lost"
	// FaultAuth refuses the credentials.
	FaultAuth FaultKind = "auth"
	// FaultSlow delays the request by Fault.Delay (wall time) and then
	// does it.
	FaultSlow FaultKind = "slow"
	// FaultFailed lets a launch (Op OpLaunch) succeed and the machine
	// then end in the cloud's failed state, as a host or capacity
	// failure leaves it: Nova ERROR with a fault, an EC2 instance that
	// goes pending → terminated (or, for
	// Server.InsufficientInstanceCapacity, stopped) with a state reason,
	// a Compute Engine instance that is TERMINATED right after its
	// insert. Fault.Reason is the cloud's reason for it.
	FaultFailed FaultKind = "failed"
	// FaultUnreachable makes Compute Engine's aggregated instance list
	// (Op OpList) report the zone Fault.Reason names (every zone, if
	// empty) UNREACHABLE: its instances are left out, its scope carries
	// the warning, and unreachables names it. The other front ends answer
	// such a list as usual.
	FaultUnreachable FaultKind = "unreachable"
)

// Fault is one injected failure.
type Fault struct {
	Op   Op
	Kind FaultKind
	// Times is how many matching requests it hits (0: 1; negative: every
	// request until cleared).
	Times int
	// Quota names the exhausted quota for FaultQuota (default per
	// provider, e.g. "InstanceLimitExceeded", "INSTANCES", "instances").
	Quota string
	// Delay is FaultSlow's wall-time delay.
	Delay time.Duration
	// Reason is FaultFailed's cause as the cloud words it: EC2's state
	// reason code (default Server.InternalError), Compute Engine's
	// statusMessage, Nova's fault message (default "No valid host was
	// found. ...").
	Reason string
}

// Faults is a queue of injected failures, safe for concurrent use.
type Faults struct {
	mu     sync.Mutex
	faults []Fault
	hits   map[FaultKind]int
}

// Add queues f.
func (fs *Faults) Add(f Fault) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if f.Times == 0 {
		f.Times = 1
	}
	fs.faults = append(fs.faults, f)
}

// Clear drops every queued fault.
func (fs *Faults) Clear() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.faults = nil
}

// Take returns the first queued fault for a request of class op and counts
// it off.
func (fs *Faults) Take(op Op) (Fault, bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for i, f := range fs.faults {
		if f.Op != OpAny && f.Op != op {
			continue
		}
		if f.Times > 0 {
			fs.faults[i].Times--
			if fs.faults[i].Times == 0 {
				fs.faults = slices.Delete(fs.faults, i, i+1)
			}
		}
		if fs.hits == nil {
			fs.hits = map[FaultKind]int{}
		}
		fs.hits[f.Kind]++
		return f, true
	}
	return Fault{}, false
}

// Hits says how many requests faults of kind k have hit so far.
func (fs *Faults) Hits(k FaultKind) int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.hits[k]
}

// Machine is a real machine backing an instance.
type Machine struct {
	// ID is the backer's name for it.
	ID string
	// Address is where it answers SSH: the instance's public address.
	Address string
	// PrivateAddress is the address on its own interface, the instance's
	// private address; empty when it is Address.
	PrivateAddress string
	// HostKeys are its SSH host public keys, authorized_keys format.
	HostKeys []string
}

// Backer gives instances real machines. Start is called when an instance
// is created and Stop when it terminates; PowerOff and PowerOn when it is
// stopped and started again; Allow keeps a region's firewall equal to the
// union of its security groups' rules.
type Backer interface {
	// Start boots a machine named name (a hostname) in region that
	// accepts authorizedKey (authorized_keys lines) for root.
	Start(ctx context.Context, region, name, authorizedKey string) (Machine, error)
	// Stop tears down a machine and returns once it is gone; a missing
	// one is not an error. A powered-off machine is torn down too.
	Stop(ctx context.Context, region, id string) error
	// PowerOff stops a machine as a cloud stops a VM: every process of
	// it ends and it answers nothing, but it keeps its disk, its private
	// address and its host keys. With release its public address is
	// given up (an EC2 or Compute Engine ephemeral address); without, it
	// stays the machine's (a floating IP). Powering off a powered-off
	// machine is not an error.
	PowerOff(ctx context.Context, region, id string, release bool) error
	// PowerOn boots a powered-off machine again, as after a VM's stop:
	// the same disk, private address and host keys, its sshd running
	// again; a public address it gave up is a new one. It returns the
	// machine as Start does.
	PowerOn(ctx context.Context, region, id string) (Machine, error)
	// Allow makes rules the only traffic let into region's machines from
	// outside the region (besides this host's).
	Allow(ctx context.Context, region string, rules []Rule) error
}

// Rule is one ingress rule of a region's security groups: traffic of
// Protocol ("tcp", "udp", "icmp"; "" for every protocol) to ports From
// through To (both 0: every port; only tcp and udp have ports) from
// Source. The backing is IPv4: front ends pass IPv4 rules only.
type Rule struct {
	Source   netip.Prefix
	Protocol string
	From, To int
}

// String is the rule as tests and errors show it: "tcp 22 from
// 0.0.0.0/0", "udp 30000-32767 from 10.0.0.0/8", "all from
// 192.0.2.1/32" (every protocol), "icmp from …".
func (r Rule) String() string {
	proto := cmp.Or(r.Protocol, "all")
	switch {
	case r.From == 0 && r.To == 0:
	case r.From == r.To:
		proto += " " + strconv.Itoa(r.From)
	default:
		proto += " " + strconv.Itoa(r.From) + "-" + strconv.Itoa(r.To)
	}
	return proto + " from " + r.Source.String()
}

// SortRules sorts rules (by source, protocol, ports) and drops
// duplicates, so that a region's rules read the same whatever order its
// groups hold them in, and a rule two groups hold is passed once.
func SortRules(rules []Rule) []Rule {
	out := slices.Clone(rules)
	slices.SortFunc(out, func(a, b Rule) int {
		return cmp.Or(a.Source.Compare(b.Source), strings.Compare(a.Protocol, b.Protocol),
			cmp.Compare(a.From, b.From), cmp.Compare(a.To, b.To))
	})
	return slices.Compact(out)
}

// Sim is the state the front ends share.
type Sim struct {
	Profile Profile
	Faults  Faults
	// Backer, if set, backs every instance with a real machine.
	Backer Backer
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// New returns a Sim with profile p and no backer.
func New(p Profile) *Sim { return &Sim{Profile: p} }

// Time returns the current time.
func (s *Sim) Time() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// Latency returns provider's latencies ("aws", "gce", "openstack").
func (s *Sim) Latency(provider string) Latency {
	switch strings.ToLower(provider) {
	case "aws":
		return s.Profile.AWS
	case "gce":
		return s.Profile.GCE
	case "openstack":
		return s.Profile.OpenStack
	}
	return Latency{}
}

// Wall turns a cloud duration into wall time under the profile.
func (s *Sim) Wall(d time.Duration) time.Duration { return s.Profile.Wall(d) }

// Front is what every front end of a Sim shares: the background work on
// its backed machines, which Close stops and waits for, and the test hooks
// that override its page size and latencies. A front end embeds it.
type Front struct {
	sim      *Sim
	provider string

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	pageSize int
	latency  *Latency
}

// NewFront returns the shared part of provider's front end for sim.
func NewFront(sim *Sim, provider string) *Front {
	ctx, cancel := context.WithCancel(context.Background())
	return &Front{sim: sim, provider: provider, ctx: ctx, cancel: cancel}
}

// Close stops the front end's background work (backed machines starting
// or stopping) and waits for it. Backed machines that exist stay: the
// Backer's owner tears them down.
func (f *Front) Close() {
	f.cancel()
	f.wg.Wait()
}

// Go runs fn in the background with a context Close cancels.
func (f *Front) Go(fn func(ctx context.Context)) {
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		fn(f.ctx)
	}()
}

// Context is the front end's background context, which Close cancels.
func (f *Front) Context() context.Context { return f.ctx }

// SetPageSize makes every list answer at most n items per page, whatever
// the client asked for; 0 restores the API's own paging.
func (f *Front) SetPageSize(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pageSize = max(n, 0)
}

// PageSize is what SetPageSize set (0: none).
func (f *Front) PageSize() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pageSize
}

// SetLatency replaces the sim's latencies of this front end's provider.
func (f *Front) SetLatency(l Latency) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.latency = &l
}

// Latency is the provider's latencies: SetLatency's, else the profile's.
func (f *Front) Latency() Latency {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.latency != nil {
		return *f.latency
	}
	return f.sim.Latency(f.provider)
}
