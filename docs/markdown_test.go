package docs_test

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"unicode"
)

// page is a Markdown file as the checks read it: its fenced code blocks,
// its indented code blocks, its headings' anchors and its links. A line
// scanner, not a full CommonMark parser: it knows fences (``` and ~~~, at
// any indentation), ATX and setext headings, list items (so that a list's
// continued paragraphs are not taken for indented code), inline code spans
// and links.
type page struct {
	path     string // as opened
	name     string // as messages name it: relative to the repository root
	lines    []string
	prose    []string // lines, with "" for the lines of code blocks
	fences   []fence
	indented []int // the first line of each indented code block
	anchors  map[string]bool
	links    []link
}

// fence is one fenced code block.
type fence struct {
	line   int    // of the opening fence, 1-based
	info   string // the info string, trimmed
	body   []string
	closed bool
}

// lang and kind are the info string's first and second words.
func (f fence) lang() string { return word(f.info, 0) }
func (f fence) kind() string { return word(f.info, 1) }
func (f fence) words() int   { return len(strings.Fields(f.info)) }

// bodyLine is the file's line of the body's line i (0-based).
func (f fence) bodyLine(i int) int { return f.line + 1 + i }

func (f fence) text() string {
	if len(f.body) == 0 {
		return ""
	}
	return strings.Join(f.body, "\n") + "\n"
}

func word(s string, i int) string {
	if w := strings.Fields(s); i < len(w) {
		return w[i]
	}
	return ""
}

// link is one link destination in the text (not in code).
type link struct {
	line int
	dest string
}

var (
	fenceOpen   = regexp.MustCompile("^( *)(`{3,}|~{3,})(.*)$")
	atxHeading  = regexp.MustCompile(`^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)
	setextUnder = regexp.MustCompile(`^ {0,3}(=+|-+)[ \t]*$`)
	listItem    = regexp.MustCompile(`^( *)([-*+]|[0-9]{1,9}[.)])( +|$)`)
	// [text](dest) and ![alt](dest), with an optional title; the text may
	// span lines.
	inlineLink = regexp.MustCompile(`!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(\s*(<[^>\n]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)(?:\s+(?:"[^"]*"|'[^']*'))?\s*\)`)
	refDef     = regexp.MustCompile(`(?m)^ {0,3}\[[^\]\n]+\]:[ \t]*(<[^>\n]*>|\S+)`)
	htmlLink   = regexp.MustCompile(`(?i)<(?:a|img)\b[^>]*?\b(?:href|src)\s*=\s*"([^"]*)"`)
	htmlAnchor = regexp.MustCompile(`(?i)<a\b[^>]*?\b(?:name|id)\s*=\s*"([^"]*)"`)
	htmlTag    = regexp.MustCompile(`<[^>]*>`)
	mdLinkText = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
)

// readPage reads and scans a Markdown file; name is how messages call it.
func readPage(path, name string) (*page, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	p := parsePage(string(data))
	p.path, p.name = path, name
	return p, nil
}

func parsePage(text string) *page {
	p := &page{lines: strings.Split(strings.TrimSuffix(strings.ReplaceAll(text, "\r\n", "\n"), "\n"), "\n"), anchors: map[string]bool{}}
	// prose is the text with code blanked out (fenced and indented
	// blocks, inline code spans), for links: same lines, same lengths.
	prose := make([]string, len(p.lines))
	slugs := map[string]int{}
	addHeading := func(text string) {
		s := slug(text)
		n := slugs[s]
		slugs[s] = n + 1
		if n > 0 {
			s = fmt.Sprintf("%s-%d", s, n)
		}
		p.anchors[s] = true
	}

	var (
		open       *fence
		openIndent int
		openMark   string
		listCol    = -1 // content column of the list item we are in; -1 outside lists
		prevBlank  = true
		inCode     = false // in an indented code block
		paragraph  = false // the previous line is paragraph text (for setext headings)
	)
	for i, line := range p.lines {
		n := i + 1
		if open != nil {
			if isClosingFence(line, openMark) {
				open.closed = true
				p.fences = append(p.fences, *open)
				open = nil
			} else {
				open.body = append(open.body, stripIndent(line, openIndent))
			}
			continue
		}
		blank := strings.TrimSpace(line) == ""
		indent := indentOf(line)
		base := max(listCol, 0)
		if inCode {
			if blank || indent >= base+4 {
				prevBlank = blank
				continue
			}
			inCode = false
		}
		if blank {
			prevBlank, paragraph = true, false
			continue
		}
		if prevBlank && listCol >= 0 && indent < listCol && !listItem.MatchString(line) {
			listCol, base = -1, 0 // the list ended
		}
		switch m := fenceOpen.FindStringSubmatch(line); {
		case m != nil && indent < base+4 && !(m[2][0] == '`' && strings.Contains(m[3], "`")):
			open = &fence{line: n, info: strings.TrimSpace(m[3])}
			openIndent, openMark = len(m[1]), m[2]
			prevBlank, paragraph = false, false
			continue
		case prevBlank && indent >= base+4:
			p.indented = append(p.indented, n)
			inCode, prevBlank, paragraph = true, false, false
			continue
		}
		prose[i] = line
		prevBlank = false
		if m := listItem.FindStringSubmatch(line); m != nil && indent < base+4 {
			listCol = len(m[0])
			if m[3] == "" || len(m[3]) > 4 {
				listCol = len(m[1]) + len(m[2]) + 1
			}
			paragraph = false
			continue
		}
		if m := atxHeading.FindStringSubmatch(line); m != nil {
			addHeading(m[2])
			paragraph = false
			continue
		}
		if m := setextUnder.FindStringSubmatch(line); m != nil && paragraph {
			addHeading(p.lines[i-1])
			paragraph = false
			continue
		}
		paragraph = !strings.HasPrefix(strings.TrimSpace(line), "|")
	}
	if open != nil {
		p.fences = append(p.fences, *open)
	}
	for _, m := range htmlAnchor.FindAllStringSubmatch(strings.Join(prose, "\n"), -1) {
		p.anchors[m[1]] = true
	}
	p.links = findLinks(blankCodeSpans(strings.Join(prose, "\n")))
	p.prose = prose
	return p
}

// isClosingFence: the opening fence's character, at least as many, and
// nothing else on the line.
func isClosingFence(line, mark string) bool {
	t := strings.TrimSpace(line)
	return len(t) >= len(mark) && strings.Trim(t, mark[:1]) == ""
}

func indentOf(line string) int {
	n := 0
	for _, r := range line {
		switch r {
		case ' ':
			n++
		case '\t':
			n += 4 - n%4
		default:
			return n
		}
	}
	return n
}

func stripIndent(line string, n int) string {
	for n > 0 && strings.HasPrefix(line, " ") {
		line, n = line[1:], n-1
	}
	return line
}

// blankCodeSpans replaces inline code spans (and their backticks) with
// spaces, keeping newlines, so that links are found only in prose.
func blankCodeSpans(s string) string {
	b := []byte(s)
	for i := 0; i < len(b); {
		if b[i] != '`' {
			i++
			continue
		}
		j := i
		for j < len(b) && b[j] == '`' {
			j++
		}
		run := j - i
		// Find the closing run of exactly the same length.
		k := j
		closed := -1
		for k < len(b) {
			if b[k] != '`' {
				k++
				continue
			}
			e := k
			for e < len(b) && b[e] == '`' {
				e++
			}
			if e-k == run {
				closed = e
				break
			}
			k = e
		}
		if closed < 0 {
			i = j
			continue
		}
		for x := i; x < closed; x++ {
			if b[x] != '\n' {
				b[x] = ' '
			}
		}
		i = closed
	}
	return string(b)
}

func findLinks(prose string) []link {
	lineAt := func(off int) int { return strings.Count(prose[:off], "\n") + 1 }
	var out []link
	add := func(off int, dest string) {
		dest = strings.TrimSuffix(strings.TrimPrefix(dest, "<"), ">")
		out = append(out, link{line: lineAt(off), dest: dest})
	}
	for _, m := range inlineLink.FindAllStringSubmatchIndex(prose, -1) {
		add(m[0], prose[m[4]:m[5]])
	}
	for _, m := range refDef.FindAllStringSubmatchIndex(prose, -1) {
		add(m[0], prose[m[2]:m[3]])
	}
	for _, m := range htmlLink.FindAllStringSubmatchIndex(prose, -1) {
		add(m[0], prose[m[2]:m[3]])
	}
	return out
}

// slug is GitHub's anchor of a heading: the text as rendered (no inline
// markup), lower case, every character but letters, digits, spaces, "-"
// and "_" removed, spaces turned into "-". Duplicates get "-1", "-2", ….
func slug(heading string) string {
	text := mdLinkText.ReplaceAllString(heading, "$1")
	text = htmlTag.ReplaceAllString(text, "")
	text = strings.NewReplacer("`", "", "*", "").Replace(text)
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(text)) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}
