package districts

import (
	"cmp"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// ErrInvalid is what every configuration problem report matches with
// errors.Is, so callers can tell bad input from failing I/O or clouds.
var ErrInvalid = errors.New("invalid configuration")

// Problem is one thing wrong with an input file.
type Problem struct {
	// File is the base name of the file, as the user named it.
	File string `json:"file"`
	// Path is the JSON path inside the file ("deployments[2].district");
	// empty for the file as a whole.
	Path    string `json:"path,omitempty"`
	Message string `json:"message"`
	// Hint says how to fix it, when that is not obvious from Message.
	Hint string `json:"hint,omitempty"`
}

func (p Problem) String() string {
	var b strings.Builder
	b.WriteString(p.File)
	b.WriteString(": ")
	if p.Path != "" {
		b.WriteString(p.Path)
		b.WriteString(": ")
	}
	b.WriteString(p.Message)
	if p.Hint != "" {
		b.WriteString("; ")
		b.WriteString(p.Hint)
	}
	return b.String()
}

// Problems is every problem found in a set of files, in file order and, in
// a file, in document order. It is the error Load and Validate return.
type Problems []Problem

// Error prints one line per problem.
func (ps Problems) Error() string {
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// Is makes errors.Is(err, ErrInvalid) true.
func (ps Problems) Is(target error) bool { return target == ErrInvalid }

// Err returns ps as an error, or nil when there are none.
func (ps Problems) Err() error {
	if len(ps) == 0 {
		return nil
	}
	return ps
}

// problems collects the problems of one file.
type problems struct {
	file string
	root reflect.Type // the file's top-level Go type, to order paths
	list Problems
}

func newProblems(file string, root reflect.Type) *problems {
	return &problems{file: file, root: root}
}

func (c *problems) add(path, msg, hint string) {
	c.list = append(c.list, Problem{File: c.file, Path: path, Message: msg, Hint: hint})
}

// sorted returns the problems in document order (by path; a struct's keys
// in field order, lists by index), keeping the order of equal paths.
func (c *problems) sorted() Problems {
	keys := make(map[string][]pathElem, len(c.list))
	for _, p := range c.list {
		if _, ok := keys[p.Path]; !ok {
			keys[p.Path] = pathKey(c.root, p.Path)
		}
	}
	out := slices.Clone(c.list)
	slices.SortStableFunc(out, func(a, b Problem) int {
		return slices.CompareFunc(keys[a.Path], keys[b.Path], func(x, y pathElem) int {
			return cmp.Or(cmp.Compare(x.n, y.n), cmp.Compare(x.s, y.s))
		})
	})
	return out
}

// pathElem is one step of a path as a sort key: a field index or list
// index in n, a map key in s.
type pathElem struct {
	n int
	s string
}

// pathKey turns a path written by joinKey/joinIndex into a sort key,
// resolving struct keys against t so that they sort in field order.
func pathKey(t reflect.Type, path string) []pathElem {
	var out []pathElem
	for path != "" {
		var key string
		index := -1
		switch {
		case path[0] == '.':
			path = path[1:]
			continue
		case strings.HasPrefix(path, `["`):
			q, err := strconv.QuotedPrefix(path[1:])
			if err != nil {
				return append(out, pathElem{n: 1 << 30, s: path})
			}
			key, _ = strconv.Unquote(q)
			path = strings.TrimPrefix(path[1+len(q):], "]")
		case path[0] == '[':
			end := strings.IndexByte(path, ']')
			n, err := strconv.Atoi(path[1:max(end, 1)])
			if end < 0 || err != nil {
				return append(out, pathElem{n: 1 << 30, s: path})
			}
			index, path = n, path[end+1:]
		default:
			end := strings.IndexAny(path, ".[")
			if end < 0 {
				end = len(path)
			}
			key, path = path[:end], path[end:]
		}
		for t != nil && t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch {
		case index >= 0:
			out = append(out, pathElem{n: index})
			if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
				t = t.Elem()
			} else {
				t = nil
			}
		case t != nil && t.Kind() == reflect.Struct && !isLeaf(t):
			f, ok := structFields(t).byName[key]
			if !ok {
				out = append(out, pathElem{n: 1 << 20, s: key})
				t = nil
				continue
			}
			out = append(out, pathElem{n: f.order})
			t = f.typ
		case t != nil && t.Kind() == reflect.Map:
			out = append(out, pathElem{s: key})
			t = t.Elem()
		default:
			out = append(out, pathElem{s: key})
			t = nil
		}
	}
	return out
}

// joinKey appends an object key to a JSON path; keys that would be
// ambiguous after a dot are quoted.
func joinKey(path, key string) string {
	if key != "" && strings.IndexFunc(key, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-')
	}) < 0 {
		if path == "" {
			return key
		}
		return path + "." + key
	}
	return path + "[" + strconv.Quote(key) + "]"
}

// joinIndex appends a list index to a JSON path.
func joinIndex(path string, i int) string {
	return path + "[" + strconv.Itoa(i) + "]"
}
