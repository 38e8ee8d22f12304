package docs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/parser"
	"go/scanner"
	"go/token"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/cloudtransit/transit/cmd/transit/cli"
)

// The info strings the convention knows (doc.go says what each checks).
var (
	jsonKinds = []string{"cluster.json", "districts.json", "credentials.json", "prices.json", "resources.json", "settings", "output", "fragment"}
	yamlKinds = []string{"k8s", "workflow", "fragment"}
	// Languages that take no second word.
	plainLangs = []string{"sh", "go", "text"}
	knownTags  = "json <what>, yaml <what>, " + strings.Join(plainLangs, ", ") + " (docs/doc.go)"
)

// checkFence checks one closed fence by its info string. A whole-file JSON
// example that is fine on its own comes back for the page's cross-checks.
func (c *checker) checkFence(ctx context.Context, f fence) ([]finding, *jsonFile) {
	tag := func(format string, args ...any) []finding {
		return []finding{{f.line, ruleTag, fmt.Sprintf(format, args...)}}
	}
	lang, kind := f.lang(), f.kind()
	switch {
	case f.info == "":
		return []finding{{f.line, ruleUntagged, "fence without a tag: give it one of " + knownTags}}, nil
	case lang == "json" && !slices.Contains(jsonKinds, kind):
		return tag("```%s: a json fence says what it shows: json <%s>", f.info, strings.Join(jsonKinds, "|")), nil
	case lang == "yaml" && !slices.Contains(yamlKinds, kind):
		return tag("```%s: a yaml fence says what it shows: yaml <%s>", f.info, strings.Join(yamlKinds, "|")), nil
	case lang == "json" || lang == "yaml":
		if f.words() > 2 {
			return tag("```%s: one word after %s, nothing more", f.info, lang), nil
		}
	case slices.Contains(plainLangs, lang):
		if f.words() > 1 {
			return tag("```%s: %s takes no second word", f.info, lang), nil
		}
	default:
		return tag("```%s: unknown language %q: use one of %s", f.info, lang, knownTags), nil
	}
	switch lang {
	case "json":
		return c.checkJSON(f)
	case "yaml":
		return c.checkYAML(ctx, f), nil
	case "sh":
		return checkShell(f), nil
	case "go":
		return checkGo(f), nil
	}
	return nil, nil // text
}

// --- JSON -------------------------------------------------------------

// jsonFile is a whole-file example that is valid on its own.
type jsonFile struct {
	kind string // cluster.json, districts.json, …
	line int    // of the fence
	data []byte
}

func (c *checker) checkJSON(f fence) ([]finding, *jsonFile) {
	data := []byte(f.text())
	switch kind := f.kind(); kind {
	case "fragment":
		if _, _, err := parseFragment(data); err != nil {
			return []finding{jsonSyntax(f, data, err)}, nil
		}
		return nil, nil
	case "output":
		return checkOutput(f), nil
	case "settings":
		return c.checkSettings(f), nil
	default:
		if err := json.Unmarshal(data, new(any)); err != nil {
			return []finding{jsonSyntax(f, data, err)}, nil
		}
		ps := c.checkFile(kind, data)
		if len(ps) > 0 {
			return locate(f, data, ps), nil
		}
		return nil, &jsonFile{kind: kind, line: f.line, data: data}
	}
}

// parseFragment parses a part of a file: a JSON value, or the members of
// an object ("key": value, …) or the items of a list ({…}, {…}). off is
// what was put before data to make it whole.
func parseFragment(data []byte) (v any, off int, err error) {
	if err = json.Unmarshal(data, &v); err == nil {
		return v, 0, nil
	}
	for _, wrap := range []string{"{}", "[]"} {
		whole := append(append([]byte{wrap[0]}, data...), wrap[1])
		if json.Unmarshal(whole, &v) == nil {
			return v, 1, nil
		}
	}
	return nil, 0, err
}

// jsonSyntax places a syntax error on its line.
func jsonSyntax(f fence, data []byte, err error) finding {
	line := f.line
	if se, ok := errors.AsType[*json.SyntaxError](err); ok {
		line = f.bodyLine(bytes.Count(data[:min(int(se.Offset), len(data))], []byte("\n")))
	}
	return finding{line, ruleJSON, fmt.Sprintf("```%s: not JSON: %v", f.info, err)}
}

// checkOutput checks what transit prints: one document, or one per line.
// An object's format_version is the one transit prints now, and its
// error_kind one transit has.
func checkOutput(f fence) []finding {
	data := []byte(f.text())
	var docs []any
	var lines []int
	if v, err := decodeAll(data); err == nil {
		docs, lines = v, []int{f.line + 1}
	} else {
		for i, l := range f.body {
			if strings.TrimSpace(l) == "" {
				continue
			}
			var v any
			if err := json.Unmarshal([]byte(l), &v); err != nil {
				return []finding{{f.bodyLine(i), ruleJSON, fmt.Sprintf("```%s: neither one JSON document nor one per line: line %d: %v", f.info, i+1, err)}}
			}
			docs, lines = append(docs, v), append(lines, f.bodyLine(i))
		}
	}
	kinds := map[string]bool{}
	for _, k := range cli.ErrorKinds() {
		kinds[k.Name] = true
	}
	var out []finding
	for i, d := range docs {
		line := lines[min(i, len(lines)-1)]
		obj, ok := d.(map[string]any)
		if !ok {
			continue
		}
		if v, ok := obj["format_version"]; ok && v != float64(cli.FormatVersion) {
			out = append(out, finding{line, ruleJSON, fmt.Sprintf("format_version %v: transit prints %d", v, cli.FormatVersion)})
		}
		if k, ok := obj["error_kind"].(string); ok && !kinds[k] {
			out = append(out, finding{line, ruleJSON, fmt.Sprintf("error_kind %q is no kind transit prints (cli.ErrorKinds)", k)})
		}
	}
	return out
}

// decodeAll decodes data as exactly one JSON document.
func decodeAll(data []byte) ([]any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err == nil {
		return nil, errors.New("more than one document")
	}
	return []any{v}, nil
}

// --- YAML -------------------------------------------------------------

func (c *checker) checkYAML(ctx context.Context, f fence) []finding {
	var out []finding
	for _, d := range splitYAML(f) {
		var v any
		if err := yaml.UnmarshalStrict([]byte(d.text), &v); err != nil {
			out = append(out, finding{d.line, ruleYAML, fmt.Sprintf("```%s: not YAML: %v", f.info, err)})
			continue
		}
		switch f.kind() {
		case "k8s":
			out = append(out, c.checkObject(ctx, d, v)...)
		case "workflow":
			out = append(out, checkWorkflow(f, v)...)
		}
	}
	return out
}

// yamlDoc is one document of a multi-document fence.
type yamlDoc struct {
	line int // its first line
	text string
}

// splitYAML splits a fence at its "---" lines, leaving out documents of
// nothing but comments.
func splitYAML(f fence) []yamlDoc {
	var docs []yamlDoc
	start, cur := 0, []string{}
	flush := func() {
		for _, l := range cur {
			if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "#") {
				docs = append(docs, yamlDoc{line: f.bodyLine(start), text: strings.Join(cur, "\n") + "\n"})
				break
			}
		}
	}
	for i, l := range f.body {
		if strings.TrimRight(l, " \t") == "---" || strings.HasPrefix(l, "--- ") {
			flush()
			start, cur = i+1, nil
			continue
		}
		cur = append(cur, l)
	}
	flush()
	return docs
}

// --- Go ---------------------------------------------------------------

// checkGo parses a go fence as a file, as declarations, or as the
// statements of a function body.
func checkGo(f fence) []finding {
	src := f.text()
	try := func(prefix, suffix string) error {
		_, err := parser.ParseFile(token.NewFileSet(), "doc.go", prefix+src+suffix, parser.SkipObjectResolution)
		if err != nil {
			return relines(err, strings.Count(prefix, "\n"))
		}
		return nil
	}
	var err error
	if strings.HasPrefix(strings.TrimSpace(src), "package ") {
		err = try("", "")
	} else if err = try("package doc\n", ""); err != nil {
		// Of the two readings, the one that got further is what the
		// snippet meant.
		if err2 := try("package doc\nfunc _() {\n", "\n}\n"); err2 == nil || errLine(err2) > errLine(err) {
			err = err2
		}
	}
	if err == nil {
		return nil
	}
	line := f.line
	if el, ok := errors.AsType[scanner.ErrorList](err); ok && len(el) > 0 {
		line = f.bodyLine(el[0].Pos.Line - 1)
		err = fmt.Errorf("%s", el[0].Msg)
	}
	return []finding{{line, ruleGo, fmt.Sprintf("```go: does not parse (as a file, declarations or statements): %v", err)}}
}

// errLine is the line of a parse error's first position.
func errLine(err error) int {
	if el, ok := errors.AsType[scanner.ErrorList](err); ok && len(el) > 0 {
		return el[0].Pos.Line
	}
	return 0
}

// relines moves the positions of a parse error back by the lines put
// before the source.
func relines(err error, lines int) error {
	el, ok := errors.AsType[scanner.ErrorList](err)
	if !ok {
		return err
	}
	out := make(scanner.ErrorList, len(el))
	for i, e := range el {
		e2 := *e
		e2.Pos.Line -= lines
		out[i] = &e2
	}
	return out
}
