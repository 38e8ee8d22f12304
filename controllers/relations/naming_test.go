package relations

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// TestRelationshipName: names are DNS labels, one per consumer and
// interface however their parts split at a "-", and a name that was
// never ambiguous (an interface without a "-", or one too long) is the
// one it always was.
func TestRelationshipName(t *testing.T) {
	long := strings.Repeat("a", 60)
	for _, c := range []struct{ kind, consumer, iface, want string }{
		{"Deployment", "web", "db", "deployment-web-db"},
		{"StatefulSet", "web-db", "main", "statefulset-web-db-main"},
		{"Deployment", long, "db", "deployment-" + long[:39] + "-734477d057a2"},
	} {
		if got := relationshipName(c.kind, c.consumer, c.iface); got != c.want {
			t.Errorf("%s %s %s: %q, want %q as before", c.kind, c.consumer, c.iface, got, c.want)
		}
	}
	seen := map[string]string{}
	for _, p := range [][3]string{
		{"Deployment", "web", "db-main"}, {"Deployment", "web-db", "main"}, {"Deployment", "web-db-main", "x"},
		{"Deployment", "w", "eb-db-main"}, {"Deployment", long, "db-main"}, {"Deployment", long + "-db", "main"},
		{"Deployment", long, "db"}, {"Deployment", long + "-d", "b"}, {"DaemonSet", "web", "db-main"},
	} {
		n := relationshipName(p[0], p[1], p[2])
		if errs := validation.IsDNS1123Label(n); len(errs) > 0 {
			t.Errorf("%v: %q is no DNS label: %v", p, n, errs)
		}
		if other, ok := seen[n]; ok {
			t.Errorf("%v and %s are both named %s", p, other, n)
		}
		seen[n] = strings.Join(p[:], " ")
	}
}
