package transit

import (
	"context"

	"github.com/cloudtransit/transit/control"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/platforms/kubernetes"
	"github.com/cloudtransit/transit/provider"
)

// StatusOptions say how Status looks.
type StatusOptions struct {
	// Refresh asks the clouds and the platform (needs Observe or Change
	// access); without it Status is resources.json as saved.
	Refresh bool
}

// Status is the cluster as the clouds and the platform report it, or as
// resources.json last recorded it.
type Status struct {
	Cluster districts.Cluster
	// State is the current state, in the format of resources.json.
	State districts.Resources
	// Refreshed says the clouds and the platform were asked.
	Refreshed bool
	// Notes are what the refresh found: adopted and forgotten nodes,
	// foreign resources.
	Notes []string
	// PlatformError says why the platform could not be asked (no master
	// answered); the nodes' phases are then those resources.json last
	// recorded. Empty when it answered.
	PlatformError string
	// PlatformVersion is the version the platform's control plane
	// reports; empty when it was not asked or cannot say.
	PlatformVersion string
	// Addons say whether each addon serves (the platform's own first);
	// empty when the platform was not asked or cannot say.
	Addons []provider.AddonStatus
	// Bill is what the live machines cost an hour; nil when no flavor
	// is priced.
	Bill *control.Bill
}

// Status reports the cluster's nodes and groups. It takes no lock and
// writes nothing: with Refresh, what the clouds and the platform say stays
// in memory, and an unreachable platform is no error (PlatformError says
// so). An error matches ErrRefresh, or ErrConfig when the platform driver
// could not be built.
func (s *Session) Status(ctx context.Context, o StatusOptions) (Status, error) {
	need := ReadState
	if o.Refresh {
		need = Observe
	}
	if err := s.use(need, "status"); err != nil {
		return Status{}, err
	}
	prices := s.cfg.PriceTable()
	st := Status{Cluster: s.cfg.Cluster, State: s.state, Refreshed: o.Refresh, Bill: control.StateBill(s.state, prices)}
	if !o.Refresh {
		return st, nil
	}
	opts, err := s.planOptions(ctx, PlanOptions{Refresh: true})
	if err != nil {
		return Status{}, err
	}
	opts.SaveChanged = nil
	obs, err := control.Refresh(ctx, opts)
	if err != nil {
		return Status{}, atStage(ErrRefresh, err)
	}
	st.State, st.Notes, st.PlatformError = obs.State, obs.Notes, obs.PlatformError
	st.Bill = control.StateBill(obs.State, prices)
	if v, ok := opts.Platform.(provider.Versioner); ok && obs.PlatformError == "" && len(obs.State.Nodes) > 0 {
		// The version is a courtesy: a platform that cannot say leaves
		// it empty.
		if version, err := v.Version(ctx); err == nil {
			st.PlatformVersion = version
		}
	}
	if r, ok := opts.Platform.(provider.AddonReporter); ok && obs.PlatformError == "" && len(obs.State.Nodes) > 0 {
		addons, err := r.AddonStatus(ctx, s.cfg.Cluster.Addons)
		if err != nil {
			st.Notes = append(st.Notes, "the addons could not be asked: "+err.Error())
		}
		st.Addons = addons
	}
	return st, nil
}

// Kubeconfig is a Kubernetes cluster's admin kubeconfig for the operator's
// machine.
type Kubeconfig struct {
	// Context is the name of its one cluster and context: the cluster's
	// id.
	Context string
	// Data is the kubeconfig file (credentials included).
	Data []byte
	// Server is the API server's URL, and Master the master whose address
	// it names (empty for cluster.json's control_plane_endpoint).
	Server string
	Master string
}

// Kubeconfig exports a Kubernetes cluster's admin kubeconfig from the
// admin file kept beside resources.json, pointing at control_plane_endpoint
// or at a joined master. It needs no lock, no cloud and no SSH. A cluster
// of another platform is ErrNotKubernetes.
func (s *Session) Kubeconfig(context.Context) (Kubeconfig, error) {
	if err := s.use(ReadState, "kubeconfig"); err != nil {
		return Kubeconfig{}, err
	}
	data, srv, err := kubernetes.ExportKubeconfig(kubernetes.KubeconfigOptions{
		Cluster:   s.cfg.Cluster,
		State:     s.state,
		StateFile: s.statePath(),
	})
	if err != nil {
		return Kubeconfig{}, err
	}
	return Kubeconfig{Context: s.cfg.Cluster.ID, Data: data, Server: srv.URL, Master: srv.Master}, nil
}
