// Package broker is streams-broker: a one-process Kafka-protocol broker for
// development clusters, built on franz-go's kfake.
//
// kfake calls itself a test fake: one process, no replication, timings kinder
// than Apache Kafka's (it skips group.initial.rebalance.delay.ms). transit
// installs it only when a streams addon names no `bootstrap`, and says so;
// production pipelines point `bootstrap` at a real Kafka.
//
// kfake binds and advertises 127.0.0.1; this package serves it on any address
// and advertises the name clients must dial (in a cluster, the Service's DNS
// name), so pods on other nodes reach it.
package broker

import (
	"fmt"
	"net"
	"strconv"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Options configure the broker.
type Options struct {
	// Listen is the TCP address to serve on, e.g. ":9092".
	Listen string
	// Advertise is host:port clients are told to dial (metadata, group
	// coordinators); it defaults to Listen's address.
	Advertise string
	// DataDir keeps topics, offsets, groups and transactions across restarts;
	// empty keeps them in memory only.
	DataDir string
	// SyncWrites fsyncs every produced batch (durable across a machine crash,
	// not only a process crash).
	SyncWrites bool
	// Partitions is the partition count of topics created without one.
	Partitions int
	// Logger receives kfake's log lines; nil logs nothing.
	Logger kfake.Logger
}

// Broker is a running broker.
type Broker struct {
	cluster *kfake.Cluster
	addr    string
}

// Start serves a broker until Close.
func Start(opts Options) (*Broker, error) {
	ln, err := net.Listen("tcp", opts.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", opts.Listen, err)
	}
	advertise := opts.Advertise
	if advertise == "" {
		advertise = ln.Addr().String()
	}
	host, portText, err := net.SplitHostPort(advertise)
	port, perr := strconv.Atoi(portText)
	if err != nil || perr != nil || host == "" || port <= 0 || port > 65535 {
		ln.Close()
		return nil, fmt.Errorf("advertised address %q: want host:port", advertise)
	}
	used := false
	kopts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.Ports(port),
		// kfake asks for 127.0.0.1:port; it gets the listener made above,
		// which reports the advertised address as its own.
		kfake.ListenFn(func(string, string) (net.Listener, error) {
			if used {
				return nil, fmt.Errorf("streams-broker serves one listener")
			}
			used = true
			return advertised{Listener: ln, addr: hostPort(advertise)}, nil
		}),
	}
	if opts.DataDir != "" {
		kopts = append(kopts, kfake.DataDir(opts.DataDir))
	}
	if opts.SyncWrites {
		kopts = append(kopts, kfake.SyncWrites())
	}
	if opts.Partitions > 0 {
		kopts = append(kopts, kfake.DefaultNumPartitions(opts.Partitions))
	}
	if opts.Logger != nil {
		kopts = append(kopts, kfake.WithLogger(opts.Logger))
	}
	c, err := kfake.NewCluster(kopts...)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("start the broker: %w", err)
	}
	return &Broker{cluster: c, addr: ln.Addr().String()}, nil
}

// Addr is the address the broker listens on.
func (b *Broker) Addr() string { return b.addr }

// Close stops serving and, with a data dir, writes what is still unsaved.
func (b *Broker) Close() { b.cluster.Close() }

// advertised is a listener that names the advertised address as its own:
// kfake puts a listener's address in metadata and coordinator answers.
type advertised struct {
	net.Listener
	addr net.Addr
}

func (a advertised) Addr() net.Addr { return a.addr }

type hostPort string

func (hostPort) Network() string  { return "tcp" }
func (h hostPort) String() string { return string(h) }
