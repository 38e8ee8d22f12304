package ec2

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/cloudtransit/transit/cloudsim"
)

// group is a VPC security group. Its rules are one per (protocol, ports,
// CIDR), as EC2 counts them against RulesPerGroup.
type group struct {
	seq       uint64
	id, name  string
	desc, vpc string
	isDefault bool
	ingress   []rule
	egress    []rule
	tags      map[string]string
}

// rule is one rule of a group. Its id (sgr-...) and seq are given when
// it is made (newRule) and kept for its life.
type rule struct {
	seq      uint64
	id       string
	proto    string // "-1" (all), "tcp", "udp", "icmp" or a protocol number
	from, to int    // -1 for all ports
	cidr     string
	v6       bool
	desc     string
	tags     map[string]string
}

// newRule gives a rule being added to a group its id, its place in
// DescribeSecurityGroupRules' order and its tags. Call with s.mu held.
func (s *Server) newRule(r rule, tags map[string]string) rule {
	r.seq, r.id = s.nextSeq(), newID("sgr")
	r.tags = maps.Clone(tags)
	if r.tags == nil {
		r.tags = map[string]string{}
	}
	return r
}

// defaultEgress is the egress rule every new VPC security group has: all
// traffic to anywhere. Call with s.mu held.
func (s *Server) defaultEgress() []rule {
	return []rule{s.newRule(rule{proto: "-1", from: -1, to: -1, cidr: "0.0.0.0/0"}, nil)}
}

func (r rule) key() string {
	return r.proto + "|" + strconv.Itoa(r.from) + "|" + strconv.Itoa(r.to) + "|" + r.cidr
}

// String is the rule as EC2's duplicate and not-found messages show it.
func (r rule) String() string {
	if r.proto == "-1" {
		return fmt.Sprintf("peer: %s, ALL, ALLOW", r.cidr)
	}
	return fmt.Sprintf("peer: %s, %s, from port: %d, to port: %d, ALLOW", r.cidr, strings.ToUpper(r.proto), r.from, r.to)
}

func (s *Server) addDefaultGroup(rg *region, vpcID string) {
	g := &group{seq: s.nextSeq(), id: newID("sg"), name: "default", desc: "default VPC security group", vpc: vpcID,
		isDefault: true, tags: map[string]string{}}
	g.egress = s.defaultEgress()
	rg.groups[g.id] = g
}

func (s *Server) groupArn(region, id string) string {
	return fmt.Sprintf("arn:aws:ec2:%s:%s:security-group/%s", region, s.account, id)
}

func groupNotFound(id string) *apiError {
	return &apiError{status: 400, code: "InvalidGroup.NotFound", msg: fmt.Sprintf("The security group '%s' does not exist", id)}
}

// findGroup resolves GroupId, or GroupName in the default VPC. Call with
// s.mu held.
func (rg *region) findGroup(p params) (*group, error) {
	if id := p.get("GroupId"); id != "" {
		if g := rg.groups[id]; g != nil {
			return g, nil
		}
		return nil, groupNotFound(id)
	}
	name := p.get("GroupName")
	if name == "" {
		return nil, &apiError{status: 400, code: "MissingParameter", msg: "The request must contain the parameter groupName or groupId"}
	}
	for _, g := range rg.sortedGroups() {
		if g.name == name && g.vpc == rg.defaultVPC {
			return g, nil
		}
	}
	return nil, &apiError{status: 400, code: "InvalidGroup.NotFound",
		msg: fmt.Sprintf("The security group '%s' does not exist in default VPC '%s'", name, rg.defaultVPC)}
}

func (c *call) createSecurityGroup() (requestIDSetter, error) {
	name, desc := c.p.get("GroupName"), c.p.get("GroupDescription")
	switch {
	case name == "":
		return nil, missing("GroupName")
	case desc == "":
		return nil, missing("GroupDescription")
	case len(name) > 255 || len(desc) > 255:
		return nil, &apiError{status: 400, code: "InvalidParameterValue", msg: "Group name and description are limited to 255 characters"}
	case strings.HasPrefix(name, "sg-"):
		return nil, &apiError{status: 400, code: "InvalidParameterValue",
			msg: fmt.Sprintf("Value (%s) for parameter GroupName is invalid. Group names may not be in the format sg-*.", name)}
	case name == "default":
		return nil, &apiError{status: 400, code: "InvalidGroup.Reserved", msg: "The security group 'default' is reserved"}
	}
	tags, err := c.p.tagSpecs("security-group")
	if err != nil {
		return nil, err
	}
	if err := c.s.sleep(c.ctx, c.s.Latency().GroupCreate); err != nil {
		return nil, err
	}
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	rg := s.region(c.region)
	vpcID := c.p.get("VpcId")
	if vpcID == "" {
		vpcID = rg.defaultVPC
	}
	if rg.vpcs[vpcID] == nil {
		return nil, &apiError{status: 400, code: "InvalidVpcID.NotFound", msg: fmt.Sprintf("The vpc ID '%s' does not exist", vpcID)}
	}
	for _, g := range rg.groups {
		if g.vpc == vpcID && g.name == name {
			return nil, &apiError{status: 400, code: "InvalidGroup.Duplicate",
				msg: fmt.Sprintf("The security group '%s' already exists for VPC '%s'", name, vpcID)}
		}
	}
	g := &group{seq: s.nextSeq(), id: newID("sg"), name: name, desc: desc, vpc: vpcID, tags: tags}
	g.egress = s.defaultEgress()
	rg.groups[g.id] = g
	return &createSecurityGroupResponse{Return: true, GroupID: g.id, Arn: s.groupArn(c.region, g.id), Tags: xTags(tags)}, nil
}

func (c *call) describeSecurityGroups() (requestIDSetter, error) {
	fs, limit, err := c.describing()
	if err != nil {
		return nil, err
	}
	ids, names := c.p.list("GroupId"), c.p.list("GroupName")
	if len(ids) > 0 && c.p.has("MaxResults") {
		return nil, &apiError{status: 400, code: "InvalidParameterCombination", msg: "The parameter groupIdSet cannot be used with the parameter maxResults"}
	}
	s := c.s
	s.mu.Lock()
	rg := s.region(c.region)
	for _, id := range ids {
		if rg.groups[id] == nil {
			s.mu.Unlock()
			return nil, groupNotFound(id)
		}
	}
	for _, n := range names {
		if _, err := rg.findGroup(params{"GroupName": n}); err != nil {
			s.mu.Unlock()
			return nil, err
		}
	}
	var matched []xSecurityGroup
	seqs := map[string]uint64{}
	for _, g := range rg.sortedGroups() {
		if len(ids) > 0 && !slices.Contains(ids, g.id) {
			continue
		}
		if len(names) > 0 && (!slices.Contains(names, g.name) || g.vpc != rg.defaultVPC) {
			continue
		}
		ok, err := matchAll(fs, func(f string) ([]string, bool) {
			switch f {
			case "group-id":
				return []string{g.id}, true
			case "group-name":
				return []string{g.name}, true
			case "vpc-id":
				return []string{g.vpc}, true
			case "description":
				return []string{g.desc}, true
			case "owner-id":
				return []string{s.account}, true
			case "ip-permission.cidr":
				var cidrs []string
				for _, r := range g.ingress {
					cidrs = append(cidrs, r.cidr)
				}
				return cidrs, true
			case "ip-permission.protocol":
				var ps []string
				for _, r := range g.ingress {
					ps = append(ps, r.proto)
				}
				return ps, true
			}
			return tagAttrs(g.tags, f)
		})
		if err != nil {
			s.mu.Unlock()
			return nil, err
		}
		if ok {
			seqs[g.id] = g.seq
			matched = append(matched, xSecurityGroup{OwnerID: s.account, GroupID: g.id, GroupName: g.name, GroupDescription: g.desc,
				VpcID: g.vpc, Arn: s.groupArn(c.region, g.id), Ingress: xPermissions(g.ingress), Egress: xPermissions(g.egress), Tags: xTags(g.tags)})
		}
	}
	s.mu.Unlock()
	pg, next, err := page(c, matched, func(x xSecurityGroup) uint64 { return seqs[x.GroupID] }, limit)
	if err != nil {
		return nil, err
	}
	return &describeSecurityGroupsResponse{Groups: pg, NextToken: next}, nil
}

// xPermissions groups rules by protocol and ports, as EC2 reports them.
func xPermissions(rules []rule) []xPermission {
	var out []xPermission
	index := map[string]int{}
	for _, r := range rules {
		k := r.proto + "|" + strconv.Itoa(r.from) + "|" + strconv.Itoa(r.to)
		i, ok := index[k]
		if !ok {
			p := xPermission{IPProtocol: r.proto}
			if r.proto != "-1" {
				from, to := r.from, r.to
				p.FromPort, p.ToPort = &from, &to
			}
			out = append(out, p)
			i = len(out) - 1
			index[k] = i
		}
		if r.v6 {
			out[i].IPv6Ranges = append(out[i].IPv6Ranges, xIPv6Range{CidrIPv6: r.cidr, Description: r.desc})
		} else {
			out[i].IPRanges = append(out[i].IPRanges, xIPRange{CidrIP: r.cidr, Description: r.desc})
		}
	}
	return out
}

// protocols EC2 accepts by name and by number.
var protocolNames = map[string]string{"6": "tcp", "17": "udp", "1": "icmp", "58": "icmpv6"}

// readPermissions reads IpPermissions.N (or the legacy top-level
// IpProtocol/FromPort/ToPort/CidrIp) into rules.
func (p params) readPermissions() ([]rule, error) {
	perms := p.structs("IpPermissions")
	if len(perms) == 0 && p.has("IpProtocol") {
		legacy := params{"IpProtocol": p.get("IpProtocol"), "FromPort": p.get("FromPort"), "ToPort": p.get("ToPort")}
		if p.has("CidrIp") {
			legacy["IpRanges.1.CidrIp"] = p.get("CidrIp")
		}
		perms = []params{legacy}
	}
	if len(perms) == 0 {
		return nil, &apiError{status: 400, code: "MissingParameter", msg: "The request must contain the parameter ipPermissions"}
	}
	var out []rule
	for _, perm := range perms {
		proto := strings.ToLower(perm.get("IpProtocol"))
		if n, ok := protocolNames[proto]; ok {
			proto = n
		}
		switch proto {
		case "":
			return nil, &apiError{status: 400, code: "MissingParameter", msg: "The request must contain the parameter ipProtocol"}
		case "-1", "tcp", "udp", "icmp", "icmpv6":
		default:
			if n, err := strconv.Atoi(proto); err != nil || n < 0 || n > 255 {
				return nil, &apiError{status: 400, code: "InvalidParameterValue",
					msg: fmt.Sprintf("Invalid value '%s' for IP protocol. Unknown protocol.", proto)}
			}
		}
		from, to := -1, -1
		if proto == "tcp" || proto == "udp" {
			var err1, err2 error
			from, err1 = strconv.Atoi(perm.get("FromPort"))
			to, err2 = strconv.Atoi(perm.get("ToPort"))
			if err1 != nil || err2 != nil || from < 0 || to > 65535 || from > to {
				return nil, &apiError{status: 400, code: "InvalidParameterValue",
					msg: "Invalid value 'Must specify both from and to ports with TCP/UDP.' for portRange."}
			}
		}
		ranges := perm.structs("IpRanges")
		v6 := perm.structs("Ipv6Ranges")
		if len(ranges)+len(v6) == 0 {
			return nil, &apiError{status: 400, code: "InvalidParameterValue", msg: "The request must contain a source: IpRanges or Ipv6Ranges (group sources are not emulated)"}
		}
		for _, r := range ranges {
			cidr, err := canonicalCIDR(r.get("CidrIp"), false)
			if err != nil {
				return nil, err
			}
			out = append(out, rule{proto: proto, from: from, to: to, cidr: cidr, desc: r.get("Description")})
		}
		for _, r := range v6 {
			cidr, err := canonicalCIDR(r.get("CidrIpv6"), true)
			if err != nil {
				return nil, err
			}
			out = append(out, rule{proto: proto, from: from, to: to, cidr: cidr, v6: true, desc: r.get("Description")})
		}
	}
	return out, nil
}

func canonicalCIDR(s string, v6 bool) (string, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil || p.Addr().Is4() == v6 || p.Masked() != p {
		return "", &apiError{status: 400, code: "InvalidParameterValue", msg: fmt.Sprintf("CIDR block %s is malformed", s)}
	}
	return p.String(), nil
}

// ingressChange reads a change of a group's ingress rules, takes the
// emulated latency and finds the group; on success the server is locked
// and the caller unlocks it.
func (c *call) ingressChange() (*group, []rule, error) {
	rules, err := c.p.readPermissions()
	if err != nil {
		return nil, nil, err
	}
	if err := c.s.sleep(c.ctx, c.s.Latency().GroupUpdate); err != nil {
		return nil, nil, err
	}
	c.s.mu.Lock()
	g, err := c.s.region(c.region).findGroup(c.p)
	if err != nil {
		c.s.mu.Unlock()
		return nil, nil, err
	}
	return g, rules, nil
}

func (c *call) authorizeIngress() (requestIDSetter, error) {
	tags, err := c.p.tagSpecs("security-group-rule")
	if err != nil {
		return nil, err
	}
	g, rules, err := c.ingressChange()
	if err != nil {
		return nil, err
	}
	s := c.s
	have := map[string]bool{}
	v4, v6 := 0, 0
	for _, r := range g.ingress {
		have[r.key()] = true
		if r.v6 {
			v6++
		} else {
			v4++
		}
	}
	for _, r := range rules {
		if have[r.key()] {
			s.mu.Unlock()
			return nil, &apiError{status: 400, code: "InvalidPermission.Duplicate", msg: fmt.Sprintf("the specified rule %q already exists", r.String())}
		}
		have[r.key()] = true
		if r.v6 {
			v6++
		} else {
			v4++
		}
	}
	if v4 > s.rules || v6 > s.rules {
		s.mu.Unlock()
		return nil, &apiError{status: 400, code: "RulesPerSecurityGroupLimitExceeded", msg: "The maximum number of rules per security group has been reached."}
	}
	out := &authorizeIngressResponse{Return: true}
	for _, r := range rules {
		r = s.newRule(r, tags)
		g.ingress = append(g.ingress, r)
		out.Rules = append(out.Rules, s.xRule(c.region, g, r))
	}
	s.mu.Unlock()
	if err := s.allow(c.region); err != nil {
		return nil, err
	}
	return out, nil
}

func (s *Server) xRule(region string, g *group, r rule) xRule {
	x := xRule{RuleID: r.id, GroupID: g.id, OwnerID: s.account, IsEgress: slices.ContainsFunc(g.egress, func(e rule) bool { return e.id == r.id }),
		IPProtocol: r.proto, FromPort: r.from, ToPort: r.to, Description: r.desc, Tags: xTags(r.tags),
		Arn: fmt.Sprintf("arn:aws:ec2:%s:%s:security-group-rule/%s", region, s.account, r.id)}
	if r.v6 {
		x.CidrIPv6 = r.cidr
	} else {
		x.CidrIPv4 = r.cidr
	}
	return x
}

// revokeIngress removes rules; one that does not exist fails the whole
// request and changes nothing.
func (c *call) revokeIngress() (requestIDSetter, error) {
	g, rules, err := c.ingressChange()
	if err != nil {
		return nil, err
	}
	s := c.s
	drop := map[string]bool{}
	for _, r := range rules {
		if !slices.ContainsFunc(g.ingress, func(have rule) bool { return have.key() == r.key() }) {
			s.mu.Unlock()
			return nil, &apiError{status: 400, code: "InvalidPermission.NotFound", msg: "The specified rule does not exist in this security group."}
		}
		drop[r.key()] = true
	}
	out := &revokeIngressResponse{Return: true}
	kept := g.ingress[:0:0]
	for _, r := range g.ingress {
		if drop[r.key()] {
			out.RevokedRules = append(out.RevokedRules, s.xRule(c.region, g, r))
			continue
		}
		kept = append(kept, r)
	}
	g.ingress = kept
	s.mu.Unlock()
	if err := s.allow(c.region); err != nil {
		return nil, err
	}
	return out, nil
}

// updateIngressDescriptions sets the descriptions of existing rules
// (UpdateSecurityGroupRuleDescriptionsIngress): a rule that does not
// exist fails the whole request and changes nothing.
func (c *call) updateIngressDescriptions() (requestIDSetter, error) {
	g, rules, err := c.ingressChange()
	if err != nil {
		return nil, err
	}
	defer c.s.mu.Unlock()
	at := map[string]int{}
	for i, r := range g.ingress {
		at[r.key()] = i
	}
	for _, r := range rules {
		if _, ok := at[r.key()]; !ok {
			return nil, &apiError{status: 400, code: "InvalidPermission.NotFound", msg: "The specified rule does not exist in this security group."}
		}
	}
	for _, r := range rules {
		g.ingress[at[r.key()]].desc = r.desc
	}
	return &updateDescriptionsResponse{Return: true}, nil
}

func (c *call) deleteSecurityGroup() (requestIDSetter, error) {
	if err := c.s.sleep(c.ctx, c.s.Latency().GroupDelete); err != nil {
		return nil, err
	}
	s := c.s
	s.mu.Lock()
	rg := s.region(c.region)
	g, err := rg.findGroup(c.p)
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	if g.isDefault {
		s.mu.Unlock()
		return nil, &apiError{status: 400, code: "CannotDelete", msg: fmt.Sprintf("the specified group: %q name: %q cannot be deleted by a user", g.id, g.name)}
	}
	now := s.now()
	s.sweep(rg, now)
	for _, in := range rg.instances {
		if s.state(in, now) != stateTerminated && slices.Contains(in.groups, g.id) {
			s.mu.Unlock()
			return nil, &apiError{status: 400, code: "DependencyViolation", msg: fmt.Sprintf("resource %s has a dependent object", g.id)}
		}
	}
	delete(rg.groups, g.id)
	s.mu.Unlock()
	if err := s.allow(c.region); err != nil {
		return nil, err
	}
	return &deleteSecurityGroupResponse{Return: true, GroupID: g.id}, nil
}

// allow makes a backed region's firewall the union of the ingress rules
// of all its security groups.
func (s *Server) allow(region string) error {
	if s.sim.Backer == nil {
		return nil
	}
	s.allowMu.Lock()
	defer s.allowMu.Unlock()
	s.mu.Lock()
	var rules []cloudsim.Rule
	for _, g := range s.region(region).sortedGroups() {
		for _, r := range g.ingress {
			if br, ok := r.backing(); ok {
				rules = append(rules, br)
			}
		}
	}
	s.mu.Unlock()
	if err := s.sim.Backer.Allow(s.Context(), "aws:"+region, cloudsim.SortRules(rules)); err != nil {
		return internalError()
	}
	return nil
}

// backing is the rule as the backing's firewall takes it: "-1" is every
// protocol; tcp and udp keep their ports; icmp is every type and code.
// It is false for a rule the backing does not filter: an IPv6 range (the
// backing is IPv4), icmpv6, or another protocol by number. (Rules whose
// source is another group, UserIdGroupPairs, are not emulated:
// readPermissions refuses them.)
func (r rule) backing() (cloudsim.Rule, bool) {
	p, err := netip.ParsePrefix(r.cidr)
	if r.v6 || err != nil || !p.Addr().Is4() {
		return cloudsim.Rule{}, false
	}
	proto := r.proto
	if n, ok := protocolNames[proto]; ok {
		proto = n
	}
	switch proto {
	case "-1":
		return cloudsim.Rule{Source: p.Masked()}, true
	case "tcp", "udp":
		return cloudsim.Rule{Source: p.Masked(), Protocol: proto, From: r.from, To: r.to}, true
	case "icmp":
		return cloudsim.Rule{Source: p.Masked(), Protocol: proto}, true
	}
	return cloudsim.Rule{}, false
}

func ruleNotFound(id string) *apiError {
	return &apiError{status: 400, code: "InvalidSecurityGroupRuleId.NotFound", msg: fmt.Sprintf("The security group rule ID '%s' does not exist", id)}
}

// describeSecurityGroupRules lists the rules of the region's groups,
// ingress and egress, in the order they were made.
func (c *call) describeSecurityGroupRules() (requestIDSetter, error) {
	fs, limit, err := c.describing()
	if err != nil {
		return nil, err
	}
	ids := c.p.list("SecurityGroupRuleId")
	for _, id := range ids {
		if !validID("sgr", id) {
			return nil, &apiError{status: 400, code: "InvalidSecurityGroupRuleId.Malformed", msg: fmt.Sprintf("Invalid id: \"%s\" (expecting \"sgr-...\")", id)}
		}
	}
	type row struct {
		g *group
		r rule
	}
	s := c.s
	s.mu.Lock()
	rg := s.region(c.region)
	var all []row
	have := map[string]bool{}
	for _, g := range rg.groups {
		for _, r := range slices.Concat(g.ingress, g.egress) {
			all = append(all, row{g, r})
			have[r.id] = true
		}
	}
	slices.SortFunc(all, func(a, b row) int { return cmp.Compare(a.r.seq, b.r.seq) })
	for _, id := range ids {
		if !have[id] {
			s.mu.Unlock()
			return nil, ruleNotFound(id)
		}
	}
	ruleAttrs := func(g *group, r rule) attrs {
		return func(f string) ([]string, bool) {
			switch f {
			case "group-id":
				return []string{g.id}, true
			case "security-group-rule-id":
				return []string{r.id}, true
			}
			if strings.HasPrefix(f, "tag:") {
				return tagAttrs(r.tags, f)
			}
			return nil, false
		}
	}
	if err := checkFilters(fs, ruleAttrs(&group{}, rule{})); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	var matched []row
	for _, x := range all {
		if len(ids) > 0 && !slices.Contains(ids, x.r.id) {
			continue
		}
		ok, err := matchAll(fs, ruleAttrs(x.g, x.r))
		if err != nil {
			s.mu.Unlock()
			return nil, err
		}
		if ok {
			matched = append(matched, x)
		}
	}
	pg, next, err := page(c, matched, func(x row) uint64 { return x.r.seq }, limit)
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	out := &describeSecurityGroupRulesResponse{NextToken: next}
	for _, x := range pg {
		out.Rules = append(out.Rules, s.xRule(c.region, x.g, x.r))
	}
	s.mu.Unlock()
	return out, nil
}
