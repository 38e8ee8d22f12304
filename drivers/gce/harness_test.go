package gce

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"golang.org/x/crypto/ssh"
	"google.golang.org/api/option"

	"github.com/cloudtransit/transit/cloudsim"
	"github.com/cloudtransit/transit/cloudsim/gce"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/drivers/cloudutil"
	"github.com/cloudtransit/transit/drivers/drivertest"
	"github.com/cloudtransit/transit/provider"
)

const (
	project = "transit-test-1"
	region  = "europe-west1"
	account = "transit@transit-test-1.iam.gserviceaccount.com"
)

var zones = []string{"europe-west1-b", "europe-west1-c", "europe-west1-d"}

// world is one test's emulated Compute Engine: the front end on loopback
// with a service account whose key file the driver reads, and what the
// driver sent it.
type world struct {
	t       *testing.T
	sim     *cloudsim.Sim
	srv     *gce.Server
	url     string
	keyFile string
	key     []byte // the key file's bytes: a secret
	rec     *drivertest.Recorder
	// clock is the emulator's, running until a test holds it.
	clock *cloudsim.HeldClock
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{t: t, sim: cloudsim.New(cloudsim.Profile{Name: cloudsim.ProfileZero}), rec: &drivertest.Recorder{}}
	w.clock = cloudsim.Hold(w.sim) // before the emulator serves: Sim.Now is read unlocked
	w.clock.Resume(0)
	ts := httptest.NewServer(w.rec)
	w.url = ts.URL
	key, err := gce.NewKey(project, account, ts.URL+gce.TokenPath)
	if err != nil {
		t.Fatal(err)
	}
	email, pub, err := gce.ParseKey(key)
	if err != nil {
		t.Fatal(err)
	}
	w.srv = gce.New(w.sim, gce.Options{Accounts: map[string]*rsa.PublicKey{email: pub}})
	w.rec.Handler = w.srv
	t.Cleanup(func() {
		ts.Close()
		w.srv.Close()
	})
	w.key = key
	w.keyFile = filepath.Join(t.TempDir(), "gce-key.json")
	if err := os.WriteFile(w.keyFile, key, 0o600); err != nil {
		t.Fatal(err)
	}
	return w
}

func (w *world) district(mod ...func(*districts.District)) districts.District {
	d := districts.District{
		Type: "district", ID: "gce-test", Provider: districts.ProviderGCE, CredentialID: "gce-cred",
		GCEProjectID: project, GCERegion: region, GCEZones: zones, GCEEndpoint: w.url,
		Flavors: []districts.DistrictFlavor{{Flavor: "small", MachineType: "e2-small"}},
	}
	for _, m := range mod {
		m(&d)
	}
	return d
}

func (w *world) credential() *districts.Credential {
	return &districts.Credential{Type: "credential", ID: "gce-cred", Provider: districts.ProviderGCE, GCEKeyFile: w.keyFile}
}

// secrets are the key file's secret parts: its private key's lines.
func (w *world) secrets() []string {
	var out []string
	for _, l := range strings.Split(string(w.key), `\n`) {
		if len(l) > 40 && !strings.Contains(l, "PRIVATE KEY") {
			out = append(out, l)
		}
	}
	return out
}

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
	w.t.Cleanup(drv.(*driver).Close)
	return drv.(*driver)
}

// cloud is the world as drivertest.Cloud.
type cloud struct{ w *world }

func (c cloud) Faults() *cloudsim.Faults { return &c.w.sim.Faults }

// Plant stores tags as the driver does: encoded as labels.
func (c cloud) Plant(ctx context.Context, tags map[string]string) (string, error) {
	labels, err := encodeLabels(tags)
	if err != nil {
		return "", err
	}
	return c.w.srv.Plant(ctx, project, zones[0], labels)
}
func (c cloud) Remove(ctx context.Context, id string) error { return c.w.srv.Remove(ctx, project, id) }
func (c cloud) SetPageSize(n int)                           { c.w.srv.SetPageSize(n) }
func (c cloud) SetLatency(l cloudsim.Latency)               { c.w.srv.SetLatency(l) }
func (c cloud) Clock() *cloudsim.HeldClock                  { return c.w.clock }

// instances is a Compute Engine client of the SDK's on the emulator, with
// the world's key: how someone in the console reaches it.
func (c cloud) instances(ctx context.Context) (*compute.InstancesClient, error) {
	return compute.NewInstancesRESTClient(ctx, option.WithEndpoint(c.w.url),
		option.WithAuthCredentialsJSON(option.ServiceAccount, c.w.key))
}

// power stops or starts an instance ("zone/name") through instances.stop
// or instances.start, without waiting for the operation.
func (c cloud) power(ctx context.Context, id string, stop bool) error {
	zone, name, _ := strings.Cut(id, "/")
	api, err := c.instances(ctx)
	if err != nil {
		return err
	}
	defer api.Close()
	if stop {
		_, err = api.Stop(ctx, &computepb.StopInstanceRequest{Project: project, Zone: zone, Instance: name})
	} else {
		_, err = api.Start(ctx, &computepb.StartInstanceRequest{Project: project, Zone: zone, Instance: name})
	}
	return err
}

func (c cloud) Stop(ctx context.Context, id string) error  { return c.power(ctx, id, true) }
func (c cloud) Start(ctx context.Context, id string) error { return c.power(ctx, id, false) }

// Fail makes the instance TERMINATED as a host failure does.
func (c cloud) Fail(ctx context.Context, id string) error {
	return c.w.srv.Fail(ctx, project, id, "")
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
	return provider.LaunchSpec{Node: n, MachineType: "e2-small", GroupID: group, Tags: provider.IdentityTags(n, "lin-1"), AuthorizedKey: key}
}

func (w *world) noSecret(err error) {
	w.t.Helper()
	if err == nil {
		return
	}
	for _, s := range w.secrets() {
		if strings.Contains(err.Error(), s) {
			w.t.Errorf("error shows a secret: %v", err)
		}
	}
}

func (w *world) wantKind(err, kind error) {
	w.t.Helper()
	w.noSecret(err)
	if !errors.Is(err, kind) {
		w.t.Fatalf("error %v does not match %v", err, kind)
	}
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
