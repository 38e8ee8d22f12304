package cloudutil

import (
	"testing"

	"github.com/google/go-cmp/cmp"
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
