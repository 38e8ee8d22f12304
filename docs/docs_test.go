package docs_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// root is the repository's root, seen from this package's directory.
const root = ".."

func newTestChecker(t *testing.T) *checker {
	t.Helper()
	c, err := newChecker(root, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestDocs checks README.md and every docs/**/*.md (but docs/testdata)
// against the convention of doc.go: every fence tagged and its example
// valid, every relative link and anchor resolving, every table of error
// kinds the code's.
func TestDocs(t *testing.T) {
	t.Parallel()
	files, err := docFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	c := newTestChecker(t)
	ps := c.check(t.Context(), files)
	for _, p := range ps {
		t.Error(p)
	}
	if len(ps) > 0 {
		t.Logf("%s in %d files; the rules are in docs/doc.go", summary(ps), len(files))
	}
}

// TestTroubleshooting checks docs/troubleshooting.md on its own: each
// error_kind of cli.ErrorKinds in its table with its exit codes, no other
// kind, and its examples and links as on every page.
func TestTroubleshooting(t *testing.T) {
	t.Parallel()
	c := newTestChecker(t)
	for _, p := range c.checkTroubleshooting(t.Context(), "troubleshooting.md") {
		t.Error(p)
	}
}

// want is a problem a fixture must produce: at file:line, of a rule, with
// msg in its message.
type want struct {
	file string // under docs/testdata
	line int
	rule string
	msg  string
}

func (w want) String() string {
	return fmt.Sprintf("%s:%d: %s: …%s…", w.file, w.line, w.rule, w.msg)
}

// The checks find what is wrong, and nothing else: each bad fixture gives
// exactly the problems listed, and the good ones none.
func TestFixtures(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		file string
		want []want
	}{
		{"good/all.md", nil},
		{"good/other.md", nil},
		{"bad/tags.md", []want{
			{"bad/tags.md", 5, ruleUntagged, "fence without a tag"},
			{"bad/tags.md", 9, ruleTag, "a json fence says what it shows"},
			{"bad/tags.md", 13, ruleTag, "```json clusters.json: a json fence says what it shows"},
			{"bad/tags.md", 17, ruleTag, "a yaml fence says what it shows"},
			{"bad/tags.md", 21, ruleTag, `unknown language "bash"`},
			{"bad/tags.md", 25, ruleTag, "sh takes no second word"},
			{"bad/tags.md", 31, ruleIndented, "indented code block"},
			{"bad/tags.md", 35, ruleTag, "fence never closed"},
		}},
		{"bad/json.md", []want{
			{"bad/json.md", 8, ruleJSON, `cluster.json: deployments[0]: unknown key "replicas"`},
			{"bad/json.md", 15, ruleJSON, "districts.json: [0].aws_region: missing"},
			{"bad/json.md", 16, ruleJSON, `districts.json: [0]: unknown key "aws_regoin"`},
			{"bad/json.md", 23, ruleJSON, "not JSON"},
			{"bad/json.md", 29, ruleJSON, `credentials.json: [0].provider: "azure" is not a supported provider`},
			{"bad/json.md", 37, ruleJSON, "prices.json: prices[0].hourly_price: expected a number"},
			{"bad/json.md", 42, ruleJSON, "resources.json: version: written by a newer transit"},
			{"bad/json.md", 46, ruleJSON, "format_version 1: transit prints 2"},
			{"bad/json.md", 46, ruleJSON, `error_kind "exploded"`},
			{"bad/json.md", 51, ruleJSON, `settings: settings.replica: addon streams has no setting "replica"`},
			{"bad/json.md", 56, ruleJSON, `settings: [0].settings.upgrade_timeout: "a week" is not a duration`},
			{"bad/json.md", 61, ruleJSON, "no addon takes these settings"},
			{"bad/json.md", 65, ruleJSON, "```json fragment: not JSON"},
		}},
		{"bad/together.md", []want{
			{"bad/together.md", 9, ruleJSON, `deployments[1].district: "gce-eu" is not defined in districts.json (known: aws-europe) (with the districts.json at line 14`},
			{"bad/together.md", 26, ruleJSON, `prices.json: prices[0].district: "gce-europe" is not defined in districts.json (known: aws-europe); remove the price, or run transit prices again (with the districts.json at line 14 on this page)`},
		}},
		{"bad/k8s.md", []want{
			{"bad/k8s.md", 4, ruleK8s, `Topology shop/orders: unknown field "spec.parts[0].revison"`},
			{"bad/k8s.md", 4, ruleK8s, "Topology shop/orders: spec.parts[0].revision: Required value"},
			{"bad/k8s.md", 11, ruleK8s, "TopologyPart shop/a: spec.processors: Invalid value: \"object\": node names are DNS labels"},
			{"bad/k8s.md", 20, ruleK8s, `Topology Orders: metadata.name: Invalid value: "Orders"`},
			{"bad/k8s.md", 20, ruleK8s, `Topology Orders: spec.delivery: Unsupported value: "sometimes"`},
			{"bad/k8s.md", 20, ruleK8s, "Topology Orders: spec.defaultScale: Invalid value: \"object\": minScale is at most maxScale"},
			{"bad/k8s.md", 30, ruleK8s, `Deployment web: strict decoding error: unknown field "spec.replica"`},
			{"bad/k8s.md", 42, ruleK8s, "needs apiVersion and kind"},
			{"bad/k8s.md", 44, ruleK8s, "neither a Kubernetes kind nor one of transit's CRDs"},
			{"bad/k8s.md", 48, ruleK8s, "transit's CRDs define no kind Pipeline"},
			{"bad/k8s.md", 54, ruleYAML, "not YAML"},
		}},
		{"bad/sh.md", []want{
			{"bad/sh.md", 5, ruleSh, "`transit apply --approve`: transit apply: unknown flag: --approve"},
			{"bad/sh.md", 6, ruleSh, `unknown command "aply" for "transit" Did you mean this? apply`},
			{"bad/sh.md", 7, ruleSh, "unknown shorthand flag: 'x' in -x"},
			{"bad/sh.md", 8, ruleSh, `invalid argument "soon" for "--lock-timeout" flag`},
			{"bad/sh.md", 9, ruleSh, `transit state has no subcommand "show" (it has: keygen, list, migrate, pull, push)`},
			{"bad/sh.md", 10, ruleSh, `transit validate: unknown command "cluster.json"`},
			{"bad/sh.md", 14, ruleSh, "unknown flag: --out-file"},
			{"bad/sh.md", 23, ruleSh, "`transit apply --yes plan.bin`: transit apply: unknown flag: --yes"},
			{"bad/sh.md", 32, ruleSh, "`transit autoscale --dry`: transit autoscale: unknown flag: --dry"},
			{"bad/sh.md", 37, ruleGo, "does not parse (as a file, declarations or statements): missing ','"},
		}},
		{"bad/links.md", []want{
			{"bad/links.md", 3, ruleLink, `link "missing.md": no file docs/testdata/bad/missing.md`},
			{"bad/links.md", 4, ruleAnchor, `link "#no-such-heading": docs/testdata/bad/links.md has no heading with anchor #no-such-heading`},
			{"bad/links.md", 5, ruleAnchor, `link "../good/other.md#nowhere": docs/testdata/good/other.md has no heading with anchor #nowhere`},
			{"bad/links.md", 6, ruleAnchor, "(did you mean #links-and-anchors or #links-and-anchors-1?)"},
			{"bad/links.md", 9, ruleLink, `link "img/none.png": no file docs/testdata/bad/img/none.png`},
			{"bad/links.md", 11, ruleAnchor, `link "#section-2"`},
		}},
		{"bad/kinds.md", []want{
			{"bad/kinds.md", 3, ruleKinds, "missing from this table: state_conflict (exit 1: "},
			{"bad/kinds.md", 7, ruleKinds, `kind "locked": exit [3], the code's are [1]`},
			{"bad/kinds.md", 8, ruleKinds, `"exploded" is no error_kind`},
			{"bad/kinds.md", 9, ruleKinds, `kind "usage" is listed twice`},
			{"bad/kinds.md", 10, ruleKinds, `kind "refresh": the "what to do" cell is empty`},
		}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			c := newTestChecker(t)
			got := c.check(t.Context(), []string{filepath.Join("testdata", tc.file)})
			if diff := cmp.Diff(strs(tc.want), strs(matchWants(got, tc.want))); diff != "" {
				t.Errorf("problems (-want +matched):\n%s\nall it found:\n%s", diff, lines(got))
			}
		})
	}
}

// matchWants returns, for each problem found, the want it matches, or a
// want made of the problem itself when none does: compared with the
// wants, a diff shows both what is missing and what is extra.
func matchWants(got []problem, wants []want) []want {
	var out []want
	used := make([]bool, len(wants))
	for _, p := range got {
		match := want{strings.TrimPrefix(p.file, "docs/testdata/"), p.line, p.rule, p.msg}
		for i, w := range wants {
			if !used[i] && "docs/testdata/"+w.file == p.file && w.line == p.line && w.rule == p.rule && strings.Contains(p.msg, w.msg) {
				used[i], match = true, w
				break
			}
		}
		out = append(out, match)
	}
	return out
}

func strs[T fmt.Stringer](xs []T) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = x.String()
	}
	return out
}

func lines(ps []problem) string {
	var b strings.Builder
	for _, p := range ps {
		b.WriteString(p.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// A troubleshooting page is checked for its table of kinds: a page
// without one, or one that lacks a kind, fails.
func TestTroubleshootingFixtures(t *testing.T) {
	t.Parallel()
	c := newTestChecker(t)
	got := c.checkTroubleshooting(t.Context(), filepath.Join("testdata", "bad", "notable.md"))
	if len(got) != 1 || got[0].rule != ruleKinds || !strings.Contains(got[0].msg, "no table of error kinds") {
		t.Errorf("a page without a kinds table:\n%s", lines(got))
	}
	got = c.checkTroubleshooting(t.Context(), filepath.Join("testdata", "bad", "kinds.md"))
	if len(got) == 0 {
		t.Error("a page whose table lacks a kind passed")
	}
}

// GitHub's anchors.
func TestSlug(t *testing.T) {
	t.Parallel()
	for heading, want := range map[string]string{
		"cluster.json — the intended state":               "clusterjson--the-intended-state",
		"Autoscaling: `transit autoscale`":                "autoscaling-transit-autoscale",
		"The relationship controller (addon `relations`)": "the-relationship-controller-addon-relations",
		"Kubernetes across clouds: the node mesh":         "kubernetes-across-clouds-the-node-mesh",
		"`error_kind` and exit codes":                     "error_kind-and-exit-codes",
		"A [linked](other.md) *heading*":                  "a-linked-heading",
		"Ünïcode Größe":                                   "ünïcode-größe",
	} {
		if got := slug(heading); got != want {
			t.Errorf("slug(%q) = %q, want %q", heading, got, want)
		}
	}
}

// A shell line becomes transit's arguments the way a shell would split
// it.
func TestShellCommands(t *testing.T) {
	t.Parallel()
	body := []string{
		`# a comment`,
		`export TRANSIT_STATE='s3://b/p?x=1'`,
		`TRANSIT_LOG_LEVEL=debug transit plan --out "my plan.bin" -c c.json # why`,
		`sudo -E ../bin/transit apply --auto-approve \`,
		`  --parallel 3 2>&1 | tee log`,
		`transit plan --detailed-exitcode || [ $? -eq 2 ]`,
		`kubectl --kubeconfig <(transit kubeconfig) get nodes`,
		`transit kubeconfig > demo.kubeconfig && transit show <FILE>`,
		`cat <<EOF`,
		`transit this is a heredoc's body`,
		`EOF`,
		`transit-clean-host --all`,
	}
	var got []string
	for _, c := range shellCommands(fence{line: 10, info: "sh", body: body, closed: true}) {
		got = append(got, fmt.Sprintf("%d: %q", c.line, c.args))
	}
	want := []string{
		`13: ["plan" "--out" "my plan.bin" "-c" "c.json"]`,
		`14: ["apply" "--auto-approve" "--parallel" "3"]`,
		`16: ["plan" "--detailed-exitcode"]`,
		`18: ["kubeconfig"]`,
		`18: ["show" "<FILE>"]`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("commands (-want +got):\n%s", diff)
	}
}

// Problems are placed on the line of the JSON path they name.
func TestOffsetOf(t *testing.T) {
	t.Parallel()
	data := []byte("{\n  \"a\": [\n    {\"b\": 1},\n    {\"c\": {\"d e\": 2}}\n  ],\n  \"f\": 3\n}\n")
	for path, line := range map[string]int{
		"a":              2,
		"a[0].b":         3,
		"a[1]":           4,
		`a[1].c["d e"]`:  4,
		"f":              6,
		"a[1].missing":   4,
		"nothing.at.all": 1,
	} {
		o, ok := offsetOf(data, path)
		got := strings.Count(string(data[:o]), "\n") + 1
		if !ok || got != line {
			t.Errorf("offsetOf(%q): line %d (ok %v), want %d", path, got, ok, line)
		}
	}
}
