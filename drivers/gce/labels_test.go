package gce

import (
	"maps"
	"regexp"
	"strings"
	"testing"
)

var (
	gceKey   = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`)
	gceValue = regexp.MustCompile(`^[a-z0-9_-]{0,63}$`)
)

func TestLabelsAreValidAndReversible(t *testing.T) {
	tags := map[string]string{
		"transit-cluster": "demo",
		"Name":            "Web Server #1",
		"x":               "x",
		"xray":            "",
		"1st":             "under_score",
		"policy":          "Safe-Harbour v1.2",
		"ümlaut":          "naïve",
		"_":               "-",
	}
	labels, err := encodeLabels(tags)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range labels {
		if !gceKey.MatchString(k) || !gceValue.MatchString(v) {
			t.Errorf("label %q=%q breaks Compute Engine's label rules", k, v)
		}
	}
	if got := decodeLabels(labels); !maps.Equal(got, tags) {
		t.Errorf("round trip: got %v, want %v", got, tags)
	}
	// Identity tags of ordinary ids stay readable.
	if labels["transit-cluster"] != "demo" {
		t.Errorf("transit-cluster=demo encodes as %v", labels)
	}
}

func TestLabelTooLongIsRefusedNamingTheTag(t *testing.T) {
	_, err := encodeLabels(map[string]string{"team": strings.Repeat("A", 30)})
	if err == nil || !strings.Contains(err.Error(), "team") {
		t.Errorf("a tag whose label would exceed 63 characters: err = %v, want one naming the tag", err)
	}
}

func TestRuleNames(t *testing.T) {
	for _, g := range []string{"transit-demo-gce-eu", "transit-Demo_X-gce", "transit-" + strings.Repeat("long", 20)} {
		for _, k := range ruleKinds {
			n := k.name(g)
			if !regexp.MustCompile(`^[a-z]([-a-z0-9]*[a-z0-9])?$`).MatchString(n) || len(n) > 63 {
				t.Errorf("rule %+v of group %q is %q: not a valid firewall name", k, g, n)
			}
		}
	}
	if ruleName("transit-Demo_X-gce") == ruleName("transit-demo-x-gce") {
		t.Errorf("two group names map onto one rule name")
	}
}
