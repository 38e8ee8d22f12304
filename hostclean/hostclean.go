// Package hostclean finds and removes everything transit made on this
// host: the local provider's records and what they name (local.Purge),
// and, by their documented names, whatever no record names any more —
// node and cloudsim router network namespaces, bridges, veths and
// uplinks, iptables chains with the rules that jump to them, the platform
// conformance suite's OUTPUT rules, cgroups under transit/ and the
// processes of nodes. It is what `make clean-host` runs
// (cmd/transit-clean-host) after a test binary was killed by its timeout
// or kill -9 and left all of that behind.
//
// Find only looks; Remove removes exactly what Find returned (a value the
// command shows before asking), keeps going past failures and reports
// what stayed. Options.Only scopes both to what a caller names, so a
// test never touches what it did not make.
package hostclean

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/cloudtransit/transit/drivers/local"
)

// DefaultBase is where Find looks for roots of records: every test's and
// the local provider's default root are under it.
const DefaultBase = "/var/lib/transit"

// DefaultDepth is how many directory levels below the base a root may be
// (/var/lib/transit/local-test/<test>/<n> is 3).
const DefaultDepth = 4

// Kind is what an Item is.
type Kind string

// The kinds of items, in the order Remove removes them.
const (
	KindRecords Kind = "records"           // a root of the local provider's records; Name is its path
	KindProcess Kind = "process"           // Name is its pid
	KindRule    Kind = "iptables rule"     // Name is the rule as iptables -S prints it
	KindChain   Kind = "iptables chain"    // Name is "<table> <chain>"
	KindLink    Kind = "link"              // Name is the interface's
	KindNetns   Kind = "network namespace" // Name is the namespace's (/run/netns/NAME)
	KindCgroup  Kind = "cgroup"            // Name is "transit/<name>", "transit" or "transit-make-test", in every hierarchy
)

// Kinds are every kind, in the order Remove removes them.
func Kinds() []Kind {
	return []Kind{KindRecords, KindProcess, KindRule, KindChain, KindLink, KindNetns, KindCgroup}
}

// Item is one thing transit made on the host.
type Item struct {
	Kind Kind
	Name string
	// Detail says more to a person: a process's command line, what a
	// root holds, which chains jump to a chain.
	Detail string
	// Because says, for a process, what makes it transit's: "names
	// <path under the base>", "in network namespace <name>", "in
	// cgroup transit/<name>" or "in cgroup transit-make-test".
	Because string

	pid   int    // process
	start uint64 // process: its start time, against a reused pid
	table string // chain, rule
	chain string // chain; rule: the chain it is in
	args  []string
	paths []string // cgroup: its directory in each hierarchy
}

// String is the item in one line, without its kind.
func (it Item) String() string {
	switch {
	case it.Kind == KindProcess:
		return it.Name + " " + shorten(it.Detail, 100) + " (" + it.Because + ")"
	case it.Detail != "":
		return it.Name + " (" + it.Detail + ")"
	}
	return it.Name
}

// key identifies an item across two Finds.
func (it Item) key() string {
	return string(it.Kind) + "\x00" + it.Name + "\x00" + strconv.FormatUint(it.start, 10)
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Options tune Find and Remove.
type Options struct {
	// Base is where roots of records are looked for (a directory with a
	// "districts" subdirectory, at most Depth levels below), and a
	// process whose command line names a path under it is transit's.
	// Default DefaultBase.
	Base string
	// Depth is how many levels below Base a root may be; default
	// DefaultDepth.
	Depth int
	// Only, when not nil, keeps the items it accepts and drops the rest,
	// after the names' shapes are checked: a test scopes Find and Remove
	// to what it made. nil: everything transit made on the host.
	Only func(Item) bool
	// Log receives what Remove does; default: discarded.
	Log *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.Base == "" {
		o.Base = DefaultBase
	}
	o.Base = filepath.Clean(o.Base)
	if o.Depth <= 0 {
		o.Depth = DefaultDepth
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return o
}

// Find lists what transit made on this host, in the order of Kinds and
// by name within a kind. What it could not look at is in the error,
// beside the items it found elsewhere.
func Find(ctx context.Context, opts Options) ([]Item, error) {
	opts = opts.withDefaults()
	var items []Item
	var errs []error
	add := func(its []Item, err error) {
		if err != nil {
			errs = append(errs, err)
		}
		for _, it := range its {
			if opts.Only == nil || opts.Only(it) {
				items = append(items, it)
			}
		}
	}
	add(findRoots(opts.Base, opts.Depth))
	nsItems, inodes, err := findNetns()
	add(nsItems, err)
	add(findLinks())
	add(findIptables(ctx))
	if mounts, err := cgroupMounts(); err != nil {
		errs = append(errs, err)
	} else {
		add(findCgroups(mounts))
	}
	add(findProcs(opts.Base, inodes))
	order := Kinds()
	slices.SortStableFunc(items, func(a, b Item) int {
		if d := slices.Index(order, a.Kind) - slices.Index(order, b.Kind); d != 0 {
			return d
		}
		if a.Kind == KindProcess {
			return a.pid - b.pid
		}
		return 0 // as found: the parent cgroup after its children
	})
	return items, errors.Join(errs...)
}

// findRoots lists the roots of records under base, at most depth levels
// down, without entering a root or following a symbolic link.
func findRoots(base string, depth int) ([]Item, error) {
	var items []Item
	var errs []error
	var walk func(dir string, level int)
	walk = func(dir string, level int) {
		if fi, err := os.Lstat(filepath.Join(dir, "districts")); err == nil && fi.IsDir() {
			items = append(items, Item{Kind: KindRecords, Name: dir, Detail: rootSummary(dir)})
			return
		}
		if level >= depth {
			return
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			if level > 0 || !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("look for records: %w", err))
			}
			return
		}
		for _, e := range entries {
			if e.IsDir() {
				walk(filepath.Join(dir, e.Name()), level+1)
			}
		}
	}
	walk(base, 0)
	return items, errors.Join(errs...)
}

// rootSummary says what a root's records hold.
func rootSummary(root string) string {
	ds, err := os.ReadDir(filepath.Join(root, "districts"))
	if err != nil {
		return ""
	}
	districts, nodes := 0, 0
	for _, d := range ds {
		if !d.IsDir() {
			continue
		}
		districts++
		ns, _ := os.ReadDir(filepath.Join(root, "districts", d.Name(), "nodes"))
		for _, n := range ns {
			if n.IsDir() {
				nodes++
			}
		}
	}
	return plural(districts, "district") + ", " + plural(nodes, "node")
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

// netnsDir is where `ip netns` keeps named network namespaces.
const netnsDir = "/run/netns"

// findNetns lists transit's named network namespaces, and maps each
// one's inode to its name (a process in it is transit's).
func findNetns() ([]Item, map[uint64]string, error) {
	entries, err := os.ReadDir(netnsDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("list network namespaces: %w", err)
	}
	var items []Item
	inodes := map[uint64]string{}
	for _, e := range entries {
		if !isNetns(e.Name()) {
			continue
		}
		it := Item{Kind: KindNetns, Name: e.Name(), Detail: "a cloudsim region's router"}
		if isNodeNetns(e.Name()) {
			it.Detail = "a local node's"
		}
		items = append(items, it)
		if fi, err := os.Stat(filepath.Join(netnsDir, e.Name())); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				inodes[st.Ino] = e.Name()
			}
		}
	}
	return items, inodes, nil
}

// findLinks lists transit's links in the host's network namespace (those
// of districts that live in a cloudsim router go with the router).
func findLinks() ([]Item, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	var items []Item
	for _, ifc := range ifs {
		if !isLink(ifc.Name) {
			continue
		}
		detail := map[string]string{"tb": "a district's bridge", "tv": "a local node's veth", "cu": "a cloudsim region's uplink"}[ifc.Name[:2]]
		items = append(items, Item{Kind: KindLink, Name: ifc.Name, Detail: detail})
	}
	slices.SortFunc(items, func(a, b Item) int { return strings.Compare(a.Name, b.Name) })
	return items, nil
}

// RemoveError says what stayed after Remove, and the errors met on the
// way.
type RemoveError struct {
	Left []Item
	Errs []error
}

// Error names every item that stayed, then the errors met on the way.
func (e *RemoveError) Error() string {
	var b strings.Builder
	if len(e.Left) > 0 {
		fmt.Fprintf(&b, "%s stayed:", plural(len(e.Left), "item"))
		for _, it := range e.Left {
			fmt.Fprintf(&b, "\n  %s %s", it.Kind, it)
		}
	} else {
		b.WriteString("could not check what stayed")
	}
	for _, err := range e.Errs {
		fmt.Fprintf(&b, "\n%v", err)
	}
	return b.String()
}

// Unwrap returns the errors met on the way.
func (e *RemoveError) Unwrap() []error { return e.Errs }

// Remove removes items (what Find returned with the same opts): first it
// purges each root of records (local.Purge stops nodes cleanly), then it
// kills the processes, removes the rules, the chains with the rules that
// jump to them, the links, the namespaces and the cgroups, and purges
// the roots once more (a teardown that failed while a process held its
// cgroup succeeds then). What is already gone is fine. It keeps going
// past a failure and then looks again: the error, a *RemoveError, names
// every item that stayed.
func Remove(ctx context.Context, opts Options, items []Item) error {
	opts = opts.withDefaults()
	log := opts.Log
	of := func(k Kind) []Item {
		var out []Item
		for _, it := range items {
			if it.Kind == k {
				out = append(out, it)
			}
		}
		return out
	}
	var errs []error
	// A root's purge error is the last one's: a second purge that went
	// through makes the first's moot.
	purgeErrs := map[string]error{}
	purge := func(again bool) {
		for _, it := range of(KindRecords) {
			if _, err := os.Lstat(filepath.Join(it.Name, "districts")); again && errors.Is(err, fs.ErrNotExist) {
				continue
			}
			log.Info("purge the records and what they name", "root", it.Name)
			purgeErrs[it.Name] = nil
			if err := local.Purge(ctx, it.Name); err != nil {
				purgeErrs[it.Name] = fmt.Errorf("purge %s: %w", it.Name, err)
			}
		}
	}
	purge(false)
	if ps := of(KindProcess); len(ps) > 0 {
		log.Info("kill processes", "count", len(ps))
		errs = append(errs, killProcs(ctx, ps)...)
	}
	if rs := of(KindRule); len(rs) > 0 {
		log.Info("remove iptables rules", "count", len(rs))
		errs = append(errs, removeRules(ctx, rs)...)
	}
	if cs := of(KindChain); len(cs) > 0 {
		log.Info("remove iptables chains and their jumps", "count", len(cs))
		errs = append(errs, removeChains(ctx, cs)...)
	}
	// Links before namespaces: a namespace's links go only once the
	// kernel cleans it up, after `ip netns del` returned.
	for _, it := range of(KindLink) {
		log.Info("remove link", "name", it.Name)
		if err := removeLink(ctx, it.Name); err != nil {
			errs = append(errs, err)
		}
	}
	for _, it := range of(KindNetns) {
		log.Info("remove network namespace", "name", it.Name)
		if err := removeNetns(ctx, it.Name); err != nil {
			errs = append(errs, err)
		}
	}
	// Deepest first: transit/ after the cgroups under it.
	cgs := of(KindCgroup)
	slices.SortStableFunc(cgs, func(a, b Item) int { return strings.Count(b.Name, "/") - strings.Count(a.Name, "/") })
	for _, it := range cgs {
		log.Info("remove cgroup", "name", it.Name)
		if err := removeCgroup(ctx, it); err != nil {
			errs = append(errs, err)
		}
	}
	purge(true)
	for _, it := range of(KindRecords) {
		if err := purgeErrs[it.Name]; err != nil {
			errs = append(errs, err)
		}
	}

	// The verdict is what is there now, not what the steps said.
	now, err := Find(ctx, opts)
	if err != nil {
		return &RemoveError{Errs: append(errs, fmt.Errorf("look at what stayed: %w", err))}
	}
	was := map[string]bool{}
	for _, it := range items {
		was[it.key()] = true
	}
	var left []Item
	for _, it := range now {
		if was[it.key()] {
			left = append(left, it)
		}
	}
	if len(left) > 0 {
		return &RemoveError{Left: left, Errs: errs}
	}
	for _, err := range errs {
		log.Info("gone anyway after", "error", err)
	}
	return nil
}

// removeLink deletes a link unless it is gone.
func removeLink(ctx context.Context, name string) error {
	if _, err := net.InterfaceByName(name); err != nil {
		return nil // gone
	}
	if _, err := run(ctx, "ip", "link", "del", name); err != nil {
		if _, gone := net.InterfaceByName(name); gone != nil {
			return nil // went meanwhile, with its peer or its namespace
		}
		return fmt.Errorf("remove link %s: %w", name, err)
	}
	return nil
}

// removeNetns deletes a named network namespace unless it is gone.
func removeNetns(ctx context.Context, name string) error {
	path := filepath.Join(netnsDir, name)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if _, err := run(ctx, "ip", "netns", "del", name); err != nil {
		if _, serr := os.Stat(path); errors.Is(serr, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("remove network namespace %s: %w", name, err)
	}
	return nil
}

// sbinPath is searched after PATH: sudo and cron may leave the sbin
// directories out, where ip and iptables live.
const sbinPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

func lookPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range filepath.SplitList(sbinPath) {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: %w", name, exec.ErrNotFound)
}

// run runs a command and keeps its output in the error.
func run(ctx context.Context, name string, args ...string) (string, error) {
	path, err := lookPath(name)
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = append(os.Environ(), "PATH="+sbinPath)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}
