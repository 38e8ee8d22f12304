package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cloudtransit/transit/provider"
)

// A node can be powered off and on again, as a cloud stops and starts a
// VM: off, its processes, cgroups, network namespace and veth are gone,
// so it answers nothing, but its record, address, disk (its private
// directories), boot files and host key stay; on again it boots anew from
// them: the same node, its sshd running again, /run and /tmp empty. A
// powered-off node is listed stopped, and Terminate tears it down as any
// other. The cloud emulator's backed machines use this (cloudsim's
// PowerOff and PowerOn); transit's own local districts never stop a node.

// PowerOff stops the node with provider id id and returns once its
// processes are gone. A stopped node is left as it is; a node that is
// launching, booting or terminating is refused.
func (d *driver) PowerOff(ctx context.Context, id string) error {
	fail := func(err error) error { return fmt.Errorf("power off %s in %s: %w", id, d.district, err) }
	if !validProviderID(id) {
		return fail(errors.New("not a local node's provider id"))
	}
	unlock, err := lockRoot(ctx, d.root)
	if err != nil {
		return fail(err)
	}
	defer unlock()
	r, err := d.readNode(id)
	if err != nil {
		return fail(err)
	}
	switch r.State {
	case stateStopped:
		return nil
	case stateRunning:
	default:
		return fail(fmt.Errorf("it is %s", r.State))
	}
	if err := d.powerOff(ctx, r); err != nil {
		return fail(err)
	}
	return nil
}

// powerOff kills the node's processes and records it stopped. Call it
// under the root lock.
func (d *driver) powerOff(ctx context.Context, r *nodeRecord) error {
	if out, err := run(ctx, "", "bash", "-c", powerOffScript(r), "transit-power-off-"+r.ProviderID); err != nil {
		return fmt.Errorf("%w\n%s", err, out)
	}
	r.State, r.InitPID, r.InitStart = stateStopped, 0, 0
	return writeNode(r)
}

// PowerOn boots a stopped node again and returns once it answers SSH, as
// Launch does. A running node is returned as it is. A node that does not
// come up is powered off again and the error holds its logs.
func (d *driver) PowerOn(ctx context.Context, id string) (provider.Instance, error) {
	fail := func(err error) (provider.Instance, error) {
		return provider.Instance{}, fmt.Errorf("power on %s in %s: %w", id, d.district, err)
	}
	if !validProviderID(id) {
		return fail(errors.New("not a local node's provider id"))
	}
	r, err := d.preparePowerOn(ctx, id)
	if err != nil || r.State == stateRunning {
		if err != nil {
			return fail(err)
		}
		return instance(r), nil
	}
	done, err := d.startInit(ctx, r)
	if err == nil {
		err = d.waitSSH(ctx, r, done)
	}
	if err == nil {
		err = d.updateNode(ctx, r.ProviderID, func(rec *nodeRecord) error {
			if rec.State != statePending {
				return fmt.Errorf("node %s was terminated while it booted", rec.ProviderID)
			}
			rec.State = stateRunning
			return nil
		})
	}
	if err != nil {
		logs := nodeLogs(r)
		if perr := d.powerOffFailed(context.WithoutCancel(ctx), id); perr != nil {
			err = errors.Join(err, perr)
		}
		return fail(fmt.Errorf("%w\n%s", err, logs))
	}
	r.State = stateRunning
	return instance(r), nil
}

// preparePowerOn marks a stopped node pending (List shows it booting)
// and makes sure its bridge is there, under the root lock.
func (d *driver) preparePowerOn(ctx context.Context, id string) (*nodeRecord, error) {
	unlock, err := lockRoot(ctx, d.root)
	if err != nil {
		return nil, err
	}
	defer unlock()
	r, err := d.readNode(id)
	if err != nil {
		return nil, err
	}
	switch r.State {
	case stateRunning:
		return r, nil
	case stateStopped:
	default:
		return nil, fmt.Errorf("it is %s", r.State)
	}
	if err := os.Remove(filepath.Join(r.NodeDir, "boot", "booted")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if err := d.ensureBridge(ctx); err != nil {
		return nil, err
	}
	r.State = statePending
	if err := writeNode(r); err != nil {
		return nil, err
	}
	return r, nil
}

// powerOffFailed powers a node that did not come up off again, unless it
// is being terminated meanwhile.
func (d *driver) powerOffFailed(ctx context.Context, id string) error {
	unlock, err := lockRoot(ctx, d.root)
	if err != nil {
		return err
	}
	defer unlock()
	r, err := d.readNode(id)
	if err != nil || r.State != statePending {
		return err
	}
	return d.powerOff(ctx, r)
}
