package districts

import (
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// decodeAs runs the strict decoder as Load does for a file of type T.
func decodeAs[T any](file, src string, sensitive bool, shape string) (T, Problems, bool) {
	var v T
	c := newProblems(file, reflect.TypeFor[T]())
	ok := decodeFile(c, []byte(src), &v, sensitive, shape)
	return v, c.sorted(), ok
}

const clusterKeys = "(known: type, id, platform, flavors, deployments, addons, strategy, kubernetes, network, budget, autoscaler)"
const deploymentKeys = "(known: type, district, flavor, role, quantity, tags, autoscale)"

func TestDecodeCluster(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		src    string
		want   Problems
		usable bool // unknown keys only: the rest is still validated
	}{
		{"valid", `{"type": "cluster", "id": "a", "platform": "swarm", "flavors": [], "deployments": null}`, nil, true},
		{"unknown key", `{"type": "cluster", "platfrom": "swarm", "colour": "red"}`, Problems{
			withHint(cl("", `unknown key "platfrom" `+clusterKeys), `did you mean "platform"?`),
			cl("", `unknown key "colour" `+clusterKeys),
		}, true},
		{"keys are case sensitive", `{"ID": "a"}`, Problems{
			withHint(cl("", `unknown key "ID" `+clusterKeys), `did you mean "id"?`),
		}, true},
		{"nested unknown key", `{"deployments": [{}, {"district": "a", "quantitty": 3}]}`, Problems{
			withHint(cl("deployments[1]", `unknown key "quantitty" `+deploymentKeys), `did you mean "quantity"?`),
		}, true},
		{"wrong types", `{
			"id": 7,
			"platform": null,
			"flavors": [{"flavor": "small", "cores": 1.5, "memory_gb": "4", "disk_gb": 1e2}],
			"deployments": [{"quantity": "3", "tags": {"location": 1, "ok": "x"}}, 5],
			"addons": {},
			"strategy": {"max_surge": true, "drain_timeout": 90}
		}`, Problems{
			cl("id", "expected a string, got a number"),
			cl("platform", "expected a string, got null"),
			cl("flavors[0].cores", "expected a whole number, got a fraction or exponent"),
			cl("flavors[0].memory_gb", "expected a number, got a string"),
			cl("flavors[0].disk_gb", "expected a whole number, got a fraction or exponent"),
			cl("deployments[0].quantity", "expected a whole number, got a string"),
			cl("deployments[0].tags.location", "expected a string, got a number"),
			cl("deployments[1]", "expected an object, got a number"),
			cl("addons", "expected a list, got an object"),
			cl("strategy.max_surge", "expected a whole number, got a boolean"),
			withHint(cl("strategy.drain_timeout", "expected a duration, got a number"), `use a value such as "90s" or "5m"`),
		}, false},
		{"invalid duration", `{"strategy": {"drain_timeout": "5 minutes"}}`, Problems{
			withHint(cl("strategy.drain_timeout", "invalid duration"), `use a value such as "90s" or "5m"`),
		}, false},
		{"number out of range", `{"deployments": [{"quantity": 99999999999999999999}], "flavors": [{"memory_gb": 1e400}]}`, Problems{
			cl("flavors[0].memory_gb", "number out of range"),
			cl("deployments[0].quantity", "number out of range"),
		}, false},
		{"duplicate key", `{"id": "a", "platform": "swarm", "id": "b"}`, Problems{
			cl("", `duplicate key "id"`),
		}, false},
		{"duplicate tag", `{"deployments": [{"tags": {"a": "1", "a": "2"}}]}`, Problems{
			cl("deployments[0].tags", `duplicate key "a"`),
		}, false},
		{"odd keys are quoted in paths", `{"deployments": [{"tags": {"a.b": 1}}]}`, Problems{
			cl(`deployments[0].tags["a.b"]`, "expected a string, got a number"),
		}, false},
		{"top level is a list", `[{"type": "cluster"}]`, Problems{
			withHint(cl("", "expected an object, got a list"), clusterShape),
		}, false},
		{"empty", " \n\t", Problems{withHint(cl("", "file is empty"), clusterShape)}, false},
		{"syntax error", "{\n  \"id\": \"a\",\n  \"platform\": swarm\n}", Problems{
			cl("", "invalid JSON at line 3, column 15: invalid character 's' looking for beginning of value"),
		}, false},
		{"syntax error after a multibyte character", "{\"id\": \"é\" \"x\"}", Problems{
			cl("", "invalid JSON at line 1, column 12: invalid character '\"' after object key:value pair"),
		}, false},
		{"truncated", "{\n  \"id\": \"a\",\n", Problems{
			cl("", "invalid JSON at line 3, column 1: unexpected end of JSON input"),
		}, false},
		{"trailing data", `{} {}`, Problems{
			cl("", "invalid JSON at line 1, column 4: invalid character '{' after top-level value"),
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, got, ok := decodeAs[Cluster]("cluster.json", tt.src, false, clusterShape)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
			if ok != tt.usable {
				t.Errorf("usable = %v, want %v", ok, tt.usable)
			}
		})
	}
}

// Unknown keys are dropped, not guessed at: encoding/json would match
// "Quantity" to quantity.
func TestDecodeDropsUnknownKeys(t *testing.T) {
	t.Parallel()
	got, _, ok := decodeAs[Cluster]("cluster.json", `{"id": "a", "deployments": [{"Quantity": 5, "role": "worker"}]}`, false, "")
	if !ok {
		t.Fatal("not usable")
	}
	want := Cluster{ID: "a", Deployments: []Deployment{{Role: "worker"}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("decoded (-want +got):\n%s", diff)
	}
}

func TestDecodeOtherFiles(t *testing.T) {
	t.Parallel()
	t.Run("districts", func(t *testing.T) {
		t.Parallel()
		_, got, _ := decodeAs[[]District]("districts.json", `[{"id": "a", "gce_zones": "europe-west1-b", "flavors": [{"flavor": "small", "machine": "n1"}]}, "b"]`, false, districtsShape)
		want := Problems{
			ds("[0].gce_zones", "expected a list, got a string"),
			withHint(ds("[0].flavors[0]", `unknown key "machine" (known: type, flavor, instance_type, machine_type, os_flavor, hourly_price)`), `did you mean "machine_type"?`),
			ds("[1]", "expected an object, got a string"),
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("problems (-want +got):\n%s", diff)
		}
	})
	t.Run("districts top level", func(t *testing.T) {
		t.Parallel()
		_, got, _ := decodeAs[[]District]("districts.json", `{"type": "district"}`, false, districtsShape)
		want := Problems{withHint(ds("", "expected a list, got an object"), districtsShape)}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("problems (-want +got):\n%s", diff)
		}
	})
	t.Run("districts null", func(t *testing.T) {
		t.Parallel()
		_, got, _ := decodeAs[[]District]("districts.json", `null`, false, districtsShape)
		want := Problems{withHint(ds("", "expected a list, got null"), districtsShape)}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("problems (-want +got):\n%s", diff)
		}
	})
	t.Run("resources", func(t *testing.T) {
		t.Parallel()
		_, got, _ := decodeAs[Resources]("resources.json", `{"nodes": [{"created_at": "yesterday", "tags": []}], "security_groups": [{"sources": "1.2.3.4"}]}`, false, resourcesShape)
		rs := func(path, msg string) Problem { return Problem{File: "resources.json", Path: path, Message: msg} }
		want := Problems{
			rs("nodes[0].tags", "expected an object, got a list"),
			withHint(rs("nodes[0].created_at", "invalid timestamp"), `use RFC 3339, such as "2017-04-24T09:30:00Z"`),
			rs("security_groups[0].sources", "expected a list, got a string"),
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("problems (-want +got):\n%s", diff)
		}
	})
}

func TestProblemsOrder(t *testing.T) {
	t.Parallel()
	c := newProblems("cluster.json", reflect.TypeFor[Cluster]())
	for _, path := range []string{
		"strategy.max_surge", "deployments[10].role", "deployments[2].tags.b", "deployments[2].tags.a",
		"deployments[2]", "id", "", "deployments[2].district", `deployments[2].tags["a.b"]`, "type", "deployments",
	} {
		c.add(path, "m", "")
	}
	var got []string
	for _, p := range c.sorted() {
		got = append(got, p.Path)
	}
	want := []string{
		"", "type", "id", "deployments", "deployments[2]", "deployments[2].district",
		"deployments[2].tags.a", `deployments[2].tags["a.b"]`, "deployments[2].tags.b", "deployments[10].role", "strategy.max_surge",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
}

func TestProblemString(t *testing.T) {
	t.Parallel()
	ps := Problems{
		{File: "cluster.json", Path: "deployments[2].district", Message: `"gce-eu" is not defined in districts.json (known: gce-europe, aws-europe)`},
		{File: "credentials.json", Message: "mode 0644 lets group or others read or write it", Hint: "run chmod 600 credentials.json"},
	}
	want := `cluster.json: deployments[2].district: "gce-eu" is not defined in districts.json (known: gce-europe, aws-europe)` + "\n" +
		`credentials.json: mode 0644 lets group or others read or write it; run chmod 600 credentials.json`
	if got := ps.Error(); got != want {
		t.Errorf("Error() =\n%s\nwant\n%s", got, want)
	}
	if Problems(nil).Err() != nil {
		t.Error("Problems(nil).Err() != nil")
	}
}

func TestJoinKey(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ path, key, want string }{
		{"", "id", "id"},
		{"tags", "scheduling-priority", "tags.scheduling-priority"},
		{"tags", "a.b", `tags["a.b"]`},
		{"tags", "", `tags[""]`},
		{"tags", `x"]`, `tags["x\"]"]`},
	} {
		if got := joinKey(tt.path, tt.key); got != tt.want {
			t.Errorf("joinKey(%q, %q) = %q, want %q", tt.path, tt.key, got, tt.want)
		}
		// Every path must sort without being misread.
		if k := pathKey(reflect.TypeFor[Deployment](), joinKey(tt.path, tt.key)); len(k) == 0 && tt.path+tt.key != "" {
			t.Errorf("pathKey(%q) is empty", joinKey(tt.path, tt.key))
		}
	}
}

func TestDecodeReportsManyProblemsAtOnce(t *testing.T) {
	t.Parallel()
	src := `{
  "type": "cluster",
  "id": 1,
  "platform": "swarm",
  "flavours": [],
  "deployments": [
    {"district": "gce-europe", "flavor": "small", "role": "master", "quantity": "3"},
    {"district": "aws-europe", "flavor": "small", "role": "worker", "quantity": 10, "tag": {}},
    {"district": ["aws-europe"], "flavor": "small", "role": "worker", "quantity": -1}
  ]
}`
	_, got, _ := decodeAs[Cluster]("cluster.json", src, false, clusterShape)
	var lines []string
	for _, p := range got {
		lines = append(lines, p.String())
	}
	want := []string{
		`cluster.json: unknown key "flavours" ` + clusterKeys + `; did you mean "flavors"?`,
		`cluster.json: id: expected a string, got a number`,
		`cluster.json: deployments[0].quantity: expected a whole number, got a string`,
		`cluster.json: deployments[1]: unknown key "tag" ` + deploymentKeys + `; did you mean "tags"?`,
		`cluster.json: deployments[2].district: expected a string, got a list`,
	}
	if diff := cmp.Diff(want, lines); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
	if !strings.Contains(got.Error(), "\n") {
		t.Error("Error() is not one line per problem")
	}
}
