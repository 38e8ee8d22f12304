package relations

import (
	"encoding/json"
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
	got := templatePatch([]string{"app", "log"}, []Injection{
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
	if len(templatePatch([]string{"app"}, nil)) != 0 {
		t.Error("no injection, yet a patch")
	}
}

// TestConflict: a variable or mount only the user set is a conflict; one
// the controller applied itself is not.
func TestConflict(t *testing.T) {
	d := &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Name:         "app",
		Env:          []corev1.EnvVar{{Name: "DB", Value: "mine"}, {Name: "CACHE"}},
		VolumeMounts: []corev1.VolumeMount{{Name: "cfg", MountPath: "/etc/db"}},
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
	} {
		got, err := conflict(d, Injection{Keys: c.keys})
		if err != nil || got != c.want {
			t.Errorf("%+v: %q, %v; want %q", c.keys, got, err, c.want)
		}
	}
}
