package districts

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestValidateNetwork(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(*Config)
		want   Problems
	}{
		{"valid", func(c *Config) {
			c.Cluster.NetworkSettings = &Network{Mesh: "wireguard", MeshCIDR: "10.50.0.0/20", MeshPort: 51900}
		}, nil},
		{"defaults", func(c *Config) { c.Cluster.NetworkSettings = &Network{} }, nil},
		{"mesh unknown", func(c *Config) { c.Cluster.NetworkSettings = &Network{Mesh: "wiregard"} },
			Problems{withHint(cl("network.mesh", `"wiregard" is not a mesh (known: wireguard, none)`), `did you mean "wireguard"?`)}},
		{"port out of range", func(c *Config) { c.Cluster.NetworkSettings = &Network{MeshPort: 70000} },
			Problems{cl("network.mesh_port", "70000 is not a UDP port (1–65535)")}},
		{"range too small", func(c *Config) { c.Cluster.NetworkSettings = &Network{MeshCIDR: "10.50.0.0/28"} },
			Problems{cl("network.mesh_cidr", "prefix length /28 is not between /8 and /24")}},
		{"range over the pods", func(c *Config) { c.Cluster.NetworkSettings = &Network{MeshCIDR: "10.244.8.0/24"} },
			Problems{withHint(cl("network.mesh_cidr", "10.244.8.0/24 overlaps kubernetes.pod_cidr 10.244.0.0/16"), "pick a range no other network of the cluster uses")}},
		{"range over a local district", func(c *Config) { c.Cluster.NetworkSettings = &Network{MeshCIDR: "10.10.0.0/23"} },
			Problems{
				withHint(cl("network.mesh_cidr", `10.10.0.0/23 overlaps local_subnet 10.10.0.0/24 of district "local-a" in districts.json`), "pick a range no other network of the cluster uses"),
				withHint(cl("network.mesh_cidr", `10.10.0.0/23 overlaps local_subnet 10.10.1.0/28 of district "local-b" in districts.json`), "pick a range no other network of the cluster uses"),
			}},
		{"swarm on the mesh", func(c *Config) {
			c.Cluster.Platform, c.Cluster.Kubernetes = "swarm", nil
			c.Cluster.NetworkSettings = &Network{Mesh: MeshWireGuard}
		}, nil},
		// A Kubernetes cluster's ranges are not a swarm's.
		{"swarm on the mesh in the pods' range", func(c *Config) {
			c.Cluster.Platform, c.Cluster.Kubernetes = "swarm", nil
			c.Cluster.NetworkSettings = &Network{Mesh: MeshWireGuard, MeshCIDR: "10.244.8.0/24"}
		}, nil},
		{"swarm's mesh over its overlay networks", func(c *Config) {
			c.Cluster.Platform, c.Cluster.Kubernetes = "swarm", nil
			c.Cluster.NetworkSettings = &Network{Mesh: MeshWireGuard, MeshCIDR: "10.0.128.0/20"}
		}, Problems{withHint(cl("network.mesh_cidr", "10.0.128.0/20 overlaps 10.0.0.0/16, where Swarm's overlay networks take their first subnets (its default address pool is 10.0.0.0/8)"), "pick a range no other network of the cluster uses")}},
		{"key age in days", func(c *Config) { c.Cluster.NetworkSettings = &Network{KeyMaxAge: "7d"} }, nil},
		{"key age as a duration", func(c *Config) { c.Cluster.NetworkSettings = &Network{KeyMaxAge: "36h"} }, nil},
		{"key age never", func(c *Config) { c.Cluster.NetworkSettings = &Network{KeyMaxAge: "0"} }, nil},
		{"key age not an age", func(c *Config) { c.Cluster.NetworkSettings = &Network{KeyMaxAge: "a month"} },
			Problems{cl("network.key_max_age", `"a month" is not an age: write days ("30d") or a duration ("12h"), or "0" for never`)}},
		{"key age in bad days", func(c *Config) { c.Cluster.NetworkSettings = &Network{KeyMaxAge: "-3d"} },
			Problems{cl("network.key_max_age", `"-3d" is not a number of days (0–3650)`)}},
		{"key age too short", func(c *Config) { c.Cluster.NetworkSettings = &Network{KeyMaxAge: "10m"} },
			Problems{cl("network.key_max_age", `10m rotates keys too often (at least 1h; "0" never rotates by age)`)}},
		{"unknown type", func(c *Config) { c.Cluster.NetworkSettings = &Network{Type: "net"} },
			Problems{cl("network.type", `must be "network" or left out, got "net"`)}},
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

// TestKeyAge: the default is 30 days, days and durations read as such,
// "0" never rotates.
func TestKeyAge(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Duration{"": 30 * 24 * time.Hour, "7d": 7 * 24 * time.Hour, "36h": 36 * time.Hour, "0": 0} {
		if got := (Network{KeyMaxAge: in}).Resolved("kubernetes", nil).KeyAge(); got != want {
			t.Errorf("key_max_age %q: %s, want %s", in, got, want)
		}
	}
}

// TestMeshDefault: the mesh is on by default exactly when a Kubernetes
// cluster's districts are in more than one cloud network; a setting wins.
func TestMeshDefault(t *testing.T) {
	t.Parallel()
	cfg := validConfig()
	ds := cfg.Districts
	only := func(ids ...string) Cluster {
		c := cfg.Cluster
		c.Platform = "kubernetes"
		c.Deployments = nil
		for _, id := range ids {
			c.Deployments = append(c.Deployments, Deployment{District: id, Flavor: "small", Role: "worker", Quantity: 1})
		}
		return c
	}
	awsOther := District{ID: "aws-us", Provider: ProviderAWS, AWSRegion: "us-east-1"}
	awsSame := District{ID: "aws-eu-2", Provider: ProviderAWS, AWSRegion: "eu-central-1"}
	ds = append(ds, awsOther, awsSame)
	for _, tc := range []struct {
		c    Cluster
		want string
	}{
		{only("local-a", "local-b"), MeshNone},
		{only("aws-europe"), MeshNone},
		{only("aws-europe", "aws-eu-2"), MeshNone},
		{only("aws-europe", "aws-us"), MeshWireGuard},
		{only("aws-europe", "gce-europe"), MeshWireGuard},
		{only("local-a", "os-lab"), MeshWireGuard},
	} {
		var ids []string
		for _, d := range tc.c.Deployments {
			ids = append(ids, d.District)
		}
		if got := tc.c.Network(ds); got.Mesh != tc.want || got.MeshCIDR != DefaultMeshCIDR || got.MeshPort != DefaultMeshPort {
			t.Errorf("districts %v: %+v, want mesh %s and the default range and port", ids, got, tc.want)
		}
	}
	c := only("aws-europe", "gce-europe")
	c.Platform = "swarm"
	if got := c.Network(ds).Mesh; got != MeshNone {
		t.Errorf("a swarm across clouds got mesh %s by default", got)
	}
	c.Platform = "kubernetes"
	c.NetworkSettings = &Network{Mesh: MeshNone}
	if got := c.Network(ds).Mesh; got != MeshNone {
		t.Errorf("mesh none across clouds became %s", got)
	}
}

func TestMeshAddress(t *testing.T) {
	t.Parallel()
	var used []string
	for i := range 3 {
		a, err := MeshAddress("10.213.0.0/30", used)
		if i == 2 {
			if err == nil {
				t.Fatalf("a /30 gave a third address %s (network and broadcast must stay free)", a)
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("10.213.0.%d", i+1); a != want {
			t.Errorf("address %d: %s, want %s", i, a, want)
		}
		used = append(used, a)
	}
	// A freed address is handed out again, the others are kept.
	if a, _ := MeshAddress("10.213.0.0/24", []string{"10.213.0.2"}); a != "10.213.0.1" {
		t.Errorf("with .2 taken: %s, want .1", a)
	}
}
