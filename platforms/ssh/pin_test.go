package ssh

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	gossh "golang.org/x/crypto/ssh"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// memInfra is an in-memory cloud whose machines have the host keys it was
// told to report.
type memInfra struct {
	provider.Infrastructure // unused methods panic

	mu    sync.Mutex
	insts map[string]provider.Instance
	next  []string // host keys of the next machine launched
}

func (m *memInfra) Launch(_ context.Context, spec provider.LaunchSpec) (provider.Instance, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	inst := provider.Instance{ProviderID: "i-" + spec.Node.ID, State: provider.InstanceRunning, HostKeys: m.next}
	m.insts[inst.ProviderID] = inst
	return inst, nil
}

func (m *memInfra) List(context.Context, string) ([]provider.Instance, []provider.Group, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []provider.Instance
	for _, inst := range m.insts {
		out = append(out, inst)
	}
	return out, nil, nil
}

func (m *memInfra) Terminate(_ context.Context, inst provider.Instance) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.insts, inst.ProviderID)
	return nil
}

func launchSpec(id string) provider.LaunchSpec {
	return provider.LaunchSpec{Node: districts.Node{ID: id}}
}

func TestPinHostKeysFollowsMachines(t *testing.T) {
	t.Parallel()
	hosts := openHostKeys(t, filepath.Join(t.TempDir(), "known_hosts"))
	k1, k2 := newPublicKey(t), newPublicKey(t)
	mem := &memInfra{insts: map[string]provider.Instance{}}
	infra := PinHostKeys(mem, hosts)

	// Launch pins what the provider reported.
	mem.next = []string{authorizedLine(k1)}
	inst, err := infra.Launch(t.Context(), launchSpec("n1"))
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := hosts.Pinned(inst.ProviderID); !ok || !sameKey(got, k1) {
		t.Fatal("Launch did not pin the reported host key")
	}

	// List pins machines launched by a run that died before pinning, and
	// leaves dying machines alone.
	mem.insts["i-adopted"] = provider.Instance{ProviderID: "i-adopted", State: provider.InstanceRunning, HostKeys: []string{authorizedLine(k2)}}
	mem.insts["i-dying"] = provider.Instance{ProviderID: "i-dying", State: provider.InstanceTerminating, HostKeys: []string{authorizedLine(k2)}}
	if _, _, err := infra.List(t.Context(), "c"); err != nil {
		t.Fatal(err)
	}
	if got, ok := hosts.Pinned("i-adopted"); !ok || !sameKey(got, k2) {
		t.Error("List did not pin an adopted machine")
	}
	if _, ok := hosts.Pinned("i-dying"); ok {
		t.Error("List pinned a terminating machine")
	}

	// Terminate forgets: a later machine under the same id is new.
	if err := infra.Terminate(t.Context(), inst); err != nil {
		t.Fatal(err)
	}
	if _, ok := hosts.Pinned(inst.ProviderID); ok {
		t.Error("Terminate kept the pin")
	}

	// A provider that cannot say leaves the machine to trust on first use.
	mem.next = nil
	inst, err = infra.Launch(t.Context(), launchSpec("n2"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := hosts.Pinned(inst.ProviderID); ok {
		t.Error("pinned a machine without reported keys")
	}

	// A pin that cannot be made fails the launch, naming the machine.
	mem.next = []string{"ssh-ed25519 !!!"}
	if _, err := infra.Launch(t.Context(), launchSpec("n3")); err == nil || !strings.Contains(err.Error(), "i-n3") {
		t.Errorf("Launch with a garbled host key = %v, want an error naming i-n3", err)
	}
}

// sshdHostKey is the public host key the test sshd presents.
func (s *testSSHD) hostKey(t *testing.T) gossh.PublicKey {
	t.Helper()
	pem, err := os.ReadFile(filepath.Join(s.dir, "host_key"))
	if err != nil {
		t.Fatal(err)
	}
	signer, err := gossh.ParsePrivateKey(pem)
	if err != nil {
		t.Fatal(err)
	}
	return signer.PublicKey()
}

// A machine whose provider reported its host key is verified at first
// contact: something else answering at its address is refused, where
// trust on first use would have logged in and pinned the impostor.
func TestDialVerifiesLaunchPin(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	mem := &memInfra{insts: map[string]provider.Instance{}}
	infra := PinHostKeys(mem, e.cfg.HostKeys)

	mem.next = []string{authorizedLine(e.sshd.hostKey(t))}
	inst, err := infra.Launch(t.Context(), launchSpec("real"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Dial(t.Context(), e.cfg, Target{HostID: inst.ProviderID, Name: "real", Addr: e.sshd.addr})
	if err != nil {
		t.Fatalf("Dial a machine with its reported key: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Error(err)
	}

	// The provider's machine has another key: what answers is not it.
	mem.next = []string{authorizedLine(newPublicKey(t))}
	inst, err = infra.Launch(t.Context(), launchSpec("spoofed"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Dial(t.Context(), e.cfg, Target{HostID: inst.ProviderID, Name: "spoofed", Addr: e.sshd.addr})
	var changed *HostKeyChangedError
	if !errors.As(err, &changed) {
		t.Fatalf("Dial an impostor = %v, want *HostKeyChangedError", err)
	}
	if changed.HostID != inst.ProviderID {
		t.Errorf("error names %s, want %s", changed.HostID, inst.ProviderID)
	}
}

type eagerInfra struct{ memInfra }

func (*eagerInfra) DeletesGroupsInUse() bool { return true }

// Pinning wraps every driver: it must pass on whether the cloud deletes a
// group its terminating machines are still in (GCE), or the loop waits
// for terminations there for nothing.
func TestPinningPassesOnInUseGroupDeletion(t *testing.T) {
	hosts := &HostKeys{}
	for _, tc := range []struct {
		infra provider.Infrastructure
		want  bool
	}{{&memInfra{}, false}, {&eagerInfra{}, true}} {
		d, ok := PinHostKeys(tc.infra, hosts).(provider.InUseGroupDeleter)
		if got := ok && d.DeletesGroupsInUse(); got != tc.want {
			t.Errorf("%T wrapped: deletes groups in use = %v, want %v", tc.infra, got, tc.want)
		}
	}
}
