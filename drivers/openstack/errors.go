package openstack

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/gophercloud/gophercloud/v2"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/drivers/cloudutil"
	"github.com/cloudtransit/transit/provider"
)

type cloudError = cloudutil.Error

func invalid(d districts.District, format string, args ...any) error {
	return cloudutil.Invalid(d, format, args...)
}

func sshCIDRs(d districts.District) ([]string, error) { return cloudutil.SSHCIDRs(d) }

// quotaName finds the quota in Nova's "Quota exceeded for instances: ...".
var quotaName = regexp.MustCompile(`Quota exceeded for ([A-Za-z0-9_,\s-]+?)[:.]`)

// wrap says what failed (what: "launch node n1") and what it means.
func (drv *driver) wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	var already *cloudError
	if errors.As(err, &already) {
		return err
	}
	prefix := fmt.Sprintf("openstack district %q: %s", drv.d.ID, what)
	var reauth *gophercloud.ErrUnableToReauthenticate
	if errors.As(err, &reauth) {
		return &cloudError{Kind: provider.ErrCloudAuth, Msg: fmt.Sprintf("%s: Keystone refused %s", prefix, drv.credName), Err: err}
	}
	body := ""
	var ue gophercloud.ErrUnexpectedResponseCode
	if errors.As(err, &ue) {
		body = string(ue.Body)
	}
	switch s := status(err); {
	case s == 401:
		return &cloudError{Kind: provider.ErrCloudAuth, Msg: fmt.Sprintf("%s: OpenStack refused %s (401)", prefix, drv.credName), Err: err}
	case s == 429:
		return &cloudError{Kind: provider.ErrThrottled,
			Msg: fmt.Sprintf("%s: OpenStack kept rate-limiting the requests through %d attempts", prefix, drv.opts.RetryMaxAttempts), Err: err}
	case s == 409 && neutronType(err) == "OverQuota":
		return drv.overQuota(prefix, body, err)
	case (s == 403 || s == 413) && strings.Contains(body, "Quota exceeded"):
		return &cloudError{Kind: provider.ErrQuota, Msg: fmt.Sprintf("%s: quota %s exceeded in %s", prefix, quotaOf(body), drv.d.OSRegion), Err: err}
	case s == 403:
		return &cloudError{Kind: provider.ErrCloudAuth, Msg: fmt.Sprintf("%s: OpenStack refused %s the request (403)", prefix, drv.credName), Err: err}
	case s == 400 && strings.Contains(body, "image"):
		return &cloudError{Kind: districts.ErrInvalid, Msg: fmt.Sprintf("%s: districts.json: district %q: os_image: OpenStack says %s", prefix, drv.d.ID, body), Err: err}
	case s == 400 && strings.Contains(body, "Flavor"):
		return &cloudError{Kind: districts.ErrInvalid, Msg: fmt.Sprintf("%s: districts.json: district %q: flavors[].os_flavor: OpenStack says %s", prefix, drv.d.ID, body), Err: err}
	case s == 400 && strings.Contains(body, "availability zone"):
		return &cloudError{Kind: districts.ErrInvalid, Msg: fmt.Sprintf("%s: districts.json: district %q: os_zones: OpenStack says %s", prefix, drv.d.ID, body), Err: err}
	case s == 400 && strings.Contains(body, "Network"):
		return &cloudError{Kind: districts.ErrInvalid, Msg: fmt.Sprintf("%s: districts.json: district %q: os_network: OpenStack says %s", prefix, drv.d.ID, body), Err: err}
	case s == 404:
		return &cloudError{Kind: provider.ErrCloudNotFound, Msg: prefix, Err: err}
	}
	return fmt.Errorf("%s: %w", prefix, err)
}

// quotaOf names the quota in a Nova quota message.
func quotaOf(body string) string {
	if m := quotaName.FindStringSubmatch(body); m != nil {
		return strings.TrimSpace(m[1])
	}
	return "(unnamed: " + body + ")"
}

// neutronOverQuota finds the resources in Neutron's OverQuota message,
// "Quota exceeded for resources: ['security_group_rule']."
var neutronOverQuota = regexp.MustCompile(`Quota exceeded for resources: \[([^\]]*)\]`)

// quotaHints are what to do about an exhausted Neutron quota: what counts
// against it and the option of "openstack quota set" that raises it.
var quotaHints = map[string]struct{ counts, option string }{
	"security_group": {"every security group of the project counts, its default group too: delete the groups nothing uses",
		"--secgroups"},
	"security_group_rule": {"every rule of the project's groups counts (the default group's 4, each group's 2 egress rules; " +
		"transit's group holds one rule per node address and one per ssh_cidrs entry): delete rules nothing needs, " +
		"or put fewer nodes in this district", "--secgroup-rules"},
	"floatingip": {"every floating IP of the project counts, attached or not: release the ones no server uses " +
		"(openstack floating ip list --status DOWN)", "--floating-ips"},
}

// overQuota is Neutron's 409 OverQuota as provider.ErrQuota, naming the
// resources, the project, and what to do.
func (drv *driver) overQuota(prefix, body string, err error) error {
	var names []string
	if m := neutronOverQuota.FindStringSubmatch(body); m != nil {
		for _, n := range strings.Split(m[1], ",") {
			if n = strings.Trim(strings.TrimSpace(n), `'"`); n != "" {
				names = append(names, n)
			}
		}
	}
	if len(names) == 0 {
		names = []string{"(unnamed: " + body + ")"}
	}
	project, arg := "the project of "+drv.credName, "PROJECT"
	if drv.project != "" {
		project, arg = fmt.Sprintf("project %q", drv.project), drv.project
	}
	var todo []string
	for _, n := range names {
		h, ok := quotaHints[n]
		if !ok {
			todo = append(todo, fmt.Sprintf("ask the cloud's operators to raise it (openstack quota show %s lists the quotas)", arg))
			continue
		}
		todo = append(todo, fmt.Sprintf("%s; or ask the cloud's operators to raise it (openstack quota set %s N %s)", h.counts, h.option, arg))
	}
	return &cloudError{Kind: provider.ErrQuota, Msg: fmt.Sprintf("%s: quota %s of %s exceeded in %s (Neutron OverQuota): %s",
		prefix, strings.Join(names, ", "), project, drv.d.OSRegion, strings.Join(todo, "; ")), Err: err}
}

// neutronType is the type of a Neutron error answer
// ("SecurityGroupInUse"), or "".
func neutronType(err error) string {
	var ue gophercloud.ErrUnexpectedResponseCode
	if !errors.As(err, &ue) {
		return ""
	}
	m := neutronErr.FindSubmatch(ue.Body)
	if m == nil {
		return ""
	}
	return string(m[1])
}

var neutronErr = regexp.MustCompile(`"type"\s*:\s*"([A-Za-z]+)"`)

func isNotFound(err error) bool { return status(err) == 404 }
