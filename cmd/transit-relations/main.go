// Command transit-relations is the relationship controller transit
// installs with the "relations" addon, and the wait init container it
// injects (`transit-relations wait`). See package relations.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/cloudtransit/transit/controllers/relations"
	"github.com/cloudtransit/transit/controllers/relations/api/v1alpha1"
	"github.com/cloudtransit/transit/controllers/webhookcert"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "wait" {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		defer stop()
		if err := relations.Wait(ctx, os.Getenv, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "transit-relations wait:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "transit-relations:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		opts                    relations.Options
		qps                     float64
		burst                   int
		image, certDir          string
		metricsAddr, healthAddr string
		webhookPort             int
		leaderElect             bool
		leaderElectionNamespace string
		logLevel                string
		namespace               string
		webhookService          string
		webhookSecret           string
		webhookConfig           string
	)
	flag.IntVar(&opts.Workers, "workers", 4, "consumers reconciled at once, per workload kind")
	flag.IntVar(&opts.History, "history", 10, "revisions a Relationship keeps")
	flag.StringVar(&opts.ClusterDomain, "cluster-domain", "cluster.local", "the cluster's DNS domain")
	flag.Float64Var(&qps, "api-qps", 50, "API requests per second (a provider change writes one template per consumer)")
	flag.IntVar(&burst, "api-burst", 100, "API requests in a burst")
	flag.StringVar(&image, "image", "", "this controller's image, which the wait init container runs (required)")
	flag.StringVar(&certDir, "cert-dir", "/tmp/k8s-webhook-server/serving-certs", "the webhook's tls.crt and tls.key")
	flag.IntVar(&webhookPort, "webhook-port", 9443, "the webhook's port")
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "metrics address (0: none)")
	flag.StringVar(&healthAddr, "health-probe-bind-address", ":8081", "liveness and readiness probes' address")
	flag.BoolVar(&leaderElect, "leader-elect", true, "one active controller among the replicas (the webhook serves on all)")
	flag.StringVar(&leaderElectionNamespace, "leader-election-namespace", "", "where the leader Lease lives (default: the pod's namespace)")
	flag.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	flag.StringVar(&namespace, "namespace", "", "the controller's namespace: its webhook Service, certificate Secret and leader Lease (required)")
	flag.StringVar(&webhookService, "webhook-service", "transit-relations-webhook", "the webhook's Service, which its certificate names")
	flag.StringVar(&webhookSecret, "webhook-secret", "transit-relations-webhook-cert", "the Secret keeping the webhook's CA and certificate")
	flag.StringVar(&webhookConfig, "webhook-configuration", "transit-relations", "the MutatingWebhookConfiguration whose caBundle is the CA")
	flag.Parse()
	if image == "" {
		return fmt.Errorf("--image is required: the wait init container runs this controller's image")
	}
	if namespace == "" {
		return fmt.Errorf("--namespace is required (the pod's: the webhook's Service and certificate live there)")
	}
	if leaderElectionNamespace == "" {
		leaderElectionNamespace = namespace
	}
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
	cfg.QPS, cfg.Burst = float32(qps), burst
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Cache:                   relations.CacheOptions(),
		Metrics:                 metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress:  healthAddr,
		LeaderElection:          leaderElect,
		LeaderElectionID:        "transit-relations",
		LeaderElectionNamespace: leaderElectionNamespace,
		// Webhooks serve on every replica, leader or not.
		WebhookServer: webhook.NewServer(webhook.Options{Port: webhookPort, CertDir: certDir}),
	})
	if err != nil {
		return err
	}
	// The webhook's certificate before its server starts; every replica
	// keeps its files current.
	direct, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	certs := &webhookcert.Manager{Client: direct, Namespace: namespace, Secret: webhookSecret, Service: webhookService,
		CertDir: certDir, MutatingWebhookConfigurations: []string{webhookConfig}}
	ctx := ctrl.SetupSignalHandler()
	if err := retry.OnError(retry.DefaultBackoff, func(error) bool { return ctx.Err() == nil }, func() error { return certs.Ensure(ctx) }); err != nil {
		return err
	}
	log := ctrl.Log.WithName("webhookcert")
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		certs.Run(ctx, func(format string, args ...any) { log.Info(fmt.Sprintf(format, args...)) })
		return nil
	})); err != nil {
		return err
	}
	r := &relations.Reconciler{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorderFor("transit-relations"), Options: opts}
	if err := r.SetupWithManager(mgr); err != nil {
		return err
	}
	mgr.GetWebhookServer().Register(relations.WebhookPath, &webhook.Admission{Handler: &relations.Webhook{
		Reader: mgr.GetAPIReader(), Decoder: admission.NewDecoder(scheme), Image: image}})
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
		return err
	}
	return mgr.Start(ctx)
}
