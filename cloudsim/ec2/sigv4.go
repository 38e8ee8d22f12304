package ec2

import (
	"errors"
	"net/http"

	"github.com/cloudtransit/transit/cloudsim/sigv4"
)

// Signature Version 4, checked by package sigv4 for service "ec2"; the
// region is the credential scope's. EC2 answers every refusal 401
// AuthFailure but an expired request, 400 RequestExpired.

func authFailure() *apiError {
	return &apiError{status: 401, code: "AuthFailure", msg: "AWS was not able to validate the provided access credentials"}
}

// verify checks r's signature over body and returns the access key id and
// the region of its credential scope.
func (s *Server) verify(r *http.Request, body []byte) (keyID, region string, err *apiError) {
	keyID, region, verr := sigv4.Verify(r, body, "ec2", s.creds)
	var se *sigv4.Error
	switch {
	case verr == nil:
		return keyID, region, nil
	case errors.As(verr, &se) && se.Reason == sigv4.Expired:
		return "", "", &apiError{status: 400, code: "RequestExpired", msg: "Request has expired."}
	}
	return "", "", authFailure()
}
