package aws

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloudtransit/transit/cloudsim"
	"github.com/cloudtransit/transit/cloudsim/ec2"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

func TestThrottling(t *testing.T) {
	t.Parallel()
	w := newWorld(t, ec2.Options{})
	drv, g, key := ready(t, w, "thr")
	w.actions()

	// Throttled twice: the SDK's retries get through.
	w.sim.Faults.Add(cloudsim.Fault{Op: cloudsim.OpList, Kind: cloudsim.FaultThrottle, Times: 2})
	if _, _, err := drv.List(t.Context(), "thr"); err != nil {
		t.Fatalf("List throttled twice: %v", err)
	}
	if n := count(w.actions(), "DescribeInstances"); n != 3 {
		t.Errorf("%d DescribeInstances attempts, want 3", n)
	}
	w.sim.Faults.Add(cloudsim.Fault{Op: cloudsim.OpLaunch, Kind: cloudsim.FaultThrottle, Times: 2})
	if _, err := drv.Launch(t.Context(), launchSpec("thr", "aws-test", "thr-n1", "", g.ProviderID, key)); err != nil {
		t.Fatalf("Launch throttled twice: %v", err)
	}
	if insts, _, err := drv.List(t.Context(), "thr"); err != nil || len(insts) != 1 {
		t.Errorf("after a throttled launch: %v %+v", err, insts)
	}

	// Throttled for good: ErrThrottled once the attempts are spent (a
	// driver that retried on would run into the deadline).
	w.sim.Faults.Add(cloudsim.Fault{Op: cloudsim.OpList, Kind: cloudsim.FaultThrottle, Times: -1})
	w.actions()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	_, _, err := drv.List(ctx, "thr")
	if ctx.Err() != nil {
		t.Fatalf("List throttled for good ran until the deadline: %v; retries must be bounded", err)
	}
	wantKind(t, err, provider.ErrThrottled)
	if n, want := count(w.actions(), "DescribeInstances"), fast().RetryMaxAttempts; n != want {
		t.Errorf("List throttled for good made %d DescribeInstances attempts, want RetryMaxAttempts (%d)", n, want)
	}
	if !strings.Contains(err.Error(), "RequestLimitExceeded") || !strings.Contains(err.Error(), "aws-test") {
		t.Errorf("throttling error: %v", err)
	}
	w.sim.Faults.Clear()

	// Server errors are retried too, and are no kind of their own.
	w.sim.Faults.Add(cloudsim.Fault{Op: cloudsim.OpList, Kind: cloudsim.FaultServer, Times: 2})
	if _, _, err := drv.List(t.Context(), "thr"); err != nil {
		t.Fatalf("List after two server errors: %v", err)
	}
	w.sim.Faults.Add(cloudsim.Fault{Op: cloudsim.OpList, Kind: cloudsim.FaultServer, Times: -1})
	_, _, err = drv.List(t.Context(), "thr")
	noSecret(t, err)
	for _, kind := range []error{provider.ErrThrottled, provider.ErrQuota, provider.ErrCloudAuth, districts.ErrInvalid} {
		if err == nil || errors.Is(err, kind) {
			t.Errorf("List on a failing server: %v", err)
		}
	}
}

func TestFullJitter(t *testing.T) {
	t.Parallel()
	j := fullJitter{base: 100 * time.Millisecond, max: time.Second}
	for attempt, ceil := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 4: 800 * time.Millisecond, 5: time.Second, 40: time.Second} {
		seen := map[time.Duration]bool{}
		for range 200 {
			d, err := j.BackoffDelay(attempt, nil)
			if err != nil || d < 0 || d > ceil {
				t.Fatalf("attempt %d: %s, %v; want within [0, %s]", attempt, d, err, ceil)
			}
			seen[d] = true
		}
		if len(seen) < 10 {
			t.Errorf("attempt %d: %d distinct delays in 200: no jitter", attempt, len(seen))
		}
	}
}

func TestAuthFailures(t *testing.T) {
	t.Parallel()
	w := newWorld(t, ec2.Options{})
	drv := w.driver(w.district(), credential(), fast())

	w.sim.Faults.Add(cloudsim.Fault{Kind: cloudsim.FaultAuth, Times: -1})
	w.actions()
	_, _, err := drv.List(t.Context(), "auth")
	wantKind(t, err, provider.ErrCloudAuth)
	if !strings.Contains(err.Error(), `credential "aws-cred"`) {
		t.Errorf("auth error does not name the credential: %v", err)
	}
	if n := len(w.actions()); n != 1 {
		t.Errorf("%d requests: a refused credential was retried", n)
	}
	w.sim.Faults.Clear()

	bad := credential()
	bad.AWSSecretAccessKey = "wrong/" + secretKey
	_, _, err = w.driver(w.district(), bad, fast()).List(t.Context(), "auth")
	wantKind(t, err, provider.ErrCloudAuth)
	if strings.Contains(err.Error(), bad.AWSSecretAccessKey.Reveal()) || !strings.Contains(err.Error(), `credential "aws-cred"`) {
		t.Errorf("auth error: %v", err)
	}
	unknown := credential()
	unknown.AWSAccessKeyID = "AKIAUNKNOWN000000000"
	_, _, err = w.driver(w.district(), unknown, fast()).List(t.Context(), "auth")
	wantKind(t, err, provider.ErrCloudAuth)
}

// isolateAWSEnv makes the SDK's default chain see only what a test sets.
func isolateAWSEnv(t *testing.T) {
	t.Helper()
	none := filepath.Join(t.TempDir(), "none")
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_SESSION_TOKEN": "", "AWS_PROFILE": "",
		"AWS_CONFIG_FILE": none, "AWS_SHARED_CREDENTIALS_FILE": none, "AWS_EC2_METADATA_DISABLED": "true",
		"AWS_WEB_IDENTITY_TOKEN_FILE": "", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "", "AWS_CONTAINER_CREDENTIALS_FULL_URI": "",
		"AWS_ENDPOINT_URL": "", "AWS_ENDPOINT_URL_EC2": "",
	} {
		t.Setenv(k, v)
	}
}

// Not parallel: these tests set the environment the SDK reads.
func TestDefaultCredentialChain(t *testing.T) {
	w := newWorld(t, ec2.Options{})
	isolateAWSEnv(t)

	_, _, err := w.driver(w.district(), nil, fast()).List(t.Context(), "chain")
	wantKind(t, err, provider.ErrCloudAuth)
	if !strings.Contains(err.Error(), "the SDK's default credential chain") {
		t.Errorf("error does not name the default chain: %v", err)
	}

	t.Setenv("AWS_ACCESS_KEY_ID", keyID)
	t.Setenv("AWS_SECRET_ACCESS_KEY", secretKey)
	t.Setenv("AWS_SESSION_TOKEN", session)
	if _, _, err := w.driver(w.district(), nil, fast()).List(t.Context(), "chain"); err != nil {
		t.Fatalf("List with credentials from the environment: %v", err)
	}
	t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong-"+secretKey)
	_, _, err = w.driver(w.district(), nil, fast()).List(t.Context(), "chain")
	wantKind(t, err, provider.ErrCloudAuth)
	if strings.Contains(err.Error(), "wrong-"+secretKey) || !strings.Contains(err.Error(), "default credential chain") {
		t.Errorf("auth error: %v", err)
	}
}

func TestProfileCredential(t *testing.T) {
	w := newWorld(t, ec2.Options{})
	isolateAWSEnv(t)
	dir := t.TempDir()
	creds := filepath.Join(dir, "credentials")
	body := "[transit-test]\naws_access_key_id = " + keyID + "\naws_secret_access_key = " + secretKey + "\naws_session_token = " + session + "\n"
	if err := os.WriteFile(creds, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", creds)
	cred := &districts.Credential{Type: "credential", ID: "by-profile", Provider: districts.ProviderAWS, AWSProfile: "transit-test"}
	if _, _, err := w.driver(w.district(), cred, fast()).List(t.Context(), "prof"); err != nil {
		t.Fatalf("List with a profile: %v", err)
	}
	cred.AWSProfile = "no-such-profile"
	_, err := New(t.Context(), w.district(), cred, fast())
	wantKind(t, err, districts.ErrInvalid)
	if !strings.Contains(err.Error(), `credential "by-profile"`) || !strings.Contains(err.Error(), "no-such-profile") {
		t.Errorf("missing profile: %v", err)
	}
}

func TestNewRefusesBadDistricts(t *testing.T) {
	t.Parallel()
	base := districts.District{ID: "d", Provider: districts.ProviderAWS, AWSRegion: region}
	for _, tc := range []struct {
		name string
		d    func(districts.District) districts.District
		cred *districts.Credential
		msg  string
	}{
		{"provider", func(d districts.District) districts.District { d.Provider = "gce"; return d }, nil, "provider"},
		{"region", func(d districts.District) districts.District { d.AWSRegion = ""; return d }, nil, "aws_region"},
		{"ssh cidr", func(d districts.District) districts.District { d.SSHCIDRs = []string{"10.0.0.1/8"}; return d }, nil, "ssh_cidrs"},
		{"credential provider", func(d districts.District) districts.District { return d },
			&districts.Credential{ID: "c", Provider: "gce"}, `credential "c"`},
	} {
		_, err := New(t.Context(), tc.d(base), tc.cred, Options{})
		if !errors.Is(err, districts.ErrInvalid) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: %v, want ErrInvalid naming %s", tc.name, err, tc.msg)
		}
	}
}

// TestNoSecretInErrors provokes every kind of failure with a credential
// whose secrets are distinctive, and greps each error for them.
func TestNoSecretInErrors(t *testing.T) {
	t.Parallel()
	w := newWorld(t, ec2.Options{VCPULimit: 2, RulesPerGroup: 2})
	drv, g, key := ready(t, w, "leak")
	wrong := credential()
	wrong.AWSSecretAccessKey = "wrong/" + secretKey
	bad := w.driver(w.district(), wrong, fast())
	ctx := t.Context()
	launch := func(d *driver, node string) error {
		_, err := d.Launch(ctx, launchSpec("leak", "aws-test", node, "", g.ProviderID, key))
		return err
	}
	list := func(d *driver) error {
		_, _, err := d.List(ctx, "leak")
		return err
	}
	var errs []error
	errs = append(errs, list(bad), launch(bad, "leak-n0"))
	for _, f := range []cloudsim.Fault{
		{Kind: cloudsim.FaultAuth, Times: -1}, {Kind: cloudsim.FaultThrottle, Times: -1}, {Kind: cloudsim.FaultServer, Times: -1},
		{Op: cloudsim.OpLaunch, Kind: cloudsim.FaultQuota}, {Op: cloudsim.OpLaunch, Kind: cloudsim.FaultLost, Times: -1},
	} {
		w.sim.Faults.Add(f)
		errs = append(errs, list(drv), launch(drv, "leak-n1"))
		_, err := drv.EnsureGroup(ctx, groupSpec("leak", "aws-test", "192.0.2.1"))
		errs = append(errs, err, drv.Terminate(ctx, provider.Instance{ProviderID: "i-0123456789abcdef0", Tags: map[string]string{districts.TagCluster: "leak"}}))
		w.sim.Faults.Clear()
	}
	_, err := drv.EnsureGroup(ctx, groupSpec("leak", "aws-test", "192.0.2.1", "192.0.2.2"))
	errs = append(errs, err, launch(drv, "leak-n2"), launch(drv, "leak-n3"))
	failed := 0
	for _, err := range errs {
		if err == nil {
			continue
		}
		failed++
		for _, s := range []string{secretKey, session, wrong.AWSSecretAccessKey.Reveal()} {
			if strings.Contains(err.Error(), s) || strings.Contains(fmt.Sprintf("%+v %#v", err, err), s) {
				t.Errorf("error shows a secret: %v", err)
			}
		}
	}
	if failed < 15 {
		t.Errorf("only %d of %d calls failed: the faults did not bite", failed, len(errs))
	}
}
