package server

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	billing "cloud.google.com/go/billing/apiv1"
	"cloud.google.com/go/billing/apiv1/billingpb"
	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/pricing"
	pricingtypes "github.com/aws/aws-sdk-go-v2/service/pricing/types"
	"google.golang.org/api/option"

	"github.com/cloudtransit/transit/awsbody"
	ec2sim "github.com/cloudtransit/transit/cloudsim/ec2"
	"github.com/cloudtransit/transit/cloudsim/gce"
	"github.com/cloudtransit/transit/districts"
)

func TestControlAPI(t *testing.T) {
	t.Parallel()
	e, err := Start(t.Context(), Options{AWS: "127.0.0.1:0", Credentials: []districts.Credential{
		{Type: "credential", ID: "a", Provider: "aws", AWSAccessKeyID: "AKIATEST", AWSSecretAccessKey: "s3cret"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	post := func(body string) int {
		t.Helper()
		resp, err := http.Post(e.AWSURL+"/_cloudsim/faults", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, bad := range []string{`{"kind": "meteor"}`, `{"op": "reboot", "kind": "throttle"}`, `{"kind": "slow", "delay": "soon"}`, `{"kind": "throttle", "extra": 1}`, `not json`, `{"op": "list", "kind": "failed"}`} {
		if code := post(bad); code != http.StatusBadRequest {
			t.Errorf("POST faults %s: %d, want 400", bad, code)
		}
	}

	client := ec2.New(ec2.Options{Region: "eu-central-1", BaseEndpoint: awssdk.String(e.AWSURL), HTTPClient: awsbody.Wrap(nil),
		Credentials: credentials.NewStaticCredentialsProvider("AKIATEST", "s3cret", ""), RetryMaxAttempts: 1})
	if _, err := client.DescribeInstances(t.Context(), &ec2.DescribeInstancesInput{}); err != nil {
		t.Fatalf("DescribeInstances with the configured key: %v", err)
	}
	if code := post(`{"op": "list", "kind": "throttle", "times": 1}`); code != http.StatusOK {
		t.Fatalf("POST a throttle fault: %d", code)
	}
	if _, err := client.DescribeInstances(t.Context(), &ec2.DescribeInstancesInput{}); err == nil || !strings.Contains(err.Error(), "RequestLimitExceeded") {
		t.Errorf("DescribeInstances after a throttle fault: %v, want RequestLimitExceeded", err)
	}
	if code := post(`{"op": "launch", "kind": "failed", "reason": "Server.InsufficientInstanceCapacity"}`); code != http.StatusOK {
		t.Fatalf("POST a failed-launch fault: %d", code)
	}
	run, err := client.RunInstances(t.Context(), &ec2.RunInstancesInput{ImageId: awssdk.String(ec2sim.DefaultImages()[0].ID),
		MinCount: awssdk.Int32(1), MaxCount: awssdk.Int32(1)})
	if err != nil {
		t.Fatalf("RunInstances with a failed-launch fault: %v", err)
	}
	failed, err := client.DescribeInstances(t.Context(), &ec2.DescribeInstancesInput{InstanceIds: []string{awssdk.ToString(run.Instances[0].InstanceId)}})
	if err != nil {
		t.Fatal(err)
	}
	if got := failed.Reservations[0].Instances[0]; got.State.Name != "stopped" || awssdk.ToString(got.StateReason.Code) != "Server.InsufficientInstanceCapacity" {
		t.Errorf("the failed launch's instance: %s %+v", got.State.Name, got.StateReason)
	}
	if _, err := client.TerminateInstances(t.Context(), &ec2.TerminateInstancesInput{InstanceIds: []string{awssdk.ToString(run.Instances[0].InstanceId)}}); err != nil {
		t.Fatal(err)
	}
	other := ec2.New(ec2.Options{Region: "eu-central-1", BaseEndpoint: awssdk.String(e.AWSURL), HTTPClient: awsbody.Wrap(nil),
		Credentials: credentials.NewStaticCredentialsProvider("AKIAOTHER", "x", ""), RetryMaxAttempts: 1})
	if _, err := other.DescribeInstances(t.Context(), &ec2.DescribeInstancesInput{}); err == nil || !strings.Contains(err.Error(), "AuthFailure") {
		t.Errorf("DescribeInstances with an unknown key: %v, want AuthFailure", err)
	}

	// The same endpoint answers the Price List Query API, with the same
	// keys.
	prices := pricing.New(pricing.Options{Region: "us-east-1", BaseEndpoint: awssdk.String(e.AWSURL), HTTPClient: awsbody.Wrap(nil),
		Credentials: credentials.NewStaticCredentialsProvider("AKIATEST", "s3cret", ""), RetryMaxAttempts: 1})
	out, err := prices.GetProducts(t.Context(), &pricing.GetProductsInput{ServiceCode: awssdk.String("AmazonEC2"), Filters: []pricingtypes.Filter{
		{Type: pricingtypes.FilterTypeTermMatch, Field: awssdk.String("instanceType"), Value: awssdk.String("t3.small")},
		{Type: pricingtypes.FilterTypeTermMatch, Field: awssdk.String("regionCode"), Value: awssdk.String("eu-central-1")},
	}})
	if err != nil || len(out.PriceList) == 0 {
		t.Errorf("GetProducts on the AWS endpoint: %v products, %v", out, err)
	}

	if _, err := e.EC2.Plant(t.Context(), "eu-central-1", map[string]string{"team": "x"}); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(e.AWSURL + "/_cloudsim/resources")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var rs []map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&rs); err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 || rs[0]["Kind"] != "instance" {
		t.Errorf("resources = %v, want the planted instance", rs)
	}
}

// The Compute Engine front end accepts the service accounts of the
// credentials' key files (and nothing else once there are some); a key
// file that cannot be read is an error naming the credential.
func TestStartGCE(t *testing.T) {
	dir := t.TempDir()
	key, err := gce.NewKey("transit-test-1", "sa@transit-test-1.iam.gserviceaccount.com", "http://127.0.0.1:1/token")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "sa.json")
	if err := os.WriteFile(file, key, 0o600); err != nil {
		t.Fatal(err)
	}
	creds := []districts.Credential{{Type: "credential", ID: "g", Provider: districts.ProviderGCE, GCEKeyFile: file}}
	e, err := Start(t.Context(), Options{GCE: "127.0.0.1:0", Credentials: creds})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	resp, err := http.Get(e.GCEURL + "/compute/v1/projects/transit-test-1/global/firewalls")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a request without a token: %d, want 401", resp.StatusCode)
	}
	// The same endpoint serves the Cloud Billing Catalog API to the
	// official client, with the same service accounts.
	catalog := func(key []byte) error {
		var k map[string]any
		if err := json.Unmarshal(key, &k); err != nil {
			t.Fatal(err)
		}
		k["token_uri"] = e.GCEURL + gce.TokenPath
		pointed, err := json.Marshal(k)
		if err != nil {
			t.Fatal(err)
		}
		c, err := billing.NewCloudCatalogRESTClient(t.Context(), option.WithEndpoint(e.GCEURL), option.WithAuthCredentialsJSON(option.ServiceAccount, pointed))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		it := c.ListServices(t.Context(), &billingpb.ListServicesRequest{})
		for {
			s, err := it.Next()
			if err != nil {
				return err
			}
			if s.GetDisplayName() == "Compute Engine" {
				return nil
			}
		}
	}
	if err := catalog(key); err != nil {
		t.Errorf("the Cloud Billing Catalog with the credential's key: %v, want Compute Engine listed", err)
	}
	other, err := gce.NewKey("transit-test-1", "other@transit-test-1.iam.gserviceaccount.com", "http://127.0.0.1:1/token")
	if err != nil {
		t.Fatal(err)
	}
	if err := catalog(other); err == nil || !strings.Contains(err.Error(), "invalid_grant") {
		t.Errorf("the Cloud Billing Catalog with an unknown key: %v, want the token refused", err)
	}

	resp, err = http.Get(e.GCEURL + "/_cloudsim/resources")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET resources: %d", resp.StatusCode)
	}

	creds[0].GCEKeyFile = filepath.Join(dir, "missing.json")
	if _, err := Start(t.Context(), Options{GCE: "127.0.0.1:0", Credentials: creds}); err == nil || !strings.Contains(err.Error(), `"g"`) {
		t.Errorf("Start with an unreadable key file: %v, want an error naming credential g", err)
	}
}
