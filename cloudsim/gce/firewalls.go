package gce

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cloudtransit/transit/cloudsim"
)

type firewall struct {
	seq          uint64
	id           uint64
	project      string
	name         string
	description  string
	network      string
	direction    string
	priority     int
	sourceRanges []string
	targetTags   []string
	allowed      []allowed
	disabled     bool
	created      time.Time
}

type allowed struct {
	IPProtocol string   `json:"IPProtocol"`
	Ports      []string `json:"ports,omitempty"`
}

// firewallBody is a firewall as clients send it; pointers tell a patch's
// absent fields from empty ones.
type firewallBody struct {
	Name         *string    `json:"name"`
	Description  *string    `json:"description"`
	Network      *string    `json:"network"`
	Direction    *string    `json:"direction"`
	Priority     *int       `json:"priority"`
	SourceRanges *[]string  `json:"sourceRanges"`
	TargetTags   *[]string  `json:"targetTags"`
	Allowed      *[]allowed `json:"allowed"`
	Disabled     *bool      `json:"disabled"`
}

var protocols = []string{"tcp", "udp", "icmp", "esp", "ah", "sctp", "ipip", "all"}

// applyBody checks b and sets its present fields on f.
func (c *call) applyBody(f *firewall, b firewallBody) error {
	if b.Description != nil {
		f.description = *b.Description
	}
	if b.Network != nil {
		n := last(*b.Network)
		if !slices.Contains(c.s.opts.Networks, n) {
			return notFound(fmt.Sprintf("projects/%s/global/networks/%s", c.project, n))
		}
		f.network = n
	}
	if b.Direction != nil {
		if *b.Direction != "INGRESS" {
			return invalidField("resource.direction", *b.Direction, "Only INGRESS is emulated.")
		}
		f.direction = *b.Direction
	}
	if b.Priority != nil {
		if *b.Priority < 0 || *b.Priority > 65535 {
			return invalidField("resource.priority", fmt.Sprint(*b.Priority), "Must be between 0 and 65535.")
		}
		f.priority = *b.Priority
	}
	if b.SourceRanges != nil {
		var v4, v6 bool
		for i, r := range *b.SourceRanges {
			a, err := rangeAddr(r)
			if err != nil {
				return invalidField("resource.sourceRanges", r, "Must be a CIDR range or an IP address.")
			}
			v4, v6 = v4 || a.Is4(), v6 || !a.Is4()
			if v4 && v6 {
				// Compute Engine: a rule holds IPv4 or IPv6 ranges, not both.
				return invalidField(fmt.Sprintf("resource.sourceRanges[%d]", i), r,
					"IPv4 and IPv6 source ranges cannot be mixed in one firewall rule; use one rule per address family.")
			}
		}
		if len(*b.SourceRanges) > 5000 {
			return invalidField("resource.sourceRanges", fmt.Sprint(len(*b.SourceRanges)), "At most 5000 source ranges.")
		}
		f.sourceRanges = slices.Clone(*b.SourceRanges)
	}
	if b.TargetTags != nil {
		f.targetTags = slices.Clone(*b.TargetTags)
	}
	if b.Allowed != nil {
		for i, a := range *b.Allowed {
			proto := strings.ToLower(a.IPProtocol)
			if !slices.Contains(protocols, proto) {
				return invalidField("resource.allowed[].IPProtocol", a.IPProtocol, "")
			}
			if len(a.Ports) > 0 && proto != "tcp" && proto != "udp" && proto != "sctp" {
				return invalidField(fmt.Sprintf("resource.allowed[%d].ports", i), strings.Join(a.Ports, ","),
					"Ports may only be specified on rules whose protocol is one of [TCP, UDP, SCTP].")
			}
			for j, port := range a.Ports {
				if _, _, ok := portRange(port); !ok {
					return invalidField(fmt.Sprintf("resource.allowed[%d].ports[%d]", i, j), port, "Invalid port specification.")
				}
			}
		}
		f.allowed = slices.Clone(*b.Allowed)
	}
	if b.Disabled != nil {
		f.disabled = *b.Disabled
	}
	if len(f.allowed) == 0 {
		return badRequest("Invalid value for field 'resource.allowed': ''. A firewall must allow something.")
	}
	return nil
}

// rangeAddr is the address of a source range: a CIDR range or an
// address.
func rangeAddr(r string) (netip.Addr, error) {
	if p, err := netip.ParsePrefix(r); err == nil {
		return p.Addr(), nil
	}
	return netip.ParseAddr(r)
}

func fwKey(project, name string) string { return project + "/" + name }

func (c *call) insertFirewall() (any, error) {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if out, done, err := c.replay(); done {
		return out, err
	}
	var b firewallBody
	if err := c.decode(&b); err != nil {
		return nil, err
	}
	if b.Name == nil || !resourceName.MatchString(*b.Name) {
		return nil, invalidField("resource.name", deref(b.Name), "Must be a match of regex '[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?'")
	}
	f := &firewall{seq: s.nextSeq(), project: c.project, name: *b.Name, network: "default", direction: "INGRESS",
		priority: 1000, created: s.sim.Time()}
	f.id = 6_000_000_000_000_000 + f.seq
	if err := c.applyBody(f, b); err != nil {
		return nil, err
	}
	key := fwKey(c.project, f.name)
	if s.firewalls[key] != nil || s.pendingInsert(key) {
		return nil, alreadyExists(fmt.Sprintf("projects/%s/global/firewalls/%s", c.project, f.name))
	}
	if s.opts.Firewalls > 0 && s.firewallsHeld(c.project) >= s.opts.Firewalls {
		return nil, overQuota("FIREWALLS", s.opts.Firewalls, "global")
	}
	op := s.newOp(c, "", "insert", c.link("global", "firewalls", f.name), f.id, s.Latency().GroupCreate)
	op.firewall = true
	op.apply = func() { s.firewalls[key] = f }
	s.remember(c, op)
	return c.xOp(op), nil
}

// pendingInsert says whether a firewall insert for key is not done yet.
// Call with s.mu held.
func (s *Server) pendingInsert(key string) bool {
	for _, op := range s.ops {
		if !op.done && op.opType == "insert" && op.firewall && op.zone == "" &&
			strings.HasSuffix(op.target, "/projects/"+strings.Replace(key, "/", "/global/firewalls/", 1)) {
			return true
		}
	}
	return false
}

// firewallsHeld counts project's firewalls, those whose insert is not
// done yet included. Call with s.mu held.
func (s *Server) firewallsHeld(project string) int {
	n := 0
	for _, f := range s.firewalls {
		if f.project == project {
			n++
		}
	}
	for _, op := range s.ops {
		if !op.done && op.opType == "insert" && op.firewall && strings.Contains(op.target, "/projects/"+project+"/global/firewalls/") {
			n++
		}
	}
	return n
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func (c *call) lookupFirewall() (*firewall, error) {
	f := c.s.firewalls[fwKey(c.project, c.rest[2])]
	if f == nil {
		return nil, notFound(fmt.Sprintf("projects/%s/global/firewalls/%s", c.project, c.rest[2]))
	}
	return f, nil
}

func (c *call) getFirewall() (any, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	f, err := c.lookupFirewall()
	if err != nil {
		return nil, err
	}
	return c.xFirewall(f), nil
}

func (c *call) patchFirewall() (any, error) {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if out, done, err := c.replay(); done {
		return out, err
	}
	f, err := c.lookupFirewall()
	if err != nil {
		return nil, err
	}
	var b firewallBody
	if err := c.decode(&b); err != nil {
		return nil, err
	}
	if b.Name != nil && *b.Name != f.name {
		return nil, invalidField("resource.name", *b.Name, "The name of a firewall cannot change.")
	}
	next := *f
	if err := c.applyBody(&next, b); err != nil {
		return nil, err
	}
	op := s.newOp(c, "", "patch", c.link("global", "firewalls", f.name), f.id, s.Latency().GroupUpdate)
	op.firewall = true
	op.apply = func() {
		if cur := s.firewalls[fwKey(f.project, f.name)]; cur != nil {
			n := next
			n.seq, n.created = cur.seq, cur.created
			*cur = n
		}
	}
	s.remember(c, op)
	return c.xOp(op), nil
}

func (c *call) deleteFirewall() (any, error) {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if out, done, err := c.replay(); done {
		return out, err
	}
	f, err := c.lookupFirewall()
	if err != nil {
		return nil, err
	}
	op := s.newOp(c, "", "delete", c.link("global", "firewalls", f.name), f.id, s.Latency().GroupDelete)
	op.firewall = true
	op.apply = func() { delete(s.firewalls, fwKey(f.project, f.name)) }
	s.remember(c, op)
	return c.xOp(op), nil
}

func (c *call) listFirewalls() (any, error) {
	flt, err := parseFilter(c.q("filter"))
	if err != nil {
		return nil, err
	}
	c.s.mu.Lock()
	var all []*firewall
	for _, f := range c.s.sortedFirewalls() {
		if f.project == c.project && flt.match(func(field string) (string, bool) {
			switch field {
			case "name":
				return f.name, true
			case "network":
				return c.link("global", "networks", f.network), true
			}
			return "", false
		}) {
			all = append(all, f)
		}
	}
	c.s.mu.Unlock()
	items, next, err := page(c, all)
	if err != nil {
		return nil, err
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	out := map[string]any{"kind": "compute#firewallList", "id": c.link("global", "firewalls"),
		"selfLink": c.link("global", "firewalls")}
	var xs []map[string]any
	for _, f := range items {
		xs = append(xs, c.xFirewall(f))
	}
	if len(xs) > 0 {
		out["items"] = xs
	}
	if next != "" {
		out["nextPageToken"] = next
	}
	return out, nil
}

// xFirewall renders f. Call with s.mu held.
func (c *call) xFirewall(f *firewall) map[string]any {
	x := map[string]any{"kind": "compute#firewall", "id": fmt.Sprint(f.id), "name": f.name,
		"creationTimestamp": rfc3339(f.created), "network": c.link("global", "networks", f.network),
		"direction": f.direction, "priority": f.priority, "allowed": f.allowed, "disabled": f.disabled,
		"selfLink": c.link("global", "firewalls", f.name)}
	if f.description != "" {
		x["description"] = f.description
	}
	if len(f.sourceRanges) > 0 {
		x["sourceRanges"] = f.sourceRanges
	}
	if len(f.targetTags) > 0 {
		x["targetTags"] = f.targetTags
	}
	return x
}

// allow makes every backed region's firewall the union of the enabled
// firewalls' rules: each allowed protocol and port range from each IPv4
// source range. (Compute Engine firewalls are the network's, not a
// region's; target tags are not looked at: every firewall applies to
// every backed machine.)
func (s *Server) allow() {
	if s.sim.Backer == nil {
		return
	}
	s.allowMu.Lock()
	defer s.allowMu.Unlock()
	s.mu.Lock()
	var rules []cloudsim.Rule
	for _, f := range s.sortedFirewalls() {
		if !f.disabled && f.direction == "INGRESS" {
			rules = append(rules, f.backing()...)
		}
	}
	regions := slices.Sorted(maps.Keys(s.regions))
	s.mu.Unlock()
	rules = cloudsim.SortRules(rules)
	for _, r := range regions {
		// A failure leaves the last firewall; the next change retries.
		_ = s.sim.Backer.Allow(s.Context(), r, rules)
	}
}

// backing is the firewall as the backing's rules: each allowed entry
// ("all" every protocol; tcp and udp each of their ports or port ranges,
// none: every port; icmp every type) from each source range. A firewall
// without source ranges lets in every IPv4 address, as Compute Engine
// reads it. IPv6 ranges are left out (the backing is IPv4), and so are
// the protocols the backing does not filter (esp, ah, sctp, ipip).
func (f *firewall) backing() []cloudsim.Rule {
	var sources []netip.Prefix
	for _, r := range f.sourceRanges {
		p, err := netip.ParsePrefix(r)
		if err != nil {
			a, aerr := netip.ParseAddr(r)
			if aerr != nil {
				continue
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if p.Addr().Is4() {
			sources = append(sources, p.Masked())
		}
	}
	if len(f.sourceRanges) == 0 {
		sources = []netip.Prefix{netip.PrefixFrom(netip.IPv4Unspecified(), 0)}
	}
	var out []cloudsim.Rule
	for _, a := range f.allowed {
		var rules []cloudsim.Rule
		switch proto := strings.ToLower(a.IPProtocol); proto {
		case "all":
			rules = []cloudsim.Rule{{}}
		case "icmp":
			rules = []cloudsim.Rule{{Protocol: proto}}
		case "tcp", "udp":
			if len(a.Ports) == 0 {
				rules = []cloudsim.Rule{{Protocol: proto}}
			}
			for _, port := range a.Ports {
				if from, to, ok := portRange(port); ok {
					rules = append(rules, cloudsim.Rule{Protocol: proto, From: from, To: to})
				}
			}
		}
		for _, r := range rules {
			for _, src := range sources {
				r.Source = src
				out = append(out, r)
			}
		}
	}
	return out
}

// portRange reads an allowed entry's port: "22" or "30000-32767".
func portRange(s string) (from, to int, ok bool) {
	lo, hi, isRange := strings.Cut(s, "-")
	from, err1 := strconv.Atoi(lo)
	to, err2 := from, error(nil)
	if isRange {
		to, err2 = strconv.Atoi(hi)
	}
	if err1 != nil || err2 != nil || from < 0 || to > 65535 || from > to {
		return 0, 0, false
	}
	return from, to, true
}

// imageByLink resolves a sourceImage: projects/P/global/images/NAME or
// projects/P/global/images/family/F, as a URL or a partial path. Call with
// s.mu held.
func (s *Server) imageByLink(link string) (Image, error) {
	m := imageLink.FindStringSubmatch(link)
	if m == nil {
		return Image{}, invalidField("resource.disks[0].initializeParams.sourceImage", link, "")
	}
	if m[2] == "family/" {
		return s.imageFamily(m[1], m[3])
	}
	for _, im := range s.opts.Images {
		if im.Project == m[1] && im.Name == m[3] {
			return im, nil
		}
	}
	return Image{}, notFound(fmt.Sprintf("projects/%s/global/images/%s", m[1], m[3]))
}

var imageLink = regexp.MustCompile(`(?:^|/)projects/([^/]+)/global/images/(family/)?([^/]+)$`)

func (s *Server) imageFamily(project, family string) (Image, error) {
	var best *Image
	for i, im := range s.opts.Images {
		if im.Project == project && im.Family == family && !im.Deprecated {
			if best == nil || im.Name > best.Name {
				best = &s.opts.Images[i]
			}
		}
	}
	if best == nil {
		return Image{}, notFound(fmt.Sprintf("projects/%s/global/images/family/%s", project, family))
	}
	return *best, nil
}

func (c *call) xImage(im Image) map[string]any {
	x := map[string]any{"kind": "compute#image", "id": fmt.Sprint(len(im.Name) * 7777), "name": im.Name,
		"family": im.Family, "status": "READY", "architecture": "X86_64",
		"selfLink": c.base + "/projects/" + im.Project + "/global/images/" + im.Name}
	if im.Deprecated {
		x["deprecated"] = map[string]string{"state": "DEPRECATED"}
	}
	return x
}

func (c *call) imageFromFamily() (any, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	im, err := c.s.imageFamily(c.project, c.rest[3])
	if err != nil {
		return nil, err
	}
	return c.xImage(im), nil
}

func (c *call) getImage() (any, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	im, err := c.s.imageByLink("projects/" + c.project + "/global/images/" + c.rest[2])
	if err != nil {
		return nil, err
	}
	return c.xImage(im), nil
}

// filter is a conjunction of comparisons.
type filter []comparison

type comparison struct {
	field, value string
	negate       bool
}

var filterTerm = regexp.MustCompile(`^\s*(?:AND\s+)?\(?\s*([A-Za-z][A-Za-z0-9_.\-]*)\s*(!=|=)\s*("(?:[^"\\]|\\.)*"|[^\s()"]+)\s*\)?\s*`)

// parseFilter reads Compute Engine's list filter: comparisons "field =
// value" or "field != value", optionally parenthesised, joined by
// whitespace or AND.
func parseFilter(s string) (filter, error) {
	var f filter
	rest := s
	for strings.TrimSpace(rest) != "" {
		m := filterTerm.FindStringSubmatch(rest)
		if m == nil {
			return nil, invalidField("filter", s, "Invalid list filter expression.")
		}
		v := m[3]
		if strings.HasPrefix(v, `"`) {
			if err := json.Unmarshal([]byte(v), &v); err != nil {
				return nil, invalidField("filter", s, "Invalid string literal.")
			}
		}
		f = append(f, comparison{field: m[1], value: v, negate: m[2] == "!="})
		rest = rest[len(m[0]):]
	}
	return f, nil
}

func (f filter) match(get func(field string) (string, bool)) bool {
	for _, c := range f {
		v, ok := get(c.field)
		if (ok && v == c.value) == c.negate {
			return false
		}
	}
	return true
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}
