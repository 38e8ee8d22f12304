package openstack

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	gopenstack "github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/config/clouds"
	"github.com/gophercloud/gophercloud/v2/openstack/identity/v3/tokens"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/drivers/cloudutil"
	"github.com/cloudtransit/transit/provider"
)

// Defaults of Options, right for a real OpenStack cloud.
const (
	DefaultRetryMaxAttempts = 8
	DefaultRetryBaseDelay   = 500 * time.Millisecond
	DefaultRetryMaxDelay    = 20 * time.Second
	DefaultPollInterval     = 2 * time.Second
	DefaultPollMaxInterval  = 15 * time.Second
	DefaultLaunchWait       = 10 * time.Minute
	DefaultHostKeyWait      = 2 * time.Minute
	DefaultGroupWait        = 5 * time.Minute
)

// requestTimeout bounds one API request.
const requestTimeout = 2 * time.Minute

// DefaultImage is the image name used without os_image.
const DefaultImage = "debian-12"

// Options tune the driver; the zero value is right for a real OpenStack cloud.
// Tests shorten the waits.
type Options struct {
	cloudutil.Waits
}

// defaults are the waits right for a real OpenStack cloud.
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
	// project is the name (else id) of the project Keystone scoped the
	// token to, once authenticated; quota errors name it.
	project  string
	opts     Options
	auth     gophercloud.AuthOptions
	tls      *tls.Config
	sshCIDRs []string
	apiCIDRs []string

	// authMu guards the clients, made at the first request: New makes
	// none, so a cloud that is down fails the request, not the setup.
	authMu        sync.Mutex
	compute, netw *gophercloud.ServiceClient
	image         *gophercloud.ServiceClient
	mu            sync.Mutex
	resolved      map[string]string // what resolve found: image, flavor, network ids
	keys          map[string]bool   // key pair names known to hold the cluster's key
	keyMu         sync.Mutex

	// placeMu makes "count the servers per zone, pick the emptiest" one
	// step across concurrent launches; inflight holds the zone of each
	// launch between that step and its return, by server name.
	placeMu  sync.Mutex
	inflight map[string]string
}

var _ provider.Infrastructure = (*driver)(nil)

// New returns the driver of an OpenStack district. cred is the district's
// credential: a user and password or an application credential, or
// os_cloud naming a clouds.yaml entry; nil, or a credential with none of
// these, means the OS_* environment. New makes no API request.
func New(ctx context.Context, d districts.District, cred *districts.Credential, opts Options) (provider.Infrastructure, error) {
	if d.Provider != districts.ProviderOpenStack {
		return nil, invalid(d, "provider %q is not %q", d.Provider, districts.ProviderOpenStack)
	}
	if d.OSRegion == "" {
		return nil, invalid(d, "os_region: missing")
	}
	drv := &driver{d: d, opts: opts.withDefaults(), inflight: map[string]string{}, keys: map[string]bool{},
		resolved: map[string]string{}, credName: "the OS_* environment"}
	var err error
	if drv.sshCIDRs, err = sshCIDRs(d); err != nil {
		return nil, err
	}
	if drv.apiCIDRs, err = cloudutil.APICIDRs(d); err != nil {
		return nil, err
	}

	authErr := func(err error) error {
		return &cloudError{Kind: provider.ErrCloudAuth, Msg: fmt.Sprintf("openstack district %q: read %s", d.ID, drv.credName), Err: err}
	}
	switch {
	case cred != nil && cred.Provider != districts.ProviderOpenStack:
		return nil, invalid(d, "credential %q is for provider %q", cred.ID, cred.Provider)
	case cred != nil && cred.OSCloud != "":
		drv.credName = fmt.Sprintf("credential %q (os_cloud %s in clouds.yaml)", cred.ID, cred.OSCloud)
		ao, _, tlsConf, err := clouds.Parse(clouds.WithCloudName(cred.OSCloud))
		if err != nil {
			return nil, authErr(err)
		}
		drv.auth, drv.tls = ao, tlsConf
	case cred != nil && cred.OSApplicationCredentialID != "":
		drv.credName = fmt.Sprintf("credential %q (application credential %s)", cred.ID, cred.OSApplicationCredentialID)
		drv.auth = gophercloud.AuthOptions{ApplicationCredentialID: cred.OSApplicationCredentialID,
			ApplicationCredentialSecret: string(cred.OSApplicationCredentialSecret)}
	case cred != nil && cred.OSUsername != "":
		drv.credName = fmt.Sprintf("credential %q (user %s)", cred.ID, cred.OSUsername)
		domain := cmp.Or(cred.OSDomainName, "Default")
		drv.auth = gophercloud.AuthOptions{Username: cred.OSUsername, Password: string(cred.OSPassword),
			DomainName: domain, Scope: &gophercloud.AuthScope{ProjectName: cred.OSProjectName, DomainName: domain}}
	default:
		if cred != nil {
			drv.credName = fmt.Sprintf("credential %q (the OS_* environment)", cred.ID)
		}
		ao, err := authFromEnv()
		if err != nil {
			return nil, authErr(err)
		}
		drv.auth = ao
	}
	if d.OSAuthURL != "" {
		drv.auth.IdentityEndpoint = d.OSAuthURL
	}
	if drv.auth.IdentityEndpoint == "" {
		return nil, invalid(d, "os_auth_url: missing, and %s names no auth URL", drv.credName)
	}
	drv.auth.AllowReauth = true
	return drv, nil
}

// authFromEnv reads the OS_* variables an openrc file or
// python-openstackclient sets: a user, password and project (each with its
// domain, default "Default"), or an application credential.
func authFromEnv() (gophercloud.AuthOptions, error) {
	env := func(names ...string) string {
		for _, n := range names {
			if v := os.Getenv(n); v != "" {
				return v
			}
		}
		return ""
	}
	ao := gophercloud.AuthOptions{IdentityEndpoint: env("OS_AUTH_URL")}
	if id := env("OS_APPLICATION_CREDENTIAL_ID"); id != "" {
		ao.ApplicationCredentialID, ao.ApplicationCredentialSecret = id, env("OS_APPLICATION_CREDENTIAL_SECRET")
		if ao.ApplicationCredentialSecret == "" {
			return ao, errors.New("OS_APPLICATION_CREDENTIAL_ID is set but OS_APPLICATION_CREDENTIAL_SECRET is not")
		}
		return ao, nil
	}
	ao.Username, ao.UserID, ao.Password = env("OS_USERNAME"), env("OS_USER_ID"), env("OS_PASSWORD")
	if ao.Username == "" && ao.UserID == "" || ao.Password == "" {
		return ao, errors.New("the environment has neither OS_USERNAME and OS_PASSWORD nor OS_APPLICATION_CREDENTIAL_ID: source an openrc file, or name a credential")
	}
	ao.DomainID = env("OS_USER_DOMAIN_ID")
	if ao.DomainID == "" {
		ao.DomainName = cmp.Or(env("OS_USER_DOMAIN_NAME", "OS_DOMAIN_NAME"), "Default")
	}
	scope := &gophercloud.AuthScope{ProjectID: env("OS_PROJECT_ID", "OS_TENANT_ID"), ProjectName: env("OS_PROJECT_NAME", "OS_TENANT_NAME")}
	if scope.ProjectID == "" && scope.ProjectName != "" {
		scope.DomainID = env("OS_PROJECT_DOMAIN_ID")
		if scope.DomainID == "" {
			scope.DomainName = cmp.Or(env("OS_PROJECT_DOMAIN_NAME", "OS_DOMAIN_NAME"), "Default")
		}
	}
	if scope.ProjectID != "" || scope.ProjectName != "" {
		ao.Scope = scope
	}
	return ao, nil
}

// clients authenticates once and returns the service clients.
func (drv *driver) clients(ctx context.Context) error {
	drv.authMu.Lock()
	defer drv.authMu.Unlock()
	if drv.compute != nil {
		return nil
	}
	what := "authenticate with " + drv.credName
	var pc *gophercloud.ProviderClient
	err := drv.retry(ctx, func() error {
		var err error
		pc, err = gopenstack.NewClient(drv.auth.IdentityEndpoint)
		if err != nil {
			return err
		}
		// A cloud that stops answering fails the request (and it is
		// retried) instead of hanging the run.
		hc := http.Client{Timeout: requestTimeout}
		if drv.tls != nil {
			tr := http.DefaultTransport.(*http.Transport).Clone()
			tr.TLSClientConfig = drv.tls
			hc.Transport = tr
		}
		pc.HTTPClient = hc
		return gopenstack.Authenticate(ctx, pc, drv.auth)
	})
	if err != nil {
		return drv.wrap(what, err)
	}
	if r, ok := pc.GetAuthResult().(interface {
		ExtractProject() (*tokens.Project, error)
	}); ok {
		if p, err := r.ExtractProject(); err == nil && p != nil {
			drv.project = cmp.Or(p.Name, p.ID)
		}
	}
	eo := gophercloud.EndpointOpts{Region: drv.d.OSRegion}
	var cerr, nerr, ierr error
	drv.compute, cerr = gopenstack.NewComputeV2(pc, eo)
	drv.netw, nerr = gopenstack.NewNetworkV2(pc, eo)
	drv.image, ierr = gopenstack.NewImageV2(pc, eo)
	if err := errors.Join(cerr, nerr, ierr); err != nil {
		drv.compute = nil
		var nf *gophercloud.ErrEndpointNotFound
		if errors.As(err, &nf) {
			return invalid(drv.d, "os_region: region %q has no compute, network or image endpoint in the catalog of %s", drv.d.OSRegion, drv.credName)
		}
		return drv.wrap("find the compute, network and image endpoints", err)
	}
	return nil
}

// retry runs fn until it succeeds, fails for good, or has been tried
// RetryMaxAttempts times: throttling, 5xx answers and connection errors
// are retried with exponential backoff and full jitter. fn must be safe
// to repeat: creates look for what a lost answer made before they make
// it again.
func (drv *driver) retry(ctx context.Context, fn func() error) error {
	for n := 1; ; n++ {
		err := fn()
		if err == nil || n >= drv.opts.RetryMaxAttempts || !retryable(err) || ctx.Err() != nil {
			return err
		}
		ceil := drv.opts.RetryMaxDelay
		if n < 31 {
			ceil = min(ceil, drv.opts.RetryBaseDelay<<(n-1))
		}
		if ceil > 0 {
			if serr := drv.opts.Clock.Sleep(ctx, rand.N(ceil+1)); serr != nil {
				return err
			}
		}
	}
}

// status is the HTTP status of an API error, or 0.
func status(err error) int {
	var ue gophercloud.ErrUnexpectedResponseCode
	if errors.As(err, &ue) {
		return ue.Actual
	}
	var se interface{ GetStatusCode() int }
	if errors.As(err, &se) {
		return se.GetStatusCode()
	}
	return 0
}

func retryable(err error) bool {
	if s := status(err); s == 429 || s >= 500 {
		return true
	}
	return cloudutil.ConnectionError(err)
}

// wait sleeps for the poll interval after n polls (doubling, capped).
func (drv *driver) wait(ctx context.Context, n int) error {
	return drv.opts.Clock.Sleep(ctx, cloudutil.PollDelay(n, drv.opts.PollInterval, drv.opts.PollMaxInterval))
}
