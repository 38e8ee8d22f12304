package relations_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cloudtransit/transit/controllers/relations"
	"github.com/cloudtransit/transit/controllers/relations/api/v1alpha1"
)

// faultyAPI refuses every third write unsent, as a loaded API server
// under contention does: an update with 409 Conflict (another writer was
// first), a create or patch with 429 Too Many Requests (client-go waits
// Retry-After and sends it again). Every request is delayed.
type faultyAPI struct {
	rt     http.RoundTripper
	writes atomic.Int64
	delay  time.Duration
}

func (f *faultyAPI) RoundTrip(r *http.Request) (*http.Response, error) {
	time.Sleep(f.delay)
	if r.Method != http.MethodGet && f.writes.Add(1)%3 == 0 {
		code, reason, header := http.StatusConflict, "Conflict", http.Header{"Content-Type": {"application/json"}}
		if r.Method != http.MethodPut {
			code, reason = http.StatusTooManyRequests, "TooManyRequests"
			header.Set("Retry-After", "1")
		}
		body := fmt.Sprintf(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":%q,"code":%d,"message":"injected"}`, reason, code)
		return &http.Response{StatusCode: code, Header: header, Body: io.NopCloser(bytes.NewBufferString(body)), Request: r}, nil
	}
	return f.rt.RoundTrip(r)
}

// TestFaults: with a third of its writes refused (409) and every request
// slowed, the controller converges; killed while a change propagates, a
// new one finishes it, and no relationship has a duplicate revision.
func TestFaults(t *testing.T) {
	e, ns := startPlainEnv(t)
	ctx := t.Context()
	c := e.Client
	faulty := *e
	faulty.Config = rest.CopyConfig(e.Config)
	faults := &faultyAPI{delay: 20 * time.Millisecond}
	faulty.Config.Wrap(func(rt http.RoundTripper) http.RoundTripper { faults.rt = rt; return faults })
	stop := startController(t, &faulty)

	const n = 20
	createAll(t, c, externalService(ns, "pg", "db1.example.com"))
	for i := range n {
		createAll(t, c, deployment(ns, fmt.Sprintf("c%02d", i), map[string]string{relations.AnnotationConsumes: "db", relations.AnnotationRelationship: "pg"}))
	}
	atRevision := func(revision string) int {
		var list appsv1.DeploymentList
		if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		at := 0
		for _, d := range list.Items {
			if d.Spec.Template.Annotations[relations.RevisionAnnotationPrefix+"deployment-"+d.Name+"-db"] == revision {
				at++
			}
		}
		return at
	}
	eventually(t, "every consumer at revision 1", func() (bool, string) { at := atRevision("1"); return at == n, strconv.Itoa(at) })
	if faults.writes.Load() < 3 {
		t.Fatalf("only %d writes went through the faulty API", faults.writes.Load())
	}

	// Kill the controller once a few consumers took the change.
	setHost(t, c, ns, "pg", "db2.example.com")
	eventually(t, "a few consumers at revision 2", func() (bool, string) { at := atRevision("2"); return at >= 3, strconv.Itoa(at) })
	stop()
	t.Logf("killed with %d of %d consumers at revision 2", atRevision("2"), n)
	startController(t, e)
	eventually(t, "every consumer at revision 2", func() (bool, string) { at := atRevision("2"); return at == n, strconv.Itoa(at) })

	var rels v1alpha1.RelationshipList
	if err := c.List(ctx, &rels, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(rels.Items) != n {
		t.Errorf("%d Relationships, want %d", len(rels.Items), n)
	}
	for _, rel := range rels.Items {
		if h := rel.Status.History; rel.Status.Revision != 2 || len(h) != 2 || h[0].Revision != 2 || h[1].Revision != 1 {
			t.Errorf("%s: revision %d, history %+v; want 2 then 1", rel.Name, rel.Status.Revision, h)
		}
	}
	var secrets corev1.SecretList
	if err := c.List(ctx, &secrets, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(secrets.Items) != 2*n {
		var names []string
		for _, s := range secrets.Items {
			names = append(names, s.Name)
		}
		t.Errorf("%d values Secrets, want %d (r1 and r2 of each): %v", len(secrets.Items), 2*n, names)
	}
}
