package ec2

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// params is a request's form: the EC2 Query protocol flattens every list
// as Name.1, Name.2, ... and every structure as Name.Member.
type params map[string]string

func newParams(v url.Values) params {
	p := make(params, len(v))
	for k, vs := range v {
		if len(vs) > 0 {
			p[k] = vs[0]
		}
	}
	return p
}

func (p params) get(k string) string { return p[k] }

func (p params) has(k string) bool { _, ok := p[k]; return ok }

// bool reads a boolean parameter; absent is false.
func (p params) bool(k string) (bool, error) {
	v, ok := p[k]
	if !ok || v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, invalidValue(v, k)
	}
	return b, nil
}

// int reads an integer parameter; absent is def.
func (p params) int(k string, def int) (int, error) {
	v, ok := p[k]
	if !ok || v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, invalidValue(v, k)
	}
	return n, nil
}

// indexes returns the list indexes present under prefix ("Filter" finds
// Filter.1.Name and Filter.2.Value.1: 1, 2), in order.
func (p params) indexes(prefix string) []int {
	seen := map[int]bool{}
	for k := range p {
		rest, ok := strings.CutPrefix(k, prefix+".")
		if !ok {
			continue
		}
		num, _, _ := strings.Cut(rest, ".")
		if n, err := strconv.Atoi(num); err == nil && n > 0 {
			seen[n] = true
		}
	}
	out := make([]int, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// list returns the values of the scalar list prefix.1, prefix.2, ...
func (p params) list(prefix string) []string {
	var out []string
	for _, i := range p.indexes(prefix) {
		if v, ok := p[prefix+"."+strconv.Itoa(i)]; ok {
			out = append(out, v)
		}
	}
	return out
}

// structs returns the members of the structure list prefix.N.*, each as
// its own params with the prefix.N. part removed.
func (p params) structs(prefix string) []params {
	var out []params
	for _, i := range p.indexes(prefix) {
		head := prefix + "." + strconv.Itoa(i) + "."
		sub := params{}
		for k, v := range p {
			if rest, ok := strings.CutPrefix(k, head); ok {
				sub[rest] = v
			}
		}
		out = append(out, sub)
	}
	return out
}

// filter is one Filter.N of a Describe request: a resource matches when
// one of its values for Name matches one of Values (wildcards * and ?).
type filter struct {
	name   string
	values []string
}

func (p params) filters() ([]filter, error) {
	var out []filter
	for _, s := range p.structs("Filter") {
		f := filter{name: s.get("Name"), values: s.list("Value")}
		if f.name == "" {
			return nil, &apiError{status: 400, code: "InvalidParameterValue", msg: "The filter 'null' is invalid"}
		}
		out = append(out, f)
	}
	return out, nil
}

// attrs answers a filter name with the resource's values for it; ok is
// false for a filter the resource type does not know.
type attrs func(name string) (values []string, ok bool)

// matchAll says whether a resource passes every filter, or which filter
// name is unknown.
func matchAll(fs []filter, a attrs) (bool, error) {
	for _, f := range fs {
		vals, ok := a(f.name)
		if !ok {
			return false, &apiError{status: 400, code: "InvalidParameterValue", msg: fmt.Sprintf("The filter '%s' is invalid", f.name)}
		}
		if !anyMatch(f.values, vals) {
			return false, nil
		}
	}
	return true, nil
}

// checkFilters refuses unknown filter names even when there is nothing
// to match them against, as EC2 does.
func checkFilters(fs []filter, a attrs) error {
	for _, f := range fs {
		if _, ok := a(f.name); !ok {
			return &apiError{status: 400, code: "InvalidParameterValue", msg: fmt.Sprintf("The filter '%s' is invalid", f.name)}
		}
	}
	return nil
}

func anyMatch(patterns, values []string) bool {
	for _, p := range patterns {
		for _, v := range values {
			if wildcard(p, v) {
				return true
			}
		}
	}
	return false
}

// tagAttrs answers the tag filters every taggable resource knows:
// tag:<key> and tag-key.
func tagAttrs(tags map[string]string, name string) ([]string, bool) {
	if k, ok := strings.CutPrefix(name, "tag:"); ok {
		if v, has := tags[k]; has {
			return []string{v}, true
		}
		return nil, true
	}
	if name == "tag-key" {
		keys := make([]string, 0, len(tags))
		for k := range tags {
			keys = append(keys, k)
		}
		return keys, true
	}
	if name == "tag-value" {
		vals := make([]string, 0, len(tags))
		for _, v := range tags {
			vals = append(vals, v)
		}
		return vals, true
	}
	return nil, false
}

// wildcard matches s against an EC2 filter pattern: * is any run of
// characters, ? any one, a backslash escapes the next character.
func wildcard(pattern, s string) bool {
	p, r := []rune(pattern), []rune(s)
	// Iterative matcher with one backtrack point, linear in practice.
	pi, si := 0, 0
	star, mark := -1, 0
	for si < len(r) {
		if pi < len(p) {
			switch c := p[pi]; {
			case c == '*':
				star, mark = pi, si
				pi++
				continue
			case c == '?':
				pi++
				si++
				continue
			case c == '\\' && pi+1 < len(p):
				if p[pi+1] == r[si] {
					pi += 2
					si++
					continue
				}
			case c == r[si]:
				pi++
				si++
				continue
			}
		}
		if star < 0 {
			return false
		}
		pi = star + 1
		mark++
		si = mark
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}

func invalidValue(v, k string) *apiError {
	return &apiError{status: 400, code: "InvalidParameterValue", msg: fmt.Sprintf("Value (%s) for parameter %s is invalid.", v, k)}
}

func missing(k string) *apiError {
	return &apiError{status: 400, code: "MissingParameter", msg: fmt.Sprintf("The request must contain the parameter %s", k)}
}

// tagSpecs reads TagSpecification.N for resource type typ; other allowed
// types are accepted and ignored, unknown ones refused.
func (p params) tagSpecs(typ string, allowed ...string) (map[string]string, error) {
	tags := map[string]string{}
	for _, s := range p.structs("TagSpecification") {
		rt := s.get("ResourceType")
		if rt != typ && !slices.Contains(allowed, rt) {
			return nil, &apiError{status: 400, code: "InvalidParameterValue",
				msg: fmt.Sprintf("'%s' is not a valid taggable resource type for this operation.", rt)}
		}
		got, err := readTags(s.structs("Tag"), false)
		if err != nil {
			return nil, err
		}
		if rt == typ {
			for k, v := range got {
				tags[k] = v
			}
		}
	}
	if len(tags) > maxTags {
		return nil, tagLimit()
	}
	return tags, nil
}

// maxTags is EC2's limit of user tags per resource.
const maxTags = 50

func tagLimit() *apiError {
	return &apiError{status: 400, code: "TagLimitExceeded", msg: fmt.Sprintf("The maximum number of Tags for a resource has been reached. Maximum: %d", maxTags)}
}

// readTags reads Tag.N.Key/Value lists. Keys starting with "aws:" are
// reserved for AWS itself, unless internal (the emulator planting them).
func readTags(list []params, internal bool) (map[string]string, error) {
	tags := map[string]string{}
	for _, t := range list {
		k, v := t.get("Key"), t.get("Value")
		switch {
		case k == "":
			return nil, &apiError{status: 400, code: "InvalidParameterValue", msg: "Tag key cannot be null"}
		case len(k) > 128:
			return nil, &apiError{status: 400, code: "InvalidParameterValue", msg: fmt.Sprintf("Tag key exceeds the maximum length of 128 characters: %s", k)}
		case len(v) > 256:
			return nil, &apiError{status: 400, code: "InvalidParameterValue", msg: fmt.Sprintf("Tag value exceeds the maximum length of 256 characters for key %s", k)}
		case !internal && strings.HasPrefix(strings.ToLower(k), "aws:"):
			return nil, &apiError{status: 400, code: "InvalidParameterValue", msg: "Tag keys starting with 'aws:' are reserved for internal use"}
		}
		tags[k] = v
	}
	return tags, nil
}
