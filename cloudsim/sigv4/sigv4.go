// Package sigv4 checks AWS Signature Version 4 the way AWS does, for
// cloudsim's AWS front ends (EC2, the Price List Query API): the access
// key id must be known, the request recent, and the signature the one its
// secret makes of the canonical request (method, path, query, the signed
// headers, the payload hash) for the service named. Each front end answers
// a refusal in its own protocol's words.
package sigv4

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Credential is the secret half of an access key a front end accepts.
type Credential struct {
	SecretAccessKey string
	// SessionToken, if set, must come with every request
	// (X-Amz-Security-Token), as for temporary credentials.
	SessionToken string
}

// Reason says why a request was refused.
type Reason int

const (
	// Malformed is no Authorization header of the algorithm, or one
	// without a credential scope of the service, signed headers or a
	// signature.
	Malformed Reason = iota + 1
	// UnknownKey is an access key id (or its session token) the front
	// end does not know.
	UnknownKey
	// Expired is an X-Amz-Date more than MaxSkew from the server's clock.
	Expired
	// BadSignature is a signature other than the key's secret makes.
	BadSignature
)

// Error is a refused request.
type Error struct{ Reason Reason }

func (e *Error) Error() string {
	switch e.Reason {
	case Malformed:
		return "sigv4: malformed authorization"
	case UnknownKey:
		return "sigv4: unknown access key"
	case Expired:
		return "sigv4: request expired"
	}
	return "sigv4: signature does not match"
}

const algorithm = "AWS4-HMAC-SHA256"

// MaxSkew is how far a request's X-Amz-Date may be from the server's clock.
const MaxSkew = 15 * time.Minute

// Verify checks r's signature over body for service ("ec2", "pricing")
// with creds, and returns the access key id and the region of its
// credential scope.
func Verify(r *http.Request, body []byte, service string, creds map[string]Credential) (keyID, region string, err error) {
	auth := r.Header.Get("Authorization")
	alg, rest, ok := strings.Cut(auth, " ")
	if !ok || alg != algorithm {
		return "", "", &Error{Malformed}
	}
	fields := map[string]string{}
	for part := range strings.SplitSeq(rest, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if ok {
			fields[k] = v
		}
	}
	scope := strings.Split(fields["Credential"], "/")
	if len(scope) != 5 || scope[3] != service || scope[4] != "aws4_request" || fields["SignedHeaders"] == "" || fields["Signature"] == "" {
		return "", "", &Error{Malformed}
	}
	keyID, date, region := scope[0], scope[1], scope[2]
	cred, known := creds[keyID]
	if !known {
		return "", "", &Error{UnknownKey}
	}
	amzDate := r.Header.Get("X-Amz-Date")
	at, perr := time.Parse("20060102T150405Z", amzDate)
	if perr != nil || !strings.HasPrefix(amzDate, date) {
		return "", "", &Error{Malformed}
	}
	if d := time.Since(at); d > MaxSkew || d < -MaxSkew {
		return "", "", &Error{Expired}
	}
	if cred.SessionToken != "" && r.Header.Get("X-Amz-Security-Token") != cred.SessionToken {
		return "", "", &Error{UnknownKey}
	}

	signed := strings.Split(fields["SignedHeaders"], ";")
	var canon strings.Builder
	for _, h := range signed {
		canon.WriteString(h)
		canon.WriteByte(':')
		switch h {
		case "host":
			canon.WriteString(r.Host)
		case "content-length":
			canon.WriteString(strconv.FormatInt(r.ContentLength, 10))
		default:
			vals := r.Header.Values(h)
			for i, v := range vals {
				if i > 0 {
					canon.WriteByte(',')
				}
				canon.WriteString(strings.Join(strings.Fields(v), " "))
			}
		}
		canon.WriteByte('\n')
	}
	payload := r.Header.Get("X-Amz-Content-Sha256")
	if payload == "" || payload == "UNSIGNED-PAYLOAD" {
		sum := sha256.Sum256(body)
		payload = hex.EncodeToString(sum[:])
	}
	path := r.URL.EscapedPath()
	if path == "" {
		path = "/"
	}
	request := strings.Join([]string{
		r.Method, path, canonicalQuery(r.URL.RawQuery), canon.String(), fields["SignedHeaders"], payload,
	}, "\n")
	reqHash := sha256.Sum256([]byte(request))
	credScope := strings.Join(scope[1:], "/")
	toSign := strings.Join([]string{algorithm, amzDate, credScope, hex.EncodeToString(reqHash[:])}, "\n")

	key := hmacSHA256([]byte("AWS4"+cred.SecretAccessKey), date)
	key = hmacSHA256(key, region)
	key = hmacSHA256(key, service)
	key = hmacSHA256(key, "aws4_request")
	want := hex.EncodeToString(hmacSHA256(key, toSign))
	if !hmac.Equal([]byte(want), []byte(fields["Signature"])) {
		return "", "", &Error{BadSignature}
	}
	return keyID, region, nil
}

func hmacSHA256(key []byte, data string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(data))
	return h.Sum(nil)
}

// canonicalQuery sorts the query by key and value and encodes it as
// RFC 3986 wants (spaces as %20, ~ unescaped).
func canonicalQuery(raw string) string {
	v, err := url.ParseQuery(raw)
	if err != nil || len(v) == 0 {
		return ""
	}
	var parts []string
	for k, vals := range v {
		for _, val := range vals {
			parts = append(parts, rfc3986(k)+"="+rfc3986(val))
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, "&")
}

func rfc3986(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(url.QueryEscape(s), "+", "%20"), "%7E", "~")
}
