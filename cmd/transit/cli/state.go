package cli

import (
	"fmt"

	"github.com/spf13/cobra"

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
	cmd.AddCommand(newStateKeygenCommand(deps))
	return cmd
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
