// Command transit provisions elastic container platforms across clouds.
package main

import (
	"context"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/term"

	"github.com/cloudtransit/transit"
	"github.com/cloudtransit/transit/cmd/transit/cli"
)

func main() {
	// The first SIGINT or SIGTERM cancels ctx (the run saves its state and
	// exits 130); a second one kills at once.
	ctx, stop := cli.NotifyContext(context.Background(), os.Stderr, syscall.SIGINT, syscall.SIGTERM)
	root := cli.NewRootCommand(cli.Deps{
		In:  os.Stdin,
		Out: os.Stdout,
		Err: os.Stderr,
		IsTerminal: func(s any) bool {
			f, ok := s.(*os.File)
			return ok && term.IsTerminal(int(f.Fd()))
		},
		// The environment is read once, by the root command, into the
		// options of flags, the session and the drivers.
		LookupEnv: os.LookupEnv,
		Drivers:   transit.BuiltinDrivers,
		Stores:    transit.BuiltinStores(),
	})
	root.SetArgs(cli.Args(os.Args[1:]))
	err := root.ExecuteContext(ctx)
	stop()
	if err != nil && !cli.Silent(err) {
		fmt.Fprintf(os.Stderr, "Error: %v\n", err)
	}
	os.Exit(cli.ExitCode(err))
}
