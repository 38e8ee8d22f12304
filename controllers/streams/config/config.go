// Package config holds the streaming controller's manifests that its tests
// and transit's addon installer share: the CRDs generated from its types
// (`make generate`) and the admission policy keeping part revisions in use.
// A leaf package of embedded files.
package config

import "embed"

// CRDs are the CustomResourceDefinitions, one YAML file each.
//
//go:embed crd/*.yaml
var CRDs embed.FS

// Policy is the ValidatingAdmissionPolicy (and its binding) that refuses
// deleting a TopologyPartRevision a Topology or a running revision uses.
//
//go:embed policy/revisions.yaml
var Policy []byte
