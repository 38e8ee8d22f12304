package state

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cloudtransit/transit/districts"
)

// Tests re-execute the test binary as a helper process that writes state
// until it is killed. The helper's role comes from these
// environment variables.
const (
	helperEnv     = "TRANSIT_STATE_TEST_HELPER" // write
	helperPathEnv = "TRANSIT_STATE_TEST_PATH"
)

// helperLifetime bounds a helper that its test failed to kill.
const helperLifetime = 2 * time.Minute

func TestMain(m *testing.M) {
	if role := os.Getenv(helperEnv); role != "" {
		os.Exit(runHelper(role, os.Getenv(helperPathEnv)))
	}
	os.Exit(m.Run())
}

func runHelper(role, path string) int {
	switch role {
	case "write":
		serial := int64(0)
		if data, err := os.ReadFile(path); err == nil {
			var r districts.Resources
			if err := json.Unmarshal(data, &r); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			serial = r.Serial
		}
		deadline := time.Now().Add(helperLifetime)
		for first := true; time.Now().Before(deadline); first = false {
			serial++
			if err := Write(path, sampleResources(serial)); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			if first {
				// Only once: a full stdout pipe would stall the loop.
				fmt.Println("writing")
			}
		}
		return 0
	case "journal":
		// Each save k changes one node's tag and the header's count to
		// k together: a reader must never see one without the other.
		r, err := districts.LoadResources(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		j := NewJournal(path, r.Serial, nil)
		deadline := time.Now().Add(helperLifetime)
		for first := true; time.Now().Before(deadline); first = false {
			k := r.NodeNumbers["worker"] + 1
			r.NodeNumbers = map[string]int{"worker": k}
			i := k % len(r.Nodes)
			r.Nodes[i].Tags = map[string]string{"k": strconv.Itoa(k)}
			if err := j.Save(r, []string{r.Nodes[i].ID}, false, false); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			if first {
				fmt.Println("saving")
			}
		}
		return 0
	default:
		fmt.Fprintf(os.Stderr, "unknown helper %q\n", role)
		return 2
	}
}

// helper is a running helper process.
type helper struct {
	cmd    *exec.Cmd
	stdout *bufio.Reader
}

// startHelper starts the test binary as helper role on path; the test's
// cleanup kills it.
func startHelper(t *testing.T, role, path string) *helper {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+role, helperPathEnv+"="+path)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &helper{cmd: cmd, stdout: bufio.NewReader(out)}
	t.Cleanup(func() { h.kill(t) })
	return h
}

// expect waits for the helper to print a line starting with prefix.
func (h *helper) expect(t *testing.T, prefix string) string {
	t.Helper()
	line, err := h.stdout.ReadString('\n')
	if err != nil {
		t.Fatalf("helper pid %d: waiting for %q: %v", h.cmd.Process.Pid, prefix, err)
	}
	if !strings.HasPrefix(line, prefix) {
		t.Fatalf("helper pid %d printed %q, want %q...", h.cmd.Process.Pid, line, prefix)
	}
	return line
}

// kill kills the helper with SIGKILL and reaps it; killing twice is fine.
func (h *helper) kill(t *testing.T) {
	t.Helper()
	if h.cmd.ProcessState != nil {
		return
	}
	if err := h.cmd.Process.Kill(); err != nil {
		t.Errorf("kill helper: %v", err)
	}
	// Drain stdout so the helper never blocks on a full pipe while dying.
	if _, err := io.Copy(io.Discard, h.stdout); err != nil {
		t.Logf("drain helper output: %v", err)
	}
	// The helper dies of SIGKILL, so Wait reports an error by design.
	if err := h.cmd.Wait(); err == nil {
		t.Logf("helper pid %d exited before it was killed", h.cmd.Process.Pid)
	}
}

// sampleResources is a deterministic state for serial, large enough that a
// write takes a while, with a node count that changes with the serial so a
// torn write would show.
func sampleResources(serial int64) districts.Resources {
	r := districts.Resources{
		Type:           "resources",
		Version:        districts.ResourcesVersion,
		Cluster:        "c1",
		Serial:         serial,
		UpdatedAt:      time.Unix(1_800_000_000+serial, 0).UTC(),
		Nodes:          []districts.Node{},
		SecurityGroups: []districts.SecurityGroup{{Type: "security_group", ID: "sg-local-a", Cluster: "c1", District: "local-a", ProviderID: "sg-1", Sources: []string{"10.0.0.1/32"}}},
	}
	for i := range int(serial%7) + 20 {
		r.Nodes = append(r.Nodes, districts.Node{
			Type:       "node",
			ID:         fmt.Sprintf("n-%d-%d", serial, i),
			Cluster:    "c1",
			District:   "local-a",
			Role:       districts.RoleWorker,
			Flavor:     "small",
			ProviderID: fmt.Sprintf("i-%08x", serial*100+int64(i)),
			PublicIP:   fmt.Sprintf("10.0.%d.%d", i, serial%250+1),
			Tags:       map[string]string{"serial": strconv.FormatInt(serial, 10)},
			Phase:      districts.PhaseJoined,
			Message:    strings.Repeat("x", 512),
		})
	}
	return r
}
