package awsbody

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
)

// recorder answers every request itself and keeps the body it was given,
// as net/http's writer holds it while the SDK reads the answer.
type recorder struct {
	sent []byte
	body io.ReadCloser
}

func (r *recorder) Do(req *http.Request) (*http.Response, error) {
	r.body = req.Body
	// Read the body as net/http does, up to its length, leaving the final
	// check for a surplus until after the SDK has the answer.
	r.sent = make([]byte, req.ContentLength)
	if _, err := io.ReadFull(req.Body, r.sent); err != nil {
		return nil, err
	}
	const answer = `<DescribeInstancesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>r</requestId><reservationSet/></DescribeInstancesResponse>`
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/xml"}},
		Body: io.NopCloser(strings.NewReader(answer)), ContentLength: int64(len(answer)), Request: req}, nil
}

// After the SDK has its answer and closed the request body, net/http's
// check that the body has nothing left must see its end, not an error: an
// error there closes the connection under the answer (the emulator's
// TestFaults failed so once in fifty runs).
func TestClosedBodyReadsAsItsEnd(t *testing.T) {
	rec := &recorder{}
	c := ec2.New(ec2.Options{Region: "eu-central-1", BaseEndpoint: aws.String("http://127.0.0.1:1"),
		Credentials: credentials.NewStaticCredentialsProvider("AKID", "secret", ""), RetryMaxAttempts: 1,
		HTTPClient: Wrap(rec)})
	if _, err := c.DescribeInstances(t.Context(), &ec2.DescribeInstancesInput{}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(rec.sent, []byte("Action=DescribeInstances")) {
		t.Errorf("the body sent is %q, want the request's form", rec.sent)
	}
	// What net/http's writer does last (transfer.go, writeBody).
	if n, err := io.Copy(io.Discard, rec.body); err != nil || n != 0 {
		t.Errorf("the surplus check of a closed body: %d bytes, %v; want 0, nil", n, err)
	}
}

func TestWrapOnce(t *testing.T) {
	c := Wrap(nil)
	if Wrap(c) != c {
		t.Error("wrapping twice should return the wrapped client")
	}
	if Wrap(http.DefaultClient).(client).next != http.DefaultClient {
		t.Error("Wrap should keep the client it is given")
	}
}
