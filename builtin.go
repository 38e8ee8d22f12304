package transit

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/cloudtransit/transit/bundle"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/drivers/aws"
	"github.com/cloudtransit/transit/drivers/cloudutil"
	"github.com/cloudtransit/transit/drivers/gce"
	"github.com/cloudtransit/transit/drivers/local"
	"github.com/cloudtransit/transit/drivers/openstack"
	"github.com/cloudtransit/transit/platforms/kubernetes"
	"github.com/cloudtransit/transit/platforms/ssh"
	"github.com/cloudtransit/transit/platforms/swarm"
	"github.com/cloudtransit/transit/provider"
	"github.com/cloudtransit/transit/statestore"
	"github.com/cloudtransit/transit/statestore/s3store"
)

// BuiltinOptions tune transit's own drivers. The transit command takes them
// from the environment (TRANSIT_LOCAL_ROOT, TRANSIT_POLL_INTERVAL,
// TRANSIT_SSH_TIMEOUT, TRANSIT_BUNDLE, TRANSIT_MESH_BINARY); the zero
// value is each driver's default.
type BuiltinOptions struct {
	// LocalRoot is where the local provider keeps its records (default
	// /var/lib/transit/local).
	LocalRoot string
	// PollInterval is how often a cloud driver re-asks about a machine it
	// waits for (default: each driver's own pace). An emulated cloud with
	// scaled latencies wants it short.
	PollInterval time.Duration
	// SSHTimeout bounds how long a platform driver waits for a node that
	// does not answer SSH (default 2m).
	SSHTimeout time.Duration
	// Bundle is the offline Kubernetes bundle of the districts that
	// install from one and name none (kubernetes_bundle).
	Bundle string
	// MeshBinary is the transit-mesh a Swarm on the node mesh sends to
	// its nodes (TRANSIT_MESH_BINARY); default the one beside the running
	// executable, else a bundle's (see swarmMeshBinary).
	MeshBinary string
}

// BuiltinDrivers are the drivers compiled into transit: the aws, gce,
// openstack and local providers, the swarm and kubernetes platforms, and
// the AWS Price List and GCE's Cloud Billing Catalog (transit prices).
func BuiltinDrivers(o BuiltinOptions) Drivers {
	return Drivers{
		Infrastructures: map[string]InfrastructureFunc{
			districts.ProviderLocal: func(ctx context.Context, d districts.District, _ *districts.Credential) (provider.Infrastructure, error) {
				return local.New(ctx, d, local.Options{Root: o.LocalRoot})
			},
			districts.ProviderAWS: func(ctx context.Context, d districts.District, cred *districts.Credential) (provider.Infrastructure, error) {
				return aws.New(ctx, d, cred, aws.Options{Waits: cloudutil.Waits{PollInterval: o.PollInterval, PollMaxInterval: o.PollInterval}})
			},
			districts.ProviderGCE: func(ctx context.Context, d districts.District, cred *districts.Credential) (provider.Infrastructure, error) {
				return gce.New(ctx, d, cred, gce.Options{Waits: cloudutil.Waits{PollInterval: o.PollInterval, PollMaxInterval: o.PollInterval}})
			},
			districts.ProviderOpenStack: func(ctx context.Context, d districts.District, cred *districts.Credential) (provider.Infrastructure, error) {
				return openstack.New(ctx, d, cred, openstack.Options{Waits: cloudutil.Waits{PollInterval: o.PollInterval, PollMaxInterval: o.PollInterval}})
			},
		},
		PriceLists: map[string]PriceListFunc{
			districts.ProviderAWS: func(ctx context.Context, d districts.District, cred *districts.Credential, types []string) ([]provider.Quote, error) {
				return aws.Prices(ctx, d, cred, types, aws.Options{})
			},
			districts.ProviderGCE: func(ctx context.Context, d districts.District, cred *districts.Credential, types []string) ([]provider.Quote, error) {
				return gce.Prices(ctx, d, cred, types, gce.Options{})
			},
		},
		Platforms: map[string]PlatformFunc{
			"swarm": func(_ context.Context, c districts.Cluster, env PlatformEnv) (provider.Platform, error) {
				return swarm.New(c, swarm.Options{SSH: o.sshConfig(env), Clock: env.Clock, Logger: env.Logger,
					MeshBinary: o.swarmMeshBinary(env), MeshHint: swarmMeshHint}), nil
			},
			"kubernetes": func(_ context.Context, c districts.Cluster, env PlatformEnv) (provider.Platform, error) {
				install, bundles, err := kubernetesInstall(env, o.Bundle)
				if err != nil {
					return nil, err
				}
				return kubernetes.New(c, kubernetes.Options{SSH: o.sshConfig(env), StateDir: env.StateDir, Install: install, Bundles: bundles,
					Clock: env.Clock, Logger: env.Logger}), nil
			},
		},
	}
}

// swarmMeshBinary is the transit-mesh a Swarm on the node mesh sends to
// its nodes (a Swarm node has no bundle): MeshBinary if set, else the
// first there of transit-mesh beside the running executable (`make build`
// puts bin/transit-mesh beside bin/transit), bin/transit-mesh of the
// default bundle and of each district's kubernetes_bundle; "" when none
// is. The driver reads it only for a node that joins the mesh.
func (o BuiltinOptions) swarmMeshBinary(env PlatformEnv) string {
	if o.MeshBinary != "" {
		return o.MeshBinary
	}
	var candidates []string
	if exe, err := os.Executable(); err == nil {
		candidates = append(candidates, filepath.Join(filepath.Dir(exe), "transit-mesh"))
	}
	bundles := []string{o.Bundle}
	for _, d := range env.Districts {
		dir := d.KubernetesBundle
		if dir != "" && !filepath.IsAbs(dir) {
			dir = filepath.Join(filepath.Dir(env.DistrictsFile), dir)
		}
		bundles = append(bundles, dir)
	}
	for _, dir := range bundles {
		if dir != "" {
			candidates = append(candidates, filepath.Join(dir, "bin", "transit-mesh"))
		}
	}
	for _, c := range candidates {
		if fi, err := os.Stat(c); err == nil && fi.Mode().IsRegular() {
			return c
		}
	}
	return ""
}

// swarmMeshHint says how to give the Swarm driver a transit-mesh.
const swarmMeshHint = "put transit-mesh beside the transit executable (`make build` builds bin/transit-mesh), or set TRANSIT_MESH_BINARY to a transit-mesh built for the nodes (GOOS=linux go build ./cmd/transit-mesh)"

// sshConfig is how platform drivers reach the cluster's nodes: the cluster
// key and the pinned host keys.
func (o BuiltinOptions) sshConfig(env PlatformEnv) ssh.Config {
	cfg := ssh.Config{HostKeys: env.HostKeys, WaitTimeout: o.SSHTimeout}
	if env.Key != nil {
		cfg.Signer = env.Key.Signer
	}
	return cfg
}

// kubernetesInstall says how each district installs Kubernetes, and
// where the bundle of each district is: its kubernetes_bundle (relative
// to districts.json), else defaultBundle. A bundle district uploads all
// of it; a packages district only transit's own images, and needs none
// (an addon that runs one then says so). For a session that may change
// the cluster, a missing bundle of a bundle district is found here,
// before any machine is launched.
func kubernetesInstall(env PlatformEnv, defaultBundle string) (install, bundles map[string]string, err error) {
	install, bundles = map[string]string{}, map[string]string{}
	for _, d := range env.Districts {
		install[d.ID] = d.Install()
		needed := d.Install() == districts.InstallBundle
		dir := d.KubernetesBundle
		switch {
		case dir == "":
			dir = defaultBundle
			if dir == "" && (!env.Changes || !needed) {
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

// BuiltinStores are the remote state stores compiled into transit: s3://
// for any S3-compatible service. The URL's credential_id names the entry
// of credentials.json whose aws_access_key_id and aws_secret_access_key
// (or aws_profile) reach the bucket; without one the SDK's default chain
// (AWS_ACCESS_KEY_ID…, shared files, an instance role) does.
func BuiltinStores() map[string]StoreFunc {
	return map[string]StoreFunc{
		"s3": func(ctx context.Context, u *url.URL, env StoreEnv) (statestore.Store, error) {
			o := s3store.Options{Logger: env.Logger}
			if id := u.Query().Get("credential_id"); id != "" {
				c := credential(env.Credentials, id)
				if c == nil {
					return nil, fmt.Errorf("credential_id %q: credentials.json has no credential with that id", id)
				}
				o.AccessKeyID, o.SecretAccessKey, o.SessionToken, o.Profile = c.AWSAccessKeyID, c.AWSSecretAccessKey.Reveal(), c.AWSSessionToken.Reveal(), c.AWSProfile
			}
			return s3store.FromURL(ctx, u, o)
		},
	}
}
