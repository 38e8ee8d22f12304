package relations

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/cloudtransit/transit/controllers/relations/api/v1alpha1"
)

func service(name, externalName string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Service",
		"metadata": map[string]any{"name": name, "namespace": "shop"},
		"spec":     map[string]any{"ports": []any{map[string]any{"port": int64(5432)}}},
		"status":   map[string]any{"binding": map[string]any{"name": "pg-binding"}},
	}}
	if externalName != "" {
		u.Object["spec"].(map[string]any)["externalName"] = externalName
	}
	return u
}

func exposed() Source {
	return Source{
		ClusterDomain: "cluster.local",
		Secret: func(name string) (*corev1.Secret, error) {
			switch name {
			case "pg":
				return &corev1.Secret{Data: map[string][]byte{"password": []byte("s3cret")}}, nil
			case "pg-binding":
				return &corev1.Secret{Data: map[string][]byte{"username": []byte("app")}}, nil
			case "broken":
				return nil, errors.New("the API server is slow")
			}
			return nil, nil
		},
		ConfigMap: func(name string) (*corev1.ConfigMap, error) {
			if name == "pg" {
				return &corev1.ConfigMap{Data: map[string]string{"db": "orders"}, BinaryData: map[string][]byte{"bin": []byte("x")}}, nil
			}
			return nil, nil
		},
	}
}

func config(values ...v1alpha1.ValueSource) *v1alpha1.ProviderConfig {
	return &v1alpha1.ProviderConfig{ObjectMeta: metav1.ObjectMeta{Name: "pg"}, Spec: v1alpha1.ProviderConfigSpec{Interface: "db", Values: values}}
}

func TestResolve(t *testing.T) {
	iface := &v1alpha1.Interface{ObjectMeta: metav1.ObjectMeta{Name: "db"}, Spec: v1alpha1.InterfaceSpec{Keys: []v1alpha1.InterfaceKey{
		{Name: "host", Required: true, Format: "host"}, {Name: "port", Format: "port"}, {Name: "password", Sensitive: true, Format: "port"},
	}}}
	cases := []struct {
		name     string
		provider *unstructured.Unstructured
		config   *v1alpha1.ProviderConfig
		iface    *v1alpha1.Interface
		want     Values
		problems []string // Problem.String()s
	}{
		{name: "default interface: the Service's DNS name", provider: service("pg", ""),
			want: Values{"db": "pg.shop.svc.cluster.local"}},
		{name: "default interface: an ExternalName Service's external name", provider: service("pg", "db.example.com"),
			want: Values{"db": "db.example.com"}},
		{name: "every source", provider: service("pg", "db.example.com"), config: config(
			v1alpha1.ValueSource{Key: "host", Field: "{.spec.externalName}"},
			v1alpha1.ValueSource{Key: "port", Field: "{.spec.ports[0].port}"},
			v1alpha1.ValueSource{Key: "password", SecretKeyRef: &v1alpha1.KeyRef{Name: "pg", Key: "password"}},
			v1alpha1.ValueSource{Key: "db", ConfigMapKeyRef: &v1alpha1.KeyRef{Name: "pg", Key: "db"}},
			v1alpha1.ValueSource{Key: "bin", ConfigMapKeyRef: &v1alpha1.KeyRef{Name: "pg", Key: "bin"}},
			v1alpha1.ValueSource{Key: "user", BindingKey: "username"}),
			want: Values{"host": "db.example.com", "port": "5432", "password": "s3cret", "db": "orders", "bin": "x", "user": "app"}},
		{name: "every problem at once, none showing a value", provider: service("pg", ""), config: config(
			v1alpha1.ValueSource{Key: "host", Field: "{.spec.externalName}"},
			v1alpha1.ValueSource{Key: "ports", Field: "{.spec.ports[*].port}{.spec.ports[*].port}"},
			v1alpha1.ValueSource{Key: "spec", Field: "{.spec}"},
			v1alpha1.ValueSource{Key: "hidden", SecretKeyRef: &v1alpha1.KeyRef{Name: "internal", Key: "x"}},
			v1alpha1.ValueSource{Key: "nokey", SecretKeyRef: &v1alpha1.KeyRef{Name: "pg", Key: "user"}},
			v1alpha1.ValueSource{Key: "cm", ConfigMapKeyRef: &v1alpha1.KeyRef{Name: "pg", Key: "nope"}},
		), problems: []string{
			"key host: Service pg: {.spec.externalName}: externalName is not found",
			"key ports: Service pg: {.spec.ports[*].port}{.spec.ports[*].port} has 2 values, want one",
			"key spec: Service pg: {.spec} is a map[string]interface {}, not a string, number or boolean",
			"key hidden: Secret internal does not exist or lacks the label relations.transit.io/expose=true",
			"key nokey: Secret pg has no key user",
			"key cm: ConfigMap pg has no key nope",
		}},
		{name: "the Interface: required, formats, sensitive hidden, undeclared keys", provider: service("pg", "not a host!"), iface: iface, config: config(
			v1alpha1.ValueSource{Key: "host", Field: "{.spec.externalName}"},
			v1alpha1.ValueSource{Key: "password", SecretKeyRef: &v1alpha1.KeyRef{Name: "pg", Key: "password"}},
			v1alpha1.ValueSource{Key: "extra", ConfigMapKeyRef: &v1alpha1.KeyRef{Name: "pg", Key: "db"}},
		), problems: []string{
			"key extra: Interface db has no such key",
			`key host: "not a host!" is not a host name or IP address`,
			"key password: not a port (the value is sensitive and not shown)",
		}},
		{name: "a sensitive key from a ConfigMap", provider: service("pg", "db.example.com"), iface: iface, config: config(
			v1alpha1.ValueSource{Key: "host", Field: "{.spec.externalName}"},
			v1alpha1.ValueSource{Key: "password", ConfigMapKeyRef: &v1alpha1.KeyRef{Name: "pg", Key: "bin"}},
		), problems: []string{
			"key password: not a port (the value is sensitive and not shown)",
			"key password: sensitive in Interface db, but ProviderConfig pg takes it from ConfigMap pg: keep it in a Secret (secretKeyRef)",
		}},
		{name: "a required key missing", provider: service("pg", "db.example.com"), iface: iface,
			config:   config(v1alpha1.ValueSource{Key: "port", Field: "{.spec.ports[0].port}"}),
			problems: []string{"key host: required by Interface db, no value"}},
		{name: "a Secret provider without a ProviderConfig", provider: &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "creds"}}},
			problems: []string{"Secret creds has no DNS name: it shares values only through a ProviderConfig (relations.transit.io/config: db=<name>)"}},
		{name: "a Deployment provider: the Service of its name", provider: &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": "api", "namespace": "shop"}}},
			want: Values{"db": "api.shop.svc.cluster.local"}},
		{name: "a provisioned service without a ProviderConfig", provider: &unstructured.Unstructured{Object: map[string]any{"apiVersion": "example.com/v1", "kind": "Service", "metadata": map[string]any{"name": "pg"}}},
			problems: []string{"Service pg has no DNS name: it shares values only through a ProviderConfig (relations.transit.io/config: db=<name>)"}},
		{name: "no binding", provider: &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Service", "metadata": map[string]any{"name": "x"}}},
			config: config(v1alpha1.ValueSource{Key: "user", BindingKey: "username"}), problems: []string{"key user: Service x has no .status.binding.name"}},
	}
	for _, c := range cases {
		src := exposed()
		src.Provider, src.Config = c.provider, c.config
		got, problems, err := Resolve("db", src, c.iface)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		var ps []string
		for _, p := range problems {
			ps = append(ps, p.String())
			if strings.Contains(p.Detail, "s3cret") {
				t.Errorf("%s: a problem shows a secret value: %s", c.name, p)
			}
			if p.Interface != (c.iface != nil) {
				t.Errorf("%s: %s: of the Interface %v, want %v", c.name, p, p.Interface, c.iface != nil)
			}
		}
		if !reflect.DeepEqual(ps, c.problems) || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s:\n got %v %q\nwant %v %q", c.name, got, ps, c.want, c.problems)
		}
	}

	// A failed lookup is an error to retry, not a problem.
	src := exposed()
	src.Provider, src.Config = service("pg", ""), config(v1alpha1.ValueSource{Key: "x", SecretKeyRef: &v1alpha1.KeyRef{Name: "broken", Key: "x"}})
	if _, _, err := Resolve("db", src, nil); err == nil {
		t.Error("a failed Secret lookup resolved")
	}
	// Over a Secret's 1 MiB.
	src.Provider, src.Config = service("pg", strings.Repeat("a", MaxValuesSize)), nil
	if _, problems, _ := Resolve("db", src, nil); len(problems) != 1 || problems[0].Reason != "TooLarge" {
		t.Errorf("1 MiB of values: %v", problems)
	}
}

func TestHash(t *testing.T) {
	a := Values{"host": "db", "port": "5432"}
	if a.Hash() != (Values{"port": "5432", "host": "db"}).Hash() {
		t.Error("the hash depends on the map's order")
	}
	for _, b := range []Values{{"host": "db", "port": "5433"}, {"host": "db"}, {"hostp": "ort5432", "": "db"}, {"host": "db5", "port": "432"}} {
		if a.Hash() == b.Hash() {
			t.Errorf("%v and %v hash alike", a, b)
		}
	}
}

func TestCheckFormat(t *testing.T) {
	good := map[string][]string{
		"host": {"db", "db.example.com", "10.0.0.1", "::1", "db.example.com."}, "port": {"1", "65535"},
		"hostport": {"db:5432", "[::1]:80"}, "uri": {"postgres://db:5432/x", "mailto:a@b"}, "string": {"", "anything"},
	}
	bad := map[string][]string{
		"host": {"", "a b", "-x"}, "port": {"0", "65536", "x", "80 "}, "hostport": {"db", "db:x", ":80"}, "uri": {"://x", "/rel", "x"},
	}
	for f, vs := range good {
		for _, v := range vs {
			if err := checkFormat(f, v); err != nil {
				t.Errorf("%s %q: %v", f, v, err)
			}
		}
	}
	for f, vs := range bad {
		for _, v := range vs {
			if checkFormat(f, v) == nil {
				t.Errorf("%s %q passed", f, v)
			}
		}
	}
}
