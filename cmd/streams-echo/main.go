// Command streams-echo is an example streams function: an HTTP server that
// takes each CloudEvent (binary mode) and answers it with the same data,
// marked with its version, so a pipeline's output shows which revision
// handled each event. The streams e2e tests and benchmarks run it, and its
// faults are theirs to switch on.
//
// Environment:
//
//	PORT            listen port (8080)
//	ECHO_VERSION    stamped as the ce-echoversion extension ("v1")
//	ECHO_FAULT      "" (none), "error500" (always 500), "garbage" (200
//	                without an event), "hang" (never answers), "drop" (204)
//	ECHO_DELAY      time spent per event, e.g. "20ms" (a slow stage)
//	ECHO_DROP_EVERY answer 204 to every Nth event
//	ECHO_CONCURRENCY events handled at once (0: no bound; 1: a
//	                single-threaded function, one event per ECHO_DELAY)
package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	port := env("PORT", "8080")
	version := env("ECHO_VERSION", "v1")
	fault := os.Getenv("ECHO_FAULT")
	delay, err := time.ParseDuration(env("ECHO_DELAY", "0s"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "streams-echo: ECHO_DELAY:", err)
		os.Exit(2)
	}
	dropEvery, _ := strconv.Atoi(os.Getenv("ECHO_DROP_EVERY"))
	// A bound on concurrency makes a pod's throughput finite: more load
	// needs more pods (the scaling benchmark's function).
	concurrency, _ := strconv.Atoi(os.Getenv("ECHO_CONCURRENCY"))
	var slots chan struct{}
	if concurrency > 0 {
		slots = make(chan struct{}, concurrency)
	}
	var n atomic.Int64

	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusOK) // probes
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if r.Header.Get("Ce-Specversion") == "" {
			http.Error(w, "not a binary-mode CloudEvent", http.StatusBadRequest)
			return
		}
		if slots != nil {
			slots <- struct{}{}
			time.Sleep(delay)
			<-slots
		} else {
			time.Sleep(delay)
		}
		count := n.Add(1)
		switch {
		case fault == "error500":
			http.Error(w, "streams-echo: failing on purpose", http.StatusInternalServerError)
			return
		case fault == "garbage":
			w.Header().Set("Content-Type", "text/plain")
			_, _ = w.Write([]byte("<html>not an event</html>"))
			return
		case fault == "hang":
			<-r.Context().Done()
			return
		case fault == "drop" || dropEvery > 0 && count%int64(dropEvery) == 0:
			w.WriteHeader(http.StatusNoContent)
			return
		}
		// The same event back, its extensions kept, marked with our version.
		for k, v := range r.Header {
			if len(k) > 3 && (k[:3] == "Ce-" || k == "Content-Type") {
				w.Header()[k] = v
			}
		}
		w.Header().Set("Content-Type", r.Header.Get("Content-Type"))
		w.Header().Set("Ce-Echoversion", version)
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(body)
	})
	srv := &http.Server{Addr: ":" + port, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		stop := make(chan os.Signal, 1)
		signal.Notify(stop, syscall.SIGTERM, os.Interrupt)
		<-stop
		_ = srv.Close()
	}()
	if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		fmt.Fprintln(os.Stderr, "streams-echo:", err)
		os.Exit(1)
	}
}

func env(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
