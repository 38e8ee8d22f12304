package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/cloudtransit/transit"
	"github.com/cloudtransit/transit/platforms/kubernetes/kubeconfig"
)

type kubeconfigFlags struct {
	merge bool
}

// NewKubeconfigCommand builds `transit kubeconfig`.
func NewKubeconfigCommand(deps Deps, g *GlobalFlags) *cobra.Command {
	f := &kubeconfigFlags{}
	cmd := &cobra.Command{
		Use:   "kubeconfig",
		Short: "Print the Kubernetes cluster's admin kubeconfig, or merge it into yours",
		Long: `Kubeconfig prints a kubeconfig for the cluster's administrator: the admin
credentials kubeadm wrote when it initialised the first master (kept beside
resources.json, never in it), with one cluster, one context named after the
cluster and the user <cluster>-admin. It reads cluster.json, resources.json
and that file only: no lock, no cloud, no SSH.

The server is control_plane_endpoint when cluster.json sets it. Otherwise the
endpoint is a name only the nodes resolve, so the kubeconfig points at a
joined master's address on port 6443 (its public address, else its private
one) and checks the server's certificate against the endpoint's name
(tls-server-name): this machine must reach that master on port 6443.

  kubectl --kubeconfig <(transit kubeconfig) get nodes

With --merge it adds the cluster, user and context to the first file of
$KUBECONFIG, or ~/.kube/config, replacing entries of the same names and
keeping every other one, makes the context current, and writes the file
with mode 0600.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			kc, err := runKubeconfig(cmd.Context(), deps, g)
			if err != nil {
				return err
			}
			if !f.merge {
				_, err := deps.Out.Write(kc.Data)
				return err
			}
			path, err := kubeconfig.MergePath(g.env.getenv)
			if err != nil {
				return err
			}
			if err := kubeconfig.WriteMerged(cmd.Context(), path, kc.Data); err != nil {
				return err
			}
			return writeMerged(deps.Out, path, kc)
		},
	}
	cmd.Flags().BoolVar(&f.merge, "merge", false, "merge into the first file of $KUBECONFIG or ~/.kube/config and make the context current, instead of printing")
	return cmd
}

// runKubeconfig reads the state, as status --refresh=false does (no lock,
// no driver), and exports the cluster's kubeconfig.
func runKubeconfig(ctx context.Context, deps Deps, g *GlobalFlags) (_ transit.Kubeconfig, err error) {
	o, err := g.sessionOptions(deps, transit.ReadState, "transit kubeconfig")
	if err != nil {
		return transit.Kubeconfig{}, err
	}
	s, err := transit.Open(ctx, o)
	if err != nil {
		return transit.Kubeconfig{}, err
	}
	defer closeInto(s, &err)
	kc, err := s.Kubeconfig(ctx)
	if errors.Is(err, transit.ErrNotKubernetes) {
		return transit.Kubeconfig{}, withKind(kindUsage, err)
	}
	return kc, err
}

// writeMerged says which file and context --merge wrote.
func writeMerged(w io.Writer, path string, kc transit.Kubeconfig) error {
	via := ""
	if kc.Master != "" {
		via = ", master " + kc.Master
	}
	_, err := fmt.Fprintf(w, "Wrote context %q to %s and made it current (server %s%s).\n", kc.Context, path, kc.Server, via)
	return err
}
