package cli

import (
	"github.com/spf13/cobra"
)

// NewMeshCommand builds `transit mesh`, the node mesh's own commands.
func NewMeshCommand(deps Deps, g *GlobalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "mesh",
		Short: "Act on the encrypted node mesh (network.mesh wireguard)",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newMeshRotateCommand(deps, g))
	return cmd
}

func newMeshRotateCommand(deps Deps, g *GlobalFlags) *cobra.Command {
	f := &applyFlags{}
	cmd := &cobra.Command{
		Use:   "rotate [NODE...]",
		Short: "Give nodes new mesh keys now (every node's without NODE)",
		Long: `Rotate gives the named nodes (every node on the mesh without NODE) a new
WireGuard key now, whatever their keys' age: after an image or a snapshot
was made of a node's disk, or when a key may have leaked. It is an apply
that also rotates these keys: it takes the state lock, shows the plan
(with whatever else cluster.json asks for), asks for confirmation (pass
--auto-approve where stdin is no terminal) and runs the loop.

Keys rotate one node at a time: the node makes its next key pair (the
private key never leaves it) and runs with it, then every node is given
its peers with the new key and handshakes with it at once. Traffic to and
from that node pauses for about as long as that takes (under a second on
one machine); connections survive it. A node that does not run now (its
machine stopped) blocks the run (exit 3) and rotates at the next run that
finds it running.

apply rotates keys older than network.key_max_age (default 30d) by
itself, the same way.

Exit codes: as apply's; a NODE that is not a node of the cluster on the
mesh is refused (exit 1, usage) before anything changes.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			ch := applyChange
			ch.rotate, ch.rotateAll = args, len(args) == 0
			return runChange(cmd.Context(), deps, g, f, ch)
		},
	}
	f.register(cmd.Flags())
	return cmd
}
