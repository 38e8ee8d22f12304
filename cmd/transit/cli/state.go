package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/cloudtransit/transit"
	"github.com/cloudtransit/transit/statestore/seal"
)

// NewStateCommand builds `transit state`: the state store's own commands.
func NewStateCommand(deps Deps, g *GlobalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "state",
		Short: "Work with the state store: keys, versions, moves",
		Long: `State works with where the cluster's state lives (--state, TRANSIT_STATE): a
path, or a remote store such as s3://bucket/prefix that CI runners and team
members share.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newStateKeygenCommand(deps), newStateListCommand(deps, g), newStatePullCommand(deps, g),
		newStatePushCommand(deps, g), newStateMigrateCommand(deps, g))
	return cmd
}

// stateOptions are a state command's session options: no driver.
func stateOptions(deps Deps, g *GlobalFlags, command string) (transit.Options, error) {
	return g.sessionOptions(deps, transit.ReadState, command)
}

func newStateListCommand(deps Deps, g *GlobalFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the state and the past states the store keeps",
		Long: `List prints the state's serial and those of the past states the store keeps,
newest first: the state as each run that changed the cluster left it (the last
20). transit state pull --serial N prints one.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o, err := stateOptions(deps, g, "transit state list")
			if err != nil {
				return err
			}
			past, err := transit.StateHistory(cmd.Context(), o)
			if err != nil {
				return err
			}
			if asJSON {
				if past == nil {
					past = []transit.PastState{}
				}
				return writeJSON(deps.Out, past)
			}
			for _, p := range past {
				line := fmt.Sprintf("serial %d", p.Serial)
				if p.Current {
					line += "  (current)"
				} else {
					line += fmt.Sprintf("  %s  %d bytes", p.Modified.Format(time.RFC3339), p.Size)
				}
				if _, err := fmt.Fprintln(deps.Out, line); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the list as JSON")
	return cmd
}

func newStatePullCommand(deps Deps, g *GlobalFlags) *cobra.Command {
	var serial int64
	cmd := &cobra.Command{
		Use:   "pull",
		Short: "Print the state (or a past one) as resources.json",
		Long: `Pull prints the state in resources.json's format: the current one, or with
--serial a past one the store keeps (transit state list). It takes no lock and
writes nothing; the secrets stay in the store.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o, err := stateOptions(deps, g, "transit state pull")
			if err != nil {
				return err
			}
			data, err := transit.PullState(cmd.Context(), o, serial)
			if err != nil {
				return err
			}
			_, err = deps.Out.Write(data)
			return err
		},
	}
	cmd.Flags().Int64Var(&serial, "serial", 0, "a past state's serial (default: the current state)")
	return cmd
}

func newStatePushCommand(deps Deps, g *GlobalFlags) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "push FILE",
		Short: "Replace the state with FILE (- for stdin)",
		Long: `Push replaces the state with FILE (resources.json's format; - reads stdin),
holding the state lock. It refuses a state of another cluster always, and one
of another lineage (another cluster of the same name) or with a serial not
above the store's unless --force, which restores an older state on purpose
(it is written with the next serial). The replaced state stays among the past
states (transit state list).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var data []byte
			var err error
			if args[0] == "-" {
				data, err = io.ReadAll(deps.In)
			} else {
				data, err = os.ReadFile(args[0])
			}
			if err != nil {
				return err
			}
			o, err := stateOptions(deps, g, "transit state push")
			if err != nil {
				return err
			}
			serial, err := transit.PushState(cmd.Context(), o, data, force)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(deps.Out, "state pushed to %s as serial %d\n", g.State, serial)
			return err
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "push an older state, or one of another lineage")
	return cmd
}

func newStateMigrateCommand(deps Deps, g *GlobalFlags) *cobra.Command {
	var to string
	var force bool
	cmd := &cobra.Command{
		Use:   "migrate --to LOCATION",
		Short: "Move the cluster's state, keys and pins to another store",
		Long: `Migrate copies the state, the cluster's SSH key pair, the host-key pins and
the admin kubeconfig from --state to --to (a path, or a URL such as
s3://bucket/prefix?endpoint=…), holding the lock at both ends. A remote store
gets the secrets sealed with TRANSIT_STATE_KEY (or the state_key of the URL's
credential). Nothing is deleted at the source: run with --state LOCATION from
then on, and remove the old files once it works. A destination that holds a
state already is refused unless --force.

  transit state migrate --to 's3://ci-state/prod?credential_id=state'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if to == "" {
				return errors.New("--to: name the store to move the state to")
			}
			o, err := stateOptions(deps, g, "transit state migrate")
			if err != nil {
				return err
			}
			if err := transit.MigrateState(cmd.Context(), o, to, force); err != nil {
				return err
			}
			_, err = fmt.Fprintf(deps.Out, "state of %s copied to %s; use --state %s from now on\n", g.State, to, to)
			return err
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "the store to move the state to: a path or a URL")
	cmd.Flags().BoolVar(&force, "force", false, "replace a state the destination holds")
	return cmd
}

// NewForceUnlockCommand builds `transit force-unlock`.
func NewForceUnlockCommand(deps Deps, g *GlobalFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "force-unlock LOCK_ID",
		Short: "Free a remote state's lock whose holder died",
		Long: `Force-unlock frees the lock of a remote state store whose holder died before
its lease ran out (a lock is taken over anyway once its lease expired, 2
minutes without renewal). The locked run's error names the lock's ID; a lock
with another ID is left alone. A path's lock is a file lock that the kernel
frees when its holder ends: it is refused, naming the holder.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o, err := stateOptions(deps, g, "transit force-unlock")
			if err != nil {
				return err
			}
			if err := transit.ForceUnlock(cmd.Context(), o, args[0]); err != nil {
				return err
			}
			_, err = fmt.Fprintf(deps.Out, "state lock %s of %s freed\n", args[0], g.State)
			return err
		},
	}
}

func newStateKeygenCommand(deps Deps) *cobra.Command {
	return &cobra.Command{
		Use:   "keygen",
		Short: "Print a new state key (an age identity) for a remote state's secrets",
		Long: `Keygen prints a new key for TRANSIT_STATE_KEY: a remote state store keeps the
cluster's SSH private key and admin kubeconfig sealed with it, so that read
access to the bucket is not root on every node. Keep it in your CI's secrets
(or as state_key in credentials.json); every run of the cluster needs the
same key, and a lost key means the cluster's SSH key is lost with it. The
key goes to stdout, its public half to stderr:

  export TRANSIT_STATE_KEY=$(transit state keygen)`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			k, text, err := seal.Generate()
			if err != nil {
				return err
			}
			if _, err := fmt.Fprintln(deps.Out, text); err != nil {
				return err
			}
			_, err = fmt.Fprintf(deps.Err, "public key: %s\n", k.Recipient())
			return err
		},
	}
}
