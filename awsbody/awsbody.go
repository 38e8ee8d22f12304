// Package awsbody works around a fault in how the AWS SDK for Go v2 hands
// request bodies to net/http, which closes a healthy connection under the
// answer being read.
//
// smithy-go wraps each request body in a reader whose WriteTo returns
// io.EOF once the SDK has closed the body, and the SDK closes it as soon
// as the response's headers arrive. net/http's writer, after copying a
// body of known length, copies the rest to check nothing is left over; if
// the server answered first, that copy meets the closed body, gets io.EOF
// as an error, and the transport closes the connection while the SDK is
// still reading the answer: the call fails with "failed to decode response
// body … use of closed network connection" though the server did the work.
// Seen against the emulator about once in fifty calls after an error
// answer; the real EC2 answers slower, not never.
package awsbody

import (
	"io"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
)

// Wrap returns c (nil: the SDK's default client) sending every request
// body as a plain reader, so net/http copies it with Read, which reports a
// closed body as its end and never as an error.
func Wrap(c aws.HTTPClient) aws.HTTPClient {
	if c == nil {
		c = awshttp.NewBuildableClient()
	}
	if _, ok := c.(client); ok {
		return c
	}
	return client{c}
}

type client struct{ next aws.HTTPClient }

func (c client) Do(r *http.Request) (*http.Response, error) {
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = readCloser{r.Body}
	}
	return c.next.Do(r)
}

// readCloser hides every method of the body but Read and Close, WriteTo
// above all.
type readCloser struct{ io.ReadCloser }
