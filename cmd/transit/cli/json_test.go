package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cloudtransit/transit/clock/clocktest"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// jsonSchema is the JSON output contract: each object type and the view
// type that defines its keys. checkJSON holds real output to it.
var jsonSchema = map[string]reflect.Type{
	typePlan:      reflect.TypeFor[planJSON](),
	typeStatus:    reflect.TypeFor[statusJSON](),
	typeVersion:   reflect.TypeFor[versionJSON](),
	typeRound:     reflect.TypeFor[roundJSON](),
	typeAction:    reflect.TypeFor[actionEventJSON](),
	typeWait:      reflect.TypeFor[waitJSON](),
	typeAddons:    reflect.TypeFor[addonsJSON](),
	typeAutoscale: reflect.TypeFor[autoscaleJSON](),
	typeResult:    reflect.TypeFor[resultJSON](),
}

// checkJSON checks one JSON object transit printed: its format_version, a
// known type, every key its view defines present (lists as lists, never
// null), no key it does not define. It returns the object's type.
func checkJSON(t *testing.T, data []byte) string {
	t.Helper()
	var obj map[string]any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&obj); err != nil {
		t.Fatalf("not one JSON object: %v\n%s", err, data)
	}
	if dec.More() {
		t.Fatalf("more than one JSON value:\n%s", data)
	}
	if v, ok := obj["format_version"].(json.Number); !ok || v.String() != strconv.Itoa(FormatVersion) {
		t.Errorf("format_version is %v, want %d: %s", obj["format_version"], FormatVersion, data)
	}
	typ, _ := obj["type"].(string)
	schema, ok := jsonSchema[typ]
	if !ok {
		t.Errorf("unknown type %q: %s", typ, data)
		return typ
	}
	for _, p := range checkObject(typ, obj, schema) {
		t.Errorf("%s: %s", p, data)
	}
	return typ
}

// checkObject compares obj with the keys of struct type st and returns
// what differs, each named by its path.
func checkObject(path string, obj map[string]any, st reflect.Type) []string {
	var problems []string
	known := map[string]bool{}
	for _, f := range jsonFields(st) {
		known[f.name] = true
		v, ok := obj[f.name]
		switch {
		case !ok && !f.omitempty:
			problems = append(problems, path+"."+f.name+": missing")
		case ok:
			problems = append(problems, checkValue(path+"."+f.name, v, f.typ)...)
		}
	}
	for k := range obj {
		if !known[k] {
			problems = append(problems, path+"."+k+": not in the contract")
		}
	}
	return problems
}

func checkValue(path string, v any, typ reflect.Type) []string {
	if typ.Kind() == reflect.Pointer {
		if v == nil {
			return nil
		}
		typ = typ.Elem()
	}
	switch {
	case typ == reflect.TypeFor[time.Time]():
		s, ok := v.(string)
		if _, err := time.Parse(time.RFC3339Nano, s); !ok || err != nil {
			return []string{path + ": not an RFC 3339 time"}
		}
	case typ == reflect.TypeFor[districts.Resources]():
		// The format of resources.json, documented with the file.
		if _, ok := v.(map[string]any); !ok {
			return []string{path + ": not an object"}
		}
	case typ.Kind() == reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			return []string{path + ": not an object"}
		}
		return checkObject(path, m, typ)
	case typ.Kind() == reflect.Slice:
		l, ok := v.([]any)
		if !ok {
			return []string{path + ": not a list"}
		}
		var problems []string
		for _, e := range l {
			problems = append(problems, checkValue(path+"[]", e, typ.Elem())...)
		}
		return problems
	case typ.Kind() == reflect.String:
		if _, ok := v.(string); !ok {
			return []string{path + ": not a string"}
		}
	case typ.Kind() == reflect.Bool:
		if _, ok := v.(bool); !ok {
			return []string{path + ": not a boolean"}
		}
	case typ.Kind() == reflect.Int, typ.Kind() == reflect.Float64:
		if _, ok := v.(json.Number); !ok {
			return []string{path + ": not a number"}
		}
	}
	return nil
}

type jsonField struct {
	name      string
	omitempty bool
	typ       reflect.Type
}

// jsonFields lists the keys encoding/json writes for struct type st,
// embedded structs' keys included.
func jsonFields(st reflect.Type) []jsonField {
	var out []jsonField
	for f := range st.Fields() {
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			out = append(out, jsonFields(f.Type)...)
			continue
		}
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, jsonField{name: name, omitempty: strings.Contains(opts, "omitempty"), typ: f.Type})
	}
	return out
}

// jsonLines checks every line of r's stdout and returns them decoded, with
// the last line, which must be the only result line.
func jsonLines(t *testing.T, r result) (lines []map[string]any, last resultJSON) {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(r.out))
	sc.Buffer(nil, 1<<22)
	results := 0
	for sc.Scan() {
		if typ := checkJSON(t, sc.Bytes()); typ == typeResult {
			results++
		}
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, m)
	}
	if len(lines) == 0 {
		t.Fatalf("no JSON lines\n%s", r)
	}
	if results != 1 {
		t.Errorf("%d result lines, want 1\n%s", results, r)
	}
	all := strings.Split(strings.TrimSuffix(r.out, "\n"), "\n")
	dec := json.NewDecoder(strings.NewReader(all[len(all)-1]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&last); err != nil || last.Type != typeResult {
		t.Fatalf("the last line is not the result (%v):\n%s", err, all[len(all)-1])
	}
	return lines, last
}

// Every line apply and destroy --json print follows the contract, and the
// last is the result, however the run ends.
func TestApplyJSONContract(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, h *harness)
		args    []string
		opts    runOpts
		code    int
		kind    string
		lines   int // lines before the result; -1: any number
	}{
		{name: "converged", args: []string{"apply", "--auto-approve"}, code: 0, lines: -1},
		// Nothing to change: the plan, then one round that only runs the
		// addons step (addons are matched on every apply).
		{name: "nothing to do", prepare: applied, args: []string{"apply", "--auto-approve"}, code: 0, lines: 4},
		{
			name: "not converged",
			prepare: func(t *testing.T, h *harness) {
				applied(t, h)
				h.setQuantity(t, "aws-europe", districts.RoleWorker, 8)
				h.platform.refuse(true)
			},
			args: []string{"apply", "--auto-approve"}, code: ExitNotConverged, kind: kindNotConverged, lines: -1,
		},
		{
			// The addons step refused to remove an addon still in use:
			// not converged, a kind of its own (the user must act).
			name: "addon in use",
			prepare: func(t *testing.T, h *harness) {
				applied(t, h)
				h.platform.setAddonsErr(&provider.AddonInUseError{Addon: "streams", Resource: "topologies.streams.transit.io", Users: []string{"team-a/orders"}})
			},
			args: []string{"apply", "--auto-approve"}, code: ExitNotConverged, kind: kindAddonInUse, lines: -1,
		},
		{
			name: "lock held",
			prepare: func(t *testing.T, h *harness) {
				h.holdLock(t)
			},
			args: []string{"apply", "--auto-approve"}, code: 1, kind: kindLocked, lines: 0,
		},
		{
			name: "bad config",
			prepare: func(t *testing.T, h *harness) {
				if err := os.WriteFile(h.path("cluster.json"), []byte(`{"type": "cluster", "id": "x", "nope": 1}`), 0o600); err != nil {
					t.Fatal(err)
				}
			},
			args: []string{"apply", "--auto-approve"}, code: 1, kind: kindConfig, lines: 0,
		},
		{name: "no terminal", args: []string{"apply"}, code: 1, kind: kindUsage, lines: 0},
		{name: "bad flag", args: []string{"apply", "--auto-approve", "--max-rounds", "0"}, code: 1, kind: kindUsage, lines: 0},
		{name: "cancelled", args: []string{"apply"}, opts: runOpts{tty: true, stdin: "no\n"}, code: 1, kind: kindCancelled, lines: 1},
		{
			name:    "would destroy",
			prepare: func(t *testing.T, h *harness) { applied(t, h); h.setAllQuantities(t, 0) },
			args:    []string{"apply", "--auto-approve"}, code: 1, kind: kindWouldDestroy, lines: -1,
		},
		{name: "destroy", prepare: applied, args: []string{"destroy", "--auto-approve"}, code: 0, lines: -1},
		{
			name: "destroy not converged",
			prepare: func(t *testing.T, h *harness) {
				applied(t, h)
				h.cloud.failTerminate("instance is protected from termination")
			},
			args: []string{"destroy", "--auto-approve"}, code: ExitNotConverged, kind: kindNotConverged, lines: -1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			if tc.prepare != nil {
				tc.prepare(t, h)
			}
			r := h.run(t, tc.opts, append(tc.args, "--json")...)
			wantCode(t, r, tc.code)
			lines, last := jsonLines(t, r)
			if tc.lines >= 0 && len(lines)-1 != tc.lines {
				t.Errorf("%d lines before the result, want %d:\n%s", len(lines)-1, tc.lines, r.out)
			}
			if last.ErrorKind != tc.kind {
				t.Errorf("error_kind %q, want %q\n%s", last.ErrorKind, tc.kind, r)
			}
			if got, want := last.Result.Converged, tc.code == 0; got != want {
				t.Errorf("result.converged = %v, want %v", got, want)
			}
			if tc.code != 0 {
				// The result carries the message stderr shows.
				if last.Error == "" || !strings.Contains(r.err, "Error: "+last.Error+"\n") {
					t.Errorf("result error %q is not the message on stderr:\n%s", last.Error, r.err)
				}
			} else if last.Error != "" {
				t.Errorf("a converged result carries an error: %q", last.Error)
			}
			if tc.kind == kindNotConverged && len(last.Result.Problems) == 0 {
				t.Errorf("a not-converged result names no problem")
			}
			if tc.lines != 0 && len(lines) > 1 {
				if first := lines[0]; first["type"] != typePlan || first["round"] != 0.0 {
					t.Errorf("the first line is not the plan of round 0: %v", first)
				}
			}
		})
	}
}

// applied runs a first apply in the harness.
func applied(t *testing.T, h *harness) {
	t.Helper()
	r := h.run(t, runOpts{}, "apply", "--auto-approve")
	wantCode(t, r, 0)
}

// plan --json and the first line of apply --json are one object.
func TestPlanJSONIsApplysFirstLine(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.clock = clocktest.NewFake(time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC))
	plan := h.run(t, runOpts{}, "plan", "--json")
	wantCode(t, plan, 0)
	if typ := checkJSON(t, []byte(plan.out)); typ != typePlan {
		t.Fatalf("plan --json prints a %q", typ)
	}
	apply := h.run(t, runOpts{}, "apply", "--auto-approve", "--json")
	wantCode(t, apply, 0)
	first, _, _ := strings.Cut(apply.out, "\n")
	var a, p planJSON
	for _, x := range []struct {
		data string
		into *planJSON
	}{{plan.out, &p}, {first, &a}} {
		dec := json.NewDecoder(strings.NewReader(x.data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(x.into); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff(p, a, cmp.AllowUnexported(planJSON{})); diff != "" {
		t.Errorf("plan --json and apply's first line differ (-plan +apply):\n%s", diff)
	}
	if !p.Changes || !p.Refreshed || p.Round != 0 || len(p.Actions) == 0 || p.Summary.Add == 0 {
		t.Errorf("plan --json: %+v", p)
	}
}

// plan, status and version --json follow the contract too.
func TestJSONDocuments(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	applied(t, h)
	for _, tc := range []struct {
		args []string
		typ  string
	}{
		{[]string{"plan", "--json"}, typePlan},
		{[]string{"plan", "--json", "--refresh=false"}, typePlan},
		{[]string{"status", "--json"}, typeStatus},
		{[]string{"status", "--json", "--refresh=false"}, typeStatus},
		{[]string{"version", "--json"}, typeVersion},
	} {
		r := h.run(t, runOpts{}, tc.args...)
		wantCode(t, r, 0)
		if typ := checkJSON(t, []byte(r.out)); typ != tc.typ {
			t.Errorf("%v prints a %q, want %q", tc.args, typ, tc.typ)
		}
	}
	r := h.run(t, runOpts{}, "status", "--json")
	var st statusJSON
	if err := json.Unmarshal([]byte(r.out), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.State.Nodes) != 16 || !st.Refreshed || st.PlatformError != "" || st.Cluster != "swarm-europe" {
		t.Errorf("status --json: %d nodes, refreshed %v, platform error %q, cluster %q", len(st.State.Nodes), st.Refreshed, st.PlatformError, st.Cluster)
	}
}

// The checker itself finds what breaks the contract.
func TestCheckJSONFindsProblems(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		line string
		want string
	}{
		{`{"format_version":1,"type":"wait","time":"2026-01-01T00:00:00Z","round":1}`, "wait.message: missing"},
		{`{"format_version":2,"type":"version","version":"v1","commit":"c","date":"d","go":"go1","platform":"p"}`, ""},
		{`{"format_version":1,"type":"wait","time":"2026-01-01T00:00:00Z","round":1,"message":"x","remaining":3}`, "wait.remaining: not in the contract"},
		{`{"format_version":1,"type":"result","time":"2026-01-01T00:00:00Z","round":1,"result":{"converged":true,"rounds":1,"problems":null,"warnings":[],"left":[]}}`, "result.result.problems: not a list"},
		{`{"format_version":1,"type":"action","time":"2026-01-01T00:00:00Z","round":1,"phase":"start","seconds":0,"action":{"kind":"launch","district":"d"}}`, "action.action.reason: missing"},
	} {
		obj := map[string]any{}
		dec := json.NewDecoder(strings.NewReader(tc.line))
		dec.UseNumber()
		if err := dec.Decode(&obj); err != nil {
			t.Fatal(err)
		}
		typ := obj["type"].(string)
		got := strings.Join(checkObject(typ, obj, jsonSchema[typ]), "; ")
		if !strings.Contains(got, tc.want) || tc.want == "" && got != "" {
			t.Errorf("%s: problems %q, want %q", tc.line, got, tc.want)
		}
	}
}
