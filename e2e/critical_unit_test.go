package e2e

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cloudtransit/transit/cloudsim"
)

// The critical path of runs whose bound is worked out by hand.
func TestLowerBound(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	at := func(kind, district, node, role string, startS, tookS float64) step {
		start := t0.Add(time.Duration(startS * float64(time.Second)))
		return step{kind: kind, district: district, node: node, role: role, start: start,
			end: start.Add(time.Duration(tookS * float64(time.Second)))}
	}
	model := boundModel{profile: cloudsim.Kratzke2017, provider: map[string]string{"aws": "aws", "gce": "gce"}, maxUnavailable: 1}
	sec := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

	// E1 on AWS: group 10 s and its rules 10 s, launch 140 s, init 20 s;
	// the workers' joins (5 s) may overlap the master's init, so the master
	// decides.
	e1 := []step{at("create-group", "aws", "", "", 0, 11), at("launch", "aws", "m1", "master", 11, 150),
		at("allow", "aws", "", "", 161, 10), at("init", "aws", "m1", "master", 171, 20)}
	for _, w := range []string{"w1", "w2"} {
		e1 = append(e1, at("launch", "aws", w, "worker", 11, 150), at("join", "aws", w, "worker", 191, 5))
	}
	if got, want := lowerBound(e1, model), sec(180); got != want {
		t.Errorf("E1 bound = %v, want %v", got, want)
	}
	// With install measured apart, a worker's join waits for the master.
	e1i := append(e1, at("install", "aws", "w1", "worker", 161, 3), at("install", "aws", "w2", "worker", 161, 3))
	if got, want := lowerBound(e1i, model), sec(185); got != want {
		t.Errorf("E1 bound with installs = %v, want %v", got, want)
	}

	// A worker moves from AWS to GCE: GCE group 120 s + launch 220 s, the
	// slower group update (GCE 25 s), join (its 5 s may overlap the update:
	// install and join are one step here), then the old worker drains (2 s)
	// and leaves (1 s), and AWS revokes its address (10 s).
	move := []step{at("create-group", "gce", "", "", 0, 120), at("launch", "gce", "w2", "worker", 120, 220),
		at("allow", "gce", "", "", 340, 25), at("allow", "aws", "", "", 340, 10), at("join", "gce", "w2", "worker", 365, 5),
		at("drain", "aws", "w1", "worker", 370, 2), at("remove", "aws", "w1", "worker", 372, 1),
		at("terminate", "aws", "w1", "worker", 373, 1), at("revoke", "aws", "", "", 374, 10)}
	if got, want := lowerBound(move, model), sec(120+220+25+2+1+10); got != want {
		t.Errorf("transfer bound = %v, want %v", got, want)
	}
	// The old worker's address goes from the GCE group too, after it left:
	// GCE's slower update (25 s) decides. (The bound once timed a revoke
	// from the leaving nodes of the group's own district only, and took
	// this one for free.)
	both := append(slices.Clone(move), at("revoke", "gce", "", "", 374, 25))
	if got, want := lowerBound(both, model), sec(120+220+25+2+1+25); got != want {
		t.Errorf("transfer bound revoking from both groups = %v, want %v", got, want)
	}

	// Emptying AWS: its group goes only once the machine finished
	// terminating (60 s), then takes 10 s. On GCE it need not wait.
	emptied := append(move, at("delete-group", "aws", "", "", 440, 10))
	if got, want := lowerBound(emptied, model), sec(120+220+25+2+1+60+10); got != want {
		t.Errorf("transfer bound emptying AWS = %v, want %v", got, want)
	}

	// A destroy on GCE: the group may go at once, but the run ends when
	// the machine is gone (60 s after its terminate).
	e2 := []step{at("terminate", "gce", "w1", "worker", 0, 1), at("delete-group", "gce", "", "", 1, 25)}
	if got, want := lowerBound(e2, model), sec(25); got != want {
		t.Errorf("GCE terminations in an apply = %v, want %v (the group decides)", got, want)
	}
	destroy := model
	destroy.destroy = true
	if got, want := lowerBound(e2, destroy), sec(60); got != want {
		t.Errorf("GCE destroy = %v, want %v (the machine decides)", got, want)
	}

	// Two removals one at a time add up; two at a time overlap.
	two := append(move, at("launch", "gce", "w4", "worker", 120, 220), at("join", "gce", "w4", "worker", 365, 5),
		at("drain", "aws", "w3", "worker", 373, 2), at("remove", "aws", "w3", "worker", 375, 1))
	if got, want := lowerBound(two, model), sec(120+220+25+3+3+10); got != want {
		t.Errorf("two removals one at a time = %v, want %v", got, want)
	}
	model.maxUnavailable = 2
	if got, want := lowerBound(two, model), sec(120+220+25+3+10); got != want {
		t.Errorf("two removals two at a time = %v, want %v", got, want)
	}

	// The time scale scales the cloud's part only.
	model.profile.Scale = 0.1
	if got, want := lowerBound(e1, model), sec(2+14+20); got != want {
		t.Errorf("E1 bound at scale 0.1 = %v, want %v", got, want)
	}
}

func TestReadSteps(t *testing.T) {
	in := `{"format_version":"1","type":"round","time":"2026-11-23T00:00:00Z","round":1,"phase":"start"}
{"format_version":"1","type":"action","time":"2026-11-23T00:00:01Z","round":1,"phase":"start","action":{"kind":"launch","district":"aws","node":"c-worker-1","role":"worker","reason":"r"},"seconds":0}
{"format_version":"1","type":"action","time":"2026-11-23T00:00:03.5Z","round":1,"phase":"finish","action":{"kind":"launch","district":"aws","node":"c-worker-1","role":"worker","reason":"r"},"seconds":2.5}
not json
{"format_version":1,"type":"addons","time":"2026-11-23T00:00:10Z","round":2,"changed":[],"seconds":6.25}
`
	steps, err := readSteps(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 2 || steps[0].kind != "launch" || steps[0].node != "c-worker-1" || steps[0].took() != 2500*time.Millisecond ||
		steps[1].kind != "addons" || steps[1].took() != 6250*time.Millisecond {
		t.Errorf("readSteps = %+v, want the launch and the addons step as apply --json prints them", steps)
	}
}

func TestPaperReport(t *testing.T) {
	rows := []paperRow{
		{Experiment: "E1", Title: "launch 10 nodes", Route: "aws", Makespan: 181, Paper: 260, Bound: 175, Ratio: 181.0 / 175},
		{Experiment: "E3", Title: "transfer 1 node", Route: "gce→aws", Makespan: 200, Bound: 150, Ratio: 200.0 / 150},
		{Experiment: "E2", Title: "terminate <10>", Route: "gce", Makespan: 160, Paper: 720, Bound: 155, Ratio: 160.0 / 155, Target: 150},
		{Experiment: "E4", Title: "beats its bound", Route: "aws", Makespan: 90, Bound: 100, Ratio: 0.9},
	}
	for i := range rows {
		rows[i].judge()
	}
	if !rows[0].Pass || rows[1].Pass || rows[2].Pass || rows[3].Pass {
		t.Errorf("judged %v %v %v %v, want pass, miss (ratio), miss (target), miss (a wrong bound)", rows[0].Pass, rows[1].Pass, rows[2].Pass, rows[3].Pass)
	}
	var out strings.Builder
	if err := writeTable(&out, rows); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"1.034", "MISSED", "≤ 150 s", "–"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	svg := svgChart(rows)
	dec := xml.NewDecoder(bytes.NewReader(svg))
	rects := 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("chart is not well-formed XML: %v\n%s", err, svg)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "rect" {
			rects++
		}
	}
	// Background, two legend swatches, four transit bars, two paper bars.
	if rects != 9 {
		t.Errorf("chart has %d rects, want 9", rects)
	}
	if !strings.Contains(string(svg), "terminate &lt;10&gt;") {
		t.Errorf("chart does not escape labels")
	}
}
