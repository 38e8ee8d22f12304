package gce

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strings"

	"cloud.google.com/go/auth"
	"google.golang.org/api/googleapi"

	"github.com/cloudtransit/transit/control"
	"github.com/cloudtransit/transit/districts"
)

// cloudError is a Compute Engine failure with the kind transit tells apart
// (control.ErrQuota, ErrThrottled, ErrCloudAuth, ErrCloudNotFound,
// districts.ErrInvalid) and a message naming what to look at. It wraps the
// client's error, which never carries a secret.
type cloudError struct {
	kind error
	msg  string
	err  error
}

func (e *cloudError) Error() string {
	if e.err == nil {
		return e.msg
	}
	return e.msg + ": " + e.err.Error()
}

func (e *cloudError) Is(target error) bool { return e.kind != nil && target == e.kind }
func (e *cloudError) Unwrap() error        { return e.err }

// invalid is a configuration problem of the district.
func invalid(d districts.District, format string, args ...any) error {
	return &cloudError{kind: districts.ErrInvalid, msg: fmt.Sprintf("districts.json: district %q: ", d.ID) + fmt.Sprintf(format, args...)}
}

func sshCIDRs(d districts.District) ([]string, error) {
	var out []string
	for _, c := range d.SSHCIDRs {
		p, err := netip.ParsePrefix(c)
		if err != nil || p.Masked() != p {
			return nil, invalid(d, "ssh_cidrs: %q is not a CIDR block such as 203.0.113.0/24", c)
		}
		out = append(out, p.String())
	}
	if len(out) == 0 {
		out = []string{"0.0.0.0/0"}
	}
	return out, nil
}

var quotaName = regexp.MustCompile(`Quota '([^']+)'`)

// wrap says what failed (what: "launch node n1") and what it means.
func (drv *driver) wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	prefix := fmt.Sprintf("gce district %q: %s", drv.d.ID, what)
	var ae *auth.Error
	if errors.As(err, &ae) && ae.Response != nil && ae.Response.StatusCode < 500 && ae.Response.StatusCode != 429 {
		return &cloudError{kind: control.ErrCloudAuth, msg: fmt.Sprintf("%s: the token endpoint refused %s", prefix, drv.credName), err: err}
	}
	if errors.As(err, &ae) && ae.Response == nil {
		return &cloudError{kind: control.ErrCloudAuth, msg: fmt.Sprintf("%s: no usable credentials from %s", prefix, drv.credName), err: err}
	}
	var ge *googleapi.Error
	if !errors.As(err, &ge) {
		return fmt.Errorf("%s: %w", prefix, err)
	}
	switch {
	case ge.Code == 401 || ge.Code == 403 && hasReason(ge, "forbidden", "authError", "accessNotConfigured", "insufficientPermissions"):
		return &cloudError{kind: control.ErrCloudAuth, msg: fmt.Sprintf("%s: Compute Engine refused %s (%d)", prefix, drv.credName, ge.Code), err: err}
	case throttled(err):
		return &cloudError{kind: control.ErrThrottled,
			msg: fmt.Sprintf("%s: Compute Engine kept throttling the requests through %d attempts", prefix, drv.opts.RetryMaxAttempts), err: err}
	case hasReason(ge, "quotaExceeded"):
		return &cloudError{kind: control.ErrQuota, msg: fmt.Sprintf("%s: quota %s exceeded in %s", prefix, quotaOf(ge.Message), drv.d.GCERegion), err: err}
	case ge.Code == 404 && strings.Contains(ge.Message, "/images/"):
		return &cloudError{kind: districts.ErrInvalid, msg: fmt.Sprintf("%s: districts.json: district %q: gce_image, gce_image_family, gce_image_project: Compute Engine says %s", prefix, drv.d.ID, ge.Message), err: err}
	case ge.Code == 404 && strings.Contains(ge.Message, "/networks/"):
		return &cloudError{kind: districts.ErrInvalid, msg: fmt.Sprintf("%s: districts.json: district %q: gce_network: Compute Engine says %s", prefix, drv.d.ID, ge.Message), err: err}
	case ge.Code == 404 && strings.Contains(ge.Message, "/zones/") && !strings.Contains(ge.Message, "/instances/"):
		return &cloudError{kind: districts.ErrInvalid, msg: fmt.Sprintf("%s: districts.json: district %q: gce_zones: Compute Engine says %s", prefix, drv.d.ID, ge.Message), err: err}
	case ge.Code == 404 && strings.Contains(ge.Message, "projects/"+drv.d.GCEProjectID+"'"):
		return &cloudError{kind: districts.ErrInvalid, msg: fmt.Sprintf("%s: districts.json: district %q: gce_project_id: Compute Engine says %s", prefix, drv.d.ID, ge.Message), err: err}
	case ge.Code == 400 && strings.Contains(ge.Message, "machineType"):
		return &cloudError{kind: districts.ErrInvalid, msg: fmt.Sprintf("%s: districts.json: district %q: flavors[].machine_type: Compute Engine says %s", prefix, drv.d.ID, ge.Message), err: err}
	case ge.Code == 404:
		return &cloudError{kind: control.ErrCloudNotFound, msg: prefix, err: err}
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
