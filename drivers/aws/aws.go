package aws

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	sdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/cloudtransit/transit/awsbody"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/drivers/cloudutil"
	"github.com/cloudtransit/transit/provider"
)

// Defaults of Options, right for the real EC2.
const (
	DefaultRetryMaxAttempts = 8
	DefaultRetryBaseDelay   = 500 * time.Millisecond
	DefaultRetryMaxDelay    = 20 * time.Second
	DefaultPollInterval     = 2 * time.Second
	DefaultPollMaxInterval  = 15 * time.Second
	DefaultLaunchWait       = 10 * time.Minute
	DefaultHostKeyWait      = time.Minute
	DefaultGroupWait        = 5 * time.Minute
)

// Default image: the newest Debian 12 for amd64 that Debian publishes
// (Debian's AWS account).
const (
	DefaultImageName  = "debian-12-amd64-*"
	DefaultImageOwner = "136693071363"
)

// Options tune the driver; the zero value is right for the real EC2.
// Tests shorten the waits.
type Options struct {
	cloudutil.Waits
	// HTTPClient sends the API requests (default: the SDK's).
	HTTPClient *http.Client
}

// defaults are the waits right for the real EC2.
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
	ec2      *ec2.Client
	opts     Options
	sshCIDRs []string
	apiCIDRs []string

	mu     sync.Mutex // guards the caches below
	image  string
	vpc    string
	places *placements
	keys   map[string]string // key pair name → the key it holds

	keyMu sync.Mutex // one key pair import at a time

	// placeMu makes "count the instances per zone, pick the emptiest"
	// one step across concurrent launches; inflight holds the place
	// (zone or subnet) of each launch between that step and its return,
	// by client token.
	placeMu  sync.Mutex
	inflight map[string]string
}

var _ provider.Infrastructure = (*driver)(nil)

// New returns the driver of an AWS district. cred is the district's
// credential: its access key (aws_access_key_id, aws_secret_access_key,
// aws_session_token) or shared-config profile (aws_profile); nil means the
// SDK's default chain (environment, shared config and SSO, the instance's
// role). New makes no request.
func New(ctx context.Context, d districts.District, cred *districts.Credential, opts Options) (provider.Infrastructure, error) {
	if d.Provider != districts.ProviderAWS {
		return nil, invalid(d, "provider %q is not %q", d.Provider, districts.ProviderAWS)
	}
	if d.AWSRegion == "" {
		return nil, invalid(d, "aws_region: missing")
	}
	opts = opts.withDefaults()
	drv := &driver{d: d, opts: opts, keys: map[string]string{}, inflight: map[string]string{}}
	var err error
	if drv.sshCIDRs, err = cloudutil.SSHCIDRs(d); err != nil {
		return nil, err
	}
	if drv.apiCIDRs, err = cloudutil.APICIDRs(d); err != nil {
		return nil, err
	}
	cfg, credName, err := sdkConfig(ctx, d, cred, d.AWSRegion, opts)
	if err != nil {
		return nil, err
	}
	drv.credName = credName
	drv.ec2 = ec2.NewFromConfig(cfg, func(o *ec2.Options) {
		if d.AWSEndpoint != "" {
			o.BaseEndpoint = sdk.String(d.AWSEndpoint)
		}
	})
	return drv, nil
}

// sdkConfig is the SDK's configuration for district d in region (the
// district's, or the one serving another API such as the Price List): the
// retries of opts, opts.HTTPClient (its request bodies as awsbody sends
// them), and cred's access key or profile (nil:
// the SDK's default chain), whose failures map to provider.ErrCloudAuth.
// It returns how errors name the credentials. The caller points its client
// at d.AWSEndpoint when set.
func sdkConfig(ctx context.Context, d districts.District, cred *districts.Credential, region string, opts Options) (sdk.Config, string, error) {
	credName := "the SDK's default credential chain"
	load := []func(*config.LoadOptions) error{
		config.WithRegion(region),
		config.WithRetryer(func() sdk.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) {
				o.MaxAttempts = opts.RetryMaxAttempts
				o.MaxBackoff = opts.RetryMaxDelay
				o.Backoff = fullJitter{base: opts.RetryBaseDelay, max: opts.RetryMaxDelay}
			})
		}),
	}
	if opts.HTTPClient != nil {
		load = append(load, config.WithHTTPClient(opts.HTTPClient))
	}
	if cred != nil {
		if cred.Provider != districts.ProviderAWS {
			return sdk.Config{}, "", invalid(d, "credential %q is for provider %q", cred.ID, cred.Provider)
		}
		credName = fmt.Sprintf("credential %q", cred.ID)
		switch {
		case cred.AWSAccessKeyID != "":
			load = append(load, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(
				cred.AWSAccessKeyID, cred.AWSSecretAccessKey.Reveal(), cred.AWSSessionToken.Reveal())))
		case cred.AWSProfile != "":
			credName = fmt.Sprintf("credential %q (aws_profile %q)", cred.ID, cred.AWSProfile)
			load = append(load, config.WithSharedConfigProfile(cred.AWSProfile))
		default:
			credName = fmt.Sprintf("credential %q (the SDK's default chain)", cred.ID)
		}
	}
	cfg, err := config.LoadDefaultConfig(ctx, load...)
	if err != nil {
		return sdk.Config{}, "", &cloudError{Kind: districts.ErrInvalid,
			Msg: fmt.Sprintf("aws district %q: load the AWS configuration for %s", d.ID, credName), Err: err}
	}
	if cfg.Credentials != nil {
		cfg.Credentials = markedCredentials{cfg.Credentials}
	}
	// After the configuration is loaded, so that a CA bundle it applies
	// to the SDK's own client is kept.
	cfg.HTTPClient = awsbody.Wrap(cfg.HTTPClient)
	return cfg, credName, nil
}

// fullJitter is exponential backoff with full jitter: attempt n waits a
// random time up to min(max, base·2^(n-1)), so that many clients
// throttled at once do not retry in step.
type fullJitter struct{ base, max time.Duration }

func (j fullJitter) BackoffDelay(attempt int, _ error) (time.Duration, error) {
	return cloudutil.Backoff(attempt, j.base, j.max), nil
}

// markedCredentials marks a failure to obtain credentials (no key in the
// environment, an expired SSO session, no instance role), which the SDK
// reports as a plain error, so that it maps to provider.ErrCloudAuth.
type markedCredentials struct{ sdk.CredentialsProvider }

func (m markedCredentials) Retrieve(ctx context.Context) (sdk.Credentials, error) {
	c, err := m.CredentialsProvider.Retrieve(ctx)
	if err != nil {
		return c, &noCredentials{err}
	}
	return c, nil
}

type noCredentials struct{ err error }

func (e *noCredentials) Error() string { return "no credentials: " + e.err.Error() }
func (e *noCredentials) Unwrap() error { return e.err }

// wait sleeps for the poll interval after n polls (doubling, capped).
func (drv *driver) wait(ctx context.Context, n int) error {
	return drv.opts.Clock.Sleep(ctx, cloudutil.PollDelay(n, drv.opts.PollInterval, drv.opts.PollMaxInterval))
}
