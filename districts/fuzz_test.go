package districts

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// Fuzz targets: any input must give problems or a value, never a panic,
// and an input accepted without problems must survive marshal and decode.

// addSeeds seeds f with every testdata file of that name plus a few
// hand-written edge cases.
func addSeeds(f *testing.F, name string, extra ...string) {
	f.Helper()
	for _, dir := range []string{kratzkeDir, invalidDir} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range append(extra, "", "null", "{}", "[]", `{"a": 1, "a": 2}`, "[{}]", `"x"`, "\xef\xbb\xbf{}") {
		f.Add([]byte(s))
	}
}

// fuzzDecode decodes data as a T, runs validate on it and, when the
// decoder accepted it outright, checks the round trip. redact maps a
// value to what survives marshalling (secrets become placeholders).
func fuzzDecode[T any](t *testing.T, data []byte, sensitive bool, validate func(*problems, T), redact func(T) T) {
	file := "input.json"
	c := newProblems(file, reflect.TypeFor[T]())
	var v T
	ok := decodeFile(c, data, &v, sensitive, "")
	if !ok {
		if len(c.list) == 0 {
			t.Fatal("rejected without a problem")
		}
		return
	}
	accepted := len(c.list) == 0
	validate(c, v) // must not panic
	_ = c.sorted()
	_ = c.list.Error()
	if !accepted {
		return
	}

	out, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("marshal accepted input: %v", err)
	}
	c2 := newProblems(file, reflect.TypeFor[T]())
	var again T
	if !decodeFile(c2, out, &again, sensitive, "") || len(c2.list) > 0 {
		t.Fatalf("round trip of %s: %v", out, c2.list)
	}
	if diff := cmp.Diff(redact(v), again, cmpopts.EquateEmpty(), compareSecrets); diff != "" {
		t.Fatalf("round trip changed the value (-before +after):\n%s", diff)
	}
}

func same[T any](v T) T { return v }

func FuzzCluster(f *testing.F) {
	addSeeds(f, "cluster.json",
		`{"strategy": {"drain_timeout": "-2562047h47m16.854775808s", "max_surge": 2}}`,
		`{"flavors": [{"memory_gb": -0, "cores": 9223372036854775807}], "deployments": [{"tags": {"a.b": "\u00e9", "": "\ud800"}}]}`,
		`{"addons": [{"name": "relations", "settings": {"k": "v"}}]}`)
	districts := kratzkeConfig(Paths{}).Districts
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzDecode(t, data, false, func(c *problems, v Cluster) {
			validateCluster(c, v, districts, true, "districts.json")
		}, same[Cluster])
	})
}

func FuzzDistricts(f *testing.F) {
	addSeeds(f, "districts.json",
		`[{"type": "district", "id": "l", "provider": "local", "local_subnet": "10.0.0.0/16"}, {"provider": "local", "local_subnet": "10.0.1.0/24"}]`,
		`[{"provider": "openstack", "os_auth_url": "http://[::1", "os_zones": ["a"]}]`)
	creds := kratzkeConfig(Paths{}).Credentials
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzDecode(t, data, false, func(c *problems, v []District) {
			validateDistricts(c, v, creds, true, "credentials.json")
		}, same[[]District])
	})
}

func FuzzCredentials(f *testing.F) {
	addSeeds(f, "credentials.json",
		`[{"type": "credential", "id": "o", "provider": "openstack", "os_password": "p", "os_application_credential_secret": "s"}]`)
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzDecode(t, data, true, validateCredentials, func(cs []Credential) []Credential {
			out := make([]Credential, len(cs))
			for i, c := range cs {
				for _, s := range []*Secret{&c.AWSSecretAccessKey, &c.AWSSessionToken, &c.OSPassword, &c.OSApplicationCredentialSecret} {
					*s = Secret(s.String())
				}
				out[i] = c
			}
			return out
		})
	})
}

func FuzzResources(f *testing.F) {
	f.Add([]byte(`{"type": "resources", "version": 1, "cluster": "demo", "serial": 3, "updated_at": "2017-04-24T09:30:00.123456789+02:00",
		"nodes": [{"id": "n1", "cluster": "demo", "phase": "joined", "tags": {"a": "b"}, "created_at": "0001-01-01T00:00:00Z"}],
		"security_groups": [{"id": "g1", "cluster": "demo", "sources": ["10.0.0.1/32"]}]}`))
	f.Add([]byte(`{"type": "resources", "version": 2, "cluster": "demo", "lineage": "k3x9q2m7p4z8w1v6", "serial": 9,
		"platform_formed_at": "2026-11-22T10:00:00Z", "node_numbers": {"master": 3, "worker": 12},
		"failures": {"a/small/worker": {"count": 3, "last_error": "apt-get: unable to fetch", "last_at": "2026-11-22T10:05:00Z"}},
		"nodes": [{"id": "demo-worker-12", "cluster": "demo", "phase": "draining", "cordoned_by_transit": true, "join_failed": true,
			"not_ready_since": "2026-11-22T10:01:00Z", "created_at": "2026-11-22T09:00:00Z"},
			{"id": "demo-worker-11", "cluster": "demo", "phase": "cordoned", "created_at": "2026-11-22T09:00:00Z"}]}`))
	f.Add([]byte(`{"type": "resources", "version": 3, "new": true}`))
	f.Add([]byte(`{"type": "resources", "version": 1, "nodes": null, "security_groups": []}`))
	f.Add([]byte(`{"updated_at": "9999-12-31T23:59:59-23:59"}`))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, data []byte) {
		// As LoadResources: the version peek first, then the decoder.
		if r, ps := decodeResources("resources.json", data); len(ps) == 0 {
			if err := ValidateResources(r); err != nil {
				t.Fatalf("decodeResources accepted a state ValidateResources rejects: %v", err)
			}
		}
		fuzzDecode(t, data, false, validateResources, same[Resources])
	})
}
