// Command streams-sidecar runs beside every streams processor's function:
// it feeds the function the processor's input as CloudEvents and writes
// its answers to the outputs. It is configured by the STREAMS_* variables
// the controller's Deployment sets; see package sidecar.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/cloudtransit/transit/controllers/streams/gate"
	"github.com/cloudtransit/transit/controllers/streams/sidecar"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "streams-sidecar:", err)
		// The pod's status shows why it stopped (the controller quotes it
		// in the Topology's conditions): a refused login, an ACL.
		if path := os.Getenv("STREAMS_TERMINATION_LOG"); path != "" {
			_ = os.WriteFile(path, []byte(err.Error()), 0o644)
		}
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	cfg, err := sidecar.ConfigFromEnviron(os.Environ())
	if err != nil {
		return err
	}
	cfg.Log = slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	g, err := chooseGate(cfg)
	if err != nil {
		return err
	}
	cfg.Log.Info("starting", "config", cfg.String())
	return sidecar.Run(ctx, cfg, g)
}

// chooseGate: a file (tests), the Topology watch (a source reader of a
// revision that may be standby), or none.
func chooseGate(cfg sidecar.Config) (sidecar.Gate, error) {
	switch {
	case cfg.GateFile != "":
		return sidecar.FileGate(cfg.GateFile), nil
	case cfg.GateTopology != "":
		rc, err := ctrl.GetConfig() // the pod's service account, or KUBECONFIG
		if err != nil {
			return nil, fmt.Errorf("the Topology gate: %w", err)
		}
		c, err := gate.Client(rc)
		if err != nil {
			return nil, fmt.Errorf("the Topology gate: %w", err)
		}
		return func(ctx context.Context) (sidecar.Start, error) {
			if err := gate.WaitActive(ctx, c, cfg.GateNamespace, cfg.GateTopology, cfg.Revision); err != nil {
				return nil, err
			}
			return gate.StartOffsets(ctx, c, cfg.GateNamespace, cfg.Revision, cfg.Group, cfg.Input.Topic)
		}, nil
	}
	return nil, nil
}
