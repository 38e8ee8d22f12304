package districts

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"time"
)

// Duration is a time.Duration written in JSON as a Go duration string
// ("90s", "5m").
type Duration time.Duration

// D returns the duration as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads a duration string such as "90s".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("expected a duration string such as \"90s\" or \"5m\"")
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration (use a value such as \"90s\" or \"5m\")", s)
	}
	*d = Duration(v)
	return nil
}

// Secret holds a credential value. Every way of printing it (fmt, slog,
// JSON) shows a placeholder; only Reveal returns the value, for the driver
// that needs it.
type Secret string

const redacted = "[redacted]"

// Reveal returns the secret value.
func (s Secret) Reveal() string { return string(s) }

func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return redacted
}

// GoString keeps %#v from printing the value.
func (s Secret) GoString() string { return fmt.Sprintf("%q", s.String()) }

// Format covers every fmt verb, including %s, %q, %x and %v.
func (s Secret) Format(f fmt.State, verb rune) {
	switch verb {
	case 'q':
		fmt.Fprintf(f, "%q", s.String())
	default:
		fmt.Fprint(f, s.String())
	}
}

// LogValue keeps slog from logging the value.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalJSON writes the placeholder: credentials are never written out.
func (s Secret) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }
