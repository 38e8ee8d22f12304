package aws

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	sdkec2 "github.com/aws/aws-sdk-go-v2/service/ec2"
	"golang.org/x/crypto/ssh"

	"github.com/cloudtransit/transit/awsbody"
	"github.com/cloudtransit/transit/cloudsim"
	"github.com/cloudtransit/transit/cloudsim/ec2"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/drivers/cloudutil"
	"github.com/cloudtransit/transit/drivers/drivertest"
	"github.com/cloudtransit/transit/provider"
)

const (
	region    = "eu-central-1"
	keyID     = "AKIATRANSITTEST00001"
	secretKey = "s3cr3t/Transit+Test/0123456789abcdefghij"
	session   = "FQoGZXIvYXdzEXAMPLESESSIONTOKENtransit"
)

var zones = []string{"eu-central-1a", "eu-central-1b", "eu-central-1c"}

// world is one test's emulated AWS: the EC2 front end on loopback, and
// what the driver under test sent it.
type world struct {
	t   *testing.T
	sim *cloudsim.Sim
	srv *ec2.Server
	url string
	// clock is the emulator's, running until a test holds it.
	clock *cloudsim.HeldClock

	mu       sync.Mutex
	requests []url.Values
}

func newWorld(t *testing.T, opts ec2.Options) *world {
	t.Helper()
	if opts.Credentials == nil {
		opts.Credentials = map[string]ec2.Credential{keyID: {SecretAccessKey: secretKey, SessionToken: session}}
	}
	w := &world{t: t, sim: cloudsim.New(cloudsim.Profile{Name: cloudsim.ProfileZero})}
	w.clock = cloudsim.Hold(w.sim) // before the emulator serves: Sim.Now is read unlocked
	w.clock.Resume(0)
	w.srv = ec2.New(w.sim, opts)
	ts := httptest.NewServer(http.HandlerFunc(w.serve))
	t.Cleanup(func() {
		ts.Close()
		w.srv.Close()
	})
	w.url = ts.URL
	return w
}

// serve records each request's form, then lets the emulator answer.
func (w *world) serve(rw http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	if form, err := url.ParseQuery(string(body)); err == nil {
		w.mu.Lock()
		w.requests = append(w.requests, form)
		w.mu.Unlock()
	}
	w.srv.ServeHTTP(rw, r)
}

// actions returns the actions requested since the last call.
func (w *world) actions() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, f := range w.requests {
		out = append(out, f.Get("Action"))
	}
	w.requests = nil
	return out
}

func (w *world) forms(action string) []url.Values {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []url.Values
	for _, f := range w.requests {
		if f.Get("Action") == action {
			out = append(out, f)
		}
	}
	return out
}

// sdk is a plain SDK client on the same emulator, to set up and inspect
// what the driver does not show.
func (w *world) sdk() *sdkec2.Client {
	return sdkec2.New(sdkec2.Options{Region: region, BaseEndpoint: sdk.String(w.url), RetryMaxAttempts: 1, HTTPClient: awsbody.Wrap(nil),
		Credentials: credentials.NewStaticCredentialsProvider(keyID, secretKey, session)})
}

func (w *world) district(mod ...func(*districts.District)) districts.District {
	d := districts.District{
		Type: "district", ID: "aws-test", Provider: districts.ProviderAWS, CredentialID: "aws-cred",
		AWSRegion: region, AWSEndpoint: w.url,
		Flavors: []districts.DistrictFlavor{{Flavor: "small", InstanceType: "t3.micro"}},
	}
	for _, m := range mod {
		m(&d)
	}
	return d
}

func credential() *districts.Credential {
	return &districts.Credential{Type: "credential", ID: "aws-cred", Provider: districts.ProviderAWS,
		AWSAccessKeyID: keyID, AWSSecretAccessKey: secretKey, AWSSessionToken: session}
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
	return drv.(*driver)
}

// cloud is the world as drivertest.Cloud.
type cloud struct{ w *world }

func (c cloud) Faults() *cloudsim.Faults { return &c.w.sim.Faults }
func (c cloud) Plant(ctx context.Context, tags map[string]string) (string, error) {
	return c.w.srv.Plant(ctx, region, tags)
}
func (c cloud) Remove(ctx context.Context, id string) error { return c.w.srv.Remove(ctx, region, id) }
func (c cloud) SetPageSize(n int)                           { c.w.srv.SetPageSize(n) }
func (c cloud) SetLatency(l cloudsim.Latency)               { c.w.srv.SetLatency(l) }
func (c cloud) Clock() *cloudsim.HeldClock                  { return c.w.clock }

// Stop and Start go through the EC2 API with the SDK.
func (c cloud) Stop(ctx context.Context, id string) error {
	_, err := c.w.sdk().StopInstances(ctx, &sdkec2.StopInstancesInput{InstanceIds: []string{id}})
	return err
}

func (c cloud) Start(ctx context.Context, id string) error {
	_, err := c.w.sdk().StartInstances(ctx, &sdkec2.StartInstancesInput{InstanceIds: []string{id}})
	return err
}

// Fail stops the instance as EC2 does when it loses its capacity.
func (c cloud) Fail(ctx context.Context, id string) error {
	return c.w.srv.Fail(ctx, region, id, "Server.InsufficientInstanceCapacity")
}

var _ drivertest.Cloud = cloud{}

func newKey(t testing.TB) (string, ssh.Signer) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey()))) + " transit-test", signer
}

// noSecret fails the test if err's message holds a secret.
func noSecret(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	for _, s := range []string{secretKey, session} {
		if strings.Contains(err.Error(), s) {
			t.Errorf("error shows a secret: %v", err)
		}
	}
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
	return provider.LaunchSpec{Node: n, MachineType: "t3.micro", GroupID: group, Tags: provider.IdentityTags(n, "lin-1"), AuthorizedKey: key}
}

func wantKind(t *testing.T, err, kind error) {
	t.Helper()
	noSecret(t, err)
	if !errors.Is(err, kind) {
		t.Fatalf("error %v does not match %v", err, kind)
	}
}

func ec2Options() ec2.Options { return ec2.Options{} }
