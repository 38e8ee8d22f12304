package districts

import (
	"fmt"
	"maps"
	"net"
	"net/netip"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// AddonSetting is one setting an addon takes: the values it accepts and
// the one it has when left out.
type AddonSetting struct {
	// Default is the value of a setting left out; "" when leaving it out
	// means something of its own (streams' bootstrap: run the
	// development broker).
	Default string
	// OnlyWithout names a setting of the same addon that makes this one
	// meaningless when set (streams' broker_data_dir once bootstrap names
	// a Kafka: no broker runs).
	OnlyWithout string
	// OnlyWith names a setting of the same addon without which this one
	// means nothing (streams' kafka_secret without bootstrap: the
	// development broker speaks neither TLS nor SASL).
	OnlyWith string
	// check says what is wrong with a value given, and what to write
	// instead; "" when it is fine.
	check func(v string) (problem, hint string)
}

// Check says what is wrong with v as this setting, and what to write
// instead; "" when v is fine.
func (s AddonSetting) Check(v string) (problem, hint string) { return s.check(v) }

// AddonSettings are the settings each addon takes.
var AddonSettings = map[string]map[string]AddonSetting{
	"relations": {
		"replicas": intSetting(1, 10, 2),   // controller and webhook pods
		"workers":  intSetting(1, 64, 4),   // consumers reconciled at once per kind
		"history":  intSetting(1, 100, 10), // revisions a Relationship keeps
		"api_qps":  intSetting(5, 1000, 50),
	},
	"streams": {
		// The Kafka of topologies that name none; left out, the addon
		// runs its development broker and the controller uses that.
		"bootstrap":       brokerListSetting(),
		"replicas":        intSetting(1, 10, 2),   // controller pods (one leads)
		"history":         intSetting(1, 100, 10), // finished revisions a Topology keeps
		"upgrade_timeout": durationSetting(10*time.Second, time.Hour, 5*time.Minute),
		// The development broker's data, a hostPath on the master it
		// runs on.
		"broker_data_dir": {Default: "/var/lib/transit/streams-broker", OnlyWithout: "bootstrap", check: checkAbsPath},
		// The Secret (in transit-streams, and of the same name in every
		// namespace that runs topologies) that says how to reach the
		// Kafka of bootstrap: TLS, SASL.
		"kafka_secret": {OnlyWith: "bootstrap", check: checkSecretName},
	},
}

// Setting is the value of a's setting key: as cluster.json gives it, else
// its default ("" for a setting without one, or one the addon does not
// take).
func (a Addon) Setting(key string) string {
	if v, ok := a.Settings[key]; ok {
		return v
	}
	return AddonSettings[a.Name][key].Default
}

// intSetting is a whole number from lo to hi.
func intSetting(lo, hi, def int) AddonSetting {
	return AddonSetting{Default: strconv.Itoa(def), check: func(v string) (string, string) {
		if n, err := strconv.Atoi(v); err != nil || n < lo || n > hi {
			return fmt.Sprintf("%q is not a whole number from %d to %d", v, lo, hi), ""
		}
		return "", ""
	}}
}

// durationSetting is a Go duration from lo to hi.
func durationSetting(lo, hi, def time.Duration) AddonSetting {
	return AddonSetting{Default: shortDuration(def), check: func(v string) (string, string) {
		if d, err := time.ParseDuration(v); err != nil || d < lo || d > hi {
			return fmt.Sprintf("%q is not a duration from %s to %s", v, shortDuration(lo), shortDuration(hi)),
				fmt.Sprintf("write a Go duration such as %q or %q", shortDuration(def), "90s")
		}
		return "", ""
	}}
}

// shortDuration writes d without zero minutes and seconds: 5m, 1h, 1h30m.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

const brokerListHint = `write host:port, comma separated, such as "kafka-0.kafka:9092,kafka-1.kafka:9092"`

// brokerListSetting is a Kafka broker list, host:port[,host:port], with
// no default.
func brokerListSetting() AddonSetting {
	return AddonSetting{check: func(v string) (string, string) {
		if v == "" {
			return "empty", "leave it out to run the development broker, or " + brokerListHint
		}
		for entry := range strings.SplitSeq(v, ",") {
			if why := brokerProblem(entry); why != "" {
				return fmt.Sprintf("%q is not a Kafka broker list: %q %s", v, entry, why), brokerListHint
			}
		}
		return "", ""
	}}
}

// brokerProblem says why entry is not a broker's host:port, or "".
func brokerProblem(entry string) string {
	if entry == "" {
		return "is empty"
	}
	if strings.IndexFunc(entry, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		return "holds a space or a control character"
	}
	host, port, err := net.SplitHostPort(entry)
	if err != nil {
		return "is not host:port"
	}
	if _, err := netip.ParseAddr(host); err != nil && !validDNSSubdomain(strings.ToLower(host)) {
		return fmt.Sprintf("has host %q, neither a DNS name nor an IP address", host)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Sprintf("has port %q, not a number from 1 to 65535", port)
	}
	return ""
}

// checkSecretName accepts a Secret's name (a DNS subdomain).
func checkSecretName(v string) (string, string) {
	if !validDNSSubdomain(v) {
		return fmt.Sprintf("%q is not a Secret's name", v), "write a DNS subdomain name such as \"kafka-client\": lower case letters, digits, '-' and '.'"
	}
	return "", ""
}

// checkAbsPath accepts an absolute, clean path other than /.
func checkAbsPath(v string) (string, string) {
	const hint = `write an absolute path on the master, such as "/var/lib/transit/streams-broker"`
	switch {
	case strings.IndexFunc(v, unicode.IsControl) >= 0:
		return fmt.Sprintf("%q holds a control character", v), hint
	case !path.IsAbs(v):
		return fmt.Sprintf("%q is not an absolute path", v), hint
	case path.Clean(v) == "/":
		return fmt.Sprintf("%q is the master's root directory", v), "give the broker a directory of its own, such as \"/var/lib/transit/streams-broker\""
	case path.Clean(v) != v:
		return fmt.Sprintf("%q is not a clean path", v), fmt.Sprintf("did you mean %q?", path.Clean(v))
	}
	return "", ""
}

// checkAddonSettings refuses unknown settings, values a setting does not
// take and settings another one makes meaningless, naming
// addons[i].settings.<key>.
func checkAddonSettings(c *problems, path string, a Addon) {
	known := AddonSettings[a.Name]
	if known == nil {
		return // an unknown addon is reported by name
	}
	names := slices.Sorted(maps.Keys(known))
	for _, k := range slices.Sorted(maps.Keys(a.Settings)) {
		if k == "" {
			continue
		}
		s, ok := known[k]
		if !ok {
			c.add(joinKey(path, k), fmt.Sprintf("addon %s has no setting %q (settings: %s)", a.Name, k, strings.Join(names, ", ")), didYouMean(k, names))
			continue
		}
		if problem, hint := s.Check(a.Settings[k]); problem != "" {
			c.add(joinKey(path, k), problem, hint)
		}
		if _, set := a.Settings[s.OnlyWithout]; set && s.OnlyWithout != "" {
			c.add(joinKey(path, k), fmt.Sprintf("has no effect while %s is set", s.OnlyWithout), fmt.Sprintf("remove %s, or %s", k, s.OnlyWithout))
		}
		if _, set := a.Settings[s.OnlyWith]; !set && s.OnlyWith != "" {
			c.add(joinKey(path, k), fmt.Sprintf("has no effect without %s", s.OnlyWith), fmt.Sprintf("set %s too, or remove %s", s.OnlyWith, k))
		}
	}
}
