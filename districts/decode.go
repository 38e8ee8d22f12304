package districts

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Strict decoding. encoding/json stops at the first error, has no path and
// ignores unknown keys, so a reflective walker checks the document against
// the Go type first and reports every problem with its path. Only a clean
// document is then unmarshalled for real.
//
// Unknown keys do not block: the walker drops them, so the rest of the file
// is still validated and the user sees all problems in one run. A value of
// the wrong type, a duplicate key or malformed JSON does block, because any
// further check of that file would be guessing.

// decoder walks one file.
type decoder struct {
	c *problems
	// sensitive files (credentials.json) never have their text quoted,
	// not even a single character of a syntax error.
	sensitive bool
	blocked   bool
}

// decodeFile parses data strictly into v (a pointer). topHint explains the
// file's shape when its top-level value has the wrong kind. It reports
// whether v was filled in.
func decodeFile(c *problems, data []byte, v any, sensitive bool, topHint string) bool {
	if len(bytes.TrimSpace(data)) == 0 {
		c.add("", "file is empty", topHint)
		return false
	}
	var raw json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		c.add("", syntaxMessage(data, err, sensitive), "")
		return false
	}
	// The top level must have its kind: a null districts.json is not an
	// empty one.
	if want, got := describe(reflect.TypeOf(v).Elem()), jsonKind(raw); got != want {
		c.add("", fmt.Sprintf("expected %s, got %s", want, got), topHint)
		return false
	}
	d := &decoder{c: c, sensitive: sensitive}
	clean := d.walk(raw, reflect.TypeOf(v).Elem(), "")
	if d.blocked {
		return false
	}
	if err := json.Unmarshal(clean, v); err != nil {
		// The walker should have caught this; say so without quoting
		// the input.
		c.add("", "cannot decode the file", "")
		return false
	}
	return true
}

// syntaxMessage places a JSON syntax error by line and column.
func syntaxMessage(data []byte, err error, sensitive bool) string {
	var se *json.SyntaxError
	if !errors.As(err, &se) {
		return "invalid JSON"
	}
	pos := int(se.Offset) - 1
	if se.Offset >= int64(len(data)) && strings.Contains(se.Error(), "unexpected end") {
		pos = len(data)
	}
	pos = min(max(pos, 0), len(data))
	line := 1 + bytes.Count(data[:pos], []byte("\n"))
	start := bytes.LastIndexByte(data[:pos], '\n') + 1
	col := 1 + utf8.RuneCount(data[start:pos])
	msg := se.Error()
	if sensitive {
		msg = withoutQuotedChar(msg)
	}
	return fmt.Sprintf("invalid JSON at line %d, column %d: %s", line, col, msg)
}

// withoutQuotedChar drops the offending character from encoding/json's
// "invalid character 'x' ..." so no byte of a secret is shown.
func withoutQuotedChar(msg string) string {
	const prefix = "invalid character '"
	if !strings.HasPrefix(msg, prefix) {
		return msg
	}
	rest := msg[len(prefix):]
	if i := strings.Index(rest[min(1, len(rest)):], "' "); i >= 0 {
		return "invalid character " + rest[i+1+2:]
	}
	return "invalid character"
}

func (d *decoder) add(path, msg, hint string) { d.c.add(path, msg, hint) }

func (d *decoder) block(path, msg, hint string) {
	d.blocked = true
	d.add(path, msg, hint)
}

// walk checks raw against t and returns raw without unknown keys.
func (d *decoder) walk(raw json.RawMessage, t reflect.Type, path string) json.RawMessage {
	got := jsonKind(raw)
	if leaf, ok := leafTypes[t]; ok {
		if got != "a string" {
			d.block(path, fmt.Sprintf("expected %s, got %s", leaf.name, got), leaf.hint)
			return nil
		}
		if err := json.Unmarshal(raw, reflect.New(t).Interface()); err != nil {
			d.block(path, "invalid "+strings.TrimPrefix(leaf.name, "a "), leaf.hint)
			return nil
		}
		return raw
	}
	if t.Kind() == reflect.Pointer {
		if got == "null" {
			return raw
		}
		return d.walk(raw, t.Elem(), path)
	}
	if t.Kind() == reflect.Interface {
		return raw
	}
	if got == "null" && (t.Kind() == reflect.Slice || t.Kind() == reflect.Map) {
		return raw // what encoding/json writes for a nil slice or map
	}
	if !sameKind(t, got) {
		d.block(path, fmt.Sprintf("expected %s, got %s", describe(t), got), "")
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		return d.object(raw, path, func(key string) (reflect.Type, bool) {
			f, ok := structFields(t).byName[key]
			return f.typ, ok
		}, t)
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			return d.leaf(raw, t, path)
		}
		return d.object(raw, path, func(string) (reflect.Type, bool) { return t.Elem(), true }, nil)
	case reflect.Slice, reflect.Array:
		var elems []json.RawMessage
		if err := json.Unmarshal(raw, &elems); err != nil {
			d.block(path, "invalid list", "")
			return nil
		}
		var b bytes.Buffer
		b.WriteByte('[')
		for i, e := range elems {
			if i > 0 {
				b.WriteByte(',')
			}
			b.Write(d.walk(e, t.Elem(), joinIndex(path, i)))
		}
		b.WriteByte(']')
		return b.Bytes()
	default:
		return d.leaf(raw, t, path)
	}
}

// object walks an object's members in document order; typeOf says a
// member's type or that the key is unknown. st is the struct type, for
// listing the known keys.
func (d *decoder) object(raw json.RawMessage, path string, typeOf func(string) (reflect.Type, bool), st reflect.Type) json.RawMessage {
	var b bytes.Buffer
	b.WriteByte('{')
	seen := make(map[string]bool)
	dec := json.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil {
		d.block(path, "invalid object", "")
		return nil
	}
	for dec.More() {
		tok, err := dec.Token()
		key, ok := tok.(string)
		var val json.RawMessage
		if err != nil || !ok || dec.Decode(&val) != nil {
			d.block(path, "invalid object", "")
			return nil
		}
		if seen[key] {
			d.block(path, "duplicate key "+d.quoteKey(key), "")
			continue
		}
		seen[key] = true
		t, known := typeOf(key)
		if !known {
			names := structFields(st).names
			d.add(path, fmt.Sprintf("unknown key %s (known: %s)", d.quoteKey(key), strings.Join(names, ", ")), didYouMean(key, names))
			continue
		}
		clean := d.walk(val, t, joinKey(path, key))
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(key)
		b.Write(k)
		b.WriteByte(':')
		b.Write(clean)
	}
	b.WriteByte('}')
	return b.Bytes()
}

// quoteKey shows a key in a message. In a credentials file a key that does
// not look like one of ours (lowercase snake case) may be a misplaced
// secret, so it is not shown.
func (d *decoder) quoteKey(key string) string {
	if d.sensitive && !looksLikeKeyName(key) {
		return "(not shown)"
	}
	if len(key) > 64 {
		key = key[:64] + "..."
	}
	return strconv.Quote(key)
}

func looksLikeKeyName(s string) bool {
	if s == "" || len(s) > 40 || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
			return false
		}
	}
	return true
}

// leaf checks a scalar by unmarshalling it, and explains a failure without
// quoting the value.
func (d *decoder) leaf(raw json.RawMessage, t reflect.Type, path string) json.RawMessage {
	if err := json.Unmarshal(raw, reflect.New(t).Interface()); err != nil {
		switch {
		case isInt(t) && bytes.ContainsAny(raw, ".eE"):
			d.block(path, "expected a whole number, got a fraction or exponent", "")
		case isInt(t) && bytes.HasPrefix(raw, []byte("-")) && t.Kind() >= reflect.Uint && t.Kind() <= reflect.Uintptr:
			d.block(path, "expected a number that is not negative", "")
		case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64 || isInt(t):
			d.block(path, "number out of range", "")
		default:
			d.block(path, "expected "+describe(t), "")
		}
		return nil
	}
	return raw
}

func isInt(t reflect.Type) bool {
	return t.Kind() >= reflect.Int && t.Kind() <= reflect.Uintptr
}

// leafTypes are types with their own JSON form, all written as strings.
var leafTypes = map[reflect.Type]struct{ name, hint string }{
	reflect.TypeFor[Duration]():  {"a duration", `use a value such as "90s" or "5m"`},
	reflect.TypeFor[time.Time](): {"a timestamp", `use RFC 3339, such as "2017-04-24T09:30:00Z"`},
}

// jsonKind names the kind of a valid JSON value, for messages.
func jsonKind(raw []byte) string {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '{':
		return "an object"
	case '[':
		return "a list"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	default:
		return "a number"
	}
}

// describe names what a Go type expects, in the words of jsonKind.
func describe(t reflect.Type) string {
	if leaf, ok := leafTypes[t]; ok {
		return leaf.name
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Pointer:
		return describe(t.Elem())
	}
	if isInt(t) {
		return "a whole number"
	}
	return "a value"
}

// sameKind reports whether a JSON value of kind got can decode into t
// (pointers, interfaces, leaf types and null are handled by walk).
func sameKind(t reflect.Type, got string) bool {
	want := describe(t)
	switch want {
	case "a whole number":
		want = "a number"
	case "true or false":
		want = "a boolean"
	}
	return got == want
}

// field is a struct field as JSON sees it.
type field struct {
	order int // position among the JSON fields, for document order
	index int
	typ   reflect.Type
}

type fieldSet struct {
	byName map[string]field
	names  []string // in declaration order
}

var fieldCache sync.Map // reflect.Type -> *fieldSet

// structFields lists the JSON keys of a struct type.
func structFields(t reflect.Type) *fieldSet {
	if t == nil || t.Kind() != reflect.Struct {
		return &fieldSet{}
	}
	if fs, ok := fieldCache.Load(t); ok {
		return fs.(*fieldSet)
	}
	fs := &fieldSet{byName: make(map[string]field)}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fs.byName[name] = field{order: len(fs.names), index: i, typ: f.Type}
		fs.names = append(fs.names, name)
	}
	fieldCache.Store(t, fs)
	return fs
}

// isLeaf reports whether t has its own JSON form rather than its fields'.
func isLeaf(t reflect.Type) bool {
	_, ok := leafTypes[t]
	return ok
}

// didYouMean suggests the known key closest to a misspelt one.
func didYouMean(key string, known []string) string {
	if len(key) > 64 {
		return ""
	}
	best, bestDist := "", 3
	for _, k := range known {
		if dist := editDistance(strings.ToLower(key), k); dist < bestDist {
			best, bestDist = k, dist
		}
	}
	if best == "" && len(key) >= 4 {
		// "machine" for "machine_type": a unique known key it starts.
		for _, k := range known {
			if strings.HasPrefix(k, strings.ToLower(key)) {
				if best != "" {
					return ""
				}
				best = k
			}
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf("did you mean %q?", best)
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
