package docs_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/cloudtransit/transit/cmd/transit/cli"
)

// table is a Markdown table: its header's line, its header cells and its
// rows' lines and cells.
type table struct {
	line   int
	header []string
	rows   []tableRow
}

type tableRow struct {
	line  int
	cells []string
}

var tableSep = regexp.MustCompile(`^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$`)

// tables finds the page's tables (outside code blocks).
func (p *page) tables() []table {
	var out []table
	for i := 0; i+1 < len(p.prose); i++ {
		if !strings.HasPrefix(strings.TrimSpace(p.prose[i]), "|") || !tableSep.MatchString(p.prose[i+1]) {
			continue
		}
		t := table{line: i + 1, header: cells(p.prose[i])}
		j := i + 2
		for ; j < len(p.prose) && strings.HasPrefix(strings.TrimSpace(p.prose[j]), "|"); j++ {
			t.rows = append(t.rows, tableRow{line: j + 1, cells: cells(p.prose[j])})
		}
		out = append(out, t)
		i = j - 1
	}
	return out
}

// cells splits a table line at its unescaped "|"s, outside code spans.
func cells(line string) []string {
	line = strings.TrimSpace(line)
	line = strings.TrimPrefix(line, "|")
	if strings.HasSuffix(line, "|") && !strings.HasSuffix(line, `\|`) {
		line = line[:len(line)-1]
	}
	var out []string
	var cur strings.Builder
	code := false
	for i := 0; i < len(line); i++ {
		switch ch := line[i]; {
		case ch == '\\' && i+1 < len(line) && line[i+1] == '|':
			cur.WriteByte('|')
			i++
		case ch == '`':
			code = !code
			cur.WriteByte(ch)
		case ch == '|' && !code:
			out = append(out, strings.TrimSpace(cur.String()))
			cur.Reset()
		default:
			cur.WriteByte(ch)
		}
	}
	return append(out, strings.TrimSpace(cur.String()))
}

// plain is a cell's text without code and emphasis marks.
func plain(cell string) string {
	return strings.TrimSpace(strings.NewReplacer("`", "", "*", "").Replace(cell))
}

// kindColumns says whether a table lists error kinds (a first column
// "kind" or "error_kind" and a column "exit"), and which column is exit.
func kindColumns(t table) (exit int, ok bool) {
	if len(t.header) < 2 {
		return 0, false
	}
	if h := strings.ToLower(plain(t.header[0])); h != "kind" && h != "error_kind" {
		return 0, false
	}
	for i, h := range t.header {
		if h := strings.ToLower(plain(h)); h == "exit" || h == "exit code" || h == "exit codes" {
			return i, true
		}
	}
	return 0, false
}

var number = regexp.MustCompile(`\b[0-9]+\b`)

// checkKindTables checks every table of error kinds on a page against
// cli.ErrorKinds: each kind the code has is there once, none it has not,
// each with the code's exit codes (every number in the exit cell), and no
// cell is empty.
func checkKindTables(p *page) []finding {
	known := map[string]cli.ErrorKind{}
	for _, k := range cli.ErrorKinds() {
		known[k.Name] = k
	}
	var out []finding
	for _, t := range p.tables() {
		exitCol, ok := kindColumns(t)
		if !ok {
			continue
		}
		seen := map[string]bool{}
		for _, r := range t.rows {
			bad := func(format string, args ...any) {
				out = append(out, finding{r.line, ruleKinds, fmt.Sprintf(format, args...)})
			}
			name := plain(r.cells[0])
			k, ok := known[name]
			switch {
			case !ok:
				bad("%q is no error_kind transit prints (cli.ErrorKinds has %s)", name, kindNames())
				continue
			case seen[name]:
				bad("kind %q is listed twice", name)
				continue
			}
			seen[name] = true
			if len(r.cells) != len(t.header) {
				bad("kind %q: %d cells, the header has %d", name, len(r.cells), len(t.header))
				continue
			}
			for i, c := range r.cells {
				if plain(c) == "" {
					bad("kind %q: the %q cell is empty", name, plain(t.header[i]))
				}
			}
			var exits []int
			for _, n := range number.FindAllString(r.cells[exitCol], -1) {
				v, err := strconv.Atoi(n)
				if err == nil && !slices.Contains(exits, v) {
					exits = append(exits, v)
				}
			}
			want := slices.Clone(k.Exits)
			slices.Sort(exits)
			slices.Sort(want)
			if !slices.Equal(exits, want) {
				bad("kind %q: exit %v, the code's are %v (cli.ErrorKinds)", name, exits, want)
			}
		}
		var missing []string
		for _, k := range cli.ErrorKinds() {
			if !seen[k.Name] {
				missing = append(missing, fmt.Sprintf("%s (exit %s: %s)", k.Name, exitList(k.Exits), k.Meaning))
			}
		}
		if len(missing) > 0 {
			out = append(out, finding{t.line, ruleKinds, "missing from this table: " + strings.Join(missing, "; ")})
		}
	}
	return out
}

func exitList(exits []int) string {
	var s []string
	for _, e := range exits {
		s = append(s, strconv.Itoa(e))
	}
	return strings.Join(s, " or ")
}

func kindNames() string {
	var names []string
	for _, k := range cli.ErrorKinds() {
		names = append(names, k.Name)
	}
	return strings.Join(names, ", ")
}

// checkTroubleshooting checks a troubleshooting page: everything any page
// is checked for, and that it has a table of error kinds with a column for
// what causes each and one for what to do.
func (c *checker) checkTroubleshooting(ctx context.Context, path string) []problem {
	out := c.check(ctx, []string{path})
	p, err := c.page(path)
	if err != nil {
		return out
	}
	found := false
	for _, t := range p.tables() {
		if _, ok := kindColumns(t); ok && len(t.header) >= 4 {
			found = true
		}
	}
	if !found {
		out = append(out, problem{file: p.name, line: 1, rule: ruleKinds,
			msg: "no table of error kinds: | kind | exit | what causes it | what to do |, one row per kind of cli.ErrorKinds"})
	}
	return out
}
