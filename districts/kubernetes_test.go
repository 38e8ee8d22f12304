package districts

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// kubernetesConfig is validConfig as a Kubernetes cluster with tags that
// are valid labels.
func kubernetesConfig() Config {
	c := validConfig()
	c.Cluster.Platform = "kubernetes"
	c.Cluster.Deployments[0].Tags = map[string]string{"location": "Europe", "example.com/tier": "front-end_1", "empty": ""}
	return c
}

func TestValidateKubernetes(t *testing.T) {
	t.Parallel()
	const valueHint = `use up to 63 letters, digits, "-", "_" or ".", starting and ending with a letter or digit (or an empty value)`
	tag := func(key string) string { return joinKey("deployments[0].tags", key) }
	tests := []struct {
		name   string
		mutate func(*Config)
		want   Problems
	}{
		{"valid", func(*Config) {}, nil},
		{"settings valid", func(c *Config) {
			c.Cluster.Kubernetes = &Kubernetes{PodCIDR: "10.200.0.0/16", ServiceCIDR: "10.201.0.0/20", ControlPlaneEndpoint: "k8s.example.com:6443"}
			c.Districts[3].KubernetesInstall = "packages"
		}, nil},
		{"label value with a space", func(c *Config) { c.Cluster.Deployments[0].Tags["location"] = "Île de France" },
			Problems{withHint(cl(tag("location"), `value "Île de France" is not a valid Kubernetes label value`), valueHint)}},
		{"label value too long", func(c *Config) { c.Cluster.Deployments[0].Tags["location"] = strings.Repeat("a", 64) },
			Problems{withHint(cl(tag("location"), `value "`+strings.Repeat("a", 64)+`" is not a valid Kubernetes label value`), valueHint)}},
		{"label key with two slashes", func(c *Config) { c.Cluster.Deployments[0].Tags["a/b/c"] = "x" },
			Problems{cl(tag("a/b/c"), `"a/b/c" is not a valid Kubernetes label key: at most one "/" (prefix/name)`)}},
		{"label key prefix not a DNS name", func(c *Config) { c.Cluster.Deployments[0].Tags["Example.COM/x"] = "x" },
			Problems{cl(tag("Example.COM/x"), `"Example.COM/x" is not a valid Kubernetes label key: the prefix must be a DNS subdomain (lower-case letters, digits, "-" and ".", up to 253 characters)`)}},
		{"label key in Kubernetes' namespace", func(c *Config) { c.Cluster.Deployments[0].Tags["node-role.kubernetes.io/gpu"] = "" },
			Problems{cl(tag("node-role.kubernetes.io/gpu"), `"node-role.kubernetes.io/gpu" is not a valid Kubernetes label key: the kubernetes.io prefix belongs to Kubernetes (transit sets node-role.kubernetes.io/<role> itself)`)}},
		{"addon settings valid", func(c *Config) {
			c.Cluster.Addons = []Addon{{Name: "relations", Settings: map[string]string{"replicas": "2", "workers": "8", "history": "10", "api_qps": "50"}}}
		}, nil},
		{"addon settings unknown or out of bounds", func(c *Config) {
			c.Cluster.Addons = []Addon{{Name: "relations", Settings: map[string]string{"worker": "8", "history": "0", "api_qps": "fast"}}}
		}, Problems{
			cl("addons[0].settings.api_qps", `"fast" is not a whole number from 5 to 1000`),
			cl("addons[0].settings.history", `"0" is not a whole number from 1 to 100`),
			withHint(cl("addons[0].settings.worker", `addon relations has no setting "worker" (settings: api_qps, history, replicas, workers)`), `did you mean "workers"?`),
		}},
		{"streams settings valid", func(c *Config) {
			c.Cluster.Addons = []Addon{{Name: "streams", Settings: map[string]string{"replicas": "3", "history": "100", "upgrade_timeout": "90s", "broker_data_dir": "/srv/kafka"}}}
		}, nil},
		{"streams with a Kafka of its own", func(c *Config) {
			c.Cluster.Addons = []Addon{{Name: "streams", Settings: map[string]string{"bootstrap": "kafka-0.kafka.svc:9092,10.0.0.7:9093,[fd00::1]:9092,Kafka.Example.com:19092",
				"kafka_secret": "kafka-client"}}}
		}, nil},
		{"streams Kafka Secret without a Kafka, or misnamed", func(c *Config) {
			c.Cluster.Addons = []Addon{{Name: "streams", Settings: map[string]string{"kafka_secret": "Kafka Client"}}}
		}, Problems{
			withHint(cl("addons[0].settings.kafka_secret", `"Kafka Client" is not a Secret's name`), `write a DNS subdomain name such as "kafka-client": lower case letters, digits, '-' and '.'`),
			withHint(cl("addons[0].settings.kafka_secret", "has no effect without bootstrap"), "set bootstrap too, or remove kafka_secret"),
		}},
		{"streams settings wrong", func(c *Config) {
			c.Cluster.Addons = []Addon{{Name: "streams", Settings: map[string]string{
				"replicas": "0", "history": "101", "upgrade_timeout": "5 minutes", "broker_data_dir": "data/broker", "bootstrp": "kafka:9092"}}}
		}, Problems{
			withHint(cl("addons[0].settings.bootstrp", `addon streams has no setting "bootstrp" (settings: bootstrap, broker_data_dir, history, kafka_secret, replicas, upgrade_timeout)`), `did you mean "bootstrap"?`),
			withHint(cl("addons[0].settings.broker_data_dir", `"data/broker" is not an absolute path`), `write an absolute path on the master, such as "/var/lib/transit/streams-broker"`),
			cl("addons[0].settings.history", `"101" is not a whole number from 1 to 100`),
			cl("addons[0].settings.replicas", `"0" is not a whole number from 1 to 10`),
			withHint(cl("addons[0].settings.upgrade_timeout", `"5 minutes" is not a duration from 10s to 1h`), `write a Go duration such as "5m" or "90s"`),
		}},
		{"streams broker directory beside a Kafka of its own", func(c *Config) {
			c.Cluster.Addons = []Addon{{Name: "streams", Settings: map[string]string{"bootstrap": "kafka:9092", "broker_data_dir": "/srv/kafka"}}}
		}, Problems{withHint(cl("addons[0].settings.broker_data_dir", "has no effect while bootstrap is set"), "remove broker_data_dir, or bootstrap")}},
		{"labels not checked for swarm", func(c *Config) {
			c.Cluster.Platform = "swarm"
			c.Cluster.Deployments[0].Tags["location"] = "Île de France"
		}, nil},
		{"settings for swarm", func(c *Config) {
			c.Cluster.Platform = "swarm"
			c.Cluster.Kubernetes = &Kubernetes{}
		}, Problems{withHint(cl("kubernetes", `only for platform kubernetes, not "swarm"`), "remove it")}},
		{"pod range too small", func(c *Config) { c.Cluster.Kubernetes = &Kubernetes{PodCIDR: "10.200.0.0/24"} },
			Problems{cl("kubernetes.pod_cidr", "prefix length /24 is not between /8 and /22")}},
		{"service range too wide", func(c *Config) { c.Cluster.Kubernetes = &Kubernetes{ServiceCIDR: "10.0.0.0/8"} },
			Problems{cl("kubernetes.service_cidr", "prefix length /8 is not between /12 and /28")}},
		{"ranges overlap", func(c *Config) { c.Cluster.Kubernetes = &Kubernetes{ServiceCIDR: "10.244.16.0/20"} },
			Problems{cl("kubernetes.service_cidr", "10.244.16.0/20 overlaps pod_cidr 10.244.0.0/16")}},
		{"range not IPv4", func(c *Config) { c.Cluster.Kubernetes = &Kubernetes{PodCIDR: "fd00::/48"} },
			Problems{cl("kubernetes.pod_cidr", `"fd00::/48" is not an IPv4 CIDR`)}},
		{"range with host bits", func(c *Config) { c.Cluster.Kubernetes = &Kubernetes{PodCIDR: "10.200.1.0/16"} },
			Problems{withHint(cl("kubernetes.pod_cidr", `"10.200.1.0/16" has host bits set`), `did you mean "10.200.0.0/16"?`)}},
		{"pod range over a local district", func(c *Config) { c.Cluster.Kubernetes = &Kubernetes{PodCIDR: "10.10.0.0/16"} },
			Problems{
				withHint(cl("kubernetes.pod_cidr", `10.10.0.0/16 overlaps local_subnet 10.10.0.0/24 of district "local-a" in districts.json`), "pick ranges the nodes' own addresses are not in"),
				withHint(cl("kubernetes.pod_cidr", `10.10.0.0/16 overlaps local_subnet 10.10.1.0/28 of district "local-b" in districts.json`), "pick ranges the nodes' own addresses are not in"),
			}},
		{"endpoint is a URL", func(c *Config) { c.Cluster.Kubernetes = &Kubernetes{ControlPlaneEndpoint: "https://k8s:6443"} },
			Problems{withHint(cl("kubernetes.control_plane_endpoint", `"https://k8s:6443" is not a host or host:port`), `e.g. "k8s.example.com:6443"`)}},
		{"pod network unknown", func(c *Config) { c.Cluster.Kubernetes = &Kubernetes{PodNetwork: "wireguad"} },
			Problems{withHint(cl("kubernetes.pod_network", `"wireguad" is not a pod network (known: vxlan, wireguard)`), `did you mean "wireguard"?`)}},
		{"a bundle for transit's own images beside packages", func(c *Config) {
			c.Districts[3].KubernetesInstall = InstallPackages
			c.Districts[3].KubernetesBundle = "build/bundle"
		}, nil},
		{"install mode unknown", func(c *Config) { c.Districts[3].KubernetesInstall = "bundel" },
			Problems{withHint(ds("[3].kubernetes_install", `"bundel" is not an install mode (known: bundle, packages)`), `did you mean "bundle"?`)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := kubernetesConfig()
			tt.mutate(&cfg)
			var got Problems
			if err := Validate(cfg); err != nil && !errors.As(err, &got) {
				t.Fatalf("Validate error %T is not Problems", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Validate problems (-want +got):\n%s", diff)
			}
		})
	}
}

func TestKubernetesDefaults(t *testing.T) {
	t.Parallel()
	if r := (Kubernetes{}).Resolved(); r.PodCIDR != DefaultPodCIDR || r.ServiceCIDR != DefaultServiceCIDR || r.PodNetwork != PodNetworkVXLAN {
		t.Errorf("Resolved() = %+v, want the defaults", r)
	}
	if r := (Kubernetes{PodCIDR: "10.1.0.0/16"}).Resolved(); r.PodCIDR != "10.1.0.0/16" {
		t.Errorf("Resolved() replaced a set pod_cidr: %+v", r)
	}
	for _, tc := range []struct {
		d    District
		want string
	}{
		{District{Provider: ProviderLocal}, InstallBundle},
		{District{Provider: ProviderAWS}, InstallPackages},
		{District{Provider: ProviderGCE, KubernetesInstall: InstallBundle}, InstallBundle},
	} {
		if got := tc.d.Install(); got != tc.want {
			t.Errorf("%+v.Install() = %q, want %q", tc.d, got, tc.want)
		}
	}
}

// TestStreamsSettingValues: every malformed value of the streams addon's
// string and duration settings is refused naming its path and saying
// what to write.
func TestStreamsSettingValues(t *testing.T) {
	t.Parallel()
	const listHint = `write host:port, comma separated, such as "kafka-0.kafka:9092,kafka-1.kafka:9092"`
	const pathHint = `write an absolute path on the master, such as "/var/lib/transit/streams-broker"`
	tests := []struct {
		key, value    string
		message, hint string
	}{
		{"bootstrap", "", "empty", "leave it out to run the development broker, or " + listHint},
		{"bootstrap", "kafka", `"kafka" is not a Kafka broker list: "kafka" is not host:port`, listHint},
		{"bootstrap", "kafka:9092,", `"kafka:9092," is not a Kafka broker list: "" is empty`, listHint},
		{"bootstrap", "kafka:9092, kafka-1:9092", `"kafka:9092, kafka-1:9092" is not a Kafka broker list: " kafka-1:9092" holds a space or a control character`, listHint},
		{"bootstrap", "kafka:0", `"kafka:0" is not a Kafka broker list: "kafka:0" has port "0", not a number from 1 to 65535`, listHint},
		{"bootstrap", "kafka:http", `"kafka:http" is not a Kafka broker list: "kafka:http" has port "http", not a number from 1 to 65535`, listHint},
		{"bootstrap", "kaf_ka:9092", `"kaf_ka:9092" is not a Kafka broker list: "kaf_ka:9092" has host "kaf_ka", neither a DNS name nor an IP address`, listHint},
		{"bootstrap", ":9092", `":9092" is not a Kafka broker list: ":9092" has host "", neither a DNS name nor an IP address`, listHint},
		{"bootstrap", "kafka://broker:9092", `"kafka://broker:9092" is not a Kafka broker list: "kafka://broker:9092" is not host:port`, listHint},
		{"upgrade_timeout", "5s", `"5s" is not a duration from 10s to 1h`, `write a Go duration such as "5m" or "90s"`},
		{"upgrade_timeout", "2h", `"2h" is not a duration from 10s to 1h`, `write a Go duration such as "5m" or "90s"`},
		{"upgrade_timeout", "300", `"300" is not a duration from 10s to 1h`, `write a Go duration such as "5m" or "90s"`},
		{"broker_data_dir", "", `"" is not an absolute path`, pathHint},
		{"broker_data_dir", "/", `"/" is the master's root directory`, `give the broker a directory of its own, such as "/var/lib/transit/streams-broker"`},
		{"broker_data_dir", "/var/lib/../srv/kafka/", `"/var/lib/../srv/kafka/" is not a clean path`, `did you mean "/var/srv/kafka"?`},
		{"broker_data_dir", "/srv/kafka\n", `"/srv/kafka\n" holds a control character`, pathHint},
		{"replicas", "two", `"two" is not a whole number from 1 to 10`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.key+"="+tt.value, func(t *testing.T) {
			t.Parallel()
			cfg := kubernetesConfig()
			cfg.Cluster.Addons = []Addon{{Name: "relations"}, {Name: "streams", Settings: map[string]string{tt.key: tt.value}}}
			var got Problems
			if err := Validate(cfg); err != nil && !errors.As(err, &got) {
				t.Fatalf("Validate error %T is not Problems", err)
			}
			want := Problems{withHint(cl("addons[1].settings."+tt.key, tt.message), tt.hint)}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Validate problems (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAddonSettingDefaults(t *testing.T) {
	t.Parallel()
	a := Addon{Name: "streams", Settings: map[string]string{"replicas": "3"}}
	for key, want := range map[string]string{"replicas": "3", "history": "10", "upgrade_timeout": "5m",
		"broker_data_dir": "/var/lib/transit/streams-broker", "bootstrap": "", "unknown": ""} {
		if got := a.Setting(key); got != want {
			t.Errorf("Setting(%q) = %q, want %q", key, got, want)
		}
	}
	// Every default is a value its setting takes.
	for addon, settings := range AddonSettings {
		for key, s := range settings {
			if s.Default == "" {
				continue
			}
			if problem, _ := s.Check(s.Default); problem != "" {
				t.Errorf("addon %s: the default of %s: %s", addon, key, problem)
			}
		}
	}
}
