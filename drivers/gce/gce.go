package gce

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	compute "cloud.google.com/go/compute/apiv1"
	"github.com/googleapis/gax-go/v2"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/option"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/drivers/cloudutil"
	"github.com/cloudtransit/transit/provider"
)

// Defaults of Options, right for the real Compute Engine.
const (
	DefaultRetryMaxAttempts = 8
	DefaultRetryBaseDelay   = 500 * time.Millisecond
	DefaultRetryMaxDelay    = 20 * time.Second
	DefaultPollInterval     = 2 * time.Second
	DefaultPollMaxInterval  = 15 * time.Second
	DefaultLaunchWait       = 10 * time.Minute
	DefaultHostKeyWait      = time.Minute
	DefaultGroupWait        = 10 * time.Minute
)

// Default image: the newest Debian 12 that Debian publishes on Compute
// Engine.
const (
	DefaultImageFamily  = "debian-12"
	DefaultImageProject = "debian-cloud"
)

// Options tune the driver; the zero value is right for the real Compute Engine.
// Tests shorten the waits.
type Options struct {
	cloudutil.Waits
}

// defaults are the waits right for the real Compute Engine.
var defaults = cloudutil.Waits{
	RetryMaxAttempts: DefaultRetryMaxAttempts, RetryBaseDelay: DefaultRetryBaseDelay, RetryMaxDelay: DefaultRetryMaxDelay,
	PollInterval: DefaultPollInterval, PollMaxInterval: DefaultPollMaxInterval,
	LaunchWait: DefaultLaunchWait, HostKeyWait: DefaultHostKeyWait, GroupWait: DefaultGroupWait,
}

func (o Options) withDefaults() Options {
	o.Waits = o.Or(defaults)
	return o
}

type driver struct {
	d        districts.District
	credName string // how errors name the credentials
	opts     Options
	apiCIDRs []string
	sshCIDRs []string
	network  string

	instances *compute.InstancesClient
	zoneOps   *compute.ZoneOperationsClient
	globalOps *compute.GlobalOperationsClient
	firewalls *compute.FirewallsClient
	images    *compute.ImagesClient

	mu    sync.Mutex
	image string // resolved source image link

	// placeMu makes "count the instances per zone, pick the emptiest"
	// one step across concurrent launches; inflight holds the zone of
	// each launch between that step and its return, by instance name.
	placeMu  sync.Mutex
	inflight map[string]string
}

var (
	_ provider.Infrastructure    = (*driver)(nil)
	_ provider.InUseGroupDeleter = (*driver)(nil)
)

// checkDistrict says what district d lacks for the GCE driver.
func checkDistrict(d districts.District) error {
	if d.Provider != districts.ProviderGCE {
		return invalid(d, "provider %q is not %q", d.Provider, districts.ProviderGCE)
	}
	switch {
	case d.GCEProjectID == "":
		return invalid(d, "gce_project_id: missing")
	case d.GCERegion == "":
		return invalid(d, "gce_region: missing")
	case len(d.GCEZones) == 0:
		return invalid(d, "gce_zones: missing")
	}
	return nil
}

// New returns the driver of a GCE district. cred is the district's
// credential: its gce_key_file (a service account key, read now); nil, or
// a credential without a key file, means application default
// credentials. New makes no API request.
func New(ctx context.Context, d districts.District, cred *districts.Credential, opts Options) (provider.Infrastructure, error) {
	if err := checkDistrict(d); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	drv := &driver{d: d, opts: opts, inflight: map[string]string{}, network: d.GCENetwork}
	if drv.network == "" {
		drv.network = "default"
	}
	var err error
	if drv.sshCIDRs, err = cloudutil.SSHCIDRs(d); err != nil {
		return nil, err
	}
	if drv.apiCIDRs, err = cloudutil.APICIDRs(d); err != nil {
		return nil, err
	}
	copts, credName, err := clientOptions(d, cred)
	if err != nil {
		return nil, err
	}
	drv.credName = credName
	fail := func(err error) (provider.Infrastructure, error) {
		drv.Close()
		return nil, &cloudError{Kind: provider.ErrCloudAuth,
			Msg: fmt.Sprintf("gce district %q: set up the Compute Engine client with %s", d.ID, drv.credName), Err: err}
	}
	if drv.instances, err = compute.NewInstancesRESTClient(ctx, copts...); err != nil {
		return fail(err)
	}
	if drv.zoneOps, err = compute.NewZoneOperationsRESTClient(ctx, copts...); err != nil {
		return fail(err)
	}
	if drv.globalOps, err = compute.NewGlobalOperationsRESTClient(ctx, copts...); err != nil {
		return fail(err)
	}
	if drv.firewalls, err = compute.NewFirewallsRESTClient(ctx, copts...); err != nil {
		return fail(err)
	}
	if drv.images, err = compute.NewImagesRESTClient(ctx, copts...); err != nil {
		return fail(err)
	}
	return drv, nil
}

// clientOptions are the options of every Google API client of district d
// with credential cred (its gce_key_file, read now; nil or none:
// application default credentials), and how errors name the credential.
// gce_endpoint, when set, is where every API is asked: the emulator
// serves them all on one base URL.
func clientOptions(d districts.District, cred *districts.Credential) ([]option.ClientOption, string, error) {
	var copts []option.ClientOption
	if d.GCEEndpoint != "" {
		copts = append(copts, option.WithEndpoint(strings.TrimSuffix(d.GCEEndpoint, "/")))
	}
	credName := "application default credentials"
	if cred == nil {
		return copts, credName, nil
	}
	if cred.Provider != districts.ProviderGCE {
		return nil, "", invalid(d, "credential %q is for provider %q", cred.ID, cred.Provider)
	}
	credName = fmt.Sprintf("credential %q (application default credentials)", cred.ID)
	if cred.GCEKeyFile != "" {
		credName = fmt.Sprintf("credential %q (gce_key_file %s)", cred.ID, cred.GCEKeyFile)
		key, err := os.ReadFile(cred.GCEKeyFile)
		if err != nil {
			return nil, "", &cloudError{Kind: provider.ErrCloudAuth,
				Msg: fmt.Sprintf("gce district %q: read the service account key of %s", d.ID, credName), Err: err}
		}
		copts = append(copts, option.WithAuthCredentialsJSON(option.ServiceAccount, key))
	}
	return copts, credName, nil
}

// Close releases the clients' connections.
func (drv *driver) Close() {
	var cs []io.Closer
	if drv.instances != nil {
		cs = append(cs, drv.instances)
	}
	if drv.zoneOps != nil {
		cs = append(cs, drv.zoneOps)
	}
	if drv.globalOps != nil {
		cs = append(cs, drv.globalOps)
	}
	if drv.firewalls != nil {
		cs = append(cs, drv.firewalls)
	}
	if drv.images != nil {
		cs = append(cs, drv.images)
	}
	for _, c := range cs {
		_ = c.Close()
	}
}

// retry is every call's gax option: bounded retries, with exponential
// backoff and full jitter, of throttling, 5xx answers and connection
// errors. Creates carry a requestId, so a retried create whose first
// answer was lost returns the first one's operation.
func (drv *driver) retry() gax.CallOption {
	return gax.WithRetry(func() gax.Retryer { return &retryer{o: drv.opts} })
}

type retryer struct {
	o Options
	n int
}

func (r *retryer) Retry(err error) (time.Duration, bool) {
	r.n++
	if r.n >= r.o.RetryMaxAttempts || !retryable(err) {
		return 0, false
	}
	return cloudutil.Backoff(r.n, r.o.RetryBaseDelay, r.o.RetryMaxDelay), true
}

// retryable says whether err is worth another attempt.
func retryable(err error) bool {
	if throttled(err) {
		return true
	}
	var ge *googleapi.Error
	if errors.As(err, &ge) {
		return ge.Code >= 500
	}
	return cloudutil.ConnectionError(err)
}

// throttled says whether Compute Engine refused err's request for its
// rate.
func throttled(err error) bool {
	var ge *googleapi.Error
	if !errors.As(err, &ge) {
		return false
	}
	if ge.Code == 429 {
		return true
	}
	return ge.Code == 403 && hasReason(ge, "rateLimitExceeded", "userRateLimitExceeded")
}

func hasReason(ge *googleapi.Error, reasons ...string) bool {
	for _, e := range ge.Errors {
		for _, r := range reasons {
			if e.Reason == r {
				return true
			}
		}
	}
	return false
}

// wait sleeps for the poll interval after n polls (doubling, capped).
func (drv *driver) wait(ctx context.Context, n int) error {
	return drv.opts.Clock.Sleep(ctx, cloudutil.PollDelay(n, drv.opts.PollInterval, drv.opts.PollMaxInterval))
}
