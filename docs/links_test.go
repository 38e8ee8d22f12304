package docs_test

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// withScheme matches a link with a scheme (https:, mailto:, …): not checked.
var withScheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)

// checkLinks checks the page's relative links: the file (or directory)
// exists, and an anchor names a heading of the Markdown file it points
// to (GitHub's anchors). External links are not fetched.
func (c *checker) checkLinks(p *page) []finding {
	var out []finding
	for _, l := range p.links {
		dest := l.dest
		if dest == "" || withScheme.MatchString(dest) || strings.HasPrefix(dest, "//") {
			continue
		}
		target, anchor, _ := strings.Cut(dest, "#")
		if t, err := url.PathUnescape(target); err == nil {
			target = t
		}
		if a, err := url.PathUnescape(anchor); err == nil {
			anchor = a
		}
		file := p.path
		if target != "" {
			if strings.HasPrefix(target, "/") {
				file = filepath.Join(c.root, filepath.FromSlash(target)) // GitHub: from the repository's root
			} else {
				file = filepath.Join(filepath.Dir(p.path), filepath.FromSlash(target))
			}
			fi, err := os.Stat(file)
			if err != nil {
				out = append(out, finding{l.line, ruleLink, fmt.Sprintf("link %q: no file %s", dest, c.name(file))})
				continue
			}
			if fi.IsDir() || anchor == "" || !strings.HasSuffix(strings.ToLower(file), ".md") {
				continue
			}
		}
		if anchor == "" {
			continue
		}
		tp, err := c.page(file)
		if err != nil {
			out = append(out, finding{l.line, ruleLink, fmt.Sprintf("link %q: %v", dest, err)})
			continue
		}
		if !tp.anchors[anchor] {
			out = append(out, finding{l.line, ruleAnchor, fmt.Sprintf("link %q: %s has no heading with anchor #%s%s", dest, tp.name, anchor, nearest(anchor, tp.anchors))})
		}
	}
	return out
}

// nearest suggests the anchors closest to a, if any is close.
func nearest(a string, anchors map[string]bool) string {
	type cand struct {
		s string
		d int
	}
	var cs []cand
	for s := range anchors {
		if d := distance(a, s); d <= max(3, len(a)/3) {
			cs = append(cs, cand{s, d})
		}
	}
	if len(cs) == 0 {
		return ""
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].d < cs[j].d || cs[i].d == cs[j].d && cs[i].s < cs[j].s })
	var names []string
	for _, c := range cs[:min(3, len(cs))] {
		names = append(names, "#"+c.s)
	}
	return " (did you mean " + strings.Join(names, " or ") + "?)"
}

// distance is the Levenshtein distance of a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = slices.Min([]int{prev[j] + 1, cur[j-1] + 1, prev[j-1] + cost})
		}
		prev = cur
	}
	return prev[len(b)]
}
