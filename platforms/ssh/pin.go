package ssh

import (
	"context"
	"fmt"

	"github.com/cloudtransit/transit/provider"
)

// PinHostKeys wraps an infrastructure driver so that hosts follows its
// machines: the host keys a provider reports (provider.Instance.HostKeys)
// are pinned when Launch returns and whenever List sees a machine without
// that pin (a launch whose run died before pinning, an adopted machine),
// and a machine's pin is forgotten once Terminate succeeds (removals,
// failed joins, destroy). Machines whose provider reports no keys keep
// trust on first use.
func PinHostKeys(infra provider.Infrastructure, hosts *HostKeys) provider.Infrastructure {
	return &pinning{Infrastructure: infra, hosts: hosts}
}

type pinning struct {
	provider.Infrastructure
	hosts *HostKeys
}

var _ provider.Infrastructure = (*pinning)(nil)

// Launch launches the machine and pins its keys before anyone connects. A
// pin that cannot be written fails the launch: connecting would fall back
// to trusting the first key. The machine is left to the next round, whose
// List adopts and pins it.
func (p *pinning) Launch(ctx context.Context, spec provider.LaunchSpec) (provider.Instance, error) {
	inst, err := p.Infrastructure.Launch(ctx, spec)
	if err != nil {
		return inst, err
	}
	if err := p.pin(ctx, inst); err != nil {
		return provider.Instance{}, fmt.Errorf("launched %s (%s), but %w", spec.Node.ID, inst.ProviderID, err)
	}
	return inst, nil
}

// List pins the reported keys of live machines that lack that pin.
func (p *pinning) List(ctx context.Context, cluster string) ([]provider.Instance, []provider.Group, error) {
	insts, groups, err := p.Infrastructure.List(ctx, cluster)
	if err != nil {
		return insts, groups, err
	}
	for _, inst := range insts {
		if inst.State == provider.InstanceTerminating {
			continue
		}
		if err := p.pin(ctx, inst); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", inst.ProviderID, err)
		}
	}
	return insts, groups, nil
}

// Terminate deletes the machine and forgets its pin: a later machine is a
// different host, even under a reused id.
func (p *pinning) Terminate(ctx context.Context, inst provider.Instance) error {
	if err := p.Infrastructure.Terminate(ctx, inst); err != nil {
		return err
	}
	if inst.ProviderID == "" {
		return nil
	}
	if err := p.hosts.ForgetContext(ctx, inst.ProviderID); err != nil {
		return fmt.Errorf("terminated %s, but forgetting its host key failed (terminating again retries): %w", inst.ProviderID, err)
	}
	return nil
}

func (p *pinning) pin(ctx context.Context, inst provider.Instance) error {
	if len(inst.HostKeys) == 0 {
		return nil
	}
	if err := p.hosts.Pin(ctx, inst.ProviderID, inst.HostKeys); err != nil {
		return fmt.Errorf("pinning the host keys its provider reported failed: %w", err)
	}
	return nil
}

// DeletesGroupsInUse passes on what the wrapped driver says
// (provider.InUseGroupDeleter): the wrapper must not hide it.
func (p *pinning) DeletesGroupsInUse() bool {
	d, ok := p.Infrastructure.(provider.InUseGroupDeleter)
	return ok && d.DeletesGroupsInUse()
}
