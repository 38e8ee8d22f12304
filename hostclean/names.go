package hostclean

import "strings"

// The names transit gives what it makes on a host, by their exact shape
// (drivers/local HostNames, cloudsim/localnodes apart.go, nat.go,
// filter.go): a prefix and a fixed count of hex digits, so that a name
// that merely starts like one of them ("tbogus", "TRANSITORY") is never
// taken for transit's.

// nodeNetnsPrefix and routerNetnsPrefix begin a node's and a cloudsim
// region router's network namespace.
const (
	nodeNetnsPrefix   = "transit-ln-"
	routerNetnsPrefix = "cs-"
)

// isNetns says whether name is a local node's network namespace
// ("transit-ln-" and 12 hex digits) or a cloudsim region's router ("cs-"
// and 8).
func isNetns(name string) bool {
	return hasHexSuffix(name, nodeNetnsPrefix, 12, false) || hasHexSuffix(name, routerNetnsPrefix, 8, false)
}

// isNodeNetns says whether name is a local node's network namespace.
func isNodeNetns(name string) bool { return hasHexSuffix(name, nodeNetnsPrefix, 12, false) }

// isLink says whether name is a district's bridge ("tb" and 8 hex
// digits), a node's host-side veth ("tv" and 12) or a cloudsim region's
// uplink ("cu" and 8).
func isLink(name string) bool {
	return hasHexSuffix(name, "tb", 8, false) || hasHexSuffix(name, "tv", 12, false) || hasHexSuffix(name, "cu", 8, false)
}

// isChain says whether name is one of transit's iptables chains: a
// group's ("TRANSIT-" and 10 upper-case hex digits), a district's input
// chain ("TRANSIT-IN-" and 10), or cloudsim's forward, ingress, DNAT and
// SNAT chains ("CLOUDSIM-F-", "-I-", "-D-", "-S-" and 8).
func isChain(name string) bool {
	if hasHexSuffix(name, "TRANSIT-", 10, true) || hasHexSuffix(name, "TRANSIT-IN-", 10, true) {
		return true
	}
	for _, p := range []string{"CLOUDSIM-F-", "CLOUDSIM-I-", "CLOUDSIM-D-", "CLOUDSIM-S-"} {
		if hasHexSuffix(name, p, 8, true) {
			return true
		}
	}
	return false
}

// testRuleComments begin the comments of the OUTPUT rules tests silence
// machines with: the platform conformance suite's ("transit-platformtest
// <cluster>", platforms/platformtest) and the e2e groups' ("transit-e2e
// <group root>").
var testRuleComments = []string{"transit-platformtest", "transit-e2e"}

// isTestRuleComment says whether an iptables rule comment is a test's.
func isTestRuleComment(c string) bool {
	for _, p := range testRuleComments {
		if c == p || strings.HasPrefix(c, p+" ") {
			return true
		}
	}
	return false
}

// hasHexSuffix says whether s is prefix followed by exactly n hex digits,
// upper-case ones if upper, lower-case ones otherwise (as transit writes
// them).
func hasHexSuffix(s, prefix string, n int, upper bool) bool {
	h, ok := strings.CutPrefix(s, prefix)
	if !ok || len(h) != n {
		return false
	}
	for _, c := range h {
		switch {
		case c >= '0' && c <= '9':
		case upper && c >= 'A' && c <= 'F':
		case !upper && c >= 'a' && c <= 'f':
		default:
			return false
		}
	}
	return true
}
