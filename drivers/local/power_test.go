package local

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloudtransit/transit/provider"
)

// TestPowerOffOn: a powered-off node has no process, no netns and no veth
// left and answers nothing, is listed stopped with its address, and keeps
// its record and disk; powered on it is the same node (address, host key,
// hostname, what it wrote to its disk) with a fresh /tmp; Terminate tears
// a powered-off node down.
func TestPowerOffOn(t *testing.T) {
	e := newEnv(t)
	drv := e.driver(e.district())
	g := e.group(drv, "pwr")
	inst := e.launch(drv, g, "pwr", "pwr-n1")
	ctx := t.Context()
	if out, err := e.ssh(inst.PublicIP, "echo disk > /var/lib/transit/marker; echo tmp > /tmp/marker; setsid sleep 1000 </dev/null >/dev/null 2>&1 &"); err != nil {
		t.Fatalf("write on the node: %v\n%s", err, out)
	}
	rec, err := drv.readNode(inst.ProviderID)
	if err != nil {
		t.Fatal(err)
	}

	if err := drv.PowerOff(ctx, inst.ProviderID); err != nil {
		t.Fatalf("PowerOff: %v", err)
	}
	if err := drv.PowerOff(ctx, inst.ProviderID); err != nil {
		t.Errorf("PowerOff of a stopped node: %v", err)
	}
	for _, cg := range rec.Cgroups {
		if b, err := os.ReadFile(filepath.Join(cg, "cgroup.procs")); err == nil && strings.TrimSpace(string(b)) != "" {
			t.Errorf("processes left in %s: %q", cg, b)
		}
	}
	if netnsExists(rec.Netns) {
		t.Errorf("netns %s survived the power-off", rec.Netns)
	}
	if _, err := net.InterfaceByName(rec.HostVeth); err == nil {
		t.Errorf("veth %s survived the power-off", rec.HostVeth)
	}
	if c, err := net.DialTimeout("tcp", net.JoinHostPort(inst.PrivateIP, "22"), 2*time.Second); err == nil {
		c.Close()
		t.Errorf("a powered-off node answers on %s:22", inst.PrivateIP)
	}
	insts, _, err := drv.List(ctx, "pwr")
	if err != nil {
		t.Fatal(err)
	}
	if len(insts) != 1 || insts[0].State != provider.InstanceStopped || insts[0].PrivateIP != inst.PrivateIP {
		t.Fatalf("List after PowerOff = %+v, want the node stopped at %s", insts, inst.PrivateIP)
	}

	on, err := drv.PowerOn(ctx, inst.ProviderID)
	if err != nil {
		t.Fatalf("PowerOn: %v", err)
	}
	if on.State != provider.InstanceRunning || on.PrivateIP != inst.PrivateIP || strings.Join(on.HostKeys, ",") != strings.Join(inst.HostKeys, ",") {
		t.Errorf("PowerOn = %+v, want the node running at %s with host keys %v", on, inst.PrivateIP, inst.HostKeys)
	}
	out, err := e.ssh(on.PublicIP, "hostname; cat /var/lib/transit/marker; cat /tmp/marker 2>/dev/null; pgrep -x sleep || true")
	if err != nil {
		t.Fatalf("ssh after PowerOn: %v\n%s", err, out)
	}
	if got := strings.Fields(out); len(got) != 2 || got[0] != "pwr-n1" || got[1] != "disk" {
		t.Errorf("after PowerOn: %q, want hostname pwr-n1, the disk's marker, an empty /tmp and no old process", out)
	}
	if on2, err := drv.PowerOn(ctx, inst.ProviderID); err != nil || on2.State != provider.InstanceRunning {
		t.Errorf("PowerOn of a running node: %+v %v", on2, err)
	}

	if err := drv.PowerOff(ctx, inst.ProviderID); err != nil {
		t.Fatal(err)
	}
	if err := drv.Terminate(ctx, inst); err != nil {
		t.Fatal(err)
	}
	waitGone(t, drv, "pwr", inst.ProviderID)
}
