package sidecar

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	cloudevents "github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kgo"
)

func headerMap(hs []kgo.RecordHeader) map[string]string {
	m := map[string]string{}
	for _, h := range hs {
		m[h.Key] = string(h.Value)
	}
	return m
}

func TestRequestFromRecord(t *testing.T) {
	t.Parallel()
	ts := time.Date(2026, 11, 28, 8, 0, 0, 123e6, time.UTC)
	for _, tc := range []struct {
		name string
		rec  *kgo.Record
		want map[string][]string // request headers
		body string
	}{
		{"a plain record becomes an event",
			&kgo.Record{Topic: "orders", Partition: 2, Offset: 41, Key: []byte("k-1"), Value: []byte("v"), Timestamp: ts},
			map[string][]string{
				"Ce-Specversion": {"1.0"}, "Ce-Id": {"orders/2/41"}, "Ce-Source": {"/topics/orders"},
				"Ce-Type": {"transit.streams.record"}, "Ce-Time": {"2026-11-28T08:00:00.123Z"}, "Ce-Partitionkey": {"k-1"},
			}, "v"},
		{"an event's attributes are kept, values percent-encoded",
			&kgo.Record{Topic: "orders", Offset: 7, Key: []byte("k"), Value: []byte(`{"a":1}`), Timestamp: ts, Headers: []kgo.RecordHeader{
				{Key: "ce_specversion", Value: []byte("1.0")}, {Key: "ce_id", Value: []byte("evt-7")},
				{Key: "ce_source", Value: []byte("/shop")}, {Key: "ce_type", Value: []byte("order.placed")},
				{Key: "ce_subject", Value: []byte(`Euro € "100%"`)}, {Key: "content-type", Value: []byte("application/json")},
				{Key: "traceparent", Value: []byte("not an attribute")},
			}},
			map[string][]string{
				"Ce-Specversion": {"1.0"}, "Ce-Id": {"evt-7"}, "Ce-Source": {"/shop"}, "Ce-Type": {"order.placed"},
				"Ce-Subject": {"Euro%20%E2%82%AC%20%22100%25%22"}, "Content-Type": {"application/json"},
			}, `{"a":1}`},
		{"no attribute but CloudEvents names, no header injection, empty data",
			&kgo.Record{Topic: "orders", Offset: 9, Headers: []kgo.RecordHeader{
				{Key: "ce_user-id", Value: []byte("u")}, {Key: "ce_Tenant", Value: []byte("acme\r\nX-Injected: 1")},
				{Key: "content-type", Value: []byte("text/plain\r\nX-Injected: 1")},
			}},
			map[string][]string{
				"Ce-Specversion": {"1.0"}, "Ce-Id": {"orders/0/9"}, "Ce-Source": {"/topics/orders"},
				"Ce-Type": {"transit.streams.record"}, "Ce-Tenant": {"acme%0D%0AX-Injected:%201"},
			}, ""},
		{"a structured record is unpacked",
			&kgo.Record{Topic: "orders", Offset: 8, Value: []byte(`{"specversion":"1.0","id":"s-1","source":"/s","type":"t","datacontenttype":"text/plain","data":"hi","n":3}`),
				Headers: []kgo.RecordHeader{{Key: "content-type", Value: []byte("application/cloudevents+json; charset=utf-8")}}},
			map[string][]string{
				"Ce-Specversion": {"1.0"}, "Ce-Id": {"s-1"}, "Ce-Source": {"/s"}, "Ce-Type": {"t"}, "Ce-N": {"3"},
				"Content-Type": {"text/plain"},
			}, "hi"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var header http.Header
			var body []byte
			send(t, fromRecord(tc.rec), func(w http.ResponseWriter, r *http.Request, b []byte) {
				header, body = http.Header{}, b
				for k, v := range r.Header {
					if strings.HasPrefix(k, "Ce-") || k == "Content-Type" {
						header[k] = v
					}
				}
				w.WriteHeader(http.StatusNoContent)
			})
			if d := cmp.Diff(tc.want, map[string][]string(header)); d != "" {
				t.Errorf("headers (-want +got):\n%s", d)
			}
			if string(body) != tc.body {
				t.Errorf("body %q, want %q", body, tc.body)
			}
		})
	}
}

// send sends ev through the sidecar's caller to a server running handle
// and returns the answer.
func send(t *testing.T, ev event, handle func(w http.ResponseWriter, r *http.Request, body []byte)) answer {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Error(err)
		}
		handle(w, r, body)
	}))
	defer srv.Close()
	c, err := newCaller(srv.URL+"/fn?x=1", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	a, err := c.call(t.Context(), ev, maxAnswer)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestJudge(t *testing.T) {
	t.Parallel()
	binary := http.Header{"Ce-Specversion": {"1.0"}, "Ce-Id": {"a"}, "Ce-Source": {"/f"}, "Ce-Type": {"t"},
		"Ce-Subject": {`"quoted \"s\""`}, "Ce-Note": {"caf%C3%A9"}, "Ce-Transitrevision": {"forged"}, "Content-Type": {"text/plain"}}
	for _, tc := range []struct {
		name    string
		status  int
		header  http.Header
		body    string
		outcome outcome
		headers map[string]string // of the forwarded record
		value   string
		reason  string
	}{
		{"binary event", 200, binary, "data", forward, map[string]string{
			"ce_specversion": "1.0", "ce_id": "a", "ce_source": "/f", "ce_type": "t", "ce_subject": `quoted "s"`, "ce_note": "café",
			"content-type": "text/plain", "ce_transitrevision": "rev-9"}, "data", ""},
		{"structured event", 200, http.Header{"Content-Type": {"application/cloudevents+json"}},
			`{"specversion":"1.0","id":"b","source":"/f","type":"t","datacontenttype":"application/json","data":{"x":[1]},"flag":true}`,
			forward, map[string]string{"ce_specversion": "1.0", "ce_id": "b", "ce_source": "/f", "ce_type": "t", "ce_flag": "true",
				"content-type": "application/json", "ce_transitrevision": "rev-9"}, `{"x":[1]}`, ""},
		{"structured base64", 201, http.Header{"Content-Type": {"application/cloudevents+json"}},
			`{"specversion":"1.0","id":"c","source":"/f","type":"t","data_base64":"AAE="}`,
			forward, map[string]string{"ce_specversion": "1.0", "ce_id": "c", "ce_source": "/f", "ce_type": "t",
				"ce_transitrevision": "rev-9"}, "\x00\x01", ""},
		{"204 drops", 204, nil, "", drop, nil, "", ""},
		{"200 without event or body drops", 200, nil, "", drop, nil, "", ""},
		{"500 fails", 500, nil, strings.Repeat("x", 300), failed, nil, "", "function answered 500: " + strings.Repeat("x", 200) + "…"},
		{"garbage fails", 200, http.Header{"Content-Type": {"text/html"}}, "<html>", failed, nil, "",
			"function answered 200 without a CloudEvent (no ce-specversion header): <html>"},
		{"broken structured fails", 200, http.Header{"Content-Type": {"application/cloudevents+json"}}, "{", failed, nil, "",
			"function answered 200 with a malformed structured CloudEvent"},
		{"an event without id fails", 200, http.Header{"Ce-Specversion": {"1.0"}, "Ce-Source": {"/f"}, "Ce-Type": {"t"}}, "", failed, nil, "",
			"function answered 200 with an event without id"},
		{"bad percent-encoding fails", 200, http.Header{"Ce-Specversion": {"1.0"}, "Ce-Id": {"%C0%A0"}}, "", failed, nil, "",
			"is no UTF-8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := answer{status: tc.status, header: tc.header, body: []byte(tc.body)}
			if a.header == nil {
				a.header = http.Header{}
			}
			ev, oc, reason := judge(a)
			if oc != tc.outcome || !strings.HasPrefix(reason, tc.reason) && !strings.Contains(reason, tc.reason) {
				t.Fatalf("outcome %d, reason %q; want %d, %q", oc, reason, tc.outcome, tc.reason)
			}
			if oc != forward {
				return
			}
			r := ev.record([]byte("key"), "rev-9")
			if d := cmp.Diff(tc.headers, headerMap(r.Headers)); d != "" {
				t.Errorf("headers (-want +got):\n%s", d)
			}
			if string(r.Value) != tc.value || string(r.Key) != "key" {
				t.Errorf("value %q key %q, want %q key", r.Value, r.Key, tc.value)
			}
		})
	}
}

// TestCloudEventsSDK: the official Go SDK reads our requests as the events
// we mean, and we read the answers it writes, binary and structured.
func TestCloudEventsSDK(t *testing.T) {
	t.Parallel()
	ts := time.Date(2026, 11, 28, 8, 0, 0, 0, time.UTC)
	var sdk *cloudevents.Event
	var sdkErr error
	structured := false
	function := func(w http.ResponseWriter, r *http.Request, body []byte) {
		r.Body = io.NopCloser(bytes.NewReader(body))
		if sdk, sdkErr = cehttp.NewEventFromHTTPRequest(r); sdkErr != nil {
			http.Error(w, sdkErr.Error(), http.StatusBadRequest)
			return
		}
		out := cloudevents.New()
		out.SetID("answer-" + sdk.ID())
		out.SetSource("/function")
		out.SetType("answered")
		out.SetExtension("hops", 2)
		_ = out.SetData("text/plain", append([]byte("echo:"), sdk.Data()...))
		ctx := context.Background()
		if structured {
			ctx = binding.WithForceStructured(ctx)
		}
		if err := cehttp.WriteResponseWriter(ctx, binding.ToMessage(&out), http.StatusOK, w); err != nil {
			t.Error(err)
		}
	}
	records := []*kgo.Record{
		{Topic: "orders", Partition: 1, Offset: 5, Key: []byte("k"), Value: []byte("raw"), Timestamp: ts},
		{Topic: "orders", Partition: 1, Offset: 6, Value: []byte(`{"n":1}`), Headers: []kgo.RecordHeader{
			{Key: "ce_specversion", Value: []byte("1.0")}, {Key: "ce_id", Value: []byte("evt-6")},
			{Key: "ce_source", Value: []byte("/shop")}, {Key: "ce_type", Value: []byte("order.placed")},
			{Key: "ce_tenant", Value: []byte("acme")}, {Key: "content-type", Value: []byte("application/json")},
		}},
	}
	type attrs struct {
		ID, Source, Type, ContentType, Data string
		Time                                time.Time
		Extensions                          map[string]any
	}
	want := []attrs{
		{"orders/1/5", "/topics/orders", RecordType, "", "raw", ts,
			map[string]any{"partitionkey": "k", "transitrevision": "rev-1"}},
		{"evt-6", "/shop", "order.placed", "application/json", `{"n":1}`, time.Time{},
			map[string]any{"tenant": "acme", "transitrevision": "rev-1"}},
	}
	for i, rec := range records {
		structured = i == 1
		ev := fromRecord(rec)
		ev.attrs[RevisionAttribute] = "rev-1"
		a := send(t, ev, function)
		if sdkErr != nil {
			t.Fatalf("the SDK refused request %d: %v", i, sdkErr)
		}
		if err := sdk.Validate(); err != nil {
			t.Errorf("request %d: the SDK finds the event invalid: %v", i, err)
		}
		if sdk.SpecVersion() != "1.0" {
			t.Errorf("request %d: specversion %q", i, sdk.SpecVersion())
		}
		read := attrs{sdk.ID(), sdk.Source(), sdk.Type(), sdk.DataContentType(), string(sdk.Data()), sdk.Time(), sdk.Extensions()}
		if d := cmp.Diff(want[i], read); d != "" {
			t.Errorf("request %d as the SDK reads it (-want +got):\n%s", i, d)
		}

		// The SDK's answer, binary for the first and structured for the second.
		ans, oc, reason := judge(a)
		if oc != forward {
			t.Fatalf("answer %d: outcome %d (%s)", i, oc, reason)
		}
		out := headerMap(ans.record(rec.Key, "rev-1").Headers)
		wantOut := map[string]string{"ce_specversion": "1.0", "ce_id": "answer-" + want[i].ID, "ce_source": "/function",
			"ce_type": "answered", "ce_hops": "2", "content-type": "text/plain", "ce_transitrevision": "rev-1"}
		if d := cmp.Diff(wantOut, out); d != "" {
			t.Errorf("answer %d (-want +got):\n%s", i, d)
		}
		if string(ans.data) != "echo:"+want[i].Data {
			t.Errorf("answer %d data %q", i, ans.data)
		}
	}
}

// TestCaller: kept-alive connections the function closed are replaced
// without a failed call; a refused connection and a timeout are told
// apart.
func TestCaller(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	hang := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.Header.Get("Ce-Id") == "hang" {
			select {
			case <-hang:
			case <-r.Context().Done():
			}
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer close(hang)
	defer srv.Close()
	// The calls that must succeed get a limit no loaded machine reaches
	// on loopback (a dial alone took over 200 ms under make test's load);
	// the hanging one a short limit of its own.
	c, err := newCaller(srv.URL, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	ev := event{attrs: map[string]string{"id": "a"}}
	for i := range 3 {
		if _, err := c.call(t.Context(), ev, 10); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		srv.CloseClientConnections() // as a restarted function would
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("%d requests served, want 3", n)
	}
	short, err := newCaller(srv.URL, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer short.close()
	if _, err := short.call(t.Context(), event{attrs: map[string]string{"id": "hang"}}, 10); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("hanging function: %v, want a deadline error", err)
	}
	refusing, err := newCaller("http://"+srv.Listener.Addr().String(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	srv.Close()
	if _, err := refusing.call(t.Context(), ev, 10); !errors.Is(err, errRefused) {
		t.Fatalf("closed function: %v, want errRefused", err)
	}
}
