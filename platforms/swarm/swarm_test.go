package swarm

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestLabelChanges(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		have     map[string]string
		want     map[string]string
		wantSet  map[string]string
		wantDrop []string
	}{
		{
			name:    "fresh node gets identity, tags and the managed list",
			have:    map[string]string{},
			want:    map[string]string{"location": "Germany", "tier": "web"},
			wantSet: map[string]string{"transit-node": "n1", "location": "Germany", "tier": "web", "transit-managed": "location,tier"},
		},
		{
			name:    "in sync",
			have:    map[string]string{"transit-node": "n1", "location": "Germany", "transit-managed": "location"},
			want:    map[string]string{"location": "Germany"},
			wantSet: map[string]string{},
		},
		{
			name:     "changed value, dropped tag, hand-made label left alone",
			have:     map[string]string{"transit-node": "n1", "location": "Germany", "tier": "web", "ops": "x", "transit-managed": "location,tier"},
			want:     map[string]string{"location": "France"},
			wantSet:  map[string]string{"location": "France", "transit-managed": "location"},
			wantDrop: []string{"tier"},
		},
		{
			name:     "every tag removed",
			have:     map[string]string{"transit-node": "n1", "tier": "web", "transit-managed": "tier"},
			want:     map[string]string{},
			wantSet:  map[string]string{},
			wantDrop: []string{"tier", "transit-managed"},
		},
		{
			name:    "a hand-made label becomes managed",
			have:    map[string]string{"transit-node": "n1", "ops": "x"},
			want:    map[string]string{"ops": "x"},
			wantSet: map[string]string{"transit-managed": "ops"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set, drop := labelChanges(tt.have, "n1", tt.want)
			if diff := cmp.Diff(tt.wantSet, set); diff != "" {
				t.Errorf("set (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantDrop, drop); diff != "" {
				t.Errorf("drop (-want +got):\n%s", diff)
			}
		})
	}
}

const inspectJSON = `[
 {"ID":"aaa","Spec":{"Labels":{"transit-node":"c-master-1","transit-managed":"location","location":"Germany","ops":"hand"},"Role":"manager","Availability":"active"},
  "Description":{"Hostname":"c-master-1"},"Status":{"State":"ready","Addr":"10.0.0.2"},
  "ManagerStatus":{"Leader":true,"Reachability":"reachable","Addr":"10.0.0.2:2377"}},
 {"ID":"old","Spec":{"Labels":{"transit-node":"c-worker-1"},"Role":"worker","Availability":"active"},
  "Description":{"Hostname":"c-worker-1"},"Status":{"State":"down","Addr":"10.0.0.3"}},
 {"ID":"bbb","Spec":{"Labels":{},"Role":"worker","Availability":"drain"},
  "Description":{"Hostname":"c-worker-1"},"Status":{"State":"ready","Addr":"10.0.0.3"}},
 {"ID":"ccc","Spec":{"Labels":{"transit-node":"c-master-2"},"Role":"manager","Availability":"active"},
  "Description":{"Hostname":"c-master-2"},"Status":{"State":"ready","Addr":"10.0.0.4"},
  "ManagerStatus":{"Reachability":"unreachable","Addr":"10.0.0.4:2377"}},
 {"ID":"ghost","Spec":{"Labels":{},"Role":"worker","Availability":"active"},
  "Description":{"Hostname":"somebody-else"},"Status":{"State":"ready","Addr":"10.0.0.9"}}
]`

func TestParseTasks(t *testing.T) {
	t.Parallel()
	out := "task|s1|t1|running\ntask|s2|t2|shutdown\nservice|s1|web\nservice|s3|other\n"
	want := []task{
		{service: "s1", name: "web", id: "t1", state: "running"},
		// A service gone meanwhile keeps its id as its name.
		{service: "s2", name: "s2", id: "t2", state: "shutdown"},
	}
	if diff := cmp.Diff(want, parseTasks(out), cmp.AllowUnexported(task{})); diff != "" {
		t.Errorf("parseTasks (-want +got):\n%s", diff)
	}
	if got := []bool{want[0].alive(), want[1].alive()}; got[0] != true || got[1] != false {
		t.Errorf("alive = %v, want [true false]", got)
	}
}

func TestScripts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		script string
		want   []string // lines that must appear
	}{
		{"init", initScript("10.0.0.2", ""), []string{
			"docker swarm init --advertise-addr 10.0.0.2 --listen-addr 0.0.0.0:2377 >/dev/null",
			"docker info --format '{{.Swarm.NodeID}}'",
		}},
		// On the node mesh the overlay networks' VXLAN goes to the
		// mesh address too, inside WireGuard.
		{"init on the mesh", initScript("10.213.0.1", "10.213.0.1"), []string{
			"docker swarm init --advertise-addr 10.213.0.1 --data-path-addr 10.213.0.1 --listen-addr 0.0.0.0:2377 >/dev/null",
		}},
		{"join", joinScript(), []string{
			`if [ "$state" != active ]; then`,
			"-H 'Content-Type: application/json' --data-binary @- http://localhost/swarm/join)",
		}},
		{"token", joinTokenScript("manager"), []string{"docker swarm join-token -q manager"}},
		{"labels", nodeUpdateScript("abc", map[string]string{"b": "2", "a": "it's"}, []string{"z", "y"}, "", ""), []string{
			`in_sequence docker node update --label-add 'a=it'\''s' --label-add b=2 --label-rm y --label-rm z abc`,
		}},
		{"drain", nodeUpdateScript("abc", nil, nil, "drain", ""), []string{"in_sequence docker node update --availability drain abc"}},
		{"promote", nodeUpdateScript("abc", nil, nil, "", "manager"), []string{"in_sequence docker node promote abc"}},
		{"demote", nodeUpdateScript("abc", nil, nil, "", "worker"), []string{"in_sequence docker node demote abc"}},
		{"remove", removeScript("abc"), []string{
			"if ! out=$(docker node rm --force abc 2>&1 >/dev/null); then",
			`*"node "*" not found"*) ;;`,
		}},
		{"rotate", rotateTokensScript(), []string{
			"docker swarm join-token --rotate -q worker >/dev/null",
			"docker swarm join-token --rotate -q manager >/dev/null",
		}},
		{"node tasks", nodeTasksScript("abc"), []string{"ids=$(docker node ps -q abc)",
			"inspect_existing 'task|{{.ServiceID}}|{{.ID}}|{{.Status.State}}|{{.DesiredState}}' $ids",
			"inspect_existing 'service|{{.ID}}|{{.Spec.Name}}' $services"}},
		{"service tasks", serviceTasksScript([]string{"s1", "s2"}), []string{"for s in s1 s2; do"}},
		{"install", installScript("c-worker-1"), []string{
			"hostname c-worker-1",
			`if [ -n "$missing" ]; then`,
			"apt-get -o DPkg::Lock::Timeout=" + aptLockWait + " install -y -q $pkgs >/dev/null",
			"apt-get -o DPkg::Lock::Timeout=" + aptLockWait + " update -q >/dev/null",
			"command -v curl >/dev/null 2>&1 || missing=\"$missing curl\"",
			"if [ -d /run/systemd/system ]; then",
			"setsid dockerd --pidfile /run/transit/dockerd.pid >>/run/transit/dockerd.log 2>&1 </dev/null &",
			"if [ -d /var/lib/transit/images ]; then export DOCKER_SERVICE_PREFER_OFFLINE_IMAGE=1; fi",
			"docker load -i \"$f\" >/dev/null",
		}},
		{"state", localStateScript(), []string{
			"if [ -e /var/lib/docker/swarm/docker-state.json ]; then echo down; else echo none; fi",
			`echo "$state"`,
		}},
		{"members", membersScript(), []string{
			`echo "$state"`,
			`"active true "*) docker node inspect $(docker node ls -q) ;;`,
		}},
		{"leave", leaveScript(), []string{"docker swarm leave >/dev/null", "exit 75"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.HasPrefix(tt.script, "set -eu\n") {
				t.Errorf("script does not start with set -eu:\n%s", tt.script)
			}
			lines := map[string]bool{}
			for l := range strings.Lines(tt.script) {
				lines[strings.TrimSpace(l)] = true
			}
			for _, w := range tt.want {
				if !lines[w] {
					t.Errorf("script lacks line %q:\n%s", w, tt.script)
				}
			}
		})
	}
	if s := nodeUpdateScript("abc", nil, nil, "", ""); s != "set -eu\n" {
		t.Errorf("an empty update runs something: %q", s)
	}
}

// A node update the manager answers "update out of sequence" (the node's
// version changed between the CLI's read and write) is run again; any
// other failure is not.
func TestNodeUpdateRetriesOutOfSequence(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, failure string
		fails         int
		wantErr       bool
		wantCalls     int
	}{
		{"out of sequence twice", "Error response from daemon: rpc error: code = Unknown desc = update out of sequence", 2, false, 3},
		{"another error", "Error response from daemon: node x not found", 1, true, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			fake := `#!/bin/sh
n=$(cat "` + dir + `/calls" 2>/dev/null || echo 0)
n=$((n + 1))
echo "$n" > "` + dir + `/calls"
if [ "$n" -le ` + strconv.Itoa(tt.fails) + ` ]; then echo '` + tt.failure + `' >&2; exit 1; fi
`
			if err := os.WriteFile(filepath.Join(dir, "docker"), []byte(fake), 0o755); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("sh", "-c", nodeUpdateScript("abc", map[string]string{"k": "v"}, nil, "", ""))
			cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"))
			out, err := cmd.CombinedOutput()
			if (err != nil) != tt.wantErr {
				t.Fatalf("script: err = %v, want error %v\n%s", err, tt.wantErr, out)
			}
			calls, _ := os.ReadFile(filepath.Join(dir, "calls"))
			if got := strings.TrimSpace(string(calls)); got != strconv.Itoa(tt.wantCalls) {
				t.Errorf("docker ran %s times, want %d", got, tt.wantCalls)
			}
		})
	}
}
