package drivertest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sync/errgroup"

	"github.com/cloudtransit/transit/cloudsim"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// parallelLaunch launches four nodes at once without a zone: all run,
// each its own machine, and the cluster's machines spread evenly over the
// district's zones. Against a cloud, List then pages through pages of two.
func (s *suite) parallelLaunch(t *testing.T) {
	const n = 4
	insts := make([]provider.Instance, n)
	var g errgroup.Group
	for i := range n {
		g.Go(func() error {
			inst, err := s.drv.Launch(t.Context(), s.launchSpec(s.nodeN(i+2, "")))
			if err != nil {
				return err
			}
			insts[i] = inst
			s.keep(inst)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatalf("parallel Launch: %v", err)
	}
	ids := map[string]bool{s.inst.ProviderID: true}
	for i, inst := range insts {
		if inst.State != provider.InstanceRunning || inst.ProviderID == "" {
			t.Errorf("parallel Launch %d returned %+v, want a running instance", i, inst)
		}
		if ids[inst.ProviderID] {
			t.Errorf("parallel Launch %d returned provider id %s twice", i, inst.ProviderID)
		}
		ids[inst.ProviderID] = true
	}

	if s.cfg.Cloud != nil {
		s.cfg.Cloud.SetPageSize(2)
		defer s.cfg.Cloud.SetPageSize(0)
	}
	listed, _, err := s.drv.List(t.Context(), s.cfg.Cluster)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	perZone := map[string]int{}
	for id := range ids {
		got := findInstance(listed, id)
		if got == nil {
			t.Errorf("List (pages of 2) does not show instance %s", id)
			continue
		}
		perZone[got.Zone]++
	}
	if len(s.cfg.Zones) > 1 {
		counts := make([]int, 0, len(s.cfg.Zones))
		for _, z := range s.cfg.Zones {
			counts = append(counts, perZone[z])
		}
		if slices.Max(counts)-slices.Min(counts) > 1 {
			t.Errorf("%d machines are spread over zones %v as %v: want an even spread", len(ids), s.cfg.Zones, perZone)
		}
	}
}

// planted checks machines made outside the driver: another tool's and
// another cluster's are never listed; one with only the cluster's tag (a
// crash between create and tag) is listed with exactly that tag, and
// Terminate removes it.
func (s *suite) planted(t *testing.T) {
	if s.cfg.Cloud == nil {
		return
	}
	ctx := t.Context()
	plant := func(tags map[string]string) string {
		t.Helper()
		id, err := s.cfg.Cloud.Plant(ctx, tags)
		if err != nil {
			t.Fatalf("Plant %v: %v", tags, err)
		}
		return id
	}
	foreign := plant(map[string]string{"team": "someone-else", "Name": "not-transit"})
	other := plant(provider.IdentityTags(districts.Node{ID: s.cfg.OtherCluster + "-n1", Cluster: s.cfg.OtherCluster,
		District: s.cfg.District, Role: districts.RoleWorker, Flavor: s.cfg.Flavor}, ""))
	t.Cleanup(func() {
		// Not the driver's to delete: the cloud's owner removes them.
		for _, id := range []string{foreign, other} {
			if err := s.cfg.Cloud.Remove(context.WithoutCancel(ctx), id); err != nil {
				t.Errorf("remove planted machine %s: %v", id, err)
			}
		}
	})
	partialTags := map[string]string{districts.TagCluster: s.cfg.Cluster}
	partial := plant(partialTags)
	s.keep(provider.Instance{ProviderID: partial, Tags: partialTags})

	insts, _, err := s.drv.List(ctx, s.cfg.Cluster)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if findInstance(insts, foreign) != nil {
		t.Errorf("List(%s) shows machine %s, which carries no transit tag", s.cfg.Cluster, foreign)
	}
	if findInstance(insts, other) != nil {
		t.Errorf("List(%s) shows machine %s of cluster %s", s.cfg.Cluster, other, s.cfg.OtherCluster)
	}
	got := findInstance(insts, partial)
	if got == nil {
		t.Fatalf("List(%s) does not show machine %s, which carries the cluster's tag and nothing else: a crash between create and tag would leak it", s.cfg.Cluster, partial)
	}
	if diff := cmp.Diff(partialTags, got.Tags); diff != "" {
		t.Errorf("partly tagged machine's tags (-planted +listed):\n%s", diff)
	}
}

// faults checks how the driver meets a misbehaving cloud.
func (s *suite) faults(t *testing.T) {
	if s.cfg.Cloud == nil {
		return
	}
	faults := s.cfg.Cloud.Faults()
	t.Cleanup(faults.Clear)
	ctx := t.Context()
	list := func() error {
		_, _, err := s.drv.List(ctx, s.cfg.Cluster)
		s.noSecret(t, err)
		return err
	}

	t.Run("ThrottledThenServed", func(t *testing.T) {
		before := faults.Hits(cloudsim.FaultThrottle)
		faults.Add(cloudsim.Fault{Op: cloudsim.OpList, Kind: cloudsim.FaultThrottle, Times: 2})
		if err := list(); err != nil {
			t.Errorf("List throttled twice: %v; want it retried", err)
		}
		if hits := faults.Hits(cloudsim.FaultThrottle) - before; hits != 2 {
			t.Errorf("the cloud throttled %d requests, want 2 (the fault was not reached)", hits)
		}
		faults.Clear()
	})

	t.Run("ThrottledForever", func(t *testing.T) {
		faults.Add(cloudsim.Fault{Op: cloudsim.OpList, Kind: cloudsim.FaultThrottle, Times: -1})
		defer faults.Clear()
		lctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		_, _, err := s.drv.List(lctx, s.cfg.Cluster)
		s.noSecret(t, err)
		if !errors.Is(err, provider.ErrThrottled) {
			t.Errorf("List throttled forever: err = %v, want one matching provider.ErrThrottled", err)
		}
		if lctx.Err() != nil {
			t.Errorf("List throttled forever ran until the test's deadline: retries must be bounded")
		}
	})

	t.Run("AuthRefused", func(t *testing.T) {
		faults.Add(cloudsim.Fault{Op: cloudsim.OpAny, Kind: cloudsim.FaultAuth, Times: -1})
		defer faults.Clear()
		err := list()
		if !errors.Is(err, provider.ErrCloudAuth) {
			t.Fatalf("List with refused credentials: err = %v, want one matching provider.ErrCloudAuth", err)
		}
		if s.cfg.CredentialID != "" && !strings.Contains(err.Error(), s.cfg.CredentialID) {
			t.Errorf("auth error %q does not name credential %q", err, s.cfg.CredentialID)
		}
	})

	t.Run("ThrottledLaunch", func(t *testing.T) {
		faults.Add(cloudsim.Fault{Op: cloudsim.OpLaunch, Kind: cloudsim.FaultThrottle, Times: 2})
		defer faults.Clear()
		n := s.nodeN(7, s.cfg.Zone)
		inst, err := s.drv.Launch(ctx, s.launchSpec(n))
		s.noSecret(t, err)
		if err != nil {
			t.Fatalf("Launch throttled twice: %v; want it retried", err)
		}
		s.keep(inst)
		s.machinesOf(t, n.ID, 1)
	})

	t.Run("QuotaExceeded", func(t *testing.T) {
		const quota = "TRANSIT-TEST-QUOTA"
		faults.Add(cloudsim.Fault{Op: cloudsim.OpLaunch, Kind: cloudsim.FaultQuota, Quota: quota})
		defer faults.Clear()
		n := s.nodeN(8, s.cfg.Zone)
		inst, err := s.drv.Launch(ctx, s.launchSpec(n))
		s.noSecret(t, err)
		if err == nil {
			s.keep(inst)
			t.Fatalf("Launch over quota succeeded: %+v", inst)
		}
		if !errors.Is(err, provider.ErrQuota) || !strings.Contains(err.Error(), quota) {
			t.Errorf("Launch over quota: err = %v, want one matching provider.ErrQuota that names %s", err, quota)
		}
		s.machinesOf(t, n.ID, 0)
	})

	t.Run("LaunchAnswerLost", func(t *testing.T) {
		faults.Add(cloudsim.Fault{Op: cloudsim.OpLaunch, Kind: cloudsim.FaultLost})
		defer faults.Clear()
		n := s.nodeN(9, s.cfg.Zone)
		inst, err := s.drv.Launch(ctx, s.launchSpec(n))
		s.noSecret(t, err)
		if err == nil {
			s.keep(inst)
		}
		// The cloud made the machine once; whether Launch found it again
		// or gave up, there must be exactly one, and it is listed.
		got := s.machinesOf(t, n.ID, 1)
		if err != nil {
			s.keep(got[0])
		} else if got[0].ProviderID != inst.ProviderID {
			t.Errorf("Launch returned %s, but the machine of node %s is %s", inst.ProviderID, n.ID, got[0].ProviderID)
		}
	})
}

// machinesOf lists the cluster's machines of node id and checks there are
// want of them.
func (s *suite) machinesOf(t *testing.T, id string, want int) []provider.Instance {
	t.Helper()
	insts, _, err := s.drv.List(t.Context(), s.cfg.Cluster)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	var got []provider.Instance
	for _, in := range insts {
		if in.Tags[districts.TagNode] == id {
			got = append(got, in)
		}
	}
	if len(got) != want {
		t.Fatalf("the cloud holds %d machines of node %s, want %d: %+v", len(got), id, want, got)
	}
	return got
}

// noSecret fails if err shows one of the credential's secrets.
func (s *suite) noSecret(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	for _, secret := range s.cfg.Secrets {
		if secret != "" && strings.Contains(err.Error(), secret) {
			t.Errorf("error shows a secret of the credential: %v", err)
		}
	}
}
