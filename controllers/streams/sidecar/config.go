package sidecar

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cloudtransit/transit/clock"
	"github.com/cloudtransit/transit/controllers/streams/kafka"
)

// Endpoint is a topic on a Kafka cluster.
type Endpoint struct {
	// Bootstrap lists the cluster's brokers, host:port, comma-separated.
	Bootstrap string `json:"bootstrap"`
	Topic     string `json:"topic"`
}

// Delivery is a processor's guarantee.
type Delivery string

// Delivery guarantees.
const (
	// AtLeastOnce commits an input offset once everything produced for
	// the records before it is acknowledged; a crash between the two
	// repeats that batch.
	AtLeastOnce Delivery = "atLeastOnce"
	// ExactlyOnce consumes, produces and commits in one Kafka
	// transaction; readers of the outputs must read committed.
	ExactlyOnce Delivery = "exactlyOnce"
)

// Config is what the controller's Deployment tells the sidecar through
// STREAMS_* environment variables (ConfigFromEnv), and what the caller of
// Run adds (Log, Clock).
type Config struct {
	Input      Endpoint   // STREAMS_INPUT_BOOTSTRAP, STREAMS_INPUT_TOPIC
	Group      string     // STREAMS_GROUP: the input's consumer group
	Outputs    []Endpoint // STREAMS_OUTPUTS: every forwarded event goes to each
	DeadLetter Endpoint   // STREAMS_DEADLETTER_BOOTSTRAP, STREAMS_DEADLETTER_TOPIC
	Delivery   Delivery   // STREAMS_DELIVERY (atLeastOnce)
	Revision   string     // STREAMS_REVISION: stamped as transitrevision
	Function   string     // STREAMS_FUNCTION (http://127.0.0.1:8080/)

	CallTimeout   time.Duration // STREAMS_CALL_TIMEOUT (30s): one call's limit
	Retries       int           // STREAMS_RETRIES (4): failed attempts after the first before the dead letter
	RetryBackoff  time.Duration // STREAMS_RETRY_BACKOFF (100ms): doubling up to MaxRetryBackoff
	ProduceLinger time.Duration // STREAMS_PRODUCE_LINGER (0): the producers' linger

	// BatchRecords (STREAMS_BATCH_RECORDS, 500) bounds a poll and an
	// exactly-once transaction; BatchInterval (STREAMS_BATCH_INTERVAL,
	// 100ms) bounds how long a transaction takes in more records.
	BatchRecords  int
	BatchInterval time.Duration
	// BatchTimeout (STREAMS_BATCH_TIMEOUT) is how long a batch may take:
	// the transaction timeout and the rebalance timeout. 0 is the
	// default, BatchLimit's. Polls are sized to it (see BatchLimit).
	BatchTimeout time.Duration

	// Security is how clients reach each Kafka cluster, by cluster (its
	// brokers, sorted, comma separated): TLS, SASL, read from the files of a mounted
	// Secret (kafka.LoadSecurity). STREAMS_KAFKA_SECURITY names the
	// directory of each: {"<bootstrap>": "<dir>"}. A cluster not named
	// is a plaintext listener.
	Security map[string]kafka.Security

	// TransactionalID (STREAMS_TRANSACTIONAL_ID; exactly-once) defaults
	// to Group-<hostname>: a restarted pod fences its predecessor.
	TransactionalID string
	ProbeAddr       string // STREAMS_PROBE_ADDR (:8081): /readyz, /healthz, /metrics

	// The gate the command chooses: GateFile (STREAMS_GATE_FILE, tests)
	// or a Topology watch (STREAMS_GATE_TOPOLOGY in
	// STREAMS_GATE_NAMESPACE). Run takes the Gate itself.
	GateFile, GateTopology, GateNamespace string

	// FailAfterProduce (STREAMS_FAILPOINT=after-produce:N) is a test-only
	// fault point: see the package documentation. 0 is off.
	FailAfterProduce int

	// LogLevel (STREAMS_LOG_LEVEL: debug, info, warn, error; info) is
	// the command's: debug adds a line per batch (records, partitions,
	// time, committed), for whoever reads a stalled pipeline.
	LogLevel slog.Level
	// Log receives the sidecar's logs; nil discards them.
	Log *slog.Logger
	// Clock times backoffs, batches and gate polls; nil is the wall clock.
	Clock clock.Clock
}

// MaxRetryBackoff caps the doubling backoff between attempts.
const MaxRetryBackoff = 5 * time.Second

// variables are the STREAMS_* variables the sidecar knows.
var variables = []string{
	"STREAMS_INPUT_BOOTSTRAP", "STREAMS_INPUT_TOPIC", "STREAMS_GROUP", "STREAMS_OUTPUTS",
	"STREAMS_DEADLETTER_BOOTSTRAP", "STREAMS_DEADLETTER_TOPIC", "STREAMS_DELIVERY", "STREAMS_REVISION",
	"STREAMS_FUNCTION", "STREAMS_CALL_TIMEOUT", "STREAMS_RETRIES", "STREAMS_RETRY_BACKOFF",
	"STREAMS_PRODUCE_LINGER", "STREAMS_BATCH_RECORDS", "STREAMS_BATCH_INTERVAL", "STREAMS_BATCH_TIMEOUT", "STREAMS_KAFKA_SECURITY",
	"STREAMS_TRANSACTIONAL_ID", "STREAMS_PROBE_ADDR",
	"STREAMS_GATE_FILE", "STREAMS_GATE_TOPOLOGY", "STREAMS_GATE_NAMESPACE", "STREAMS_FAILPOINT", "STREAMS_LOG_LEVEL",
	// The command writes its last error there (the container's
	// terminationMessagePath), for the pod's status and the Topology's.
	"STREAMS_TERMINATION_LOG",
}

// VarError is one missing or bad variable.
type VarError struct {
	Name    string // e.g. STREAMS_OUTPUTS
	Problem string
}

func (e VarError) Error() string { return e.Name + ": " + e.Problem }

// ConfigError lists every problem of a configuration; test for it with
// errors.As.
type ConfigError struct {
	Vars []VarError
}

func (e *ConfigError) Error() string {
	msgs := make([]string, len(e.Vars))
	for i, v := range e.Vars {
		msgs[i] = v.Error()
	}
	return "invalid configuration: " + strings.Join(msgs, "; ")
}

// ConfigFromEnviron is ConfigFromEnv over an environment list
// (os.Environ()); it also refuses every STREAMS_* variable it does not
// know, so that a typo does not pass silently.
func ConfigFromEnviron(environ []string) (Config, error) {
	env := map[string]string{}
	var unknown []VarError
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		env[name] = value
		if strings.HasPrefix(name, "STREAMS_") && !slices.Contains(variables, name) {
			unknown = append(unknown, VarError{name, "unknown variable (a typo?)"})
		}
	}
	c, errs := parse(func(name string) string { return env[name] })
	return c, asError(append(errs, unknown...))
}

// check refuses what Run cannot work with, for a Config not made by
// ConfigFromEnv.
func (c Config) check() error {
	var errs []VarError
	bad := func(cond bool, name, problem string) {
		if cond {
			errs = append(errs, VarError{name, problem})
		}
	}
	bad(c.Input.Bootstrap == "" || c.Input.Topic == "" || c.Group == "", "STREAMS_INPUT_TOPIC", "input bootstrap, topic and group are required")
	bad(len(c.Outputs) == 0, "STREAMS_OUTPUTS", "at least one output is required")
	bad(c.DeadLetter.Bootstrap == "" || c.DeadLetter.Topic == "", "STREAMS_DEADLETTER_TOPIC", "the dead-letter bootstrap and topic are required")
	bad(c.Delivery != AtLeastOnce && c.Delivery != ExactlyOnce, "STREAMS_DELIVERY", "want atLeastOnce or exactlyOnce")
	bad(c.Delivery == ExactlyOnce && c.TransactionalID == "", "STREAMS_TRANSACTIONAL_ID", "exactly-once needs a transactional id")
	bad(c.CallTimeout <= 0, "STREAMS_CALL_TIMEOUT", "must be positive")
	bad(c.Retries < 0, "STREAMS_RETRIES", "must not be negative")
	bad(c.RetryBackoff <= 0, "STREAMS_RETRY_BACKOFF", "must be positive")
	bad(c.ProduceLinger < 0, "STREAMS_PRODUCE_LINGER", "must not be negative")
	bad(c.BatchRecords < 1, "STREAMS_BATCH_RECORDS", "must be at least 1")
	bad(c.BatchInterval <= 0, "STREAMS_BATCH_INTERVAL", "must be positive")
	if problem := c.batchTimeoutProblem(); problem != "" {
		bad(true, "STREAMS_BATCH_TIMEOUT", problem)
	}
	return asError(errs)
}

// batchTimeoutProblem is what is wrong with BatchTimeout, "" if nothing.
func (c Config) batchTimeoutProblem() string {
	switch {
	case c.BatchTimeout < 0 || c.BatchTimeout > maxBatchTimeout:
		return "want 0 (the default) up to 15m, Kafka's default transaction.max.timeout.ms"
	case c.BatchTimeout > 0 && c.BatchTimeout <= c.worstRecord()+c.BatchInterval:
		return fmt.Sprintf("must be more than one record's worst case, %s (every attempt timing out: STREAMS_CALL_TIMEOUT × (STREAMS_RETRIES+1) and the backoffs), and STREAMS_BATCH_INTERVAL", c.worstRecord())
	}
	return ""
}

func asError(errs []VarError) error {
	if len(errs) == 0 {
		return nil
	}
	return &ConfigError{Vars: errs}
}

// ConfigFromEnv reads the configuration through getenv (os.Getenv),
// reporting every missing or bad variable by name at once in a
// *ConfigError. It cannot see variables it does not ask for: use
// ConfigFromEnviron to refuse unknown ones too.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	c, errs := parse(getenv)
	return c, asError(errs)
}

func parse(getenv func(string) string) (Config, []VarError) {
	p := parser{getenv: getenv}
	c := Config{
		Input:           Endpoint{Bootstrap: p.bootstrap("STREAMS_INPUT_BOOTSTRAP"), Topic: p.topic("STREAMS_INPUT_TOPIC")},
		Group:           p.need("STREAMS_GROUP"),
		DeadLetter:      Endpoint{Bootstrap: p.bootstrap("STREAMS_DEADLETTER_BOOTSTRAP"), Topic: p.topic("STREAMS_DEADLETTER_TOPIC")},
		Delivery:        Delivery(p.or("STREAMS_DELIVERY", string(AtLeastOnce))),
		Revision:        p.need("STREAMS_REVISION"),
		Function:        p.or("STREAMS_FUNCTION", "http://127.0.0.1:8080/"),
		CallTimeout:     p.duration("STREAMS_CALL_TIMEOUT", 30*time.Second, false),
		Retries:         p.integer("STREAMS_RETRIES", 4, 0),
		RetryBackoff:    p.duration("STREAMS_RETRY_BACKOFF", 100*time.Millisecond, false),
		ProduceLinger:   p.duration("STREAMS_PRODUCE_LINGER", 0, true),
		BatchRecords:    p.integer("STREAMS_BATCH_RECORDS", 500, 1),
		BatchInterval:   p.duration("STREAMS_BATCH_INTERVAL", 100*time.Millisecond, false),
		BatchTimeout:    p.duration("STREAMS_BATCH_TIMEOUT", 0, true),
		TransactionalID: p.or("STREAMS_TRANSACTIONAL_ID", ""),
		ProbeAddr:       p.or("STREAMS_PROBE_ADDR", ":8081"),
		GateFile:        p.or("STREAMS_GATE_FILE", ""),
		GateTopology:    p.or("STREAMS_GATE_TOPOLOGY", ""),
		GateNamespace:   p.or("STREAMS_GATE_NAMESPACE", ""),
	}
	c.Outputs = p.outputs("STREAMS_OUTPUTS")
	if v := getenv("STREAMS_LOG_LEVEL"); v != "" {
		if err := c.LogLevel.UnmarshalText([]byte(v)); err != nil {
			p.bad("STREAMS_LOG_LEVEL", "%q: want debug, info, warn or error", v)
		}
	}
	c.Security = p.security("STREAMS_KAFKA_SECURITY", append([]Endpoint{c.Input, c.DeadLetter}, c.Outputs...))

	switch c.Delivery {
	case AtLeastOnce:
	case ExactlyOnce:
		// A Kafka transaction spans one cluster.
		for _, e := range append([]Endpoint{c.DeadLetter}, c.Outputs...) {
			if e.Bootstrap != "" && c.Input.Bootstrap != "" && !sameCluster(e.Bootstrap, c.Input.Bootstrap) {
				p.bad("STREAMS_DELIVERY", "exactlyOnce needs the input, every output and the dead-letter topic on one Kafka cluster "+
					"(one transaction spans one cluster), but the input is on %s and topic %s on %s", c.Input.Bootstrap, e.Topic, e.Bootstrap)
				break
			}
		}
	default:
		p.bad("STREAMS_DELIVERY", "%q: want %s or %s", c.Delivery, AtLeastOnce, ExactlyOnce)
	}
	// A processor that writes what it reads loops forever.
	for _, e := range append([]Endpoint{c.DeadLetter}, c.Outputs...) {
		if e.Topic != "" && e.Topic == c.Input.Topic && sameCluster(e.Bootstrap, c.Input.Bootstrap) {
			p.bad("STREAMS_INPUT_TOPIC", "%s is also written to (an output or the dead-letter topic): the processor would read its own output", e.Topic)
			break
		}
	}
	if u, err := url.Parse(c.Function); err != nil || u.Scheme != "http" || u.Host == "" {
		p.bad("STREAMS_FUNCTION", "%q: want an http:// URL, e.g. http://127.0.0.1:8080/", c.Function)
	}
	if _, _, err := net.SplitHostPort(c.ProbeAddr); err != nil {
		p.bad("STREAMS_PROBE_ADDR", "%q: want [host]:port, e.g. :8081", c.ProbeAddr)
	}
	if problem := c.batchTimeoutProblem(); problem != "" {
		p.bad("STREAMS_BATCH_TIMEOUT", "%s", problem)
	}
	if (c.GateTopology == "") != (c.GateNamespace == "") {
		p.bad("STREAMS_GATE_TOPOLOGY", "STREAMS_GATE_TOPOLOGY and STREAMS_GATE_NAMESPACE are set together")
	}
	if c.GateFile != "" && c.GateTopology != "" {
		p.bad("STREAMS_GATE_FILE", "set with STREAMS_GATE_TOPOLOGY: choose one gate")
	}
	if fp := p.or("STREAMS_FAILPOINT", ""); fp != "" {
		n, err := strconv.Atoi(strings.TrimPrefix(fp, "after-produce:"))
		if !strings.HasPrefix(fp, "after-produce:") || err != nil || n < 1 {
			p.bad("STREAMS_FAILPOINT", "%q: want after-produce:N with N ≥ 1", fp)
		}
		c.FailAfterProduce = n
	}
	if c.TransactionalID == "" && c.Group != "" {
		// HOSTNAME is the pod's name in Kubernetes; os.Hostname too,
		// but only in a pod of its own.
		host := getenv("HOSTNAME")
		if host == "" {
			host, _ = os.Hostname() // "" on error: the group alone
		}
		c.TransactionalID = TransactionalID(c.Group, host)
	}
	return c, p.errs
}

// TransactionalID is the transactional ID an exactly-once sidecar of
// group uses in pod (STREAMS_TRANSACTIONAL_ID's default): one per pod, so
// a restarted container fences its predecessor, and the controller can
// tell whose pod a transaction belongs to.
func TransactionalID(group, pod string) string { return group + "-" + pod }

type parser struct {
	getenv func(string) string
	errs   []VarError
}

func (p *parser) bad(name, format string, args ...any) {
	p.errs = append(p.errs, VarError{name, fmt.Sprintf(format, args...)})
}

func (p *parser) need(name string) string {
	v := strings.TrimSpace(p.getenv(name))
	if v == "" {
		p.bad(name, "missing")
	}
	return v
}

func (p *parser) or(name, def string) string {
	if v := strings.TrimSpace(p.getenv(name)); v != "" {
		return v
	}
	return def
}

func (p *parser) duration(name string, def time.Duration, zeroOK bool) time.Duration {
	v := strings.TrimSpace(p.getenv(name))
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 || d == 0 && !zeroOK {
		p.bad(name, "%q: want a positive duration, e.g. 500ms or 30s", v)
		return def
	}
	return d
}

func (p *parser) integer(name string, def, least int) int {
	v := strings.TrimSpace(p.getenv(name))
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < least {
		p.bad(name, "%q: want an integer ≥ %d", v, least)
		return def
	}
	return n
}

func (p *parser) bootstrap(name string) string {
	v := p.need(name)
	if v != "" {
		if err := checkBootstrap(v); err != nil {
			p.bad(name, "%v", err)
		}
	}
	return v
}

func (p *parser) topic(name string) string {
	v := p.need(name)
	if v != "" {
		if err := checkTopic(v); err != nil {
			p.bad(name, "%v", err)
		}
	}
	return v
}

func (p *parser) outputs(name string) []Endpoint {
	v := p.need(name)
	if v == "" {
		return nil
	}
	var outs []Endpoint
	dec := json.NewDecoder(strings.NewReader(v))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&outs); err != nil || dec.More() {
		if err == nil {
			err = fmt.Errorf("text after the list")
		}
		p.bad(name, `want a JSON list like [{"bootstrap":"kafka:9092","topic":"out"}]: %v`, err)
		return nil
	}
	if len(outs) == 0 {
		p.bad(name, "empty: a processor writes to at least one topic")
	}
	for i, o := range outs {
		if o.Bootstrap == "" || o.Topic == "" {
			p.bad(name, "entry %d: bootstrap and topic are required", i)
			continue
		}
		if err := checkBootstrap(o.Bootstrap); err != nil {
			p.bad(name, "entry %d: %v", i, err)
		}
		if err := checkTopic(o.Topic); err != nil {
			p.bad(name, "entry %d: %v", i, err)
		}
		for _, prev := range outs[:i] {
			if prev.Topic == o.Topic && sameCluster(prev.Bootstrap, o.Bootstrap) {
				p.bad(name, "entry %d: topic %s on %s is listed twice", i, o.Topic, o.Bootstrap)
				break
			}
		}
	}
	return outs
}

func checkBootstrap(s string) error {
	hosts := brokers(s)
	if len(hosts) == 0 {
		return fmt.Errorf("%q names no broker: want host:port[,host:port…]", s)
	}
	for _, h := range hosts {
		host, port, err := net.SplitHostPort(h)
		if n, perr := strconv.Atoi(port); err != nil || perr != nil || host == "" || n < 1 || n > 65535 {
			return fmt.Errorf("%q: broker %q is no host:port", s, h)
		}
	}
	return nil
}

// checkTopic applies Kafka's rules for topic names.
func checkTopic(t string) error {
	if len(t) > 249 || t == "." || t == ".." {
		return fmt.Errorf("%q is no valid Kafka topic name", t)
	}
	for _, r := range t {
		if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("%q is no valid Kafka topic name (letters, digits, '.', '_' and '-')", t)
		}
	}
	return nil
}

// brokers splits a bootstrap list into its sorted, distinct brokers.
func brokers(bootstrap string) []string {
	if c := kafka.ClusterKey(bootstrap); c != "" {
		return strings.Split(c, ",")
	}
	return nil
}

// cluster names a bootstrap list independently of order and repeats.
func cluster(bootstrap string) string { return kafka.ClusterKey(bootstrap) }

// securityOf is how clients reach the cluster bootstrap names.
func (c Config) securityOf(bootstrap string) kafka.Security { return c.Security[cluster(bootstrap)] }

// security reads name, {"<bootstrap>": "<dir>"}: each cluster's Secret
// directory, for clusters the endpoints name.
func (p *parser) security(name string, endpoints []Endpoint) map[string]kafka.Security {
	v := p.getenv(name)
	if v == "" {
		return nil
	}
	var dirs map[string]string
	dec := json.NewDecoder(strings.NewReader(v))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&dirs); err != nil {
		p.bad(name, "not a JSON object of bootstrap lists and directories: %v", err)
		return nil
	}
	out := map[string]kafka.Security{}
	for _, bootstrap := range slices.Sorted(maps.Keys(dirs)) {
		c := cluster(bootstrap)
		if !slices.ContainsFunc(endpoints, func(e Endpoint) bool { return cluster(e.Bootstrap) == c }) {
			p.bad(name, "%s is no cluster of the input, outputs or dead-letter topic", bootstrap)
			continue
		}
		sec, err := kafka.LoadSecurity(dirs[bootstrap])
		if err != nil {
			p.bad(name, "%s: %v", bootstrap, err)
			continue
		}
		out[c] = sec
	}
	return out
}

// sameCluster tells whether two bootstrap lists name the same brokers.
func sameCluster(a, b string) bool { return cluster(a) == cluster(b) }
