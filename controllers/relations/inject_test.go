package relations

import (
	"encoding/json"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cloudtransit/transit/controllers/relations/api/v1alpha1"
)

// TestTemplatePatch: env variables into every container, files mounted
// by directory (never subPath: InPlace must reach them), each
// relationship's revision on the template, and nothing for nothing.
func TestTemplatePatch(t *testing.T) {
	got := templatePatch([]patchContainer{{name: "app"}, {name: "log"}}, []Injection{
		{Relationship: "deployment-web-db", Revision: 4, Secret: "deployment-web-db-r4", Keys: []v1alpha1.KeyInjection{
			{Key: "host", Env: "DB_HOST"}, {Key: "password", File: "/etc/db/password"}, {Key: "ca", File: "/etc/db/ca.crt"}, {Key: "cfg", File: "/etc/app/db.conf"},
		}},
		{Relationship: "deployment-web-cache", Revision: 1, Secret: "deployment-web-cache-r1", Keys: DefaultKeys("cache-main")},
	})
	var tpl corev1.PodTemplateSpec
	data, _ := json.Marshal(got)
	if err := json.Unmarshal(data, &tpl); err != nil {
		t.Fatal(err)
	}
	if tpl.Annotations[RevisionAnnotationPrefix+"deployment-web-db"] != "4" || tpl.Annotations[RevisionAnnotationPrefix+"deployment-web-cache"] != "1" {
		t.Errorf("annotations %v", tpl.Annotations)
	}
	if len(tpl.Spec.Containers) != 2 {
		t.Fatalf("containers %+v", tpl.Spec.Containers)
	}
	for _, c := range tpl.Spec.Containers {
		if len(c.Env) != 2 || c.Env[0].Name != "CACHE_MAIN" || c.Env[0].ValueFrom.SecretKeyRef.Name != "deployment-web-cache-r1" ||
			c.Env[1].Name != "DB_HOST" || c.Env[1].ValueFrom.SecretKeyRef.Key != "host" {
			t.Errorf("%s env %+v", c.Name, c.Env)
		}
		if len(c.VolumeMounts) != 2 || c.VolumeMounts[0].MountPath != "/etc/app" || c.VolumeMounts[1].MountPath != "/etc/db" ||
			c.VolumeMounts[0].SubPath != "" || !c.VolumeMounts[0].ReadOnly {
			t.Errorf("%s mounts %+v", c.Name, c.VolumeMounts)
		}
	}
	if len(tpl.Spec.Volumes) != 2 || tpl.Spec.Volumes[1].Secret.SecretName != "deployment-web-db-r4" ||
		len(tpl.Spec.Volumes[1].Secret.Items) != 2 || tpl.Spec.Volumes[1].Secret.Items[0].Path != "password" {
		t.Errorf("volumes %+v", tpl.Spec.Volumes)
	}
	if len(templatePatch([]patchContainer{{name: "app"}}, nil)) != 0 {
		t.Error("no injection, yet a patch")
	}
}

// TestBindingProjection checks the Service Binding specification's rules
// for a workload: each binding is a directory $SERVICE_BINDING_ROOT/<name>
// holding its entries, `type` and `provider`, mounted read-only;
// SERVICE_BINDING_ROOT is set to /bindings in a container that has none,
// and a container's own is honoured, never overwritten.
func TestBindingProjection(t *testing.T) {
	tpl := &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{
		{Name: "app"},
		{Name: "custom", Env: []corev1.EnvVar{{Name: BindingRootEnv, Value: "/var/bindings"}}},
	}}}
	injectInto(tpl, []Injection{{Relationship: "deployment-web-db", Interface: "db", Revision: 2, Secret: "deployment-web-db-r2",
		Keys: []v1alpha1.KeyInjection{{Key: "host", Binding: "host"}, {Key: "password", Binding: "password"}}}})

	if len(tpl.Spec.Volumes) != 1 {
		t.Fatalf("volumes %+v, want the binding directory's", tpl.Spec.Volumes)
	}
	v := tpl.Spec.Volumes[0]
	paths := map[string]string{}
	for _, it := range v.Secret.Items {
		paths[it.Path] = it.Key
	}
	want := map[string]string{"host": "host", "password": "password", "type": bindingTypeKey, "provider": bindingProviderKey}
	if v.Secret.SecretName != "deployment-web-db-r2" || len(paths) != len(want) {
		t.Errorf("binding volume %+v, want entries %v", v, want)
	}
	for p, k := range want {
		if paths[p] != k {
			t.Errorf("entry %s comes from key %q, want %q", p, paths[p], k)
		}
	}
	for _, tc := range []struct{ container, root string }{{"app", "/bindings"}, {"custom", "/var/bindings"}} {
		c := tpl.Spec.Containers[slices.IndexFunc(tpl.Spec.Containers, func(c corev1.Container) bool { return c.Name == tc.container })]
		var roots []string
		for _, e := range c.Env {
			if e.Name == BindingRootEnv {
				roots = append(roots, e.Value)
			}
		}
		if len(roots) != 1 || roots[0] != tc.root {
			t.Errorf("%s: SERVICE_BINDING_ROOT %v, want exactly %s", tc.container, roots, tc.root)
		}
		if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != tc.root+"/db" || !c.VolumeMounts[0].ReadOnly || c.VolumeMounts[0].Name != v.Name {
			t.Errorf("%s: mounts %+v, want %s/db read-only", tc.container, c.VolumeMounts, tc.root)
		}
	}
}

// TestConflict: a variable or mount only the user set is a conflict; one
// the controller applied itself is not.
func TestConflict(t *testing.T) {
	d := &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Name:         "app",
		Env:          []corev1.EnvVar{{Name: "DB", Value: "mine"}, {Name: "CACHE"}},
		VolumeMounts: []corev1.VolumeMount{{Name: "cfg", MountPath: "/etc/db"}, {Name: "mine", MountPath: "/bindings/db"}},
	}}}}}}
	d.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: FieldManager, Operation: metav1.ManagedFieldsOperationApply,
		FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:template":{"f:spec":{"f:containers":{"k:{\"name\":\"app\"}":{".":{},"f:name":{},"f:env":{"k:{\"name\":\"CACHE\"}":{".":{},"f:name":{}}}}}}}}}`)}}}
	for _, c := range []struct {
		keys []v1alpha1.KeyInjection
		want string
	}{
		{[]v1alpha1.KeyInjection{{Key: "db", Env: "DB"}}, "container app sets its own variable DB"},
		{[]v1alpha1.KeyInjection{{Key: "cache", Env: "CACHE"}}, ""},
		{[]v1alpha1.KeyInjection{{Key: "x", File: "/etc/db/x"}}, "container app mounts a volume of its own at /etc/db"},
		{[]v1alpha1.KeyInjection{{Key: "x", File: "/etc/other/x"}, {Key: "y", Env: "Y"}}, ""},
		{[]v1alpha1.KeyInjection{{Key: "x", Binding: "x"}}, "container app mounts a volume of its own at /bindings/db, the binding directory"},
	} {
		owned, err := ownedFields(d)
		if err != nil {
			t.Fatal(err)
		}
		if got := conflict(d, owned, Injection{Interface: "db", Keys: c.keys}); got != c.want {
			t.Errorf("%+v: %q; want %q", c.keys, got, c.want)
		}
	}
}
