// Command streams-broker is a one-process Kafka-protocol broker for
// development clusters (franz-go's kfake: no replication). The streams addon
// runs it when no `bootstrap` is set; see package broker.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/cloudtransit/transit/controllers/streams/broker"
)

func main() {
	var opts broker.Options
	var logLevel string
	flag.StringVar(&opts.Listen, "listen", ":9092", "TCP address to serve on")
	flag.StringVar(&opts.Advertise, "advertise", "", "host:port clients dial, e.g. the Service's DNS name (default: the listen address)")
	flag.StringVar(&opts.DataDir, "data-dir", "", "directory keeping topics, offsets, groups and transactions across restarts (default: memory only)")
	flag.BoolVar(&opts.SyncWrites, "sync", false, "fsync every produced batch")
	flag.IntVar(&opts.Partitions, "partitions", 0, "partitions of topics created without a count (default: kfake's)")
	flag.IntVar(&opts.Brokers, "brokers", 1, "brokers to serve, on -listen and ports after it the system picks (several: partition leaders and coordinators among them; SIGUSR1 moves the coordinators; development on one machine, no -advertise)")
	flag.DurationVar(&opts.InitialRebalanceDelay, "initial-rebalance-delay", 3*time.Second, "how long the first join to an empty consumer group waits for more members: Apache Kafka's group.initial.rebalance.delay.ms (0: at once)")
	flag.StringVar(&logLevel, "log-level", "warn", "none, error, warn, info or debug")
	flag.Parse()
	level, ok := map[string]kfake.LogLevel{
		"none": kfake.LogLevelNone, "error": kfake.LogLevelError, "warn": kfake.LogLevelWarn,
		"info": kfake.LogLevelInfo, "debug": kfake.LogLevelDebug,
	}[strings.ToLower(logLevel)]
	if !ok {
		fmt.Fprintf(os.Stderr, "streams-broker: -log-level %q: want none, error, warn, info or debug\n", logLevel)
		os.Exit(2)
	}
	opts.Logger = kfake.BasicLogger(os.Stderr, level)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	b, err := broker.Start(ctx, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "streams-broker:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "streams-broker: serving on %s, advertising %s, data dir %q\n", b.Addr(), advertised(opts, b), opts.DataDir)
	// SIGUSR1 moves the coordinators (tests).
	move := make(chan os.Signal, 1)
	signal.Notify(move, syscall.SIGUSR1)
	for {
		select {
		case <-ctx.Done():
			b.Close()
			return
		case <-move:
			b.MoveCoordinators()
		}
	}
}

func advertised(opts broker.Options, b *broker.Broker) string {
	if opts.Advertise != "" {
		return opts.Advertise
	}
	return b.Addr()
}
