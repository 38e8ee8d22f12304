package gce

import (
	"fmt"
	"strconv"
	"strings"
)

// Compute Engine labels allow only lowercase letters, digits, "_" and "-"
// (keys start with a letter), at most 63 characters each; transit's tags
// are any strings. The encoding is faithful and reversible: [a-z0-9-] stay,
// every other byte becomes "_" and two hex digits, and a key whose
// encoding would start with something other than a letter, or with "x",
// gets an "x" in front ("Name" → "x_4eame", "x" → "xx").
const maxLabel = 63

func encodeLabel(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "_%02x", c)
		}
	}
	return b.String()
}

func encodeKey(k string) string {
	e := encodeLabel(k)
	if e == "" || e[0] < 'a' || e[0] > 'z' || e[0] == 'x' {
		e = "x" + e
	}
	return e
}

func decodeLabel(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '_' && i+2 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(v))
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func decodeKey(k string) string {
	return decodeLabel(strings.TrimPrefix(k, "x"))
}

// encodeLabels turns tags into labels; a tag too long for a label is an
// error naming it.
func encodeLabels(tags map[string]string) (map[string]string, error) {
	out := make(map[string]string, len(tags))
	for k, v := range tags {
		ek, ev := encodeKey(k), encodeLabel(v)
		if len(ek) > maxLabel || len(ev) > maxLabel {
			return nil, fmt.Errorf("tag %s=%q does not fit a Compute Engine label (at most %d characters, and each character outside a-z, 0-9 and - takes three): shorten it", k, v, maxLabel)
		}
		out[ek] = ev
	}
	if len(out) > 64 {
		return nil, fmt.Errorf("%d tags: Compute Engine allows at most 64 labels on an instance", len(out))
	}
	return out, nil
}

func decodeLabels(labels map[string]string) map[string]string {
	out := make(map[string]string, len(labels))
	for k, v := range labels {
		out[decodeKey(k)] = decodeLabel(v)
	}
	return out
}
