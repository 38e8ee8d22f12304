// Package config holds the relationship controller's manifests that are
// generated from its types (the CRDs, `make generate`), for transit's
// addon installer: a leaf package of embedded files.
package config

import "embed"

// CRDs are the CustomResourceDefinitions, one YAML file each.
//
//go:embed crd/*.yaml
var CRDs embed.FS
