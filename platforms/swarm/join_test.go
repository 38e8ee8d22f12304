package swarm

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/platforms/ssh"
)

func TestRoleChange(t *testing.T) {
	t.Parallel()
	list := nodesJSON(t, inspectOf(manager("m", master1.ID, "reachable"), worker("w", worker1.ID),
		// Promoted a moment ago: the seat comes, nothing to do.
		`{"ID":"p","Spec":{"Labels":{"transit-node":"c-master-2"},"Role":"manager"},"Status":{"State":"ready"}}`))
	tests := []struct {
		name    string
		swarmID string
		role    string
		want    string
		wantErr bool
	}{
		{name: "a master that is a swarm worker is promoted", swarmID: "w", role: "manager", want: "manager"},
		{name: "a worker that is a swarm manager is demoted", swarmID: "m", role: "worker", want: "worker"},
		{name: "a manager stays", swarmID: "m", role: "manager"},
		{name: "a worker stays", swarmID: "w", role: "worker"},
		{name: "a promotion under way", swarmID: "p", role: "manager"},
		{name: "a node in another swarm", swarmID: "x", role: "worker", wantErr: true},
		{name: "no node id printed", swarmID: "", role: "worker", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := roleChange(list, tt.swarmID, tt.role)
			if (err != nil) != tt.wantErr {
				t.Fatalf("roleChange: %v, want error %t", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("roleChange = %q, want %q", got, tt.want)
			}
		})
	}
}

// swarmAt answers like a swarm whose manager is master2: the join token,
// the node list, and the node updates, recording those.
type swarmAt struct {
	list    string
	updates []string
}

func (s *swarmAt) manager(_ context.Context, script string) (string, error) {
	switch {
	case strings.Contains(script, "join-token"):
		return "SWMTKN-1-secret\n", nil
	case script == inspectScript():
		return s.list, nil
	}
	s.updates = append(s.updates, script)
	return "", nil
}

func TestJoinGivesAMemberItsRole(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		node        districts.Node
		swarmID     string
		wantScript  string
		known       []districts.Node // managers the driver knew before
		wantManager bool
	}{
		{
			// The control loop calls Join on a member whose swarm role
			// differs from transit's; joinScript leaves it in the swarm.
			name:        "a master that is a swarm worker",
			node:        master1,
			swarmID:     "w",
			wantScript:  "in_sequence docker node promote w",
			known:       []districts.Node{master2},
			wantManager: true,
		},
		{
			name:       "a worker that is a swarm manager",
			node:       worker1,
			swarmID:    "m",
			wantScript: "in_sequence docker node demote m",
			// Known as a manager: the demoted node is forgotten.
			known: []districts.Node{worker1, master2},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := &swarmAt{list: inspectOf(manager("lead", master2.ID, "reachable"), worker("w", master1.ID), manager("m", worker1.ID, "reachable"))}
			f := &fakeNodes{nodes: map[string]func(context.Context, string) (string, error){
				master2.ID: s.manager,
				tt.node.ID: replies(tt.swarmID + "\n"),
			}}
			d := testDriver(f, tt.known...)
			if err := d.Join(t.Context(), tt.node); err != nil {
				t.Fatalf("Join: %v", err)
			}
			if len(s.updates) != 1 || !strings.Contains(s.updates[0], tt.wantScript) {
				t.Errorf("updates on the manager %q, want one with %q", s.updates, tt.wantScript)
			}
			if !strings.Contains(s.updates[0], "--label-add transit-node="+tt.node.ID+" ") {
				t.Errorf("the node's identity label is not kept: %q", s.updates[0])
			}
			var known []string
			for _, m := range d.managers {
				known = append(known, m.ID)
			}
			want := []string{master2.ID}
			if tt.wantManager {
				want = []string{tt.node.ID, master2.ID}
			}
			if diff := cmp.Diff(want, known); diff != "" {
				t.Errorf("known managers (-want +got):\n%s", diff)
			}
		})
	}
}

func TestJoinErrorHidesTheToken(t *testing.T) {
	t.Parallel()
	s := &swarmAt{}
	f := &fakeNodes{nodes: map[string]func(context.Context, string) (string, error){
		master2.ID: s.manager,
		worker1.ID: func(_ context.Context, script string) (string, error) {
			if strings.Contains(script, "SWMTKN") {
				t.Errorf("the join token is in the script, so in a command line:\n%s", script)
			}
			return "", &ssh.RunError{
				Target: ssh.Target{Name: worker1.ID}, Name: "docker swarm join", ExitStatus: 1,
				Stdout: "joining with SWMTKN-1-secret\n",
			}
		},
	}}
	d := testDriver(f, master2)
	err := d.Join(t.Context(), worker1)
	var re *ssh.RunError
	if !errors.As(err, &re) || re.ExitStatus != 1 {
		t.Fatalf("Join: %v, want the *ssh.RunError with exit 1", err)
	}
	if strings.Contains(err.Error(), "SWMTKN") || strings.Contains(re.Stdout+re.Stderr, "SWMTKN") {
		t.Errorf("the join token leaks into the error: %v", err)
	}
	if !strings.Contains(err.Error(), "joining with <redacted>") {
		t.Errorf("the error lost the command's output: %v", err)
	}
	// The token reaches the node only on the script's stdin, in the
	// engine's join request.
	want := []string{worker1.ID + `: docker swarm join: {"ListenAddr":"0.0.0.0:2377","AdvertiseAddr":"10.0.0.3","RemoteAddrs":["10.0.0.4:2377"],"JoinToken":"SWMTKN-1-secret"}`}
	if diff := cmp.Diff(want, f.stdins); diff != "" {
		t.Errorf("stdin given to scripts (-want +got):\n%s", diff)
	}
}

// A connection that drops right after the manager printed the token: the
// failed step's stdout must not carry it into the error (and from there
// into resources.json and JSON events).
func TestJoinTokenFetchFailureHidesTheToken(t *testing.T) {
	t.Parallel()
	f := &fakeNodes{nodes: map[string]func(context.Context, string) (string, error){
		master2.ID: func(context.Context, string) (string, error) {
			return "SWMTKN-1-3pu6hszjas19xyp7ghgosyx9k8atbfcr8p2is99znpy26u2lkl-1awxwuwd3z9j1z3puu7rcgdbx\n", &ssh.RunError{
				Target: ssh.Target{Name: master2.ID}, Name: "docker swarm join-token worker", ExitStatus: -1,
				Stdout: "SWMTKN-1-3pu6hszjas19xyp7ghgosyx9k8atbfcr8p2is99znpy26u2lkl-1awxwuwd3z9j1z3puu7rcgdbx\n",
				Err:    errors.New("connection lost"),
			}
		},
	}}
	err := testDriver(f, master2).Join(t.Context(), worker1)
	if err == nil {
		t.Fatal("Join succeeded without a token")
	}
	if strings.Contains(err.Error(), "SWMTKN") || strings.Contains(err.Error(), "1awxwuwd") {
		t.Errorf("the join token leaks into the error: %v", err)
	}
	if !strings.Contains(err.Error(), "connection lost") || !strings.Contains(err.Error(), worker1.ID) {
		t.Errorf("the error lost why and which node: %v", err)
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	run := &ssh.RunError{Target: ssh.Target{Name: "n1"}, Name: "docker swarm join", ExitStatus: 1, Stderr: "bad token SWMTKN-1-x"}
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"run error", run, "n1: docker swarm join failed (exit 1): bad token <redacted>"},
		{"wrapped", errors.Join(errors.New("join"), run), "join\nn1: docker swarm join failed (exit 1): bad token <redacted>"},
		{"no secret in it", errors.New("dial n1: refused"), "dial n1: refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := redact(tt.err, "SWMTKN-1-x").Error(); got != tt.want {
				t.Errorf("redact = %q, want %q", got, tt.want)
			}
		})
	}
	if run.Stderr != "bad token SWMTKN-1-x" {
		t.Errorf("redact changed the error it was given: %q", run.Stderr)
	}
	if redact(nil, "SWMTKN-1-x") != nil {
		t.Error("redact(nil) is not nil")
	}
}

// A rotation that failed after a manager left is done before the next
// join hands out a token the former manager knows.
func TestJoinRotatesPendingTokensFirst(t *testing.T) {
	t.Parallel()
	s := &swarmAt{list: inspectOf(manager("lead", master2.ID, "reachable"), worker("w", worker1.ID))}
	f := &fakeNodes{nodes: map[string]func(context.Context, string) (string, error){
		master2.ID: s.manager,
		worker1.ID: replies("w\n"),
	}}
	d := testDriver(f, master2)
	d.rotate = true
	if err := d.Join(t.Context(), worker1); err != nil {
		t.Fatalf("Join: %v", err)
	}
	want := []string{
		master2.ID + ": rotate the join tokens",
		master2.ID + ": docker swarm join-token worker",
		worker1.ID + ": docker swarm join",
		master2.ID + ": list swarm nodes",
		master2.ID + ": label the joined node",
	}
	if diff := cmp.Diff(want, f.calls()); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	if d.rotate {
		t.Error("the rotation is still pending")
	}
}

// joinScript run by sh against a fake docker in each local swarm state: a
// pending join is waited for, never forced out; a failed one leaves
// without --force; a locked swarm is an error saying what to do.
func TestJoinScriptStates(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		state     string
		leaveFail bool
		exit      int
		calls     string // the docker and curl calls, in order
		stderr    string
	}{
		{state: "inactive", calls: "info curl info"},
		{state: "active", calls: "info info"},
		{state: "pending", exit: exitRetry, calls: "info", stderr: "still joining"},
		{state: "locked", exit: 3, calls: "info", stderr: "docker swarm unlock"},
		{state: "error", calls: "info leave curl info"},
		{state: "error", leaveFail: true, exit: 3, calls: "info leave", stderr: "cannot leave it without --force"},
	} {
		t.Run(tt.state, func(t *testing.T) {
			t.Parallel()
			bin := t.TempDir()
			log := filepath.Join(bin, "calls")
			leave := "exit 0"
			if tt.leaveFail {
				leave = "echo 'Error response from daemon: You are attempting to leave the swarm on a node that is participating as a manager.' >&2; exit 1"
			}
			docker := "#!/bin/sh\ncase \"$1 $2\" in\n" +
				"info*) echo info >>" + log + "; case \"$*\" in *LocalNodeState*) echo " + tt.state + ";; *) echo swarm-id;; esac ;;\n" +
				"'swarm leave') echo \"leave $3\" >>" + log + "; " + leave + " ;;\n" +
				"*) echo \"unexpected docker $*\" >&2; exit 9 ;;\nesac\n"
			curl := "#!/bin/sh\necho curl >>" + log + "\ncat >/dev/null\necho 200\n"
			exit, _, stderr := runWithFakes(t, bin, joinScript(), map[string]string{"docker": docker, "curl": curl})
			data, _ := os.ReadFile(log)
			calls := strings.Join(strings.Fields(string(data)), " ")
			if exit != tt.exit || calls != tt.calls || !strings.Contains(stderr, tt.stderr) {
				t.Errorf("state %s: exit %d, calls %q, stderr %q; want exit %d, calls %q, stderr with %q",
					tt.state, exit, calls, stderr, tt.exit, tt.calls, tt.stderr)
			}
			if strings.Contains(string(data), "--force") {
				t.Errorf("state %s: the script forced the node out of its swarm", tt.state)
			}
		})
	}
}

// runWithFakes writes the fake commands (name to shell script) into bin,
// runs script with sh and bin first in PATH, and returns its exit status,
// stdout and stderr.
func runWithFakes(t *testing.T, bin, script string, fakes map[string]string) (exit int, stdout, stderr string) {
	t.Helper()
	for name, body := range fakes {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.CommandContext(t.Context(), "sh", "-c", script)
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		exit = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return exit, out.String(), errb.String()
}
