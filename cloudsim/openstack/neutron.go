package openstack

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/cloudtransit/transit/cloudsim"
)

type secGroup struct {
	seq                   uint64
	id, name, description string
	region, project       string
	created               time.Time
}

type rule struct {
	seq                  uint64
	id, group            string
	direction, ethertype string
	protocol             *string
	portMin, portMax     *int
	remoteIP             *string
	remoteGroup          *string
	description          string
	created              time.Time
}

type floatingIP struct {
	seq                      uint64
	id, region, project      string
	address, portID, fixedIP string
	description              string
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func (c *call) listNetworks() (reply, error) {
	nets := []map[string]any{
		{"id": privateNetworkID, "name": PrivateNetwork, "status": "ACTIVE", "admin_state_up": true, "shared": false,
			"router:external": false, "subnets": []string{"5b6a0000-0000-4000-8000-000000000001"}, "tenant_id": projectID(c.project),
			"project_id": projectID(c.project), "mtu": 1450, "tags": []string{}},
		{"id": publicNetworkID, "name": PublicNetwork, "status": "ACTIVE", "admin_state_up": true, "shared": false,
			"router:external": true, "subnets": []string{"5b6a0000-0000-4000-8000-000000000002"}, "tenant_id": projectID("admin"),
			"project_id": projectID("admin"), "mtu": 1500, "tags": []string{}},
	}
	var out []map[string]any
	for _, n := range nets {
		if keep(c, "name", n["name"].(string)) && keep(c, "id", n["id"].(string)) {
			out = append(out, n)
		}
	}
	return reply{200, map[string]any{"networks": nonNil(out)}}, nil
}

// keep says whether value passes the call's filter on field (none: all).
func keep(c *call, field, value string) bool {
	vs, ok := c.query[field]
	return !ok || slices.Contains(vs, value)
}

func nonNil[T any](xs []T) []T {
	if xs == nil {
		return []T{}
	}
	return xs
}

func (c *call) listPorts() (reply, error) {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for _, sv := range sortedBySeq(s.servers, func(v *server) uint64 { return v.seq }) {
		if sv.project != c.project || sv.region != c.region || !keep(c, "device_id", sv.id) || !keep(c, "id", sv.portID) {
			continue
		}
		var fixed []map[string]string
		if sv.fixedIP != "" {
			fixed = []map[string]string{{"subnet_id": "5b6a0000-0000-4000-8000-000000000001", "ip_address": sv.fixedIP}}
		}
		out = append(out, map[string]any{"id": sv.portID, "network_id": privateNetworkID, "device_id": sv.id,
			"device_owner": "compute:" + sv.zone, "status": "ACTIVE", "admin_state_up": true,
			"fixed_ips": nonNil(fixed), "security_groups": sv.groups, "project_id": projectID(c.project),
			"tenant_id": projectID(c.project), "mac_address": "fa:16:3e:" + sv.id[:2] + ":" + sv.id[2:4] + ":" + sv.id[4:6]})
	}
	return reply{200, map[string]any{"ports": nonNil(out)}}, nil
}

// defaultGroup is the project's "default" group, made on first use as
// Neutron does (its first security group list or create, or a server
// created without a group), outside the quotas but counted by them: with
// Neutron's four rules, egress to anywhere and ingress from the group's
// own members, for IPv4 and IPv6. Call with s.mu held.
func (s *Server) defaultGroup(c *call) string {
	for _, g := range s.groups {
		if g.project == c.project && g.region == c.region && g.name == "default" {
			return g.id
		}
	}
	g := &secGroup{seq: s.nextSeq(), id: newID(), name: "default", description: "Default security group",
		region: c.region, project: c.project, created: s.sim.Time()}
	s.groups[g.id] = g
	for _, et := range []string{"IPv4", "IPv6"} {
		self := g.id
		r := &rule{seq: s.nextSeq(), id: newID(), group: g.id, direction: "ingress", ethertype: et, remoteGroup: &self, created: g.created}
		s.rules[r.id] = r
	}
	s.addEgress(g)
	return g.id
}

// addEgress gives a new group Neutron's default egress rules. Call with
// s.mu held.
func (s *Server) addEgress(g *secGroup) {
	for _, et := range []string{"IPv4", "IPv6"} {
		r := &rule{seq: s.nextSeq(), id: newID(), group: g.id, direction: "egress", ethertype: et, created: g.created}
		s.rules[r.id] = r
	}
}

func (c *call) xGroup(g *secGroup) map[string]any {
	var rules []map[string]any
	for _, r := range sortedBySeq(c.s.rules, func(v *rule) uint64 { return v.seq }) {
		if r.group == g.id {
			rules = append(rules, c.xRule(r))
		}
	}
	ts := g.created.UTC().Format(time.RFC3339)
	return map[string]any{"id": g.id, "name": g.name, "description": g.description, "project_id": projectID(g.project),
		"tenant_id": projectID(g.project), "security_group_rules": nonNil(rules), "stateful": true, "shared": false,
		"tags": []string{}, "created_at": ts, "updated_at": ts, "revision_number": 1}
}

func (c *call) xRule(r *rule) map[string]any {
	ts := r.created.UTC().Format(time.RFC3339)
	return map[string]any{"id": r.id, "security_group_id": r.group, "direction": r.direction, "ethertype": r.ethertype,
		"protocol": r.protocol, "port_range_min": r.portMin, "port_range_max": r.portMax,
		"remote_ip_prefix": r.remoteIP, "remote_group_id": r.remoteGroup, "remote_address_group_id": nil,
		"description": r.description, "project_id": projectID(c.project), "tenant_id": projectID(c.project),
		"created_at": ts, "updated_at": ts, "revision_number": 0, "tags": []string{}}
}

func (c *call) groupsOf() []*secGroup {
	var out []*secGroup
	for _, g := range sortedBySeq(c.s.groups, func(v *secGroup) uint64 { return v.seq }) {
		if g.project == c.project && g.region == c.region && keep(c, "name", g.name) && keep(c, "id", g.id) {
			out = append(out, g)
		}
	}
	return out
}

func (c *call) listGroups() (reply, error) {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	s.defaultGroup(c)
	all := c.groupsOf()
	return listReply(c, all, func(g *secGroup) string { return g.id }, c.url("network", "v2.0", "security-groups"), "security_groups", c.xGroup)
}

func (c *call) getGroup() (reply, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	g := c.s.groups[c.rest[1]]
	if g == nil || g.project != c.project || g.region != c.region {
		return reply{}, &apiError{404, "SecurityGroupNotFound", fmt.Sprintf("Security group %s does not exist", c.rest[1])}
	}
	return reply{200, map[string]any{"security_group": c.xGroup(g)}}, nil
}

func (c *call) createGroup() (reply, error) {
	var b struct {
		Group struct {
			Name        string `json:"name"`
			Description string `json:"description"`
		} `json:"security_group"`
	}
	if err := c.decode(&b); err != nil {
		return reply{}, err
	}
	if len(b.Group.Name) > 255 || len(b.Group.Description) > 255 {
		return reply{}, &apiError{400, "HTTPBadRequest", "Invalid input for name or description: longer than 255 characters."}
	}
	if b.Group.Name == "default" {
		return reply{}, &apiError{409, "SecurityGroupDefaultAlreadyExists", "Default security group already exists."}
	}
	if err := c.sleep(c.s.Latency().GroupCreate); err != nil {
		return reply{}, err
	}
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	s.defaultGroup(c)
	// The group counts against the groups' quota, its two egress rules
	// against the rules'.
	if err := c.reserve(resSecurityGroup, 1); err != nil {
		return reply{}, err
	}
	if err := c.reserve(resSecurityGroupRule, 2); err != nil {
		return reply{}, err
	}
	// Neutron allows two groups of one name; callers must look first.
	g := &secGroup{seq: s.nextSeq(), id: newID(), name: b.Group.Name, description: b.Group.Description,
		region: c.region, project: c.project, created: s.sim.Time()}
	s.groups[g.id] = g
	s.addEgress(g)
	return reply{201, map[string]any{"security_group": c.xGroup(g)}}, nil
}

// updateGroup changes a group's name or description (PUT
// security-groups/{id}); the default group's name is fixed.
func (c *call) updateGroup() (reply, error) {
	var b struct {
		Group struct {
			Name        *string `json:"name"`
			Description *string `json:"description"`
		} `json:"security_group"`
	}
	if err := c.decode(&b); err != nil {
		return reply{}, err
	}
	for _, v := range []*string{b.Group.Name, b.Group.Description} {
		if v != nil && len(*v) > 255 {
			return reply{}, &apiError{400, "HTTPBadRequest", "Invalid input for name or description: longer than 255 characters."}
		}
	}
	if err := c.sleep(c.s.Latency().GroupUpdate); err != nil {
		return reply{}, err
	}
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.groups[c.rest[1]]
	if g == nil || g.project != c.project || g.region != c.region {
		return reply{}, &apiError{404, "SecurityGroupNotFound", fmt.Sprintf("Security group %s does not exist", c.rest[1])}
	}
	if b.Group.Name != nil {
		if g.name == "default" && *b.Group.Name != "default" {
			return reply{}, &apiError{409, "SecurityGroupCannotUpdateDefault", "Updating default security group not allowed."}
		}
		g.name = *b.Group.Name
	}
	if b.Group.Description != nil {
		g.description = *b.Group.Description
	}
	return reply{200, map[string]any{"security_group": c.xGroup(g)}}, nil
}

func (c *call) deleteGroup() (reply, error) {
	s := c.s
	id := c.rest[1]
	s.mu.Lock()
	g := s.groups[id]
	s.mu.Unlock()
	if g == nil || g.project != c.project || g.region != c.region {
		return reply{}, &apiError{404, "SecurityGroupNotFound", fmt.Sprintf("Security group %s does not exist", id)}
	}
	if err := c.sleep(s.Latency().GroupDelete); err != nil {
		return reply{}, err
	}
	s.tick()
	s.mu.Lock()
	for _, sv := range s.servers {
		if slices.Contains(sv.groups, id) {
			s.mu.Unlock()
			return reply{}, &apiError{409, "SecurityGroupInUse", fmt.Sprintf("Security Group %s in use.", id)}
		}
	}
	if s.groups[id] == nil {
		s.mu.Unlock()
		return reply{}, &apiError{404, "SecurityGroupNotFound", fmt.Sprintf("Security group %s does not exist", id)}
	}
	delete(s.groups, id)
	for rid, r := range s.rules {
		if r.group == id {
			delete(s.rules, rid)
		}
	}
	s.mu.Unlock()
	s.allow()
	return reply{204, nil}, nil
}

func (c *call) listRules() (reply, error) {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	var all []*rule
	for _, r := range sortedBySeq(s.rules, func(v *rule) uint64 { return v.seq }) {
		g := s.groups[r.group]
		if g != nil && g.project == c.project && g.region == c.region && keep(c, "security_group_id", r.group) &&
			keep(c, "direction", r.direction) {
			all = append(all, r)
		}
	}
	return listReply(c, all, func(r *rule) string { return r.id }, c.url("network", "v2.0", "security-group-rules"), "security_group_rules", c.xRule)
}

type ruleBody struct {
	Group       string  `json:"security_group_id"`
	Direction   string  `json:"direction"`
	Ethertype   string  `json:"ethertype"`
	Protocol    *string `json:"protocol"`
	PortMin     *int    `json:"port_range_min"`
	PortMax     *int    `json:"port_range_max"`
	RemoteIP    *string `json:"remote_ip_prefix"`
	RemoteGroup *string `json:"remote_group_id"`
	Description string  `json:"description"`
}

// createRules creates one rule ({"security_group_rule": ...}) or several
// at once ({"security_group_rules": [...]}, all or none).
func (c *call) createRules() (reply, error) {
	var b struct {
		One  *ruleBody  `json:"security_group_rule"`
		Bulk []ruleBody `json:"security_group_rules"`
	}
	if err := c.decode(&b); err != nil {
		return reply{}, err
	}
	bodies, bulk := b.Bulk, true
	if b.One != nil {
		bodies, bulk = []ruleBody{*b.One}, false
	}
	if len(bodies) == 0 {
		return reply{}, &apiError{400, "HTTPBadRequest", "Resource body required"}
	}
	for _, rb := range bodies {
		if err := checkRule(rb); err != nil {
			return reply{}, err
		}
	}
	if err := c.sleep(c.s.Latency().GroupUpdate); err != nil {
		return reply{}, err
	}
	s := c.s
	s.mu.Lock()
	// Neutron reserves the whole request's quota before it looks at the
	// groups or for duplicates.
	if err := c.reserve(resSecurityGroupRule, len(bodies)); err != nil {
		s.mu.Unlock()
		return reply{}, err
	}
	var made []*rule
	for _, rb := range bodies {
		g := s.groups[rb.Group]
		if g == nil || g.project != c.project || g.region != c.region {
			s.mu.Unlock()
			return reply{}, &apiError{404, "SecurityGroupNotFound", fmt.Sprintf("Security group %s does not exist", rb.Group)}
		}
		r := &rule{seq: s.nextSeq(), id: newID(), group: rb.Group, direction: rb.Direction, ethertype: rb.Ethertype,
			protocol: rb.Protocol, portMin: rb.PortMin, portMax: rb.PortMax, remoteIP: rb.RemoteIP,
			remoteGroup: rb.RemoteGroup, description: rb.Description, created: s.sim.Time()}
		if r.ethertype == "" {
			r.ethertype = "IPv4"
		}
		for _, have := range append(slices.Collect(maps.Values(s.rules)), made...) {
			if sameRule(have, r) {
				s.mu.Unlock()
				return reply{}, &apiError{409, "SecurityGroupRuleExists", fmt.Sprintf("Security group rule already exists. Rule id is %s.", have.id)}
			}
		}
		made = append(made, r)
	}
	for _, r := range made {
		s.rules[r.id] = r
	}
	out := []map[string]any{}
	for _, r := range made {
		out = append(out, c.xRule(r))
	}
	s.mu.Unlock()
	s.allow()
	if bulk {
		return reply{201, map[string]any{"security_group_rules": out}}, nil
	}
	return reply{201, map[string]any{"security_group_rule": out[0]}}, nil
}

func checkRule(rb ruleBody) error {
	bad := func(msg string) error { return &apiError{400, "HTTPBadRequest", msg} }
	switch {
	case rb.Direction != "ingress" && rb.Direction != "egress":
		return bad(fmt.Sprintf("Invalid input for direction. Reason: '%s' is not in ['ingress', 'egress'].", rb.Direction))
	case rb.Ethertype != "" && rb.Ethertype != "IPv4" && rb.Ethertype != "IPv6":
		return bad(fmt.Sprintf("Invalid input for ethertype. Reason: '%s' is not in ['IPv4', 'IPv6'].", rb.Ethertype))
	case rb.Protocol != nil && !slices.Contains([]string{"tcp", "udp", "icmp", "any"}, *rb.Protocol):
		return &apiError{400, "SecurityGroupRuleInvalidProtocol", fmt.Sprintf("Security group rule protocol %s not supported.", *rb.Protocol)}
	case (rb.PortMin != nil || rb.PortMax != nil) && (rb.Protocol == nil || *rb.Protocol == "icmp"):
		return &apiError{400, "SecurityGroupProtocolRequiredWithPorts", "Must also specify protocol if port range is given."}
	case rb.RemoteIP != nil && rb.RemoteGroup != nil:
		return &apiError{400, "SecurityGroupRemoteGroupAndRemoteIpPrefix", "Only remote_ip_prefix or remote_group_id may be provided."}
	}
	for _, p := range []struct {
		field string
		port  *int
	}{{"port_range_min", rb.PortMin}, {"port_range_max", rb.PortMax}} {
		if p.port != nil && (*p.port < 0 || *p.port > 65535) {
			return bad(fmt.Sprintf("Invalid input for %s. Reason: '%d' is not in range 0 through 65535.", p.field, *p.port))
		}
	}
	if rb.Protocol != nil && (*rb.Protocol == "tcp" || *rb.Protocol == "udp") && (rb.PortMin != nil || rb.PortMax != nil) {
		switch {
		case rb.PortMin != nil && *rb.PortMin == 0, rb.PortMax != nil && *rb.PortMax == 0:
			return &apiError{400, "SecurityGroupInvalidPortValue", "Invalid value for port 0."}
		case rb.PortMin == nil || rb.PortMax == nil || *rb.PortMin > *rb.PortMax:
			return &apiError{400, "SecurityGroupInvalidPortRange", "For TCP/UDP protocols, port_range_min must be <= port_range_max"}
		}
	}
	if rb.RemoteIP != nil {
		p, err := netip.ParsePrefix(*rb.RemoteIP)
		if err != nil {
			return bad(fmt.Sprintf("Invalid input for remote_ip_prefix. Reason: '%s' is not a valid IP subnet.", *rb.RemoteIP))
		}
		if p.Addr().Is4() != (rb.Ethertype != "IPv6") {
			return &apiError{400, "SecurityGroupRuleParameterConflict", fmt.Sprintf("Conflicting value ethertype %s for CIDR %s", rb.Ethertype, *rb.RemoteIP)}
		}
	}
	return nil
}

func sameRule(a, b *rule) bool {
	eq := func(x, y *string) bool { return x == nil && y == nil || x != nil && y != nil && *x == *y }
	eqi := func(x, y *int) bool { return x == nil && y == nil || x != nil && y != nil && *x == *y }
	norm := func(p *string) *string {
		if p == nil {
			return nil
		}
		if pf, err := netip.ParsePrefix(*p); err == nil {
			s := pf.Masked().String()
			return &s
		}
		return p
	}
	return a.group == b.group && a.direction == b.direction && a.ethertype == b.ethertype && eq(a.protocol, b.protocol) &&
		eqi(a.portMin, b.portMin) && eqi(a.portMax, b.portMax) && eq(norm(a.remoteIP), norm(b.remoteIP)) && eq(a.remoteGroup, b.remoteGroup)
}

func (c *call) deleteRule() (reply, error) {
	s := c.s
	id := c.rest[1]
	notFound := &apiError{404, "SecurityGroupRuleNotFound", fmt.Sprintf("Security group rule %s does not exist", id)}
	s.mu.Lock()
	r := s.rules[id]
	s.mu.Unlock()
	if r == nil {
		return reply{}, notFound
	}
	if err := c.sleep(s.Latency().GroupUpdate); err != nil {
		return reply{}, err
	}
	s.mu.Lock()
	if s.rules[id] == nil {
		s.mu.Unlock()
		return reply{}, notFound
	}
	delete(s.rules, id)
	s.mu.Unlock()
	s.allow()
	return reply{204, nil}, nil
}

func (c *call) xFIP(f *floatingIP) map[string]any {
	return map[string]any{"id": f.id, "floating_ip_address": f.address, "floating_network_id": publicNetworkID,
		"port_id": nilIfEmpty(f.portID), "fixed_ip_address": nilIfEmpty(f.fixedIP), "status": map[bool]string{true: "ACTIVE", false: "DOWN"}[f.portID != ""],
		"description": f.description, "project_id": projectID(f.project), "tenant_id": projectID(f.project),
		"router_id": nil, "tags": []string{}}
}

func (c *call) listFloatingIPs() (reply, error) {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	var all []*floatingIP
	for _, f := range sortedBySeq(s.fips, func(v *floatingIP) uint64 { return v.seq }) {
		if f.project == c.project && f.region == c.region && keep(c, "port_id", f.portID) &&
			keep(c, "description", f.description) && keep(c, "floating_ip_address", f.address) {
			all = append(all, f)
		}
	}
	return listReply(c, all, func(f *floatingIP) string { return f.id }, c.url("network", "v2.0", "floatingips"), "floatingips", c.xFIP)
}

func (c *call) createFloatingIP() (reply, error) {
	var b struct {
		FIP struct {
			Network     string `json:"floating_network_id"`
			PortID      string `json:"port_id"`
			Description string `json:"description"`
		} `json:"floatingip"`
	}
	if err := c.decode(&b); err != nil {
		return reply{}, err
	}
	if b.FIP.Network != publicNetworkID {
		return reply{}, &apiError{404, "ExternalNetworkNotFound", fmt.Sprintf("External network %s could not be found.", b.FIP.Network)}
	}
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := c.reserve(resFloatingIP, 1); err != nil {
		return reply{}, err
	}
	f := &floatingIP{seq: s.nextSeq(), id: newID(), region: c.region, project: c.project, description: b.FIP.Description}
	f.address = fmt.Sprintf("172.24.%d.%d", 4+f.seq/250%200, 2+f.seq%250)
	if b.FIP.PortID != "" {
		var port *server
		for _, sv := range s.servers {
			if sv.portID == b.FIP.PortID && sv.project == c.project && sv.region == c.region {
				port = sv
			}
		}
		if port == nil {
			return reply{}, &apiError{404, "PortNotFound", fmt.Sprintf("Port %s could not be found.", b.FIP.PortID)}
		}
		for _, o := range s.fips {
			if o.portID == port.portID {
				return reply{}, &apiError{409, "FloatingIPPortAlreadyAssociated", fmt.Sprintf("Cannot associate floating IP %s with port %s using fixed IP %s, as that fixed IP already has a floating IP on external network %s.", f.address, port.portID, port.fixedIP, publicNetworkID)}
			}
		}
		f.portID, f.fixedIP = port.portID, port.fixedIP
		if port.backed && port.machine.Address != "" {
			// A backed machine's public address is the host's 1:1 NAT
			// of its fixed one: what a floating IP is.
			f.address = port.machine.Address
		}
	}
	s.fips[f.id] = f
	return reply{201, map[string]any{"floatingip": c.xFIP(f)}}, nil
}

func (c *call) deleteFloatingIP() (reply, error) {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.fips[c.rest[1]]
	if f == nil || f.project != c.project || f.region != c.region {
		return reply{}, &apiError{404, "FloatingIPNotFound", fmt.Sprintf("Floating IP %s could not be found", c.rest[1])}
	}
	delete(s.fips, f.id)
	return reply{204, nil}, nil
}

func (c *call) listImages() (reply, error) {
	var out []map[string]any
	for _, im := range c.s.opts.Images {
		if keep(c, "name", im.Name) && keep(c, "id", im.ID) {
			out = append(out, map[string]any{"id": im.ID, "name": im.Name, "status": "active", "visibility": "public",
				"disk_format": "qcow2", "container_format": "bare", "min_disk": 0, "min_ram": 0, "protected": false,
				"tags": []string{}, "self": "/v2/images/" + im.ID, "file": "/v2/images/" + im.ID + "/file",
				"schema": "/v2/schemas/image", "created_at": "2025-11-11T00:00:00Z", "updated_at": "2025-11-11T00:00:00Z"})
		}
	}
	return reply{200, map[string]any{"images": nonNil(out), "schema": "/v2/schemas/images", "first": "/v2/images"}}, nil
}

// allow makes each backed region's firewall the union of the ingress
// rules of the security groups there (every project's).
func (s *Server) allow() {
	if s.sim.Backer == nil {
		return
	}
	s.allowMu.Lock()
	defer s.allowMu.Unlock()
	s.mu.Lock()
	set := map[string][]cloudsim.Rule{}
	for _, r := range sortedBySeq(s.rules, func(v *rule) uint64 { return v.seq }) {
		g := s.groups[r.group]
		if g == nil {
			continue
		}
		if br, ok := r.backing(); ok {
			region := "openstack:" + g.region
			set[region] = append(set[region], br)
		}
	}
	regions := slices.Sorted(maps.Keys(s.regions))
	s.mu.Unlock()
	for _, r := range regions {
		// A failure leaves the last firewall; the next change retries.
		_ = s.sim.Backer.Allow(s.Context(), r, cloudsim.SortRules(set[r]))
	}
}

// backing is an ingress rule as the backing's firewall takes it:
// protocol none or "any" is every protocol; tcp and udp keep their port
// range (none: every port); icmp is every type and code. A rule without
// remote_ip_prefix or remote_group_id lets in every address, as in
// Neutron. It is false for an egress rule, an IPv6 one (the backing is
// IPv4), and one whose remote is a group: members of a group are the
// region's own machines, whose traffic to each other the backing lets
// through anyway.
func (r *rule) backing() (cloudsim.Rule, bool) {
	if r.direction != "ingress" || r.ethertype != "IPv4" || r.remoteGroup != nil {
		return cloudsim.Rule{}, false
	}
	out := cloudsim.Rule{Source: netip.PrefixFrom(netip.IPv4Unspecified(), 0)}
	if r.remoteIP != nil {
		p, err := netip.ParsePrefix(*r.remoteIP)
		if err != nil || !p.Addr().Is4() {
			return cloudsim.Rule{}, false
		}
		out.Source = p.Masked()
	}
	proto := ""
	if r.protocol != nil {
		proto = *r.protocol
	}
	switch proto {
	case "", "any":
	case "icmp":
		out.Protocol = proto
	case "tcp", "udp":
		out.Protocol = proto
		if r.portMin != nil && r.portMax != nil { // checkRule: both or neither
			out.From, out.To = *r.portMin, *r.portMax
		}
	default:
		return cloudsim.Rule{}, false
	}
	return out, true
}
