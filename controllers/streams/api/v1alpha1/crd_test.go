package v1alpha1_test

import (
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cloudtransit/transit/controllers/streams/api/v1alpha1"
	"github.com/cloudtransit/transit/controllers/testenv"
)

// TestCRDValidation: the generated CRDs, served by the real API server,
// refuse what no composition could use, naming the field, default what a
// user may leave out, and keep part revisions immutable.
func TestCRDValidation(t *testing.T) {
	e := testenv.Start(t, testenv.Options{
		CRDDirs:     []string{filepath.Join("..", "..", "config", "crd")},
		AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme},
	})
	ctx := t.Context()
	meta := func(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: name, Namespace: "default"} }
	src := map[string]v1alpha1.Endpoint{"orders": {Topic: "orders"}}
	i32 := func(v int32) *int32 { return &v }

	refused := []struct {
		name string
		obj  client.Object
		want string
	}{
		{"an empty part", &v1alpha1.TopologyPart{ObjectMeta: meta("empty")}, "a part has at least one source, sink or processor"},
		{"a node name that is no DNS label", &v1alpha1.TopologyPart{ObjectMeta: meta("upper"), Spec: v1alpha1.PartSpec{
			Sources: map[string]v1alpha1.Endpoint{"Orders": {Topic: "orders"}}}}, "spec.sources: Invalid value"},
		{"an illegal topic", &v1alpha1.TopologyPart{ObjectMeta: meta("topic"), Spec: v1alpha1.PartSpec{
			Sources: map[string]v1alpha1.Endpoint{"orders": {Topic: "orders/eu"}}}}, "spec.sources.orders.topic"},
		{"a processor without an image", &v1alpha1.TopologyPart{ObjectMeta: meta("noimage"), Spec: v1alpha1.PartSpec{
			Sources: src, Processors: map[string]v1alpha1.Processor{"p": {InputFrom: "orders"}}}}, "spec.processors.p.image"},
		{"an unknown delivery", &v1alpha1.Topology{ObjectMeta: meta("delivery"), Spec: v1alpha1.TopologySpec{
			Parts: []v1alpha1.PartRef{{Name: "a", Revision: 1}}, Delivery: "atMostOnce"}}, `spec.delivery: Unsupported value: "atMostOnce"`},
		{"no parts", &v1alpha1.Topology{ObjectMeta: meta("noparts"), Spec: v1alpha1.TopologySpec{Parts: []v1alpha1.PartRef{}}}, "spec.parts"},
		{"one part twice", &v1alpha1.Topology{ObjectMeta: meta("twice"), Spec: v1alpha1.TopologySpec{
			Parts: []v1alpha1.PartRef{{Name: "a", Revision: 1}, {Name: "a", Revision: 2}}}}, "spec.parts[1]: Duplicate value"},
		{"minScale above maxScale", &v1alpha1.Topology{ObjectMeta: meta("scale"), Spec: v1alpha1.TopologySpec{
			Parts: []v1alpha1.PartRef{{Name: "a", Revision: 1}}, DefaultScale: v1alpha1.Scale{MinScale: i32(5), MaxScale: i32(2)}}},
			"minScale is at most maxScale"},
	}
	for _, c := range refused {
		err := e.Client.Create(ctx, c.obj)
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: create gave %v, want Invalid naming %q", c.name, err, c.want)
		}
	}

	topo := &v1alpha1.Topology{ObjectMeta: meta("pipe"), Spec: v1alpha1.TopologySpec{Parts: []v1alpha1.PartRef{{Name: "a", Revision: 1}}}}
	if err := e.Client.Create(ctx, topo); err != nil {
		t.Fatal(err)
	}
	s := topo.Spec
	if s.Delivery != v1alpha1.AtLeastOnce || s.Upgrade != v1alpha1.Standby || s.DefaultScale.MinScale == nil || *s.DefaultScale.MinScale != 1 ||
		s.DefaultScale.MaxScale == nil || *s.DefaultScale.MaxScale != 4 {
		t.Errorf("defaults: %+v", s)
	}

	rev := &v1alpha1.TopologyPartRevision{ObjectMeta: meta("a-1"), Spec: v1alpha1.TopologyPartRevisionSpec{
		Part: "a", Revision: 1, Hash: "h", Spec: v1alpha1.PartSpec{Sources: src}}}
	if err := e.Client.Create(ctx, rev); err != nil {
		t.Fatal(err)
	}
	rev.Spec.Spec.Sources = map[string]v1alpha1.Endpoint{"orders": {Topic: "other"}}
	if err := e.Client.Update(ctx, rev); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "a part revision is immutable") {
		t.Errorf("editing a part revision: %v", err)
	}
}
