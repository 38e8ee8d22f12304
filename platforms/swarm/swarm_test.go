package swarm

import (
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
		{"init", initScript("10.0.0.2"), []string{
			"docker swarm init --advertise-addr 10.0.0.2 --listen-addr 0.0.0.0:2377 >/dev/null",
			"docker info --format '{{.Swarm.NodeID}}'",
		}},
		{"join", joinScript(), []string{
			`if [ "$state" != active ]; then`,
			"-H 'Content-Type: application/json' --data-binary @- http://localhost/swarm/join)",
		}},
		{"token", joinTokenScript("manager"), []string{"docker swarm join-token -q manager"}},
		{"labels", nodeUpdateScript("abc", map[string]string{"b": "2", "a": "it's"}, []string{"z", "y"}, "", ""), []string{
			`docker node update --label-add 'a=it'\''s' --label-add b=2 --label-rm y --label-rm z abc >/dev/null`,
		}},
		{"drain", nodeUpdateScript("abc", nil, nil, "drain", ""), []string{"docker node update --availability drain abc >/dev/null"}},
		{"promote", nodeUpdateScript("abc", nil, nil, "", "manager"), []string{"docker node promote abc >/dev/null"}},
		{"demote", nodeUpdateScript("abc", nil, nil, "", "worker"), []string{"docker node demote abc >/dev/null"}},
		{"remove", removeScript("abc", false), []string{
			"if ! out=$(docker node rm abc 2>&1 >/dev/null); then",
			`*"node "*" not found"*) ;;`,
			`*"is not down"*) printf '%s\n' "$out" >&2; exit 75 ;;`,
		}},
		{"remove by force", removeScript("abc", true), []string{
			"if ! out=$(docker node rm --force abc 2>&1 >/dev/null); then",
		}},
		{"rotate", rotateTokensScript(), []string{
			"docker swarm join-token --rotate -q worker >/dev/null",
			"docker swarm join-token --rotate -q manager >/dev/null",
		}},
		{"node tasks", nodeTasksScript("abc"), []string{"ids=$(docker node ps -q abc)",
			"inspect_existing 'task|{{.ServiceID}}|{{.ID}}|{{.Status.State}}|{{.DesiredState}}' $ids",
			"inspect_existing 'service|{{.ID}}|{{.Spec.Name}}' $services"}},
		{"service tasks", serviceTasksScript([]string{"s1", "s2"}), []string{"for s in s1 s2; do"}},
		{"install", installScript(), []string{
			`if [ -n "$missing" ]; then`,
			"apt-get -o DPkg::Lock::Timeout=" + aptLockWait + " install -y -q $pkgs >/dev/null",
			"apt-get -o DPkg::Lock::Timeout=" + aptLockWait + " update -q >/dev/null",
			"command -v curl >/dev/null 2>&1 || missing=\"$missing curl\"",
			"if [ -d /run/systemd/system ]; then",
			"setsid dockerd --pidfile /run/transit/dockerd.pid >>/run/transit/dockerd.log 2>&1 </dev/null &",
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
