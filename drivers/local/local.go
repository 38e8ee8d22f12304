package local

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/cloudtransit/transit/clock"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// DefaultRoot is where the local provider keeps its records.
const DefaultRoot = "/var/lib/transit/local"

// DefaultSSHWait bounds how long Launch waits for a node to answer SSH.
const DefaultSSHWait = 30 * time.Second

// Options tune the local driver.
type Options struct {
	Root    string        // default DefaultRoot
	SSHWait time.Duration // default DefaultSSHWait
	Clock   clock.Clock   // default clock.Real{}
	// Network is a network namespace (a path such as /run/netns/NAME)
	// the district lives in instead of the host's (netns.go).
	Network string
}

type driver struct {
	root        string
	district    string
	subnet      netip.Prefix
	gateway     netip.Addr
	bridge      string
	sshd        string
	sshWait     time.Duration
	clock       clock.Clock
	hierarchies []hierarchy
}

var _ provider.Infrastructure = (*driver)(nil)

// New returns the driver of a local district: d.Provider must be "local"
// and d.LocalSubnet an IPv4 subnet (at most /30). It checks the host (Check)
// and creates the root directory.
func New(_ context.Context, d districts.District, opts Options) (provider.Infrastructure, error) {
	if d.Provider != districts.ProviderLocal {
		return nil, fmt.Errorf("district %q: provider %q is not %q", d.ID, d.Provider, districts.ProviderLocal)
	}
	if !validName(d.ID) {
		return nil, fmt.Errorf("district %q: a local district id must be letters, digits, '-', '_' or '.'", d.ID)
	}
	subnet, err := parseSubnet(d.LocalSubnet)
	if err != nil {
		return nil, fmt.Errorf("district %q: local_subnet: %w", d.ID, err)
	}
	if err := Check(); err != nil {
		return nil, err
	}
	if opts.Root == "" {
		opts.Root = DefaultRoot
	}
	root, err := filepath.Abs(opts.Root)
	if err != nil {
		return nil, fmt.Errorf("local root %q: %w", opts.Root, err)
	}
	if opts.SSHWait <= 0 {
		opts.SSHWait = DefaultSSHWait
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	sshd, err := exec.LookPath("sshd")
	if err != nil {
		return nil, err
	}
	if sshd, err = filepath.Abs(sshd); err != nil {
		return nil, err
	}
	hs, err := cgroupHierarchies()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(root, "districts"), 0o755); err != nil {
		return nil, fmt.Errorf("local root: %w", err)
	}
	if err := checkRoot(root); err != nil {
		return nil, err
	}
	if opts.Network != "" {
		if _, err := os.Stat(opts.Network); err != nil {
			return nil, fmt.Errorf("district %q: network namespace: %w", d.ID, err)
		}
	}
	drv := &driver{
		root:        root,
		district:    d.ID,
		subnet:      subnet,
		gateway:     subnet.Addr().Next(),
		bridge:      bridgeName(root, d.ID),
		sshd:        sshd,
		sshWait:     opts.SSHWait,
		clock:       opts.Clock,
		hierarchies: hs,
	}
	if opts.Network != "" {
		return netnsDriver{d: drv, path: opts.Network}, nil
	}
	return drv, nil
}

// checkRoot refuses a root that someone but root could change: the root
// must be a directory owned by root and not writable by group or others,
// and so must every directory above it (a sticky one like /tmp may be
// world-writable). Records under the root name what teardowns kill and
// remove.
func checkRoot(root string) error {
	resolved, err := filepath.EvalSymlinks(root)
	if err != nil {
		return fmt.Errorf("local root %s: %w", root, err)
	}
	for dir := resolved; ; dir = filepath.Dir(dir) {
		fi, err := os.Lstat(dir)
		if err != nil {
			return fmt.Errorf("local root %s: %w", root, err)
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("local root %s: cannot read the owner of %s", root, dir)
		}
		mode := fi.Mode()
		switch {
		case !mode.IsDir():
			return fmt.Errorf("local root %s: %s is not a directory", root, dir)
		case st.Uid != 0:
			return fmt.Errorf("local root %s: %s is owned by uid %d, not root: run chown root %s", root, dir, st.Uid, dir)
		case mode.Perm()&0o022 != 0 && (dir == resolved || mode&fs.ModeSticky == 0):
			return fmt.Errorf("local root %s: %s is writable by group or others (mode %04o): run chmod go-w %s",
				root, dir, mode.Perm(), dir)
		}
		if dir == filepath.Dir(dir) {
			return nil
		}
	}
}

func parseSubnet(s string) (netip.Prefix, error) {
	if s == "" {
		return netip.Prefix{}, errors.New("missing (e.g. \"10.240.1.0/24\")")
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	if !p.Addr().Is4() {
		return netip.Prefix{}, fmt.Errorf("%s is not an IPv4 subnet", s)
	}
	if p.Bits() > 30 || p.Bits() < 8 {
		return netip.Prefix{}, fmt.Errorf("%s: the prefix must be between /8 and /30", s)
	}
	if p.Masked() != p {
		return netip.Prefix{}, fmt.Errorf("%s has host bits set (did you mean %s?)", s, p.Masked())
	}
	return p, nil
}

// validName says whether s is safe as a path component and a tag value.
func validName(s string) bool {
	if s == "" || s == "." || s == ".." || len(s) > 128 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

func hash(s string, n int) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:n]
}

// bridgeName is the district's bridge: "tb" and 8 hex digits. Like the
// chains it is scoped by the root, so two roots (two users, a test and a
// demo) never share one.
func bridgeName(root, district string) string { return "tb" + hash(root+"\x00"+district, 8) }

// chainName is the iptables chain of a cluster's group in a district, and
// the group's provider id: "TRANSIT-" and 10 hex digits.
func chainName(root, cluster, district string) string {
	return "TRANSIT-" + strings.ToUpper(hash(root+"\x00"+cluster+"\x00"+district, 10))
}

// inputChainName is the iptables chain that filters what a district's
// nodes send to the host itself: "TRANSIT-IN-" and 10 hex digits.
func inputChainName(root, district string) string {
	return "TRANSIT-IN-" + strings.ToUpper(hash(root+"\x00"+district, 10))
}

// vethName is a node's host-side veth: "tv" and the provider id's hex.
func vethName(providerID string) string { return "tv" + strings.TrimPrefix(providerID, "ln-") }

// netnsName is a node's network namespace.
func netnsName(providerID string) string { return "transit-" + providerID }

// HostNames are the names the driver gives on the host to what it makes
// for root: each district's bridge ("link tb…") and firewall chains
// ("chain TRANSIT-…", the group's for cluster), each node's network
// namespace ("netns transit-ln-…"), veth ("link tv…") and cgroup
// ("cgroup transit/ln-…", under every hierarchy). Tests check that none
// is left, without counting what other roots made meanwhile.
func HostNames(root, cluster string, districts, providerIDs []string) []string {
	var out []string
	for _, d := range districts {
		out = append(out, "link "+bridgeName(root, d), "chain "+chainName(root, cluster, d), "chain "+inputChainName(root, d))
	}
	for _, id := range providerIDs {
		out = append(out, "netns "+netnsName(id), "link "+vethName(id), "cgroup transit/"+id)
	}
	return out
}

func validProviderID(id string) bool {
	h, ok := strings.CutPrefix(id, "ln-")
	if !ok || len(h) != 12 {
		return false
	}
	_, err := hex.DecodeString(h)
	return err == nil
}

func validChain(c string) bool {
	h, ok := strings.CutPrefix(c, "TRANSIT-")
	if !ok || len(h) != 10 {
		return false
	}
	_, err := hex.DecodeString(h)
	return err == nil
}

// packages says which Debian package provides each command the driver runs.
var packages = []struct{ cmd, pkg string }{
	{"bash", "bash"},
	{"ip", "iproute2"},
	{"iptables", "iptables"},
	{"iptables-restore", "iptables"},
	{"sshd", "openssh-server"},
	{"nsenter", "util-linux"},
	{"unshare", "util-linux"},
	{"flock", "util-linux"},
	{"mount", "mount"},
	{"umount", "mount"},
}

// ErrNeedsRoot says the local provider was used without root.
var ErrNeedsRoot = errors.New("the local provider needs root: run transit with sudo")

// Check reports whether this host can run local nodes: it needs root and
// the commands of iproute2, iptables, openssh-server and util-linux.
func Check() error { return check(os.Geteuid(), lookPath) }

// lookPath finds a command in PATH or in the sbin directories sudo and cron
// may leave out.
func lookPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range filepath.SplitList(scriptPath) {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", exec.ErrNotFound
}

func check(euid int, look func(string) (string, error)) error {
	if euid != 0 {
		return ErrNeedsRoot
	}
	var missing, pkgs []string
	for _, p := range packages {
		if _, err := look(p.cmd); err != nil {
			missing = append(missing, p.cmd+" ("+p.pkg+")")
			if !slices.Contains(pkgs, p.pkg) {
				pkgs = append(pkgs, p.pkg)
			}
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("the local provider needs commands that are not installed: %s; install them with: apt-get install %s",
			strings.Join(missing, ", "), strings.Join(pkgs, " "))
	}
	return nil
}

// run runs a command and keeps its output in the error.
func run(ctx context.Context, stdin string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "PATH="+scriptPath)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}
