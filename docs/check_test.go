package docs_test

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// problem is one thing wrong in the docs, at a file's line.
type problem struct {
	file string // relative to the repository root
	line int
	rule string // what kind of check found it, see rules
	msg  string
}

func (p problem) String() string { return fmt.Sprintf("%s:%d: %s: %s", p.file, p.line, p.rule, p.msg) }

// The rules, in the order a summary lists them.
const (
	ruleUntagged = "untagged"      // a fence without an info string
	ruleTag      = "tag"           // an info string the convention does not know
	ruleIndented = "indented-code" // an indented code block: checked by nothing
	ruleJSON     = "json"          // a json fence that does not parse or validate
	ruleYAML     = "yaml"          // a yaml fence that does not parse
	ruleK8s      = "k8s"           // a Kubernetes object that does not decode or validate
	ruleSh       = "sh"            // a transit command line the command tree refuses
	ruleGo       = "go"            // a go fence that does not parse
	ruleLink     = "link"          // a relative link to a file that does not exist
	ruleAnchor   = "anchor"        // a link to a heading that does not exist
	ruleKinds    = "error-kinds"   // a table of error kinds that differs from the code's
)

var rules = []string{ruleUntagged, ruleTag, ruleIndented, ruleJSON, ruleYAML, ruleK8s, ruleSh, ruleGo, ruleLink, ruleAnchor, ruleKinds}

// checker checks Markdown files against the convention (doc.go).
type checker struct {
	root  string           // the repository root: messages name files relative to it
	crds  *crdSet          // transit's own CustomResourceDefinitions
	pages map[string]*page // by absolute path, for links' anchors
	tmp   string           // a directory for the files the loaders read
}

// sharedCRDs are compiled once (their CEL rules take a while); the
// validators are safe for concurrent use, as in the API server.
var sharedCRDs = sync.OnceValues(loadCRDs)

func newChecker(root, tmp string) (*checker, error) {
	crds, err := sharedCRDs()
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	return &checker{root: abs, crds: crds, pages: map[string]*page{}, tmp: tmp}, nil
}

// check checks each file and returns every problem, by file and line.
func (c *checker) check(ctx context.Context, files []string) []problem {
	var out []problem
	for _, f := range files {
		p, err := c.page(f)
		if err != nil {
			out = append(out, problem{file: c.name(f), line: 0, rule: ruleLink, msg: err.Error()})
			continue
		}
		out = append(out, c.checkPage(ctx, p)...)
	}
	slices.SortStableFunc(out, func(a, b problem) int {
		return cmp.Or(cmp.Compare(a.file, b.file), cmp.Compare(a.line, b.line))
	})
	return out
}

// page reads a file once.
func (c *checker) page(path string) (*page, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	if p, ok := c.pages[abs]; ok {
		return p, nil
	}
	p, err := readPage(abs, c.name(abs))
	if err != nil {
		return nil, err
	}
	c.pages[abs] = p
	return p, nil
}

// name is path relative to the repository root, as messages say it.
func (c *checker) name(path string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		return path
	}
	if rel, err := filepath.Rel(c.root, abs); err == nil && !strings.HasPrefix(rel, "..") {
		return filepath.ToSlash(rel)
	}
	return path
}

func (c *checker) checkPage(ctx context.Context, p *page) []problem {
	var out []problem
	at := func(line int, rule, format string, args ...any) {
		out = append(out, problem{file: p.name, line: line, rule: rule, msg: fmt.Sprintf(format, args...)})
	}
	for _, n := range p.indented {
		at(n, ruleIndented, "an indented code block is checked by nothing: make it a fenced block with a tag (%s)", knownTags)
	}
	var files []jsonFile // whole-file JSON examples, for the page's cross-checks
	for _, f := range p.fences {
		if !f.closed {
			at(f.line, ruleTag, "fence never closed")
			continue
		}
		ps, jf := c.checkFence(ctx, f)
		for _, q := range ps {
			at(q.line, q.rule, "%s", q.msg)
		}
		if jf != nil {
			files = append(files, *jf)
		}
	}
	for _, q := range c.crossCheck(files) {
		at(q.line, q.rule, "%s", q.msg)
	}
	for _, q := range c.checkLinks(p) {
		at(q.line, q.rule, "%s", q.msg)
	}
	for _, q := range checkKindTables(p) {
		at(q.line, q.rule, "%s", q.msg)
	}
	return out
}

// finding is a problem before it knows its file.
type finding struct {
	line int
	rule string
	msg  string
}

// docFiles lists README.md and every Markdown file under docs/ but
// docs/testdata, the checks' own fixtures.
func docFiles(root string) ([]string, error) {
	files := []string{filepath.Join(root, "README.md")}
	docs := filepath.Join(root, "docs")
	err := filepath.WalkDir(docs, func(path string, d os.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && path == filepath.Join(docs, "testdata"):
			return filepath.SkipDir
		case !d.IsDir() && strings.HasSuffix(path, ".md"):
			files = append(files, path)
		}
		return nil
	})
	return files, err
}

// summary counts problems by rule, for a reader who wants the shape of a
// long list.
func summary(ps []problem) string {
	count := map[string]int{}
	for _, p := range ps {
		count[p.rule]++
	}
	var parts []string
	for _, r := range rules {
		if count[r] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", r, count[r]))
		}
	}
	return fmt.Sprintf("%d problems: %s", len(ps), strings.Join(parts, ", "))
}
