package local

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// Launch starts a node and returns once it answers SSH.
func (d *driver) Launch(ctx context.Context, spec provider.LaunchSpec) (provider.Instance, error) {
	r, err := d.prepare(ctx, spec)
	if err != nil {
		return provider.Instance{}, err
	}
	if err := d.boot(ctx, r); err != nil {
		return provider.Instance{}, err
	}
	return instance(r), nil
}

// prepare validates the spec, allocates the node's address and writes its
// record (state pending, every resource name) before anything is created,
// then writes the node's files.
func (d *driver) prepare(ctx context.Context, spec provider.LaunchSpec) (*nodeRecord, error) {
	n := spec.Node
	fail := func(err error) (*nodeRecord, error) {
		return nil, fmt.Errorf("launch node %s in %s: %w", n.ID, d.district, err)
	}
	if !validHostname(n.ID) {
		return fail(fmt.Errorf("node id %q is not a valid hostname", n.ID))
	}
	if n.District != "" && n.District != d.district {
		return fail(fmt.Errorf("node is in district %q, not %q", n.District, d.district))
	}
	if err := checkAuthorizedKey(spec.AuthorizedKey); err != nil {
		return fail(err)
	}
	cluster := spec.Tags[districts.TagCluster]
	if cluster == "" {
		return fail(fmt.Errorf("tags lack %s", districts.TagCluster))
	}
	id, err := newProviderID()
	if err != nil {
		return fail(err)
	}

	r, err := d.record(ctx, spec, id, cluster)
	if err == nil {
		err = d.writeNodeFiles(r, spec.AuthorizedKey)
	}
	if err != nil {
		if r != nil { // recorded: take back what was made
			d.teardownNow(ctx, r.ProviderID)
		}
		return fail(err)
	}
	return r, nil
}

// record allocates the node's address and writes its record, under the
// root lock; it also makes sure the bridge and the host mount points exist.
// After the record is written it returns the record with any error, so the
// caller can tear the node down.
func (d *driver) record(ctx context.Context, spec provider.LaunchSpec, id, cluster string) (*nodeRecord, error) {
	n := spec.Node
	fail := func(err error) (*nodeRecord, error) { return nil, err }
	unlock, err := lockRoot(ctx, d.root)
	if err != nil {
		return fail(err)
	}
	defer unlock()
	if !validChain(spec.GroupID) {
		return fail(fmt.Errorf("group %q does not exist in district %s", spec.GroupID, d.district))
	}
	var g groupRecord
	if err := readJSON(groupPath(d.root, d.district, spec.GroupID), &g); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fail(fmt.Errorf("group %q does not exist in district %s", spec.GroupID, d.district))
		}
		return fail(err)
	}
	if g.Cluster != cluster {
		return fail(fmt.Errorf("group %s belongs to cluster %q, the node to %q", g.Name, g.Cluster, cluster))
	}
	nodes, err := d.readNodes()
	if err != nil {
		return fail(err)
	}
	ip, err := allocateIP(d.subnet, nodes, d.lastIP())
	if err != nil {
		return fail(err)
	}
	if err := writeFile(filepath.Join(districtDir(d.root, d.district), "last-ip"), []byte(ip.String()+"\n"), 0o644); err != nil {
		return fail(err)
	}
	r := &nodeRecord{
		ProviderID:  id,
		NodeID:      n.ID,
		District:    d.district,
		Zone:        n.Zone,
		MachineType: spec.MachineType,
		Group:       spec.GroupID,
		Tags:        maps.Clone(spec.Tags),
		State:       statePending,
		CreatedAt:   d.clock.Now().UTC().Truncate(time.Second),
		IP:          ip.String(),
		Prefix:      d.subnet.Bits(),
		Gateway:     d.gateway.String(),
		SSHD:        d.sshd,
	}
	derive(r, d.root, d.hierarchies)
	if err := os.MkdirAll(r.NodeDir, 0o755); err != nil {
		return fail(err)
	}
	if err := writeNode(r); err != nil {
		return fail(err)
	}
	if err := d.ensureBridge(ctx); err != nil {
		return r, err
	}
	if err := d.ensureMountPoints(); err != nil {
		return r, err
	}
	for _, l := range hostLimits {
		if err := raiseTo(l.path, l.floor); err != nil {
			return r, fmt.Errorf("raise %s to %d (every local node shares it): %w", l.path, l.floor, err)
		}
	}
	return r, nil
}

// boot starts the node's init detached and waits until it answers SSH; on
// failure it tears the node down and returns the tail of its logs.
func (d *driver) boot(ctx context.Context, r *nodeRecord) error {
	fail := func(err error) error {
		return fmt.Errorf("launch node %s in %s: %w", r.NodeID, d.district, err)
	}
	done, err := d.startInit(ctx, r)
	if err != nil {
		d.teardownNow(ctx, r.ProviderID)
		return fail(err)
	}
	if err := d.waitSSH(ctx, r, done); err != nil {
		logs := nodeLogs(r)
		d.teardownNow(ctx, r.ProviderID)
		return fail(fmt.Errorf("%w\n%s", err, logs))
	}
	if err := d.updateNode(ctx, r.ProviderID, func(rec *nodeRecord) error {
		if rec.State != statePending {
			return fmt.Errorf("node %s was terminated while it launched", rec.ProviderID)
		}
		rec.State = stateRunning
		return nil
	}); err != nil {
		return fail(err)
	}
	r.State = stateRunning
	return nil
}

// startInit starts the node's boot script detached and records its pid,
// which is the node's init pid from then on.
func (d *driver) startInit(ctx context.Context, r *nodeRecord) (<-chan struct{}, error) {
	boot := filepath.Join(r.NodeDir, "boot")
	proc, done, err := startDetached(filepath.Join(boot, "init.log"), "/bin/bash", filepath.Join(boot, "boot.sh"))
	if err != nil {
		return nil, err
	}
	if err := d.updateNode(ctx, r.ProviderID, func(rec *nodeRecord) error {
		if rec.State != statePending {
			return fmt.Errorf("node %s was terminated while it launched", rec.ProviderID)
		}
		rec.InitPID, rec.InitStart = proc.pid, proc.start
		return nil
	}); err != nil {
		return nil, err
	}
	r.InitPID, r.InitStart = proc.pid, proc.start
	return done, nil
}

// updateNode changes a node's record under the root lock.
func (d *driver) updateNode(ctx context.Context, id string, fn func(*nodeRecord) error) error {
	unlock, err := lockRoot(ctx, d.root)
	if err != nil {
		return err
	}
	defer unlock()
	rec, err := d.readNode(id)
	if err != nil {
		return err
	}
	if err := fn(rec); err != nil {
		return err
	}
	return writeNode(rec)
}

// instance is the node as Launch and List report it. Its host key is read
// from the node's own boot directory, which the driver wrote at launch, so
// transit pins it instead of trusting it on first use.
func instance(r *nodeRecord) provider.Instance {
	inst := provider.Instance{
		ProviderID: r.ProviderID,
		Tags:       maps.Clone(r.Tags),
		Zone:       r.Zone,
		PublicIP:   r.IP,
		PrivateIP:  r.IP,
		State:      provider.InstanceState(r.State),
		CreatedAt:  r.CreatedAt,
	}
	if data, err := os.ReadFile(filepath.Join(r.NodeDir, "boot", "ssh_host_ed25519_key.pub")); err == nil {
		if k, _, _, _, err := ssh.ParseAuthorizedKey(data); err == nil {
			inst.HostKeys = []string{strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k)))}
		}
	}
	return inst
}

func newProviderID() (string, error) {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return "ln-" + hex.EncodeToString(b), nil
}

func validHostname(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

func checkAuthorizedKey(k string) error {
	if strings.TrimSpace(k) == "" {
		return errors.New("no authorized key")
	}
	rest := []byte(k)
	for len(bytes.TrimSpace(rest)) > 0 {
		_, _, _, r, err := ssh.ParseAuthorizedKey(rest)
		if err != nil {
			return fmt.Errorf("authorized key: %w", err)
		}
		rest = r
	}
	return nil
}

// allocateIP returns the first free host address of the subnet after last
// (the address handed out before), wrapping around after the last one: a
// freed address is not handed out again until the others were, so no stale
// ARP, conntrack or platform entry for it is still about. Every recorded
// node (terminating ones too) holds its address.
func allocateIP(subnet netip.Prefix, nodes []*nodeRecord, last netip.Addr) (netip.Addr, error) {
	used := map[netip.Addr]bool{}
	for _, n := range nodes {
		if a, err := netip.ParseAddr(n.IP); err == nil {
			used[a] = true
		}
	}
	// Host addresses are base+2 (after the network and the gateway) up to
	// base+size-2 (before the broadcast address).
	b := subnet.Masked().Addr().As4()
	base := binary.BigEndian.Uint32(b[:])
	count := uint32(1)<<(32-subnet.Bits()) - 3
	addr := func(i uint32) netip.Addr {
		var a [4]byte
		binary.BigEndian.PutUint32(a[:], base+2+i)
		return netip.AddrFrom4(a)
	}
	start := uint32(0)
	if last.Is4() && subnet.Contains(last) {
		l := last.As4()
		if i := binary.BigEndian.Uint32(l[:]) - base - 2; i < count {
			start = (i + 1) % count
		}
	}
	for k := range count {
		if a := addr((start + k) % count); !used[a] {
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("subnet %s is full (%d nodes)", subnet, len(nodes))
}

// lastIP is the address the district handed out last (<district>/last-ip).
func (d *driver) lastIP() netip.Addr {
	b, err := os.ReadFile(filepath.Join(districtDir(d.root, d.district), "last-ip"))
	if err != nil {
		return netip.Addr{}
	}
	a, err := netip.ParseAddr(strings.TrimSpace(string(b)))
	if err != nil {
		return netip.Addr{}
	}
	return a
}

// ensureMountPoints creates the host directories nodes mount over, recording
// the ones it creates in <root>/created-dirs. Call it under the root lock.
func (d *driver) ensureMountPoints() error {
	var created []string
	for _, p := range privateDirs {
		var missing []string
		for dir := p; dir != "/"; dir = filepath.Dir(dir) {
			if _, err := os.Lstat(dir); err == nil {
				break
			}
			missing = append(missing, dir)
		}
		slices.Reverse(missing)
		for _, dir := range missing {
			if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
			created = append(created, dir)
		}
	}
	if len(created) == 0 {
		return nil
	}
	f, err := os.OpenFile(filepath.Join(d.root, "created-dirs"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteString(strings.Join(created, "\n") + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// writeNodeFiles writes the node's boot files (scripts, sshd config, host
// key, authorized keys, hosts) and its private directories.
func (d *driver) writeNodeFiles(r *nodeRecord, authorizedKey string) error {
	boot := filepath.Join(r.NodeDir, "boot")
	for _, dir := range []string{boot, filepath.Join(r.NodeDir, "run")} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	for _, p := range privateDirs {
		if err := os.MkdirAll(filepath.Join(r.NodeDir, "fs", p), 0o755); err != nil {
			return err
		}
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	block, err := ssh.MarshalPrivateKey(priv, "transit "+r.ProviderID)
	if err != nil {
		return err
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		return err
	}
	if !strings.HasSuffix(authorizedKey, "\n") {
		authorizedKey += "\n"
	}
	files := []struct {
		name string
		data []byte
		mode os.FileMode
	}{
		{"boot.sh", []byte(bootScript(r, d.hierarchies)), 0o755},
		{"enter.sh", []byte(enterScript(r, d.hierarchies)), 0o755},
		{"init.sh", []byte(initScript(r, d.hierarchies)), 0o755},
		{"sshd_config", []byte(sshdConfig(r)), 0o644},
		{"ssh_host_ed25519_key", pem.EncodeToMemory(block), 0o600},
		{"ssh_host_ed25519_key.pub", ssh.MarshalAuthorizedKey(sshPub), 0o644},
		{"authorized_keys", []byte(authorizedKey), 0o600},
		{"hosts", []byte(hostsFile(r)), 0o644},
		{"hostname", []byte(r.NodeID + "\n"), 0o644},
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(boot, f.name), f.data, f.mode); err != nil {
			return err
		}
	}
	return nil
}

// detached is a process started in its own session that outlives transit.
type detached struct {
	pid   int
	start uint64
}

// startDetached starts name in a new session with stdio on logPath. The
// process outlives transit; while transit runs, a goroutine reaps it and
// closes done.
func startDetached(logPath string, name string, args ...string) (detached, <-chan struct{}, error) {
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return detached{}, nil, err
	}
	defer log.Close()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "PATH="+scriptPath)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return detached{}, nil, err
	}
	p := detached{pid: cmd.Process.Pid, start: procStart(cmd.Process.Pid)}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	return p, done, nil
}

// waitSSH waits until the node's sshd sends its banner, with backoff,
// bounded by the driver's SSH wait.
func (d *driver) waitSSH(ctx context.Context, r *nodeRecord, initDone <-chan struct{}) error {
	deadline := d.clock.Now().Add(d.sshWait)
	booted := filepath.Join(r.NodeDir, "boot", "booted")
	addr := net.JoinHostPort(r.IP, "22")
	delay := 5 * time.Millisecond
	last := errors.New("the node's init has not finished")
	for {
		select {
		case <-initDone:
			return errors.New("the node's init exited")
		default:
		}
		if _, err := os.Stat(booted); err == nil {
			if last = sshBanner(ctx, addr); last == nil {
				return nil
			}
		}
		if !d.clock.Now().Before(deadline) {
			return fmt.Errorf("no SSH on %s after %s: %w", addr, d.sshWait, last)
		}
		if err := d.clock.Sleep(ctx, delay); err != nil {
			return err
		}
		delay = min(delay*2, 200*time.Millisecond)
	}
}

// sshBanner connects to addr and reads the SSH banner.
func sshBanner(ctx context.Context, addr string) error {
	dctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var dialer net.Dialer
	c, err := dialer.DialContext(dctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.SetReadDeadline(time.Now().Add(2 * time.Second)); err != nil {
		return err
	}
	buf := make([]byte, 256)
	n, err := c.Read(buf)
	if n >= 8 && string(buf[:8]) == "SSH-2.0-" {
		return nil
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("unexpected banner %q", buf[:n])
}

// nodeLogs returns the tail of the node's init and sshd logs.
func nodeLogs(r *nodeRecord) string {
	var b strings.Builder
	for _, name := range []string{"init.log", "sshd.log"} {
		data, err := os.ReadFile(filepath.Join(r.NodeDir, "boot", name))
		if err != nil || len(bytes.TrimSpace(data)) == 0 {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > 20 {
			lines = lines[len(lines)-20:]
		}
		fmt.Fprintf(&b, "--- %s (last lines)\n%s\n", name, strings.Join(lines, "\n"))
	}
	if b.Len() == 0 {
		return "(the node's logs are empty)"
	}
	return b.String()
}

// Terminate starts the node's teardown and returns at once.
func (d *driver) Terminate(ctx context.Context, inst provider.Instance) error {
	_, err := d.terminate(ctx, inst.ProviderID)
	if err != nil {
		return fmt.Errorf("terminate %s in %s: %w", inst.ProviderID, d.district, err)
	}
	return nil
}

// terminate marks the node terminating and starts its detached teardown,
// unless one already runs. It returns the teardown's done channel (nil if
// none was started).
func (d *driver) terminate(ctx context.Context, id string) (<-chan struct{}, error) {
	if !validProviderID(id) {
		return nil, nil // not a local node: nothing to do
	}
	unlock, err := lockRoot(ctx, d.root)
	if err != nil {
		return nil, err
	}
	defer unlock()
	r, err := d.readNode(id)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return d.startTeardown(r)
}

// startTeardown starts r's teardown unless a live one runs. Call it under
// the root lock: the teardown waits for the lock before it does anything,
// so the record naming it is written first.
func (d *driver) startTeardown(r *nodeRecord) (<-chan struct{}, error) {
	if r.State == stateTerminating && teardownAlive(r) {
		return nil, nil
	}
	script := teardownScript(r, d.cgroupParents())
	p, done, err := startDetached(filepath.Join(r.NodeDir, "teardown.log"), "/bin/bash", "-c", script, teardownName(r.ProviderID))
	if err != nil {
		return nil, err
	}
	r.State = stateTerminating
	r.TeardownPID, r.TeardownStart = p.pid, p.start
	if err := writeNode(r); err != nil {
		return nil, err
	}
	return done, nil
}

// teardownNow tears a node down and waits, for a launch that failed.
func (d *driver) teardownNow(ctx context.Context, id string) {
	done, err := d.terminate(context.WithoutCancel(ctx), id)
	if err == nil && done != nil {
		<-done
	}
}

// List returns the cluster's nodes and groups in the district. It resumes
// teardowns whose process died (transit was killed); their nodes stay listed
// as terminating until the teardown is done. A running node whose init
// died (it crashed, or the host rebooted) is a dead machine: it is torn
// down and listed as terminating, so the loop replaces it.
func (d *driver) List(ctx context.Context, cluster string) ([]provider.Instance, []provider.Group, error) {
	recs, err := d.readNodes()
	if err != nil {
		return nil, nil, fmt.Errorf("list %s: %w", d.district, err)
	}
	var insts []provider.Instance
	var resume []string
	for _, r := range recs {
		if r.Tags[districts.TagCluster] != cluster {
			continue
		}
		inst, stalled := d.observe(ctx, r)
		if stalled {
			resume = append(resume, r.ProviderID)
		}
		insts = append(insts, inst)
	}
	if len(resume) > 0 {
		if err := d.resumeTeardowns(ctx, resume); err != nil {
			return nil, nil, fmt.Errorf("list %s: %w", d.district, err)
		}
	}
	slices.SortFunc(insts, func(a, b provider.Instance) int { return strings.Compare(a.ProviderID, b.ProviderID) })
	groups, err := d.listGroups(ctx, cluster)
	if err != nil {
		return nil, nil, fmt.Errorf("list %s: %w", d.district, err)
	}
	return insts, groups, nil
}

// observe is a node as the cloud would report it now, judged from the
// node itself, not only from its record: a running node whose init died
// is gone (terminating; stalled says its teardown must be resumed, as
// must a teardown that died), and a pending one is judged by pending.
func (d *driver) observe(ctx context.Context, r *nodeRecord) (inst provider.Instance, stalled bool) {
	dead := r.State == stateRunning && !initAlive(r)
	if dead || r.State == stateTerminating && !teardownAlive(r) {
		r.State, stalled = stateTerminating, true
	}
	inst = instance(r)
	if r.State == statePending {
		inst.State = d.pending(ctx, r)
	}
	return inst, stalled
}

// pending says what a node recorded pending is: a cloud moves a machine
// out of pending by itself, whoever launched it, and the launch that
// would have recorded it running may be dead (transit killed between the
// two writes). Its init alive and its sshd answering: running. Its init
// dead: failed. No init recorded for longer than a launch waits for SSH
// (the launcher died before it started one): failed. Else still pending.
func (d *driver) pending(ctx context.Context, r *nodeRecord) provider.InstanceState {
	switch {
	case r.InitPID == 0:
		if d.clock.Now().Sub(r.CreatedAt) > d.sshWait {
			return provider.InstanceFailed
		}
	case !initAlive(r):
		return provider.InstanceFailed
	default:
		if _, err := os.Stat(filepath.Join(r.NodeDir, "boot", "booted")); err == nil && sshBanner(ctx, net.JoinHostPort(r.IP, "22")) == nil {
			return provider.InstanceRunning
		}
	}
	return provider.InstancePending
}

// Describe reads one node's record, whatever its tags, and judges it as
// List does; a node without a record is provider.ErrCloudNotFound.
func (d *driver) Describe(ctx context.Context, inst provider.Instance) (provider.Instance, error) {
	if !validProviderID(inst.ProviderID) {
		return provider.Instance{}, fmt.Errorf("describe %q in %s: not a local node's id: %w", inst.ProviderID, d.district, provider.ErrCloudNotFound)
	}
	r, err := d.readNode(inst.ProviderID)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return provider.Instance{}, fmt.Errorf("describe %s in %s: no such node: %w", inst.ProviderID, d.district, provider.ErrCloudNotFound)
	case err != nil:
		return provider.Instance{}, fmt.Errorf("describe %s in %s: %w", inst.ProviderID, d.district, err)
	}
	out, stalled := d.observe(ctx, r)
	if stalled {
		if err := d.resumeTeardowns(ctx, []string{r.ProviderID}); err != nil {
			return provider.Instance{}, fmt.Errorf("describe %s in %s: %w", inst.ProviderID, d.district, err)
		}
	}
	return out, nil
}

func (d *driver) resumeTeardowns(ctx context.Context, ids []string) error {
	unlock, err := lockRoot(ctx, d.root)
	if err != nil {
		return err
	}
	defer unlock()
	for _, id := range ids {
		r, err := d.readNode(id)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		// Read again under the lock: a teardown to resume, or a running
		// node whose init is still dead.
		if r.State != stateTerminating && (r.State != stateRunning || initAlive(r)) {
			continue
		}
		if _, err := d.startTeardown(r); err != nil {
			return err
		}
	}
	return nil
}
