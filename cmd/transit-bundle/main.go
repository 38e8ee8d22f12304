// Command transit-bundle builds transit's offline Kubernetes bundle (see
// package bundle/build); `make bundle` runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/cloudtransit/transit/bundle/build"
)

func main() {
	out := flag.String("out", "build/bundle", "the bundle directory")
	repo := flag.String("repo", ".", "transit's source tree")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	m, err := build.Build(ctx, build.Options{Repo: *repo, Out: *out, Log: os.Stderr})
	if err != nil {
		fmt.Fprintln(os.Stderr, "transit-bundle:", err)
		os.Exit(1)
	}
	fmt.Printf("bundle %s (Kubernetes %s, %d files, %d images) up to date in %s\n",
		*out, m.Kubernetes, len(m.Files), len(m.Images), time.Since(start).Round(100*time.Millisecond))
}
