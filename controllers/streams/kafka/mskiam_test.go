package kafka

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A Secret with sasl.mechanism AWS_MSK_IAM logs in as Amazon MSK checks
// it: the broker here takes the login's signed request and signs it again
// with the AWS SDK's own SigV4 signer (service kafka-cluster) from the
// access key's secret; the signatures must match. A wrong secret key or
// a session token left out is refused and explained; no explanation shows
// a credential.
func TestMSKIAMOnTheWire(t *testing.T) {
	const (
		accessKey = "AKIAIOSFODNN7EXAMPLE"
		secretKey = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
		token     = "session-token-of-a-role"
		region    = "eu-central-1"
	)
	// The broker is dialled at 127.0.0.1, a name without a region: the
	// region comes from the environment, as for a broker behind a proxy.
	t.Setenv("AWS_REGION", region)
	addr := mskBroker(t, aws.Credentials{AccessKeyID: accessKey, SecretAccessKey: secretKey, SessionToken: token}, region)
	good := Security{Mechanism: "AWS_MSK_IAM", Username: accessKey, Password: secretKey, SessionToken: token}
	if err := produceWith(t, addr, good, "in"); err != nil {
		t.Fatalf("the signed login was refused: %v (%s)", err, good.Explain(err))
	}
	for what, s := range map[string]Security{
		"a wrong secret key":        {Mechanism: "AWS_MSK_IAM", Username: accessKey, Password: "not-the-secret", SessionToken: token},
		"the session token missing": {Mechanism: "AWS_MSK_IAM", Username: accessKey, Password: secretKey},
	} {
		err := produceWith(t, addr, s, "in")
		if err == nil {
			t.Errorf("%s: the login was taken", what)
			continue
		}
		got := s.Explain(err)
		if !strings.Contains(got, "refused the login") {
			t.Errorf("%s: explained %q, want a refused login", what, got)
		}
		for _, secret := range []string{secretKey, "not-the-secret", token} {
			if strings.Contains(got, secret) || strings.Contains(s.String(), secret) {
				t.Errorf("%s: the explanation or description shows a credential", what)
			}
		}
	}
}

// mskBroker is a kfake broker that takes AWS_MSK_IAM logins signed with
// creds for region, checked as MSK does, and refuses any other.
func mskBroker(t *testing.T, creds aws.Credentials, region string) string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "in"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	c.ControlKey(int16(kmsg.SASLHandshake), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.SASLHandshakeRequest)
		resp := r.ResponseKind().(*kmsg.SASLHandshakeResponse)
		resp.SupportedMechanisms = []string{"AWS_MSK_IAM"}
		if r.Mechanism != "AWS_MSK_IAM" {
			resp.ErrorCode = kerr.UnsupportedSaslMechanism.Code
		}
		return resp, nil, true
	})
	c.ControlKey(int16(kmsg.SASLAuthenticate), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.SASLAuthenticateRequest)
		resp := r.ResponseKind().(*kmsg.SASLAuthenticateResponse)
		if err := checkMSKLogin(r.SASLAuthBytes, creds, region); err != nil {
			resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
			resp.ErrorMessage = kmsg.StringPtr(err.Error())
			return resp, nil, true
		}
		resp.SASLAuthBytes = []byte(`{"version":"2020_10_22","request-id":"test"}`)
		return resp, nil, true
	})
	return c.ListenAddrs()[0]
}

// checkMSKLogin checks a login as Amazon MSK does: the payload is a
// presigned GET of https://host/?Action=kafka-cluster:Connect; signing
// that request again with creds gives the same signature.
func checkMSKLogin(payload []byte, creds aws.Credentials, region string) error {
	var login map[string]string
	if err := json.Unmarshal(payload, &login); err != nil {
		return err
	}
	for key, want := range map[string]string{"version": "2020_10_22", "action": "kafka-cluster:Connect",
		"x-amz-algorithm": "AWS4-HMAC-SHA256", "x-amz-signedheaders": "host", "x-amz-expires": "900"} {
		if login[key] != want {
			return &loginError{key + " is " + login[key] + ", want " + want}
		}
	}
	at, err := time.Parse("20060102T150405Z", login["x-amz-date"])
	if err != nil {
		return err
	}
	if d := time.Since(at); d < -5*time.Minute || d > 15*time.Minute {
		return &loginError{"x-amz-date " + login["x-amz-date"] + " is not now"}
	}
	query := url.Values{"Action": {"kafka-cluster:Connect"}, "X-Amz-Expires": {"900"}}
	if login["x-amz-security-token"] != "" {
		query.Set("X-Amz-Security-Token", login["x-amz-security-token"])
	}
	req, err := http.NewRequest(http.MethodGet, "https://"+login["host"]+"/?"+query.Encode(), nil)
	if err != nil {
		return err
	}
	const emptyBody = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
	presigned, _, err := v4.NewSigner().PresignHTTP(context.Background(), creds, req, emptyBody, "kafka-cluster", region, at)
	if err != nil {
		return err
	}
	u, err := url.Parse(presigned)
	if err != nil {
		return err
	}
	if want := u.Query().Get("X-Amz-Credential"); login["x-amz-credential"] != want {
		return &loginError{"the credential scope " + login["x-amz-credential"] + " is not " + want}
	}
	if u.Query().Get("X-Amz-Signature") != login["x-amz-signature"] {
		return &loginError{"the signature does not match"}
	}
	return nil
}

type loginError struct{ msg string }

func (e *loginError) Error() string { return "AWS_MSK_IAM login: " + e.msg }
