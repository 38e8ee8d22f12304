package build

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// hostTree makes a fake host root with a merged /usr, as Debian's.
func hostTree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	mk := func(p, content string) {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ln := func(p, target string) {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, full); err != nil {
			t.Fatal(err)
		}
	}
	mk("usr/lib/x86_64-linux-gnu/libz.so.1.2", "z")
	ln("usr/lib/x86_64-linux-gnu/libz.so.1", "libz.so.1.2")
	ln("lib", "usr/lib")
	ln("usr/lib64/ld.so", "/lib/x86_64-linux-gnu/libz.so.1") // absolute, through /lib
	ln("loop/a", "b")
	ln("loop/b", "a")
	return root
}

func TestTreeRecordsEverySymlinkOnTheWay(t *testing.T) {
	tr := newTree(hostTree(t))
	if err := tr.hostPath("/usr/lib64/ld.so", false); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"/usr/lib64/ld.so":                      "L/lib/x86_64-linux-gnu/libz.so.1",
		"/lib":                                  "Lusr/lib",
		"/usr/lib/x86_64-linux-gnu/libz.so.1":   "Llibz.so.1.2",
		"/usr/lib/x86_64-linux-gnu/libz.so.1.2": "F",
	}
	for p, w := range want {
		e, ok := tr.entries[p]
		got := "missing"
		switch {
		case !ok:
		case e.kind == tar.TypeSymlink:
			got = "L" + e.linkTo
		case e.kind == tar.TypeReg:
			got = "F"
		}
		if got != w {
			t.Errorf("%s: %s, want %s", p, got, w)
		}
	}
	if e := tr.entries["/usr/lib"]; e.kind != tar.TypeDir {
		t.Errorf("/usr/lib is not a directory of the image: %+v", e)
	}
	if err := tr.hostPath("/loop/a", false); err == nil || !strings.Contains(err.Error(), "too many symlinks") {
		t.Errorf("a symlink loop gives %v, want too many symlinks", err)
	}
	if err := tr.hostPath("usr/lib64/ld.so", false); err == nil {
		t.Error("a relative path was accepted")
	}
}

// extract writes the tree's tar into a directory, as a container runtime
// would unpack the layer.
func extract(t *testing.T, tr *tree) string {
	t.Helper()
	var buf bytes.Buffer
	if err := tr.writeTar(&buf); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	r := tar.NewReader(&buf)
	for {
		h, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, os.FileMode(h.Mode))
		case tar.TypeSymlink:
			err = os.Symlink(h.Linkname, p)
		case tar.TypeReg:
			var data []byte
			if data, err = io.ReadAll(r); err == nil {
				err = os.WriteFile(p, data, os.FileMode(h.Mode))
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// The iptables of kube-proxy's and flannel's images runs in a root that
// has only what the tree collected: the loader, every library and the
// extensions it loads.
func TestIptablesRunsFromItsTree(t *testing.T) {
	if testing.Short() || os.Getuid() != 0 {
		t.Skip("needs root (chroot); runs in make test")
	}
	tr := newTree("/")
	base(tr)
	if err := busybox(tr); err != nil {
		t.Fatal(err)
	}
	if err := iptables(tr); err != nil {
		t.Fatal(err)
	}
	root := extract(t, tr)
	for _, args := range [][]string{
		{"/usr/sbin/xtables-nft-multi", "iptables", "--version"},
		{"/usr/sbin/xtables-legacy-multi", "iptables", "--version"},
		{"/usr/sbin/conntrack", "--version"},
		// The wrapper picks a back end and rewrites the links, with the
		// image's own shell, grep and ln.
		{"/usr/sbin/iptables", "--version"},
	} {
		out, err := exec.Command("chroot", append([]string{root}, args...)...).CombinedOutput()
		if err != nil {
			t.Errorf("chroot %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	target, err := os.Readlink(filepath.Join(root, "usr/sbin/iptables"))
	if err != nil || !strings.HasPrefix(target, "xtables-") {
		t.Errorf("after the first run iptables links to %q (%v), want a back end", target, err)
	}
	// A rule with a protocol and a match needs /etc/protocols and the
	// tcp extension from the tree; a network namespace of its own keeps
	// the host's tables out of it.
	out, err := exec.Command("unshare", "--net", "chroot", root, "/bin/sh", "-c",
		"iptables -A INPUT -p tcp --dport 80 -j ACCEPT && iptables -S INPUT").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "-A INPUT -p tcp -m tcp --dport 80 -j ACCEPT") {
		t.Errorf("iptables in the tree cannot write a rule: %v\n%s", err, out)
	}
}
