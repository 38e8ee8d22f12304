package kubernetes

import (
	"context"
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/yaml"

	"github.com/cloudtransit/transit/districts"
)

// kubeadmConfigMap holds the cluster's ClusterConfiguration, which
// `kubeadm join --control-plane` reads to make the joining master's API
// server certificate.
const kubeadmConfigMap = "kubeadm-config"

// addCertSANs puts a master's addresses (public, private, mesh) among
// the API server certificate's extra names in the cluster's
// ClusterConfiguration before it joins: kubeadm writes into the joining
// master's certificate the names kept there, which the first master's
// init made its own. Without, a further master's certificate names only
// its advertise address, and a client reaching it at its public address
// is refused.
func addCertSANs(ctx context.Context, a *api, n districts.Node) error {
	want := append(n.Addresses(), n.MeshIP)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm, err := a.c.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, kubeadmConfigMap, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("read the cluster's kubeadm configuration: %w", err)
		}
		var cfg map[string]any
		if err := yaml.Unmarshal([]byte(cm.Data["ClusterConfiguration"]), &cfg); err != nil {
			return fmt.Errorf("the cluster's ClusterConfiguration (kube-system/%s) does not parse: %w", kubeadmConfigMap, err)
		}
		if cfg == nil {
			return fmt.Errorf("the cluster's ClusterConfiguration (kube-system/%s) does not parse: it is empty", kubeadmConfigMap)
		}
		server, _ := cfg["apiServer"].(map[string]any)
		if server == nil {
			server = map[string]any{}
		}
		var sans []string
		have, _ := server["certSANs"].([]any)
		for _, s := range have {
			if str, ok := s.(string); ok {
				sans = append(sans, str)
			}
		}
		before := len(sans)
		for _, w := range want {
			if w != "" && !slices.Contains(sans, w) {
				sans = append(sans, w)
			}
		}
		if len(sans) == before {
			return nil
		}
		server["certSANs"] = sans
		cfg["apiServer"] = server
		data, err := yaml.Marshal(cfg)
		if err != nil {
			return err
		}
		cm.Data["ClusterConfiguration"] = string(data)
		_, err = a.c.CoreV1().ConfigMaps(metav1.NamespaceSystem).Update(ctx, cm, metav1.UpdateOptions{})
		return err
	})
}
