package ec2

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/cloudtransit/transit/cloudsim"
)

// instance is one EC2 instance. Its state is computed from timestamps:
// pending until runningAt (and, when backed, until its machine is up),
// running; stopping from stopAt until stoppedAt (and its machine is
// off), stopped; pending again from a start until the new runningAt;
// shutting-down from termAt until goneAt (and its machine is gone), then
// terminated, visible for a while.
type instance struct {
	seq               uint64
	id, resv          string
	image, itype      string
	keyName           string
	subnet, vpc       string
	zone              string
	groups            []string
	privateIP         string
	publicIP          string
	public            bool // it gets an auto-assigned public address when it runs
	tags              map[string]string
	token             string
	launchIndex       int
	created           time.Time
	runningAt         time.Time
	ran               bool      // it reached running once
	stopAt, stoppedAt time.Time // zero unless stopped
	termAt, goneAt    time.Time // zero until terminated
	stateReason       *xStateReason
	transition        string // the state transition reason, as DescribeInstances says it
	hostKeys          []string
	released          bool // addresses returned to their pools

	// The console (GetConsoleOutput). bootAt is when the machine booted
	// in this run (zero until it does; backed, until it is up): from
	// then on the console holds that boot's output. Before, it holds
	// prevConsole, the output of the run before (StartInstances); post
	// is what EC2 had posted by then, and due when the run before's
	// posts still fall due.
	bootAt      time.Time
	prevConsole string
	post        consolePost
	due         []time.Time

	backed   bool
	started  bool // the backer's Start returned
	machine  cloudsim.Machine
	powering bool // a Backer.PowerOff or PowerOn is under way
	off      bool // the machine is powered off
	tearing  bool // Backer.Stop was called
	torn     bool // and returned: the machine is gone
}

type instState struct {
	code int
	name string
}

var (
	statePending      = instState{0, "pending"}
	stateRunning      = instState{16, "running"}
	stateShuttingDown = instState{32, "shutting-down"}
	stateTerminated   = instState{48, "terminated"}
	stateStopping     = instState{64, "stopping"}
	stateStopped      = instState{80, "stopped"}
)

// state is the instance's state at now. A backed instance is terminated
// only once its machine is gone, stopped once it is off, and running once
// it is up. Call with s.mu held.
func (s *Server) state(in *instance, now time.Time) instState {
	switch {
	case !in.termAt.IsZero() && !now.Before(in.termAt):
		if !now.Before(in.goneAt) && (!in.backed || in.started && !in.powering && (!in.tearing || in.torn)) {
			return stateTerminated
		}
		return stateShuttingDown
	case !in.stopAt.IsZero() && !now.Before(in.stopAt):
		if !now.Before(in.stoppedAt) && !in.powering {
			return stateStopped
		}
		return stateStopping
	case in.backed && (!in.started || in.powering), now.Before(in.runningAt):
		return statePending
	}
	return stateRunning
}

// settle notes what the instance's state says happened: it ran once; a
// stopped or terminated unbacked instance's public address is released
// (EC2 gives an auto-assigned one back when the instance stops). Call
// with s.mu held.
func (s *Server) settle(in *instance, now time.Time) {
	switch s.state(in, now) {
	case stateRunning:
		in.ran = true
	case stateStopped, stateTerminated:
		if !in.backed && in.publicIP != "" {
			s.public.release(in.publicIP)
			in.publicIP = ""
		}
	}
}

// sweep releases the addresses of terminated instances and forgets those
// terminated longer than TerminatedVisible ago. Call with s.mu held.
func (s *Server) sweep(rg *region, now time.Time) {
	for id, in := range rg.instances {
		s.settle(in, now)
		if s.state(in, now) != stateTerminated {
			continue
		}
		if !in.released {
			in.released = true
			if !in.backed {
				if sn := rg.subnets[in.subnet]; sn != nil {
					sn.addrs.release(in.privateIP)
				}
			}
		}
		if now.Sub(in.goneAt) >= s.sim.Wall(s.visible) {
			delete(rg.instances, id)
		}
	}
	for tok, ct := range rg.tokens {
		if !slices.ContainsFunc(ct.ids, func(id string) bool { return rg.instances[id] != nil }) {
			delete(rg.tokens, tok)
		}
	}
}

// clientToken remembers a RunInstances request made with a ClientToken:
// repeating it returns the same reservation instead of new instances.
type clientToken struct {
	hash string
	resv string
	ids  []string
}

// launchRequest is RunInstances' input.
type launchRequest struct {
	image, instanceType string
	keyName             string
	groupIDs            []string
	groupNames          []string
	subnet, zone        string
	assocPublic         *bool
	userData            string
	tags                map[string]string
	token               string
	min, max            int
	// fail, if set, makes the instances end as a failed launch
	// (cloudsim.FaultFailed); not part of the request's identity.
	fail *cloudsim.Fault
}

// hash identifies the request's arguments for idempotency.
func (r launchRequest) hash() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\x00%s\x00%s\x00%v\x00%v\x00%s\x00%s\x00", r.image, r.instanceType, r.keyName,
		slices.Sorted(slices.Values(r.groupIDs)), slices.Sorted(slices.Values(r.groupNames)), r.subnet, r.zone)
	if r.assocPublic != nil {
		fmt.Fprintf(&b, "%v", *r.assocPublic)
	}
	fmt.Fprintf(&b, "\x00%s\x00%d\x00%d\x00", r.userData, r.min, r.max)
	for _, k := range sortedKeys(r.tags) {
		fmt.Fprintf(&b, "%s=%s\x00", k, r.tags[k])
	}
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:])
}

type launchResult struct {
	resv      string
	groups    []string
	instances []*instance
}

func (c *call) runInstances() (requestIDSetter, error) {
	p := c.p
	req := launchRequest{
		image: p.get("ImageId"), instanceType: p.get("InstanceType"), keyName: p.get("KeyName"),
		groupIDs: p.list("SecurityGroupId"), groupNames: p.list("SecurityGroup"),
		subnet: p.get("SubnetId"), zone: p.get("Placement.AvailabilityZone"), token: p.get("ClientToken"),
	}
	if req.image == "" {
		return nil, missing("ImageId")
	}
	if req.instanceType == "" {
		req.instanceType = "m1.small"
	}
	var err error
	if !p.has("MinCount") {
		return nil, missing("MinCount")
	}
	if !p.has("MaxCount") {
		return nil, missing("MaxCount")
	}
	if req.min, err = p.int("MinCount", 0); err != nil {
		return nil, err
	}
	if req.max, err = p.int("MaxCount", 0); err != nil {
		return nil, err
	}
	if req.min < 1 || req.max < req.min {
		return nil, &apiError{status: 400, code: "InvalidParameterValue",
			msg: fmt.Sprintf("Value (%d) for parameter minCount is invalid. Expected a positive integer not above maxCount (%d).", req.min, req.max)}
	}
	if len(req.token) > 64 {
		return nil, &apiError{status: 400, code: "InvalidParameterValue", msg: "Client token is longer than 64 characters."}
	}
	if nis := p.structs("NetworkInterface"); len(nis) > 0 {
		if len(nis) > 1 || nis[0].get("DeviceIndex") != "0" {
			return nil, &apiError{status: 400, code: "InvalidParameterValue", msg: "Only one network interface, at DeviceIndex 0, is emulated."}
		}
		if req.subnet != "" {
			return nil, &apiError{status: 400, code: "InvalidParameterCombination",
				msg: "Network interfaces and an instance-level subnet ID may not be specified on the same request"}
		}
		if len(req.groupIDs)+len(req.groupNames) > 0 {
			return nil, &apiError{status: 400, code: "InvalidParameterCombination",
				msg: "Network interfaces and an instance-level security groups may not be specified on the same request"}
		}
		ni := nis[0]
		req.subnet, req.groupIDs = ni.get("SubnetId"), ni.list("SecurityGroupId")
		if ni.has("AssociatePublicIpAddress") {
			v, err := ni.bool("AssociatePublicIpAddress")
			if err != nil {
				return nil, err
			}
			req.assocPublic = &v
		}
	}
	if ud := p.get("UserData"); ud != "" {
		raw, err := base64.StdEncoding.DecodeString(ud)
		if err != nil {
			return nil, &apiError{status: 400, code: "InvalidParameterValue", msg: "Invalid BASE64 encoding of user data."}
		}
		if len(raw) > 16384 {
			return nil, &apiError{status: 400, code: "InvalidParameterValue", msg: "User data is limited to 16384 bytes"}
		}
		req.userData = string(raw)
	}
	if req.tags, err = p.tagSpecs("instance", "volume", "network-interface"); err != nil {
		return nil, err
	}
	req.fail = c.failed
	res, err := c.launch(req)
	if err != nil {
		return nil, err
	}
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	rg, now := s.region(c.region), s.now()
	out := &runInstancesResponse{xReservation: xReservation{ReservationID: res.resv, OwnerID: s.account}}
	for _, in := range res.instances {
		out.Instances = append(out.Instances, s.xInstance(rg, in, now))
	}
	for _, g := range res.groups {
		if grp := rg.groups[g]; grp != nil {
			out.Groups = append(out.Groups, xGroupID{GroupID: g, GroupName: grp.name})
		}
	}
	return out, nil
}

// vcpus is the instance type's vCPU count, from its size; ok is false for
// a name that is no instance type.
func vcpus(itype string) (int, bool) {
	m := instanceType.FindStringSubmatch(itype)
	if m == nil {
		return 0, false
	}
	family, size := m[1], m[2]
	switch size {
	case "nano", "micro", "small":
		if strings.HasPrefix(family, "t2") || family == "m1" {
			return 1, true
		}
		return 2, true
	case "medium", "large":
		return 2, true
	case "xlarge":
		return 4, true
	case "metal":
		return 96, true
	}
	n, err := strconv.Atoi(strings.TrimSuffix(size, "xlarge"))
	if err != nil || n < 2 || n > 48 {
		return 0, false
	}
	return 4 * n, true
}

var instanceType = regexp.MustCompile(`^([a-z]+[0-9][a-z0-9-]*)\.(nano|micro|small|medium|large|xlarge|[0-9]+xlarge|metal)$`)

// launch creates the instances of a request, or returns the reservation an
// earlier request with the same client token made.
func (c *call) launch(req launchRequest) (*launchResult, error) {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	rg, now := s.region(c.region), s.now()
	s.sweep(rg, now)

	if req.token != "" {
		if ct, ok := rg.tokens[req.token]; ok {
			if ct.hash != req.hash() {
				return nil, &apiError{status: 400, code: "IdempotentParameterMismatch",
					msg: "Arguments on this idempotent request are inconsistent with arguments used in previous request(s)."}
			}
			res := &launchResult{resv: ct.resv}
			for _, id := range ct.ids {
				if in := rg.instances[id]; in != nil {
					res.instances = append(res.instances, in)
					res.groups = in.groups
				}
			}
			return res, nil
		}
	}

	if !validID("ami", req.image) {
		return nil, &apiError{status: 400, code: "InvalidAMIID.Malformed", msg: fmt.Sprintf("Invalid id: \"%s\" (expecting \"ami-...\")", req.image)}
	}
	if _, ok := s.image(req.image); !ok {
		return nil, &apiError{status: 400, code: "InvalidAMIID.NotFound", msg: fmt.Sprintf("The image id '[%s]' does not exist", req.image)}
	}
	cpu, ok := vcpus(req.instanceType)
	if !ok {
		return nil, &apiError{status: 400, code: "InvalidParameterValue", msg: fmt.Sprintf("Invalid value '%s' for InstanceType.", req.instanceType)}
	}
	var key *keyPair
	if req.keyName != "" {
		if key = rg.keys[req.keyName]; key == nil {
			return nil, &apiError{status: 400, code: "InvalidKeyPair.NotFound", msg: fmt.Sprintf("The key pair '%s' does not exist", req.keyName)}
		}
	}

	var sn *subnet
	switch {
	case req.subnet != "":
		if sn = rg.subnets[req.subnet]; sn == nil {
			return nil, &apiError{status: 400, code: "InvalidSubnetID.NotFound", msg: fmt.Sprintf("The subnet ID '%s' does not exist", req.subnet)}
		}
		if req.zone != "" && req.zone != sn.zone {
			return nil, &apiError{status: 400, code: "InvalidParameterValue",
				msg: fmt.Sprintf("Value (%s) for parameter availabilityZone is invalid. Subnet '%s' is in the availability zone %s", req.zone, sn.id, sn.zone)}
		}
	default:
		zone := req.zone
		if zone == "" {
			// EC2 picks the zone; always the first one here, so that a
			// driver that means to spread must say where.
			zone = rg.zones[0]
		}
		if !rg.hasZone(zone) {
			return nil, &apiError{status: 400, code: "InvalidParameterValue", msg: fmt.Sprintf("Invalid availability zone: [%s]", zone)}
		}
		if sn = rg.defaultSubnet(zone); sn == nil {
			return nil, &apiError{status: 400, code: "VPCIdNotSpecified", msg: "No default VPC for this user"}
		}
	}

	groups := slices.Clone(req.groupIDs)
	for _, id := range req.groupIDs {
		g := rg.groups[id]
		if g == nil {
			return nil, &apiError{status: 400, code: "InvalidGroup.NotFound",
				msg: fmt.Sprintf("The security group '%s' does not exist in VPC '%s'", id, sn.vpc)}
		}
		if g.vpc != sn.vpc {
			return nil, &apiError{status: 400, code: "InvalidParameter",
				msg: fmt.Sprintf("Security group %s and subnet %s belong to different networks.", id, sn.id)}
		}
	}
	for _, name := range req.groupNames {
		g, err := rg.findGroup(params{"GroupName": name})
		if err != nil {
			return nil, err
		}
		groups = append(groups, g.id)
	}
	if len(groups) == 0 {
		for _, g := range rg.sortedGroups() {
			if g.isDefault && g.vpc == sn.vpc {
				groups = append(groups, g.id)
			}
		}
	}

	n := req.max
	if s.vcpus > 0 {
		fit := (s.vcpus - s.usedVCPUs(rg, now)) / cpu
		if fit < req.min {
			return nil, &apiError{status: 400, code: "VcpuLimitExceeded",
				msg: fmt.Sprintf("You have requested more vCPU capacity than your current vCPU limit of %d allows for the instance bucket that the specified instance type belongs to. Please visit http://aws.amazon.com/contact-us/ec2-request to request an adjustment to this limit.", s.vcpus)}
		}
		n = min(n, fit)
	}
	public := sn.mapPublic
	if req.assocPublic != nil {
		public = *req.assocPublic
	}
	backed := s.sim.Backer != nil
	if !backed && sn.addrs.free() < n {
		return nil, &apiError{status: 400, code: "InsufficientFreeAddressesInSubnet",
			msg: fmt.Sprintf("There are not enough free addresses in subnet '%s' to satisfy the requested number of instances.", sn.id)}
	}

	lat := s.Latency()
	res := &launchResult{resv: newID("r"), groups: groups}
	for i := range n {
		in := &instance{
			seq: s.nextSeq(), id: newID("i"), resv: res.resv, image: req.image, itype: req.instanceType,
			keyName: req.keyName, subnet: sn.id, vpc: sn.vpc, zone: sn.zone, groups: groups,
			tags: maps.Clone(req.tags), token: req.token, launchIndex: i, public: public,
			created: now, runningAt: now.Add(s.sim.Wall(lat.Launch)), backed: backed,
		}
		if !backed {
			in.privateIP, _ = sn.addrs.take()
			if public {
				in.publicIP, _ = s.public.take()
			}
			in.hostKeys = []string{newHostKey()}
		}
		rg.instances[in.id] = in
		res.instances = append(res.instances, in)
		if req.fail != nil {
			// It never gets a machine: it ends when it would have run.
			in.started = true
			failInstance(in, in.runningAt, req.fail.Reason)
			continue
		}
		if backed {
			authorized := ""
			if key != nil {
				authorized = key.key
			}
			s.startMachine(c.region, in, authorized)
		} else {
			in.bootAt = in.runningAt
		}
	}
	if req.token != "" {
		ct := &clientToken{hash: req.hash(), resv: res.resv}
		for _, in := range res.instances {
			ct.ids = append(ct.ids, in.id)
		}
		rg.tokens[req.token] = ct
	}
	return res, nil
}

// newHostKey makes an unbacked instance's SSH host key, as cloud-init
// would on first boot.
func newHostKey() string {
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	pk, err := ssh.NewPublicKey(pub)
	if err != nil {
		panic(err)
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pk)))
}

// startMachine boots a backed instance's machine in the background. Call
// with s.mu held.
func (s *Server) startMachine(region string, in *instance, authorizedKey string) {
	s.Go(func(ctx context.Context) {
		m, err := s.sim.Backer.Start(ctx, "aws:"+region, in.id, authorizedKey)
		s.mu.Lock()
		in.started = true
		if err != nil {
			if in.termAt.IsZero() {
				failInstance(in, s.now(), "Server.InternalError")
			}
			s.mu.Unlock()
			return
		}
		in.machine = m
		in.privateIP, in.publicIP = m.Address, m.Address
		if m.PrivateAddress != "" {
			in.privateIP = m.PrivateAddress
		}
		in.hostKeys = slices.Clone(m.HostKeys)
		in.bootAt = later(in.runningAt, s.now())
		s.mu.Unlock()
		s.afterMachine(region, in)
	})
}

// afterMachine brings the machine in line with what happened to the
// instance while a backer call on it was under way: torn down if it was
// terminated, powered off if it was stopped.
func (s *Server) afterMachine(region string, in *instance) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case in.machine.ID == "" || in.tearing || in.powering:
	case !in.termAt.IsZero():
		in.tearing = true
		s.tearDown(region, in)
	case !in.stopAt.IsZero() && !in.off:
		s.powerOff(region, in)
	}
}

// tearDown tears a backed machine down in the background.
// The instance stays shutting-down until the machine is gone: a machine
// the API calls terminated must not answer anymore.
func (s *Server) tearDown(region string, in *instance) {
	s.Go(func(ctx context.Context) {
		// A failed stop leaves a machine the backer's Destroy removes.
		_ = s.sim.Backer.Stop(ctx, "aws:"+region, in.machine.ID)
		s.mu.Lock()
		in.torn = true
		s.mu.Unlock()
	})
}

// powerOff stops a backed instance's machine in the background; the
// instance is stopping until it is off. Its public address goes with it.
// Call with s.mu held.
func (s *Server) powerOff(region string, in *instance) {
	in.powering = true
	s.Go(func(ctx context.Context) {
		// A failed power-off leaves a machine the backer's Destroy removes.
		_ = s.sim.Backer.PowerOff(ctx, "aws:"+region, in.machine.ID, true)
		s.mu.Lock()
		in.powering, in.off, in.publicIP = false, true, ""
		s.mu.Unlock()
		s.afterMachine(region, in)
	})
}

// powerOn boots a stopped backed instance's machine again in the
// background; the instance is pending until it is up, with its new public
// address. A machine that does not come up leaves the instance stopped,
// as EC2 leaves one it found no capacity for. Call with s.mu held.
func (s *Server) powerOn(region string, in *instance) {
	in.powering = true
	s.Go(func(ctx context.Context) {
		m, err := s.sim.Backer.PowerOn(ctx, "aws:"+region, in.machine.ID)
		s.mu.Lock()
		in.powering = false
		switch {
		case err != nil:
			if in.termAt.IsZero() {
				failInstance(in, s.now(), "Server.InsufficientInstanceCapacity")
			}
		default:
			in.off = false
			in.bootAt = later(in.runningAt, s.now())
			in.machine.Address, in.machine.PrivateAddress = m.Address, m.PrivateAddress
			in.publicIP, in.privateIP = m.Address, m.Address
			if m.PrivateAddress != "" {
				in.privateIP = m.PrivateAddress
			}
		}
		s.mu.Unlock()
		s.afterMachine(region, in)
	})
}

// failInstance makes in end at at as an instance EC2 gave up on ends,
// with state reason code (default Server.InternalError): terminated, or
// for Server.InsufficientInstanceCapacity stopped.
func failInstance(in *instance, at time.Time, code string) {
	msg := code
	switch code {
	case "", "Server.InternalError":
		code, msg = "Server.InternalError", "Server.InternalError: Internal error on launch"
	case "Server.InsufficientInstanceCapacity":
		msg = "Server.InsufficientInstanceCapacity: Insufficient capacity."
	}
	in.stateReason = &xStateReason{Code: code, Message: msg}
	in.transition = msg
	if code == "Server.InsufficientInstanceCapacity" {
		in.stopAt, in.stoppedAt = at, at
		return
	}
	in.termAt, in.goneAt = at, at
}

func (s *Server) xInstance(rg *region, in *instance, now time.Time) xInstance {
	st := s.state(in, now)
	x := xInstance{
		InstanceID: in.id, ImageID: in.image, State: xState{Code: st.code, Name: st.name},
		KeyName: in.keyName, AMILaunchIndex: in.launchIndex, InstanceType: in.itype, LaunchTime: timestamp(in.created),
		Placement: xPlacement{AvailabilityZone: in.zone, Tenancy: "default"}, Architecture: "x86_64",
		RootDeviceType: "ebs", RootDeviceName: "/dev/xvda", VirtualizationType: "hvm", ClientToken: in.token,
		Tags: xTags(in.tags), Hypervisor: "xen", StateReason: in.stateReason,
	}
	if im, ok := s.image(in.image); ok {
		x.Architecture = im.Architecture
	}
	if st != stateTerminated {
		x.SubnetID, x.VpcID = in.subnet, in.vpc
		x.PrivateIPAddress = in.privateIP
		if in.privateIP != "" {
			x.PrivateDNSName = "ip-" + strings.ReplaceAll(in.privateIP, ".", "-") + "." + rg.name + ".compute.internal"
		}
		if st == statePending || st == stateRunning {
			x.IPAddress = in.publicIP
			if in.publicIP != "" {
				x.DNSName = "ec2-" + strings.ReplaceAll(in.publicIP, ".", "-") + "." + rg.name + ".compute.amazonaws.com"
			}
		}
		for _, g := range in.groups {
			name := ""
			if grp := rg.groups[g]; grp != nil {
				name = grp.name
			}
			x.Groups = append(x.Groups, xGroupID{GroupID: g, GroupName: name})
		}
	}
	if st != statePending && st != stateRunning {
		x.Reason = in.transition
		if x.StateReason == nil {
			x.StateReason = &xStateReason{Code: "Client.UserInitiatedShutdown", Message: "Client.UserInitiatedShutdown: User initiated shutdown"}
		}
	}
	return x
}

func malformedInstance(id string) *apiError {
	return &apiError{status: 400, code: "InvalidInstanceID.Malformed", msg: fmt.Sprintf("Invalid id: \"%s\" (expecting \"i-...\")", id)}
}

func instancesNotFound(ids []string) *apiError {
	if len(ids) == 1 {
		return &apiError{status: 400, code: "InvalidInstanceID.NotFound", msg: fmt.Sprintf("The instance ID '%s' does not exist", ids[0])}
	}
	return &apiError{status: 400, code: "InvalidInstanceID.NotFound", msg: fmt.Sprintf("The instance IDs '%s' do not exist", strings.Join(ids, ", "))}
}

// seen says whether Describe calls show in yet (Options.VisibilityLag).
// Call with s.mu held.
func (s *Server) seen(in *instance, now time.Time) bool {
	return s.lag <= 0 || now.Sub(in.created) >= s.sim.Wall(s.lag)
}

// lookup resolves instance ids, failing the whole request on a malformed
// or unknown one as EC2 does; with describe, an instance too new to be
// seen is unknown. Call with s.mu held.
func (s *Server) lookup(rg *region, ids []string, describe bool) ([]*instance, error) {
	var out []*instance
	var unknown []string
	now := s.now()
	for _, id := range ids {
		if !validID("i", id) {
			return nil, malformedInstance(id)
		}
		if in := rg.instances[id]; in != nil && (!describe || s.seen(in, now)) {
			out = append(out, in)
		} else {
			unknown = append(unknown, id)
		}
	}
	if len(unknown) > 0 {
		return nil, instancesNotFound(unknown)
	}
	return out, nil
}

func (c *call) describeInstances() (requestIDSetter, error) {
	fs, limit, err := c.describing()
	if err != nil {
		return nil, err
	}
	ids := c.p.list("InstanceId")
	if len(ids) > 0 && c.p.has("MaxResults") {
		return nil, &apiError{status: 400, code: "InvalidParameterCombination", msg: "The parameter instancesSet cannot be used with the parameter maxResults"}
	}
	s := c.s
	s.mu.Lock()
	rg, now := s.region(c.region), s.now()
	s.sweep(rg, now)
	if _, err := s.lookup(rg, ids, true); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	if err := checkFilters(fs, s.instanceAttrs(rg, &instance{}, now)); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	type row struct {
		seq  uint64
		resv string
		x    xInstance
		grp  []xGroupID
	}
	var rows []row
	for _, in := range rg.sortedInstances() {
		if len(ids) > 0 && !slices.Contains(ids, in.id) || !s.seen(in, now) {
			continue
		}
		ok, err := matchAll(fs, s.instanceAttrs(rg, in, now))
		if err != nil {
			s.mu.Unlock()
			return nil, err
		}
		if ok {
			x := s.xInstance(rg, in, now)
			rows = append(rows, row{seq: in.seq, resv: in.resv, x: x, grp: x.Groups})
		}
	}
	s.mu.Unlock()
	pg, next, err := page(c, rows, func(r row) uint64 { return r.seq }, limit)
	if err != nil {
		return nil, err
	}
	out := &describeInstancesResponse{NextToken: next}
	for _, r := range pg {
		if n := len(out.Reservations); n > 0 && out.Reservations[n-1].ReservationID == r.resv {
			out.Reservations[n-1].Instances = append(out.Reservations[n-1].Instances, r.x)
			continue
		}
		out.Reservations = append(out.Reservations, xReservation{ReservationID: r.resv, OwnerID: s.account, Groups: r.grp, Instances: []xInstance{r.x}})
	}
	return out, nil
}

// instanceAttrs answers DescribeInstances' filters for in.
func (s *Server) instanceAttrs(rg *region, in *instance, now time.Time) attrs {
	one := func(v string) ([]string, bool) { return []string{v}, true }
	return func(f string) ([]string, bool) {
		switch f {
		case "instance-id":
			return one(in.id)
		case "instance-state-name":
			return one(s.state(in, now).name)
		case "instance-state-code":
			return one(strconv.Itoa(s.state(in, now).code))
		case "client-token":
			return one(in.token)
		case "availability-zone":
			return one(in.zone)
		case "subnet-id":
			return one(in.subnet)
		case "vpc-id":
			return one(in.vpc)
		case "instance-type":
			return one(in.itype)
		case "image-id":
			return one(in.image)
		case "key-name":
			return one(in.keyName)
		case "reservation-id":
			return one(in.resv)
		case "private-ip-address":
			return one(in.privateIP)
		case "ip-address":
			return one(in.publicIP)
		case "instance.group-id":
			return in.groups, true
		case "instance.group-name":
			var names []string
			for _, g := range in.groups {
				if grp := rg.groups[g]; grp != nil {
					names = append(names, grp.name)
				}
			}
			return names, true
		}
		return tagAttrs(in.tags, f)
	}
}

func (c *call) terminateInstances() (requestIDSetter, error) {
	ids := c.p.list("InstanceId")
	if len(ids) == 0 {
		return nil, missing("InstanceId")
	}
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	rg, now := s.region(c.region), s.now()
	s.sweep(rg, now)
	list, err := s.lookup(rg, ids, false)
	if err != nil {
		return nil, err
	}
	lat := s.Latency()
	out := &stateChangeResponse{}
	for _, in := range list {
		prev := s.state(in, now)
		if in.termAt.IsZero() || in.termAt.After(now) {
			in.termAt, in.goneAt = now, now.Add(s.sim.Wall(lat.Terminate))
			in.transition, in.stateReason = userInitiated(now), nil // Client.UserInitiatedShutdown
			if in.backed && in.started && !in.tearing && !in.powering && in.machine.ID != "" {
				in.tearing = true
				s.tearDown(c.region, in)
			}
		}
		cur := s.state(in, now)
		out.Instances = append(out.Instances, xStateChange{InstanceID: in.id,
			CurrentState: xState{Code: cur.code, Name: cur.name}, PreviousState: xState{Code: prev.code, Name: prev.name}})
	}
	return out, nil
}

func (c *call) getConsoleOutput() (requestIDSetter, error) {
	id := c.p.get("InstanceId")
	if id == "" {
		return nil, missing("InstanceId")
	}
	current, err := c.p.bool("Latest")
	if err != nil {
		return nil, err
	}
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	rg, now := s.region(c.region), s.now()
	s.sweep(rg, now)
	list, err := s.lookup(rg, []string{id}, true)
	if err != nil {
		return nil, err
	}
	in := list[0]
	text, at := in.consoleAt(now), now
	if !current {
		p := s.posted(in, now)
		text = p.text
		if !p.at.IsZero() {
			at = p.at
		}
	}
	out := &getConsoleOutputResponse{InstanceID: in.id, Timestamp: timestamp(at)}
	if text != "" {
		out.Output = base64.StdEncoding.EncodeToString([]byte(text))
	}
	return out, nil
}

// consolePost is the console output as EC2 posted it at a time.
type consolePost struct {
	at   time.Time // zero: nothing posted yet
	text string
}

// booted says whether the machine booted in this run: it reached
// running before it was stopped or terminated.
func (in *instance) booted() bool {
	b := in.bootAt
	return !b.IsZero() && (in.stopAt.IsZero() || !in.stopAt.Before(b)) && (in.termAt.IsZero() || !in.termAt.Before(b))
}

// consoleAt is what the console held at t (GetConsoleOutput with Latest):
// the output of this run's boot once it booted, else the run before's,
// else nothing.
func (in *instance) consoleAt(t time.Time) string {
	if in.booted() && !t.Before(in.bootAt) {
		return consoleText(in)
	}
	return in.prevConsole
}

// postTimes are when EC2 posts this run's console output (and the run
// before's, if still due): s.posting after the instance boots, stops
// and terminates. Call with s.mu held.
func (s *Server) postTimes(in *instance) []time.Time {
	d := s.sim.Wall(s.posting)
	out := slices.Clone(in.due)
	if in.booted() {
		out = append(out, in.bootAt.Add(d))
	}
	for _, t := range []time.Time{in.stopAt, in.termAt} {
		if !t.IsZero() {
			out = append(out, t.Add(d))
		}
	}
	return out
}

// posted is what GetConsoleOutput without Latest answers at now: the
// console as it was at EC2's latest post by now. Call with s.mu held.
func (s *Server) posted(in *instance, now time.Time) consolePost {
	var last time.Time
	for _, t := range s.postTimes(in) {
		if !t.After(now) && t.After(last) {
			last = t
		}
	}
	if last.IsZero() || !last.After(in.post.at) {
		return in.post
	}
	return consolePost{at: last, text: in.consoleAt(last)}
}

// newRun keeps the console of the run that ends as a stopped instance
// starts again at now: what it showed, what EC2 posted of it and the
// posts still due. Call with s.mu held, before start changes the
// instance.
func (s *Server) newRun(in *instance, now time.Time) {
	in.post = s.posted(in, now)
	var due []time.Time
	for _, t := range s.postTimes(in) {
		if t.After(now) {
			due = append(due, t)
		}
	}
	in.prevConsole, in.due, in.bootAt = in.consoleAt(now), due, time.Time{}
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// consoleText is what cloud-init prints on first boot, host keys included.
func consoleText(in *instance) string {
	host := in.id
	if in.privateIP != "" {
		host = "ip-" + strings.ReplaceAll(in.privateIP, ".", "-")
	}
	var b strings.Builder
	fmt.Fprintf(&b, "[    0.000000] Linux version 6.1.0-37-cloud-amd64 (debian-kernel@lists.debian.org)\r\n")
	fmt.Fprintf(&b, "[    2.131006] cloud-init[512]: Cloud-init v. 22.4.2 running 'init' at %s. Up 2.10 seconds.\r\n", in.runningAt.UTC().Format(time.RFC1123))
	b.WriteString("<14>Jan  1 00:00:00 cloud-init: #############################################################\r\n")
	b.WriteString("-----BEGIN SSH HOST KEY FINGERPRINTS-----\r\n")
	for _, k := range in.hostKeys {
		if pk, _, _, _, err := ssh.ParseAuthorizedKey([]byte(k)); err == nil {
			fmt.Fprintf(&b, "256 %s root@%s (%s)\r\n", ssh.FingerprintSHA256(pk), host, strings.ToUpper(strings.TrimPrefix(pk.Type(), "ssh-")))
		}
	}
	b.WriteString("-----END SSH HOST KEY FINGERPRINTS-----\r\n")
	b.WriteString("-----BEGIN SSH HOST KEY KEYS-----\r\n")
	for _, k := range in.hostKeys {
		fmt.Fprintf(&b, "%s root@%s\r\n", k, host)
	}
	b.WriteString("-----END SSH HOST KEY KEYS-----\r\n")
	fmt.Fprintf(&b, "[    9.412345] cloud-init[743]: Cloud-init v. 22.4.2 finished at %s. Datasource DataSourceEc2Local.  Up 9.40 seconds\r\n", in.runningAt.UTC().Format(time.RFC1123))
	return b.String()
}
