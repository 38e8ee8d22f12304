package gce

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"cloud.google.com/go/auth"
	"google.golang.org/api/googleapi"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/drivers/cloudutil"
	"github.com/cloudtransit/transit/provider"
)

type cloudError = cloudutil.Error

func invalid(d districts.District, format string, args ...any) error {
	return cloudutil.Invalid(d, format, args...)
}

var quotaName = regexp.MustCompile(`Quota '([^']+)'`)

// wrap says what failed (what: "launch node n1") and what it means.
func (drv *driver) wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	prefix := fmt.Sprintf("gce district %q: %s", drv.d.ID, what)
	if cerr := drv.tokenError(prefix, err); cerr != nil {
		return cerr
	}
	var ge *googleapi.Error
	if !errors.As(err, &ge) {
		return fmt.Errorf("%s: %w", prefix, err)
	}
	switch {
	case ge.Code == 401 || ge.Code == 403 && hasReason(ge, "forbidden", "authError", "accessNotConfigured", "insufficientPermissions"):
		return &cloudError{Kind: provider.ErrCloudAuth, Msg: fmt.Sprintf("%s: Compute Engine refused %s (%d)", prefix, drv.credName, ge.Code), Err: err}
	case throttled(err):
		return &cloudError{Kind: provider.ErrThrottled,
			Msg: fmt.Sprintf("%s: Compute Engine kept throttling the requests through %d attempts", prefix, drv.opts.RetryMaxAttempts), Err: err}
	case hasReason(ge, "quotaExceeded"):
		return &cloudError{Kind: provider.ErrQuota, Msg: fmt.Sprintf("%s: quota %s exceeded in %s", prefix, quotaOf(ge.Message), drv.d.GCERegion), Err: err}
	case ge.Code == 404 && strings.Contains(ge.Message, "/images/"):
		return &cloudError{Kind: districts.ErrInvalid, Msg: fmt.Sprintf("%s: districts.json: district %q: gce_image, gce_image_family, gce_image_project: Compute Engine says %s", prefix, drv.d.ID, ge.Message), Err: err}
	case ge.Code == 404 && strings.Contains(ge.Message, "/networks/"):
		return &cloudError{Kind: districts.ErrInvalid, Msg: fmt.Sprintf("%s: districts.json: district %q: gce_network: Compute Engine says %s", prefix, drv.d.ID, ge.Message), Err: err}
	case ge.Code == 404 && strings.Contains(ge.Message, "/zones/") && !strings.Contains(ge.Message, "/instances/"):
		return &cloudError{Kind: districts.ErrInvalid, Msg: fmt.Sprintf("%s: districts.json: district %q: gce_zones: Compute Engine says %s", prefix, drv.d.ID, ge.Message), Err: err}
	case ge.Code == 404 && strings.Contains(ge.Message, "projects/"+drv.d.GCEProjectID+"'"):
		return &cloudError{Kind: districts.ErrInvalid, Msg: fmt.Sprintf("%s: districts.json: district %q: gce_project_id: Compute Engine says %s", prefix, drv.d.ID, ge.Message), Err: err}
	case ge.Code == 400 && strings.Contains(ge.Message, "machineType"):
		return &cloudError{Kind: districts.ErrInvalid, Msg: fmt.Sprintf("%s: districts.json: district %q: flavors[].machine_type: Compute Engine says %s", prefix, drv.d.ID, ge.Message), Err: err}
	case ge.Code == 404:
		return &cloudError{Kind: provider.ErrCloudNotFound, Msg: prefix, Err: err}
	}
	return fmt.Errorf("%s: %w", prefix, err)
}

// tokenError is err as a failure to get a token with the district's
// credentials, or nil when it is another error.
func (drv *driver) tokenError(prefix string, err error) error {
	var ae *auth.Error
	if errors.As(err, &ae) && ae.Response != nil && ae.Response.StatusCode < 500 && ae.Response.StatusCode != 429 {
		return &cloudError{Kind: provider.ErrCloudAuth, Msg: fmt.Sprintf("%s: the token endpoint refused %s", prefix, drv.credName), Err: err}
	}
	if errors.As(err, &ae) && ae.Response == nil {
		return &cloudError{Kind: provider.ErrCloudAuth, Msg: fmt.Sprintf("%s: no usable credentials from %s", prefix, drv.credName), Err: err}
	}
	return nil
}

// wrapCatalog is wrap for the Cloud Billing Catalog API, whose errors
// name no Compute Engine resource.
func (drv *driver) wrapCatalog(what string, err error) error {
	prefix := fmt.Sprintf("gce district %q: %s", drv.d.ID, what)
	if cerr := drv.tokenError(prefix, err); cerr != nil {
		return cerr
	}
	var ge *googleapi.Error
	switch {
	case !errors.As(err, &ge):
	case throttled(err):
		return &cloudError{Kind: provider.ErrThrottled,
			Msg: fmt.Sprintf("%s: %s kept throttling the requests through %d attempts", prefix, catalogName, drv.opts.RetryMaxAttempts), Err: err}
	case ge.Code == 401 || ge.Code == 403:
		return &cloudError{Kind: provider.ErrCloudAuth, Msg: fmt.Sprintf("%s: %s refused %s (%d)", prefix, catalogName, drv.credName, ge.Code), Err: err}
	}
	return fmt.Errorf("%s: %w", prefix, err)
}

// quotaOf names the quota in a quotaExceeded message ("Quota 'CPUS'
// exceeded. Limit: 24.0 in region europe-west1.").
func quotaOf(msg string) string {
	if m := quotaName.FindStringSubmatch(msg); m != nil {
		return m[1]
	}
	return "(unnamed: " + msg + ")"
}

// isNotFound says whether err is Compute Engine's 404.
func isNotFound(err error) bool {
	var ge *googleapi.Error
	return errors.As(err, &ge) && ge.Code == 404
}

// isConflict says whether err is Compute Engine's 409 (the resource
// exists already).
func isConflict(err error) bool {
	var ge *googleapi.Error
	return errors.As(err, &ge) && ge.Code == 409
}
