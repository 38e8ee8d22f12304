package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// autoscaled makes the paper's AWS workers autoscaled between 2 and 12.
func (h *harness) autoscaled(t *testing.T) {
	t.Helper()
	cfg, err := districts.Load(districts.Paths{Cluster: h.path("cluster.json"), Districts: h.path("districts.json"), Prices: h.path("prices.json")})
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range cfg.Cluster.Deployments {
		if d.District == "aws-europe" && d.Role == districts.RoleWorker {
			cfg.Cluster.Deployments[i].Quantity, cfg.Cluster.Deployments[i].Autoscale = 0, &districts.Autoscale{Min: 2, Max: 12}
		}
	}
	writeJSONFile(t, h.path("cluster.json"), cfg.Cluster)
}

// transit autoscale from cron: --json prints the decision, then apply's
// lines; --dry-run changes nothing; plan shows the autoscaled quantity;
// a cluster without autoscale bounds is a configuration error.
func TestAutoscaleCommand(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := h.run(t, runOpts{}, "autoscale")
	wantCode(t, r, 1)
	if !strings.Contains(r.err, "no deployment of cluster swarm-europe has autoscale bounds") {
		t.Errorf("autoscale without bounds:\n%s", r)
	}
	h.priced(t, nil)
	h.autoscaled(t)
	wantCode(t, h.run(t, runOpts{}, "apply", "--auto-approve"), 0)
	if n, _ := h.cloud.count(); n != 8 {
		t.Fatalf("%d machines, want 3 masters and 3+2 workers", n)
	}
	h.platform.mu.Lock()
	h.platform.pinned = map[string][]provider.Workload{}
	for id := range h.platform.members {
		h.platform.pinned[id] = []provider.Workload{{Name: "default/filler-" + id, MilliCPU: 900}}
	}
	h.platform.workloads = []provider.Workload{
		{Name: "default/api-1", MilliCPU: 700, MemoryBytes: 1 << 30, Selector: map[string]string{"scheduling-priority": "high"}},
		{Name: "default/api-2", MilliCPU: 700, MemoryBytes: 1 << 30, Selector: map[string]string{"scheduling-priority": "high"}},
		{Name: "default/huge-1", MilliCPU: 64000},
	}
	h.platform.mu.Unlock()

	r = h.run(t, runOpts{}, "autoscale", "--dry-run")
	wantCode(t, r, 0)
	if !strings.Contains(r.out, `"deployment=aws-europe/small/worker from=2 to=4`) && !strings.Contains(r.out, "deployment=aws-europe/small/worker from=2 to=4") {
		t.Errorf("dry run:\n%s", r)
	}
	if n, _ := h.cloud.count(); n != 8 {
		t.Fatalf("%d machines after a dry run, want 8", n)
	}

	r = h.run(t, runOpts{}, "autoscale", "--json")
	wantCode(t, r, 0)
	lines, last := jsonLines(t, r)
	if lines[0]["type"] != typeAutoscale || !last.Result.Converged {
		t.Fatalf("autoscale --json: first line %v, result %+v", lines[0], last)
	}
	var first autoscaleJSON
	if err := json.NewDecoder(bytes.NewReader([]byte(strings.SplitN(r.out, "\n", 2)[0]))).Decode(&first); err != nil {
		t.Fatal(err)
	}
	if len(first.Decisions) != 1 || first.Decisions[0].To != 4 || len(first.Problems) != 1 || !strings.Contains(first.Problems[0], "default/huge* asks for 64000m CPU") {
		t.Errorf("the decision line: %+v", first)
	}
	if n, _ := h.cloud.count(); n != 10 {
		t.Errorf("%d machines after autoscale, want 10", n)
	}
	// The problem is said once.
	r = h.run(t, runOpts{}, "autoscale", "--json")
	wantCode(t, r, 0)
	if strings.Contains(strings.SplitN(r.out, "\n", 2)[0], "huge") {
		t.Errorf("the same problem reported again:\n%s", r.out)
	}
	r = h.run(t, runOpts{}, "plan")
	wantCode(t, r, 0)
	if !strings.Contains(r.out, "aws-europe/small/worker: autoscaled to 4 (min 2, max 12)") {
		t.Errorf("plan does not show the autoscaled quantity:\n%s", r.out)
	}
	data, err := os.ReadFile(h.path("cluster.json"))
	if err != nil || bytes.Contains(data, []byte(`"quantity": 4`)) {
		t.Errorf("cluster.json was rewritten: %v\n%s", err, data)
	}
}
