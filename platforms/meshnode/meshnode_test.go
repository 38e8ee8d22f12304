package meshnode

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cloudtransit/transit/cmdtest"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

func TestMain(m *testing.M) { os.Exit(cmdtest.Main(m, "transit-mesh")) }

// TestParseEnd: the node's answer is its key and address (the prefix
// length dropped), "none" when asked only and it has no mesh; anything
// else is an error that says what came back.
func TestParseEnd(t *testing.T) {
	t.Parallel()
	n := districts.Node{ID: "w1"}
	for _, tc := range []struct {
		out  string
		want provider.MeshEnd
		err  string
	}{
		{"key=AAAA\naddress=10.213.0.7/16\n", provider.MeshEnd{PublicKey: "AAAA", Address: "10.213.0.7"}, ""},
		{"none\n", provider.MeshEnd{}, ""},
		{"key=AAAA\n", provider.MeshEnd{}, `node w1: the mesh did not say its key and address (it printed "key=AAAA")`},
		{"", provider.MeshEnd{}, "node w1: the mesh did not say"},
	} {
		got, err := ParseEnd(n, tc.out)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want %q", tc.out, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: %+v, %v; want %+v", tc.out, got, err, tc.want)
		}
	}
}

// TestUpScript: the node keeps an address it has; transit-mesh runs from
// BinDir at the address with the port, as a systemd unit or under
// transit-supervise, which a node without it (a Swarm node) gets first;
// the script waits for the address on the interface.
func TestUpScript(t *testing.T) {
	t.Parallel()
	s := UpScript(provider.MeshSpec{Address: "10.213.0.7/16", Port: 51820})
	for _, want := range []string{
		"set -eu",
		"want=10.213.0.7/16",
		"if [ -f /var/lib/transit/mesh/address ]; then",
		"key=$(transit-mesh key -dir /var/lib/transit/mesh)",
		"systemctl start transit-mesh",
		`setsid /opt/transit/bin/transit-supervise transit-mesh /opt/transit/bin/transit-mesh up -dir /var/lib/transit/mesh -interface transit0 -address "$addr" -port 51820 </dev/null >/dev/null 2>&1 &`,
		"mv /opt/transit/bin/transit-supervise.new /opt/transit/bin/transit-supervise",
		`until ip -o addr show dev transit0 2>/dev/null | grep -q " ${addr%/*}/"; do`,
		`echo "key=$key"`,
	} {
		if !hasLine(s, want) {
			t.Errorf("the up script lacks the line %q:\n%s", want, s)
		}
	}
	if !strings.Contains(s, "ExecStart=/opt/transit/bin/transit-mesh up -dir /var/lib/transit/mesh -interface transit0 -address ADDR -port 51820") {
		t.Errorf("the unit does not run transit-mesh at the node's address:\n%s", s)
	}
	if asked := UpScript(provider.MeshSpec{Port: 51820}); !hasLine(asked, "want=''") {
		t.Errorf("asking only carries an address:\n%s", asked)
	}
}

// TestEnsureSupervise runs the part of the up script that writes
// transit-supervise, in a scratch directory: a node without it gets it,
// executable; one that has it as it should be is not written again.
func TestEnsureSupervise(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script := strings.ReplaceAll(ensureSupervise, BinDir, dir)
	run := func() {
		t.Helper()
		if out, err := exec.CommandContext(t.Context(), "sh", "-euc", script).CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	run()
	f := filepath.Join(dir, "transit-supervise")
	data, err := os.ReadFile(f)
	if err != nil || string(data) != SuperviseScript {
		t.Fatalf("transit-supervise is %q (%v), want SuperviseScript", data, err)
	}
	if fi, _ := os.Stat(f); fi.Mode().Perm() != 0o755 {
		t.Errorf("transit-supervise has mode %v", fi.Mode())
	}
	before, _ := os.Stat(f)
	run()
	if after, _ := os.Stat(f); !os.SameFile(before, after) {
		t.Error("an unchanged transit-supervise was written again")
	}
	if err := os.WriteFile(f, []byte("#!/bin/sh\nold\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	run()
	if data, _ := os.ReadFile(f); string(data) != SuperviseScript {
		t.Errorf("a stale transit-supervise stays: %q", data)
	}
}

// TestPeers: no peers is an empty list, never null (transit-mesh would
// refuse it).
func TestPeers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		peers []provider.MeshPeer
		want  string
	}{
		{nil, "[]"},
		{[]provider.MeshPeer{{Node: "m1", PublicKey: "k", Endpoint: "203.0.113.5:51820", Address: "10.213.0.1"}},
			`[{"node":"m1","public_key":"k","endpoint":"203.0.113.5:51820","address":"10.213.0.1"}]`},
	} {
		got, err := Peers(tc.peers)
		if err != nil || string(got) != tc.want {
			t.Errorf("Peers(%v) = %s, %v; want %s", tc.peers, got, err, tc.want)
		}
	}
	if !hasLine(PeersScript, "transit-mesh peers -dir /var/lib/transit/mesh") || !hasLine(PeersScript, "pkill -HUP -x transit-mesh 2>/dev/null || true") {
		t.Errorf("the peers script:\n%s", PeersScript)
	}
}

func hasLine(script, want string) bool {
	for l := range strings.Lines(script) {
		if strings.TrimSpace(l) == want {
			return true
		}
	}
	return false
}

// TestParseKeys: the node's answer is its key and, asked before the
// commit, its next one; without a key it is an error that says what came
// back.
func TestParseKeys(t *testing.T) {
	t.Parallel()
	n := districts.Node{ID: "w1"}
	for _, tc := range []struct {
		out  string
		want provider.MeshKeys
		err  string
	}{
		{"key=AAA=\nnext=BBB=\n", provider.MeshKeys{Current: "AAA=", Next: "BBB="}, ""},
		{"key=BBB=\n", provider.MeshKeys{Current: "BBB="}, ""},
		{"next=BBB=\n", provider.MeshKeys{}, `node w1: the mesh did not say its key (it printed "next=BBB=")`},
		{"", provider.MeshKeys{}, "node w1: the mesh did not say its key"},
	} {
		got, err := ParseKeys(n, tc.out)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want %q", tc.out, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: %+v, %v; want %+v", tc.out, got, err, tc.want)
		}
	}
}

// TestRotateScript: asked, the script runs transit-mesh rotate; with a
// key to commit (quoted), it commits it, wakes the device, restarts one
// that does not take it, and says the key once the device runs with it.
func TestRotateScript(t *testing.T) {
	t.Parallel()
	if s := RotateScript(""); !hasLine(s, "transit-mesh rotate -dir /var/lib/transit/mesh") || strings.Contains(s, "-commit") {
		t.Errorf("the asking script:\n%s", s)
	}
	s := RotateScript("k'ey=")
	for _, want := range []string{
		"set -eu",
		`pub='k'\''ey='`,
		`transit-mesh rotate -dir /var/lib/transit/mesh -commit "$pub" >/dev/null`,
		"pkill -HUP -x transit-mesh 2>/dev/null || true",
		`until [ "$(cat /var/lib/transit/mesh/running.key 2>/dev/null)" = "$pub" ]; do`,
		"systemctl restart transit-mesh",
		`if [ -n "$pid" ]; then pkill -TERM -x -P "$pid" transit-mesh 2>/dev/null || true; fi`,
		`echo "key=$pub"`,
	} {
		if !hasLine(s, want) {
			t.Errorf("the commit script lacks the line %q:\n%s", want, s)
		}
	}
}

// TestRotateScriptRuns runs the scripts under sh with the real
// transit-mesh, in scratch directories; pkill and systemctl are stand-ins
// that log how they were called and, where the device would take the key,
// write running.key as it does. A device that takes the key on SIGHUP is
// not restarted; an older one, which does not, is restarted through
// systemd or its supervisor; one that never takes it is an error naming
// the log.
func TestRotateScriptRuns(t *testing.T) {
	t.Parallel()
	bin := cmdtest.Build(t, "transit-mesh")
	for _, tc := range []struct {
		name, takes string // takes: the call that makes the device run with the key
		systemd     bool
		calls, err  string
	}{
		{"reloads", "pkill -HUP", false, "pkill -HUP -x transit-mesh\n", ""},
		{"restarted by systemd", "systemctl restart", true, "pkill -HUP -x transit-mesh\nsystemctl restart transit-mesh\n", ""},
		{"restarted by its supervisor", "pkill -TERM", false, "pkill -HUP -x transit-mesh\npkill -TERM -x -P 4242 transit-mesh\n", ""},
		{"never", "nothing", true, "pkill -HUP -x transit-mesh\nsystemctl restart transit-mesh\n",
			"the mesh did not take its new key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tmp := t.TempDir()
			dir, logDir, fakes, run := filepath.Join(tmp, "mesh"), filepath.Join(tmp, "log"), filepath.Join(tmp, "bin"), filepath.Join(tmp, "run")
			systemd, calls := filepath.Join(run, "systemd", "system"), filepath.Join(tmp, "calls")
			for _, d := range []string{logDir, fakes, filepath.Join(run, "transit")} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if tc.systemd {
				if err := os.MkdirAll(systemd, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(run, "transit", "transit-mesh.pid"), []byte("4242\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(logDir, "transit-mesh.log"), []byte("mesh: the last words\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			fake := `#!/bin/sh
echo "$(basename "$0") $*" >> ` + calls + `
case "$(basename "$0") $1" in
'` + tc.takes + `') transit-mesh key -dir ` + dir + ` > ` + dir + `/running.key ;;
esac
`
			for _, f := range []string{"pkill", "systemctl"} {
				if err := os.WriteFile(filepath.Join(fakes, f), []byte(fake), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Symlink(bin, filepath.Join(fakes, "transit-mesh")); err != nil {
				t.Fatal(err)
			}
			sh := func(script string) (string, string, error) {
				t.Helper()
				script = strings.NewReplacer(ShPath, "export PATH="+fakes+":$PATH", Dir, dir, LogDir, logDir,
					"/run/systemd/system", systemd, "/run/transit", filepath.Join(run, "transit")).Replace(script)
				cmd := exec.CommandContext(t.Context(), "sh", "-s")
				cmd.Stdin = strings.NewReader(script)
				var stdout, stderr strings.Builder
				cmd.Stdout, cmd.Stderr = &stdout, &stderr
				err := cmd.Run()
				return stdout.String(), stderr.String(), err
			}
			n := districts.Node{ID: "w1"}
			out, stderr, err := sh(RotateScript(""))
			if err != nil {
				t.Fatalf("asking: %v\n%s", err, stderr)
			}
			asked, err := ParseKeys(n, out)
			if err != nil || asked.Next == "" || asked.Next == asked.Current {
				t.Fatalf("asking: %+v, %v; want the key and a new next one", asked, err)
			}
			if again, _, err := sh(RotateScript("")); err != nil || again != out {
				t.Fatalf("asked again: %q, %v; want %q", again, err, out)
			}

			out, stderr, err = sh(RotateScript(asked.Next))
			if got, _ := os.ReadFile(calls); string(got) != tc.calls {
				t.Errorf("the script called:\n%s\nwant:\n%s", got, tc.calls)
			}
			if tc.err != "" {
				for _, want := range []string{tc.err + " " + asked.Next, "see " + logDir + "/transit-mesh.log or journalctl -u transit-mesh", "mesh: the last words"} {
					if err == nil || !strings.Contains(stderr, want) {
						t.Errorf("a device that never takes the key: %v, stderr lacks %q:\n%s", err, want, stderr)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("commit: %v\n%s", err, stderr)
			}
			if keys, err := ParseKeys(n, out); err != nil || keys != (provider.MeshKeys{Current: asked.Next}) || strings.Count(out, "key=") != 1 {
				t.Errorf("commit printed %q (%+v, %v); want key=%s once", out, keys, err, asked.Next)
			}
		})
	}
}
