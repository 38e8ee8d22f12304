// Package gate holds a source reader's sidecar until its revision is the
// Topology's active one: a standby revision starts whole, its readers of
// the sources in their groups already, and they read only once the
// controller switched (after the old readers are gone and their groups
// empty), from where the controller recorded in the revision. It watches
// the Topology, so the wait ends within a watch event of the switch.
package gate

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cloudtransit/transit/controllers/streams/api/v1alpha1"
)

// Client is a client for the Topology watch, from cfg.
func Client(cfg *rest.Config) (client.WithWatch, error) {
	sch := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(sch); err != nil {
		return nil, err
	}
	return client.NewWithWatch(cfg, client.Options{Scheme: sch})
}

// WaitActive returns once the Topology's status names revision active.
// Errors of the API server are retried until ctx ends.
func WaitActive(ctx context.Context, c client.WithWatch, namespace, topology, revision string) error {
	opts := []client.ListOption{client.InNamespace(namespace), client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("metadata.name", topology)}}
	for {
		active, rv, err := current(ctx, c, opts)
		if err == nil && active == revision {
			return nil
		}
		if err == nil {
			err = watchFor(ctx, c, append(opts, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv}}), revision)
			if err == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for revision %s of topology %s/%s to be active: %w", revision, namespace, topology, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

func current(ctx context.Context, c client.WithWatch, opts []client.ListOption) (string, string, error) {
	var list v1alpha1.TopologyList
	if err := c.List(ctx, &list, opts...); err != nil {
		return "", "", err
	}
	if len(list.Items) == 0 {
		return "", list.ResourceVersion, nil
	}
	return list.Items[0].Status.Active, list.ResourceVersion, nil
}

// watchFor watches until the revision is active (nil) or the watch ends
// (an error: list again).
func watchFor(ctx context.Context, c client.WithWatch, opts []client.ListOption, revision string) error {
	w, err := c.Watch(ctx, &v1alpha1.TopologyList{}, opts...)
	if err != nil {
		return err
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		switch ev.Type {
		case watch.Added, watch.Modified:
			if t, ok := ev.Object.(*v1alpha1.Topology); ok && t.Status.Active == revision {
				return nil
			}
		case watch.Error:
			return fmt.Errorf("watch: %v", ev.Object)
		}
	}
	return fmt.Errorf("watch ended")
}

// StartOffsets is where the revision's reader in group begins each
// partition of topic the group never committed, as the controller recorded
// in the revision before it made it active; nil if it recorded none for
// the group. Errors of the API server are retried until ctx ends.
func StartOffsets(ctx context.Context, c client.Client, namespace, revision, group, topic string) (map[int32]int64, error) {
	for {
		var rev v1alpha1.TopologyRevision
		err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: revision}, &rev)
		if err == nil {
			return rev.Status.StartOf(group, topic), nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("reading the start offsets of revision %s/%s: %w (last: %w)", namespace, revision, ctx.Err(), err)
		case <-time.After(time.Second):
		}
	}
}
