// Command streams-controller is the streaming controller transit installs
// with the "streams" addon. See package streams.
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/cloudtransit/transit/controllers/streams"
	"github.com/cloudtransit/transit/controllers/streams/api/v1alpha1"
	"github.com/cloudtransit/transit/controllers/streams/kafka"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "streams-controller:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		opts                    streams.Options
		history                 int
		metricsAddr, healthAddr string
		leaderElect             bool
		leaderElectionNamespace string
		logLevel                string
		securityDir             string
	)
	flag.StringVar(&opts.Bootstrap, "bootstrap", "", "the Kafka (host:port, comma separated) of sources and sinks that name none")
	flag.StringVar(&opts.SidecarImage, "sidecar-image", "", "the sidecar's image, run beside every function (required)")
	flag.IntVar(&history, "history", 10, "finished revisions a Topology keeps")
	flag.DurationVar(&opts.UpgradeTimeout, "upgrade-timeout", 0, "standby upgrade timeout of topologies that set none (default 5m)")
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "metrics address (0: none)")
	flag.StringVar(&healthAddr, "health-probe-bind-address", ":8081", "liveness and readiness probes' address")
	flag.BoolVar(&leaderElect, "leader-elect", true, "one active controller among the replicas")
	flag.StringVar(&leaderElectionNamespace, "leader-election-namespace", "", "where the leader Lease lives (default: the pod's namespace)")
	flag.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	flag.StringVar(&securityDir, "kafka-security-dir", "", "a mounted Secret's files: how the controller reaches the Kafka of --bootstrap (TLS, SASL; see docs/streams.md); none: plaintext")
	flag.StringVar(&opts.KafkaSecret, "kafka-secret", "", "the Secret every processor pod using the Kafka of --bootstrap mounts from its own namespace for its sidecar; none: plaintext")
	flag.Parse()
	if opts.SidecarImage == "" {
		return fmt.Errorf("--sidecar-image is required")
	}
	opts.History = history
	var level slog.Level
	if err := level.UnmarshalText([]byte(logLevel)); err != nil {
		return fmt.Errorf("--log-level %q: want debug, info, warn or error", logLevel)
	}
	ctrl.SetLogger(logr.FromSlogHandler(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level})))

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Cache:                   streams.CacheOptions(),
		Metrics:                 metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress:  healthAddr,
		LeaderElection:          leaderElect,
		LeaderElectionID:        "transit-streams",
		LeaderElectionNamespace: leaderElectionNamespace,
		// Hand the lease over on shutdown (a rollout), not once it expires.
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		return err
	}
	admin := kafka.New()
	defer admin.Close()
	if securityDir != "" {
		if opts.Security, err = kafka.LoadSecurity(securityDir); err != nil {
			return fmt.Errorf("--kafka-security-dir: %w", err)
		}
		if err := admin.Secure(opts.Bootstrap, opts.Security); err != nil {
			return fmt.Errorf("--kafka-security-dir: %w", err)
		}
		ctrl.Log.Info("kafka security", "bootstrap", opts.Bootstrap, "security", opts.Security.String())
	}
	if err := (&streams.PartReconciler{Client: mgr.GetClient(), History: history}).SetupWithManager(mgr); err != nil {
		return err
	}
	r := &streams.TopologyReconciler{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Kafka: admin,
		Recorder: mgr.GetEventRecorderFor("transit-streams"), Options: opts}
	if err := r.SetupWithManager(mgr); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return err
	}
	return mgr.Start(ctrl.SetupSignalHandler())
}
