package kubernetes

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cloudtransit/transit/clock/clocktest"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
)

// fakeCluster is an API server for the drain: pods on nodes, evictions a
// budget may refuse, and pods that take a while to terminate once
// evicted (harsher than a real kubelet that is quick).
type fakeCluster struct {
	mu sync.Mutex
	c  *fake.Clientset
	// refuse lists pods whose evictions a budget refuses.
	refuse map[string]bool
	// evicted are the pods evicted, in order.
	evicted []string
	// deleted counts direct deletions of pods: the drain must make none.
	deleted int
	// lingering is how many polls an evicted pod stays, terminating.
	lingering int
	terminate map[string]int
}

func newFakeCluster(t *testing.T, objs ...runtime.Object) *fakeCluster {
	t.Helper()
	f := &fakeCluster{c: fake.NewClientset(objs...), refuse: map[string]bool{}, terminate: map[string]int{}}
	f.c.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		ca, ok := a.(k8stesting.CreateAction)
		if !ok || ca.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		ev, ok := ca.GetObject().(*policyv1.Eviction)
		if !ok {
			return true, nil, errors.New("not an eviction")
		}
		key := ev.Namespace + "/" + ev.Name
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.refuse[key] {
			return true, nil, apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
		}
		f.evicted = append(f.evicted, key)
		f.terminate[key] = f.lingering
		p, err := f.c.Tracker().Get(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, ev.Namespace, ev.Name)
		if err != nil {
			return true, nil, err
		}
		pod := p.(*corev1.Pod).DeepCopy()
		now := metav1.Now()
		pod.DeletionTimestamp = &now
		return true, nil, f.c.Tracker().Update(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, pod, ev.Namespace)
	})
	f.c.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		f.mu.Lock()
		f.deleted++
		f.mu.Unlock()
		return true, nil, errors.New("the drain deleted a pod directly")
	})
	// Terminating pods go after a few lists, as a kubelet would end them.
	f.c.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		for key, left := range f.terminate {
			if left > 0 {
				f.terminate[key] = left - 1
				continue
			}
			ns, name, _ := cutKey(key)
			_ = f.c.Tracker().Delete(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, ns, name)
			delete(f.terminate, key)
		}
		return false, nil, nil
	})
	return f
}

func cutKey(key string) (string, string, bool) {
	i := slices.Index([]byte(key), '/')
	if i < 0 {
		return "", key, false
	}
	return key[:i], key[i+1:], true
}

func kNode(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

func pod(ns, name, node string, owner *metav1.OwnerReference, annotations map[string]string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: annotations}, Spec: corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	if owner != nil {
		p.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	return p
}

func owned(kind string) *metav1.OwnerReference {
	yes := true
	return &metav1.OwnerReference{APIVersion: "apps/v1", Kind: kind, Name: "x", Controller: &yes}
}

// drainDriver is a driver whose API client is f's.
func drainDriver(f *fakeCluster) (*driver, *clocktest.Fake) {
	clk := clocktest.NewFake(time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC))
	d := newDriver(districts.Cluster{ID: "k"}, Options{Clock: clk, PollInterval: time.Second}, nil)
	d.api = &api{c: f.c, master: districts.Node{ID: "k-master-1"}}
	return d, clk
}

func cordoned(t *testing.T, f *fakeCluster, name string) bool {
	t.Helper()
	n, err := f.c.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n.Spec.Unschedulable
}

func TestDrainEvictsAndSkipsDaemonSetsAndMirrors(t *testing.T) {
	f := newFakeCluster(t, kNode("w1"), kNode("w2"),
		pod("default", "web-1", "w1", owned("ReplicaSet"), nil),
		pod("default", "web-2", "w1", owned("ReplicaSet"), nil),
		pod("default", "web-3", "w2", owned("ReplicaSet"), nil),
		pod("kube-flannel", "flannel-x", "w1", owned("DaemonSet"), nil),
		pod("kube-system", "etcd-w1", "w1", nil, map[string]string{corev1.MirrorPodAnnotationKey: "x"}),
		pod("default", "done", "w1", nil, nil))
	// A finished bare pod is evictable: nothing is lost.
	p, _ := f.c.CoreV1().Pods("default").Get(context.Background(), "done", metav1.GetOptions{})
	p.Status.Phase = corev1.PodSucceeded
	_, _ = f.c.CoreV1().Pods("default").UpdateStatus(context.Background(), p, metav1.UpdateOptions{})
	f.lingering = 3
	d, _ := drainDriver(f)
	if err := d.Drain(context.Background(), districts.Node{ID: "w1"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	slices.Sort(f.evicted)
	if want := []string{"default/done", "default/web-1", "default/web-2"}; !slices.Equal(f.evicted, want) {
		t.Errorf("evicted %v, want %v (not the DaemonSet's, the mirror or another node's)", f.evicted, want)
	}
	if !cordoned(t, f, "w1") || cordoned(t, f, "w2") {
		t.Error("w1 must stay cordoned after its drain, and w2 must not be")
	}
	if f.deleted != 0 {
		t.Errorf("%d pods deleted directly", f.deleted)
	}
}

func TestDrainRefusedByBudgetUncordonsAndNamesPods(t *testing.T) {
	f := newFakeCluster(t, kNode("w1"),
		pod("default", "web-1", "w1", owned("ReplicaSet"), nil),
		pod("default", "db-1", "w1", owned("StatefulSet"), nil))
	f.refuse["default/db-1"] = true
	d, clk := drainDriver(f)
	err := d.Drain(context.Background(), districts.Node{ID: "w1"}, 30*time.Second)
	var de *provider.DrainError
	if !errors.As(err, &de) || !errors.Is(err, provider.ErrDrainRefused) {
		t.Fatalf("Drain = %v, want a refused drain", err)
	}
	if !slices.Equal(de.Blocking, []string{"default/db-1"}) {
		t.Errorf("blocking %v, want [default/db-1]", de.Blocking)
	}
	if cordoned(t, f, "w1") {
		t.Error("a refused drain left the node cordoned")
	}
	if got := clk.Now().Sub(time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)); got < 30*time.Second || got > 32*time.Second {
		t.Errorf("the drain gave up after %s, want the 30s timeout", got)
	}
	if !slices.Contains(f.evicted, "default/web-1") {
		t.Error("the pod the budget allowed was not evicted")
	}
}

func TestDrainRefusesBarePods(t *testing.T) {
	f := newFakeCluster(t, kNode("w1"), pod("default", "bare", "w1", nil, nil))
	d, clk := drainDriver(f)
	start := clk.Now()
	err := d.Drain(context.Background(), districts.Node{ID: "w1"}, time.Hour)
	var de *provider.DrainError
	if !errors.As(err, &de) || !slices.Equal(de.Blocking, []string{"default/bare"}) {
		t.Fatalf("Drain = %v, want refused naming default/bare", err)
	}
	if len(f.evicted) != 0 || f.deleted != 0 {
		t.Errorf("a pod no controller would recreate was evicted (%v) or deleted (%d)", f.evicted, f.deleted)
	}
	if clk.Now().Sub(start) > time.Second {
		t.Error("the drain waited for a pod that cannot go")
	}
	if cordoned(t, f, "w1") {
		t.Error("the node stayed cordoned")
	}
}

func TestDrainCancelledUncordons(t *testing.T) {
	f := newFakeCluster(t, kNode("w1"), pod("default", "db-1", "w1", owned("StatefulSet"), nil))
	f.refuse["default/db-1"] = true
	d, clk := drainDriver(f)
	ctx, cancel := context.WithCancel(context.Background())
	clk.OnSleep = func(ctx context.Context, _ time.Duration) error { cancel(); return ctx.Err() }
	if err := d.Drain(ctx, districts.Node{ID: "w1"}, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Drain = %v, want cancelled", err)
	}
	if cordoned(t, f, "w1") {
		t.Error("a cancelled drain left the node cordoned")
	}
}
