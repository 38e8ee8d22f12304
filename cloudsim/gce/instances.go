package gce

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"crypto/rand"
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

type instance struct {
	seq          uint64
	id           uint64
	project      string
	zone, name   string
	machineType  string
	image        string
	network      string
	labels       map[string]string
	fingerprint  string
	netTags      []string
	metadata     []metaItem
	created      time.Time
	bootAt       time.Time // the last insert or start
	runningAt    time.Time // PROVISIONING, STAGING until then
	stopAt       time.Time // zero unless stopped: STOPPING from then
	stoppedAt    time.Time // TERMINATED from then
	statusMsg    string    // statusMessage: why it is TERMINATED, when the cloud did it
	deleting     bool
	privateIP    string
	publicIP     string
	public       bool // it has an ephemeral external address while it runs
	hostKeys     []string
	guestAttrsOn bool

	backed   bool
	started  bool // the backer's Start returned
	machine  cloudsim.Machine
	powering bool // a Backer.PowerOff or PowerOn is under way
	off      bool // the machine is powered off
	tearing  bool // Backer.Stop was called
	torn     bool // and returned: the machine is gone
}

type metaItem struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// Name and label rules of Compute Engine.
var (
	resourceName = regexp.MustCompile(`^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$`)
	zoneName     = regexp.MustCompile(`^[a-z]+-[a-z]+[0-9]+-[a-z]$`)
	labelKey     = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`)
	labelValue   = regexp.MustCompile(`^[a-z0-9_-]{0,63}$`)
	machineType  = regexp.MustCompile(`^(e2|n1|n2|n2d|c2|c3|t2d)-(micro|small|medium|standard|highmem|highcpu)(-[0-9]+)?$|^(f1-micro|g1-small)$`)
	uuidish      = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
)

// zoneRegion is a zone's region (europe-west1-b → europe-west1).
func zoneRegion(zone string) string {
	if i := strings.LastIndexByte(zone, '-'); i > 0 {
		return zone[:i]
	}
	return zone
}

func instKey(project, zone, name string) string { return project + "/" + zone + "/" + name }

// vcpus are a machine type's vCPUs as the CPUS quota counts them: the
// size its name ends with (e2-standard-4), two for the e2 shared-core
// types, one for f1-micro and g1-small.
func vcpus(machineType string) int {
	if n, err := strconv.Atoi(machineType[strings.LastIndex(machineType, "-")+1:]); err == nil {
		return n
	}
	if strings.HasPrefix(machineType, "e2-") {
		return 2
	}
	return 1
}

// cpusUsed counts the vCPUs of project's instances in region that are
// not TERMINATED. Call with s.mu held.
func (s *Server) cpusUsed(project, region string) int {
	now, n := s.sim.Time(), 0
	for _, in := range s.instances {
		if in.project == project && zoneRegion(in.zone) == region && s.status(in, now) != "TERMINATED" {
			n += vcpus(in.machineType)
		}
	}
	return n
}

// status is the instance's status at now: STOPPING while it is deleted
// (as Compute Engine shows it) or stopped, TERMINATED once stopped (and,
// backed, its machine off). Call with s.mu held.
func (s *Server) status(in *instance, now time.Time) string {
	switch {
	case in.deleting:
		return "STOPPING"
	case !in.stopAt.IsZero() && !now.Before(in.stopAt):
		if !now.Before(in.stoppedAt) && !in.powering {
			return "TERMINATED"
		}
		return "STOPPING"
	case in.backed && !in.started:
		return "PROVISIONING"
	case in.backed && in.powering:
		return "STAGING"
	case now.Before(in.runningAt):
		if in.runningAt.Sub(now) < in.runningAt.Sub(in.bootAt)/4 {
			return "STAGING"
		}
		return "PROVISIONING"
	}
	return "RUNNING"
}

// last is the last segment of a URL or partial path.
func last(s string) string { return s[strings.LastIndexByte(s, '/')+1:] }

type insertBody struct {
	Name        string            `json:"name"`
	MachineType string            `json:"machineType"`
	Labels      map[string]string `json:"labels"`
	Tags        *struct {
		Items []string `json:"items"`
	} `json:"tags"`
	Metadata *struct {
		Items []metaItem `json:"items"`
	} `json:"metadata"`
	Disks []struct {
		Boot             bool `json:"boot"`
		InitializeParams *struct {
			SourceImage string `json:"sourceImage"`
		} `json:"initializeParams"`
	} `json:"disks"`
	NetworkInterfaces []struct {
		Network       string `json:"network"`
		AccessConfigs []struct {
			Type string `json:"type"`
			Name string `json:"name"`
		} `json:"accessConfigs"`
	} `json:"networkInterfaces"`
}

func (c *call) zone() (string, error) {
	z := c.rest[1]
	if !zoneName.MatchString(z) {
		return "", notFound(fmt.Sprintf("projects/%s/zones/%s", c.project, z))
	}
	return z, nil
}

func (c *call) insertInstance() (any, error) {
	zone, err := c.zone()
	if err != nil {
		return nil, err
	}
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if out, done, err := c.replay(); done {
		return out, err
	}
	var b insertBody
	if err := c.decode(&b); err != nil {
		return nil, err
	}
	if !resourceName.MatchString(b.Name) {
		return nil, invalidField("resource.name", b.Name, "Must be a match of regex '[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?'")
	}
	mt := last(b.MachineType)
	if !machineType.MatchString(mt) {
		return nil, invalidField("resource.machineType", b.MachineType,
			fmt.Sprintf("Machine type with name '%s' does not exist in zone '%s'.", mt, zone))
	}
	for k, v := range b.Labels {
		if !labelKey.MatchString(k) || !labelValue.MatchString(v) {
			return nil, invalidField("resource.labels", k+"="+v,
				"Label keys must start with a lowercase letter and contain only lowercase letters, digits, underscores and dashes; values only those, at most 63 characters.")
		}
	}
	if len(b.Labels) > 64 {
		return nil, invalidField("resource.labels", fmt.Sprint(len(b.Labels)), "At most 64 labels.")
	}
	image := ""
	for _, d := range b.Disks {
		if d.Boot && d.InitializeParams != nil {
			image = d.InitializeParams.SourceImage
		}
	}
	if image == "" {
		return nil, badRequest("Invalid value for field 'resource.disks': ''. Boot disk must be specified.")
	}
	if _, err := s.imageByLink(image); err != nil {
		return nil, err
	}
	if len(b.NetworkInterfaces) != 1 {
		return nil, invalidField("resource.networkInterfaces", fmt.Sprint(len(b.NetworkInterfaces)), "Exactly one network interface is supported.")
	}
	network := last(b.NetworkInterfaces[0].Network)
	if network == "" {
		network = "default"
	}
	if !slices.Contains(s.opts.Networks, network) {
		return nil, notFound(fmt.Sprintf("projects/%s/global/networks/%s", c.project, network))
	}
	public := len(b.NetworkInterfaces[0].AccessConfigs) > 0
	key := instKey(c.project, zone, b.Name)
	if s.instances[key] != nil {
		return nil, alreadyExists(fmt.Sprintf("projects/%s/zones/%s/instances/%s", c.project, zone, b.Name))
	}
	if region := zoneRegion(zone); s.opts.CPUs > 0 && s.cpusUsed(c.project, region)+vcpus(mt) > s.opts.CPUs {
		return nil, overQuota("CPUS", s.opts.CPUs, region)
	}
	in := &instance{seq: s.nextSeq(), project: c.project, zone: zone, name: b.Name, machineType: mt, image: image,
		network: network, labels: maps.Clone(b.Labels), created: s.sim.Time(), backed: s.sim.Backer != nil, public: public}
	in.id = 4_000_000_000_000_000 + in.seq
	in.fingerprint = fmt.Sprintf("%016x", in.seq*2654435761)
	if b.Tags != nil {
		in.netTags = slices.Clone(b.Tags.Items)
	}
	if b.Metadata != nil {
		in.metadata = slices.Clone(b.Metadata.Items)
	}
	for _, m := range in.metadata {
		if m.Key == "enable-guest-attributes" && strings.EqualFold(m.Value, "true") {
			in.guestAttrsOn = true
		}
	}
	lat := s.Latency()
	in.bootAt, in.runningAt = in.created, in.created.Add(s.sim.Wall(lat.Launch))
	if !in.backed {
		in.privateIP = fmt.Sprintf("10.%d.%d.%d", 128+in.seq/65536%64, in.seq/256%256, in.seq%256)
		if public {
			in.publicIP = externalIP(in.seq)
		}
		in.hostKeys = []string{newHostKey()}
	}
	s.instances[key] = in
	op := s.newOp(c, zone, "insert", c.link("zones", zone, "instances", in.name), in.id, lat.Launch)
	op.ready = func() bool { return !in.backed || in.started }
	s.remember(c, op)
	if c.failed != nil {
		// It never gets a machine: the insert succeeds, and the instance
		// is TERMINATED when it would have run.
		in.started = true
		in.stopAt, in.stoppedAt = in.runningAt, in.runningAt
		in.statusMsg = cmp.Or(c.failed.Reason, hostError)
		return c.xOp(op), nil
	}
	if in.backed {
		s.startMachine(in, op, sshKeysFor(in.metadata, "root"))
	}
	return c.xOp(op), nil
}

// sshKeysFor are the keys the ssh-keys metadata item gives user, one per
// line ("user:ssh-ed25519 AAAA... comment").
func sshKeysFor(items []metaItem, user string) string {
	var keys []string
	for _, m := range items {
		if m.Key != "ssh-keys" {
			continue
		}
		for line := range strings.SplitSeq(m.Value, "\n") {
			if u, k, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && u == user {
				keys = append(keys, k)
			}
		}
	}
	return strings.Join(keys, "\n")
}

// newHostKey makes an unbacked instance's SSH host key.
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
func (s *Server) startMachine(in *instance, op *operation, authorizedKey string) {
	region := "gce:" + zoneRegion(in.zone)
	s.regions[region] = true
	s.Go(func(ctx context.Context) {
		m, err := s.sim.Backer.Start(ctx, region, in.name, authorizedKey)
		s.mu.Lock()
		in.started = true
		if err != nil {
			if !op.done {
				op.fail("ZONE_RESOURCE_POOL_EXHAUSTED", fmt.Sprintf("The zone 'projects/%s/zones/%s' does not have enough resources available to fulfill the request.", in.project, in.zone), 503)
			}
			delete(s.instances, instKey(in.project, in.zone, in.name))
			s.mu.Unlock()
			return
		}
		in.machine = m
		in.publicIP, in.privateIP = m.Address, m.Address
		if m.PrivateAddress != "" {
			in.privateIP = m.PrivateAddress
		}
		in.hostKeys = slices.Clone(m.HostKeys)
		s.mu.Unlock()
		s.afterMachine(in)
		s.tick()
		// The firewall of a region that had no machine yet.
		s.allow()
	})
}

// afterMachine brings the machine in line with what happened to the
// instance while a backer call on it was under way: torn down if it is
// being deleted, powered off if it was stopped.
func (s *Server) afterMachine(in *instance) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case in.machine.ID == "" || in.tearing || in.powering:
	case in.deleting:
		in.tearing = true
		s.tearDown(in)
	case !in.stopAt.IsZero() && !in.off:
		s.powerOff(in)
	}
}

// tearDown tears a backed machine down in the background; the instance
// stays STOPPING until it is gone.
func (s *Server) tearDown(in *instance) {
	s.Go(func(ctx context.Context) {
		// A failed stop leaves a machine the backer's Destroy removes.
		_ = s.sim.Backer.Stop(ctx, "gce:"+zoneRegion(in.zone), in.machine.ID)
		s.mu.Lock()
		in.torn = true
		s.mu.Unlock()
		s.tick()
	})
}

type xAccessConfig struct {
	Kind        string `json:"kind"`
	Type        string `json:"type"`
	Name        string `json:"name"`
	NatIP       string `json:"natIP,omitempty"`
	NetworkTier string `json:"networkTier"`
}

type xNetworkInterface struct {
	Kind          string          `json:"kind"`
	Network       string          `json:"network"`
	Subnetwork    string          `json:"subnetwork"`
	NetworkIP     string          `json:"networkIP,omitempty"`
	Name          string          `json:"name"`
	AccessConfigs []xAccessConfig `json:"accessConfigs,omitempty"`
}

type xInstance struct {
	Kind              string              `json:"kind"`
	ID                string              `json:"id"`
	CreationTimestamp string              `json:"creationTimestamp"`
	Name              string              `json:"name"`
	Tags              map[string]any      `json:"tags"`
	MachineType       string              `json:"machineType"`
	Status            string              `json:"status"`
	Zone              string              `json:"zone"`
	NetworkInterfaces []xNetworkInterface `json:"networkInterfaces"`
	Disks             []map[string]any    `json:"disks"`
	Metadata          map[string]any      `json:"metadata"`
	SelfLink          string              `json:"selfLink"`
	Labels            map[string]string   `json:"labels,omitempty"`
	LabelFingerprint  string              `json:"labelFingerprint"`
	StatusMessage     string              `json:"statusMessage,omitempty"`
}

// xInst renders in. Call with s.mu held.
func (c *call) xInst(in *instance, now time.Time) xInstance {
	st := c.s.status(in, now)
	ni := xNetworkInterface{Kind: "compute#networkInterface", Name: "nic0",
		Network:    c.link("global", "networks", in.network),
		Subnetwork: c.link("regions", zoneRegion(in.zone), "subnetworks", in.network)}
	running := st == "RUNNING" || st == "STOPPING"
	if running || st == "TERMINATED" {
		// A stopped instance keeps its internal address.
		ni.NetworkIP = in.privateIP
	}
	if in.public {
		ac := xAccessConfig{Kind: "compute#accessConfig", Type: "ONE_TO_ONE_NAT", Name: "External NAT", NetworkTier: "PREMIUM"}
		if running {
			// An ephemeral external address: gone once stopped.
			ac.NatIP = in.publicIP
		}
		ni.AccessConfigs = []xAccessConfig{ac}
	}
	msg := ""
	if st == "TERMINATED" {
		msg = in.statusMsg
	}
	tags := map[string]any{"fingerprint": in.fingerprint}
	if len(in.netTags) > 0 {
		tags["items"] = in.netTags
	}
	meta := map[string]any{"kind": "compute#metadata", "fingerprint": in.fingerprint}
	if len(in.metadata) > 0 {
		meta["items"] = in.metadata
	}
	return xInstance{Kind: "compute#instance", ID: fmt.Sprint(in.id), CreationTimestamp: rfc3339(in.created),
		Name: in.name, Tags: tags, MachineType: c.link("zones", in.zone, "machineTypes", in.machineType),
		Status: st, Zone: c.link("zones", in.zone), NetworkInterfaces: []xNetworkInterface{ni},
		Disks: []map[string]any{{"kind": "compute#attachedDisk", "type": "PERSISTENT", "mode": "READ_WRITE",
			"boot": true, "autoDelete": true, "deviceName": "persistent-disk-0",
			"source": c.link("zones", in.zone, "disks", in.name)}},
		Metadata: meta, SelfLink: c.link("zones", in.zone, "instances", in.name),
		Labels: maps.Clone(in.labels), LabelFingerprint: in.fingerprint, StatusMessage: msg}
}

func (c *call) lookupInstance() (*instance, error) {
	zone, err := c.zone()
	if err != nil {
		return nil, err
	}
	in := c.s.instances[instKey(c.project, zone, c.rest[3])]
	if in == nil {
		return nil, notFound(fmt.Sprintf("projects/%s/zones/%s/instances/%s", c.project, zone, c.rest[3]))
	}
	return in, nil
}

func (c *call) getInstance() (any, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	in, err := c.lookupInstance()
	if err != nil {
		return nil, err
	}
	return c.xInst(in, c.s.sim.Time()), nil
}

func (c *call) deleteInstance() (any, error) {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if out, done, err := c.replay(); done {
		return out, err
	}
	in, err := c.lookupInstance()
	if err != nil {
		return nil, err
	}
	op := s.newOp(c, in.zone, "delete", c.link("zones", in.zone, "instances", in.name), in.id, s.Latency().Terminate)
	op.apply = func() { delete(s.instances, instKey(in.project, in.zone, in.name)) }
	s.remember(c, op)
	in.deleting = true
	op.ready = func() bool { return !in.backed || in.torn || (in.started && in.machine.ID == "") }
	if in.backed && in.started && !in.tearing && !in.powering && in.machine.ID != "" {
		in.tearing = true
		s.tearDown(in)
	}
	return c.xOp(op), nil
}

func (c *call) guestAttributes() (any, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	in, err := c.lookupInstance()
	if err != nil {
		return nil, err
	}
	qp := c.q("queryPath")
	path := fmt.Sprintf("projects/%s/zones/%s/instances/%s/guestAttributes/%s", c.project, in.zone, in.name, qp)
	switch {
	case !in.guestAttrsOn:
		return nil, badRequest("Guest attributes are disabled. Set the metadata item enable-guest-attributes to TRUE.")
	case qp != "hostkeys/":
		return nil, notFound(path)
	case c.s.status(in, c.s.sim.Time()) != "RUNNING" || len(in.hostKeys) == 0:
		// The guest agent has not written them yet.
		return nil, notFound(path)
	}
	var items []map[string]string
	for _, k := range in.hostKeys {
		typ, rest, _ := strings.Cut(k, " ")
		key, _, _ := strings.Cut(rest, " ")
		items = append(items, map[string]string{"namespace": "hostkeys", "key": typ, "value": key})
	}
	return map[string]any{"kind": "compute#guestAttributes", "queryPath": qp,
		"selfLink":   c.link("zones", in.zone, "instances", in.name, "guestAttributes", qp),
		"queryValue": map[string]any{"items": items}}, nil
}

// matching lists the project's instances (of zone, if set) that pass the
// call's filter. Call with s.mu held.
func (c *call) matching(zone string) ([]*instance, error) {
	f, err := parseFilter(c.q("filter"))
	if err != nil {
		return nil, err
	}
	now := c.s.sim.Time()
	var out []*instance
	for _, in := range c.s.sortedInstances() {
		if in.project != c.project || zone != "" && in.zone != zone {
			continue
		}
		if f.match(func(field string) (string, bool) {
			switch {
			case field == "name":
				return in.name, true
			case field == "status":
				return c.s.status(in, now), true
			case strings.HasPrefix(field, "labels."):
				v, ok := in.labels[strings.TrimPrefix(field, "labels.")]
				return v, ok
			}
			return "", false
		}) {
			out = append(out, in)
		}
	}
	return out, nil
}

func (c *call) listInstances() (any, error) {
	zone, err := c.zone()
	if err != nil {
		return nil, err
	}
	c.s.mu.Lock()
	all, err := c.matching(zone)
	c.s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	items, next, err := page(c, all)
	if err != nil {
		return nil, err
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	now := c.s.sim.Time()
	out := map[string]any{"kind": "compute#instanceList", "id": c.link("zones", zone, "instances"),
		"selfLink": c.link("zones", zone, "instances")}
	var xs []xInstance
	for _, in := range items {
		xs = append(xs, c.xInst(in, now))
	}
	if len(xs) > 0 {
		out["items"] = xs
	}
	if next != "" {
		out["nextPageToken"] = next
	}
	return out, nil
}

func (c *call) aggregatedInstances() (any, error) {
	c.s.mu.Lock()
	all, err := c.matching("")
	c.s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	// An unreachable zone's instances are left out, as Compute Engine
	// leaves them out; only the warning says so.
	unreachable := map[string]bool{}
	if f := c.unreachable; f != nil {
		all = slices.DeleteFunc(all, func(in *instance) bool {
			if f.Reason == "" || f.Reason == in.zone {
				unreachable["zones/"+in.zone] = true
				return true
			}
			return false
		})
		if f.Reason != "" {
			unreachable["zones/"+f.Reason] = true
		}
	}
	items, next, err := page(c, all)
	if err != nil {
		return nil, err
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	now := c.s.sim.Time()
	byZone := map[string][]xInstance{}
	for _, in := range items {
		byZone["zones/"+in.zone] = append(byZone["zones/"+in.zone], c.xInst(in, now))
	}
	scoped := map[string]any{}
	for z, xs := range byZone {
		scoped[z] = map[string]any{"instances": xs}
	}
	for z := range unreachable {
		scoped[z] = map[string]any{"warning": map[string]any{"code": "UNREACHABLE",
			"message": fmt.Sprintf("The resource '%s' is not reachable; the results for it are not returned.", c.link(z)),
			"data":    []map[string]string{{"key": "scope", "value": z}}}}
	}
	out := map[string]any{"kind": "compute#instanceAggregatedList", "id": c.link("aggregated", "instances"),
		"selfLink": c.link("aggregated", "instances"), "items": scoped}
	if len(unreachable) > 0 {
		out["unreachables"] = slices.Sorted(maps.Keys(unreachable))
	}
	if next != "" {
		out["nextPageToken"] = next
	}
	return out, nil
}

// Plant creates an instance in zone outside any client (another tool's,
// or what a crash between create and label leaves): the default image,
// no network tags, exactly labels. It returns "zone/name".
func (s *Server) Plant(ctx context.Context, project, zone string, labels map[string]string) (string, error) {
	s.mu.Lock()
	name := fmt.Sprintf("planted-%d", s.seq+1)
	s.mu.Unlock()
	body := fmt.Sprintf(`{"name":%q,"machineType":"zones/%s/machineTypes/e2-small","labels":%s,
		"disks":[{"boot":true,"initializeParams":{"sourceImage":"projects/debian-cloud/global/images/family/debian-12"}}],
		"networkInterfaces":[{"network":"global/networks/default","accessConfigs":[{"type":"ONE_TO_ONE_NAT"}]}]}`,
		name, zone, mustJSON(labels))
	c := &call{ctx: ctx, s: s, base: "https://compute.googleapis.com/compute/v1", project: project,
		rest: []string{"zones", zone, "instances"}, query: map[string][]string{}, body: []byte(body)}
	if _, err := c.insertInstance(); err != nil {
		return "", fmt.Errorf("cloudsim/gce: plant: %w", err)
	}
	return zone + "/" + name, nil
}

// Remove deletes an instance ("zone/name") outside any client: someone
// deleting it in the console, a node killed behind transit's back.
func (s *Server) Remove(ctx context.Context, project, id string) error {
	zone, name, ok := strings.Cut(id, "/")
	if !ok {
		return fmt.Errorf("cloudsim/gce: instance %q: want zone/name", id)
	}
	c := &call{ctx: ctx, s: s, base: "https://compute.googleapis.com/compute/v1", project: project,
		rest: []string{"zones", zone, "instances", name}, query: map[string][]string{}}
	_, err := c.deleteInstance()
	return err
}
