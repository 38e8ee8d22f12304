package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cloudtransit/transit/hostclean"
)

// found is what the fake finder finds, in Find's order.
var found = []hostclean.Item{
	{Kind: hostclean.KindRecords, Name: "/var/lib/transit/e2e-swarm", Detail: "1 district, 2 nodes"},
	{Kind: hostclean.KindChain, Name: "filter TRANSIT-0123456789", Detail: "jumped to from FORWARD"},
	{Kind: hostclean.KindLink, Name: "tb0123abcd", Detail: "a district's bridge"},
	{Kind: hostclean.KindLink, Name: "tv0123456789ab", Detail: "a local node's veth"},
}

// fake records what the command asked of the library.
type fake struct {
	items     []hostclean.Item
	findErr   error
	removeErr error
	removed   [][]hostclean.Item
}

func (f *fake) cleaner() cleaner {
	return cleaner{
		find: func(context.Context) ([]hostclean.Item, error) { return f.items, f.findErr },
		remove: func(_ context.Context, items []hostclean.Item) error {
			f.removed = append(f.removed, items)
			return f.removeErr
		},
	}
}

func TestRun(t *testing.T) {
	t.Parallel()
	stayed := &hostclean.RemoveError{Left: found[2:3], Errs: []error{errors.New("ip link del tb0123abcd: busy")}}
	for _, c := range []struct {
		name      string
		args      []string
		stdin     string
		items     []hostclean.Item
		findErr   error
		removeErr error
		code      int
		removes   bool
		out       []string // in stdout, in this order
		notOut    []string
		errOut    []string // in stderr
	}{
		{name: "nothing found", items: nil, code: 0,
			out: []string{"Nothing transit made is left on this host."}, notOut: []string{"Remove all"}},
		{name: "answer no", items: found, stdin: "n\n", code: 0,
			out: []string{"Records (purged with everything they name) (1):\n  /var/lib/transit/e2e-swarm (1 district, 2 nodes)\n",
				"iptables chains (and the rules that jump to them) (1):\n  filter TRANSIT-0123456789 (jumped to from FORWARD)\n",
				"Links (2):\n  tb0123abcd (a district's bridge)\n  tv0123456789ab (a local node's veth)\n",
				"Remove all of this? [y/N] ", "Nothing removed."}},
		{name: "no answer", items: found, stdin: "", code: 0, out: []string{"Remove all of this? [y/N] ", "Nothing removed."}},
		{name: "enter alone", items: found, stdin: "\n", code: 0, out: []string{"Nothing removed."}},
		{name: "something else", items: found, stdin: "yep\n", code: 0, out: []string{"Nothing removed."}},
		{name: "y", items: found, stdin: "y\n", code: 0, removes: true, out: []string{"Remove all of this? [y/N] ", "Removed all 4."}},
		{name: "yes", items: found, stdin: " Yes \n", code: 0, removes: true, out: []string{"Removed all 4."}},
		{name: "yes without a newline", items: found, stdin: "yes", code: 0, removes: true},
		{name: "-y asks nothing", args: []string{"-y"}, items: found, code: 0, removes: true,
			out: []string{"Links (2):", "Removed all 4."}, notOut: []string{"Remove all of this?"}},
		{name: "what stayed is named", args: []string{"-y"}, items: found, removeErr: stayed, code: 1, removes: true,
			notOut: []string{"Removed all"},
			errOut: []string{"1 item stayed:\n  link tb0123abcd (a district's bridge)", "ip link del tb0123abcd: busy"}},
		{name: "could not look, found nothing", items: nil, findErr: errors.New("iptables: gone"), code: 1,
			notOut: []string{"Nothing transit made"}, errOut: []string{"could not look everywhere: iptables: gone"}},
		{name: "could not look everywhere, removes what it found", args: []string{"-y"}, items: found,
			findErr: errors.New("iptables: gone"), code: 1, removes: true, errOut: []string{"iptables: gone"}},
		{name: "bad flag", args: []string{"-x"}, items: found, code: 2},
		{name: "stray argument", args: []string{"all"}, items: found, code: 2, errOut: []string{"usage: transit-clean-host [-y]"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := &fake{items: c.items, findErr: c.findErr, removeErr: c.removeErr}
			var stdout, stderr bytes.Buffer
			code := run(t.Context(), c.args, strings.NewReader(c.stdin), &stdout, &stderr, f.cleaner())
			if code != c.code {
				t.Errorf("exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", code, c.code, stdout.String(), stderr.String())
			}
			var want [][]hostclean.Item
			if c.removes {
				want = [][]hostclean.Item{c.items}
			}
			if diff := cmp.Diff(want, f.removed, cmp.Comparer(func(a, b hostclean.Item) bool { return a.String() == b.String() && a.Kind == b.Kind })); diff != "" {
				t.Errorf("removed (-want +got):\n%s", diff)
			}
			rest := stdout.String()
			for _, s := range c.out {
				i := strings.Index(rest, s)
				if i < 0 {
					t.Errorf("stdout lacks %q (in order)\n%s", s, stdout.String())
					continue
				}
				rest = rest[i+len(s):]
			}
			for _, s := range c.notOut {
				if strings.Contains(stdout.String(), s) {
					t.Errorf("stdout has %q\n%s", s, stdout.String())
				}
			}
			for _, s := range c.errOut {
				if !strings.Contains(stderr.String(), s) {
					t.Errorf("stderr lacks %q\n%s", s, stderr.String())
				}
			}
		})
	}
}
