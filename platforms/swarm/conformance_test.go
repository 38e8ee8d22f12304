package swarm_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/platforms/platformtest"
	"github.com/cloudtransit/transit/platforms/swarm"
	"github.com/cloudtransit/transit/provider"
	"github.com/cloudtransit/transit/shellquote"
)

// image is the workload the suite runs; every node loads it from the
// local provider's images directory at install.
const image = "transit-platformtest/busybox:latest"

// TestConformance runs the platform conformance suite against the Swarm
// driver on real local nodes (root; skipped with -short).
func TestConformance(t *testing.T) {
	platformtest.Run(t, platformtest.Harness{
		Platform: "swarm",
		Setup: func(t *testing.T, _ *districts.District, imagesDir string) {
			if err := platformtest.WriteBusyboxImage(filepath.Join(imagesDir, "platformtest-busybox.tar"), image); err != nil {
				t.Fatal(err)
			}
		},
		New: func(env platformtest.Env) provider.Platform {
			return swarm.New(env.Cluster, swarm.Options{SSH: env.SSH, PollInterval: 250 * time.Millisecond})
		},
		StopEngine: func(ctx context.Context, env platformtest.Env, n districts.Node) error {
			_, err := env.Run(ctx, n, "stop dockerd", stopDockerd, nil)
			return err
		},
		StartEngine: func(ctx context.Context, _ platformtest.Env, p provider.Platform, n districts.Node) error {
			return p.Install(ctx, n) // starts dockerd when it does not run
		},
		Block: func(ctx context.Context, env platformtest.Env, m, n districts.Node) (string, error) {
			name := "pt-block-" + strings.ReplaceAll(n.ID, ".", "-")
			_, err := env.Run(ctx, m, "run a service pinned to "+n.ID, blockScript(name, n.ID), nil)
			return name, err
		},
		Unblock: func(ctx context.Context, env platformtest.Env, m districts.Node, name string) error {
			_, err := env.Run(ctx, m, "remove service "+name, "set -eu\ndocker service rm "+shellquote.Quote(name)+" >/dev/null\n", nil)
			return err
		},
		DrainTimeout: 30 * time.Second,
	})
}

// stopDockerd stops the node's Docker engine (started by the driver's
// install without an init system) and waits until it is gone.
const stopDockerd = `set -eu
pid=$(cat /run/transit/dockerd.pid)
kill "$pid"
i=0
while kill -0 "$pid" 2>/dev/null; do
	i=$((i + 1))
	if [ "$i" -ge 600 ]; then echo "dockerd ($pid) did not stop within 60s" >&2; exit 1; fi
	sleep 0.1
done
if docker info >/dev/null 2>&1; then echo "docker still answers" >&2; exit 1; fi
`

// blockScript runs, on a manager, a global service that may run on node
// id only: a drain of that node would leave it with no task anywhere,
// which the driver refuses. It returns once the service's task runs.
func blockScript(name, id string) string {
	return fmt.Sprintf(`set -eu
docker service create --detach --no-resolve-image --quiet --name %[1]s --mode global \
	--constraint node.labels.%[2]s==%[3]s --stop-grace-period 1s %[4]s sleep 3600 >/dev/null
i=0
until docker service ps --filter desired-state=running --format '{{.CurrentState}}' %[1]s | grep -q '^Running'; do
	i=$((i + 1))
	if [ "$i" -ge 600 ]; then
		echo "service %[1]s did not start within 120s:" >&2
		docker service ps --no-trunc %[1]s >&2
		exit 1
	fi
	sleep 0.2
done
`, shellquote.Quote(name), districts.TagNode, shellquote.Quote(id), shellquote.Quote(image))
}
