package gate_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/cloudtransit/transit/controllers/streams/api/v1alpha1"
	"github.com/cloudtransit/transit/controllers/streams/gate"
	"github.com/cloudtransit/transit/controllers/testenv"
)

// The gate holds until the Topology names the revision active — not
// another revision, not a missing Topology — and opens on the watch event.
func TestWaitActive(t *testing.T) {
	e := testenv.Start(t, testenv.Options{
		CRDDirs:     []string{filepath.Join("..", "config", "crd")},
		AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme},
	})
	ctx := t.Context()
	c, err := gate.Client(e.Config)
	if err != nil {
		t.Fatal(err)
	}
	opened := make(chan error, 1)
	go func() { opened <- gate.WaitActive(ctx, c, "default", "pipe", "pipe-2") }()

	topo := &v1alpha1.Topology{ObjectMeta: metav1.ObjectMeta{Name: "pipe", Namespace: "default"},
		Spec: v1alpha1.TopologySpec{Parts: []v1alpha1.PartRef{{Name: "a", Revision: 1}}}}
	if err := e.Client.Create(ctx, topo); err != nil {
		t.Fatal(err)
	}
	topo.Status.Active, topo.Status.Next = "pipe-1", "pipe-2"
	if err := e.Client.Status().Update(ctx, topo); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-opened:
		t.Fatalf("the gate opened while another revision was active: %v", err)
	case <-time.After(time.Second):
	}
	topo.Status.Active, topo.Status.Next = "pipe-2", ""
	if err := e.Client.Status().Update(ctx, topo); err != nil {
		t.Fatal(err)
	}
	switched := time.Now()
	select {
	case err := <-opened:
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("opened %s after the switch", time.Since(switched))
	case <-time.After(10 * time.Second):
		t.Fatal("the gate did not open after the switch")
	}

	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := gate.WaitActive(short, c, "default", "pipe", "pipe-3"); err == nil {
		t.Fatal("the gate opened for a revision never active")
	}
}
