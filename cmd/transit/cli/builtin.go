package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cloudtransit/transit/bundle"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/drivers/aws"
	"github.com/cloudtransit/transit/drivers/gce"
	"github.com/cloudtransit/transit/drivers/local"
	"github.com/cloudtransit/transit/drivers/openstack"
	"github.com/cloudtransit/transit/platforms/kubernetes"
	"github.com/cloudtransit/transit/platforms/ssh"
	"github.com/cloudtransit/transit/platforms/swarm"
	"github.com/cloudtransit/transit/provider"
)

// BuiltinInfrastructures are the infrastructure drivers compiled into
// transit, by provider name. TRANSIT_LOCAL_ROOT moves the local provider's
// records away from /var/lib/transit/local (the e2e tests use that).
func BuiltinInfrastructures() map[string]InfrastructureFunc {
	return map[string]InfrastructureFunc{
		districts.ProviderLocal: func(ctx context.Context, d districts.District, _ *districts.Credential) (provider.Infrastructure, error) {
			return local.New(ctx, d, local.Options{Root: os.Getenv("TRANSIT_LOCAL_ROOT")})
		},
		districts.ProviderAWS: func(ctx context.Context, d districts.District, cred *districts.Credential) (provider.Infrastructure, error) {
			poll, err := pollInterval()
			if err != nil {
				return nil, err
			}
			return aws.New(ctx, d, cred, aws.Options{PollInterval: poll, PollMaxInterval: poll})
		},
		districts.ProviderGCE: func(ctx context.Context, d districts.District, cred *districts.Credential) (provider.Infrastructure, error) {
			poll, err := pollInterval()
			if err != nil {
				return nil, err
			}
			return gce.New(ctx, d, cred, gce.Options{PollInterval: poll, PollMaxInterval: poll})
		},
		districts.ProviderOpenStack: func(ctx context.Context, d districts.District, cred *districts.Credential) (provider.Infrastructure, error) {
			poll, err := pollInterval()
			if err != nil {
				return nil, err
			}
			return openstack.New(ctx, d, cred, openstack.Options{PollInterval: poll, PollMaxInterval: poll})
		},
	}
}

// pollInterval is TRANSIT_POLL_INTERVAL: how often transit re-asks a cloud
// about a machine it waits for, and the loop re-observes while it waits
// (unset: each driver's own pace and the loop's 2s). An emulated cloud
// with scaled latencies wants it short.
func pollInterval() (time.Duration, error) {
	v := os.Getenv("TRANSIT_POLL_INTERVAL")
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("TRANSIT_POLL_INTERVAL=%q: want a positive duration such as 500ms", v)
	}
	return d, nil
}

// BuiltinPlatforms are the platform drivers compiled into transit, by
// platform name.
func BuiltinPlatforms() map[string]PlatformFunc {
	return map[string]PlatformFunc{
		"swarm": func(_ context.Context, c districts.Cluster, env PlatformEnv) (provider.Platform, error) {
			cfg, err := sshConfig(env.Key, env.HostKeys)
			if err != nil {
				return nil, err
			}
			return swarm.New(c, swarm.Options{SSH: cfg, Clock: env.Clock, Logger: env.Logger}), nil
		},
		"kubernetes": func(_ context.Context, c districts.Cluster, env PlatformEnv) (provider.Platform, error) {
			cfg, err := sshConfig(env.Key, env.HostKeys)
			if err != nil {
				return nil, err
			}
			install, bundles, err := kubernetesInstall(env)
			if err != nil {
				return nil, err
			}
			return kubernetes.New(c, kubernetes.Options{SSH: cfg, StateDir: env.StateDir, Install: install, Bundles: bundles,
				Clock: env.Clock, Logger: env.Logger}), nil
		},
	}
}

// kubernetesInstall says how each district installs Kubernetes, and
// where the bundle of each bundle district is: its kubernetes_bundle
// (relative to districts.json), else $TRANSIT_BUNDLE. For a command that
// may change the cluster, a missing bundle is found here, before any
// machine is launched.
func kubernetesInstall(env PlatformEnv) (install, bundles map[string]string, err error) {
	install, bundles = map[string]string{}, map[string]string{}
	for _, d := range env.Districts {
		install[d.ID] = d.Install()
		if d.Install() != districts.InstallBundle {
			continue
		}
		dir := d.KubernetesBundle
		switch {
		case dir == "":
			dir = os.Getenv("TRANSIT_BUNDLE")
			if dir == "" && !env.Changes {
				continue
			}
			if dir == "" {
				return nil, nil, fmt.Errorf("district %s installs Kubernetes from a bundle: set kubernetes_bundle in %s (or TRANSIT_BUNDLE) to the directory `make bundle` wrote", d.ID, env.DistrictsFile)
			}
		case !filepath.IsAbs(dir):
			dir = filepath.Join(filepath.Dir(env.DistrictsFile), dir)
		}
		if _, err := bundle.Read(dir); err != nil && env.Changes {
			return nil, nil, fmt.Errorf("district %s: %w", d.ID, err)
		}
		bundles[d.ID] = dir
	}
	return install, bundles, nil
}

// sshConfig is how platform drivers reach the cluster's nodes: the cluster
// key and the pinned host keys. TRANSIT_SSH_TIMEOUT
// bounds the wait for a node that does not answer (default 2m).
func sshConfig(key *ssh.Key, hosts *ssh.HostKeys) (ssh.Config, error) {
	cfg := ssh.Config{Signer: key.Signer, HostKeys: hosts}
	if v := os.Getenv("TRANSIT_SSH_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return ssh.Config{}, fmt.Errorf("TRANSIT_SSH_TIMEOUT=%q: want a positive duration such as 30s", v)
		}
		cfg.WaitTimeout = d
	}
	return cfg, nil
}
