package districts

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite golden files")

// Repository test data, shared with the CLI.
const (
	kratzkeDir = "../testdata/kratzke2017"
	invalidDir = "../testdata/invalid"
)

// stage copies config files into a temporary directory, keeping their base
// names, and returns their paths. Git does not keep mode 600, so the
// credentials copy gets it here. An empty credentials name stages none.
func stage(t *testing.T, cluster, districts, credentials string) Paths {
	t.Helper()
	dir := t.TempDir()
	cp := func(src string, mode os.FileMode) string {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, filepath.Base(src))
		if err := os.WriteFile(dst, data, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dst, mode); err != nil { // whatever the umask
			t.Fatal(err)
		}
		return dst
	}
	p := Paths{Cluster: cp(cluster, 0o644), Districts: cp(districts, 0o644), State: filepath.Join(dir, "resources.json")}
	if credentials != "" {
		p.Credentials = cp(credentials, 0o600)
	} else {
		p.Credentials = filepath.Join(dir, "credentials.json")
	}
	return p
}

// kratzkeConfig is what the paper's files (and the root examples) hold.
func kratzkeConfig(p Paths) Config {
	tags := func(priority string) map[string]string {
		return map[string]string{"location": "Europe", "policy": "Safe-Harbour", "scheduling-priority": priority, "further": "arbitrary tags"}
	}
	return Config{
		Paths: p,
		Cluster: Cluster{
			Type: "cluster", ID: "swarm-europe", Platform: "swarm",
			Flavors: []Flavor{
				{Flavor: "small", Cores: 1, MemoryGB: 3.75, DiskGB: 20},
				{Flavor: "med", Cores: 2, MemoryGB: 7.5, DiskGB: 40},
				{Flavor: "large", Cores: 4, MemoryGB: 15, DiskGB: 80},
			},
			Deployments: []Deployment{
				{District: "gce-europe", Flavor: "small", Role: "master", Quantity: 3, Tags: tags("low")},
				{District: "gce-europe", Flavor: "small", Role: "worker", Quantity: 3, Tags: tags("low")},
				{District: "aws-europe", Flavor: "small", Role: "worker", Quantity: 10, Tags: tags("high")},
			},
		},
		Districts: []District{
			{Type: "district", ID: "gce-europe", Provider: "gce", CredentialID: "gce_default",
				GCEProjectID: "your-proj-id", GCERegion: "europe-west1", GCEZones: []string{"europe-west1-b", "europe-west1-c"},
				Flavors: []DistrictFlavor{
					{Flavor: "small", MachineType: "n1-standard-1"},
					{Flavor: "med", MachineType: "n1-standard-2"},
					{Flavor: "large", MachineType: "n1-standard-4"},
				}},
			{Type: "district", ID: "aws-europe", Provider: "aws", CredentialID: "aws_default", AWSRegion: "eu-central-1",
				Flavors: []DistrictFlavor{
					{Flavor: "small", InstanceType: "m3.medium"},
					{Flavor: "med", InstanceType: "m4.large"},
					{Flavor: "large", InstanceType: "m4.xlarge"},
				}},
		},
		Credentials: []Credential{
			{Type: "credential", ID: "gce_default", Provider: "gce", GCEKeyFile: filepath.Join(filepath.Dir(p.Credentials), "path-to-key.json")},
			{Type: "credential", ID: "aws_default", Provider: "aws", AWSAccessKeyID: "AKID", AWSSecretAccessKey: "SECRET"},
		},
		CredentialsLoaded: true,
	}
}

// compareSecrets makes cmp compare secret values rather than placeholders.
var compareSecrets = cmp.Comparer(func(a, b Secret) bool { return a.Reveal() == b.Reveal() })

func TestLoadPaperAndExamples(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ name, cluster, districts, credentials string }{
		{"kratzke2017", kratzkeDir + "/cluster.json", kratzkeDir + "/districts.json", kratzkeDir + "/credentials.json"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := stage(t, tt.cluster, tt.districts, tt.credentials)
			got, err := Load(p)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if diff := cmp.Diff(kratzkeConfig(p), got, compareSecrets); diff != "" {
				t.Errorf("Load (-want +got):\n%s", diff)
			}
		})
	}
}

// The examples at the repository root are the local Swarm the demo brings
// up: a manager and two workers in local-a, two workers in local-b, every
// deployment tagged.
func TestLoadExamples(t *testing.T) {
	t.Parallel()
	p := stage(t, "../cluster.example.json", "../districts.example.json", "../credentials.example.json")
	got, err := Load(p)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if got.Cluster.Platform != "swarm" {
		t.Errorf("platform %q, want swarm", got.Cluster.Platform)
	}
	want := map[string]int{"local-a/master": 1, "local-a/worker": 2, "local-b/worker": 2}
	have := map[string]int{}
	for _, d := range got.Cluster.Deployments {
		have[d.District+"/"+d.Role] += d.Quantity
		if len(d.Tags) == 0 {
			t.Errorf("deployment %s/%s has no tags", d.District, d.Role)
		}
	}
	if diff := cmp.Diff(want, have); diff != "" {
		t.Errorf("nodes per district and role (-want +got):\n%s", diff)
	}
	for _, d := range got.Districts {
		if d.Provider != ProviderLocal || d.LocalSubnet == "" {
			t.Errorf("district %s: provider %q subnet %q, want a local district with a subnet", d.ID, d.Provider, d.LocalSubnet)
		}
	}
}

// The paper's listings must parse unchanged: no unknown key, no type
// problem, nothing dropped.
func TestPaperFilesParseStrictly(t *testing.T) {
	t.Parallel()
	for name, v := range map[string]any{"cluster.json": &Cluster{}, "districts.json": &[]District{}, "credentials.json": &[]Credential{}} {
		data, err := os.ReadFile(filepath.Join(kratzkeDir, name))
		if err != nil {
			t.Fatal(err)
		}
		c := newProblems(name, nil)
		if !decodeFile(c, data, v, name == "credentials.json", "") || len(c.list) > 0 {
			t.Errorf("%s: %v", name, c.list)
		}
	}
}

func TestLoadCredentialsMode(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		mode os.FileMode
		ok   bool
	}{{0o600, true}, {0o400, true}, {0o640, false}, {0o644, false}, {0o604, false}, {0o620, false}} {
		t.Run(fmt.Sprintf("%#o", tt.mode), func(t *testing.T) {
			t.Parallel()
			p := stage(t, kratzkeDir+"/cluster.json", kratzkeDir+"/districts.json", kratzkeDir+"/credentials.json")
			if err := os.Chmod(p.Credentials, tt.mode); err != nil {
				t.Fatal(err)
			}
			_, err := Load(p)
			if tt.ok {
				if err != nil {
					t.Fatalf("Load: %v", err)
				}
				return
			}
			want := Problems{{
				File:    "credentials.json",
				Message: fmt.Sprintf("mode %#o lets group or others read or write it", tt.mode),
				Hint:    "run chmod 600 " + p.Credentials,
			}}
			var got Problems
			if !errors.As(err, &got) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("Load error = %v, want Problems", err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLoadWithoutCredentials(t *testing.T) {
	t.Parallel()
	t.Run("missing file", func(t *testing.T) {
		t.Parallel()
		p := stage(t, kratzkeDir+"/cluster.json", kratzkeDir+"/districts.json", "")
		got, err := Load(p)
		if err != nil {
			t.Fatalf("Load: %v", err)
		}
		if got.CredentialsLoaded || len(got.Credentials) != 0 {
			t.Errorf("credentials = %v (loaded %v), want none", got.Credentials, got.CredentialsLoaded)
		}
	})
	t.Run("no path", func(t *testing.T) {
		t.Parallel()
		p := stage(t, kratzkeDir+"/cluster.json", kratzkeDir+"/districts.json", "")
		p.Credentials = ""
		if _, err := Load(p); err != nil {
			t.Fatalf("Load: %v", err)
		}
	})
}

func TestLoadMissingFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, err := Load(Paths{Cluster: filepath.Join(dir, "cluster.json"), Districts: filepath.Join(dir, "districts.json")})
	want := Problems{
		withHint(cl("", "file not found"), "start from cluster.example.json"),
		withHint(ds("", "file not found"), "start from districts.example.json"),
	}
	var got Problems
	if !errors.As(err, &got) {
		t.Fatalf("Load error = %v, want Problems", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
}

// A file that cannot be decoded is not validated, and nothing that refers
// into it is checked: no problem is invented from a half-read file.
func TestLoadSkipsChecksIntoUndecodedFiles(t *testing.T) {
	t.Parallel()
	p := stage(t, kratzkeDir+"/cluster.json", kratzkeDir+"/districts.json", kratzkeDir+"/credentials.json")
	write := func(path, s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(p.Districts, `[{"type": "district", "id": 5}]`)
	write(p.Credentials, `[{"type": "credential", "id": "x", "provider": "aws", "aws_secret_access_key": 5}]`)
	_, err := Load(p)
	want := "districts.json: [0].id: expected a string, got a number\n" +
		"credentials.json: [0].aws_secret_access_key: expected a string, got a number"
	if err == nil || err.Error() != want {
		t.Errorf("Load error =\n%v\nwant\n%s", err, want)
	}
}

// The invalid set shows everything at once: unknown keys, validation of
// every file and the references between them.
func TestLoadInvalidGolden(t *testing.T) {
	t.Parallel()
	p := stage(t, invalidDir+"/cluster.json", invalidDir+"/districts.json", invalidDir+"/credentials.json")
	_, err := Load(p)
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("Load error = %v, want ErrInvalid", err)
	}
	got := err.Error() + "\n"
	golden := filepath.Join(invalidDir, "problems.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("problems (-golden +got), rerun with -update if intended:\n%s", diff)
	}
	if n := strings.Count(got, "\n"); n < 30 {
		t.Errorf("only %d problems reported", n)
	}
}

func TestLoadResources(t *testing.T) {
	t.Parallel()
	rs := func(path, msg, hint string) Problem {
		return Problem{File: "resources.json", Path: path, Message: msg, Hint: hint}
	}
	created := time.Date(2017, 4, 24, 9, 30, 0, 0, time.UTC)
	tests := []struct {
		name    string
		content *string // nil: no file
		want    Resources
		wantErr Problems
	}{
		{name: "missing file is an empty state", want: Resources{Type: "resources", Version: ResourcesVersion}},
		{name: "valid", content: ptr(`{"type": "resources", "version": 1, "cluster": "demo", "serial": 7,
			"nodes": [{"type": "node", "id": "n1", "cluster": "demo", "district": "aws-europe", "role": "worker", "flavor": "small",
			           "provider_id": "i-1", "public_ip": "192.0.2.1", "phase": "joined", "created_at": "2017-04-24T09:30:00Z"}],
			"security_groups": [{"id": "g1", "cluster": "demo", "district": "aws-europe", "provider_id": "sg-1", "sources": ["192.0.2.1/32"]}]}`),
			want: Resources{Type: "resources", Version: 1, Cluster: "demo", Serial: 7,
				Nodes: []Node{{Type: "node", ID: "n1", Cluster: "demo", District: "aws-europe", Role: "worker", Flavor: "small",
					ProviderID: "i-1", PublicIP: "192.0.2.1", Phase: PhaseJoined, CreatedAt: created}},
				SecurityGroups: []SecurityGroup{{ID: "g1", Cluster: "demo", District: "aws-europe", ProviderID: "sg-1", Sources: []string{"192.0.2.1/32"}}},
			}},
		{name: "empty file", content: ptr(""), wantErr: Problems{rs("", "file is empty", resourcesRecovery)}},
		{name: "truncated", content: ptr(`{"type": "resources", "vers`),
			wantErr: Problems{rs("", "invalid JSON at line 1, column 28: unexpected end of JSON input", resourcesRecovery)}},
		{name: "not an object", content: ptr(`[]`),
			wantErr: Problems{rs("", "expected an object, got a list", resourcesShape)}},
		{name: "newer version with new keys", content: ptr(`{"type": "resources", "version": 3, "volumes": []}`),
			wantErr: Problems{rs("version", "written by a newer transit (version 3; this transit reads version 2)", "upgrade transit")}},
		{name: "unknown key", content: ptr(`{"type": "resources", "version": 1, "nodez": []}`),
			wantErr: Problems{rs("", `unknown key "nodez" (known: type, version, cluster, lineage, serial, updated_at, platform_formed_at, districts, node_numbers, failures, autoscale, mesh_peers, mesh_retired, mesh, launching, nodes, security_groups)`, `did you mean "nodes"?`)}},
		{name: "node of another cluster", content: ptr(`{"type": "resources", "version": 1, "cluster": "a", "nodes": [{"id": "n", "cluster": "b", "phase": "joined"}]}`),
			wantErr: Problems{rs("nodes[0].cluster", `"b" does not match the state's cluster "a"`, "")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "resources.json")
			if tt.content != nil {
				if err := os.WriteFile(path, []byte(*tt.content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := LoadResources(path)
			var gotErr Problems
			if err != nil && (!errors.As(err, &gotErr) || !errors.Is(err, ErrInvalid)) {
				t.Fatalf("LoadResources error %v is not Problems", err)
			}
			if diff := cmp.Diff(tt.wantErr, gotErr); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("resources (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLoadResourcesUnreadable(t *testing.T) {
	t.Parallel()
	// A directory where the file should be: an I/O error, not a problem
	// with the content and never an empty state.
	_, err := LoadResources(t.TempDir())
	if err == nil || errors.Is(err, ErrInvalid) {
		t.Errorf("LoadResources(dir) error = %v, want an I/O error", err)
	}
}

func ptr[T any](v T) *T { return &v }

func TestLoadCredentials(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "credentials.json")
	if _, err := LoadCredentials(path); err == nil || !strings.Contains(err.Error(), "file not found") {
		t.Errorf("missing file: %v", err)
	}
	body := `[{"type": "credential", "id": "a", "provider": "aws", "aws_access_key_id": "AKID", "aws_secret_access_key": "S3CRET"}]`
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadCredentials(path); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("readable by others: %v", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	creds, err := LoadCredentials(path)
	if err != nil || len(creds) != 1 || creds[0].AWSAccessKeyID != "AKID" {
		t.Fatalf("LoadCredentials = %+v, %v", creds, err)
	}
	if err := os.WriteFile(path, []byte(`[{"type": "credential", "id": "a", "provider": "aws", "aws_secret_access_key": "S3CRET"}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = LoadCredentials(path)
	if err == nil || !strings.Contains(err.Error(), "aws_access_key_id") || strings.Contains(err.Error(), "S3CRET") {
		t.Errorf("invalid credential: %v", err)
	}
}

// A relative gce_key_file is relative to credentials.json, not to where
// transit runs.
func TestGCEKeyFileRelativeToCredentials(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "credentials.json")
	body := `[{"type": "credential", "id": "g", "provider": "gce", "gce_key_file": "keys/sa.json"},
	          {"type": "credential", "id": "h", "provider": "gce", "gce_key_file": "/etc/transit/sa.json"}]`
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	creds, err := LoadCredentials(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "keys", "sa.json"); creds[0].GCEKeyFile != want {
		t.Errorf("relative gce_key_file = %q, want %q", creds[0].GCEKeyFile, want)
	}
	if creds[1].GCEKeyFile != "/etc/transit/sa.json" {
		t.Errorf("absolute gce_key_file = %q, want it unchanged", creds[1].GCEKeyFile)
	}
}
