package drivertest

import (
	"net/http"
	"strings"
	"sync"
)

// Recorder is an http.Handler that notes each request before Handler (an
// emulated cloud) answers it: what a driver sent, for tests that count
// requests.
type Recorder struct {
	Handler http.Handler

	mu       sync.Mutex
	requests []string // "METHOD path?query"
}

func (rec *Recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec.mu.Lock()
	rec.requests = append(rec.requests, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
	rec.mu.Unlock()
	rec.Handler.ServeHTTP(w, r)
}

// Sent returns the requests whose "METHOD path?query" contains substr.
func (rec *Recorder) Sent(substr string) []string {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var out []string
	for _, r := range rec.requests {
		if strings.Contains(r, substr) {
			out = append(out, r)
		}
	}
	return out
}
