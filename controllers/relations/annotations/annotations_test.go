package annotations

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestParseConsumer(t *testing.T) {
	ok := []struct {
		name string
		ann  map[string]string
		want ConsumerAnnotations
	}{
		{"by name, in the consumer's namespace",
			map[string]string{AnnotationConsumes: "db", AnnotationRelationship: "pg"},
			ConsumerAnnotations{Interfaces: []string{"db"}, Requests: []Request{{Namespace: "shop", Name: "pg"}}}},
		{"by kind, with and without a namespace",
			map[string]string{AnnotationConsumes: "db", AnnotationRelationship: "Database.postgres.example.com/pg, infra/Service/redis, Deployment.apps/api"},
			ConsumerAnnotations{Interfaces: []string{"db"}, Requests: []Request{
				{Namespace: "shop", Name: "pg", Kind: "Database.postgres.example.com"},
				{Namespace: "infra", Name: "redis", Kind: "Service"},
				{Namespace: "shop", Name: "api", Kind: "Deployment.apps"}}}},
		{"spaces, another namespace, configs and pins",
			map[string]string{AnnotationConsumes: " db , cache", AnnotationRelationship: "pg, infra/redis",
				AnnotationConfig: "db=pg-env, cache = redis-files", AnnotationPin: "db=3"},
			ConsumerAnnotations{Interfaces: []string{"db", "cache"}, Requests: []Request{{Namespace: "shop", Name: "pg"}, {Namespace: "infra", Name: "redis"}},
				Configs: map[string]string{"db": "pg-env", "cache": "redis-files"}, Pins: map[string]int64{"db": 3}}},
	}
	for _, c := range ok {
		got, err := ParseConsumer("shop", c.ann)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: got %+v, %v; want %+v", c.name, got, err, c.want)
		}
	}
	bad := []struct {
		ann  map[string]string
		want string
	}{
		{map[string]string{AnnotationConsumes: "db"}, "annotation relations.transit.io/relationship: missing"},
		{map[string]string{AnnotationConsumes: "", AnnotationRelationship: "pg"}, "annotation relations.transit.io/consumes: empty"},
		{map[string]string{AnnotationConsumes: "db,,cache", AnnotationRelationship: "pg"}, "consumes: entry 2 is empty"},
		{map[string]string{AnnotationConsumes: "DB", AnnotationRelationship: "pg"}, `consumes: entry "DB": an interface name is a DNS label`},
		{map[string]string{AnnotationConsumes: "db,db", AnnotationRelationship: "pg"}, `consumes: entry "db": given twice`},
		{map[string]string{AnnotationConsumes: "db", AnnotationRelationship: "pg, shop/pg"}, `relationship: entry "shop/pg": named twice`},
		{map[string]string{AnnotationConsumes: "db", AnnotationRelationship: "a/b/c"}, `relationship: entry "a/b/c": kind: b is not a Kind`},
		{map[string]string{AnnotationConsumes: "db", AnnotationRelationship: "a/B/c/d"}, `relationship: entry "a/B/c/d": want name, namespace/name`},
		{map[string]string{AnnotationConsumes: "db", AnnotationRelationship: "infra.io/pg"}, `relationship: entry "infra.io/pg": namespace:`},
		{map[string]string{AnnotationConsumes: "db", AnnotationRelationship: "Data_base/pg"}, `relationship: entry "Data_base/pg": kind:`},
		{map[string]string{AnnotationConsumes: "db", AnnotationRelationship: "Database.Example.com/pg"}, `relationship: entry "Database.Example.com/pg": group:`},
		{map[string]string{AnnotationConsumes: "db", AnnotationRelationship: "Service/pg, Service/pg"}, `relationship: entry "Service/pg": given twice`},
		{map[string]string{AnnotationConsumes: "db", AnnotationRelationship: "Service/PG"}, `relationship: entry "Service/PG": name:`},
		{map[string]string{AnnotationConsumes: "db", AnnotationRelationship: "pg", AnnotationConfig: "cache=x"}, `config: entry "cache=x": interface "cache" is not among the object's (db)`},
		{map[string]string{AnnotationConsumes: "db", AnnotationRelationship: "pg", AnnotationConfig: "db"}, `config: entry "db": want interface=value`},
		{map[string]string{AnnotationConsumes: "db", AnnotationRelationship: "pg", AnnotationConfig: "db=a,db=b"}, `config: entry "db=b": interface "db" is given twice`},
		{map[string]string{AnnotationConsumes: "db", AnnotationRelationship: "pg", AnnotationConfig: "db=A_B"}, `config: entry "db=A_B": the config's name`},
		{map[string]string{AnnotationConsumes: "db", AnnotationRelationship: "pg", AnnotationPin: "db=0"}, `pin: entry "db=0": the revision must be a positive integer`},
		{map[string]string{AnnotationConsumes: "db", AnnotationRelationship: "pg", AnnotationPin: "db=x"}, `pin: entry "db=x"`},
		{map[string]string{AnnotationConsumes: strings.Repeat("a,", 64) + "b", AnnotationRelationship: "pg"}, "65 entries, at most 64"},
	}
	for _, c := range bad {
		_, err := ParseConsumer("shop", c.ann)
		var ae *AnnotationError
		if !errors.As(err, &ae) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: got %v, want an *AnnotationError containing %q", c.ann, err, c.want)
		}
	}
}

func TestParseProvider(t *testing.T) {
	got, err := ParseProvider(map[string]string{AnnotationProvides: "db,admin", AnnotationConfig: "db=pg",
		AnnotationAllowNamespaces: "shop, billing", AnnotationProtect: "true"})
	want := ProviderAnnotations{Interfaces: []string{"db", "admin"}, Configs: map[string]string{"db": "pg"},
		AllowNamespaces: []string{"shop", "billing"}, Protect: true}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, %v; want %+v", got, err, want)
	}
	if got, err := ParseProvider(map[string]string{AnnotationProvides: "db", AnnotationAllowNamespaces: " * "}); err != nil || !got.AllowAll || got.AllowNamespaces != nil {
		t.Errorf("allow-namespaces *: %+v, %v", got, err)
	}
	bad := []struct {
		ann  map[string]string
		want string
	}{
		{map[string]string{AnnotationProvides: "db", AnnotationAllowNamespaces: "shop,*"}, `allow-namespaces: entry "*": not a namespace name (or "*" alone)`},
		{map[string]string{AnnotationProvides: "db", AnnotationProtect: "yes please"}, `protect: "yes please" is not true or false`},
		{map[string]string{AnnotationProvides: "db", AnnotationConfig: "web=x"}, `interface "web" is not among the object's (db)`},
		{map[string]string{AnnotationProvides: " "}, "provides: empty"},
	}
	for _, c := range bad {
		_, err := ParseProvider(c.ann)
		var ae *AnnotationError
		if !errors.As(err, &ae) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: got %v, want an *AnnotationError containing %q", c.ann, err, c.want)
		}
	}
}

// FuzzParse: any annotation values parse or fail with an *AnnotationError
// (never a panic), and what parses is well formed.
func FuzzParse(f *testing.F) {
	f.Add("db,cache", "pg,infra/redis", "db=pg", "db=3", "shop,*", "true")
	f.Add("", ",", "=", "db==", "*", "")
	f.Add("db", "Database.example.com/pg, infra/Service/pg, a/B/c/d", "db=x", "db=1", "", "false")
	f.Fuzz(func(t *testing.T, ifaces, rel, config, pin, allow, protect string) {
		c, err := ParseConsumer("shop", map[string]string{AnnotationConsumes: ifaces, AnnotationRelationship: rel, AnnotationConfig: config, AnnotationPin: pin})
		var ae *AnnotationError
		if err != nil && !errors.As(err, &ae) {
			t.Fatalf("consumer: %T %v", err, err)
		}
		if err == nil {
			if len(c.Interfaces) == 0 || len(c.Requests) == 0 {
				t.Fatalf("consumer without interfaces or requests: %+v", c)
			}
			for _, r := range c.Requests {
				if r.Name == "" || r.Namespace == "" || (r.Kind != "" && !isKind(r.Kind)) || strings.Contains(r.Key()+r.Kind, " ") {
					t.Fatalf("request %+v", r)
				}
			}
			for iface, n := range c.Pins {
				if n < 1 || !slices.Contains(c.Interfaces, iface) {
					t.Fatalf("pin %s=%d", iface, n)
				}
			}
		}
		p, err := ParseProvider(map[string]string{AnnotationProvides: ifaces, AnnotationConfig: config, AnnotationAllowNamespaces: allow, AnnotationProtect: protect})
		if err != nil && !errors.As(err, &ae) {
			t.Fatalf("provider: %T %v", err, err)
		}
		if err == nil && p.AllowAll && len(p.AllowNamespaces) > 0 {
			t.Fatalf("both * and namespaces: %+v", p)
		}
	})
}
