// Package server runs cloudsim's front ends on loopback listeners: one
// emulated cloud per provider, sharing a latency profile and, optionally,
// the local nodes that back their instances. cmd/cloudsim, the e2e tests and
// the paper benchmark all start the emulator through Start.
//
// Besides each provider's API, every listener answers a small control API
// under /_cloudsim/: GET /_cloudsim/resources lists what exists in that
// cloud (JSON), POST /_cloudsim/faults queues a cloudsim.Fault (JSON, as
// {"op": "launch", "kind": "throttle", "times": 2}, or {"op": "launch",
// "kind": "failed", "reason": "..."} for a launch whose machine ends in
// the cloud's failed state), DELETE /_cloudsim/faults clears them.
package server

import (
	"context"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/cloudtransit/transit/cloudsim"
	"github.com/cloudtransit/transit/cloudsim/ec2"
	"github.com/cloudtransit/transit/cloudsim/gce"
	"github.com/cloudtransit/transit/cloudsim/gcebilling"
	"github.com/cloudtransit/transit/cloudsim/localnodes"
	"github.com/cloudtransit/transit/cloudsim/openstack"
	"github.com/cloudtransit/transit/cloudsim/pricing"
	"github.com/cloudtransit/transit/districts"
)

// Options say which clouds to emulate and how.
type Options struct {
	Profile cloudsim.Profile
	// AWS is the EC2 API's listen address ("127.0.0.1:0" picks a port;
	// empty: no AWS); GCE the Compute Engine API's (and its token
	// endpoint's); OpenStack Keystone's, Nova's, Neutron's and Glance's.
	AWS, GCE, OpenStack string
	// Backing maps emulated regions ("aws:eu-central-1") to the local
	// subnets whose nodes back their instances; empty: instances are API
	// records only. BackingRoot is the local driver's record directory
	// for them (default /var/lib/transit/cloudsim).
	Backing     map[string]string
	BackingRoot string
	// BackingPublic, an IPv4 CIDR, gives backed instances public
	// addresses apart from their private ones, mapped by the host as a
	// cloud's 1:1 NAT (see localnodes); empty: one address for both.
	BackingPublic string
	// BackingApart keeps each backed region's network apart, reached only
	// through public addresses, which it needs (localnodes.Backer.Apart).
	BackingApart bool
	// Credentials are transit credentials.json entries the clouds accept
	// (an AWS access key, a GCE service account key file, an OpenStack
	// user or application credential); none: each front end's documented
	// default (GCE: any bearer token; OpenStack: any password).
	Credentials []districts.Credential
	// Quotas are what the clouds refuse beyond (zero fields: EC2's rules
	// per group and Neutron's quotas at their defaults, the rest
	// unlimited; cmd/cloudsim sets every one to the cloud's default).
	Quotas Quotas
	// ListingLag keeps a new EC2 instance out of DescribeInstances this
	// long (cloud time), as EC2's eventual consistency does.
	ListingLag time.Duration
}

// Quotas are the clouds' quotas the emulator keeps.
type Quotas struct {
	// AWSVCPUs is each region's running On-Demand vCPU quota;
	// AWSRulesPerGroup a security group's inbound rules.
	AWSVCPUs, AWSRulesPerGroup int
	// GCECPUs is each region's CPUS quota; GCEFirewalls a project's
	// FIREWALLS.
	GCECPUs, GCEFirewalls int
	// OpenStack are every project's Neutron quotas.
	OpenStack openstack.Quotas
}

// DefaultAWSVCPUs is the running On-Demand Standard vCPU quota
// (L-1216C47A) cmd/cloudsim gives each region: accounts differ, so it is
// a flag.
const DefaultAWSVCPUs = 32

// DefaultBackingRoot keeps backing nodes apart from transit's own local
// districts.
const DefaultBackingRoot = "/var/lib/transit/cloudsim"

// Emulator is a running set of emulated clouds.
type Emulator struct {
	// AWSURL is the EC2 endpoint (aws_endpoint); EC2 its front end and
	// AWSFaults the faults injected into it. The same endpoint serves the
	// AWS Price List Query API (Pricing), told apart by its requests'
	// X-Amz-Target.
	AWSURL    string
	EC2       *ec2.Server
	AWSFaults *cloudsim.Faults
	Pricing   *pricing.Server
	// GCEURL is the Compute Engine endpoint (gce_endpoint; a service
	// account key's token_uri is GCEURL + gce.TokenPath); GCE its front
	// end and GCEFaults the faults injected into it. The same endpoint
	// serves the Cloud Billing Catalog API (GCEBilling, under
	// /v1/services), taking the same credentials.
	GCEURL     string
	GCE        *gce.Server
	GCEFaults  *cloudsim.Faults
	GCEBilling *gcebilling.Server
	// OpenStackAuthURL is Keystone's v3 endpoint (os_auth_url); its
	// catalog lists RegionOne and every backed openstack region.
	// OpenStack is the front end and OpenStackFaults the faults injected
	// into it.
	OpenStackAuthURL string
	OpenStack        *openstack.Server
	OpenStackFaults  *cloudsim.Faults

	backer  *localnodes.Backer
	servers []*http.Server
	stops   []func()
}

// Start listens and serves until Close.
func Start(ctx context.Context, opts Options) (_ *Emulator, err error) {
	e := &Emulator{}
	defer func() {
		if err != nil {
			err = errors.Join(err, e.Close(context.WithoutCancel(ctx)))
		}
	}()
	var backer cloudsim.Backer
	if len(opts.Backing) > 0 {
		root := opts.BackingRoot
		if root == "" {
			root = DefaultBackingRoot
		}
		if opts.BackingApart && opts.BackingPublic == "" {
			return nil, errors.New("cloudsim: regions apart need public addresses (BackingPublic)")
		}
		e.backer = &localnodes.Backer{Root: root, Subnets: opts.Backing, PublicPool: opts.BackingPublic, Apart: opts.BackingApart}
		backer = e.backer
	}
	newSim := func() *cloudsim.Sim {
		s := cloudsim.New(opts.Profile)
		s.Backer = backer
		return s
	}
	if opts.AWS != "" {
		sim := newSim()
		e.EC2, e.AWSFaults = ec2.New(sim, ec2.Options{Credentials: awsKeys(opts.Credentials),
			VCPULimit: opts.Quotas.AWSVCPUs, RulesPerGroup: opts.Quotas.AWSRulesPerGroup, VisibilityLag: opts.ListingLag}), &sim.Faults
		e.Pricing = pricing.New(pricing.Options{Credentials: awsKeys(opts.Credentials)})
		e.stops = append(e.stops, e.EC2.Close)
		if e.AWSURL, err = e.serve(ctx, opts.AWS, sim, awsAPI{ec2: e.EC2, pricing: e.Pricing}, func() any { return nonNil(e.EC2.Resources()) }); err != nil {
			return nil, fmt.Errorf("cloudsim: serve EC2: %w", err)
		}
	}
	if opts.GCE != "" {
		accounts, err := gceAccounts(opts.Credentials)
		if err != nil {
			return nil, err
		}
		sim := newSim()
		e.GCE, e.GCEFaults = gce.New(sim, gce.Options{Accounts: accounts, CPUs: opts.Quotas.GCECPUs, Firewalls: opts.Quotas.GCEFirewalls}), &sim.Faults
		e.GCEBilling = gcebilling.New(gcebilling.Options{Authorize: e.GCE.Authorized})
		e.stops = append(e.stops, e.GCE.Close)
		if e.GCEURL, err = e.serve(ctx, opts.GCE, sim, gceAPI{gce: e.GCE, billing: e.GCEBilling}, func() any { return nonNil(e.GCE.Resources()) }); err != nil {
			return nil, fmt.Errorf("cloudsim: serve Compute Engine: %w", err)
		}
	}
	if opts.OpenStack != "" {
		sim := newSim()
		users, apps := openstackUsers(opts.Credentials)
		regions := []string{"RegionOne"}
		for r := range opts.Backing {
			if name, ok := strings.CutPrefix(r, "openstack:"); ok && !slices.Contains(regions, name) {
				regions = append(regions, name)
			}
		}
		e.OpenStack = openstack.New(sim, openstack.Options{Users: users, AppCredentials: apps, Regions: regions, ProjectQuotas: opts.Quotas.OpenStack})
		e.OpenStackFaults = &sim.Faults
		e.stops = append(e.stops, e.OpenStack.Close)
		url, err := e.serve(ctx, opts.OpenStack, sim, e.OpenStack, func() any { return nonNil(e.OpenStack.Resources()) })
		if err != nil {
			return nil, fmt.Errorf("cloudsim: serve OpenStack: %w", err)
		}
		e.OpenStackAuthURL = url + "/identity/v3"
	}
	return e, nil
}

// openstackUsers are the users and application credentials of the
// OpenStack credentials; both nil when there are none (any is accepted).
func openstackUsers(creds []districts.Credential) ([]openstack.User, []openstack.AppCredential) {
	var users []openstack.User
	var apps []openstack.AppCredential
	for _, c := range creds {
		switch {
		case c.Provider != districts.ProviderOpenStack:
		case c.OSUsername != "":
			users = append(users, openstack.User{Name: c.OSUsername, Password: string(c.OSPassword),
				Project: c.OSProjectName, Domain: c.OSDomainName})
		case c.OSApplicationCredentialID != "":
			apps = append(apps, openstack.AppCredential{ID: c.OSApplicationCredentialID,
				Secret: string(c.OSApplicationCredentialSecret), Project: "transit"})
		}
	}
	return users, apps
}

// gceAccounts are the service accounts of the GCE credentials' key files;
// nil when there are none (any bearer token is accepted).
func gceAccounts(creds []districts.Credential) (map[string]*rsa.PublicKey, error) {
	var accounts map[string]*rsa.PublicKey
	for _, c := range creds {
		if c.Provider != districts.ProviderGCE || c.GCEKeyFile == "" {
			continue
		}
		b, err := os.ReadFile(c.GCEKeyFile)
		if err != nil {
			return nil, fmt.Errorf("cloudsim: credential %q: %w", c.ID, err)
		}
		email, pub, err := gce.ParseKey(b)
		if err != nil {
			return nil, fmt.Errorf("cloudsim: credential %q: gce_key_file %s: %w", c.ID, c.GCEKeyFile, err)
		}
		if accounts == nil {
			accounts = map[string]*rsa.PublicKey{}
		}
		accounts[email] = pub
	}
	return accounts, nil
}

// awsKeys are the access keys of the AWS credentials; nil when there are
// none (the front end's default key).
func awsKeys(creds []districts.Credential) map[string]ec2.Credential {
	var keys map[string]ec2.Credential
	for _, c := range creds {
		if c.Provider != districts.ProviderAWS || c.AWSAccessKeyID == "" {
			continue
		}
		if keys == nil {
			keys = map[string]ec2.Credential{}
		}
		keys[c.AWSAccessKeyID] = ec2.Credential{SecretAccessKey: string(c.AWSSecretAccessKey), SessionToken: string(c.AWSSessionToken)}
	}
	return keys
}

// awsAPI is the AWS endpoint: the Price List Query API's requests (JSON
// 1.1, named by X-Amz-Target) go to its front end, the rest to EC2's.
type awsAPI struct {
	ec2     http.Handler
	pricing http.Handler
}

func (a awsAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if pricing.IsRequest(r) {
		a.pricing.ServeHTTP(w, r)
		return
	}
	a.ec2.ServeHTTP(w, r)
}

// gceAPI is the Google endpoint: the Cloud Billing Catalog API's
// requests (under /v1/services) go to its front end, the rest (Compute
// Engine's, the token endpoint's) to Compute Engine's.
type gceAPI struct {
	gce     http.Handler
	billing http.Handler
}

func (a gceAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if gcebilling.IsRequest(r) {
		a.billing.ServeHTTP(w, r)
		return
	}
	a.gce.ServeHTTP(w, r)
}

// serve listens on addr and serves api, with the control API beside it.
func (e *Emulator) serve(ctx context.Context, addr string, sim *cloudsim.Sim, api http.Handler, resources func() any) (string, error) {
	l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	mux := http.NewServeMux()
	mux.Handle("/", api)
	mux.HandleFunc("GET /_cloudsim/resources", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, resources())
	})
	mux.HandleFunc("POST /_cloudsim/faults", func(w http.ResponseWriter, r *http.Request) {
		var f struct {
			Op     cloudsim.Op        `json:"op"`
			Kind   cloudsim.FaultKind `json:"kind"`
			Times  int                `json:"times"`
			Quota  string             `json:"quota"`
			Delay  string             `json:"delay"`
			Reason string             `json:"reason"`
		}
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&f); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		fault := cloudsim.Fault{Op: f.Op, Kind: f.Kind, Times: f.Times, Quota: f.Quota, Reason: f.Reason}
		if f.Delay != "" {
			d, err := time.ParseDuration(f.Delay)
			if err != nil {
				writeJSON(w, http.StatusBadRequest, map[string]string{"error": "delay: " + err.Error()})
				return
			}
			fault.Delay = d
		}
		if err := checkFault(fault); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		sim.Faults.Add(fault)
		writeJSON(w, http.StatusOK, map[string]string{"queued": string(fault.Kind)})
	})
	mux.HandleFunc("DELETE /_cloudsim/faults", func(w http.ResponseWriter, _ *http.Request) {
		sim.Faults.Clear()
		writeJSON(w, http.StatusOK, map[string]string{"cleared": "faults"})
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	e.servers = append(e.servers, srv)
	go func() { _ = srv.Serve(l) }()
	return "http://" + l.Addr().String(), nil
}

var (
	ops   = []cloudsim.Op{cloudsim.OpAny, cloudsim.OpLaunch, cloudsim.OpTerminate, cloudsim.OpPower, cloudsim.OpList, cloudsim.OpGroup, cloudsim.OpKeys, cloudsim.OpAuth}
	kinds = []cloudsim.FaultKind{cloudsim.FaultThrottle, cloudsim.FaultQuota, cloudsim.FaultServer, cloudsim.FaultLost, cloudsim.FaultAuth, cloudsim.FaultSlow, cloudsim.FaultFailed, cloudsim.FaultUnreachable}
)

func checkFault(f cloudsim.Fault) error {
	if !slices.Contains(ops, f.Op) {
		return fmt.Errorf("op %q: want one of launch, terminate, power, list, group, keys, auth or empty (any)", f.Op)
	}
	if f.Kind == cloudsim.FaultFailed && f.Op != cloudsim.OpLaunch {
		return fmt.Errorf("kind %q: only a launch can fail so (op %q)", f.Kind, cloudsim.OpLaunch)
	}
	if f.Kind == cloudsim.FaultUnreachable && f.Op != cloudsim.OpList {
		return fmt.Errorf("kind %q: only a listing reports a zone unreachable (op %q)", f.Kind, cloudsim.OpList)
	}
	if !slices.Contains(kinds, f.Kind) {
		names := make([]string, len(kinds))
		for i, k := range kinds {
			names[i] = string(k)
		}
		return fmt.Errorf("kind %q: want one of %s", f.Kind, strings.Join(names, ", "))
	}
	return nil
}

// nonNil makes an empty list print as [], not null.
func nonNil[T any](xs []T) []T {
	if xs == nil {
		return []T{}
	}
	return xs
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// HostNames are the names of everything the backing nodes made on the
// host (localnodes.Backer.HostNames); none without backing.
func (e *Emulator) HostNames() []string {
	if e.backer == nil {
		return nil
	}
	return e.backer.HostNames()
}

// Close stops serving and tears down every backing node, waiting until
// they are gone.
func (e *Emulator) Close(ctx context.Context) error {
	var errs []error
	for _, srv := range e.servers {
		if err := srv.Shutdown(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	e.servers = nil
	for _, stop := range e.stops {
		stop()
	}
	e.stops = nil
	if e.backer != nil {
		errs = append(errs, e.backer.Destroy(ctx))
		e.backer = nil
	}
	return errors.Join(errs...)
}
