package docs_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/cloudtransit/transit/districts"
)

// fileProblem is a problem transit's loader found in a file: where in it
// (a JSON path as districts.Problem has it) and what.
type fileProblem struct {
	path string
	msg  string
}

// checkFile checks a whole-file example as transit reads that file on its
// own: the strict decoder (unknown keys are errors) and the file's own
// rules, through the districts package's entry points. References to
// other files are the page's cross-check.
func (c *checker) checkFile(kind string, data []byte) []fileProblem {
	dir, err := os.MkdirTemp(c.tmp, "file-")
	if err != nil {
		return []fileProblem{{"", err.Error()}}
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, kind)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return []fileProblem{{"", err.Error()}}
	}
	switch kind {
	case "cluster.json":
		// Without districts.json, references into it are not checked
		// (districts.Load): cluster.json's own rules only.
		_, err = districts.Load(districts.Paths{Cluster: path})
		return problemsOf(err, kind)
	case "districts.json":
		// Without credentials.json, credential ids are not checked.
		_, err = districts.LoadDistricts(districts.Paths{Districts: path})
		return problemsOf(err, kind)
	case "credentials.json":
		_, err = districts.LoadCredentials(path)
		return problemsOf(err, "")
	case "prices.json":
		// Without districts.json, its districts and flavors are not
		// checked.
		_, err = districts.Load(districts.Paths{Prices: path})
		return problemsOf(err, kind)
	case "resources.json":
		_, err = districts.LoadResources(path)
		return problemsOf(err, "")
	}
	return []fileProblem{{"", "no check for " + kind}}
}

// problemsOf keeps the problems of file ("" for all of them).
func problemsOf(err error, file string) []fileProblem {
	if err == nil {
		return nil
	}
	var ps districts.Problems
	if !errors.As(err, &ps) {
		return []fileProblem{{"", err.Error()}}
	}
	var out []fileProblem
	for _, p := range ps {
		if file != "" && p.File != file {
			continue
		}
		msg := p.Message
		if p.Hint != "" {
			msg += "; " + p.Hint
		}
		out = append(out, fileProblem{p.Path, msg})
	}
	return out
}

// locate turns a file's problems into findings at the lines their JSON
// paths point to. data is the fence's text, perhaps with a "{" or "["
// put before it.
func locate(f fence, data []byte, ps []fileProblem) []finding {
	out := make([]finding, 0, len(ps))
	for _, p := range ps {
		line := f.line
		where := p.path
		if m := unknownKey.FindStringSubmatch(p.msg); m != nil {
			where += `["` + m[1] + `"]` // the key's own line
		}
		if o, ok := offsetOf(data, where); ok {
			line = f.bodyLine(bytes.Count(data[:o], []byte("\n")))
		}
		msg := f.kind() + ": " + p.msg
		if p.path != "" {
			msg = f.kind() + ": " + p.path + ": " + p.msg
		}
		out = append(out, finding{line, ruleJSON, msg})
	}
	return out
}

// unknownKey is the strict decoder's message for a key its type lacks.
var unknownKey = regexp.MustCompile(`^unknown key "((?:[^"\\]|\\.)*)"`)

// pathElem is one step of a JSON path: a key, or an index when key is
// "" and isIndex.
type pathElem struct {
	key     string
	index   int
	isIndex bool
}

// parsePath reads a path as the districts package writes it:
// deployments[2].district, [0].flavors[1].machine_type, tags["a b"].
func parsePath(path string) ([]pathElem, bool) {
	var out []pathElem
	for path != "" {
		switch {
		case strings.HasPrefix(path, "."):
			path = path[1:]
		case strings.HasPrefix(path, `["`):
			end := strings.Index(path, `"]`)
			for end > 0 && path[end-1] == '\\' {
				next := strings.Index(path[end+1:], `"]`)
				if next < 0 {
					return nil, false
				}
				end += 1 + next
			}
			if end < 0 {
				return nil, false
			}
			key, err := strconv.Unquote(path[1 : end+1])
			if err != nil {
				return nil, false
			}
			out, path = append(out, pathElem{key: key}), path[end+2:]
		case strings.HasPrefix(path, "["):
			end := strings.Index(path, "]")
			i, err := strconv.Atoi(path[1:max(end, 1)])
			if end < 0 || err != nil {
				return nil, false
			}
			out, path = append(out, pathElem{index: i, isIndex: true}), path[end+1:]
		default:
			end := strings.IndexAny(path, ".[")
			if end < 0 {
				end = len(path)
			}
			out, path = append(out, pathElem{key: path[:end]}), path[end:]
		}
	}
	return out, true
}

// offsetOf finds where path's value starts in data, or, for a path that is
// not there (a missing key), where the deepest part of it that is.
func offsetOf(data []byte, path string) (int, bool) {
	elems, ok := parsePath(path)
	if !ok || len(elems) == 0 {
		return 0, false
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	best := -1
	var walk func(elems []pathElem) bool
	// skip reads one whole value.
	skip := func() bool {
		var v json.RawMessage
		return dec.Decode(&v) == nil
	}
	walk = func(elems []pathElem) bool {
		start := skipSpace(data, int(dec.InputOffset()))
		best = start
		if len(elems) == 0 {
			return true
		}
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		switch tok {
		case json.Delim('{'):
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return false
				}
				if k, _ := kt.(string); !elems[0].isIndex && k == elems[0].key {
					best = skipSpace(data, int(dec.InputOffset()))
					return walk(elems[1:])
				}
				if !skip() {
					return false
				}
			}
		case json.Delim('['):
			for i := 0; dec.More(); i++ {
				if elems[0].isIndex && i == elems[0].index {
					return walk(elems[1:])
				}
				if !skip() {
					return false
				}
			}
		}
		return false
	}
	walk(elems)
	if best < 0 {
		return 0, false
	}
	return best, true
}

// skipSpace moves past white space, commas and colons.
func skipSpace(data []byte, i int) int {
	for i < len(data) && strings.IndexByte(" \t\r\n,:", data[i]) >= 0 {
		i++
	}
	return i
}

// --- addon settings ---------------------------------------------------

// checkSettings checks addon settings as cluster.json's "addons" holds
// them: one entry ({"name": …, "settings": {…}}), a list of entries, an
// "addons": [...] member, or a bare settings object (then it must be fine
// for some addon). Each is validated by transit's own loader inside the
// repository's examples/kubernetes/cluster.json.
func (c *checker) checkSettings(f fence) []finding {
	data := []byte(f.text())
	v, off, err := parseFragment(data)
	if err != nil {
		return []finding{jsonSyntax(f, data, err)}
	}
	whole := data
	if off > 0 {
		whole = append(append([]byte(wrapFor(v)), data...), closeFor(v)...)
	}
	var entries []any
	var pathOf func(string) string // a problem's path in cluster.json → in the fence
	switch x := v.(type) {
	case []any:
		entries, pathOf = x, func(p string) string { return strings.TrimPrefix(p, "addons") }
	case map[string]any:
		switch {
		case x["addons"] != nil:
			list, ok := x["addons"].([]any)
			if !ok {
				return []finding{{f.line, ruleJSON, "settings: \"addons\" is not a list"}}
			}
			entries, pathOf = list, func(p string) string { return p }
		case x["name"] != nil:
			entries, pathOf = []any{x}, func(p string) string { return strings.TrimPrefix(strings.TrimPrefix(p, "addons[0]"), ".") }
		default:
			return c.checkBareSettings(f, whole, x)
		}
	default:
		return []finding{{f.line, ruleJSON, "settings: not an addon entry, a list of them, an \"addons\" member or a settings object"}}
	}
	ps, err := c.checkAddons(entries)
	if err != nil {
		return []finding{{f.line, ruleJSON, err.Error()}}
	}
	for i := range ps {
		ps[i].path = pathOf(ps[i].path)
	}
	return locate(f, whole, ps)
}

func wrapFor(v any) string {
	if _, ok := v.([]any); ok {
		return "["
	}
	return "{"
}

func closeFor(v any) string {
	if _, ok := v.([]any); ok {
		return "]"
	}
	return "}"
}

// checkBareSettings checks a settings object without its addon's name:
// fine when some addon takes it; otherwise the problems it has as the
// settings of the addon it fits best.
func (c *checker) checkBareSettings(f fence, whole []byte, settings map[string]any) []finding {
	var best []fileProblem
	bestName := ""
	for _, name := range slices.Sorted(maps.Keys(districts.AddonSettings)) {
		ps, err := c.checkAddons([]any{map[string]any{"name": name, "settings": settings}})
		if err != nil {
			return []finding{{f.line, ruleJSON, err.Error()}}
		}
		if len(ps) == 0 {
			return nil
		}
		if best == nil || len(ps) < len(best) {
			best, bestName = ps, name
		}
	}
	for i := range best {
		best[i].path = strings.TrimPrefix(strings.TrimPrefix(best[i].path, "addons[0].settings"), ".")
		best[i].msg += fmt.Sprintf(" (no addon takes these settings; as %s's)", bestName)
	}
	return locate(f, whole, best)
}

// checkAddons validates addon entries as the "addons" of the repository's
// examples/kubernetes/cluster.json, returning the problems under "addons".
func (c *checker) checkAddons(entries []any) ([]fileProblem, error) {
	base, err := os.ReadFile(filepath.Join(c.root, "examples", "kubernetes", "cluster.json"))
	if err != nil {
		return nil, err
	}
	var cluster map[string]any
	if err := json.Unmarshal(base, &cluster); err != nil {
		return nil, fmt.Errorf("examples/kubernetes/cluster.json: %w", err)
	}
	cluster["addons"] = entries
	data, err := json.Marshal(cluster)
	if err != nil {
		return nil, err
	}
	var out []fileProblem
	for _, p := range c.checkFile("cluster.json", data) {
		if p.path == "addons" || strings.HasPrefix(p.path, "addons[") || strings.HasPrefix(p.path, "addons.") {
			out = append(out, p)
		}
	}
	return out, nil
}

// --- the page's files together ----------------------------------------

// crossCheck checks each cluster.json example of a page together with the
// page's districts.json examples (and prices.json examples, if any), and
// each prices.json example with the districts.json examples: with at least
// one of them it must load as `transit validate` loads it. A page without
// a districts.json example has nothing to check them with.
func (c *checker) crossCheck(files []jsonFile) []finding {
	byKind := map[string][]jsonFile{}
	for _, f := range files {
		byKind[f.kind] = append(byKind[f.kind], f)
	}
	var out []finding
	for _, kind := range []string{"cluster.json", "prices.json"} {
		for _, f := range byKind[kind] {
			var sets [][]jsonFile // the files to load f with
			for _, ds := range byKind["districts.json"] {
				sets = append(sets, []jsonFile{ds})
				if kind == "cluster.json" {
					for _, pr := range byKind["prices.json"] {
						sets = append(sets, []jsonFile{ds, pr})
					}
				}
			}
			fds, err := c.bestWith(f, sets)
			if err != nil {
				fds = []finding{{f.line, ruleJSON, err.Error()}}
			}
			out = append(out, fds...)
		}
	}
	return out
}

// bestWith loads f with each set of other files: none of its problems when
// some set gives none, else the problems of the set that gives the fewest.
func (c *checker) bestWith(f jsonFile, sets [][]jsonFile) ([]finding, error) {
	var best []fileProblem
	var bestSet []jsonFile
	for _, set := range sets {
		ps, err := c.loadTogether(append([]jsonFile{f}, set...), f.kind)
		if err != nil {
			return nil, err
		}
		if len(ps) == 0 {
			return nil, nil
		}
		if best == nil || len(ps) < len(best) {
			best, bestSet = ps, set
		}
	}
	var with []string
	for _, o := range bestSet {
		with = append(with, fmt.Sprintf("the %s at line %d", o.kind, o.line))
	}
	fe := fence{line: f.line, info: "json " + f.kind, body: strings.Split(strings.TrimSuffix(string(f.data), "\n"), "\n")}
	out := locate(fe, f.data, best)
	for i := range out {
		out[i].msg += " (with " + strings.Join(with, " and ") + " on this page)"
	}
	return out, nil
}

// loadTogether loads files as transit validate does and returns the
// problems of the file of kind.
func (c *checker) loadTogether(files []jsonFile, kind string) ([]fileProblem, error) {
	dir, err := os.MkdirTemp(c.tmp, "together-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	var paths districts.Paths
	for _, f := range files {
		path := filepath.Join(dir, f.kind)
		switch f.kind {
		case "cluster.json":
			paths.Cluster = path
		case "districts.json":
			paths.Districts = path
		case "prices.json":
			paths.Prices = path
		default:
			return nil, fmt.Errorf("cannot load %s with the others", f.kind)
		}
		if err := os.WriteFile(path, f.data, 0o600); err != nil {
			return nil, err
		}
	}
	_, err = districts.Load(paths)
	return problemsOf(err, kind), nil
}
