package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cloudtransit/transit/cloudsim"
	"github.com/cloudtransit/transit/districts"
)

// experiment is one of the paper's measurements (Kratzke, CLOSER 2017),
// on a 10-node cluster: 1 master and 9 workers, a Swarm as in the paper or
// Kubernetes on the node mesh.
type experiment struct {
	platform  string
	id, title string
	from, to  string // providers; to is empty for launch and terminate
	moved     int    // nodes transferred (10 moves the master too)
	paper     float64
	target    float64
}

func (e experiment) route() string {
	if e.to == "" {
		return e.from
	}
	return e.from + "→" + e.to
}

// experiments are E1–E5 on AWS and GCE, with the paper's medians where it
// gives one and the targets; then E1 and E5 on Kubernetes (the
// paper measured a Swarm: no numbers of its own).
var experiments = []experiment{
	{platform: "swarm", id: "E1", title: "launch 10 nodes", from: "aws", paper: 260},
	{platform: "swarm", id: "E2", title: "terminate 10 nodes", from: "aws", paper: 90},
	{platform: "swarm", id: "E1", title: "launch 10 nodes", from: "gce", paper: 450},
	{platform: "swarm", id: "E2", title: "terminate 10 nodes", from: "gce", paper: 720, target: 150},
	{platform: "swarm", id: "E3", title: "transfer 1 node", from: "aws", to: "gce", moved: 1, paper: 240},
	{platform: "swarm", id: "E3", title: "transfer 1 node", from: "gce", to: "aws", moved: 1},
	{platform: "swarm", id: "E4", title: "transfer 5 nodes", from: "aws", to: "gce", moved: 5},
	{platform: "swarm", id: "E4", title: "transfer 5 nodes", from: "gce", to: "aws", moved: 5},
	{platform: "swarm", id: "E5", title: "transfer 10 nodes", from: "aws", to: "gce", moved: 10, paper: 360},
	{platform: "swarm", id: "E5", title: "transfer 10 nodes", from: "gce", to: "aws", moved: 10, paper: 780, target: 360},
	{platform: "kubernetes", id: "E1", title: "launch 10 nodes", from: "aws"},
	{platform: "kubernetes", id: "E1", title: "launch 10 nodes", from: "gce"},
	{platform: "kubernetes", id: "E5", title: "transfer 10 nodes", from: "aws", to: "gce", moved: 10},
	{platform: "kubernetes", id: "E5", title: "transfer 10 nodes", from: "gce", to: "aws", moved: 10},
}

// selected says TRANSIT_PAPER_ONLY keeps e: a comma-separated list of a
// platform, an experiment or a provider, each of which e must match
// ("kubernetes,E5").
func (e experiment) selected(only string) bool {
	if only == "" {
		return true
	}
	for _, term := range strings.Split(only, ",") {
		term = strings.TrimSpace(term)
		if term != e.platform && term != e.id && (e.from != term || e.to != "" && e.to != term) {
			return false
		}
	}
	return true
}

// paperDistrict is the district the experiments use on a provider.
var paperDistrict = map[string]string{"aws": "aws-eu", "gce": "gce-eu"}

// paperStrategy: replace all moved nodes at once (max_surge 10, the
// paper's doubling, bounded), remove one at a time as the paper advises.
func paperStrategy() districts.Strategy {
	return districts.Strategy{MaxSurge: districts.Int(10), MaxUnavailable: districts.Int(1), DrainTimeout: districts.Duration(time.Minute)}
}

// BenchmarkPaper replays E1–E5 against the emulated clouds with the
// kratzke2017 latency profile, time-scaled (TRANSIT_PAPER_SCALE, default
// 0.1), instances backed by real local nodes running a real Swarm. For each
// it prints transit's makespan in real seconds, the paper's number, the
// critical-path lower bound under the same profile and their ratio, and
// writes the table as JSON and an SVG chart to TRANSIT_PAPER_OUT (default
// ../build/paper), with each measured run's apply --json events.
// TRANSIT_PAPER_ONLY=aws runs the experiments of one provider,
// TRANSIT_PAPER_ONLY=E5 one experiment, TRANSIT_PAPER_ONLY=kubernetes one
// platform's, TRANSIT_PAPER_ONLY=kubernetes,E5 both at once. `make
// bench-paper` runs it.
func BenchmarkPaper(b *testing.B) {
	scale := 0.1
	if v := os.Getenv("TRANSIT_PAPER_SCALE"); v != "" {
		s, err := strconv.ParseFloat(v, 64)
		if err != nil || s <= 0 {
			b.Fatalf("TRANSIT_PAPER_SCALE=%q: want a positive number", v)
		}
		scale = s
	}
	outDir := os.Getenv("TRANSIT_PAPER_OUT")
	if outDir == "" {
		outDir = filepath.Join("..", "build", "paper")
	}
	profile, err := cloudsim.LookupProfile(cloudsim.ProfileKratzke2017, scale)
	if err != nil {
		b.Fatal(err)
	}
	env := startClouds(b, profile)
	provider := map[string]string{}
	for _, d := range env.districts() {
		provider[d.ID] = d.Provider
	}
	model := boundModel{profile: profile, provider: provider, maxUnavailable: 1}

	var rows []paperRow
	for _, platform := range []string{"swarm", "kubernetes"} {
		var mine []experiment
		for _, e := range experiments {
			if e.platform == platform && e.selected(os.Getenv("TRANSIT_PAPER_ONLY")) {
				mine = append(mine, e)
			}
		}
		if len(mine) == 0 {
			continue
		}
		// A cluster per platform, each in a sub-benchmark of its own: the
		// host is held by one cluster at a time.
		b.Run(platform, func(b *testing.B) {
			c := paperCluster(b, env, platform)
			for b.Loop() {
				for _, e := range mine {
					if missing := missingDistrict(e, provider); missing != "" {
						fmt.Printf("%s %s skipped: the emulated clouds have no district %s yet\n", e.id, e.route(), missing)
						continue
					}
					rows = append(rows, runExperiment(b, c, e, model, outDir))
				}
			}
		})
	}
	var table strings.Builder
	if err := writeTable(&table, rows); err != nil {
		b.Fatal(err)
	}
	fmt.Printf("\nThe paper's experiments, kratzke2017 profile at time scale %g (real seconds):\n\n%s\n", scale, table.String())
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		b.Fatal(err)
	}
	data, err := json.MarshalIndent(map[string]any{"profile": profile.Name, "time_scale": scale, "max_ratio": maxRatio, "experiments": rows}, "", "  ")
	if err != nil {
		b.Fatal(err)
	}
	for name, content := range map[string][]byte{"paper.json": data, "paper.svg": svgChart(rows), "paper.md": []byte(markdownTable(rows))} {
		if err := os.WriteFile(filepath.Join(outDir, name), content, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	fmt.Printf("wrote %s/paper.{json,svg,md}\n", outDir)
}

// paperCluster is the experiments' cluster on platform: Kubernetes from
// the bundle, on the mesh (E5 spans both clouds, whose networks are
// apart).
func paperCluster(b *testing.B, env *clouds, platform string) *cluster {
	cfg := districts.Cluster{
		Type: "cluster", ID: "paper", Platform: platform,
		Flavors:  []districts.Flavor{{Flavor: "small", Cores: 1, MemoryGB: 1, DiskGB: 10}},
		Strategy: paperStrategy(),
	}
	ds := env.districts()
	if platform == "kubernetes" {
		cfg.ID = "paper-k8s"
		cfg.NetworkSettings = &districts.Network{Mesh: districts.MeshWireGuard}
		dir, err := bundleDir()
		if err != nil {
			b.Fatal(err)
		}
		for i := range ds {
			ds[i].KubernetesInstall, ds[i].KubernetesBundle = districts.InstallBundle, dir
		}
	}
	c := newCluster(b, cloudsRoot, cfg, ds)
	env.writeCredentials(c)
	c.env = append(c.env, "TRANSIT_POLL_INTERVAL=50ms")
	if platform == "kubernetes" {
		// E5 runs 20 Kubernetes nodes at once on the host's cores.
		c.limit = 40 * time.Minute
	}
	return c
}

// missingDistrict names an experiment's district the emulated clouds
// lack, if any.
func missingDistrict(e experiment, provider map[string]string) string {
	for _, p := range []string{e.from, e.to} {
		if p == "" {
			continue
		}
		if _, ok := provider[paperDistrict[p]]; !ok {
			return paperDistrict[p]
		}
	}
	return ""
}

// runExperiment brings the cluster into the experiment's start state
// (unmeasured), runs the measured command and rates it.
func runExperiment(b *testing.B, c *cluster, e experiment, model boundModel, outDir string) paperRow {
	from, to := paperDistrict[e.from], paperDistrict[e.to]
	set := func(fromMasters, fromWorkers, toMasters, toWorkers int) {
		c.cfg.Deployments = []districts.Deployment{
			{District: from, Flavor: "small", Role: districts.RoleMaster, Quantity: fromMasters},
			{District: from, Flavor: "small", Role: districts.RoleWorker, Quantity: fromWorkers},
		}
		if to != "" {
			c.cfg.Deployments = append(c.cfg.Deployments,
				districts.Deployment{District: to, Flavor: "small", Role: districts.RoleMaster, Quantity: toMasters},
				districts.Deployment{District: to, Flavor: "small", Role: districts.RoleWorker, Quantity: toWorkers})
		}
		c.writeConfig()
	}
	measure := func(args ...string) (time.Duration, []step) {
		start := time.Now()
		r := c.transit(args...)
		wall := time.Since(start)
		// The run's events, to see where its time went, kept also (with
		// what it printed to stderr) when it failed or ran out of time.
		name := filepath.Join(outDir, e.platform+"-"+e.id+"-"+strings.ReplaceAll(e.route(), "→", "-"))
		if err := os.MkdirAll(outDir, 0o755); err == nil {
			_ = os.WriteFile(name+".jsonl", []byte(r.stdout), 0o644)
			if r.code != 0 {
				_ = os.WriteFile(name+".stderr", []byte(r.stderr), 0o644)
			}
		}
		if r.code != 0 {
			b.Fatalf("%s %s: transit %s: exit %d (events in %s.jsonl)\n%s", e.id, e.route(), strings.Join(args, " "), r.code, name, r.stderr)
		}
		steps, err := readSteps(strings.NewReader(r.stdout))
		if err != nil {
			b.Fatal(err)
		}
		return wall, steps
	}
	setup := func() {
		set(1, 9, 0, 0)
		if r := c.transit("apply", "--auto-approve"); r.code != 0 {
			b.Fatalf("%s %s: set up 10 nodes in %s: exit %d\n%s", e.id, e.route(), from, r.code, r.stderr)
		}
	}
	destroy := func() {
		if r := c.transit("destroy", "--auto-approve"); r.code != 0 {
			b.Fatalf("%s %s: destroy: exit %d\n%s", e.id, e.route(), r.code, r.stderr)
		}
	}

	var wall time.Duration
	var steps []step
	switch e.id {
	case "E1":
		set(1, 9, 0, 0)
		wall, steps = measure("apply", "--auto-approve", "--json")
		// E2 of the same provider terminates this cluster; without one
		// (Kubernetes) it goes now, so the next experiment starts empty.
		if e.platform != "swarm" {
			destroy()
		}
	case "E2":
		if len(c.statusNow().Nodes) != 10 {
			setup()
		}
		wall, steps = measure("destroy", "--auto-approve", "--json")
	default:
		setup()
		if e.moved >= 10 {
			set(0, 0, 1, 9)
		} else {
			set(1, 9-e.moved, 0, e.moved)
		}
		wall, steps = measure("apply", "--auto-approve", "--json")
		destroy()
	}

	model.destroy = e.id == "E2"
	bound := lowerBound(steps, model)
	unscaled := model
	unscaled.profile.Scale = 1
	ratio := wall.Seconds() / bound.Seconds()
	row := paperRow{
		Platform: e.platform, Experiment: e.id, Title: e.title, Route: e.route(),
		Bound: lowerBound(steps, unscaled).Seconds(), Ratio: ratio, Paper: e.paper, Target: e.target,
		WallS: wall.Seconds(),
	}
	row.Makespan = row.Bound * ratio
	row.judge()
	b.Logf("%s %s: wall %.1fs, bound %.1fs (ratio %.3f); real: transit %.0fs, bound %.0fs", e.id, e.route(), wall.Seconds(), bound.Seconds(), ratio, row.Makespan, row.Bound)
	return row
}
