package aws

import (
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/smithy-go"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/drivers/cloudutil"
	"github.com/cloudtransit/transit/provider"
)

type cloudError = cloudutil.Error

func invalid(d districts.District, format string, args ...any) error {
	return cloudutil.Invalid(d, format, args...)
}

// Codes EC2 answers when it refuses the credentials or the signature.
var authCodes = map[string]bool{
	"AuthFailure": true, "UnauthorizedOperation": true, "SignatureDoesNotMatch": true, "InvalidClientTokenId": true,
	"IncompleteSignature": true, "MissingAuthenticationToken": true, "ExpiredToken": true, "RequestExpired": true,
	"OptInRequired": true, "Blocked": true, "AccessDenied": true, "AccessDeniedException": true,
	// The JSON protocol services' (the Price List's) words for the same.
	"UnrecognizedClientException": true, "InvalidSignatureException": true, "IncompleteSignatureException": true,
}

// configKeys names the district key behind EC2's answers about a value
// transit took from districts.json.
var configKeys = map[string]string{
	"InvalidAMIID.NotFound":     "aws_image_id",
	"InvalidAMIID.Malformed":    "aws_image_id",
	"InvalidAMIID.Unavailable":  "aws_image_id",
	"InvalidSubnetID.NotFound":  "aws_subnet_ids",
	"InvalidSubnetID.Malformed": "aws_subnet_ids",
	"InvalidSubnet":             "aws_subnet_ids",
	"InvalidVpcID.NotFound":     "aws_vpc_id",
	"InvalidVpcID.Malformed":    "aws_vpc_id",
	"InvalidInstanceType":       "flavors[].instance_type",
}

var throttles = retry.IsErrorThrottles(retry.DefaultThrottles)

// wrap says what failed (what: "launch node n1") and what it means.
func (drv *driver) wrap(what string, err error) error { return drv.wrapAPI("EC2", what, err) }

// wrapAPI is wrap for an error of api ("EC2", "the AWS Price List").
func (drv *driver) wrapAPI(api, what string, err error) error {
	if err == nil {
		return nil
	}
	prefix := fmt.Sprintf("aws district %q: %s", drv.d.ID, what)
	var nc *noCredentials
	if errors.As(err, &nc) {
		return &cloudError{Kind: provider.ErrCloudAuth, Msg: fmt.Sprintf("%s: no usable credentials from %s", prefix, drv.credName), Err: err}
	}
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		return fmt.Errorf("%s: %w", prefix, err)
	}
	code := ae.ErrorCode()
	switch {
	case authCodes[code]:
		return &cloudError{Kind: provider.ErrCloudAuth, Msg: fmt.Sprintf("%s: %s refused %s (%s)", prefix, api, drv.credName, code), Err: err}
	case throttles.IsErrorThrottle(err).Bool():
		return &cloudError{Kind: provider.ErrThrottled,
			Msg: fmt.Sprintf("%s: %s kept throttling the requests (%s) through %d attempts", prefix, api, code, drv.opts.RetryMaxAttempts), Err: err}
	case strings.HasSuffix(code, "LimitExceeded"):
		return &cloudError{Kind: provider.ErrQuota, Msg: fmt.Sprintf("%s: quota %s exceeded in %s: %s", prefix, code, drv.d.AWSRegion, ae.ErrorMessage()), Err: err}
	case configKeys[code] != "":
		return &cloudError{Kind: districts.ErrInvalid, Msg: fmt.Sprintf("%s: districts.json: district %q: %s: EC2 says %s", prefix, drv.d.ID, configKeys[code], ae.ErrorMessage()), Err: err}
	case code == "InvalidParameterValue" && strings.Contains(ae.ErrorMessage(), "InstanceType"):
		return &cloudError{Kind: districts.ErrInvalid, Msg: fmt.Sprintf("%s: districts.json: district %q: flavors[].instance_type: EC2 says %s", prefix, drv.d.ID, ae.ErrorMessage()), Err: err}
	case code == "InvalidParameterValue" && strings.Contains(ae.ErrorMessage(), "availability zone"):
		return &cloudError{Kind: districts.ErrInvalid, Msg: fmt.Sprintf("%s: districts.json: district %q: aws_zones: EC2 says %s", prefix, drv.d.ID, ae.ErrorMessage()), Err: err}
	case strings.HasSuffix(code, ".NotFound"):
		return &cloudError{Kind: provider.ErrCloudNotFound, Msg: prefix, Err: err}
	}
	return fmt.Errorf("%s: %w", prefix, err)
}

// code is err's EC2 error code, or "".
func code(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}
