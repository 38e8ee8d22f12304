package sidecar

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"
)

// CloudEvents on both sides: a Kafka record carries an event's attributes
// in ce_<name> headers and its datacontenttype in content-type (Kafka
// protocol binding, binary mode); the function's HTTP request and answer
// in ce-<name> headers, percent-encoded, and Content-Type (HTTP protocol
// binding, binary mode; answers may also be structured,
// application/cloudevents+json).
const (
	// RevisionAttribute is the extension attribute naming the topology
	// revision that handled an event.
	RevisionAttribute = "transitrevision"
	// RecordType is the type of the events made for records that carry
	// none.
	RecordType = "transit.streams.record"
	// SpecVersion is the CloudEvents version spoken.
	SpecVersion = "1.0"

	structuredType = "application/cloudevents+json"
)

// required are the attributes every event has, in the order headers are
// written.
var required = []string{"specversion", "id", "source", "type"}

// event is a CloudEvent: its attributes in their canonical string forms
// (datacontenttype apart), the data's content type, and the data.
type event struct {
	attrs       map[string]string
	contentType string
	data        []byte
}

// RecordSource is the source of an event made for a record of topic: a
// URI-reference relative to the Kafka cluster, /topics/<topic> (topic
// names are URI-safe). Its id is <topic>/<partition>/<offset>, unique
// within that source.
func RecordSource(topic string) string { return "/topics/" + topic }

// RecordID is the id of an event made for the record at offset of a
// topic's partition.
func RecordID(topic string, partition int32, offset int64) string {
	return topic + "/" + strconv.Itoa(int(partition)) + "/" + strconv.FormatInt(offset, 10)
}

// fromRecord reads the event a record carries. A record in structured
// mode (content-type application/cloudevents+json, no ce_ headers) is
// unpacked. A record that carries no event becomes one: specversion 1.0,
// id RecordID, source RecordSource, type RecordType, time the record's
// timestamp, partitionkey its key (when UTF-8), data its value. An event
// missing a required attribute gets the made-up one.
func fromRecord(r *kgo.Record) event {
	ev := event{attrs: map[string]string{}, data: r.Value}
	for _, h := range r.Headers {
		switch {
		case strings.HasPrefix(h.Key, "ce_"):
			// Only CloudEvents attribute names: others are no attributes
			// (and could not be HTTP header names).
			if name := strings.ToLower(h.Key[3:]); attributeName(name) {
				ev.attrs[name] = string(h.Value)
			}
		case strings.EqualFold(h.Key, "content-type"):
			if headerValue(string(h.Value)) {
				ev.contentType = string(h.Value)
			}
		}
	}
	if len(ev.attrs) == 0 && isStructured(ev.contentType) {
		if s, err := parseStructured(r.Value); err == nil {
			ev = s
		}
	}
	if ev.attrs["specversion"] == "" {
		ev.attrs["specversion"] = SpecVersion
		if !r.Timestamp.IsZero() {
			ev.attrs["time"] = r.Timestamp.UTC().Format(time.RFC3339Nano)
		}
		if _, ok := ev.attrs["partitionkey"]; !ok && len(r.Key) > 0 && utf8.Valid(r.Key) {
			ev.attrs["partitionkey"] = string(r.Key)
		}
	}
	if ev.attrs["id"] == "" {
		ev.attrs["id"] = RecordID(r.Topic, r.Partition, r.Offset)
	}
	if ev.attrs["source"] == "" {
		ev.attrs["source"] = RecordSource(r.Topic)
	}
	if ev.attrs["type"] == "" {
		ev.attrs["type"] = RecordType
	}
	return ev
}

// record is the Kafka record carrying ev, with key, stamped with the
// revision.
func (ev event) record(key []byte, revision string) *kgo.Record {
	names := make([]string, 0, len(ev.attrs))
	for name := range ev.attrs {
		if !slices.Contains(required, name) && name != RevisionAttribute {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	headers := make([]kgo.RecordHeader, 0, len(ev.attrs)+2)
	for _, name := range append(slices.Clone(required), names...) {
		headers = append(headers, kgo.RecordHeader{Key: "ce_" + name, Value: []byte(ev.attrs[name])})
	}
	if ev.contentType != "" {
		headers = append(headers, kgo.RecordHeader{Key: "content-type", Value: []byte(ev.contentType)})
	}
	headers = append(headers, kgo.RecordHeader{Key: "ce_" + RevisionAttribute, Value: []byte(revision)})
	return &kgo.Record{Key: key, Value: ev.data, Headers: headers}
}

// outcome is what a function's answer means for its record.
type outcome int

const (
	forward outcome = iota // an event: to every output
	drop                   // no event: the function filtered the record
	failed                 // a failed attempt: retry, then the dead letter
)

// judge reads the function's answer: 204, or a 2xx with neither event nor
// body, drops; a 2xx with an event (binary or structured) forwards it;
// anything else failed, with the reason.
func judge(a answer) (event, outcome, string) {
	body := a.body
	switch {
	case a.status == http.StatusNoContent:
		return event{}, drop, ""
	case a.status < 200 || a.status > 299:
		return event{}, failed, fmt.Sprintf("function answered %d: %s", a.status, snippet(body))
	}
	ct := a.header.Get("Content-Type")
	var ev event
	switch {
	case isStructured(ct):
		var err error
		if ev, err = parseStructured(body); err != nil {
			return event{}, failed, fmt.Sprintf("function answered %d with a malformed structured CloudEvent (%v): %s", a.status, err, snippet(body))
		}
	case a.header.Get("Ce-Specversion") != "":
		ev = event{attrs: map[string]string{}, contentType: ct, data: body}
		for k, vs := range a.header {
			name := strings.ToLower(k)
			if !strings.HasPrefix(name, "ce-") || len(vs) == 0 || !attributeName(name[3:]) {
				continue
			}
			v, err := headerDecode(vs[0])
			if err != nil {
				return event{}, failed, fmt.Sprintf("function answered %d with a bad %s header: %v", a.status, k, err)
			}
			ev.attrs[name[3:]] = v
		}
	case len(body) == 0:
		return event{}, drop, ""
	default:
		return event{}, failed, fmt.Sprintf("function answered %d without a CloudEvent (no ce-specversion header): %s", a.status, snippet(body))
	}
	if v := ev.attrs["specversion"]; v != SpecVersion {
		return event{}, failed, fmt.Sprintf("function answered %d with an event of specversion %q: want %s", a.status, v, SpecVersion)
	}
	for _, name := range required {
		if ev.attrs[name] == "" {
			return event{}, failed, fmt.Sprintf("function answered %d with an event without %s", a.status, name)
		}
	}
	return ev, forward, ""
}

// attributeName tells whether name is a CloudEvents attribute name:
// lower-case ASCII letters and digits.
func attributeName(name string) bool {
	for i := 0; i < len(name); i++ {
		if c := name[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9') {
			return false
		}
	}
	return name != ""
}

// headerValue tells whether s may be written as an HTTP header value.
func headerValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

func isStructured(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == structuredType
}

// parseStructured reads a JSON-format event.
func parseStructured(body []byte) (event, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return event{}, err
	}
	ev := event{attrs: map[string]string{}}
	if raw, ok := m["datacontenttype"]; ok {
		if err := json.Unmarshal(raw, &ev.contentType); err != nil || !headerValue(ev.contentType) {
			return event{}, fmt.Errorf("datacontenttype %s is no media type", raw)
		}
	}
	for name, raw := range m {
		switch name {
		case "datacontenttype":
		case "data_base64":
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				return event{}, fmt.Errorf("data_base64: %w", err)
			}
			b, err := base64.StdEncoding.DecodeString(s)
			if err != nil {
				return event{}, fmt.Errorf("data_base64: %w", err)
			}
			ev.data = b
		case "data":
			ev.data = raw
			// JSON data is the JSON text; other data is a string.
			var s string
			if !isJSON(ev.contentType) && json.Unmarshal(raw, &s) == nil {
				ev.data = []byte(s)
			}
		default:
			if !attributeName(name) {
				return event{}, fmt.Errorf("%q is no attribute name (lower-case letters and digits)", name)
			}
			var v any
			if err := json.Unmarshal(raw, &v); err != nil {
				return event{}, fmt.Errorf("%s: %w", name, err)
			}
			switch v := v.(type) {
			case string:
				ev.attrs[name] = v
			case bool, float64:
				ev.attrs[name] = string(raw)
			case nil:
			default:
				return event{}, fmt.Errorf("attribute %s is no string, number or boolean", name)
			}
		}
	}
	return ev, nil
}

// isJSON tells whether data of this content type is JSON (absent means
// JSON in the JSON format).
func isJSON(contentType string) bool {
	if contentType == "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && (mt == "application/json" || mt == "text/json" || strings.HasSuffix(mt, "+json"))
}

// percentEncode encodes a header value as the HTTP binding asks: space,
// double quote, percent and every byte outside printable ASCII as %XY.
func percentEncode(s string) string {
	n := 0
	for i := 0; i < len(s); i++ {
		if mustEncode(s[i]) {
			n++
		}
	}
	if n == 0 {
		return s
	}
	const hex = "0123456789ABCDEF"
	b := make([]byte, 0, len(s)+2*n)
	for i := 0; i < len(s); i++ {
		if c := s[i]; mustEncode(c) {
			b = append(b, '%', hex[c>>4], hex[c&15])
		} else {
			b = append(b, c)
		}
	}
	return string(b)
}

func mustEncode(c byte) bool { return c <= ' ' || c >= 0x7f || c == '"' || c == '%' }

// headerDecode undoes a quoted string (RFC 7230 3.2.6), then one round of
// percent-encoding, refusing what is not UTF-8.
func headerDecode(v string) (string, error) {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		var b strings.Builder
		for i := 1; i < len(v)-1; i++ {
			if v[i] == '\\' && i+1 < len(v)-1 {
				i++
			}
			b.WriteByte(v[i])
		}
		v = b.String()
	}
	if !strings.Contains(v, "%") {
		return v, nil
	}
	b := make([]byte, 0, len(v))
	for i := 0; i < len(v); i++ {
		if v[i] != '%' {
			b = append(b, v[i])
			continue
		}
		if i+2 >= len(v) {
			return "", fmt.Errorf("truncated percent-encoding in %q", v)
		}
		x, err := strconv.ParseUint(v[i+1:i+3], 16, 8)
		if err != nil {
			return "", fmt.Errorf("bad percent-encoding in %q", v)
		}
		b = append(b, byte(x))
		i += 2
	}
	if !utf8.Valid(b) {
		return "", fmt.Errorf("percent-encoding of %q is no UTF-8", v)
	}
	return string(b), nil
}

// snippet is the first 200 bytes of an answer, for a reason.
func snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = strings.ToValidUTF8(s[:200], "") + "…"
	}
	return s
}
