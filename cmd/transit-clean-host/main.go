// Command transit-clean-host removes everything transit made on this host
// (package hostclean): it lists what it found, asks, and removes it.
// `make clean-host` runs it; -y removes without asking.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/cloudtransit/transit/hostclean"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "transit-clean-host: needs root (network namespaces, iptables, cgroups): run sudo make clean-host")
		os.Exit(1)
	}
	opts := hostclean.Options{Log: slog.New(slog.NewTextHandler(os.Stderr, nil))}
	c := cleaner{
		find:   func(ctx context.Context) ([]hostclean.Item, error) { return hostclean.Find(ctx, opts) },
		remove: func(ctx context.Context, items []hostclean.Item) error { return hostclean.Remove(ctx, opts, items) },
	}
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, c)
	stop()
	os.Exit(code)
}

// cleaner is the library's two steps, which tests replace.
type cleaner struct {
	find   func(ctx context.Context) ([]hostclean.Item, error)
	remove func(ctx context.Context, items []hostclean.Item) error
}

// run is the command: flags, find, list, ask, remove. It returns the exit
// code: 0 when nothing is left (or nothing was to be removed), 1 when
// something stayed or could not be looked at, 2 for bad usage.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, c cleaner) int {
	flags := flag.NewFlagSet("transit-clean-host", flag.ContinueOnError)
	flags.SetOutput(stderr)
	yes := flags.Bool("y", false, "remove without asking")
	flags.Usage = func() {
		fmt.Fprintln(stderr, "usage: transit-clean-host [-y]\n\nRemoves every network namespace, bridge, veth, iptables chain and rule,\n"+
			"cgroup, process and record transit made on this host, after asking.")
		flags.PrintDefaults()
	}
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if flags.NArg() > 0 {
		flags.Usage()
		return 2
	}

	items, findErr := c.find(ctx)
	if findErr != nil {
		fmt.Fprintf(stderr, "transit-clean-host: could not look everywhere: %v\n", findErr)
	}
	if len(items) == 0 {
		if findErr != nil {
			return 1
		}
		fmt.Fprintln(stdout, "Nothing transit made is left on this host.")
		return 0
	}
	list(stdout, items)
	if !*yes && !confirm(stdin, stdout) {
		fmt.Fprintln(stdout, "Nothing removed.")
		return 0
	}
	if err := c.remove(ctx, items); err != nil {
		fmt.Fprintf(stderr, "transit-clean-host: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "Removed all %d.\n", len(items))
	if findErr != nil {
		return 1
	}
	return 0
}

// heading names a kind's group in the listing.
func heading(k hostclean.Kind) string {
	switch k {
	case hostclean.KindRecords:
		return "Records (purged with everything they name)"
	case hostclean.KindProcess:
		return "Processes"
	case hostclean.KindRule:
		return "iptables rules"
	case hostclean.KindChain:
		return "iptables chains (and the rules that jump to them)"
	case hostclean.KindLink:
		return "Links"
	case hostclean.KindNetns:
		return "Network namespaces"
	case hostclean.KindCgroup:
		return "Cgroups"
	}
	return string(k)
}

// list prints the items grouped by kind.
func list(w io.Writer, items []hostclean.Item) {
	fmt.Fprintln(w, "transit made these on this host:")
	for _, k := range hostclean.Kinds() {
		var lines []string
		for _, it := range items {
			if it.Kind == k {
				lines = append(lines, "  "+it.String())
			}
		}
		if len(lines) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s (%d):\n%s\n", heading(k), len(lines), strings.Join(lines, "\n"))
	}
	fmt.Fprintln(w)
}

// confirm asks and says whether the answer is y or yes; no answer (end
// of input) is no.
func confirm(stdin io.Reader, stdout io.Writer) bool {
	fmt.Fprint(stdout, "Remove all of this? [y/N] ")
	answer, err := bufio.NewReader(stdin).ReadString('\n')
	if err != nil && answer == "" {
		fmt.Fprintln(stdout)
		return false
	}
	switch strings.ToLower(strings.TrimSpace(answer)) {
	case "y", "yes":
		return true
	}
	return false
}
