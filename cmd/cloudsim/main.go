// Command cloudsim emulates the cloud APIs transit's drivers use, on
// loopback, so cloud districts can be tried without an account. It prints
// one JSON line with each cloud's endpoint and serves until interrupted.
//
//	cloudsim --aws 127.0.0.1:4566 --gce 127.0.0.1:4567 --openstack 127.0.0.1:4568 --profile kratzke2017 --time-scale 0.1 \
//	  --back aws:eu-central-1=10.250.1.0/24 --back gce:europe-west1=10.250.2.0/24
//
// The clouds' quotas are on at their defaults (EC2's vCPUs and rules per
// group, Compute Engine's CPUS and FIREWALLS, Neutron's), each a flag.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/cloudtransit/transit/cloudsim"
	"github.com/cloudtransit/transit/cloudsim/ec2"
	"github.com/cloudtransit/transit/cloudsim/gce"
	"github.com/cloudtransit/transit/cloudsim/openstack"
	"github.com/cloudtransit/transit/cloudsim/server"
	"github.com/cloudtransit/transit/districts"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "cloudsim:", err)
		os.Exit(1)
	}
}

// backing collects --back region=subnet flags.
type backing map[string]string

func (b backing) String() string { return fmt.Sprint(map[string]string(b)) }

func (b backing) Set(v string) error {
	region, subnet, ok := strings.Cut(v, "=")
	if !ok || !strings.Contains(region, ":") || subnet == "" {
		return errors.New(`want provider:region=subnet, e.g. aws:eu-central-1=10.250.1.0/24`)
	}
	b[region] = subnet
	return nil
}

func run() error {
	opts := server.Options{Backing: backing{}}
	flag.StringVar(&opts.AWS, "aws", "127.0.0.1:0", "listen address of the EC2 API and the AWS Price List Query API (empty: no AWS)")
	flag.StringVar(&opts.GCE, "gce", "127.0.0.1:0", "listen address of the Compute Engine API, its token endpoint and the Cloud Billing Catalog API (empty: no GCE)")
	flag.StringVar(&opts.OpenStack, "openstack", "127.0.0.1:0", "listen address of Keystone, Nova, Neutron and Glance (empty: no OpenStack)")
	profile := flag.String("profile", cloudsim.ProfileKratzke2017, "latency profile: kratzke2017 (the paper's medians: machines are pending, stopping and shutting down for a while) or zero (none)")
	scale := flag.Float64("time-scale", 0.1, "multiply every latency by this (1: the profile's own times)")
	flag.Var(backing(opts.Backing), "back", "back a region's instances with local nodes: provider:region=subnet (repeatable; needs root)")
	flag.StringVar(&opts.BackingRoot, "backing-root", server.DefaultBackingRoot, "record directory of the backing nodes")
	flag.StringVar(&opts.BackingPublic, "public", "", "give backed instances public addresses from this IPv4 CIDR, mapped to their private ones as a cloud's 1:1 NAT (e.g. 100.127.0.0/16; empty: one address for both)")
	flag.BoolVar(&opts.BackingApart, "apart", false, "keep each backed region's network apart, as clouds' are: machines reach another region's only through public addresses (needs -public); two regions may share a subnet")
	creds := flag.String("credentials", "", "a transit credentials.json whose keys the clouds accept (default: each cloud's documented example key)")
	q := &opts.Quotas
	neutron := openstack.DefaultQuotas()
	flag.IntVar(&q.AWSVCPUs, "aws-vcpus", server.DefaultAWSVCPUs, "EC2: running On-Demand vCPUs per region (your account's is in Service Quotas, L-1216C47A; 0: unlimited)")
	flag.IntVar(&q.AWSRulesPerGroup, "aws-rules-per-group", ec2.DefaultRulesPerGroup, "EC2: inbound rules per security group")
	flag.IntVar(&q.GCECPUs, "gce-cpus", gce.DefaultCPUs, "Compute Engine: CPUS per region (0: unlimited)")
	flag.IntVar(&q.GCEFirewalls, "gce-firewalls", gce.DefaultFirewalls, "Compute Engine: FIREWALLS per project (0: unlimited)")
	flag.IntVar(&q.OpenStack.SecurityGroups, "openstack-security-groups", neutron.SecurityGroups, "Neutron: security groups per project (-1: unlimited)")
	flag.IntVar(&q.OpenStack.SecurityGroupRules, "openstack-security-group-rules", neutron.SecurityGroupRules, "Neutron: security group rules per project (-1: unlimited)")
	flag.IntVar(&q.OpenStack.FloatingIPs, "openstack-floating-ips", neutron.FloatingIPs, "Neutron: floating IPs per project (-1: unlimited)")
	flag.DurationVar(&opts.ListingLag, "listing-lag", 0, "EC2: keep a new instance out of DescribeInstances this long (cloud time), as EC2's eventual consistency does")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	var err error
	if opts.Profile, err = cloudsim.LookupProfile(*profile, *scale); err != nil {
		return err
	}
	if *creds != "" {
		if opts.Credentials, err = districts.LoadCredentials(*creds); err != nil {
			return err
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	e, err := server.Start(ctx, opts)
	if err != nil {
		return err
	}
	endpoints := map[string]string{}
	if e.AWSURL != "" {
		endpoints["aws"] = e.AWSURL
	}
	if e.GCEURL != "" {
		endpoints["gce"] = e.GCEURL
		endpoints["gce_token_uri"] = e.GCEURL + gce.TokenPath
	}
	if e.OpenStackAuthURL != "" {
		endpoints["openstack_auth_url"] = e.OpenStackAuthURL
	}
	if err := json.NewEncoder(os.Stdout).Encode(endpoints); err != nil {
		return errors.Join(err, e.Close(context.Background()))
	}
	fmt.Fprintf(os.Stderr, "cloudsim: serving (profile %s, time scale %g); interrupt to stop and remove every backing node\n", opts.Profile.Name, *scale)
	<-ctx.Done()
	return e.Close(context.Background())
}
