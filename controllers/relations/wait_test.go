package relations

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

func TestWait(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	var log bytes.Buffer
	if err := Wait(t.Context(), env(map[string]string{WaitForEnv: "DB, CACHE", "DB": "pg", "CACHE": "redis"}), &log); err != nil {
		t.Fatalf("established: %v", err)
	}
	log.Reset()
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	err := Wait(ctx, env(map[string]string{WaitForEnv: "DB,CACHE", "DB": "pg", WaitWhatEnv: "interface cache from default/redis"}), &log)
	if err == nil || !strings.Contains(log.String(), "waiting for interface cache from default/redis (variables CACHE are not set yet)") {
		t.Fatalf("missing CACHE: %v, log %q", err, log.String())
	}
}
