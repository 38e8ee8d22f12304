package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/cloudtransit/transit/netns"
)

// Purge synchronously tears down everything recorded under root: every node
// of every district, every group chain with its FORWARD jumps, every
// bridge and the directories transit created, and removes root's records
// (root itself, its lock and its images stay). It works on whatever a crash
// left, half-made nodes included. A missing root is not an error.
func Purge(ctx context.Context, root string) error {
	root, err := filepath.Abs(root)
	if err != nil {
		return err
	}
	entries, err := os.ReadDir(filepath.Join(root, "districts"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("purge %s: %w", root, err)
	}
	if err := checkRoot(root); err != nil {
		return err
	}
	hs, err := cgroupHierarchies()
	if err != nil {
		return fmt.Errorf("purge %s: %w", root, err)
	}
	parents := cgroupParents(hs)
	var errs []error
	for _, e := range entries {
		if !e.IsDir() || !validName(e.Name()) {
			continue
		}
		purge := func() error { return purgeDistrict(ctx, root, e.Name(), hs, parents) }
		if ns := districtNetwork(root, e.Name()); ns != "" {
			in := purge
			purge = func() error { return netns.Do(ns, in) }
		}
		if err := purge(); err != nil {
			errs = append(errs, fmt.Errorf("purge district %s: %w", e.Name(), err))
		}
	}
	// Whatever is left (records of nodes whose teardown failed) goes too.
	if err := os.Remove(filepath.Join(root, "districts")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, fmt.Errorf("purge %s: %w", root, err))
	}
	return errors.Join(errs...)
}

func purgeDistrict(ctx context.Context, root, district string, hs []hierarchy, parents []string) error {
	var errs []error
	dir := filepath.Join(districtDir(root, district), "nodes")
	nodes, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, n := range nodes {
		if !n.IsDir() {
			continue
		}
		if !validProviderID(n.Name()) {
			errs = append(errs, os.RemoveAll(filepath.Join(dir, n.Name())))
			continue
		}
		r, err := readNode(root, district, n.Name(), hs)
		if err != nil {
			if _, serr := os.Stat(filepath.Join(dir, n.Name(), "record.json")); errors.Is(serr, fs.ErrNotExist) &&
				!netnsExists(netnsName(n.Name())) {
				// A teardown finished all but rmdir, or a launch died
				// before its record: nothing else was made.
				errs = append(errs, os.RemoveAll(filepath.Join(dir, n.Name())))
				continue
			}
			// Unreadable or refused: the names derive from the
			// directory anyway; no process is trusted.
			r = &nodeRecord{ProviderID: n.Name(), NodeID: n.Name(), District: district, State: stateTerminating}
			derive(r, root, hs)
		}
		if teardownAlive(r) {
			_ = syscall.Kill(r.TeardownPID, syscall.SIGKILL)
		}
		if out, err := run(ctx, "", "bash", "-c", teardownScript(r, parents), teardownName(r.ProviderID)); err != nil {
			errs = append(errs, fmt.Errorf("teardown %s: %w\n%s", r.ProviderID, err, out))
		}
	}
	unlock, err := lockRoot(ctx, root)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	defer unlock()
	groups, err := os.ReadDir(filepath.Join(districtDir(root, district), "groups"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, err)
	}
	for _, g := range groups {
		path := filepath.Join(districtDir(root, district), "groups", g.Name())
		if chain, ok := strings.CutSuffix(g.Name(), ".json"); ok && validChain(chain) {
			if err := deleteChain(ctx, chain); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		errs = append(errs, os.RemoveAll(path))
	}
	if _, err := run(ctx, "", "bash", "-c", gcScript(root, district, parents)); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func netnsExists(name string) bool {
	_, err := os.Stat("/run/netns/" + name)
	return err == nil
}
