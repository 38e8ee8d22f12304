package transit_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cloudtransit/transit"
	"github.com/cloudtransit/transit/districts"
)

// A MAPE auto-scaling loop embeds transit: each iteration opens the
// cluster to change it (taking the state lock), plans, approves the plan by
// its own rules, applies it and reads the result. A real loop registers
// transit.BuiltinDrivers(transit.BuiltinOptions{}); this example registers
// in-memory fakes.
func Example() {
	dir, err := exampleDir()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = os.RemoveAll(dir) }()
	cloud, platform := newFakeCloud(""), newFakePlatform()
	ctx := context.Background() // a real loop: signal.NotifyContext

	s, err := transit.Open(ctx, transit.Options{
		Files: districts.Paths{
			Cluster:     filepath.Join(dir, "cluster.json"),
			Districts:   filepath.Join(dir, "districts.json"),
			Credentials: filepath.Join(dir, "credentials.json"),
			State:       filepath.Join(dir, "resources.json"),
		},
		Access:  transit.Change,
		Command: "autoscaler",
		Drivers: transit.Drivers{
			Infrastructures: map[string]transit.InfrastructureFunc{"gce": cloud.driver, "aws": cloud.driver},
			Platforms:       map[string]transit.PlatformFunc{"swarm": platform.driver},
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = s.Close() }()

	plan, err := s.Plan(ctx, transit.PlanOptions{Refresh: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	sum := plan.Summary()
	fmt.Printf("plan: %d to add, %d to change, %d to remove\n", sum.Add, sum.Change, sum.Remove)
	if sum.Remove > 2 {
		fmt.Println("too many removals for one iteration; asking a person")
		return
	}

	res, err := s.Apply(ctx, transit.ApplyOptions{Confirmed: &plan})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("converged: %v, %d nodes in resources.json\n", res.Converged, len(s.State().Nodes))

	// While the session is open, no other run changes the cluster.
	_, err = transit.Open(ctx, transit.Options{
		Files:  districts.Paths{Cluster: filepath.Join(dir, "cluster.json"), Districts: filepath.Join(dir, "districts.json"), State: filepath.Join(dir, "resources.json")},
		Access: transit.Change,
	})
	fmt.Println("second run locked out:", errors.Is(err, transit.ErrLocked))

	// Output:
	// plan: 18 to add, 0 to change, 0 to remove
	// converged: true, 16 nodes in resources.json
	// second run locked out: true
}

// exampleDir is a directory with the paper's cluster: 3 masters and 13
// workers in a GCE and an AWS district.
func exampleDir() (string, error) {
	dir, err := os.MkdirTemp("", "transit-example")
	if err != nil {
		return "", err
	}
	for _, name := range []string{"cluster.json", "districts.json", "credentials.json"} {
		data, err := os.ReadFile(filepath.Join(paper, name))
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, name), data, 0o600)
		}
		if err != nil {
			return "", errors.Join(err, os.RemoveAll(dir))
		}
	}
	return dir, nil
}
