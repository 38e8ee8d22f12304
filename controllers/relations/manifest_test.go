package relations

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// TestAddonWebhookMatches: the webhook transit installs (the addon
// manifest) is the one the envtest tests register.
func TestAddonWebhookMatches(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "platforms", "kubernetes", "addons", "relations.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// The template's values do not matter here.
	data = bytes.ReplaceAll(data, []byte("{{ .Replicas }}"), []byte("1"))
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var installed *admissionregistrationv1.MutatingWebhookConfiguration
	for {
		var cfg admissionregistrationv1.MutatingWebhookConfiguration
		if err := dec.Decode(&cfg); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			continue // another kind, or a templated value
		}
		if cfg.Kind == "MutatingWebhookConfiguration" {
			installed = &cfg
		}
	}
	if installed == nil {
		t.Fatal("the addon manifest has no MutatingWebhookConfiguration")
	}
	want := MutatingWebhookConfiguration("transit-relations", installed.Webhooks[0].ClientConfig)
	if installed.Name != want.Name || !equality.Semantic.DeepEqual(installed.Webhooks, want.Webhooks) {
		t.Errorf("the addon's webhook:\n%+v\nwant:\n%+v", installed.Webhooks, want.Webhooks)
	}
	if s := installed.Webhooks[0].ClientConfig.Service; s == nil || s.Path == nil || *s.Path != WebhookPath {
		t.Errorf("the addon's webhook is not served at %s: %+v", WebhookPath, installed.Webhooks[0].ClientConfig)
	}
}
