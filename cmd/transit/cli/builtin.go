package cli

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/cloudtransit/transit/control"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/drivers/local"
	"github.com/cloudtransit/transit/platforms/ssh"
	"github.com/cloudtransit/transit/platforms/swarm"
)

// BuiltinInfrastructures are the infrastructure drivers compiled into
// transit, by provider name. TRANSIT_LOCAL_ROOT moves the local provider's
// records away from /var/lib/transit/local (the e2e tests use that).
func BuiltinInfrastructures() map[string]InfrastructureFunc {
	return map[string]InfrastructureFunc{
		districts.ProviderLocal: func(ctx context.Context, d districts.District, _ *districts.Credential) (control.Infrastructure, error) {
			return local.New(ctx, d, local.Options{Root: os.Getenv("TRANSIT_LOCAL_ROOT")})
		},
	}
}

// BuiltinPlatforms are the platform drivers compiled into transit, by
// platform name.
func BuiltinPlatforms() map[string]PlatformFunc {
	return map[string]PlatformFunc{
		"swarm": func(_ context.Context, c districts.Cluster, env PlatformEnv) (control.Platform, error) {
			cfg, err := sshConfig(env.Key, env.HostKeys)
			if err != nil {
				return nil, err
			}
			return swarm.New(c, swarm.Options{SSH: cfg, Clock: env.Clock, Logger: env.Logger}), nil
		},
	}
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
