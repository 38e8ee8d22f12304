package openstack

import (
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"

	"github.com/cloudtransit/transit/cloudsim"
	"github.com/cloudtransit/transit/cloudsim/openstack"
	"github.com/cloudtransit/transit/provider"
)

// TestSoftDelete: on a cloud that soft-deletes (Nova's
// reclaim_instance_interval), Terminate still deletes the server (it
// force-deletes it once soft-deleted); a server someone else deleted there
// is SOFT_DELETED, listed stopped, and Terminate force-deletes it, which a
// plain DELETE would not.
func TestSoftDelete(t *testing.T) {
	w := newWorld(t, func(o *openstack.Options) { o.ReclaimInterval = time.Hour })
	ctx := t.Context()
	drv := w.driver(w.district(), w.credential(), fast())
	g, err := drv.EnsureGroup(ctx, groupSpec("soft", "os-test"))
	if err != nil {
		t.Fatal(err)
	}
	w.srv.SetLatency(cloudsim.Latency{Stop: 200 * time.Millisecond, Terminate: 200 * time.Millisecond})
	listed := func(id string) *provider.Instance {
		t.Helper()
		insts, _, err := drv.List(ctx, "soft")
		if err != nil {
			t.Fatal(err)
		}
		for i := range insts {
			if insts[i].ProviderID == id {
				return &insts[i]
			}
		}
		return nil
	}
	waitGone := func(id string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for got := listed(id); got != nil; got = listed(id) {
			if got.State != provider.InstanceTerminating {
				t.Fatalf("server %s is listed %q after Terminate, want %q", id, got.State, provider.InstanceTerminating)
			}
			if time.Now().After(deadline) {
				t.Fatalf("server %s still listed after Terminate", id)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	a, err := drv.Launch(ctx, launchSpec("soft", "os-test", "soft-1", "", g.ProviderID, newKey(t)))
	if err != nil {
		t.Fatal(err)
	}
	if err := drv.Terminate(ctx, a); err != nil {
		t.Fatal(err)
	}
	waitGone(a.ProviderID)

	b, err := drv.Launch(ctx, launchSpec("soft", "os-test", "soft-2", "", g.ProviderID, newKey(t)))
	if err != nil {
		t.Fatal(err)
	}
	if err := drv.clients(ctx); err != nil {
		t.Fatal(err)
	}
	if err := servers.Delete(ctx, drv.compute, b.ProviderID).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for got := listed(b.ProviderID); got == nil || got.State != provider.InstanceStopped; got = listed(b.ProviderID) {
		if got == nil || time.Now().After(deadline) {
			t.Fatalf("a server deleted on a cloud that soft-deletes is listed %+v, want %q", got, provider.InstanceStopped)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := servers.Delete(ctx, drv.compute, b.ProviderID).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	if got := listed(b.ProviderID); got == nil || got.State != provider.InstanceStopped {
		t.Fatalf("a plain DELETE of a SOFT_DELETED server: listed %+v, want it still there, %q (as Nova does)", got, provider.InstanceStopped)
	}
	if err := drv.Terminate(ctx, *listed(b.ProviderID)); err != nil {
		t.Fatal(err)
	}
	waitGone(b.ProviderID)
	if err := drv.DeleteGroup(ctx, g); err != nil {
		t.Fatal(err)
	}
}
