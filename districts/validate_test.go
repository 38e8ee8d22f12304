package districts

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// kubernetesWithAddons makes c a Kubernetes cluster (its tags valid
// labels) with the addons relations and more.
func kubernetesWithAddons(c *Config, more ...Addon) {
	c.Cluster.Platform = "kubernetes"
	c.Cluster.Deployments[0].Tags["further"] = "arbitrary-tags"
	c.Cluster.Addons = append([]Addon{{Name: "relations"}}, more...)
}

// validConfig is a configuration with one district per provider and no
// problems; each test case breaks one thing.
func validConfig() Config {
	return Config{
		Cluster: Cluster{
			Type:     "cluster",
			ID:       "demo",
			Platform: "swarm",
			Flavors: []Flavor{
				{Flavor: "small", Cores: 1, MemoryGB: 3.75, DiskGB: 20},
				{Type: "flavor", Flavor: "large", Cores: 4, MemoryGB: 15, DiskGB: 80},
			},
			Deployments: []Deployment{
				{District: "gce-europe", Flavor: "small", Role: "master", Quantity: 3, Tags: map[string]string{"location": "Europe", "further": "arbitrary tags"}},
				{Type: "deployment", District: "aws-europe", Flavor: "large", Role: "worker", Quantity: 2},
			},
			Strategy: Strategy{MaxUnavailable: Int(2), DrainTimeout: Duration(time.Minute)},
		},
		Districts: []District{
			{Type: "district", ID: "gce-europe", Provider: "gce", CredentialID: "gce_default",
				GCEProjectID: "proj", GCERegion: "europe-west1", GCEZones: []string{"europe-west1-b", "europe-west1-c"},
				Flavors: []DistrictFlavor{{Flavor: "small", MachineType: "n1-standard-1"}, {Flavor: "large", MachineType: "n1-standard-4"}}},
			{Type: "district", ID: "aws-europe", Provider: "aws", CredentialID: "aws_default",
				AWSRegion: "eu-central-1", AWSZones: []string{"eu-central-1a"},
				Flavors: []DistrictFlavor{{Flavor: "small", InstanceType: "m3.medium"}, {Type: "flavor", Flavor: "large", InstanceType: "m4.xlarge"}}},
			{Type: "district", ID: "os-lab", Provider: "openstack", CredentialID: "os_lab",
				OSAuthURL: "https://keystone.example:5000/v3", OSRegion: "RegionOne",
				Flavors: []DistrictFlavor{{Flavor: "small", OSFlavor: "m1.small"}}},
			{Type: "district", ID: "local-a", Provider: "local", LocalSubnet: "10.10.0.0/24",
				Flavors: []DistrictFlavor{{Flavor: "small"}}},
			{Type: "district", ID: "local-b", Provider: "local", LocalSubnet: "10.10.1.0/28"},
		},
		Credentials: []Credential{
			{Type: "credential", ID: "gce_default", Provider: "gce", GCEKeyFile: "key.json"},
			{Type: "credential", ID: "aws_default", Provider: "aws", AWSAccessKeyID: "AKID", AWSSecretAccessKey: "SECRET"},
			{Type: "credential", ID: "os_lab", Provider: "openstack", OSUsername: "me", OSPassword: "pw", OSProjectName: "lab"},
		},
		CredentialsLoaded: true,
	}
}

func cl(path, msg string) Problem          { return Problem{File: "cluster.json", Path: path, Message: msg} }
func ds(path, msg string) Problem          { return Problem{File: "districts.json", Path: path, Message: msg} }
func cr(path, msg string) Problem          { return Problem{File: "credentials.json", Path: path, Message: msg} }
func withHint(p Problem, h string) Problem { p.Hint = h; return p }

func TestValidConfig(t *testing.T) {
	t.Parallel()
	if err := Validate(validConfig()); err != nil {
		t.Fatalf("Validate(validConfig()) = %v", err)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	const knownDistricts = "(known: gce-europe, aws-europe, os-lab, local-a, local-b)"
	tests := []struct {
		name   string
		mutate func(*Config)
		want   Problems
	}{
		// cluster.json
		{"cluster type missing", func(c *Config) { c.Cluster.Type = "" },
			Problems{cl("type", `missing (must be "cluster")`)}},
		{"cluster type wrong", func(c *Config) { c.Cluster.Type = "district" },
			Problems{cl("type", `must be "cluster", got "district"`)}},
		{"cluster id missing", func(c *Config) { c.Cluster.ID = "" },
			Problems{withHint(cl("id", "missing"), idHint)}},
		{"cluster id invalid", func(c *Config) { c.Cluster.ID = "My_Cluster" },
			Problems{withHint(cl("id", `"My_Cluster" is not a valid id`), idHint)}},
		{"platform missing", func(c *Config) { c.Cluster.Platform = "" },
			Problems{cl("platform", "missing (known: kubernetes, swarm)")}},
		{"platform unknown", func(c *Config) { c.Cluster.Platform = "mesos" },
			Problems{cl("platform", `"mesos" is not a supported platform (known: kubernetes, swarm)`)}},
		{"flavor type wrong", func(c *Config) { c.Cluster.Flavors[1].Type = "flavour" },
			Problems{cl("flavors[1].type", `must be "flavor" or left out, got "flavour"`)}},
		{"flavor name missing", func(c *Config) { c.Cluster.Flavors = append(c.Cluster.Flavors, Flavor{Cores: 1}) },
			Problems{cl("flavors[2].flavor", "missing")}},
		{"flavor name invalid", func(c *Config) { c.Cluster.Flavors = append(c.Cluster.Flavors, Flavor{Flavor: "X Large"}) },
			Problems{withHint(cl("flavors[2].flavor", `"X Large" is not a valid flavor name`), strings.Replace(idHint, "ids", "flavor names", 1))}},
		{"flavor defined twice", func(c *Config) { c.Cluster.Flavors = append(c.Cluster.Flavors, Flavor{Flavor: "small"}) },
			Problems{cl("flavors[2].flavor", `"small" is defined twice (first at flavors[0])`)}},
		{"flavor sizes negative", func(c *Config) {
			c.Cluster.Flavors[0].Cores, c.Cluster.Flavors[0].MemoryGB, c.Cluster.Flavors[0].DiskGB = -1, -0.5, -10
		}, Problems{
			cl("flavors[0].cores", "must not be negative, got -1"),
			cl("flavors[0].memory_gb", "must not be negative, got -0.5"),
			cl("flavors[0].disk_gb", "must not be negative, got -10"),
		}},
		{"deployment type wrong", func(c *Config) { c.Cluster.Deployments[0].Type = "flavor" },
			Problems{cl("deployments[0].type", `must be "deployment" or left out, got "flavor"`)}},
		{"deployment district missing", func(c *Config) { c.Cluster.Deployments[1].District = "" },
			Problems{cl("deployments[1].district", "missing "+knownDistricts)}},
		{"deployment district undefined", func(c *Config) { c.Cluster.Deployments[0].District = "gce-eu" },
			Problems{withHint(cl("deployments[0].district", `"gce-eu" is not defined in districts.json `+knownDistricts), `did you mean "gce-europe"?`)}},
		{"deployment district unlike any", func(c *Config) { c.Cluster.Deployments[0].District = "azure-west" },
			Problems{cl("deployments[0].district", `"azure-west" is not defined in districts.json `+knownDistricts)}},
		{"deployment district misspelt", func(c *Config) { c.Cluster.Deployments[0].District = "gce-euorpe" },
			Problems{withHint(cl("deployments[0].district", `"gce-euorpe" is not defined in districts.json `+knownDistricts), `did you mean "gce-europe"?`)}},
		{"deployment flavor missing", func(c *Config) { c.Cluster.Deployments[0].Flavor = "" },
			Problems{cl("deployments[0].flavor", "missing (known: small, large)")}},
		{"deployment flavor undefined", func(c *Config) { c.Cluster.Deployments[0].Flavor = "huge" },
			Problems{cl("deployments[0].flavor", `"huge" is not defined in flavors (known: small, large)`)}},
		{"deployment flavor not mapped in district", func(c *Config) {
			c.Cluster.Deployments = append(c.Cluster.Deployments, Deployment{District: "os-lab", Flavor: "large", Role: "worker", Quantity: 1})
		}, Problems{withHint(cl("deployments[2].flavor", `"large" is not mapped in district "os-lab" (mapped: small)`),
			`add it to the flavors of district "os-lab" in districts.json`)}},
		{"deployment role missing", func(c *Config) { c.Cluster.Deployments[1].Role = "" },
			Problems{cl("deployments[1].role", "missing")}},
		{"deployment role unknown", func(c *Config) { c.Cluster.Deployments[1].Role = "manager" },
			Problems{cl("deployments[1].role", `"manager" is not a role of swarm (known: master, worker)`)}},
		{"deployment quantity negative", func(c *Config) { c.Cluster.Deployments[1].Quantity = -2 },
			Problems{cl("deployments[1].quantity", "must not be negative, got -2")}},
		{"deployment quantity a typo", func(c *Config) { c.Cluster.Deployments[1].Quantity = 1000000000 },
			Problems{withHint(cl("deployments[1].quantity", "1000000000 is more than 1000, the most one deployment line may hold"), quantityHint)}},
		{"cluster too large", func(c *Config) {
			// Lines of every mapped district, flavor and role, up to
			// one node over the limit.
			total := 0
			for _, d := range c.Cluster.Deployments {
				total += d.Quantity
			}
			for _, line := range []struct{ d, f, r string }{
				{"os-lab", "small", "worker"}, {"local-a", "small", "worker"}, {"os-lab", "small", "master"}, {"local-a", "small", "master"},
				{"gce-europe", "large", "worker"}, {"gce-europe", "large", "master"}, {"aws-europe", "large", "worker"}, {"aws-europe", "large", "master"},
				{"aws-europe", "small", "master"}, {"gce-europe", "small", "master"}, {"gce-europe", "small", "worker"}, {"aws-europe", "small", "worker"},
			} {
				if total > MaxClusterNodes || slices.ContainsFunc(c.Cluster.Deployments, func(x Deployment) bool {
					return x.Key() == DeploymentKey{District: line.d, Flavor: line.f, Role: line.r}
				}) {
					continue
				}
				q := min(MaxDeploymentQuantity, MaxClusterNodes+1-total)
				c.Cluster.Deployments = append(c.Cluster.Deployments, Deployment{District: line.d, Flavor: line.f, Role: line.r, Quantity: q})
				total += q
			}
		}, Problems{withHint(cl("deployments", "the quantities add up to 10001 nodes, more than 10000, the most one cluster may hold"), quantityHint)}},
		{"no master", func(c *Config) { c.Cluster.Deployments[0].Role = "worker" },
			Problems{cl("deployments", `no master: a cluster with nodes needs at least one node with role "master"`)}},
		{"no master but no nodes either", func(c *Config) {
			c.Cluster.Deployments[0].Quantity, c.Cluster.Deployments[1].Quantity = 0, 0
		}, nil},
		{"duplicate deployment line", func(c *Config) {
			c.Cluster.Deployments = append(c.Cluster.Deployments, Deployment{District: "aws-europe", Flavor: "large", Role: "worker", Quantity: 1})
		}, Problems{withHint(cl("deployments[2]", "deployments[1] and deployments[2] are both aws-europe/large/worker (district/flavor/role)"), "merge them into one line")}},
		{"tags", func(c *Config) {
			c.Cluster.Deployments[0].Tags = map[string]string{
				"":                "x",
				"transit-role":    "worker",
				"Transit-Cluster": "x",
				"bad key":         "x",
				"example.com/ok":  "fine, really",
				"long":            strings.Repeat("v", 256),
				"ctl":             "a\nb",
			}
		}, Problems{
			cl(`deployments[0].tags[""]`, "empty tag key"),
			withHint(cl("deployments[0].tags.Transit-Cluster", `tag keys starting with "transit-" are reserved for transit's identity tags`), "choose another key"),
			withHint(cl(`deployments[0].tags["bad key"]`, `"bad key" is not a valid tag key`), `use up to 63 letters, digits, "-", "_", "." and "/", starting and ending with a letter or digit`),
			cl("deployments[0].tags.ctl", "tag value contains a control character"),
			cl("deployments[0].tags.long", "tag value is longer than 255 bytes"),
			withHint(cl("deployments[0].tags.transit-role", `tag keys starting with "transit-" are reserved for transit's identity tags`), "choose another key"),
		}},
		{"addon unknown", func(c *Config) { kubernetesWithAddons(c, Addon{Name: "stream"}) },
			Problems{withHint(cl("addons[1].name", `"stream" is not a known addon (known: relations, streams)`), `did you mean "streams"?`)}},
		{"addons on a swarm", func(c *Config) { c.Cluster.Addons = []Addon{{Name: "relations"}} },
			Problems{withHint(cl("addons", "addons are Kubernetes controllers: platform swarm runs none"), `remove "addons" or use platform "kubernetes"`)}},
		{"addon twice", func(c *Config) { kubernetesWithAddons(c, Addon{Type: "addon", Name: "relations"}) },
			Problems{cl("addons[1].name", `"relations" is listed twice (first at addons[0])`)}},
		{"addon name missing and wrong type", func(c *Config) { kubernetesWithAddons(c, Addon{Type: "plugin"}) },
			Problems{
				cl("addons[1].type", `must be "addon" or left out, got "plugin"`),
				cl("addons[1].name", "missing (known: relations, streams)"),
			}},
		{"strategy negative", func(c *Config) {
			c.Cluster.Strategy = Strategy{MaxUnavailable: Int(-1), MaxSurge: Int(-2), DrainTimeout: Duration(-time.Second)}
		}, Problems{
			cl("strategy.max_unavailable", "must not be negative, got -1"),
			cl("strategy.max_surge", "must not be negative, got -2"),
			cl("strategy.drain_timeout", "must not be negative, got -1s"),
		}},
		{"strategy both 0", func(c *Config) { c.Cluster.Strategy = Strategy{MaxUnavailable: Int(0), MaxSurge: Int(0)} },
			Problems{withHint(cl("strategy", "max_surge and max_unavailable are both 0: no node could ever be replaced"),
				"allow one of them to be at least 1 (max_surge 0 replaces in place, max_unavailable nodes at a time)")}},
		{"strategy max_surge 0 alone is replace-in-place", func(c *Config) { c.Cluster.Strategy = Strategy{MaxSurge: Int(0)} }, nil},

		// districts.json
		{"district type", func(c *Config) { c.Districts[0].Type = ""; c.Districts[1].Type = "cluster" },
			Problems{ds("[0].type", `missing (must be "district")`), ds("[1].type", `must be "district", got "cluster"`)}},
		{"district id missing", func(c *Config) { c.Districts[4].ID = "" },
			Problems{withHint(ds("[4].id", "missing"), idHint)}},
		{"district id invalid", func(c *Config) { c.Districts[4].ID = "local_b" },
			Problems{withHint(ds("[4].id", `"local_b" is not a valid id`), idHint)}},
		{"district id twice", func(c *Config) { c.Districts[4].ID = "local-a" },
			Problems{ds("[4].id", `"local-a" is defined twice (first at [3])`)}},
		{"provider missing", func(c *Config) { c.Districts[4].Provider = "" },
			Problems{ds("[4].provider", "missing (known: aws, gce, openstack, local)")}},
		{"provider unknown", func(c *Config) { c.Districts[4].Provider = "azure" },
			Problems{ds("[4].provider", `"azure" is not a supported provider (known: aws, gce, openstack, local)`)}},
		{"credential undefined", func(c *Config) { c.Districts[1].CredentialID = "aws_prod" },
			Problems{ds("[1].credential_id", `"aws_prod" is not defined in credentials.json (known: gce_default, aws_default, os_lab)`)}},
		{"credential of another provider", func(c *Config) { c.Districts[1].CredentialID = "gce_default" },
			Problems{ds("[1].credential_id", `credential "gce_default" is for gce, but district "aws-europe" is aws`)}},
		{"credential not checked without credentials.json", func(c *Config) {
			c.Districts[1].CredentialID = "aws_prod"
			c.Credentials, c.CredentialsLoaded = nil, false
		}, nil},
		{"credential omitted: ambient credentials", func(c *Config) {
			for i := range c.Districts {
				c.Districts[i].CredentialID = ""
			}
		}, nil},
		{"local district with credential", func(c *Config) { c.Districts[3].CredentialID = "aws_default" },
			Problems{withHint(ds("[3].credential_id", "local districts take no credential"), "remove credential_id")}},
		{"keys of other providers", func(c *Config) {
			c.Districts[0].AWSRegion = "eu-central-1"
			c.Districts[1].GCEZones = []string{"europe-west1-b"}
			c.Districts[2].LocalSubnet = "10.0.0.0/24"
			c.Districts[3].OSRegion = "RegionOne"
		}, Problems{
			ds("[0].aws_region", `belongs to provider aws, but district "gce-europe" is gce`),
			ds("[1].gce_zones", `belongs to provider gce, but district "aws-europe" is aws`),
			ds("[2].local_subnet", `belongs to provider local, but district "os-lab" is openstack`),
			ds("[3].os_region", `belongs to provider openstack, but district "local-a" is local`),
		}},
		{"flavor keys of other providers", func(c *Config) {
			c.Districts[0].Flavors[0].InstanceType = "m3.medium"
			c.Districts[1].Flavors[0].OSFlavor = "m1.small"
			c.Districts[3].Flavors[0].MachineType = "n1-standard-1"
		}, Problems{
			ds("[0].flavors[0].instance_type", `belongs to provider aws, but district "gce-europe" is gce`),
			ds("[1].flavors[0].os_flavor", `belongs to provider openstack, but district "aws-europe" is aws`),
			ds("[3].flavors[0].machine_type", `belongs to provider gce, but district "local-a" is local`),
		}},
		{"aws required keys", func(c *Config) { c.Districts[1].AWSRegion, c.Districts[1].AWSZones = "", nil },
			Problems{ds("[1].aws_region", "missing (aws districts need it)")}},
		{"gce required keys", func(c *Config) {
			c.Districts[0].GCEProjectID, c.Districts[0].GCERegion, c.Districts[0].GCEZones = "", "", []string{}
		}, Problems{
			ds("[0].gce_project_id", "missing (gce districts need it)"),
			ds("[0].gce_region", "missing (gce districts need it)"),
			ds("[0].gce_zones", "missing (gce districts need it)"),
		}},
		{"openstack required keys", func(c *Config) { c.Districts[2].OSAuthURL, c.Districts[2].OSRegion = "", "" },
			Problems{ds("[2].os_region", "missing (openstack districts need it)")}},
		{"cloud keys that exclude each other", func(c *Config) {
			c.Districts[1].AWSImageID, c.Districts[1].AWSImageName = "ami-1", "debian-12-*"
			c.Districts[1].AWSSubnetIDs = []string{"subnet-1"}
			c.Districts[0].GCEImage, c.Districts[0].GCEImageFamily = "debian-12-v1", "debian-12"
		}, Problems{
			ds("[0].gce_image_family", "set together with gce_image; set one of the two"),
			ds("[1].aws_image_name", "set together with aws_image_id; set one of the two"),
			ds("[1].aws_subnet_ids", "set together with aws_zones; set one of the two"),
		}},
		{"cloud keys that need another", func(c *Config) { c.Districts[1].AWSImageOwner = "136693071363" },
			Problems{ds("[1].aws_image_owner", "only applies with aws_image_name")}},
		{"endpoints", func(c *Config) {
			c.Districts[1].AWSEndpoint = "127.0.0.1:4566"
			c.Districts[0].GCEEndpoint = "ftp://x"
		}, Problems{
			ds("[0].gce_endpoint", `"ftp://x" is not an http or https URL`),
			ds("[1].aws_endpoint", `"127.0.0.1:4566" is not an http or https URL`),
		}},
		{"ssh cidrs", func(c *Config) {
			c.Districts[1].SSHCIDRs = []string{"203.0.113.0/24", "203.0.113.7", "10.0.0.1/8"}
			c.Districts[3].SSHCIDRs = []string{"10.0.0.0/8"}
		}, Problems{
			ds("[1].ssh_cidrs[1]", `"203.0.113.7" is not a CIDR such as "203.0.113.0/24"`),
			ds("[1].ssh_cidrs[2]", `"10.0.0.1/8" is not a CIDR such as "203.0.113.0/24"`),
			withHint(ds("[3].ssh_cidrs", "local nodes are reached from this host only"), "remove ssh_cidrs"),
		}},
		{"api cidrs", func(c *Config) {
			c.Districts[1].APICIDRs = []string{"198.51.100.0/24", "198.51.100.7"}
			c.Districts[3].APICIDRs = []string{"10.0.0.0/8"}
		}, Problems{
			withHint(cl("deployments[1].district", `district "aws-europe" sets api_cidrs in districts.json, which open the Kubernetes API port: platform swarm has none`), "remove api_cidrs"),
			ds("[1].api_cidrs[1]", `"198.51.100.7" is not a CIDR such as "203.0.113.0/24"`),
			withHint(ds("[3].api_cidrs", "local nodes are reached from this host only"), "remove api_cidrs"),
		}},
		{"openstack auth url", func(c *Config) { c.Districts[2].OSAuthURL = "keystone:5000" },
			Problems{ds("[2].os_auth_url", `"keystone:5000" is not an http or https URL`)}},
		{"local required keys", func(c *Config) { c.Districts[3].LocalSubnet = "" },
			Problems{ds("[3].local_subnet", "missing (local districts need it)")}},
		{"zones", func(c *Config) {
			c.Districts[0].GCEZones = []string{"europe-west1-b", "", "europe-west1-b", "us-east1-b", "europe-west1"}
			c.Districts[1].AWSZones = []string{"eu-west-1a"}
		}, Problems{
			ds("[0].gce_zones[1]", "empty zone"),
			ds("[0].gce_zones[2]", `"europe-west1-b" is listed twice`),
			ds("[0].gce_zones[3]", `"us-east1-b" is not a zone of region "europe-west1"`),
			ds("[0].gce_zones[4]", `"europe-west1" is not a zone of region "europe-west1"`),
			ds("[1].aws_zones[0]", `"eu-west-1a" is not a zone of region "eu-central-1"`),
		}},
		{"local subnet not a CIDR", func(c *Config) { c.Districts[3].LocalSubnet = "10.10.0.0" },
			Problems{withHint(ds("[3].local_subnet", `"10.10.0.0" is not an IPv4 CIDR`), `use a private range such as "10.10.0.0/24"`)}},
		{"local subnet IPv6", func(c *Config) { c.Districts[3].LocalSubnet = "fd00::/64" },
			Problems{withHint(ds("[3].local_subnet", `"fd00::/64" is not an IPv4 CIDR`), `use a private range such as "10.10.0.0/24"`)}},
		{"local subnet too large", func(c *Config) { c.Districts[3].LocalSubnet = "10.0.0.0/8" },
			Problems{ds("[3].local_subnet", "prefix length /8 is not between /16 and /28")}},
		{"local subnet too small", func(c *Config) { c.Districts[3].LocalSubnet = "10.10.0.0/30" },
			Problems{ds("[3].local_subnet", "prefix length /30 is not between /16 and /28")}},
		{"local subnet host bits", func(c *Config) { c.Districts[3].LocalSubnet = "10.10.0.7/24" },
			Problems{withHint(ds("[3].local_subnet", `"10.10.0.7/24" has host bits set`), `did you mean "10.10.0.0/24"?`)}},
		{"local subnets overlap", func(c *Config) { c.Districts[4].LocalSubnet = "10.10.0.16/28" },
			Problems{ds("[4].local_subnet", `10.10.0.16/28 overlaps 10.10.0.0/24 of district "local-a" ([3].local_subnet)`)}},
		{"district flavors", func(c *Config) {
			c.Districts[0].Flavors = append(c.Districts[0].Flavors, DistrictFlavor{Flavor: "small", MachineType: "e2-small"}, DistrictFlavor{Type: "machine", MachineType: "x"})
			c.Districts[1].Flavors[0].InstanceType = ""
			c.Districts[2].Flavors[0].OSFlavor = ""
		}, Problems{
			ds("[0].flavors[2].flavor", `"small" is mapped twice (first at [0].flavors[0])`),
			ds("[0].flavors[3].type", `must be "flavor" or left out, got "machine"`),
			ds("[0].flavors[3].flavor", "missing"),
			ds("[1].flavors[0].instance_type", "missing (aws districts need it for every flavor)"),
			ds("[2].flavors[0].os_flavor", "missing (openstack districts need it for every flavor)"),
		}},

		// credentials.json
		{"credential type and id", func(c *Config) {
			c.Credentials[0].Type = ""
			c.Credentials[1].ID = ""
			c.Credentials = append(c.Credentials, Credential{Type: "credential", ID: "os_lab", Provider: "openstack", OSCloud: "lab"})
			c.Districts[1].CredentialID = ""
		}, Problems{
			cr("[0].type", `missing (must be "credential")`),
			cr("[1].id", "missing"),
			cr("[3].id", `"os_lab" is defined twice (first at [2])`),
		}},
		{"credential provider", func(c *Config) {
			c.Credentials = append(c.Credentials,
				Credential{Type: "credential", ID: "a"},
				Credential{Type: "credential", ID: "b", Provider: "azure"},
				Credential{Type: "credential", ID: "c", Provider: "local"})
		}, Problems{
			cr("[3].provider", "missing (known: aws, gce, openstack)"),
			cr("[4].provider", `"azure" is not a supported provider (known: aws, gce, openstack)`),
			withHint(cr("[5].provider", "local districts need no credential"), "remove this entry"),
		}},
		{"credential keys of other providers", func(c *Config) {
			c.Credentials[0].OSPassword = "hunter2"
			c.Credentials[1].GCEKeyFile = "key.json"
		}, Problems{
			cr("[0].os_password", `belongs to provider openstack, but credential "gce_default" is gce`),
			cr("[1].gce_key_file", `belongs to provider gce, but credential "aws_default" is aws`),
		}},
		{"credential pairs", func(c *Config) {
			c.Credentials[1].AWSAccessKeyID = ""
			c.Credentials[2].OSPassword = ""
			c.Credentials[2].OSApplicationCredentialSecret = "s"
			c.Credentials = append(c.Credentials, Credential{Type: "credential", ID: "tok", Provider: "aws", AWSSessionToken: "t"})
		}, Problems{
			cr("[1].aws_access_key_id", "missing (aws_secret_access_key is set)"),
			cr("[2].os_password", "missing (os_username is set)"),
			cr("[2].os_application_credential_id", "missing (os_application_credential_secret is set)"),
			cr("[3].aws_access_key_id", "missing (aws_session_token is set)"),
		}},

		{"credential state key", func(c *Config) {
			c.Credentials[0].StateKey = "hunter2hunter2"
			c.Credentials[1].StateKey = "AGE-SECRET-KEY-1QQQ"
		}, Problems{
			withHint(cr("[0].state_key", "not an age identity (AGE-SECRET-KEY-1…)"), "make one with `transit state keygen`"),
		}},

		// Across files: problems come in file order.
		{"several files", func(c *Config) {
			c.Credentials[0].Type = "x"
			c.Districts[0].Type = "x"
			c.Cluster.Type = "x"
		}, Problems{
			cl("type", `must be "cluster", got "x"`),
			ds("[0].type", `must be "district", got "x"`),
			cr("[0].type", `must be "credential", got "x"`),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := validConfig()
			tt.mutate(&cfg)
			err := Validate(cfg)
			var got Problems
			if err != nil {
				if !errors.Is(err, ErrInvalid) {
					t.Errorf("errors.Is(err, ErrInvalid) = false for %v", err)
				}
				if !errors.As(err, &got) {
					t.Fatalf("Validate error %T is not Problems", err)
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Validate problems (-want +got):\n%s", diff)
			}
		})
	}
}

func TestValidateLabelsAreBaseNames(t *testing.T) {
	t.Parallel()
	cfg := validConfig()
	cfg.Paths = Paths{Cluster: "/etc/transit/prod-cluster.json", Districts: "conf/d.json", Credentials: "/secrets/c.json"}
	cfg.Cluster.Type = ""
	cfg.Cluster.Deployments[0].District = "nowhere"
	cfg.Districts[0].Type = ""
	cfg.Credentials[0].Type = ""
	got := Validate(cfg).Error()
	want := strings.Join([]string{
		`prod-cluster.json: type: missing (must be "cluster")`,
		`prod-cluster.json: deployments[0].district: "nowhere" is not defined in d.json (known: gce-europe, aws-europe, os-lab, local-a, local-b)`,
		`d.json: [0].type: missing (must be "district")`,
		`c.json: [0].type: missing (must be "credential")`,
	}, "\n")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Validate(...).Error() (-want +got):\n%s", diff)
	}
}

func TestValidID(t *testing.T) {
	t.Parallel()
	for id, want := range map[string]bool{
		"gce-europe":            true,
		"a":                     true,
		"a1-2":                  true,
		strings.Repeat("a", 40): true,
		strings.Repeat("a", 41): false,
		"":                      false,
		"1abc":                  false,
		"-abc":                  false,
		"abc-":                  false,
		"Abc":                   false,
		"a_b":                   false,
		"a.b":                   false,
		"a b":                   false,
		"é":                     false,
	} {
		if got := ValidID(id); got != want {
			t.Errorf("ValidID(%q) = %v, want %v", id, got, want)
		}
	}
}

func TestValidateResources(t *testing.T) {
	t.Parallel()
	rs := func(path, msg string) Problem { return Problem{File: "resources.json", Path: path, Message: msg} }
	tests := []struct {
		name string
		r    Resources
		want Problems
	}{
		{"empty state", Resources{Type: "resources", Version: ResourcesVersion}, nil},
		{"valid state", Resources{Type: "resources", Version: 1, Cluster: "demo",
			Nodes: []Node{
				{Type: "node", ID: "n1", Cluster: "demo", Phase: PhaseJoined},
				{ID: "n2", Cluster: "demo", Phase: PhaseLaunched},
			},
			SecurityGroups: []SecurityGroup{{Type: "security_group", ID: "g1", Cluster: "demo"}},
		}, nil},
		{"type and version", Resources{Type: "cluster"}, Problems{
			rs("type", `must be "resources", got "cluster"`),
			rs("version", "missing (this transit writes version 2)"),
		}},
		{"newer version", Resources{Type: "resources", Version: 3}, Problems{
			withHint(rs("version", "written by a newer transit (version 3; this transit reads version 2)"), "upgrade transit"),
		}},
		{"nodes", Resources{Type: "resources", Version: 1, Cluster: "demo",
			Nodes: []Node{
				{Type: "machine", ID: "n1", Cluster: "demo"},
				{ID: "n1", Cluster: "other"},
				{Cluster: "demo", Phase: "dead"},
			},
			SecurityGroups: []SecurityGroup{
				{Type: "group", ID: "g1", Cluster: "demo"},
				{ID: "g1", Cluster: "other"},
				{Cluster: "demo"},
			},
		}, Problems{
			rs("nodes[0].type", `must be "node" or left out, got "machine"`),
			rs("nodes[1].id", `"n1" is listed twice (first at nodes[0])`),
			rs("nodes[1].cluster", `"other" does not match the state's cluster "demo"`),
			rs("nodes[2].id", "missing"),
			rs("nodes[2].phase", `"dead" is not a node phase (known: launched, joined, not-ready, cordoned, draining, drained, left, terminating, stopped, failed)`),
			rs("security_groups[0].type", `must be "security_group" or left out, got "group"`),
			rs("security_groups[1].id", `"g1" is listed twice (first at security_groups[0])`),
			rs("security_groups[1].cluster", `"other" does not match the state's cluster "demo"`),
			rs("security_groups[2].id", "missing"),
		}},
		{"nodes without a cluster", Resources{Type: "resources", Version: 1, Nodes: []Node{{ID: "n1"}}}, Problems{
			rs("cluster", "missing, but the state lists nodes or security groups"),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got Problems
			if err := ValidateResources(tt.r); err != nil && !errors.As(err, &got) {
				t.Fatalf("ValidateResources error %T is not Problems", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ValidateResources problems (-want +got):\n%s", diff)
			}
		})
	}
}

// An explicit 0 is kept; only unset fields get defaults.
func TestStrategyResolved(t *testing.T) {
	t.Parallel()
	tests := []struct {
		s              Strategy
		surge, unavail int
	}{
		{Strategy{}, DefaultMaxSurge, DefaultMaxUnavailable},
		{Strategy{MaxSurge: Int(0)}, 0, DefaultMaxUnavailable},
		{Strategy{MaxUnavailable: Int(0)}, DefaultMaxSurge, 0},
		{Strategy{MaxSurge: Int(3), MaxUnavailable: Int(2)}, 3, 2},
		{Strategy{MaxSurge: Int(0), MaxUnavailable: Int(0)}, 0, 1}, // refused by validation; never stalls
	}
	for _, tt := range tests {
		r := tt.s.Resolved()
		if r.MaxSurge != tt.surge || r.MaxUnavailable != tt.unavail {
			t.Errorf("%+v: surge %d unavailable %d, want %d %d", tt.s, r.MaxSurge, r.MaxUnavailable, tt.surge, tt.unavail)
		}
	}
}

// A district that holds nodes or a group may not be pointed elsewhere: its
// recorded identity must match districts.json.
func TestCheckStateDistrictsRefusesAMovedDistrict(t *testing.T) {
	t.Parallel()
	c := validConfig()
	state := Resources{Cluster: "demo",
		Nodes:     []Node{{ID: "demo-worker-1", District: "aws-europe"}},
		Districts: map[string]map[string]string{"aws-europe": c.Districts[1].Identity(), "gce-europe": c.Districts[0].Identity()}}
	if err := CheckStateDistricts(state, c.Districts, "resources.json"); err != nil {
		t.Fatalf("unchanged districts refused: %v", err)
	}
	// gce-europe holds nothing: it may change. aws-europe may not.
	c.Districts[0].GCEProjectID = "other"
	c.Districts[1].AWSRegion = "eu-west-1"
	c.Districts[1].AWSEndpoint = "http://127.0.0.1:9999"
	err := CheckStateDistricts(state, c.Districts, "resources.json")
	const hint = "to move nodes, add a new district with the new settings, move the quantities to it in cluster.json and apply (transit migrates), then set the old one's quantities to 0 and drop it once empty"
	want := Problems{
		withHint(ds("[1].aws_region", `district "aws-europe" has nodes or a group where aws_region is "eu-central-1" (resources.json), but districts.json now says "eu-west-1": refused before any action`), hint),
		withHint(ds("[1].aws_endpoint", `district "aws-europe" has nodes or a group where aws_endpoint is unset (resources.json), but districts.json now says "http://127.0.0.1:9999": refused before any action`), hint),
	}
	if diff := cmp.Diff(want, err); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("err %v does not match ErrInvalid", err)
	}
}
