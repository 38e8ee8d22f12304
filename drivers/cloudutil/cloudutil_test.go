package cloudutil

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cloudtransit/transit/clock"
)

func TestCloudConfig(t *testing.T) {
	t.Parallel()
	got := CloudConfig("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGk root: \"x\" # y\n")
	want := "#cloud-config\n# transit: root logs in with the cluster's SSH key.\ndisable_root: false\nssh_authorized_keys:\n" +
		"  - \"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGk root: \\\"x\\\" # y\"\n"
	if got != want {
		t.Errorf("CloudConfig:\n%s\nwant:\n%s", got, want)
	}
}

func TestParseHostKeys(t *testing.T) {
	t.Parallel()
	const k1 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
	const k2 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB1ilK+x5Vt2AAkb8AdWHh24BN9Y6Y1Dk+xrt2bWmfw8"
	for _, tc := range []struct {
		name, console string
		want          []string
	}{
		{"none", "booting\r\n", nil},
		{"one block", "x\r\n-----BEGIN SSH HOST KEY KEYS-----\r\n" + k1 + " root@ip-1\r\nnot a key\r\n-----END SSH HOST KEY KEYS-----\r\n", []string{k1}},
		{"last block wins", "-----BEGIN SSH HOST KEY KEYS-----\n" + k1 + "\n-----END SSH HOST KEY KEYS-----\n-----BEGIN SSH HOST KEY KEYS-----\n" + k2 + " c\n-----END SSH HOST KEY KEYS-----\n", []string{k2}},
		{"unfinished", "-----BEGIN SSH HOST KEY KEYS-----\n" + k1 + "\n", nil},
	} {
		if diff := cmp.Diff(tc.want, ParseHostKeys(tc.console)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
}

// A zero wait takes the driver's default; one set stays; the clock is
// the wall clock unless one is given.
func TestWaitsOr(t *testing.T) {
	def := Waits{RetryMaxAttempts: 8, RetryBaseDelay: time.Second, RetryMaxDelay: time.Minute, PollInterval: 2 * time.Second,
		PollMaxInterval: 15 * time.Second, LaunchWait: 10 * time.Minute, HostKeyWait: time.Minute, GroupWait: 5 * time.Minute}
	got := Waits{RetryMaxAttempts: 2, LaunchWait: time.Second}.Or(def)
	want := def
	want.RetryMaxAttempts, want.LaunchWait = 2, time.Second
	if _, ok := got.Clock.(clock.Real); !ok {
		t.Errorf("clock %T, want the wall clock", got.Clock)
	}
	got.Clock = nil
	if got != want {
		t.Errorf("Or = %+v, want %+v", got, want)
	}
}
