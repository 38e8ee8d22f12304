package ec2

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

// Signature Version 4, checked the way AWS does: the access key id must be
// known, and the signature must be the one its secret makes of the
// canonical request (method, path, query, the signed headers, the payload
// hash). The region is the credential scope's.

const sigAlgorithm = "AWS4-HMAC-SHA256"

// maxSkew is how far a request's X-Amz-Date may be from the server's clock.
const maxSkew = 15 * time.Minute

func authFailure() *apiError {
	return &apiError{status: 401, code: "AuthFailure", msg: "AWS was not able to validate the provided access credentials"}
}

// verify checks r's signature over body and returns the access key id and
// the region of its credential scope.
func (s *Server) verify(r *http.Request, body []byte) (keyID, region string, err *apiError) {
	auth := r.Header.Get("Authorization")
	alg, rest, ok := strings.Cut(auth, " ")
	if !ok || alg != sigAlgorithm {
		return "", "", authFailure()
	}
	fields := map[string]string{}
	for part := range strings.SplitSeq(rest, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if ok {
			fields[k] = v
		}
	}
	scope := strings.Split(fields["Credential"], "/")
	if len(scope) != 5 || scope[3] != "ec2" || scope[4] != "aws4_request" || fields["SignedHeaders"] == "" || fields["Signature"] == "" {
		return "", "", authFailure()
	}
	keyID, date, region := scope[0], scope[1], scope[2]
	cred, known := s.creds[keyID]
	if !known {
		return "", "", authFailure()
	}
	amzDate := r.Header.Get("X-Amz-Date")
	at, perr := time.Parse("20060102T150405Z", amzDate)
	if perr != nil || !strings.HasPrefix(amzDate, date) {
		return "", "", authFailure()
	}
	if d := time.Since(at); d > maxSkew || d < -maxSkew {
		return "", "", &apiError{status: 400, code: "RequestExpired", msg: "Request has expired."}
	}
	if cred.SessionToken != "" && r.Header.Get("X-Amz-Security-Token") != cred.SessionToken {
		return "", "", authFailure()
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
	toSign := strings.Join([]string{sigAlgorithm, amzDate, credScope, hex.EncodeToString(reqHash[:])}, "\n")

	key := hmacSHA256([]byte("AWS4"+cred.SecretAccessKey), date)
	key = hmacSHA256(key, region)
	key = hmacSHA256(key, "ec2")
	key = hmacSHA256(key, "aws4_request")
	want := hex.EncodeToString(hmacSHA256(key, toSign))
	if !hmac.Equal([]byte(want), []byte(fields["Signature"])) {
		return "", "", authFailure()
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
