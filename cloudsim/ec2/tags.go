package ec2

import (
	"cmp"
	"slices"
	"strings"
	"time"
)

// tagged is a resource as DescribeTags lists it: its id, its type as EC2
// names it (TagSpecification's resource types) and its tags.
type tagged struct {
	seq  uint64
	id   string
	typ  string
	tags map[string]string
}

// taggedResources lists the region's taggable resources in sequence
// order: instances DescribeInstances shows (terminated ones while they
// are listed), security groups and their rules, VPCs, subnets and key
// pairs. Call with s.mu held.
func (s *Server) taggedResources(rg *region, now time.Time) []tagged {
	var out []tagged
	for _, in := range rg.instances {
		if s.seen(in, now) {
			out = append(out, tagged{in.seq, in.id, "instance", in.tags})
		}
	}
	for _, g := range rg.groups {
		out = append(out, tagged{g.seq, g.id, "security-group", g.tags})
		for _, r := range slices.Concat(g.ingress, g.egress) {
			out = append(out, tagged{r.seq, r.id, "security-group-rule", r.tags})
		}
	}
	for _, v := range rg.vpcs {
		out = append(out, tagged{v.seq, v.id, "vpc", v.tags})
	}
	for _, sn := range rg.subnets {
		out = append(out, tagged{sn.seq, sn.id, "subnet", sn.tags})
	}
	for _, k := range rg.keys {
		out = append(out, tagged{k.seq, k.id, "key-pair", k.tags})
	}
	slices.SortFunc(out, func(a, b tagged) int { return cmp.Compare(a.seq, b.seq) })
	return out
}

// describeTags lists tags one per resource and key, in the resources'
// order and by key within one, paged by (resource, key).
func (c *call) describeTags() (requestIDSetter, error) {
	fs, limit, err := c.describing()
	if err != nil {
		return nil, err
	}
	s := c.s
	s.mu.Lock()
	rg, now := s.region(c.region), s.now()
	s.sweep(rg, now)
	if err := checkFilters(fs, tagAttrsOf(tagged{}, "", "")); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	type row struct {
		seq uint64
		x   xTagDescription
	}
	var rows []row
	for _, r := range s.taggedResources(rg, now) {
		for _, k := range sortedKeys(r.tags) {
			ok, err := matchAll(fs, tagAttrsOf(r, k, r.tags[k]))
			if err != nil {
				s.mu.Unlock()
				return nil, err
			}
			if ok {
				rows = append(rows, row{seq: r.seq, x: xTagDescription{ResourceID: r.id, ResourceType: r.typ, Key: k, Value: r.tags[k]}})
			}
		}
	}
	s.mu.Unlock()
	pg, next, err := pageBy(c, rows, func(r row) cursor { return cursor{seq: r.seq, key: r.x.Key} }, limit)
	if err != nil {
		return nil, err
	}
	out := &describeTagsResponse{NextToken: next}
	for _, r := range pg {
		out.Tags = append(out.Tags, r.x)
	}
	return out, nil
}

// tagAttrsOf answers DescribeTags' filters for the tag key=value of
// resource r: key, value, resource-id, resource-type, and tag:<key>,
// which keeps the tags of resources that have that tag.
func tagAttrsOf(r tagged, key, value string) attrs {
	return func(f string) ([]string, bool) {
		switch f {
		case "key":
			return []string{key}, true
		case "value":
			return []string{value}, true
		case "resource-id":
			return []string{r.id}, true
		case "resource-type":
			return []string{r.typ}, true
		}
		if strings.HasPrefix(f, "tag:") {
			return tagAttrs(r.tags, f)
		}
		return nil, false
	}
}
