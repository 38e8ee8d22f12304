// Package config holds the relationship controller's manifests that its
// tests and transit's addon installer share: the CRDs generated from its
// types (`make generate`) and the admission policy for its annotations. A
// leaf package of embedded files.
package config

import "embed"

// CRDs are the CustomResourceDefinitions, one YAML file each.
//
//go:embed crd/*.yaml
var CRDs embed.FS

// Policy is the ValidatingAdmissionPolicy (and its binding) that refuses
// malformed annotations at admission.
//
//go:embed policy/annotations.yaml
var Policy []byte
