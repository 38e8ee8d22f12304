package sidecar

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func baseEnv() map[string]string {
	return map[string]string{
		"STREAMS_INPUT_BOOTSTRAP":      "k1:9092,k2:9092",
		"STREAMS_INPUT_TOPIC":          "orders",
		"STREAMS_GROUP":                "rev-3-clean",
		"STREAMS_OUTPUTS":              `[{"bootstrap":"k2:9092,k1:9092","topic":"clean"},{"bootstrap":"other:9092","topic":"audit"}]`,
		"STREAMS_DEADLETTER_BOOTSTRAP": "k1:9092,k2:9092",
		"STREAMS_DEADLETTER_TOPIC":     "orders-dlq",
		"STREAMS_REVISION":             "rev-3",
		"HOSTNAME":                     "pod-a",
	}
}

func environ(m map[string]string) []string {
	var env []string
	for k, v := range m {
		env = append(env, k+"="+v)
	}
	return env
}

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	env := baseEnv()
	got, err := ConfigFromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		Input: Endpoint{"k1:9092,k2:9092", "orders"}, Group: "rev-3-clean",
		Outputs:    []Endpoint{{"k2:9092,k1:9092", "clean"}, {"other:9092", "audit"}},
		DeadLetter: Endpoint{"k1:9092,k2:9092", "orders-dlq"},
		Delivery:   AtLeastOnce, Revision: "rev-3", Function: "http://127.0.0.1:8080/",
		CallTimeout: 30 * time.Second, Retries: 4, RetryBackoff: 100 * time.Millisecond,
		BatchRecords: 500, BatchInterval: 100 * time.Millisecond,
		TransactionalID: "rev-3-clean-pod-a", ProbeAddr: ":8081",
	}
	if d := cmp.Diff(want, got, cmpopts.IgnoreFields(Config{}, "Log", "Clock")); d != "" {
		t.Fatalf("config (-want +got):\n%s", d)
	}
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	badSecurity := t.TempDir() // a Secret naming a mechanism that does not exist
	if err := os.WriteFile(filepath.Join(badSecurity, "sasl.mechanism"), []byte("GSSAPI"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		edit func(map[string]string)
		want []string // variables named, in order
		text string   // in the message
	}{
		{"every missing variable at once", func(m map[string]string) { clear(m) },
			[]string{"STREAMS_INPUT_BOOTSTRAP", "STREAMS_INPUT_TOPIC", "STREAMS_GROUP", "STREAMS_DEADLETTER_BOOTSTRAP",
				"STREAMS_DEADLETTER_TOPIC", "STREAMS_REVISION", "STREAMS_OUTPUTS"}, "missing"},
		{"bad values together", func(m map[string]string) {
			m["STREAMS_CALL_TIMEOUT"] = "soon"
			m["STREAMS_RETRIES"] = "-1"
			m["STREAMS_BATCH_RECORDS"] = "0"
			m["STREAMS_DELIVERY"] = "atMostOnce"
			m["STREAMS_FUNCTION"] = "unix:///tmp/f.sock"
			m["STREAMS_FAILPOINT"] = "before-commit:1"
		}, []string{"STREAMS_CALL_TIMEOUT", "STREAMS_RETRIES", "STREAMS_BATCH_RECORDS", "STREAMS_DELIVERY",
			"STREAMS_FUNCTION", "STREAMS_FAILPOINT"}, `"atMostOnce": want atLeastOnce or exactlyOnce`},
		{"outputs not JSON", func(m map[string]string) { m["STREAMS_OUTPUTS"] = "clean" },
			[]string{"STREAMS_OUTPUTS"}, "JSON list"},
		{"outputs empty", func(m map[string]string) { m["STREAMS_OUTPUTS"] = "[]" },
			[]string{"STREAMS_OUTPUTS"}, "at least one"},
		{"output entry incomplete and unknown field", func(m map[string]string) {
			m["STREAMS_OUTPUTS"] = `[{"bootstrap":"k1:9092","topc":"x"}]`
		}, []string{"STREAMS_OUTPUTS"}, "unknown field"},
		{"output listed twice", func(m map[string]string) {
			m["STREAMS_OUTPUTS"] = `[{"bootstrap":"k1:9092","topic":"x"},{"bootstrap":"k1:9092","topic":"x"}]`
		}, []string{"STREAMS_OUTPUTS"}, "listed twice"},
		{"bad bootstrap and topic", func(m map[string]string) {
			m["STREAMS_INPUT_BOOTSTRAP"] = "k1"
			m["STREAMS_DEADLETTER_TOPIC"] = "dead letters"
		}, []string{"STREAMS_INPUT_BOOTSTRAP", "STREAMS_DEADLETTER_TOPIC"}, "no host:port"},
		{"reads its own output", func(m map[string]string) {
			m["STREAMS_OUTPUTS"] = `[{"bootstrap":"k2:9092,k1:9092","topic":"orders"}]`
		}, []string{"STREAMS_INPUT_TOPIC"}, "read its own output"},
		{"exactly-once across two clusters", func(m map[string]string) { m["STREAMS_DELIVERY"] = "exactlyOnce" },
			[]string{"STREAMS_DELIVERY"}, "topic audit on other:9092"},
		{"exactly-once with another dead-letter cluster", func(m map[string]string) {
			m["STREAMS_DELIVERY"] = "exactlyOnce"
			m["STREAMS_OUTPUTS"] = `[{"bootstrap":"k1:9092,k2:9092","topic":"clean"}]`
			m["STREAMS_DEADLETTER_BOOTSTRAP"] = "k1:9092"
		}, []string{"STREAMS_DELIVERY"}, "one Kafka cluster"},
		{"half a Topology gate", func(m map[string]string) { m["STREAMS_GATE_TOPOLOGY"] = "pipe" },
			[]string{"STREAMS_GATE_TOPOLOGY"}, "together"},
		{"unknown log level", func(m map[string]string) { m["STREAMS_LOG_LEVEL"] = "verbose" },
			[]string{"STREAMS_LOG_LEVEL"}, `"verbose": want debug`},
		{"security not JSON", func(m map[string]string) { m["STREAMS_KAFKA_SECURITY"] = "/etc/transit/kafka" },
			[]string{"STREAMS_KAFKA_SECURITY"}, "not a JSON object"},
		{"security for a cluster no endpoint names", func(m map[string]string) {
			m["STREAMS_KAFKA_SECURITY"] = `{"elsewhere:9092": "/nonexistent"}`
		}, []string{"STREAMS_KAFKA_SECURITY"}, "elsewhere:9092 is no cluster of the input"},
		{"security files wrong", func(m map[string]string) {
			m["STREAMS_KAFKA_SECURITY"] = fmt.Sprintf(`{"k2:9092,k1:9092": %q}`, badSecurity)
		}, []string{"STREAMS_KAFKA_SECURITY"}, "sasl.mechanism"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := baseEnv()
			tc.edit(env)
			_, err := ConfigFromEnv(func(k string) string { return env[k] })
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("error %v, want a *ConfigError", err)
			}
			var names []string
			for _, v := range ce.Vars {
				names = append(names, v.Name)
			}
			if d := cmp.Diff(tc.want, names); d != "" {
				t.Errorf("variables named (-want +got):\n%s\n%v", d, err)
			}
			if !strings.Contains(err.Error(), tc.text) {
				t.Errorf("error %q lacks %q", err, tc.text)
			}
		})
	}
}

func TestConfigExactlyOnceOneCluster(t *testing.T) {
	t.Parallel()
	env := baseEnv()
	env["STREAMS_DELIVERY"] = "exactlyOnce"
	// The same brokers, in another order and repeated: one cluster.
	env["STREAMS_OUTPUTS"] = `[{"bootstrap":"k2:9092, k1:9092,k2:9092","topic":"clean"}]`
	env["STREAMS_TRANSACTIONAL_ID"] = "txn-1"
	c, err := ConfigFromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if c.Delivery != ExactlyOnce || c.TransactionalID != "txn-1" {
		t.Fatalf("delivery %s, transactional id %q", c.Delivery, c.TransactionalID)
	}
}

func TestConfigUnknownVariables(t *testing.T) {
	t.Parallel()
	env := baseEnv()
	env["STREAMS_RETRYS"] = "3"
	env["STREAMS_GROUP"] = ""
	env["UNRELATED"] = "x"
	_, err := ConfigFromEnviron(environ(env))
	var ce *ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("error %v, want a *ConfigError", err)
	}
	var names []string
	for _, v := range ce.Vars {
		names = append(names, v.Name)
	}
	if !slices.Equal(names, []string{"STREAMS_GROUP", "STREAMS_RETRYS"}) {
		t.Fatalf("named %v (%v), want STREAMS_GROUP (missing) and STREAMS_RETRYS (unknown)", names, err)
	}
	delete(env, "STREAMS_RETRYS")
	env["STREAMS_GROUP"] = "g"
	if _, err := ConfigFromEnviron(environ(env)); err != nil {
		t.Fatal(err)
	}
}

func TestRunRefusesAnIncompleteConfig(t *testing.T) {
	t.Parallel()
	err := Run(t.Context(), Config{Delivery: AtLeastOnce}, nil)
	var ce *ConfigError
	if !errors.As(err, &ce) || len(ce.Vars) < 5 {
		t.Fatalf("Run with an empty config: %v", err)
	}
}

// A batch limit that cannot hold one record's worst case is refused,
// naming the variable and that worst case.
func TestBatchTimeoutRefusedBelowOneRecord(t *testing.T) {
	e := map[string]string{
		"STREAMS_INPUT_BOOTSTRAP": "k:9092", "STREAMS_INPUT_TOPIC": "in", "STREAMS_GROUP": "g",
		"STREAMS_OUTPUTS": `[{"bootstrap":"k:9092","topic":"out"}]`, "STREAMS_DEADLETTER_BOOTSTRAP": "k:9092",
		"STREAMS_DEADLETTER_TOPIC": "dlq", "STREAMS_REVISION": "r",
		"STREAMS_CALL_TIMEOUT": "2s", "STREAMS_RETRIES": "1", "STREAMS_BATCH_TIMEOUT": "4s",
	}
	_, err := ConfigFromEnv(func(k string) string { return e[k] })
	if err == nil || !strings.Contains(err.Error(), "STREAMS_BATCH_TIMEOUT") || !strings.Contains(err.Error(), "4.1s") {
		t.Fatalf("got %v, want STREAMS_BATCH_TIMEOUT refused, naming the worst case 4.1s", err)
	}
	e["STREAMS_BATCH_TIMEOUT"] = "5s"
	c, err := ConfigFromEnv(func(k string) string { return e[k] })
	if err != nil {
		t.Fatal(err)
	}
	if c.BatchLimit() != 5*time.Second || c.GracePeriod() != 20*time.Second {
		t.Errorf("batch limit %s, grace period %s; want 5s and 20s", c.BatchLimit(), c.GracePeriod())
	}
}
