package transit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"

	"github.com/cloudtransit/transit/clock"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/platforms/ssh"
	"github.com/cloudtransit/transit/provider"
)

// InfrastructureFunc builds the infrastructure driver for one district. cred
// is the district's entry of credentials.json, nil when it names none (the
// driver then uses its ecosystem's usual sources).
type InfrastructureFunc func(ctx context.Context, d districts.District, cred *districts.Credential) (provider.Infrastructure, error)

// PlatformFunc builds the platform driver for a cluster. A driver that
// holds connections may be an io.Closer: Session.Close closes it.
type PlatformFunc func(ctx context.Context, c districts.Cluster, env PlatformEnv) (provider.Platform, error)

// PlatformEnv is what a platform driver gets from the session.
type PlatformEnv struct {
	// StateDir is the directory of resources.json, where a driver may
	// keep what it needs to reach the platform (host keys, kubeconfig).
	StateDir string
	// Districts are the cluster's districts, and DistrictsFile the file
	// they came from (paths in it are relative to its directory).
	Districts     []districts.District
	DistrictsFile string
	// Changes says the session may change the cluster (Change access): a
	// driver checks then what installing needs.
	Changes bool
	// Key is the cluster's SSH key and HostKeys its nodes' pinned host
	// keys, both read once per session.
	Key      *ssh.Key
	HostKeys *ssh.HostKeys
	Clock    clock.Clock
	Logger   *slog.Logger
}

// Drivers is the explicit registry a session builds its drivers from: no
// driver registers itself.
type Drivers struct {
	// Infrastructures maps a provider name ("aws", "gce", "openstack",
	// "local") to its driver constructor.
	Infrastructures map[string]InfrastructureFunc
	// Platforms maps a platform name ("kubernetes", "swarm") to its
	// driver constructor.
	Platforms map[string]PlatformFunc
	// PriceLists maps a provider name to its official price list, for
	// AskPrices (transit prices); a provider without one is priced in
	// districts.json by hand.
	PriceLists map[string]PriceListFunc
}

// infrastructures builds every district's driver, reporting every district
// that has none at once.
func (r Drivers) infrastructures(ctx context.Context, cfg districts.Config) (map[string]provider.Infrastructure, error) {
	infra := make(map[string]provider.Infrastructure, len(cfg.Districts))
	var errs []error
	for _, d := range cfg.Districts {
		newInfra, ok := r.Infrastructures[d.Provider]
		if !ok || newInfra == nil {
			errs = append(errs, fmt.Errorf("district %q: no infrastructure driver for provider %q in this build (available: %s)",
				d.ID, d.Provider, available(r.Infrastructures)))
			continue
		}
		drv, err := newInfra(ctx, d, credential(cfg.Credentials, d.CredentialID))
		if err != nil {
			errs = append(errs, fmt.Errorf("district %q: %s driver: %w", d.ID, d.Provider, err))
			continue
		}
		infra[d.ID] = drv
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return infra, nil
}

// platform builds the cluster's platform driver.
func (r Drivers) platform(ctx context.Context, c districts.Cluster, env PlatformEnv) (provider.Platform, error) {
	newPlatform, ok := r.Platforms[c.Platform]
	if !ok || newPlatform == nil {
		return nil, fmt.Errorf("cluster %q: no platform driver for %q in this build (available: %s)",
			c.ID, c.Platform, available(r.Platforms))
	}
	p, err := newPlatform(ctx, c, env)
	if err != nil {
		return nil, fmt.Errorf("cluster %q: %s platform driver: %w", c.ID, c.Platform, err)
	}
	return p, nil
}

func credential(creds []districts.Credential, id string) *districts.Credential {
	if id == "" {
		return nil
	}
	for i := range creds {
		if creds[i].ID == id {
			return &creds[i]
		}
	}
	return nil
}

func available[F any](m map[string]F) string {
	names := slices.Sorted(maps.Keys(m))
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
