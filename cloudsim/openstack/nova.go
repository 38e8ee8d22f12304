package openstack

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/cloudtransit/transit/cloudsim"
)

type server struct {
	seq                    uint64
	id, name               string
	region, project, zone  string
	flavor, image, keyName string
	metadata               map[string]string
	groups                 []string // security group ids
	portID                 string
	created                time.Time
	activeAt, goneAt       time.Time
	restart                bool      // activeAt is a start's (SHUTOFF, powering-on until then), not the build's
	ran                    bool      // it was ACTIVE once (Nova's launched_at)
	host                   bool      // it was scheduled to a host
	stopAt, offAt          time.Time // zero unless stopped: powering-off from stopAt, SHUTOFF from offAt
	softAt, softDone       time.Time // zero unless soft-deleted: soft-deleting from softAt, SOFT_DELETED from softDone
	reclaimAt              time.Time // when a SOFT_DELETED server is deleted for good
	deleting               bool
	fixedIP                string
	hostKeys               []string
	failed                 string    // the fault of a server Nova gave up on
	failAt                 time.Time // ERROR from then (zero: at once)

	backed   bool
	started  bool // the backer's Start returned
	machine  cloudsim.Machine
	powering bool // a Backer.PowerOff or PowerOn is under way
	off      bool // the machine is powered off
	tearing  bool // Backer.Stop was called
	torn     bool // and returned: the machine is gone
}

type keypair struct {
	seq                   uint64
	project, name, public string
	fingerprint           string
}

// status is the server's Nova status at now. Call with s.mu held.
func (s *Server) status(sv *server, now time.Time) string {
	st, _ := s.state(sv, now)
	return st
}

// state is the server's Nova status and task state at now. A backed
// server is SHUTOFF or SOFT_DELETED only once its machine is off, and
// ACTIVE once it is up. Call with s.mu held.
func (s *Server) state(sv *server, now time.Time) (status, task string) {
	status, task = s.vmState(sv, now)
	if sv.deleting {
		task = "deleting"
	}
	return status, task
}

func (s *Server) vmState(sv *server, now time.Time) (status, task string) {
	prior := "ACTIVE"
	if !sv.stopAt.IsZero() {
		prior = "SHUTOFF"
	}
	switch {
	case sv.failed != "" && !now.Before(sv.failAt):
		return "ERROR", ""
	case !sv.softAt.IsZero():
		if !now.Before(sv.softDone) && !sv.powering {
			return "SOFT_DELETED", ""
		}
		return prior, "soft-deleting"
	case !sv.stopAt.IsZero():
		if !now.Before(sv.offAt) && !sv.powering {
			return "SHUTOFF", ""
		}
		return "ACTIVE", "powering-off"
	case sv.restart && (sv.powering || now.Before(sv.activeAt)):
		return "SHUTOFF", "powering-on"
	case sv.backed && !sv.started, now.Before(sv.activeAt):
		return "BUILD", "spawning"
	}
	return "ACTIVE", ""
}

// vmStateName is Nova's vm_state of a status.
func vmStateName(status string) string {
	switch status {
	case "BUILD":
		return "building"
	case "SHUTOFF":
		return "stopped"
	case "ERROR":
		return "error"
	case "SOFT_DELETED":
		return "soft-delete"
	}
	return "active"
}

// tick notes the servers that ran, deletes the soft-deleted ones whose
// reclaim time has come, and removes the servers whose deletion is done.
func (s *Server) tick() {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.sim.Time()
	for _, sv := range s.servers {
		switch st := s.status(sv, now); {
		case st == "ACTIVE":
			sv.ran = true
		case st == "SOFT_DELETED" && !now.Before(sv.reclaimAt) && !sv.deleting:
			s.hardDelete(sv, now)
		}
	}
	for id, sv := range s.servers {
		if sv.deleting && !now.Before(sv.goneAt) && (!sv.backed || sv.torn || sv.started && sv.machine.ID == "") {
			delete(s.servers, id)
			for _, f := range s.fips {
				if f.portID == sv.portID {
					f.portID, f.fixedIP = "", ""
				}
			}
		}
	}
}

func (c *call) listFlavors() (reply, error) {
	var out []map[string]any
	for _, f := range c.s.opts.Flavors {
		out = append(out, map[string]any{"id": f.ID, "name": f.Name, "vcpus": f.VCPUs, "ram": f.RAM, "disk": f.Disk,
			"OS-FLV-EXT-DATA:ephemeral": 0, "swap": "", "rxtx_factor": 1.0, "os-flavor-access:is_public": true,
			"links": []map[string]string{{"rel": "self", "href": c.url("compute/v2.1", "flavors", f.ID)}}})
	}
	return reply{200, map[string]any{"flavors": out}}, nil
}

func keyKey(project, name string) string { return project + "/" + name }

var keypairName = regexp.MustCompile(`^[A-Za-z0-9 _.@-]{1,255}$`)

func (c *call) createKeypair() (reply, error) {
	var b struct {
		Keypair struct {
			Name      string `json:"name"`
			PublicKey string `json:"public_key"`
		} `json:"keypair"`
	}
	if err := c.decode(&b); err != nil {
		return reply{}, err
	}
	k := b.Keypair
	if !keypairName.MatchString(k.Name) {
		return reply{}, badRequest("Keypair data is invalid: Keypair name contains unsafe characters")
	}
	pk, _, _, _, err := ssh.ParseAuthorizedKey([]byte(k.PublicKey))
	if err != nil {
		return reply{}, badRequest("Keypair data is invalid: failed to generate fingerprint")
	}
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	key := keyKey(c.project, k.Name)
	if s.keypairs[key] != nil {
		return reply{}, conflict("conflictingRequest", fmt.Sprintf("Key pair '%s' already exists.", k.Name))
	}
	kp := &keypair{seq: s.nextSeq(), project: c.project, name: k.Name, public: strings.TrimSpace(k.PublicKey),
		fingerprint: ssh.FingerprintLegacyMD5(pk)}
	s.keypairs[key] = kp
	return reply{200, map[string]any{"keypair": xKeypair(kp)}}, nil
}

func xKeypair(kp *keypair) map[string]any {
	return map[string]any{"name": kp.name, "public_key": kp.public, "fingerprint": kp.fingerprint,
		"user_id": projectID("user"), "type": "ssh"}
}

func (c *call) getKeypair() (reply, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	kp := c.s.keypairs[keyKey(c.project, c.rest[1])]
	if kp == nil {
		return reply{}, itemNotFound(fmt.Sprintf("Keypair %s not found for user %s", c.rest[1], projectID("user")))
	}
	return reply{200, map[string]any{"keypair": xKeypair(kp)}}, nil
}

func (c *call) deleteKeypair() (reply, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	key := keyKey(c.project, c.rest[1])
	if c.s.keypairs[key] == nil {
		return reply{}, itemNotFound(fmt.Sprintf("Keypair %s not found for user %s", c.rest[1], projectID("user")))
	}
	delete(c.s.keypairs, key)
	return reply{202, nil}, nil
}

type createBody struct {
	Server struct {
		Name             string            `json:"name"`
		ImageRef         string            `json:"imageRef"`
		FlavorRef        string            `json:"flavorRef"`
		AvailabilityZone string            `json:"availability_zone"`
		Metadata         map[string]string `json:"metadata"`
		KeyName          string            `json:"key_name"`
		UserData         string            `json:"user_data"`
		SecurityGroups   []struct {
			Name string `json:"name"`
		} `json:"security_groups"`
		Networks []struct {
			UUID string `json:"uuid"`
		} `json:"networks"`
	} `json:"server"`
}

func (c *call) createServer() (reply, error) {
	var b createBody
	if err := c.decode(&b); err != nil {
		return reply{}, err
	}
	r := b.Server
	switch {
	case r.Name == "" || len(r.Name) > 255:
		return reply{}, badRequest("Invalid input for field/attribute name.")
	case len(r.Metadata) > 128:
		return reply{}, &apiError{403, "forbidden", "Quota exceeded for metadata_items: Requested 129, but already used 0 of 128 metadata_items"}
	case r.UserData != "":
		if _, err := base64.StdEncoding.DecodeString(r.UserData); err != nil {
			return reply{}, badRequest("User data needs to be valid base 64.")
		}
	}
	for k, v := range r.Metadata {
		if k == "" || len(k) > 255 || len(v) > 255 {
			return reply{}, badRequest(fmt.Sprintf("Invalid input for field/attribute metadata. Value: %q.", k))
		}
	}
	if !slices.ContainsFunc(c.s.opts.Images, func(im Image) bool { return im.ID == r.ImageRef }) {
		return reply{}, badRequest("Can not find requested image")
	}
	if !slices.ContainsFunc(c.s.opts.Flavors, func(f Flavor) bool { return f.ID == r.FlavorRef }) {
		return reply{}, badRequest(fmt.Sprintf("Flavor %s could not be found.", r.FlavorRef))
	}
	zone := r.AvailabilityZone
	if zone == "" {
		zone = c.s.opts.Zones[0]
	}
	if !slices.Contains(c.s.opts.Zones, zone) {
		return reply{}, badRequest("The requested availability zone is not available")
	}
	if len(r.Networks) > 1 {
		return reply{}, badRequest("Only one network is supported.")
	}
	for _, n := range r.Networks {
		if n.UUID != privateNetworkID {
			return reply{}, badRequest(fmt.Sprintf("Network %s could not be found.", n.UUID))
		}
	}
	s := c.s
	lat := s.Latency()
	s.mu.Lock()
	defer s.mu.Unlock()
	var groups []string
	for _, g := range r.SecurityGroups {
		found := ""
		for _, sg := range s.groups {
			if sg.project == c.project && sg.region == c.region && (sg.id == g.Name || sg.name == g.Name) {
				if found != "" && sg.id != g.Name {
					return reply{}, conflict("conflictingRequest", fmt.Sprintf("Multiple security_group matches found for name '%s', use an ID to be more specific.", g.Name))
				}
				found = sg.id
			}
		}
		if found == "" {
			return reply{}, badRequest(fmt.Sprintf("Security group %s not found for project %s.", g.Name, projectID(c.project)))
		}
		groups = append(groups, found)
	}
	if len(groups) == 0 {
		groups = []string{s.defaultGroup(c)}
	}
	var kp *keypair
	if r.KeyName != "" {
		if kp = s.keypairs[keyKey(c.project, r.KeyName)]; kp == nil {
			return reply{}, badRequest("Invalid key_name provided.")
		}
	}
	now := s.sim.Time()
	sv := &server{seq: s.nextSeq(), id: newID(), name: r.Name, region: c.region, project: c.project, zone: zone,
		flavor: r.FlavorRef, image: r.ImageRef, keyName: r.KeyName, metadata: maps.Clone(r.Metadata), groups: groups,
		portID: newID(), created: now, activeAt: now.Add(s.sim.Wall(lat.Launch)), backed: s.sim.Backer != nil}
	if sv.metadata == nil {
		sv.metadata = map[string]string{}
	}
	if !sv.backed {
		sv.fixedIP = fmt.Sprintf("10.0.%d.%d", sv.seq/250%250, 2+sv.seq%250)
		sv.hostKeys = []string{newHostKey()}
	}
	s.servers[sv.id] = sv
	if c.failed != nil {
		// The scheduler finds no host for it: ERROR when it would have
		// been ACTIVE, and no machine.
		sv.started, sv.failAt = true, sv.activeAt
		sv.failed = cmp.Or(c.failed.Reason, noValidHost)
	} else if !sv.backed {
		sv.host = true
	}
	if sv.backed && c.failed == nil {
		pub := ""
		if kp != nil {
			pub = kp.public
		}
		s.startMachine(sv, pub)
	}
	return reply{202, map[string]any{"server": map[string]any{
		"id": sv.id, "OS-DCF:diskConfig": "MANUAL", "adminPass": "x" + sv.id[:11],
		"security_groups": xGroupNames(s, groups),
		"links":           []map[string]string{{"rel": "self", "href": c.url("compute/v2.1", "servers", sv.id)}},
	}}}, nil
}

func xGroupNames(s *Server, ids []string) []map[string]string {
	var out []map[string]string
	for _, id := range ids {
		if g := s.groups[id]; g != nil {
			out = append(out, map[string]string{"name": g.name})
		}
	}
	return out
}

// newHostKey makes an unbacked server's SSH host key.
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

// startMachine boots a backed server's machine in the background. Call
// with s.mu held.
func (s *Server) startMachine(sv *server, authorizedKey string) {
	region := "openstack:" + sv.region
	s.regions[region] = true
	s.Go(func(ctx context.Context) {
		m, err := s.sim.Backer.Start(ctx, region, sv.name, authorizedKey)
		s.mu.Lock()
		sv.started = true
		if err != nil {
			sv.failed = noValidHost
			s.mu.Unlock()
			return
		}
		sv.machine, sv.host = m, true
		sv.fixedIP = m.Address
		if m.PrivateAddress != "" {
			sv.fixedIP = m.PrivateAddress
		}
		sv.hostKeys = slices.Clone(m.HostKeys)
		s.mu.Unlock()
		s.afterMachine(sv)
		s.allow()
	})
}

// noValidHost is the fault of a server Nova could not schedule.
const noValidHost = "No valid host was found. There are not enough hosts available."

// afterMachine brings the machine in line with what happened to the
// server while a backer call on it was under way: torn down if it is
// deleted, powered off if it was stopped or soft-deleted, on if it was
// started or restored.
func (s *Server) afterMachine(sv *server) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case sv.machine.ID == "" || sv.tearing || sv.powering:
	case sv.deleting:
		sv.tearing = true
		s.tearDown(sv)
	case (!sv.stopAt.IsZero() || !sv.softAt.IsZero()) && !sv.off:
		s.powerOff(sv)
	case sv.stopAt.IsZero() && sv.softAt.IsZero() && sv.off:
		s.powerOn(sv)
	}
}

// tearDown tears a backed machine down in the background.
func (s *Server) tearDown(sv *server) {
	s.Go(func(ctx context.Context) {
		// A failed stop leaves a machine the backer's Destroy removes.
		_ = s.sim.Backer.Stop(ctx, "openstack:"+sv.region, sv.machine.ID)
		s.mu.Lock()
		sv.torn = true
		s.mu.Unlock()
	})
}

// xServer is a server as Nova shows it. Call with s.mu held.
func (c *call) xServer(sv *server, now time.Time) map[string]any {
	s := c.s
	status, taskState := s.state(sv, now)
	task, vm, power := any(nil), vmStateName(status), 1
	if taskState != "" {
		task = taskState
	}
	switch status {
	case "BUILD", "ERROR":
		power = 0 // NOSTATE
	case "SHUTOFF", "SOFT_DELETED":
		power = 4 // SHUTDOWN
	}
	addrs := map[string]any{}
	if sv.fixedIP != "" {
		list := []map[string]any{{"version": 4, "addr": sv.fixedIP, "OS-EXT-IPS:type": "fixed",
			"OS-EXT-IPS-MAC:mac_addr": "fa:16:3e:" + sv.id[:2] + ":" + sv.id[2:4] + ":" + sv.id[4:6]}}
		for _, f := range sortedBySeq(s.fips, func(v *floatingIP) uint64 { return v.seq }) {
			if f.portID == sv.portID {
				list = append(list, map[string]any{"version": 4, "addr": f.address, "OS-EXT-IPS:type": "floating",
					"OS-EXT-IPS-MAC:mac_addr": "fa:16:3e:" + sv.id[:2] + ":" + sv.id[2:4] + ":" + sv.id[4:6]})
			}
		}
		addrs[PrivateNetwork] = list
	}
	out := map[string]any{
		"id": sv.id, "name": sv.name, "status": status, "tenant_id": projectID(sv.project), "user_id": projectID("user"),
		"metadata": sv.metadata, "hostId": "", "created": sv.created.UTC().Format(time.RFC3339),
		"updated": now.UTC().Format(time.RFC3339), "addresses": addrs, "accessIPv4": "", "accessIPv6": "",
		"image":    map[string]any{"id": sv.image},
		"flavor":   map[string]any{"id": sv.flavor},
		"key_name": nilIfEmpty(sv.keyName), "security_groups": xGroupNames(s, sv.groups),
		"OS-EXT-AZ:availability_zone": sv.zone, "OS-EXT-STS:task_state": task, "OS-EXT-STS:vm_state": vm,
		"OS-EXT-STS:power_state": power, "OS-DCF:diskConfig": "MANUAL", "config_drive": "", "progress": 0,
		"os-extended-volumes:volumes_attached": []any{},
		"links":                                []map[string]string{{"rel": "self", "href": c.url("compute/v2.1", "servers", sv.id)}},
	}
	if sv.failed != "" {
		out["fault"] = map[string]any{"code": 500, "message": sv.failed, "created": now.UTC().Format(time.RFC3339)}
	}
	return out
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func (c *call) lookupServer(id string) (*server, error) {
	sv := c.s.servers[id]
	if sv == nil || sv.project != c.project || sv.region != c.region {
		return nil, itemNotFound("Instance " + id + " could not be found.")
	}
	return sv, nil
}

func (c *call) listServers() (reply, error) {
	var nameRE *regexp.Regexp
	if n := c.q("name"); n != "" {
		re, err := regexp.Compile(n)
		if err != nil {
			return reply{}, badRequest("Invalid filter: name " + n)
		}
		nameRE = re
	}
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.sim.Time()
	var all []*server
	for _, sv := range sortedBySeq(s.servers, func(v *server) uint64 { return v.seq }) {
		if sv.project == c.project && sv.region == c.region && (nameRE == nil || nameRE.MatchString(sv.name)) {
			all = append(all, sv)
		}
	}
	return listReply(c, all, func(sv *server) string { return sv.id }, c.url("compute/v2.1", "servers", "detail"), "servers", func(sv *server) map[string]any { return c.xServer(sv, now) })
}

func (c *call) getServer() (reply, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	sv, err := c.lookupServer(c.rest[1])
	if err != nil {
		return reply{}, err
	}
	return reply{200, map[string]any{"server": c.xServer(sv, c.s.sim.Time())}}, nil
}

func (c *call) deleteServer() (reply, error) {
	s := c.s
	lat := s.Latency()
	s.mu.Lock()
	defer s.mu.Unlock()
	sv, err := c.lookupServer(c.rest[1])
	if err != nil {
		return reply{}, err
	}
	now := s.sim.Time()
	if s.opts.ReclaimInterval > 0 && sv.ran && !sv.deleting {
		// Nova with reclaim_instance_interval soft-deletes a server that
		// was ever ACTIVE, a SOFT_DELETED one again (its reclaim time
		// starts anew); only forceDelete deletes it now.
		s.softDelete(sv, now, lat.Stop)
		return reply{204, nil}, nil
	}
	s.hardDelete(sv, now)
	return reply{204, nil}, nil
}

// hardDelete starts a server's deletion. Call with s.mu held.
func (s *Server) hardDelete(sv *server, now time.Time) {
	if sv.deleting {
		return
	}
	sv.deleting = true
	sv.goneAt = now.Add(s.sim.Wall(s.Latency().Terminate))
	if sv.backed && sv.started && !sv.tearing && !sv.powering && sv.machine.ID != "" {
		sv.tearing = true
		s.tearDown(sv)
	}
}

// serverAction answers the server actions: os-getConsoleOutput (the
// console of a booted server shows cloud-init's host key block), os-stop,
// os-start, forceDelete and restore (power.go).
func (c *call) serverAction() (reply, error) {
	var b map[string]any
	if err := c.decode(&b); err != nil {
		return reply{}, err
	}
	if len(b) != 1 {
		return reply{}, badRequest("There is no such action: " + strings.Join(slices.Sorted(maps.Keys(b)), ","))
	}
	switch {
	case has(b, "os-stop"):
		return c.powerAction("stop")
	case has(b, "os-start"):
		return c.powerAction("start")
	case has(b, "forceDelete"):
		return c.forceDelete()
	case has(b, "restore"):
		return c.restore()
	case !has(b, "os-getConsoleOutput"):
		return reply{}, badRequest("There is no such action: " + strings.Join(slices.Sorted(maps.Keys(b)), ","))
	}
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	sv, err := c.lookupServer(c.rest[1])
	if err != nil {
		return reply{}, err
	}
	if st := s.status(sv, s.sim.Time()); st != "ACTIVE" {
		return reply{}, conflict("conflictingRequest", fmt.Sprintf("Cannot 'get_console_output' instance %s while it is in vm_state %s", sv.id, vmStateName(st)))
	}
	var out strings.Builder
	fmt.Fprintf(&out, "[    0.000000] Linux version 6.1.0-28-cloud-amd64\nCloud-init v. 22.4.2 running 'modules:final'.\n")
	fmt.Fprintf(&out, "-----BEGIN SSH HOST KEY KEYS-----\n")
	for _, k := range sv.hostKeys {
		fmt.Fprintf(&out, "%s root@%s\n", k, sv.name)
	}
	fmt.Fprintf(&out, "-----END SSH HOST KEY KEYS-----\nCloud-init v. 22.4.2 finished.\n")
	return reply{200, map[string]any{"output": out.String()}}, nil
}

func has(m map[string]any, k string) bool {
	_, ok := m[k]
	return ok
}

// Plant creates a server in region outside any client (another tool's, or
// what a crash between create and tag leaves), with exactly metadata. It
// returns the server's id.
func (s *Server) Plant(ctx context.Context, region, project string, metadata map[string]string) (string, error) {
	s.mu.Lock()
	name := fmt.Sprintf("planted-%d", s.seq+1)
	s.mu.Unlock()
	body := fmt.Sprintf(`{"server":{"name":%q,"imageRef":%q,"flavorRef":"2","metadata":%s,"networks":[{"uuid":%q}]}}`,
		name, s.opts.Images[0].ID, mustJSON(metadata), privateNetworkID)
	c := &call{ctx: ctx, s: s, base: "http://cloudsim", region: region, project: project, query: map[string][]string{}, body: []byte(body)}
	out, err := c.createServer()
	if err != nil {
		return "", fmt.Errorf("cloudsim/openstack: plant: %w", err)
	}
	return out.body.(map[string]any)["server"].(map[string]any)["id"].(string), nil
}

// Remove deletes a server outside any client: someone deleting it in
// Horizon, a node killed behind transit's back.
func (s *Server) Remove(ctx context.Context, region, project, id string) error {
	c := &call{ctx: ctx, s: s, base: "http://cloudsim", region: region, project: project,
		rest: []string{"servers", id}, query: map[string][]string{}}
	_, err := c.deleteServer()
	return err
}
