package openstack

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"

	"github.com/cloudtransit/transit/cloudsim"
	"github.com/cloudtransit/transit/cloudsim/openstack"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/drivers/cloudutil"
	"github.com/cloudtransit/transit/drivers/drivertest"
	"github.com/cloudtransit/transit/provider"
)

const (
	region   = "RegionOne"
	project  = "transit-test"
	user     = "transit"
	password = "s3cret-Pa55word-never-shown"
	appID    = "a1b2c3d4e5f6"
	appKey   = "app-secret-never-shown-9f8e7d"
)

var zones = []string{"nova", "az2", "az3"}

// world is one test's emulated OpenStack cloud on loopback, and what the
// driver sent it.
type world struct {
	t   *testing.T
	sim *cloudsim.Sim
	srv *openstack.Server
	url string
	rec *drivertest.Recorder
	// clock is the emulator's, running until a test holds it.
	clock *cloudsim.HeldClock
}

// newWorld starts the cloud: its users, application credentials and zones
// are the tests' constants; mod changes more.
func newWorld(t *testing.T, mod ...func(*openstack.Options)) *world {
	t.Helper()
	w := &world{t: t, sim: cloudsim.New(cloudsim.Profile{Name: cloudsim.ProfileZero})}
	w.clock = cloudsim.Hold(w.sim) // before the emulator serves: Sim.Now is read unlocked
	w.clock.Resume(0)
	opts := openstack.Options{
		Users:          []openstack.User{{Name: user, Password: password, Project: project}},
		AppCredentials: []openstack.AppCredential{{ID: appID, Secret: appKey, Project: project}},
		Zones:          zones,
	}
	for _, m := range mod {
		m(&opts)
	}
	w.srv = openstack.New(w.sim, opts)
	w.rec = &drivertest.Recorder{Handler: w.srv}
	ts := httptest.NewServer(w.rec)
	w.url = ts.URL
	t.Cleanup(func() {
		ts.Close()
		w.srv.Close()
	})
	return w
}

func (w *world) district(mod ...func(*districts.District)) districts.District {
	d := districts.District{
		Type: "district", ID: "os-test", Provider: districts.ProviderOpenStack, CredentialID: "os-cred",
		OSAuthURL: w.url + "/identity/v3", OSRegion: region, OSZones: zones, OSNetwork: openstack.PrivateNetwork,
		Flavors: []districts.DistrictFlavor{{Flavor: "small", OSFlavor: "m1.small"}},
	}
	for _, m := range mod {
		m(&d)
	}
	return d
}

func (w *world) credential() *districts.Credential {
	return &districts.Credential{Type: "credential", ID: "os-cred", Provider: districts.ProviderOpenStack,
		OSUsername: user, OSPassword: password, OSProjectName: project, OSDomainName: "Default"}
}

func secrets() []string { return []string{password, appKey} }

// fast are Options for tests: short waits, few attempts.
func fast() Options {
	return Options{Waits: cloudutil.Waits{RetryMaxAttempts: 4, RetryBaseDelay: time.Millisecond, RetryMaxDelay: 5 * time.Millisecond,
		PollInterval: 5 * time.Millisecond, PollMaxInterval: 20 * time.Millisecond, HostKeyWait: 2 * time.Second,
		GroupWait: 20 * time.Second}}
}

func (w *world) driver(d districts.District, cred *districts.Credential, opts Options) *driver {
	w.t.Helper()
	drv, err := New(w.t.Context(), d, cred, opts)
	if err != nil {
		w.t.Fatalf("New: %v", err)
	}
	return drv.(*driver)
}

// cloud is the world as drivertest.Cloud.
type cloud struct{ w *world }

func (c cloud) Faults() *cloudsim.Faults { return &c.w.sim.Faults }
func (c cloud) Plant(ctx context.Context, tags map[string]string) (string, error) {
	return c.w.srv.Plant(ctx, region, project, tags)
}
func (c cloud) Remove(ctx context.Context, id string) error {
	return c.w.srv.Remove(ctx, region, project, id)
}
func (c cloud) SetPageSize(n int)             { c.w.srv.SetPageSize(n) }
func (c cloud) SetLatency(l cloudsim.Latency) { c.w.srv.SetLatency(l) }
func (c cloud) Clock() *cloudsim.HeldClock    { return c.w.clock }

// Stop and Start go through Nova's os-stop and os-start with gophercloud.
func (c cloud) Stop(ctx context.Context, id string) error {
	compute, err := c.compute(ctx)
	if err != nil {
		return err
	}
	return servers.Stop(ctx, compute, id).ExtractErr()
}

func (c cloud) Start(ctx context.Context, id string) error {
	compute, err := c.compute(ctx)
	if err != nil {
		return err
	}
	return servers.Start(ctx, compute, id).ExtractErr()
}

// compute is a Nova client of gophercloud's with the test user.
func (c cloud) compute(ctx context.Context) (*gophercloud.ServiceClient, error) {
	drv := c.w.driver(c.w.district(), c.w.credential(), fast())
	if err := drv.clients(ctx); err != nil {
		return nil, err
	}
	return drv.compute, nil
}

// Fail makes the server ERROR, as Nova leaves one a hypervisor lost.
func (c cloud) Fail(ctx context.Context, id string) error {
	return c.w.srv.Fail(ctx, region, project, id, "transit conformance: the hypervisor is gone")
}

var _ drivertest.Cloud = cloud{}

func newKey(t testing.TB) string {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey()))) + " transit-test"
}

func groupSpec(cluster, district string, sources ...string) provider.GroupSpec {
	return provider.GroupSpec{
		Name: provider.GroupName(cluster, district), Cluster: cluster, District: district,
		Tags:    map[string]string{districts.TagCluster: cluster, districts.TagDistrict: district},
		Sources: sources,
	}
}

func launchSpec(cluster, district, node, zone, group, key string) provider.LaunchSpec {
	n := districts.Node{ID: node, Cluster: cluster, District: district, Role: districts.RoleWorker, Flavor: "small", Zone: zone}
	return provider.LaunchSpec{Node: n, MachineType: "m1.small", GroupID: group, Tags: provider.IdentityTags(n, "lin-1"), AuthorizedKey: key}
}

func (w *world) wantKind(err, kind error) {
	w.t.Helper()
	for _, s := range secrets() {
		if err != nil && strings.Contains(err.Error(), s) {
			w.t.Errorf("error shows a secret: %v", err)
		}
	}
	if !errors.Is(err, kind) {
		w.t.Fatalf("error %v does not match %v", err, kind)
	}
}
